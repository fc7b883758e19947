//! Running as one of several nodes on one PostgreSQL database (`store::Cluster`).
//!
//! A queued run waits in the database, not in a node's memory: each node claims the oldest run
//! it may run whenever one of its workers is idle (`FOR UPDATE SKIP LOCKED`), and only then
//! queues it locally; creates, replies and automatic decisions announce new runs to every node
//! (`NOTIFY`), and each node also looks every second. The admission bound counts the queued
//! runs of the whole cluster. A run's files stay on the node that received them (uploads) or
//! ran its first turn: only that node claims its turns.
//!
//! Every node renews its heartbeat; one node at a time (the leader) removes the nodes silent for
//! the node timeout, gives their claims of runs not started back to the queue and ends their
//! turns under way `failed` with `NODE_LOST` (an agent turn is never started twice). A node
//! that cannot renew its heartbeat for two thirds of that time, or learns it was declared
//! lost, stops its turns itself before the others end them. A cancel of a run whose turn runs
//! on another node is sent to that node, which stops it as if the cancel came to it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use skill_runner_types::clock::Timestamp;
use skill_runner_types::run_state::Move;

use super::Jobs;
use super::executor::codes;
use super::queue::{Admission, QueuedRun, Ticket};
use crate::error::{Error, Result};
use crate::runner::Envelope;
use crate::store::{Cluster, Signal};

/// How often a node looks for claimable runs without being told.
const LOOK: Duration = Duration::from_secs(1);

/// A run's place in the queue, taken before the run is written.
#[derive(Debug)]
pub(crate) enum Place {
    /// In this node's queue (one node: SQLite).
    Local(Admission),
    /// In the database, for any node to claim.
    Shared,
}

impl Jobs {
    fn cluster(&self) -> Option<&dyn Cluster> {
        self.store.cluster()
    }

    /// A place for one more run, or `None` when the queue (this node's, or the cluster's) is
    /// full. Among nodes this is a look before the work of a create (an upload's extraction,
    /// its folder); the store counts again where it writes the run, under the queue's lock,
    /// and refuses with `store::QueueFull` when creates on other nodes filled it meanwhile.
    pub(crate) async fn place(&self) -> Result<Option<Place>> {
        let Some(cluster) = self.cluster() else {
            return Ok(self.queue.try_admit().map(Place::Local));
        };
        if cluster.queued().await? as usize >= self.config.limits.max_queue_size {
            metrics::counter!(super::telemetry::QUEUE_FULL).increment(1);
            return Ok(None);
        }
        Ok(Some(Place::Shared))
    }

    /// [`Jobs::place`], refusing with 429 when there is none.
    pub(crate) async fn admit(&self) -> Result<Place> {
        self.place().await?.ok_or(Error::QueueFull)
    }

    /// Queues a recorded run in its place.
    pub(crate) async fn enqueue(&self, place: Place, run: Ticket<'_>) {
        match place {
            Place::Local(admission) => admission.enqueue(self.queued_run(run).await),
            Place::Shared => self.announce().await,
        }
    }

    /// Queues a run that cannot be refused (an automatic decision's next turn, a retry).
    pub(crate) async fn requeue(&self, run: Ticket<'_>) {
        match self.cluster() {
            None => {
                let run = self.queued_run(run).await;
                self.queue.push_unbounded(run);
            }
            Some(_) => self.announce().await,
        }
    }

    /// How a run waits in this node's queue: with its tenant's `max_running` on one node
    /// (among nodes the claims keep to it, and this node's queue holds only what it claimed).
    pub(crate) async fn queued_run(&self, run: Ticket<'_>) -> QueuedRun {
        let max_running = match self.cluster() {
            Some(_) => None,
            None => match self.quotas_of(run.tenant).await {
                Ok(quotas) => quotas.max_running,
                Err(e) => {
                    tracing::warn!(run_id = run.run_id, "reading its tenant's quotas: {e}");
                    None
                }
            },
        };
        QueuedRun {
            run_id: run.run_id.to_owned(),
            engine: run.engine,
            tenant: run.tenant.into(),
            max_running,
            priority: run.priority,
            not_before: run.not_before,
        }
    }

    /// Tells every node a run is claimable; a failure only delays it to their next look.
    async fn announce(&self) {
        if let Some(cluster) = self.cluster()
            && let Err(e) = cluster.announce().await
        {
            tracing::warn!(error = format!("{e:#}"), "announcing a queued run");
        }
        self.claimable.notify_one();
    }

