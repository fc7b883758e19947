//! Engine CLI upgrades: `npm install` of each CLI's package into the managed npm prefix, one
//! request at a time, recorded in the store with each engine's status, output and error.
//!
//! The package installed is the version this build is tested with (`<package>@<pinned>`)
//! unless `SKILL_RUNNER_<ENGINE>_NPM_PACKAGE` names another npm spec (`<package>@latest`, a
//! tarball, a mirror's URL). A CLI that is not on the public registry (iflow, codebuddy) is
//! upgraded only with such a spec: `all` leaves it out otherwise. npm's warning that a package
//! wants a newer Node.js (`EBADENGINE`) becomes a warning of the engine's result. An upgrade under way when the
//! service stops is marked failed at the next start; nothing waits for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Engine, Engines};
use crate::clock::Timestamp;
use crate::process::{Completed, Exit, ProcessSpec, Supervisor, Windows};
use crate::store::{Store, TaskStatus, Upgrade, UpgradeResult};

/// How long one `npm install` may take.
const NPM_TIMEOUT: Duration = Duration::from_secs(900);
/// The end of each output kept in the record (the whole output stays in the log files).
const OUTPUT_KEPT: u64 = 64 * 1024;
/// The error of an engine whose upgrade a stop of the service cut short.
const INTERRUPTED: &str = "Interrupted: the service stopped during the upgrade";

/// Which engines an upgrade covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Single(Engine),
    All,
}

/// Starts upgrades and runs them in the background.
#[derive(Debug)]
pub struct Upgrader {
    store: Store,
    engines: Engines,
    supervisor: Supervisor,
    /// `<data>/upgrades`: each upgrade's npm output, by request and engine.
    logs: PathBuf,
    tracker: TaskTracker,
    /// Cancelled when the service stops.
    stopping: CancellationToken,
}

/// Why an upgrade did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("An engine upgrade is already queued or running; wait for it to finish")]
    Busy,
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

impl Upgrader {
    /// Upgrades keeping npm's output of each under `logs`.
    pub fn new(store: Store, engines: Engines, supervisor: Supervisor, logs: PathBuf) -> Self {
        Self {
            store,
            engines,
            supervisor,
            logs,
            tracker: TaskTracker::new(),
            stopping: CancellationToken::new(),
        }
    }

    /// Marks upgrades a stop interrupted as failed.
    pub async fn recover(&self) -> anyhow::Result<()> {
        for upgrade in self.store.unfinished_upgrades().await? {
            fail_unfinished(&self.store, &upgrade.request_id, INTERRUPTED).await?;
        }
        Ok(())
    }

    /// Records an upgrade of `scope` and starts it.
    pub async fn start(&self, scope: Scope) -> Result<Upgrade, StartError> {
        let targets: Vec<Engine> = match scope {
            Scope::Single(engine) => vec![engine],
            Scope::All => Engine::ALL
                .into_iter()
                .filter(|e| {
                    self.engines
                        .cli(*e)
                        .is_some_and(|cli| cli.install_spec(self.engines.config(), *e).is_some())
                })
                .collect(),
        };
        let now = Timestamp::now();
        let upgrade = Upgrade {
            request_id: uuid::Uuid::new_v4().to_string(),
            mode: match scope {
                Scope::Single(_) => "single".into(),
                Scope::All => "all".into(),
            },
            requested_engine: match scope {
                Scope::Single(engine) => Some(engine.to_string()),
                Scope::All => None,
            },
            status: TaskStatus::Queued,
            results: targets
                .iter()
                .map(|e| (e.to_string(), UpgradeResult::queued()))
                .collect(),
            created_at: now,
            updated_at: now,
        };
        if !self.store.insert_upgrade(&upgrade).await? {
            return Err(StartError::Busy);
        }
        let work = Work {
            store: self.store.clone(),
            engines: self.engines.clone(),
            supervisor: self.supervisor.clone(),
            logs: self.logs.join(&upgrade.request_id),
            stopping: self.stopping.clone(),
        };
        let (store, run) = (self.store.clone(), upgrade.clone());
        self.tracker.spawn(async move {
            let id = run.request_id.clone();
            // Its own task, so that an error or a panic still ends the record, which would
            // otherwise hold the one-upgrade-at-a-time slot until a restart.
            let problem = match tokio::spawn(async move { work.execute(run, &targets).await }).await
            {
                Ok(Ok(())) => return,
                Ok(Err(e)) => format!("{e:#}"),
                Err(e) => e.to_string(),
            };
            tracing::error!(request_id = %id, error = problem, "engine upgrade failed");
            if let Err(e) = fail_unfinished(&store, &id, "Internal error during the upgrade (see the service log)").await {
                tracing::error!(request_id = %id, error = format!("{e:#}"), "cannot end the upgrade record");
            }
        });
        Ok(upgrade)
    }

    /// Stops an upgrade under way (its npm group is killed) and waits up to `grace` for its
    /// record to be saved.
    pub async fn shutdown(&self, grace: Duration) {
        self.stopping.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(grace, self.tracker.wait()).await;
    }
}

