//! What clients read back about a request (status, result, artifacts, logs, bundle), and cancel.
//! The same functions serve `/v1/jobs/*` and `/v1/temp-skill-runs/*`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use skill_runner_types::RelPath;

use super::cache::{hash_copy, hex_digest};
use super::{Jobs, Scope};
use crate::browse::{self, Preview, TreeEntry};
use crate::error::{Error, Result};
use crate::run_folder::{HOME_IN_FOLDER as HIDDEN_HOME, RunFolder, open_beneath};
use crate::runner::list_artifacts;
use crate::store::{Request, Run, RunCursor, RunFilter, RunStatus};
use skill_runner_skill::walk::files_under;

/// The last part of a log, and whether it was cut there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub text: String,
    pub cut: bool,
}

/// The ends of a run's three logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logs {
    pub prompt: Tail,
    pub stdout: Tail,
    pub stderr: Tail,
}

/// At most this much of each log's end is returned by `/logs`: a run may print gigabytes. The
/// event stream serves all of it, from any offset.
pub const LOG_TAIL_BYTES: u64 = 1024 * 1024;

/// One of a run's logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
    Prompt,
}

/// Bytes `from..to` of a log of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSpan {
    pub from: u64,
    pub to: u64,
    pub size: u64,
    pub bytes: Vec<u8>,
}

/// The last [`LOG_TAIL_BYTES`] of `path` (empty when it does not exist) and whether it was cut;
/// a cut tail starts at the next whole UTF-8 character.
async fn log_tail(path: PathBuf) -> Tail {
    let span = read_span(
        path,
        |size| size.saturating_sub(LOG_TAIL_BYTES),
        LOG_TAIL_BYTES,
    )
    .await;
    let skip = if span.from > 0 {
        span.bytes
            .iter()
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count()
    } else {
        0
    };
    Tail {
        text: String::from_utf8_lossy(&span.bytes[skip..]).into_owned(),
        cut: span.from > 0,
    }
}

/// At most `max` bytes of `path` from the offset `start` picks for its size (clamped to it);
/// empty when the file does not exist or cannot be read. Never waited on, never through a
/// link: only the service writes the logs, but a run folder is a turn's neighbourhood.
async fn read_span(path: PathBuf, start: impl FnOnce(u64) -> u64, max: u64) -> LogSpan {
    use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
    let empty = LogSpan {
        from: 0,
        to: 0,
        size: 0,
        bytes: Vec::new(),
    };
    let Ok(file) = crate::run_folder::open_plain(&path) else {
        return empty;
    };
    let mut file = tokio::fs::File::from_std(file);
    let size = file.metadata().await.map_or(0, |m| m.len());
    let from = start(size).min(size);
    let mut bytes = Vec::new();
    let read = async {
        file.seek(std::io::SeekFrom::Start(from)).await?;
        file.take(max.min(size - from))
            .read_to_end(&mut bytes)
            .await
    };
    if read.await.is_err() {
        return LogSpan { size, ..empty };
    }
    LogSpan {
        from,
        to: from + bytes.len() as u64,
        size,
        bytes,
    }
}

/// A built bundle, ready to send.
#[derive(Debug)]
pub struct Bundle {
    pub path: PathBuf,
    pub file_name: &'static str,
}

