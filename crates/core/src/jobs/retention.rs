//! Retention: finished runs are deleted after a while (failed ones sooner), with their folders
//! (and their copies in shared storage), the requests bound to them and their cache entries.
//! Among nodes, each node deletes the runs whose folders it holds, and those no live node
//! holds; `POST /v1/jobs/cleanup` through one node does the same.

use std::time::Duration;

use super::Jobs;
use crate::clock::Timestamp;
use crate::store::{CleanupCounts, Removed};

impl Jobs {
    pub(super) async fn retention_loop(&self) {
        let interval = self.config.limits.cleanup_interval;
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = self.shutdown.cancelled() => return,
            }
            let failed_before = Timestamp::before(self.config.limits.failed_retention);
            let finished_before = Timestamp::before(self.config.limits.retention);
            match self.delete_finished(failed_before, finished_before).await {
                Ok(counts) if counts.runs_deleted + counts.requests_deleted > 0 => {
                    tracing::info!(?counts, "retention sweep deleted old runs");
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = format!("{e:#}"), "retention sweep failed"),
            }
        }
    }

    /// `POST /v1/management/system/reset-data`: deletes every run, request and cache entry
    /// (with the folders) when no run is active: refused (409) while a run is queued, running
    /// or waiting for a reply, or while another reset is under way. `dry_run` counts what would
    /// go and deletes nothing.
    pub async fn reset_data(&self, dry_run: bool) -> crate::error::Result<CleanupCounts> {
        let Ok(_resetting) = self.resetting.try_lock() else {
            return Err(crate::error::Error::conflict("Another reset is under way"));
        };
        let active: u64 = self
            .store
            .run_counts()
            .await?
            .into_iter()
            .filter(|count| !count.status.is_terminal())
            .map(|count| count.runs)
            .sum();
        if active > 0 {
            return Err(crate::error::Error::conflict(format!(
                "{active} run(s) are active (queued, running or waiting for a reply): cancel \
                 them or let them finish, then reset"
            )));
        }
        if dry_run {
            return Ok(self.store.finished_counts().await?);
        }
        Ok(self.cleanup_now().await?)
    }

    /// `POST /v1/jobs/cleanup`: deletes every finished run now. Active runs are kept.
    pub async fn cleanup_now(&self) -> anyhow::Result<CleanupCounts> {
        let future = Timestamp::before(Duration::ZERO);
        self.delete_finished(future, future).await
    }

    async fn delete_finished(
        &self,
        failed_before: Timestamp,
        finished_before: Timestamp,
    ) -> anyhow::Result<CleanupCounts> {
        let (counts, removed) = self
            .store
            .delete_finished(failed_before, finished_before)
            .await?;
        for Removed {
            run_id,
            temp_dir,
            request_id,
        } in removed
        {
            if let Some(id) = &run_id {
                self.forget_copy(id).await;
            }
            let dirs = [
                run_id.map(|id| self.folder(&id).root().to_path_buf()),
                temp_dir.map(Into::into),
                request_id.map(|id| self.config.data.requests().join(id)),
            ];
            for dir in dirs.into_iter().flatten() {
                if let Err(e) = tokio::fs::remove_dir_all(&dir).await
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot delete a run folder");
                }
            }
        }
        Ok(counts)
    }
}
