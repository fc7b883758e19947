//! The job engine: requests become runs, runs wait in a bounded queue for a slot, execute under
//! supervision, and end with a validated result.
//!
//! - [`create`]: create and upload for `/v1/jobs` and `/v1/temp-skill-runs` (validation, cache
//!   lookup, admission).
//! - [`executor`]: one run from `queued` to its end (workspace, turns, output, result).
//! - [`views`]: what clients read back (status, result, artifacts, logs, bundles) and cancel.
//! - [`interaction`]: questions to the user, replies, reply timeouts and automatic decisions.
//! - [`events`] and [`live`]: the live event stream of a run.
//! - [`recovery`] and [`retention`]: settling work after a restart, deleting old runs.

pub mod cache;
pub mod cancel;
pub mod chat;
pub mod cluster;
pub mod conversation;
pub mod create;
pub mod events;
pub mod executor;
pub mod fcmp;
pub mod idempotency;
pub mod interaction;
pub mod live;
mod login_wait;
pub mod queue;
pub mod quotas;
pub mod recovery;
pub mod relay;
pub mod reply_files;
pub mod retention;
mod retries;
pub mod schedules;
mod secrets;
pub mod stored;
pub mod telemetry;
pub mod validation;
pub mod views;
mod workspace_reuse;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::config::JobsConfig;
use crate::engines::Engines;
use crate::packages::Installer;
use crate::process::Supervisor;
use crate::run_folder::RunFolder;
use crate::store::{RequestKind, RunStatus, Store};
use skill_runner_types::engine::Engine;

use live::Feeds;
use queue::{Popped, Queue, TurnPlace};

/// Which API family a route belongs to: the jobs routes see every request (a temporary run
/// is a job whose skill comes with its upload, `skill_source: "temp_upload"`), the deprecated
/// temporary-run routes (`/v1/temp-skill-runs`) only the temporary runs, and the management
/// routes every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Jobs,
    Temp,
    Management,
}

/// Which requests a route may see: those of its [`Family`], of the caller's tenant (every
/// tenant's when `tenant` is `None`). Any other request is answered as one that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub family: Family,
    pub tenant: Option<Arc<str>>,
}

impl Scope {
    pub fn admits(&self, request: &crate::store::Request) -> bool {
        let family = match self.family {
            Family::Jobs | Family::Management => true,
            Family::Temp => request.kind == RequestKind::Temp,
        };
        family
            && self
                .tenant
                .as_deref()
                .is_none_or(|t| t == request.tenant_id)
    }
}

/// A worker's slot, held by the run it executes until the run's turn is over; dropping it
/// frees the slot and the turn's place among those of its engine.
#[derive(Debug)]
pub(crate) struct Slot {
    _held: tokio::sync::oneshot::Sender<()>,
    place: TurnPlace,
}

impl Slot {
    /// The engine of the run the slot was taken for.
    fn engine(&self) -> Engine {
        self.place.engine()
    }
}