/// How often a wait for a run reads the run again without news of it.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl Jobs {
    /// The run's folder, when this node holds it. Among nodes, a run's files stay with the
    /// node that ran it: another node sends the read there ([`Error::HeldElsewhere`]), or,
    /// when that node is gone, brings the run's copy back from shared storage (409 without).
    async fn held_folder(&self, run: &Run) -> Result<RunFolder> {
        let folder = self.folder(&run.run_id);
        let Some(cluster) = self.store.cluster() else {
            return Ok(folder);
        };
        if run.turn == 0 || folder.is_here().await {
            return Ok(folder);
        }
        match cluster.holder(&run.run_id).await? {
            Some(node) if node.id != cluster.node_id() => Err(Error::HeldElsewhere(node)),
            Some(_) => Ok(folder),
            None if self.bring_back(&run.run_id).await => Ok(folder),
            None => Err(Error::conflict(
                "The run's files were kept by a node that has left the cluster, and shared \
                 storage (SKILL_RUNNER_STORAGE_URL) has no copy of them; they can be read again \
                 once that node is back",
            )),
        }
    }

    /// The request and its run; 404 before the run exists.
    pub async fn request_and_run(&self, scope: &Scope, request_id: &str) -> Result<(Request, Run)> {
        let request = self.request_in(scope, request_id).await?;
        let run_id = request.run_id.as_deref().ok_or_else(|| {
            Error::not_found("Run not found: the request is waiting for its upload")
        })?;
        let run = self
            .store
            .run(run_id)
            .await?
            .ok_or_else(|| Error::not_found("Run not found"))?;
        Ok((request, run))
    }

    /// The request and its run, if it has one yet.
    pub async fn status(&self, scope: &Scope, request_id: &str) -> Result<(Request, Option<Run>)> {
        let request = self.request_in(scope, request_id).await?;
        let run = match &request.run_id {
            Some(id) => self.store.run(id).await?,
            None => None,
        };
        Ok((request, run))
    }

    /// The failed attempts of run `run_id` that were tried again (the caller checked its
    /// scope).
    pub async fn retried_attempts(
        &self,
        run_id: &str,
    ) -> Result<Vec<crate::store::RetriedAttempt>> {
        Ok(self.store.retried_attempts(run_id).await?)
    }

    /// The runs `filter` selects, newest first, and the cursor of the page after them
    /// (`None` on the last page).
    ///
    /// A caller bound to a tenant sees only that tenant's runs, whatever tenant the filter
    /// names; an admin sees every tenant's, or the one the filter names.
    pub async fn list(
        &self,
        scope: &Scope,
        filter: &RunFilter,
    ) -> Result<(Vec<(Request, Run)>, Option<RunCursor>)> {
        // One more than asked tells whether another page follows.
        let asked = RunFilter {
            limit: filter.limit + 1,
            tenant_id: match &scope.tenant {
                Some(own) => Some(own.to_string()),
                None => filter.tenant_id.clone(),
            },
            ..filter.clone()
        };
        let mut rows = self.store.list_runs(&asked).await?;
        let more = rows.len() > filter.limit as usize;
        rows.truncate(filter.limit as usize);
        let next = match (more, rows.last()) {
            (true, Some((request, _))) => self.store.run_cursor(&request.request_id).await?,
            _ => None,
        };
        Ok((rows, next))
    }

    /// The file tree of a request's run folder.
    pub async fn run_files(
        &self,
        scope: &Scope,
        request_id: &str,
    ) -> Result<(Run, Vec<TreeEntry>)> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let dir = self.held_folder(&run).await?.root().to_path_buf();
        let entries =
            tokio::task::spawn_blocking(move || match browse::tree(&dir, &[HIDDEN_HOME]) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                other => other,
            })
            .await
            .map_err(anyhow::Error::from)??;
        Ok((run, entries))
    }

    /// The files uploaded for a request's run, as paths in its folder (`workspace/uploads/…`).
    pub async fn run_uploads(&self, scope: &Scope, request_id: &str) -> Result<Vec<String>> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let dir = self.held_folder(&run).await?.uploads();
        let entries = tokio::task::spawn_blocking(move || match browse::tree(&dir, &[]) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            other => other,
        })
        .await
        .map_err(anyhow::Error::from)??;
        let prefix = format!("{}/uploads", crate::run_folder::WORKSPACE);
        Ok(entries
            .into_iter()
            .filter(|e| !e.is_dir)
            .map(|e| format!("{prefix}/{}", e.rel_path))
            .collect())
    }

    /// A preview of one file of a request's run folder, with its normalised path.
    pub async fn run_file(
        &self,
        scope: &Scope,
        request_id: &str,
        path: &str,
    ) -> Result<(Run, String, Preview)> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let path = browse::relative_path(path)?;
        let dir = self.held_folder(&run).await?.root().to_path_buf();
        let rel = path.clone();
        let preview =
            tokio::task::spawn_blocking(move || browse::preview(&dir, &rel, &[HIDDEN_HOME]))
                .await
                .map_err(anyhow::Error::from)??;
        Ok((run, path.to_string(), preview))
    }

    /// The result envelope; 404 until the run ended with one. A run still under way is waited
    /// for up to `wait`; one that waits for its user or a login answers at once: nothing ends it
    /// but the caller.
    pub async fn result(
        &self,
        scope: &Scope,
        request_id: &str,
        wait: std::time::Duration,
    ) -> Result<Value> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let run = self
            .settled(run, wait, |run| {
                run.result.is_some()
                    || run.status.is_terminal()
                    || matches!(run.status, RunStatus::WaitingUser | RunStatus::WaitingAuth)
            })
            .await?;
        let Some(result) = run.result else {
            return Err(Error::not_found(if run.status.is_terminal() {
                "Result not found: the run failed before its engine started".to_owned()
            } else {
                format!("Result not ready: the run is {}", run.status.as_str())
            }));
        };
        let result: Value = serde_json::from_str(&result).map_err(anyhow::Error::from)?;
        Ok(json!({"request_id": request_id, "result": result}))
    }

    /// Run `run_id` read again until `settled` holds for it, `limit` passes or the service
    /// stops, looking at least every `recheck` (another node's run moves without a tick
    /// here); the last read, `None` when the run is gone.
    pub(super) async fn read_until(
        &self,
        run_id: &str,
        limit: std::time::Duration,
        recheck: std::time::Duration,
        settled: impl Fn(&Run) -> bool,
    ) -> anyhow::Result<Option<Run>> {
        let until = tokio::time::Instant::now() + limit;
        let mut subscription = self.feeds.subscribe(run_id);
        loop {
            // Read after subscribing, so a move between the read and the wait is not missed.
            let Some(run) = self.store.run(run_id).await? else {
                return Ok(None);
            };
            if settled(&run) || tokio::time::Instant::now() >= until {
                return Ok(Some(run));
            }
            let next = until.min(tokio::time::Instant::now() + recheck);
            if let super::live::Wake::Closed = subscription.wait(next).await {
                return Ok(Some(run));
            }
        }
    }

    /// `run` as it is once `settled` holds or `wait` has passed.
    pub(super) async fn settled(
        &self,
        run: Run,
        wait: std::time::Duration,
        settled: impl Fn(&Run) -> bool,
    ) -> Result<Run> {
        if wait.is_zero() || settled(&run) {
            return Ok(run);
        }
        self.read_until(&run.run_id, wait, RECHECK, settled)
            .await?
            .ok_or_else(|| Error::not_found("Run not found"))
    }

    pub async fn artifacts(&self, scope: &Scope, request_id: &str) -> Result<Value> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let artifacts = list_artifacts(&self.held_folder(&run).await?).await?;
        Ok(json!({"request_id": request_id, "artifacts": artifacts}))
    }

    /// The file behind `artifacts/<path>`, opened, and its name: 404 without the prefix or when
    /// absent, 400 for paths that try to leave the artifacts folder. The turn wrote the folder,
    /// so no link is followed and a file with another link (maybe outside the run) is refused.
    pub async fn artifact_file(
        &self,
        scope: &Scope,
        request_id: &str,
        path: &str,
    ) -> Result<(std::fs::File, String)> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let Some(rel) = path.strip_prefix("artifacts/") else {
            return Err(Error::not_found(
                "Artifact not found: the path must start with artifacts/",
            ));
        };
        let Ok(rel) = RelPath::parse(rel) else {
            return Err(Error::invalid(format!("Invalid artifact path '{path}'")));
        };
        let rel = Path::new(crate::run_folder::WORKSPACE)
            .join("artifacts")
            .join(rel);
        self.served_file(&run, rel, "Artifact").await
    }

    /// Any file of the run's folder but its home (`.../file?path=&download=true`), opened as
    /// [`Self::artifact_file`] opens an artifact.
    pub async fn run_file_download(
        &self,
        scope: &Scope,
        request_id: &str,
        path: &str,
    ) -> Result<(std::fs::File, String)> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let rel = browse::relative_path(path)?;
        if browse::is_hidden(rel.as_str(), &[HIDDEN_HOME]) {
            return Err(Error::not_found("File not found"));
        }
        self.served_file(&run, PathBuf::from(rel.as_str()), "File")
            .await
    }

    /// `rel` under the run's folder, opened without following a link, if it is a plain file
    /// no larger than what is served.
    async fn served_file(
        &self,
        run: &Run,
        rel: PathBuf,
        what: &str,
    ) -> Result<(std::fs::File, String)> {
        let root = self.held_folder(run).await?.root().to_path_buf();
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let opened = tokio::task::spawn_blocking(move || open_beneath(&root, &rel))
            .await
            .map_err(anyhow::Error::from)?;
        match opened {
            Ok(file) => {
                let size = file.metadata().map_err(anyhow::Error::from)?.len();
                let max = self.config.limits.max_served_bytes;
                if size > max {
                    return Err(Error::TooLarge(
                        format!(
                            "{what} not served: it is {size} bytes, more than the {} MiB \
                             served at most (SKILL_RUNNER_SERVE_MAX_MB)",
                            max >> 20
                        )
                        .into(),
                    ));
                }
                Ok((file, name))
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(Error::not_found(
                format!("{what} not served: {e} (only regular files are)"),
            )),
            Err(_) => Err(Error::not_found(format!("{what} not found"))),
        }
    }

    /// The end of each log of the request's run.
    pub async fn logs(&self, scope: &Scope, request_id: &str) -> Result<Logs> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let folder = self.held_folder(&run).await?;
        Ok(Logs {
            prompt: log_tail(folder.prompt_log()).await,
            stdout: log_tail(folder.stdout_log()).await,
            stderr: log_tail(folder.stderr_log()).await,
        })
    }

    /// Bytes `from..to` (`to` exclusive, at most [`LOG_TAIL_BYTES`] after `from` and clamped
    /// to the log's size) of one log of the request's run. 400 when `to` is before `from`.
    pub async fn log_range(
        &self,
        scope: &Scope,
        request_id: &str,
        stream: LogStream,
        from: u64,
        to: Option<u64>,
    ) -> Result<LogSpan> {
        if let Some(to) = to.filter(|to| *to < from) {
            return Err(Error::invalid(format!(
                "byte_to ({to}) is before byte_from ({from})"
            )));
        }
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let folder = self.held_folder(&run).await?;
        let path = match stream {
            LogStream::Stdout => folder.stdout_log(),
            LogStream::Stderr => folder.stderr_log(),
            LogStream::Prompt => folder.prompt_log(),
        };
        let max = to.map_or(LOG_TAIL_BYTES, |to| (to - from).min(LOG_TAIL_BYTES));
        Ok(read_span(path, |_| from, max).await)
    }

    /// The run's bundle, built on first request: the debug bundle when `debug` asks for it
    /// (`.../bundle/debug`) or the request did (`runtime_options.debug`, as clients before the
    /// reference's v0.4 ask), else the plain one.
    pub async fn bundle(&self, scope: &Scope, request_id: &str, debug: bool) -> Result<Bundle> {
        let (request, run) = self.request_and_run(scope, request_id).await?;
        if !run.status.is_terminal() {
            return Err(Error::conflict(format!(
                "Bundle not available: the run is {}",
                run.status.as_str()
            )));
        }
        let debug = debug || request.runtime_options.debug;
        let (file_name, manifest_name) = if debug {
            ("run_bundle_debug.zip", "manifest_debug.json")
        } else {
            ("run_bundle.zip", "manifest.json")
        };
        let folder = self.held_folder(&run).await?;
        let path = folder.bundle_dir().join(file_name);
        // One build at a time: many requests for a bundle not built yet wait for one build
        // instead of each zipping the same artifacts. A bundle already built waits for none.
        let _building = match path.exists() {
            true => None,
            false => Some(self.bundles.lock().await),
        };
        if !path.exists() {
            let target = path.clone();
            let max = self.config.limits.max_served_bytes;
            let feedback = request.runtime_options.collect_skill_run_feedback;
            tokio::task::spawn_blocking(move || {
                build_bundle(&folder, &target, manifest_name, debug, feedback, max)
            })
            .await
            .map_err(anyhow::Error::from)??;
        }
        Ok(Bundle { path, file_name })
    }
}

