//! Run folders in shared storage, among nodes ([`crate::storage`]): each node copies a run's
//! folder there once a turn of its settles (it waits for a reply or ended), and a job's uploads
//! before its run is recorded; it brings a copy back where it needs a folder it does not hold:
//! to serve a run whose node is gone, to run an uploaded job received elsewhere, or the next
//! turn of a waiting run it took over from a lost node.

use std::sync::Arc;

use super::Jobs;
use crate::storage::Storage;

impl Jobs {
    /// The shared storage, when the nodes have one.
    pub fn storage(&self) -> Option<&Storage> {
        self.config.storage.as_ref()
    }

    /// Copies the folder of a run whose turn settled here into shared storage, in the
    /// background; a waiting run's copy is recorded, so another node may take the run over
    /// should this one be lost. A folder this node does not hold is left alone.
    pub(super) fn share_settled(&self, run_id: &str, waiting: bool) {
        let Some(storage) = self.storage().cloned() else {
            return;
        };
        let (store, folder, run_id) = (self.store.clone(), self.folder(run_id), run_id.to_owned());
        self.tracker.spawn(async move {
            if !folder.is_here().await {
                return;
            }
            let shared = async {
                storage.save(&run_id, &folder).await?;
                if let (true, Some(cluster)) = (waiting, store.cluster()) {
                    cluster.mark_stored(&run_id).await?;
                }
                anyhow::Ok(())
            };
            if let Err(e) = shared.await {
                tracing::warn!(
                    run_id,
                    error = format!("{e:#}"),
                    "cannot copy the run's folder to shared storage; it stays with this node"
                );
            }
        });
    }

    /// Moves the folder of a run not recorded yet (its uploads) to shared storage, so that
    /// any node may run it; whether it did (else the folder stays here, and the run with it).
    pub(super) async fn hand_over(&self, run_id: &str) -> bool {
        let Some(storage) = self.storage() else {
            return false;
        };
        let folder = self.folder(run_id);
        if let Err(e) = storage.save(run_id, &folder).await {
            tracing::warn!(
                run_id,
                error = format!("{e:#}"),
                "cannot copy the uploads to shared storage; the run stays with this node"
            );
            return false;
        }
        // The node that takes the run brings the copy back; a copy left here would be read
        // in place of that node's.
        if let Err(e) = tokio::fs::remove_dir_all(folder.root()).await {
            tracing::warn!(run_id, error = %e, "cannot remove the handed-over folder");
            return false;
        }
        true
    }

    /// Removes the copy of a run that was not recorded after all.
    pub(super) async fn forget_copy(&self, run_id: &str) {
        if let Some(storage) = self.storage()
            && let Err(e) = storage.forget(run_id).await
        {
            tracing::warn!(
                run_id,
                error = format!("{e:#}"),
                "cannot remove a run's copy"
            );
        }
    }

    /// Brings `run_id`'s folder back from shared storage unless this node holds it; whether
    /// it holds it now.
    pub(super) async fn bring_back(&self, run_id: &str) -> bool {
        let folder = self.folder(run_id);
        let Some(storage) = self.storage() else {
            return folder.is_here().await;
        };
        // One copy at a time: streams and reads asking together wait for the first.
        let _restoring = self.restoring.lock().await;
        if folder.is_here().await {
            return true;
        }
        match storage.restore(run_id, &folder).await {
            Ok(restored) => restored,
            Err(e) => {
                tracing::warn!(
                    run_id,
                    error = format!("{e:#}"),
                    "cannot bring the run's folder back from shared storage"
                );
                false
            }
        }
    }

    /// Takes over the waiting and queued runs of lost nodes whose folders are in shared
    /// storage: a waiting one keeps waiting here (its timer armed again), a queued one goes
    /// back to the cluster's queue.
    pub(super) async fn adopt_stored(self: &Arc<Self>) -> anyhow::Result<()> {
        let Some(cluster) = self.store.cluster().filter(|_| self.storage().is_some()) else {
            return Ok(());
        };
        let mut queued = false;
        for run in cluster.adopt_stored().await? {
            tracing::warn!(
                run_id = run.run_id,
                status = run.status.as_str(),
                "took over a run of a lost node from shared storage"
            );
            match run.status {
                crate::store::RunStatus::WaitingUser => self.keep_waiting(&run).await?,
                _ => queued = true,
            }
        }
        if queued {
            cluster.announce().await?;
        }
        Ok(())
    }
}
