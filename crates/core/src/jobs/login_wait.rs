//! Runs whose engine is not logged in: instead of starting a turn that can only fail, the run
//! waits in `waiting_auth` (its slot free for other runs) until a login arrives, for at most
//! `SKILL_RUNNER_AUTH_WAIT_SECONDS`, then fails `AUTH_WAIT_TIMEOUT`.
//!
//! A login imported through the service queues the engine's waiting runs at once
//! ([`Jobs::login_arrived`]); one that arrived otherwise (a file put in the agent home by hand,
//! a key set on another node) is found by the reconciler's next pass. Waiting runs belong to no
//! node: whichever node sees the login queues them, and the guarded moves make a second node's
//! attempt a no-op.

use std::sync::Arc;
use std::time::Duration;

use skill_runner_types::engine::Engine;
use skill_runner_types::run_state::Move;

use super::Jobs;
use super::executor::codes;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::runner::Envelope;
use crate::store::RunStatus;

/// Delay before a login timeout that failed is handled again.
const RETRY_EXPIRY: Duration = Duration::from_secs(5);

impl Jobs {
    /// Whether runs of an engine that is not logged in are accepted (they wait for a login).
    pub(super) fn waits_for_login(&self) -> bool {
        !self.config.limits.auth_wait.is_zero()
    }

    /// Parks the queued run `run_id` of `engine` in `waiting_auth` when the engine is not
    /// logged in; true when the run is not to start now (it waits, or was canceled meanwhile).
    pub(super) async fn waits_for_login_of(self: &Arc<Self>, run_id: &str, engine: Engine) -> bool {
        let wait = self.config.limits.auth_wait;
        if wait.is_zero() || !self.engines.needs_login(engine) || self.to_provider(run_id).await {
            return false;
        }
        // The run is queued, no turn of it runs: its log ends where the wait begins.
        let stdout_offset = tokio::fs::metadata(self.folder(run_id).stdout_log())
            .await
            .map_or(0, |m| m.len());
        match self
            .store
            .await_auth(run_id, Timestamp::after(wait), stdout_offset)
            .await
        {
            Ok(true) => {
                tracing::info!(run_id, %engine, "the engine is not logged in: the run waits for a login");
                // A rare move: one more read for the id users see.
                let request_id = match self.store.run(run_id).await {
                    Ok(Some(run)) => run.request_id,
                    _ => String::new(),
                };
                self.moved_to(&request_id, run_id, engine, RunStatus::WaitingAuth);
                self.arm_login_timer(run_id, wait);
                true
            }
            // Canceled (or started by another node) meanwhile.
            Ok(false) => true,
            Err(e) => {
                // The turn starts and fails for itself, rather than the run staying queued.
                tracing::error!(
                    run_id,
                    error = format!("{e:#}"),
                    "cannot park the run for a login"
                );
                false
            }
        }
    }

    /// Whether the run's job names a provider (which has its own key: no login needed). A
    /// run that cannot be read is taken as one without: it waits, as before.
    async fn to_provider(&self, run_id: &str) -> bool {
        let Ok(Some(run)) = self.store.run(run_id).await else {
            return false;
        };
        matches!(self.store.request(&run.request_id).await,
            Ok(Some(request)) if request.engine_options.get("provider_id").is_some())
    }

    /// Queues again every run waiting for `engine`'s login, if it is logged in now; returns how
    /// many.
    pub async fn login_arrived(&self, engine: Engine) -> Result<usize> {
        if self.engines.needs_login(engine) {
            return Ok(0);
        }
        let mut resumed = 0;
        for run in self.store.runs_with_status(RunStatus::WaitingAuth).await? {
            if run.engine == engine && self.store.auth_arrived(&run.run_id).await? {
                self.moved_to(&run.request_id, &run.run_id, engine, RunStatus::Queued);
                self.requeue((&run).into()).await;
                resumed += 1;
            }
        }
        if resumed > 0 {
            tracing::info!(%engine, resumed, "the engine is logged in: its waiting runs are queued");
        }
        Ok(resumed)
    }

    /// Ends the wait of `run_id` for a login after `after`, unless it was logged in meanwhile.
    fn arm_login_timer(self: &Arc<Self>, run_id: &str, after: Duration) {
        let jobs = self.clone();
        let run_id = run_id.to_owned();
        self.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(after) => {
                    if let Err(e) = jobs.login_wait_expired(&run_id).await {
                        tracing::error!(run_id, error = format!("{e:#}"), "login timeout failed; retrying");
                        jobs.arm_login_timer(&run_id, RETRY_EXPIRY);
                    }
                }
                // Waiting runs keep waiting; the next start re-arms their timers.
                () = jobs.shutdown.cancelled() => {}
            }
        });
    }

    /// Fails `run_id` if it still waits for a login past its deadline.
    async fn login_wait_expired(&self, run_id: &str) -> anyhow::Result<()> {
        let Some(run) = self.store.run(run_id).await? else {
            return Ok(());
        };
        if run.status != RunStatus::WaitingAuth {
            return Ok(());
        }
        if let Some(deadline) = run.wait_deadline
            && deadline > Timestamp::now()
        {
            // A later wait of the same run (it was queued and parked again).
            return Ok(());
        }
        let ending = Envelope::default().failed(
            Some(codes::AUTH_WAIT_TIMEOUT),
            format!(
                "Engine '{}' was not logged in within {} s. {}",
                run.engine,
                self.config.limits.auth_wait.as_secs(),
                super::validation::not_logged_in(&self.engines, run.engine)
            ),
            None,
        );
        self.finish(run_id, Move::Expire, None, ending).await;
        Ok(())
    }

    /// At start-up and on each reconciler pass: queues the waiting runs of engines logged in
    /// meanwhile, and gives the others a timer for what is left of their wait.
    pub(super) async fn settle_login_waits(self: &Arc<Self>, arm: bool) -> anyhow::Result<()> {
        let waiting = self.store.runs_with_status(RunStatus::WaitingAuth).await?;
        let mut engines: Vec<Engine> = waiting.iter().map(|r| r.engine).collect();
        engines.dedup();
        for engine in engines {
            self.login_arrived(engine).await?;
        }
        if arm {
            for run in waiting {
                let left = run
                    .wait_deadline
                    .map_or(Duration::ZERO, |d| d.duration_since(Timestamp::now()));
                self.arm_login_timer(&run.run_id, left);
            }
        }
        Ok(())
    }
}
