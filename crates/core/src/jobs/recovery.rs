//! Start-up recovery: nothing accepted is lost, nothing stays `running` with no process behind it.
//!
//! Runs that were queued run now, in their original order. Runs that were running end `failed`
//! with `ORCHESTRATOR_RESTART_INTERRUPTED` and `recovery_state = failed_reconciled`, and the
//! process group they left (if it is still ours: same boot, leader started no earlier than
//! recorded) is killed. Runs waiting for their user keep waiting (`recovered_waiting`) when
//! their question is intact, with a fresh reply window: the user could not answer while the
//! service was down. Uploads that were being received when the service stopped were never
//! acknowledged, so their requests wait for the upload again.
//!
//! While the service runs, the reconciler settles what it lost track of when the store failed
//! past its retries: see [`Jobs::reconcile_once`]. Among nodes sharing a database, each settles
//! only the runs it claimed or holds the folder of; the leader settles those of lost nodes
//! (see [`super::cluster`]).

use std::sync::Arc;
use std::time::Duration;

use skill_runner_types::run_state::Move;

use super::Jobs;
use super::executor::{codes, internal_error};
use super::interaction::pending_question;
use crate::clock::Timestamp;
use crate::process;
use crate::runner::Envelope;
use crate::store::{Run, RunStatus};

impl Jobs {
    pub(super) async fn recover(self: &Arc<Self>) -> anyhow::Result<()> {
        let reopened = self.store.reopen_interrupted_uploads().await?;
        let interrupted = self.held(RunStatus::Running).await?;
        for run in &interrupted {
            if let Some(mark) = &run.process
                && process::kill_recorded_group(mark)
            {
                tracing::warn!(
                    run_id = run.run_id,
                    pgid = mark.pgid,
                    "killed the process group of an interrupted run"
                );
            }
            let ending = Envelope::default().failed(
                Some(codes::RESTART_INTERRUPTED),
                "The service restarted while the run was executing".into(),
                None,
            );
            self.reconcile(
                &run.run_id,
                RunStatus::Running,
                ending,
                "running_at_restart",
            )
            .await?;
        }
        let waiting = self.held(RunStatus::WaitingUser).await?;
        for run in &waiting {
            self.keep_waiting(run).await?;
        }
        self.settle_login_waits(true).await?;
        // Among nodes, queued runs wait in the database; this node's claims from a previous
        // life under the same id go back to it.
        let queued = match self.store.cluster() {
            Some(cluster) => {
                cluster.release_claims().await?;
                Vec::new()
            }
            None => self.store.runs_with_status(RunStatus::Queued).await?,
        };
        for run in &queued {
            let queued = self.queued_run(run.into()).await;
            self.queue.push_unbounded(queued);
        }
        if reopened + (interrupted.len() + waiting.len() + queued.len()) as u64 > 0 {
            tracing::info!(
                requeued = queued.len(),
                reconciled = interrupted.len(),
                waiting = waiting.len(),
                uploads_reopened = reopened,
                "recovered runs from the previous process"
            );
        }
        Ok(())
    }
}

impl Jobs {
    /// The runs in `status` this node answers for: all of them on its own, those it claimed
    /// or holds the folder of among nodes.
    async fn held(&self, status: RunStatus) -> anyhow::Result<Vec<Run>> {
        match self.store.cluster() {
            Some(cluster) => cluster.held(status).await,
            None => self.store.runs_with_status(status).await,
        }
    }

    /// Keeps a waiting run waiting and re-arms its timer, or fails it when its question is
    /// gone (`SESSION_RESUME_FAILED`).
    pub(super) async fn keep_waiting(self: &Arc<Self>, run: &Run) -> anyhow::Result<()> {
        let interactions = self.store.interactions(&run.run_id).await?;
        let options = match self.store.request(&run.request_id).await? {
            Some(request) => Some(request.runtime_options),
            None => None,
        };
        if let (Some(options), Some(_)) = (options, pending_question(run, &interactions)) {
            let window = Duration::from_secs(options.session_timeout_sec);
            if self
                .store
                .keep_waiting(&run.run_id, Timestamp::after(window))
                .await?
            {
                self.arm_wait_timer(&run.run_id, run.interaction_count, window);
            }
            return Ok(());
        }
        let ending = Envelope::default().failed(
            Some(codes::SESSION_RESUME_FAILED),
            "The run waited for its user, but its pending question was lost".into(),
            None,
        );
        self.reconcile(
            &run.run_id,
            RunStatus::WaitingUser,
            ending,
            "pending_interaction_missing",
        )
        .await
    }

    async fn reconcile(
        &self,
        run_id: &str,
        from: RunStatus,
        ending: crate::store::Ending,
        reason: &str,
    ) -> anyhow::Result<()> {
        // A turn the stop cut short may have left lent logins in the run's home.
        crate::engines::cli::forget_logins(&self.folder(run_id));
        if let Some(ended) = self
            .store
            .reconcile_interrupted(run_id, from, &ending, reason)
            .await?
            && let Err(e) = self.after_end(run_id, &ending, &ended).await
        {
            tracing::error!(
                run_id,
                error = format!("{e:#}"),
                "clean-up of an interrupted run failed"
            );
        }
        Ok(())
    }
}

impl Jobs {
    pub(super) async fn reconcile_loop(self: &Arc<Self>) {
        let interval = self.config.limits.reconcile_interval;
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = self.shutdown.cancelled() => return,
            }
            if let Err(e) = self.reconcile_once().await {
                tracing::error!(error = format!("{e:#}"), "reconciler pass failed");
            }
            if let Err(e) = self.settle_login_waits(false).await {
                tracing::error!(
                    error = format!("{e:#}"),
                    "resuming runs waiting for a login failed"
                );
            }
        }
    }

    /// One pass: a run `running` that no turn of this process executes (its end could not be
    /// recorded) ends `failed` `INTERNAL_ERROR` and its recorded group is killed; a run
    /// `queued` for a while that is in no queue (its start could not be recorded) is queued
    /// again. The store is read before the live turns, so a turn that starts meanwhile is
    /// never taken for a lost one.
    pub(super) async fn reconcile_once(self: &Arc<Self>) -> anyhow::Result<()> {
        let running = self.held(RunStatus::Running).await?;
        let queued = self.held(RunStatus::Queued).await?;
        let held: std::collections::HashSet<String> = self
            .active
            .lock()
            .expect("active lock")
            .keys()
            .cloned()
            .collect();
        let lost = running.iter().filter(|r| !held.contains(&r.run_id));
        for run in lost {
            if let Some(mark) = &run.process {
                process::kill_recorded_group(mark);
            }
            let ending = internal_error(
                "The service lost track of the run (its end could not be recorded); its \
                 processes were killed",
            );
            if self
                .finish(&run.run_id, Move::Reconcile, None, ending)
                .await
            {
                tracing::warn!(
                    run_id = run.run_id,
                    "reconciled a run no turn was executing"
                );
            }
        }
        let settled = Timestamp::before(self.config.limits.reconcile_interval);
        for run in queued {
            // A run popped meanwhile may be queued twice; its second start finds it started.
            let stale = run.updated_at < settled;
            if stale && !held.contains(&run.run_id) && !self.queue.contains(&run.run_id) {
                tracing::warn!(
                    run_id = run.run_id,
                    "queued a run again that was in no queue"
                );
                let queued = self.queued_run((&run).into()).await;
                self.queue.push_unbounded(queued);
            }
        }
        Ok(())
    }
}
