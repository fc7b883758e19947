//! Open things counted by key (connections by client address, event streams by run, address
//! and tenant), each counted while its [`Slot`] lives, so a count cannot leak when a handler
//! or a connection ends in any way.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// How many things are open under each key.
#[derive(Debug)]
pub struct Tally<K: Hash + Eq + Clone>(Mutex<HashMap<K, usize>>);

impl<K: Hash + Eq + Clone> Default for Tally<K> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

/// One open thing under a key; dropping it closes it.
#[derive(Debug)]
pub struct Slot<K: Hash + Eq + Clone> {
    tally: Arc<Tally<K>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Tally<K> {
    /// A slot under `key`, unless `max` are open under it already.
    pub fn take(self: &Arc<Self>, key: K, max: usize) -> Option<Slot<K>> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(key.clone()).or_default();
        if *count >= max {
            if *count == 0 {
                counts.remove(&key);
            }
            return None;
        }
        *count += 1;
        Some(Slot {
            tally: self.clone(),
            key,
        })
    }

    /// How many are open under `key`.
    #[cfg(test)]
    pub(crate) fn count(&self, key: &K) -> usize {
        let counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(key).copied().unwrap_or(0)
    }
}

impl<K: Hash + Eq + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut counts = self.tally.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_max_and_a_dropped_slot_frees_its_place() {
        let tally = Arc::new(Tally::<&str>::default());
        let first = tally.take("a", 2).unwrap();
        let second = tally.take("a", 2).unwrap();
        assert!(tally.take("a", 2).is_none());
        assert!(
            tally.take("b", 2).is_some(),
            "another key has its own count"
        );
        drop(first);
        assert_eq!(tally.count(&"a"), 1);
        let third = tally.take("a", 2).unwrap();
        drop((second, third));
        assert_eq!(tally.count(&"a"), 0);
        assert!(tally.0.lock().unwrap().is_empty(), "no key is kept at zero");
        assert!(tally.take("c", 0).is_none());
        assert!(tally.0.lock().unwrap().is_empty());
    }
}
