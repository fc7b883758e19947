//! Workspace reuse (`runtime_options.workspace: {mode: "reuse", request_id, file_bindings}`):
//! a run that carries on from an earlier one.
//!
//! The reference lets a chain of runs share one workspace folder; here each run keeps its own,
//! and a reusing run's workspace starts as a copy of the source run's (taken at its first turn),
//! so the source stays as it ended and two runs reusing it cannot disturb each other. Only
//! regular files with one link and folders are copied, each opened without following a link
//! (a turn wrote them); top-level hidden entries (an engine's own settings and session) are
//! left out. A file binding gives a file of any succeeded run's workspace to this run as its
//! file input `input_key` (`uploads/<input_key>`, where every file input is); an input the
//! bindings fill needs no upload. A reusing run neither reads nor fills the result cache: its
//! result depends on files the key does not cover.

use std::path::{Path, PathBuf};

use serde_json::Value;
use skill_runner_types::run_options::{RuntimeOptions, WorkspaceReuse};

use super::Jobs;
use crate::error::{Error, Result};
use crate::run_folder::{RunFolder, open_beneath};
use crate::skill::{InputSource, SkillManifest};
use crate::store::RunStatus;

impl Jobs {
    /// Checks a new request's workspace reuse: its source and every binding's request exist,
    /// succeeded and still have their workspace, each binding names a file input of `skill`
    /// (whose inline value, if sent, is the binding's `target_path`) and a file that is there.
    /// Returns the input keys the bindings fill.
    pub(super) async fn check_reuse(
        &self,
        skill: &SkillManifest,
        options: &RuntimeOptions,
        input: &Value,
    ) -> Result<Vec<String>> {
        let Some(reuse) = &options.workspace else {
            return Ok(Vec::new());
        };
        self.source_workspace(&reuse.request_id).await?;
        let sources = skill.input_sources();
        let mut bound = Vec::new();
        for binding in &reuse.file_bindings {
            let key = &binding.input_key;
            if !sources
                .iter()
                .any(|(k, s)| k == key && *s == InputSource::File)
            {
                return Err(Error::invalid(format!(
                    "runtime_options.workspace.file_bindings: '{key}' is not a file input of \
                     skill '{}'",
                    skill.id
                )));
            }
            if let Some(sent) = input.get(key)
                && sent.as_str() != Some(binding.target_path.as_str())
            {
                return Err(Error::invalid(format!(
                    "input.{key} is bound to a workspace file: send its target_path '{}' or \
                     leave it out",
                    binding.target_path
                )));
            }
            let workspace = self.source_workspace(&binding.source_request_id).await?;
            if open_beneath(&workspace, Path::new(&binding.source_path)).is_err() {
                return Err(Error::invalid(format!(
                    "runtime_options.workspace.file_bindings: request '{}' has no plain file \
                     '{}' in its workspace",
                    binding.source_request_id, binding.source_path
                )));
            }
            bound.push(key.clone());
        }
        Ok(bound)
    }

    /// The workspace of request `request_id`'s succeeded run, brought here when it is kept in
    /// shared storage.
    async fn source_workspace(&self, request_id: &str) -> Result<PathBuf> {
        let request = self.store.request(request_id).await?.ok_or_else(|| {
            Error::not_found(format!("Workspace source request '{request_id}' not found"))
        })?;
        let run = match &request.run_id {
            Some(run_id) => self.store.run(run_id).await?,
            None => None,
        };
        let Some(run) = run.filter(|r| r.status == RunStatus::Succeeded) else {
            return Err(Error::conflict(format!(
                "Workspace source request '{request_id}' has not succeeded: only a succeeded \
                 run's workspace can be reused"
            )));
        };
        if !self.bring_back(&run.run_id).await {
            return Err(Error::conflict(format!(
                "The workspace of request '{request_id}' is not on this node (or was deleted): \
                 create the job on the node that ran it, or keep runs in shared storage"
            )));
        }
        Ok(self.folder(&run.run_id).workspace())
    }

    /// At a run's first turn: its workspace gets the source's files (its own uploads win), then
    /// the bound files as its file inputs.
    pub(super) async fn seed_workspace(
        &self,
        reuse: &WorkspaceReuse,
        folder: &RunFolder,
    ) -> Result<()> {
        let source = self.source_workspace(&reuse.request_id).await?;
        let mut bound = Vec::new();
        for binding in &reuse.file_bindings {
            let from = self.source_workspace(&binding.source_request_id).await?;
            bound.push((from, binding.source_path.clone(), binding.input_key.clone()));
        }
        let (workspace, uploads) = (folder.workspace(), folder.uploads());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            copy_plain_tree(&source, &workspace)?;
            std::fs::create_dir_all(&uploads)?;
            for (from, path, key) in bound {
                let mut file = open_beneath(&from, Path::new(&path))?;
                let target = uploads.join(&key);
                let _ = std::fs::remove_file(&target);
                std::io::copy(&mut file, &mut std::fs::File::create_new(&target)?)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::Internal(e.into()))?
        .map_err(|e| {
            Error::conflict(format!(
                "The reused workspace could not be copied into the run: {e}"
            ))
        })
    }
}

/// Copies the folders and plain files under `from` into `to`, leaving out top-level hidden
/// entries and anything `to` already has.
fn copy_plain_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let walk = walkdir::WalkDir::new(from)
        .min_depth(1)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| e.depth() != 1 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walk {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(from)
            .map_err(std::io::Error::other)?;
        let target = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if entry.file_type().is_file() && !target.exists() {
            // A file with another link, or one that became a link, is not copied.
            if let Ok(mut file) = open_beneath(from, rel) {
                std::io::copy(&mut file, &mut std::fs::File::create_new(&target)?)?;
            }
        }
    }
    Ok(())
}