/// Ends an upgrade as `failed`, with `error` for each engine it had not finished.
async fn fail_unfinished(store: &Store, request_id: &str, error: &str) -> anyhow::Result<()> {
    let Some(mut upgrade) = store.upgrade(request_id).await? else {
        return Ok(());
    };
    for result in upgrade.results.values_mut() {
        if result.status.is_active() {
            result.status = TaskStatus::Failed;
            result.error = Some(error.into());
        }
    }
    store
        .save_upgrade(request_id, TaskStatus::Failed, &upgrade.results)
        .await
}

/// What a running upgrade needs.
struct Work {
    store: Store,
    engines: Engines,
    supervisor: Supervisor,
    /// `<data>/upgrades/<request_id>`.
    logs: PathBuf,
    stopping: CancellationToken,
}

impl Work {
    /// Installs each target in turn, saving the record after every step.
    async fn execute(self, upgrade: Upgrade, targets: &[Engine]) -> anyhow::Result<()> {
        let mut results = upgrade.results;
        for engine in targets {
            let key = engine.to_string();
            results.insert(
                key.clone(),
                UpgradeResult {
                    status: TaskStatus::Running,
                    ..UpgradeResult::queued()
                },
            );
            self.store
                .save_upgrade(&upgrade.request_id, TaskStatus::Running, &results)
                .await?;
            let cli = self
                .engines
                .cli(*engine)
                .expect("upgrade targets have a CLI");
            let config = self.engines.config();
            let Some(spec) = cli.install_spec(config, *engine) else {
                results.insert(
                    key.clone(),
                    UpgradeResult {
                        status: TaskStatus::Failed,
                        error: Some(format!(
                            "{} is not on the public npm registry: set \
                             SKILL_RUNNER_{}_NPM_PACKAGE to a spec npm can install (a tarball, \
                             a mirror's URL)",
                            cli.package,
                            key.to_ascii_uppercase()
                        )),
                        ..UpgradeResult::queued()
                    },
                );
                continue;
            };
            let result = npm_install(
                &self.supervisor,
                &self.stopping,
                &config.npm_prefix,
                &spec,
                &self.logs.join(&key),
            )
            .await;
            tracing::info!(engine = %key, spec, status = ?result.status, "engine upgrade step");
            results.insert(key, result);
            self.store
                .save_upgrade(&upgrade.request_id, TaskStatus::Running, &results)
                .await?;
        }
        self.engines.forget_versions();
        let all_ok = results.values().all(|r| r.status == TaskStatus::Succeeded);
        let status = if all_ok {
            TaskStatus::Succeeded
        } else {
            TaskStatus::Failed
        };
        self.store
            .save_upgrade(&upgrade.request_id, status, &results)
            .await
    }
}

/// `npm install --global --prefix <prefix> <spec>` as a supervised process group (killed whole
/// at the time limit or when the service stops), its output logged as `<logs>.stdout.txt` and
/// `<logs>.stderr.txt`.
async fn npm_install(
    supervisor: &Supervisor,
    cancel: &CancellationToken,
    prefix: &Path,
    spec: &str,
    logs: &Path,
) -> UpgradeResult {
    let failed = |error: String, stdout: String, stderr: String| UpgradeResult {
        status: TaskStatus::Failed,
        stdout,
        stderr,
        error: Some(error),
        warnings: Vec::new(),
    };
    let folder = logs.parent().unwrap_or(logs).to_path_buf();
    if let Err(e) = tokio::fs::create_dir_all(&folder).await {
        return failed(
            format!("Cannot create the upgrade's log folder: {e}"),
            String::new(),
            String::new(),
        );
    }
    let argv = ["npm", "install", "--global", "--prefix"]
        .into_iter()
        .map(str::to_owned)
        .chain([prefix.to_string_lossy().into_owned()])
        .chain(["--no-audit", "--no-fund", "--no-update-notifier", spec].map(str::to_owned))
        .collect();
    let process = ProcessSpec {
        argv,
        cwd: folder,
        // npm's own settings and the real HOME (its cache, `.npmrc`) on top of the allow-list.
        env: supervisor
            .child_env()
            .npm
            .iter()
            .cloned()
            .chain([("NPM_CONFIG_UPDATE_NOTIFIER".into(), "false".into())])
            .collect(),
        stdin: None,
        stdout_log: logs.with_extension("stdout.txt"),
        stderr_log: logs.with_extension("stderr.txt"),
        output_limit: None,
        confine: None,
        secrets: Default::default(),
    };
    let running = match supervisor.spawn(process, None).await {
        Ok(running) => running,
        Err(e) => {
            return failed(
                format!("Cannot run npm ({e}): install Node.js and npm on the server"),
                String::new(),
                String::new(),
            );
        }
    };
    let windows = Windows {
        stdout: OUTPUT_KEPT,
        stderr: OUTPUT_KEPT,
    };
    let deadline = tokio::time::Instant::now() + NPM_TIMEOUT;
    let Completed {
        exit,
        stdout,
        stderr,
    } = running.complete(deadline, cancel, windows).await;
    let error = match exit {
        Exit::Exited { code: Some(0), .. } => None,
        Exit::Exited {
            code: Some(code), ..
        } => Some(format!("Upgrade command exited with code {code}")),
        Exit::TimedOut => Some(format!(
            "Upgrade command timed out after {} s; its process group was killed",
            NPM_TIMEOUT.as_secs()
        )),
        Exit::Canceled => Some(INTERRUPTED.into()),
        other => Some(format!("Upgrade command failed: {}", other.describe())),
    };
    let warnings = node_too_old(&stderr);
    match error {
        None => UpgradeResult {
            status: TaskStatus::Succeeded,
            stdout,
            stderr,
            error: None,
            warnings,
        },
        Some(error) => UpgradeResult {
            warnings,
            ..failed(error, stdout, stderr)
        },
    }
}

