//! The secrets of a request (`runtime_options.env` values, `preamble_prompt`), kept apart from
//! the store: one file per request in `<data>/run_secrets/` (the folder `0700`, the file
//! `0600`), written before the request is recorded, read for each of its turns, and removed
//! once its run ended (a sweep every minute catches the ends no turn saw: a cancel while
//! queued, a restart, a node that went away). Among nodes, such a run stays on the node that
//! holds the file. A turn whose request's secrets are gone fails with
//! `RUNTIME_ENV_SECRET_MISSING` instead of running without them.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::PathBuf;
use std::time::Duration;

use super::Jobs;
use skill_runner_types::run_options::RunSecrets;

/// How often files of ended runs are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

impl Jobs {
    fn secrets_file(&self, request_id: &str) -> PathBuf {
        self.config
            .data
            .run_secrets()
            .join(format!("{request_id}.json"))
    }

    /// Keeps `secrets` for request `request_id` (a fresh id: the file must not exist).
    pub(super) async fn keep_secrets(
        &self,
        request_id: &str,
        secrets: &RunSecrets,
    ) -> anyhow::Result<()> {
        let dir = self.config.data.run_secrets();
        let path = self.secrets_file(request_id);
        let text = serde_json::to_vec(secrets)?;
        tokio::task::spawn_blocking(move || {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(&text)?;
            file.sync_all()
        })
        .await??;
        Ok(())
    }

    /// The secrets kept for request `request_id`, if any.
    pub(super) async fn secrets_of(&self, request_id: &str) -> anyhow::Result<Option<RunSecrets>> {
        match tokio::fs::read(self.secrets_file(request_id)).await {
            Ok(text) => Ok(Some(serde_json::from_slice(&text)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Drops the secrets of request `request_id` (nothing when it had none).
    pub(super) async fn forget_secrets(&self, request_id: &str) {
        if let Err(e) = tokio::fs::remove_file(self.secrets_file(request_id)).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(request_id, error = %e, "cannot remove a request's secrets");
        }
    }

    /// Every minute, drops the secrets of requests whose run ended or that are gone.
    pub(super) async fn secrets_loop(&self) {
        loop {
            if let Err(e) = self.sweep_secrets().await {
                tracing::warn!(error = format!("{e:#}"), "cannot sweep requests' secrets");
            }
            tokio::select! {
                () = tokio::time::sleep(SWEEP_INTERVAL) => {}
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    async fn sweep_secrets(&self) -> anyhow::Result<()> {
        let mut dir = match tokio::fs::read_dir(self.config.data.run_secrets()).await {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        while let Some(entry) = dir.next_entry().await? {
            let name = entry.file_name();
            let Some(request_id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if !self.needs_secrets(request_id).await? {
                self.forget_secrets(request_id).await;
            }
        }
        Ok(())
    }

    /// Whether request `request_id` may still start a turn.
    async fn needs_secrets(&self, request_id: &str) -> anyhow::Result<bool> {
        let Some(request) = self.store.request(request_id).await? else {
            // Written just before its request: give it until the next sweep.
            return Ok(self
                .secrets_file(request_id)
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|at| at.elapsed().unwrap_or_default() < SWEEP_INTERVAL));
        };
        let Some(run_id) = request.run_id else {
            // Its upload may still come.
            return Ok(true);
        };
        Ok(self
            .store
            .run(&run_id)
            .await?
            .is_some_and(|run| !run.status.is_terminal()))
    }
}
