//! Tenants' quotas where runs are admitted: requests created per minute and runs queued at
//! once (429 with `Retry-After` past either), and the bytes of one upload.
//!
//! A tenant's admissions take turns, so the count read and the request written cannot be
//! split by another admission of the same tenant: behind a lock of this process, and among
//! nodes also behind an advisory lock of the database, so the quotas hold exactly across
//! every node. A tenant without these quotas (its own or the operator's defaults) takes
//! no turn and reads nothing. Runs running at once are the queue's to bound (see `queue`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::Jobs;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::store::{ClusterLock, Quotas};

/// How long a tenant's quotas, and its count of the last minute, are believed.
const FRESH: Duration = Duration::from_secs(1);
/// The window of `runs_per_minute`.
const MINUTE: Duration = Duration::from_secs(60);

/// The tenants' quotas as this node last read them, and their admissions' turns.
#[derive(Debug, Default)]
pub struct TenantQuotas {
    /// Each tenant's own quotas, and when they were read.
    own: Mutex<HashMap<String, (Instant, Quotas)>>,
    /// Each tenant's turn among this node's admissions.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each tenant's requests of the last minute: how many, the oldest, when counted.
    windows: Mutex<HashMap<String, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    counted: Instant,
    created: u64,
    oldest: Option<Instant>,
}

/// Where a tenant stands against its `runs_per_minute`: what the rate-limit headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    pub limit: u32,
    pub remaining: u32,
    /// Until the oldest request of the window leaves it (zero when there is none).
    pub reset: Duration,
}

/// A tenant's turn at admission, held until its request is written (nothing is held for a
/// tenant without admission quotas). The cluster's lock is let go before this node's.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    _cluster: Option<ClusterLock>,
    _local: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Jobs {
    /// The quotas that hold for `tenant_id`: its own, each absent one the operator's.
    pub async fn quotas_of(&self, tenant_id: &str) -> Result<Quotas> {
        let defaults = self.config.tenant_quotas;
        let kept = self
            .quotas
            .own
            .lock()
            .unwrap()
            .get(tenant_id)
            .filter(|(read, _)| read.elapsed() < FRESH)
            .map(|(_, quotas)| *quotas);
        let own = match kept {
            Some(own) => own,
            None => {
                let own = self
                    .store
                    .tenant(tenant_id)
                    .await?
                    .map(|t| t.quotas)
                    .unwrap_or_default();
                let mut known = self.quotas.own.lock().unwrap();
                if known.len() >= 10_000 {
                    known.clear();
                }
                known.insert(tenant_id.to_owned(), (Instant::now(), own));
                own
            }
        };
        Ok(Quotas {
            max_running: own.max_running.or(defaults.max_running),
            max_queued: own.max_queued.or(defaults.max_queued),
            runs_per_minute: own.runs_per_minute.or(defaults.runs_per_minute),
            upload_bytes: own.upload_bytes.or(defaults.upload_bytes),
        })
    }

    /// Admits one more of `tenant_id`'s requests (`new_request`) or queued runs: refused
    /// when over its `runs_per_minute` or `max_queued`, else the tenant's turn, to hold until
    /// the request is written.
    pub(crate) async fn tenant_turn(&self, tenant_id: &str, new_request: bool) -> Result<Turn> {
        let quotas = self.quotas_of(tenant_id).await?;
        let rate = quotas.runs_per_minute.filter(|_| new_request);
        if rate.is_none() && quotas.max_queued.is_none() {
            return Ok(Turn::default());
        }
        // This node's admissions of the tenant first take turns here, so that at most one of
        // them holds a database connection waiting for the cluster's lock.
        let lock = self
            .quotas
            .turns
            .lock()
            .unwrap()
            .entry(tenant_id.to_owned())
            .or_default()
            .clone();
        let local = lock.lock_owned().await;
        let cluster = match self.store.cluster() {
            Some(cluster) => Some(cluster.tenant_lock(tenant_id).await?),
            None => None,
        };
        let turn = Turn {
            _cluster: cluster,
            _local: Some(local),
        };
        let now = Timestamp::now();
        let load = self
            .store
            .tenant_load(tenant_id, Timestamp::before(MINUTE))
            .await?;
        let waited = |oldest: Option<Timestamp>| {
            oldest.map_or(Duration::ZERO, |t| {
                MINUTE.saturating_sub(now.duration_since(t))
            })
        };
        self.note_window(tenant_id, load.created, waited(load.oldest));
        if let Some(limit) = rate
            && load.created >= u64::from(limit)
        {
            let retry_after = waited(load.oldest).max(Duration::from_secs(1));
            return Err(Error::TooMany {
                detail: json!({
                    "code": "TENANT_RATE_LIMITED",
                    "message": format!(
                        "This tenant created {limit} requests in the last minute, its \
                         runs_per_minute quota: retry after {} s",
                        retry_after.as_secs()
                    ),
                    "quota": "runs_per_minute",
                    "limit": limit,
                }),
                retry_after,
            });
        }
        if let Some(limit) = quotas.max_queued
            && load.queued >= u64::from(limit)
        {
            return Err(Error::TooMany {
                detail: json!({
                    "code": "TENANT_QUEUE_FULL",
                    "message": format!(
                        "This tenant has {limit} runs queued, its max_queued quota: retry \
                         once some have started"
                    ),
                    "quota": "max_queued",
                    "limit": limit,
                }),
                retry_after: Duration::from_secs(1),
            });
        }
        if new_request {
            // This request counts from now on.
            self.note_window(
                tenant_id,
                load.created + 1,
                waited(load.oldest.or(Some(now))),
            );
        }
        Ok(turn)
    }

    /// Where `tenant_id` stands against its `runs_per_minute` (`None` without one), from its
    /// count of at most a second ago.
    pub async fn rate_state(&self, tenant_id: &str) -> Result<Option<RateState>> {
        let Some(limit) = self.quotas_of(tenant_id).await?.runs_per_minute else {
            return Ok(None);
        };
        let kept = self
            .quotas
            .windows
            .lock()
            .unwrap()
            .get(tenant_id)
            .copied()
            .filter(|w| w.counted.elapsed() < FRESH);
        let window = match kept {
            Some(window) => window,
            None => {
                let now = Timestamp::now();
                let load = self
                    .store
                    .tenant_load(tenant_id, Timestamp::before(MINUTE))
                    .await?;
                let reset = load.oldest.map_or(Duration::ZERO, |t| {
                    MINUTE.saturating_sub(now.duration_since(t))
                });
                self.note_window(tenant_id, load.created, reset)
            }
        };
        let reset = window
            .oldest
            .map_or(Duration::ZERO, |t| MINUTE.saturating_sub(t.elapsed()));
        Ok(Some(RateState {
            limit,
            remaining: u32::try_from(u64::from(limit).saturating_sub(window.created)).unwrap_or(0),
            reset,
        }))
    }

    fn note_window(&self, tenant_id: &str, created: u64, reset: Duration) -> Window {
        let now = Instant::now();
        let window = Window {
            counted: now,
            created,
            oldest: (created > 0).then(|| (now + reset).checked_sub(MINUTE).unwrap_or(now)),
        };
        let mut windows = self.quotas.windows.lock().unwrap();
        if windows.len() >= 10_000 {
            windows.clear();
        }
        windows.insert(tenant_id.to_owned(), window);
        window
    }
}