    /// Asks the node running the run's turn to stop it; true when it was asked.
    pub(crate) async fn cancel_elsewhere(&self, run_id: &str) -> bool {
        let Some(cluster) = self.cluster() else {
            return false;
        };
        match cluster.request_cancel(run_id).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(run_id, error = format!("{e:#}"), "asking for a cancel");
                false
            }
        }
    }

    /// The node's part of the cluster, until shutdown: heartbeats, the leader's pass, the
    /// other nodes' signals and the claims.
    pub(super) async fn cluster_loop(self: Arc<Self>) {
        let jobs = self.clone();
        self.tracker
            .spawn(async move { jobs.heartbeat_loop().await });
        let jobs = self.clone();
        self.tracker.spawn(async move { jobs.signal_loop().await });
        self.claim_loop().await;
    }

    /// Claims runs while a worker is idle and nothing waits in the local queue.
    async fn claim_loop(&self) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        loop {
            let wake = self.claimable.notified();
            while self.idle.load(Ordering::Relaxed) > self.queue.waiting() {
                match cluster
                    .claim(
                        self.queue.agent_place_free(),
                        self.queue.engine_limits(),
                        self.config.tenant_quotas.max_running,
                    )
                    .await
                {
                    Ok(Some(claimed)) => self.queue.push_unbounded(QueuedRun {
                        run_id: claimed.run_id,
                        engine: claimed.engine,
                        tenant: claimed.tenant_id.into(),
                        max_running: None,
                        priority: claimed.priority,
                        // Its time had come when it was claimed.
                        not_before: None,
                    }),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = format!("{e:#}"), "claiming a run");
                        break;
                    }
                }
            }
            // A run put off until later is claimed as its time comes, not at the next look.
            let look = match cluster.next_ready_at().await {
                Ok(Some(at)) => at.duration_since(Timestamp::now()).min(LOOK),
                _ => LOOK,
            };
            tokio::select! {
                () = wake => {}
                () = tokio::time::sleep(look) => {}
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Wakes the claims on an announcement and stops turns other nodes ask to cancel.
    async fn signal_loop(&self) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        loop {
            let mut signals = tokio::select! {
                subscribed = cluster.signals() => match subscribed {
                    Ok(signals) => signals,
                    Err(e) => {
                        tracing::warn!(error = format!("{e:#}"), "subscribing to the nodes' signals");
                        tokio::select! {
                            () = tokio::time::sleep(LOOK) => continue,
                            () = self.shutdown.cancelled() => return,
                        }
                    }
                },
                () = self.shutdown.cancelled() => return,
            };
            loop {
                let signal = tokio::select! {
                    signal = signals.next() => signal,
                    () = self.shutdown.cancelled() => return,
                };
                match signal {
                    Ok(Signal::Queued) => self.claimable.notify_one(),
                    Ok(Signal::Cancel(run_id)) => self.stop_turn(&run_id),
                    Ok(Signal::Installed) => {
                        if let Err(e) = self.installer.registry().rescan().await {
                            tracing::warn!(error = format!("{e:#}"), "rescanning the skills dir");
                        }
                    }
                    // The connection broke: subscribe again (the looks cover the gap).
                    Err(_) => break,
                }
            }
        }
    }

    /// Stops the turn of `run_id` if it runs here; its executor records the cancel.
    fn stop_turn(&self, run_id: &str) {
        if let Some((_, token)) = self.active.lock().expect("active lock").get(run_id) {
            token.cancel();
        }
    }

    /// Renews this node's heartbeat and, as the leader, settles the nodes that went silent.
    async fn heartbeat_loop(self: &Arc<Self>) {
        let Some(cluster) = self.cluster() else {
            return;
        };
        let timeout = self.config.limits.node_timeout;
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(timeout / 6) => {}
                () = self.shutdown.cancelled() => return,
            }
            match cluster.heartbeat().await {
                Ok(true) => {
                    renewed = tokio::time::Instant::now();
                    metrics::counter!(super::telemetry::LEASE_RENEWALS).increment(1);
                }
                Ok(false) => {
                    renewed = tokio::time::Instant::now();
                    tracing::error!("this node was declared lost: stopping its turns");
                    self.stop_all_turns();
                }
                Err(e) if renewed.elapsed() > timeout * 2 / 3 => {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "no heartbeat for two thirds of the node timeout: stopping this node's \
                         turns before the others end them"
                    );
                    self.stop_all_turns();
                }
                Err(e) => tracing::warn!(error = format!("{e:#}"), "renewing the heartbeat"),
            }
            match cluster.settle_lost(timeout).await {
                Ok(Some(orphaned)) => {
                    for run in orphaned {
                        let ending = Envelope::default().failed(
                            Some(codes::NODE_LOST),
                            "The node running this turn stopped answering".into(),
                            None,
                        );
                        if self.retry_lost(&run, &ending).await {
                            continue;
                        }
                        tracing::warn!(run_id = run.run_id, "ending a turn of a lost node");
                        self.finish(&run.run_id, Move::Reconcile, None, ending)
                            .await;
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = format!("{e:#}"), "settling lost nodes"),
            }
            if let Err(e) = self.adopt_stored().await {
                tracing::warn!(error = format!("{e:#}"), "taking over runs of lost nodes");
            }
        }
    }

    /// Tries a turn of a lost node again when its request asks for retries and its skill is
    /// safe to run again (the turn may have done work); true when it was put back in the queue.
    async fn retry_lost(&self, run: &crate::store::Run, ending: &crate::store::Ending) -> bool {
        let Ok(Some(request)) = self.store.request(&run.request_id).await else {
            return false;
        };
        let Some(policy) = request.runtime_options.retry.as_ref() else {
            return false;
        };
        let skill_safe = match self.skill_for(run, request.kind).await {
            Ok(skill) => skill.retry_safe,
            Err(_) => false,
        };
        let failed = super::retries::Failed {
            run,
            policy: Some(policy),
            skill_safe,
            answered: 0,
            retry_after: None,
        };
        let Some(attempt) = failed.retry(ending) else {
            return false;
        };
        tracing::warn!(run_id = run.run_id, "trying a turn of a lost node again");
        match self.retry(&run.run_id, &attempt).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(
                    run_id = run.run_id,
                    error = format!("{e:#}"),
                    "cannot record a retry"
                );
                false
            }
        }
    }

    /// Stops every turn of this node: they end `failed` `NODE_LOST`.
    fn stop_all_turns(&self) {
        let active = self.active.lock().expect("active lock");
        let mut fenced = self.fenced.lock().expect("fenced lock");
        for (run_id, (_, token)) in active.iter() {
            fenced.insert(run_id.clone());
            token.cancel();
        }
    }
}
