//! Canceling a run: a queued or waiting run is ended here, a turn under way is stopped by its
//! executor (`executor.rs`), which records the cancel once its processes are gone.

use std::time::Duration;

use skill_runner_types::run_state::Move;

use super::{Jobs, Scope};
use crate::error::Result;
use crate::runner::{Envelope, list_artifacts};
use crate::store::RunStatus;

/// What a cancel did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canceled {
    pub run_id: String,
    /// The run's status after the call.
    pub status: RunStatus,
    /// True when this call canceled the run; false when it had already ended.
    pub accepted: bool,
}

impl Jobs {
    /// Cancels an active run; a finished one answers `accepted: false`.
    pub async fn cancel(&self, scope: &Scope, request_id: &str) -> Result<Canceled> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let accepted = !run.status.is_terminal() && self.cancel_run(&run.run_id).await?;
        let status = self
            .store
            .run(&run.run_id)
            .await?
            .map_or(run.status, |r| r.status);
        Ok(Canceled {
            run_id: run.run_id,
            status,
            accepted,
        })
    }

    /// Ends an active run as canceled; true when this call did it. A turn under way is
    /// stopped by its executor, which records the cancel once the process group is gone and
    /// its output is in the logs; queued and waiting runs are ended here.
    pub(super) async fn cancel_run(&self, run_id: &str) -> anyhow::Result<bool> {
        let switch = self
            .active
            .lock()
            .expect("active lock")
            .get(run_id)
            .map(|(_, token)| token.clone());
        // SIGTERM, the grace period, SIGKILL and draining the pipes, with room to spare.
        let limit = self.config.limits.kill_grace + Duration::from_secs(5);
        let stopping = match switch {
            Some(token) => {
                let first = !token.is_cancelled();
                token.cancel();
                Some(first)
            }
            // A turn under way on another node is stopped there.
            None if self.store.run(run_id).await?.map(|r| r.status) == Some(RunStatus::Running) => {
                self.cancel_elsewhere(run_id).await.then_some(true)
            }
            None => None,
        };
        if let Some(first) = stopping {
            // A cancel waits on this, and one look is one indexed read: look often.
            let ended = self
                .read_until(run_id, limit, Duration::from_millis(50), |run| {
                    run.status.is_terminal() || run.status == RunStatus::WaitingUser
                })
                .await?;
            match ended.map(|run| run.status) {
                Some(RunStatus::Canceled) => return Ok(first),
                Some(status) if status.is_terminal() => return Ok(false),
                // The turn asked its question just before the switch fired, or the executor
                // is stuck: the cancel is recorded below.
                _ => {}
            }
        }
        let ending = Envelope {
            artifacts: list_artifacts(&self.folder(run_id))
                .await
                .unwrap_or_default(),
            ..Envelope::default()
        }
        .canceled();
        let accepted = self.finish(run_id, Move::Cancel, None, ending).await;
        self.queue.remove(run_id);
        Ok(accepted)
    }
}
