//! Tenants' quotas where runs are admitted: requests created per minute and runs queued at
//! once (429 with `Retry-After` past either), and the bytes of one upload.
//!
//! `runs_per_minute` counts each calendar minute (UTC) in one row per tenant, counted up in
//! one statement that refuses past the limit: exact whichever node admits, and as cheap at any
//! rate. A request counted and then refused (a bad input) is taken back. `max_queued` counts
//! the tenant's queued runs (up to the limit) and writes the new one while the tenant's
//! admissions take turns: behind a lock of this process, and among nodes also behind an
//! advisory lock of the database, so it holds exactly across every node. A tenant without
//! these quotas (its own or the operator's defaults) takes no turn and counts nothing. Runs
//! running at once are the queue's to bound (see `queue`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DurationRound as _, Utc};
use serde_json::json;

use super::Jobs;
use crate::error::{Error, Result};
use crate::store::{ClusterLock, Quotas};

/// How long a tenant's quotas, and its count of the minute, are believed.
const FRESH: Duration = Duration::from_secs(1);

/// The tenants' quotas as this node last read them, and their admissions' turns.
#[derive(Debug, Default)]
pub struct TenantQuotas {
    /// Each tenant's own quotas, and when they were read.
    own: Mutex<HashMap<String, (Instant, Quotas)>>,
    /// Each tenant's turn among this node's admissions.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each tenant's requests of a minute: the minute, how many, when counted.
    minutes: Mutex<HashMap<String, (String, u64, Instant)>>,
}

/// Where a tenant stands against its `runs_per_minute`: what the rate-limit headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    pub limit: u32,
    pub remaining: u32,
    /// Until the minute ends and the count starts again.
    pub reset: Duration,
}

/// A tenant's admission: its turn, held until its request is written (nothing for a tenant
/// without `max_queued`; the cluster's lock is let go before this node's), and the minute its
/// request was counted in, to take back if the request is refused.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    _cluster: Option<ClusterLock>,
    _local: Option<tokio::sync::OwnedMutexGuard<()>>,
    counted: Option<(String, String)>,
}

/// The calendar minute (UTC) now, as counted (`YYYY-MM-DDTHH:MM`), and the time left in it.
fn this_minute() -> (String, Duration) {
    let now = Utc::now();
    let start = now
        .duration_trunc(chrono::Duration::minutes(1))
        .unwrap_or(now);
    let left = Duration::from_secs(60).saturating_sub(Duration::from_millis(
        (now - start).num_milliseconds().max(0) as u64,
    ));
    (start.format("%Y-%m-%dT%H:%M").to_string(), left)
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
    /// when over its `runs_per_minute` or `max_queued`, else its turn, to hold until the
    /// request is written and to pass to [`Jobs::admitted`].
    pub(crate) async fn tenant_turn(&self, tenant_id: &str, new_request: bool) -> Result<Turn> {
        let quotas = self.quotas_of(tenant_id).await?;
        let mut turn = Turn::default();
        if let Some(limit) = quotas.max_queued {
            // This node's admissions of the tenant first take turns here, so that at most one
            // of them holds a database connection waiting for the cluster's lock.
            let lock = self
                .quotas
                .turns
                .lock()
                .unwrap()
                .entry(tenant_id.to_owned())
                .or_default()
                .clone();
            turn._local = Some(lock.lock_owned().await);
            if let Some(cluster) = self.store.cluster() {
                turn._cluster = Some(cluster.tenant_lock(tenant_id).await?);
            }
            if self.store.queued_runs(tenant_id, limit).await? >= u64::from(limit) {
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
        }
        if let Some(limit) = quotas.runs_per_minute.filter(|_| new_request) {
            let (minute, left) = this_minute();
            let counted = self.store.count_request(tenant_id, &minute, limit).await?;
            self.note_minute(tenant_id, &minute, counted.unwrap_or(u64::from(limit)));
            if counted.is_none() {
                let retry_after = left.max(Duration::from_secs(1));
                return Err(Error::TooMany {
                    detail: json!({
                        "code": "TENANT_RATE_LIMITED",
                        "message": format!(
                            "This tenant created {limit} requests this minute, its \
                             runs_per_minute quota: retry after {} s",
                            retry_after.as_secs_f64().ceil()
                        ),
                        "quota": "runs_per_minute",
                        "limit": limit,
                    }),
                    retry_after,
                });
            }
            turn.counted = Some((tenant_id.to_owned(), minute));
        }
        Ok(turn)
    }

    /// What an admission under `turn` came to: a refused request is taken back from its
    /// tenant's minute.
    pub(crate) async fn admitted<T>(&self, turn: Turn, outcome: Result<T>) -> Result<T> {
        if outcome.is_err()
            && let Some((tenant_id, minute)) = &turn.counted
        {
            if let Err(e) = self.store.uncount_request(tenant_id, minute).await {
                tracing::warn!(tenant_id, "taking back a refused request's count: {e:#}");
            }
            self.quotas.minutes.lock().unwrap().remove(tenant_id);
        }
        outcome
    }

    /// Where `tenant_id` stands against its `runs_per_minute` (`None` without one), from its
    /// count of at most a second ago.
    pub async fn rate_state(&self, tenant_id: &str) -> Result<Option<RateState>> {
        let Some(limit) = self.quotas_of(tenant_id).await?.runs_per_minute else {
            return Ok(None);
        };
        let (minute, left) = this_minute();
        let kept = self
            .quotas
            .minutes
            .lock()
            .unwrap()
            .get(tenant_id)
            .filter(|(counted, _, at)| *counted == minute && at.elapsed() < FRESH)
            .map(|(_, created, _)| *created);
        let created = match kept {
            Some(created) => created,
            None => {
                let created = self.store.requests_in(tenant_id, &minute).await?;
                self.note_minute(tenant_id, &minute, created);
                created
            }
        };
        Ok(Some(RateState {
            limit,
            remaining: u32::try_from(u64::from(limit).saturating_sub(created)).unwrap_or(0),
            reset: left,
        }))
    }

    fn note_minute(&self, tenant_id: &str, minute: &str, created: u64) {
        let mut minutes = self.quotas.minutes.lock().unwrap();
        if minutes.len() >= 10_000 {
            minutes.clear();
        }
        minutes.insert(
            tenant_id.to_owned(),
            (minute.to_owned(), created, Instant::now()),
        );
    }
}
