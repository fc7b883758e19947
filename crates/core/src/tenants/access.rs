//! A presented key to the caller it stands for.
//!
//! A key's row is read from the store at most once a second per key and kept in memory in
//! between, so a busy client costs no database read per request, and a key revoked or expired
//! on any node stops opening anything within about a second everywhere. Whether any key is in
//! force (then every request needs one) is read the same way. A key's last use is written at
//! most once a minute.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Caller, key_format};
use crate::clock::Timestamp;
use crate::store::{ApiKey, Store};

/// How long a key read from the store is believed.
const FRESH: Duration = Duration::from_secs(1);
/// How often a key's last use is written.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Keys kept in memory at most (past it, the memory starts again).
const KEPT: usize = 10_000;

/// What a presented credential turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// A key in force.
    Key(Caller),
    /// A key's form, but no key in force (unknown, mistyped, revoked or expired).
    Refused,
    /// Not a key's form (an environment token, perhaps).
    NotAKey,
}

/// The keys as the service last read them.
#[derive(Debug)]
pub struct Access {
    store: Store,
    /// By hash: the row (or none) and when it was read.
    known: Mutex<HashMap<String, (Instant, Option<ApiKey>)>>,
    /// Whether keys are in force, and when that was read.
    in_force: Mutex<Option<(Instant, bool)>>,
    /// When each key's last use was written.
    touched: Mutex<HashMap<String, Instant>>,
}

impl Access {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            known: Mutex::default(),
            in_force: Mutex::default(),
            touched: Mutex::default(),
        }
    }

    /// The caller `credential` stands for, if it has a key's form.
    pub async fn check(&self, credential: &str) -> anyhow::Result<Presented> {
        if !key_format::is_key(credential) {
            return Ok(Presented::NotAKey);
        }
        let hash = key_format::hash(credential);
        let kept = self
            .known
            .lock()
            .unwrap()
            .get(&hash)
            .filter(|(read, _)| read.elapsed() < FRESH)
            .map(|(_, key)| key.clone());
        let key = match kept {
            Some(key) => key,
            None => {
                let key = self.store.key_by_hash(&hash).await?;
                let mut known = self.known.lock().unwrap();
                if known.len() >= KEPT {
                    known.clear();
                }
                known.insert(hash, (Instant::now(), key.clone()));
                key
            }
        };
        let now = Timestamp::now();
        let Some(key) = key.filter(|k| k.is_valid_at(now)) else {
            return Ok(Presented::Refused);
        };
        self.touch(&key.key_id, now);
        Ok(Presented::Key(Caller {
            tenant_id: key.tenant_id.into(),
            role: key.role,
            key_id: Some(key.key_id.into()),
        }))
    }

    /// Whether any key is in force: then a request without a credential is refused. Read
    /// from the store at most about once a second (requests that find the answer stale at
    /// the same moment may each read it).
    pub async fn keys_in_force(&self) -> anyhow::Result<bool> {
        let kept = *self.in_force.lock().unwrap();
        if let Some((read, any)) = kept
            && read.elapsed() < FRESH
        {
            return Ok(any);
        }
        match self.store.keys_in_force(Timestamp::now()).await {
            Ok(any) => {
                *self.in_force.lock().unwrap() = Some((Instant::now(), any));
                Ok(any)
            }
            // The store away for a moment: what was last read stands.
            Err(e) => match kept {
                Some((_, any)) => {
                    tracing::warn!("reading whether keys are in force failed: {e:#}");
                    Ok(any)
                }
                None => Err(e),
            },
        }
    }

    /// Forgets what was read, after this node changed a key.
    pub fn forget(&self) {
        self.known.lock().unwrap().clear();
        *self.in_force.lock().unwrap() = None;
    }

    fn touch(&self, key_id: &str, now: Timestamp) {
        {
            let mut touched = self.touched.lock().unwrap();
            if touched
                .get(key_id)
                .is_some_and(|at| at.elapsed() < TOUCH_EVERY)
            {
                return;
            }
            if touched.len() >= KEPT {
                touched.clear();
            }
            touched.insert(key_id.to_owned(), Instant::now());
        }
        let store = self.store.clone();
        let key_id = key_id.to_owned();
        tokio::spawn(async move {
            if let Err(e) = store.touch_key(&key_id, now).await {
                tracing::warn!(key_id, "recording a key's last use failed: {e:#}");
            }
        });
    }
}