/// The job engine; one per service, shared by the handlers.
#[derive(Debug)]
pub struct Jobs {
    config: JobsConfig,
    store: Store,
    /// The skills, and the way to the ones other nodes installed.
    installer: Arc<Installer>,
    engines: Engines,
    supervisor: Supervisor,
    queue: Arc<Queue>,
    /// The skill folders' fingerprints for cache keys.
    fingerprints: cache::Fingerprints,
    /// Cancel switches of the turns being executed, by run id, with a number that tells one
    /// turn of a run from the next.
    active: Mutex<HashMap<String, (u64, CancellationToken)>>,
    turns: AtomicU64,
    /// Runs whose turns this node stopped because it lost its place among the nodes.
    fenced: Mutex<std::collections::HashSet<String>>,
    /// Workers waiting for a run (the claims fill them, see [`cluster`]).
    idle: AtomicUsize,
    /// A run became claimable, or a worker idle.
    claimable: tokio::sync::Notify,
    /// A schedule changed: its next tick may be sooner.
    ticks: tokio::sync::Notify,
    /// Wake-ups for the event streams.
    feeds: Arc<Feeds>,
    /// Reads other nodes' event streams of the runs they hold.
    relay: relay::Relay,
    /// Held while a bundle is built.
    bundles: tokio::sync::Mutex<()>,
    /// Held while a run folder is brought back from shared storage.
    restoring: tokio::sync::Mutex<()>,
    /// Held while the data is reset.
    resetting: tokio::sync::Mutex<()>,
    /// Room kept for recording runs when the data volume fills up.
    disk: crate::disk_space::DiskSpace,
    /// The tenants' quotas as last read, and their admissions' turns.
    quotas: quotas::TenantQuotas,
    /// The tenants' secrets, which skills' turns get as placeholders.
    tenant_secrets: Arc<crate::secrets::Secrets>,
    /// The tenants' webhooks, told of the runs' moves.
    webhooks: Arc<crate::webhooks::Webhooks>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Jobs {
    pub fn new(
        config: JobsConfig,
        store: Store,
        installer: Arc<Installer>,
        engines: Engines,
        supervisor: Supervisor,
    ) -> Arc<Self> {
        Arc::new(Self {
            supervisor,
            queue: Queue::new(
                config.limits.max_queue_size,
                config.limits.max_concurrent_agents,
                config.engine_limits.clone(),
            ),
            fingerprints: cache::Fingerprints::default(),
            relay: relay::Relay::default(),
            bundles: tokio::sync::Mutex::new(()),
            restoring: tokio::sync::Mutex::new(()),
            resetting: tokio::sync::Mutex::new(()),
            disk: crate::disk_space::DiskSpace::set_up(
                config.data.disk_reserve(),
                config.limits.disk_reserve_bytes,
            ),
            quotas: quotas::TenantQuotas::default(),
            tenant_secrets: crate::secrets::Secrets::new(store.clone()),
            webhooks: crate::webhooks::Webhooks::new(
                store.clone(),
                config.webhook_allow.clone(),
                config.node_id.clone(),
            ),
            engines,
            config,
            store,
            installer,
            active: Mutex::new(HashMap::new()),
            turns: AtomicU64::new(0),
            fenced: Mutex::default(),
            idle: AtomicUsize::new(0),
            claimable: tokio::sync::Notify::new(),
            ticks: tokio::sync::Notify::new(),
            feeds: Feeds::new(),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        })
    }

    /// The certificate (PEM) of the egress's CA, when turns are confined.
    pub fn egress_ca(&self) -> Option<String> {
        self.supervisor.egress_ca().map(str::to_owned)
    }

    /// The tenants' secrets.
    pub fn tenant_secrets(&self) -> &crate::secrets::Secrets {
        &self.tenant_secrets
    }

    /// The tenants' webhooks.
    pub fn webhooks(&self) -> &crate::webhooks::Webhooks {
        &self.webhooks
    }

    /// The engine adapters, their CLIs and model lists.
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    /// Settles what a previous process left (see [`recovery`]), then starts one worker per
    /// slot, the retention sweep and the sweep of ended runs' secrets.
    pub async fn start(self: &Arc<Self>) -> anyhow::Result<()> {
        self.recover().await?;
        for _ in 0..self.config.limits.max_concurrent {
            let jobs = self.clone();
            self.tracker.spawn(async move { jobs.worker().await });
        }
        let jobs = self.clone();
        self.tracker
            .spawn(async move { jobs.retention_loop().await });
        let jobs = self.clone();
        self.tracker.spawn(async move { jobs.secrets_loop().await });
        let jobs = self.clone();
        self.tracker
            .spawn(async move { jobs.reconcile_loop().await });
        let jobs = self.clone();
        self.tracker
            .spawn(async move { jobs.schedule_loop().await });
        let (webhooks, shutdown) = (self.webhooks.clone(), self.shutdown.clone());
        self.tracker
            .spawn(async move { webhooks.send_loop(shutdown).await });
        if self.store.cluster().is_some() {
            let jobs = self.clone();
            self.tracker.spawn(async move { jobs.cluster_loop().await });
        }
        Ok(())
    }

    /// Ends the open event streams so that the HTTP server can drain; called when the
    /// shutdown signal arrives, before [`Jobs::shutdown`].
    pub fn close_streams(&self) {
        self.feeds.close();
    }

    /// Stops taking runs from the queue and ends the runs under way (they fail with
    /// `ORCHESTRATOR_RESTART_INTERRUPTED`; queued runs stay queued for the next start, waiting
    /// runs keep waiting).
    pub async fn shutdown(&self, grace: Duration) {
        // First: a worker whose run the cancel below ends must not take the next one.
        self.queue.close();
        self.shutdown.cancel();
        self.tracker.close();
        let waiting = self.queue.waiting();
        if waiting > 0 {
            tracing::info!(waiting, "queued runs stay queued for the next start");
        }
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("runs still stopping at shutdown; start-up recovery will settle them");
        }
    }

