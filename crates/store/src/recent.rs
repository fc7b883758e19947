//! Requests and runs as last read, valid until the next write.
//!
//! Clients poll a run's status many times a second while it changes a few times in its life,
//! so `Store::request` and `Store::run` answer from memory when nothing was written since the
//! value was read. Every write method of the store holds a [`Writing`] guard (inside its
//! writer's turn, `Store::writing`), which moves the write generation on when it ends
//! (committed or not); an entry is served only while the
//! generation it was read at is current, and a read that overlapped a write is not kept. Any
//! write forgets everything, which is coarse but cannot miss a row (a cleanup, a recovery sweep).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries kept per kind before the map starts over.
const CAPACITY: usize = 1024;

/// Values larger than this (roughly, in bytes) are not kept: with [`CAPACITY`] entries the cache
/// stays within a few tens of MiB even when clients send 2 MiB inputs or runs answer large
/// results; such rows are read from the database each time.
pub(super) const MAX_WEIGHT: usize = 16 * 1024;

/// About how many bytes a JSON value holds.
pub(super) fn json_weight(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 8,
        Value::Array(items) => items.iter().map(json_weight).sum::<usize>() + 8,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + json_weight(v))
                .sum::<usize>()
                + 8
        }
    }
}

/// One kind of row, by key, with the generation each was read at.
#[derive(Debug)]
pub(super) struct Recent<T> {
    entries: Mutex<HashMap<String, (u64, T)>>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Recent<T> {
    /// The value under `key`: from memory if it was read since the last write, else from
    /// `read`, then kept (at about `weight(value)` bytes) for the next reader.
    pub(super) async fn read_through(
        &self,
        generation: &Generation,
        key: &str,
        read: impl Future<Output = anyhow::Result<Option<T>>>,
        weight: impl FnOnce(&T) -> usize,
    ) -> anyhow::Result<Option<T>> {
        if let Some(value) = self.get(generation, key) {
            return Ok(Some(value));
        }
        // Sampled before `read` starts: a write that ends while it runs makes it stale.
        let seen = generation.current();
        let value = read.await?;
        if let Some(value) = &value {
            self.put(generation, key, seen, value, weight(value));
        }
        Ok(value)
    }

    /// The value read at the current generation, if any.
    fn get(&self, generation: &Generation, key: &str) -> Option<T> {
        let now = generation.current();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some((seen, value)) if *seen == now => Some(value.clone()),
            _ => None,
        }
    }

    /// Keeps `value` (about `weight` bytes), read after `seen` was sampled, unless a write
    /// began or ended since or it is too large to keep.
    fn put(&self, generation: &Generation, key: &str, seen: u64, value: &T, weight: usize) {
        if weight > MAX_WEIGHT
            || generation.current() != seen
            || generation.writers.load(Ordering::Acquire) != 0
        {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(key.to_owned(), (seen, value.clone()));
    }
}

/// Counts finished writes and the writes under way.
#[derive(Debug, Default)]
pub(super) struct Generation {
    ended: AtomicU64,
    writers: AtomicU64,
}

impl Generation {
    pub(super) fn current(&self) -> u64 {
        self.ended.load(Ordering::Acquire)
    }

    /// Marks a write under way until the guard drops.
    pub(super) fn writing(&self) -> Writing<'_> {
        self.writers.fetch_add(1, Ordering::AcqRel);
        Writing(self)
    }
}

/// A write under way; its end invalidates every entry read before it.
pub(super) struct Writing<'a>(&'a Generation);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::AcqRel);
        self.0.writers.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_forgets_and_an_overlapping_read_is_not_kept() {
        let generation = Generation::default();
        let recent = Recent::<u32>::default();
        let seen = generation.current();
        recent.put(&generation, "a", seen, &1, 8);
        assert_eq!(recent.get(&generation, "a"), Some(1));
        drop(generation.writing());
        assert_eq!(recent.get(&generation, "a"), None);

        // A read that started before a write ended is dropped.
        let seen = generation.current();
        drop(generation.writing());
        recent.put(&generation, "a", seen, &2, 8);
        assert_eq!(recent.get(&generation, "a"), None);

        // So is one that ends while a write is under way.
        let write = generation.writing();
        let seen = generation.current();
        recent.put(&generation, "a", seen, &3, 8);
        assert_eq!(recent.get(&generation, "a"), None);
        drop(write);
        let seen = generation.current();
        recent.put(&generation, "a", seen, &4, 8);
        assert_eq!(recent.get(&generation, "a"), Some(4));
        // Too large to keep.
        let big = serde_json::json!({"text": "x".repeat(MAX_WEIGHT)});
        assert!(json_weight(&big) > MAX_WEIGHT);
        recent.put(&generation, "b", seen, &5, json_weight(&big));
        assert_eq!(recent.get(&generation, "b"), None);
    }
}