/// Where a file of the run folder (`rel`) goes in the debug bundle.
fn debug_name(rel: &str) -> String {
    let artifacts = format!("{}/artifacts/", crate::run_folder::WORKSPACE);
    match rel {
        "input.json" => "request.json".to_owned(),
        _ => match rel.strip_prefix(&artifacts) {
            Some(artifact) => format!("artifacts/{artifact}"),
            None => rel.to_owned(),
        },
    }
}

/// Zips the bundle's files plus `bundle/<manifest_name>` (`{files: [{path, size, sha256}]}`)
/// into `target`, through a temporary file. Only the service builds bundles, from the result
/// and the artifacts (`artifacts/...`), or, for debug bundles, the whole run folder but the
/// bundles and the home, laid out as the reference's runner reads one: the artifacts
/// run-relative (`artifacts/...`, as in the plain bundle and the result), the request as
/// `request.json`, the rest (`logs/`, `result/`, the workspace) where it is. A plain bundle of a
/// request that asked for a feedback note has it beside the result, as the reference's does
/// (`result/_skill_run_feedback.md`). Files are opened without following links; symlinks and
/// files with more than one link are left out.
fn build_bundle(
    folder: &RunFolder,
    target: &Path,
    manifest_name: &str,
    debug: bool,
    feedback: bool,
    max_bytes: u64,
) -> anyhow::Result<()> {
    let root = folder.root();
    // (name in the zip, path under the run folder)
    let files: Vec<(String, PathBuf)> = if debug {
        files_under(root)?
            .into_iter()
            .filter(|(rel, _)| {
                !rel.starts_with("bundle/") && !browse::is_hidden(rel, &[HIDDEN_HOME])
            })
            .map(|(rel, _)| (debug_name(&rel), PathBuf::from(rel)))
            .collect()
    } else {
        let artifacts = files_under(&folder.artifacts())?
            .into_iter()
            .map(|(rel, _)| {
                let inside = Path::new(crate::run_folder::WORKSPACE)
                    .join("artifacts")
                    .join(&rel);
                (format!("artifacts/{rel}"), inside)
            });
        let note = folder.feedback_note();
        let note = (feedback && crate::run_folder::is_plain_file(&note)).then(|| {
            (
                "result/_skill_run_feedback.md".to_owned(),
                note.strip_prefix(root)
                    .expect("in the run folder")
                    .to_path_buf(),
            )
        });
        std::iter::once((
            "result/result.json".to_owned(),
            PathBuf::from("result/result.json"),
        ))
        .chain(note)
        .chain(artifacts)
        .collect()
    };
    let dir = target.parent().expect("bundle path has a parent");
    std::fs::create_dir_all(dir)?;
    let tmp = target.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&tmp)?);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(false);
    let mut entries = Vec::new();
    let mut total = 0u64;
    for (rel, inside) in &files {
        let file = match open_beneath(root, inside) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => continue,
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata()?.len();
        if len > max_bytes - total {
            entries.push(json!({"path": rel, "size": len, "left_out": format!(
                "a bundle holds at most {} MiB of files (SKILL_RUNNER_SERVE_MAX_MB)",
                max_bytes >> 20
            )}));
            continue;
        }
        total += len;
        // Streamed: a large artifact costs a buffer, not its size in memory.
        let large = len >= u64::from(u32::MAX);
        zip.start_file(rel.as_str(), options.large_file(large))?;
        let mut hasher = Sha256::new();
        let size = hash_copy(&mut hasher, std::io::Read::take(file, len), &mut zip)?;
        entries.push(json!({"path": rel, "size": size, "sha256": hex_digest(hasher)}));
    }
    let manifest = serde_json::to_vec_pretty(&json!({"files": entries}))?;
    zip.start_file(format!("bundle/{manifest_name}"), options)?;
    zip.write_all(&manifest)?;
    zip.finish()?;
    std::fs::write(dir.join(manifest_name), &manifest)?;
    std::fs::rename(&tmp, target)?;
    Ok(())
}