    /// One slot: takes runs one after another until shutdown. The slot is free again as soon
    /// as a run's turn is over (its processes gone), while the run's task still records the
    /// result: the limit is on turns executing at once, and the next one need not wait for
    /// the store.
    async fn worker(self: Arc<Self>) {
        loop {
            self.idle.fetch_add(1, Ordering::Relaxed);
            self.claimable.notify_one();
            let popped = self.queue.pop().await;
            self.idle.fetch_sub(1, Ordering::Relaxed);
            let Some(Popped {
                run_id,
                place,
                origin,
            }) = popped
            else {
                return;
            };
            let cancel = self.shutdown.child_token();
            let turn = self.turns.fetch_add(1, Ordering::Relaxed);
            self.active
                .lock()
                .expect("active lock")
                .insert(run_id.clone(), (turn, cancel.clone()));
            let (slot, freed) = tokio::sync::oneshot::channel();
            let jobs = self.clone();
            self.tracker.spawn(async move {
                // A panic inside the run must not go unrecorded: the run is executed as its
                // own task and a panic is turned into a failed run.
                let executor = jobs.clone();
                let id = run_id.clone();
                let span = telemetry::turn_span(&jobs.config.node_id, &run_id, origin);
                let executed = tokio::spawn(
                    async move {
                        let slot = Slot { _held: slot, place };
                        executor.execute(&id, cancel, slot).await
                    }
                    .instrument(span),
                );
                if let Err(e) = executed.await {
                    tracing::error!(run_id, error = %e, "run execution panicked");
                    jobs.fail_after_panic(&run_id).await;
                }
                // The next turn of this run may already be executing under its own switch.
                let mut active = jobs.active.lock().expect("active lock");
                if active.get(&run_id).is_some_and(|(t, _)| *t == turn) {
                    active.remove(&run_id);
                }
            });
            // Sent never: the slot is free when the run drops it.
            let _ = freed.await;
        }
    }

    /// Tells the run's watchers, the log and the counters that the run moved.
    fn moved(&self, to: telemetry::Transition<'_>) {
        self.feeds.status(to.run_id);
        if !matches!(to.state, RunStatus::Queued | RunStatus::Running) {
            // The move's deliveries were written with it.
            self.webhooks.wake();
        }
        telemetry::moved(&self.config.node_id, to);
    }

    /// [`Jobs::moved`] of a move that is no failure.
    fn moved_to(&self, request_id: &str, run_id: &str, engine: Engine, state: RunStatus) {
        self.moved(telemetry::Transition {
            request_id,
            run_id,
            engine,
            state,
            error: None,
        });
    }

    /// How turns are confined.
    pub fn sandbox(&self) -> crate::process::SandboxStatus {
        self.supervisor.sandbox()
    }

    /// Which mechanism holds each barrier around a turn.
    pub fn barriers(&self) -> crate::process::sandbox::Barriers {
        self.supervisor.barriers()
    }

    /// The folders of a run.
    pub fn folder(&self, run_id: &str) -> RunFolder {
        RunFolder::new(self.config.data.runs().join(run_id))
    }
}
