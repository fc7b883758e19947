//! Start-up recovery: nothing accepted is lost, nothing stays `running` with no process behind it.
//!
//! Runs that were queued run now, in their original order. Runs that were running end `failed`
//! with `ORCHESTRATOR_RESTART_INTERRUPTED` and `recovery_state = failed_reconciled`, and the
//! process group they left (if it is still ours: same boot, leader started no earlier than
//! recorded) is killed. Uploads that were being received when the service stopped were never
//! acknowledged, so their requests wait for the upload again.

use super::Jobs;
use super::executor::{Envelope, codes};
use crate::process;
use crate::store::RunStatus;

impl Jobs {
    pub(super) async fn recover(&self) -> anyhow::Result<()> {
        let reopened = self.store.reopen_interrupted_uploads().await?;
        let interrupted = self.store.runs_with_status(RunStatus::Running).await?;
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
            if self
                .store
                .reconcile_interrupted(&run.run_id, &ending, "running_at_restart")
                .await?
                && let Err(e) = self.after_end(&run.run_id, &ending).await
            {
                tracing::error!(
                    run_id = run.run_id,
                    error = format!("{e:#}"),
                    "clean-up of an interrupted run failed"
                );
            }
        }
        let queued = self.store.runs_with_status(RunStatus::Queued).await?;
        for run in &queued {
            self.queue.push_recovered(run.run_id.clone());
        }
        if reopened + interrupted.len() as u64 + queued.len() as u64 > 0 {
            tracing::info!(
                requeued = queued.len(),
                reconciled = interrupted.len(),
                uploads_reopened = reopened,
                "recovered runs from the previous process"
            );
        }
        Ok(())
    }
}