/// npm's `EBADENGINE` warnings as sentences: which package wants which Node.js, and which this
/// server has (the CLI may then fail to start).
fn node_too_old(stderr: &str) -> Vec<String> {
    let value = |line: &str, key: &str| {
        let rest = line.trim().strip_prefix(key)?;
        Some(
            rest.trim()
                .trim_end_matches(',')
                .trim_matches(|c| c == '\'' || c == '"')
                .to_owned(),
        )
    };
    let mut warnings = Vec::new();
    let mut lines = stderr.lines();
    while let Some(line) = lines.next() {
        if !line.contains("EBADENGINE Unsupported engine") {
            continue;
        }
        let (mut package, mut required, mut current) = (None, None, None);
        for next in lines.by_ref() {
            let next = next.split("EBADENGINE").last().unwrap_or(next);
            if let Some(p) = value(next, "package:") {
                package = Some(p);
            } else if let Some(r) = value(next, "required:") {
                required = Some(r);
            } else if let Some(c) = value(next, "current:") {
                current = Some(c);
            }
            if next.trim() == "}" {
                break;
            }
        }
        warnings.push(format!(
            "npm: {} wants {} but this server has {}: the CLI may fail to start; install a \
             newer Node.js",
            package.as_deref().unwrap_or("a package"),
            required.as_deref().unwrap_or("another Node.js"),
            current.as_deref().unwrap_or("an older one"),
        ));
    }
    warnings
}

/// The upgrade a request body asks for, or which field is wrong and why.
pub fn scope(mode: &str, engine: Option<&str>) -> Result<Scope, (&'static str, String)> {
    match (mode, engine) {
        ("all", None) => Ok(Scope::All),
        ("all", Some(_)) => Err((
            "engine",
            "must be left out when mode is 'all' (every engine is upgraded)".into(),
        )),
        ("single", None) => Err(("engine", "is required when mode is 'single'".into())),
        ("single", Some(name)) => match Engine::parse(name) {
            Some(engine) if engine != Engine::Script => Ok(Scope::Single(engine)),
            _ => Err((
                "engine",
                format!(
                    "'{name}' is not an agent engine (codex, gemini, iflow, claude, opencode, qwen)"
                ),
            )),
        },
        (other, _) => Err((
            "mode",
            format!("'{other}' is not an upgrade mode (single or all)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npm_engine_warnings_become_sentences() {
        let stderr = "npm warn EBADENGINE Unsupported engine {
npm warn EBADENGINE   package: '@anthropic-ai/claude-code@2.1.329',
npm warn EBADENGINE   required: { node: '>=22.0.0' },
npm warn EBADENGINE   current: { node: 'v20.19.2', npm: '10.8.2' }
npm warn EBADENGINE }
added 3 packages";
        let warnings = super::node_too_old(stderr);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("@anthropic-ai/claude-code@2.1.329 wants { node: '>=22.0.0' }"),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("v20.19.2"), "{warnings:?}");
        assert!(super::node_too_old("added 1 package").is_empty());
    }

    /// The pins upgrades install are the ones the test setup installs.
    #[test]
    fn pins_match_the_install_script() {
        let script = include_str!("../../../scripts/install-agent-clis.sh");
        for cli in crate::AGENT_CLIS {
            let line = cli.pinned.map(|v| format!("\"{}@{v}\"", cli.package));
            match line {
                Some(line) => assert!(script.contains(&line), "{line} in install-agent-clis.sh"),
                None => assert!(
                    !script.contains(&format!("\"{}@", cli.package)),
                    "{}",
                    cli.package
                ),
            }
        }
    }

    #[test]
    fn request_bodies_name_the_wrong_field() {
        assert_eq!(scope("all", None).unwrap(), Scope::All);
        assert_eq!(
            scope("single", Some("qwen")).unwrap(),
            Scope::Single(Engine::Qwen)
        );
        assert_eq!(scope("all", Some("codex")).unwrap_err().0, "engine");
        assert_eq!(scope("single", None).unwrap_err().0, "engine");
        assert_eq!(scope("single", Some("script")).unwrap_err().0, "engine");
        assert_eq!(scope("single", Some("Codex")).unwrap_err().0, "engine");
        assert_eq!(scope("some", None).unwrap_err().0, "mode");
    }
}
