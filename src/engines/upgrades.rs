//! Engine CLI upgrades: `npm install` of each CLI's package into the managed npm prefix, one
//! request at a time, recorded in the store with each engine's status, output and error.
//!
//! The package installed is `<package>@latest` unless `SKILL_RUNNER_<ENGINE>_NPM_PACKAGE` names
//! another npm spec (a pinned version, a tarball, a mirror's URL). An upgrade under way when the
//! service stops is marked failed at the next start; nothing waits for it.

use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio_util::task::TaskTracker;

use super::{Engine, Engines};
use crate::clock;
use crate::store::{Store, Upgrade, UpgradeResult};

/// How long one `npm install` may take.
const NPM_TIMEOUT: Duration = Duration::from_secs(900);
/// The end of each output kept in the record.
const OUTPUT_KEPT: usize = 64 * 1024;

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
    tracker: TaskTracker,
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
    pub fn new(store: Store, engines: Engines) -> Self {
        Self {
            store,
            engines,
            tracker: TaskTracker::new(),
        }
    }

    /// Marks upgrades a stop interrupted as failed.
    pub async fn recover(&self) -> anyhow::Result<()> {
        for mut upgrade in self.store.unfinished_upgrades().await? {
            for result in upgrade.results.values_mut() {
                if matches!(result.status.as_str(), "queued" | "running") {
                    result.status = "failed".into();
                    result.error =
                        Some("Interrupted: the service stopped during the upgrade".into());
                }
            }
            self.store
                .save_upgrade(&upgrade.request_id, "failed", &upgrade.results)
                .await?;
        }
        Ok(())
    }

    /// Records an upgrade of `scope` and starts it.
    pub async fn start(&self, scope: Scope) -> Result<Upgrade, StartError> {
        let targets: Vec<Engine> = match scope {
            Scope::Single(engine) => vec![engine],
            Scope::All => Engine::ALL
                .into_iter()
                .filter(|e| self.engines.cli(*e).is_some())
                .collect(),
        };
        let now = clock::now();
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
            status: "queued".into(),
            results: targets
                .iter()
                .map(|e| (e.to_string(), UpgradeResult::queued()))
                .collect(),
            created_at: now.clone(),
            updated_at: now,
        };
        if !self.store.insert_upgrade(&upgrade).await? {
            return Err(StartError::Busy);
        }
        let (store, engines) = (self.store.clone(), self.engines.clone());
        let run = upgrade.clone();
        self.tracker.spawn(async move {
            let id = run.request_id.clone();
            if let Err(e) = execute(&store, &engines, run, &targets).await {
                tracing::error!(request_id = %id, error = format!("{e:#}"), "engine upgrade failed");
            }
        });
        Ok(upgrade)
    }

    /// Waits up to `grace` for an upgrade under way.
    pub async fn shutdown(&self, grace: Duration) {
        self.tracker.close();
        let _ = tokio::time::timeout(grace, self.tracker.wait()).await;
    }
}

/// Installs each target in turn, saving the record after every step.
async fn execute(
    store: &Store,
    engines: &Engines,
    upgrade: Upgrade,
    targets: &[Engine],
) -> anyhow::Result<()> {
    let mut results = upgrade.results;
    for engine in targets {
        let key = engine.to_string();
        results.insert(
            key.clone(),
            UpgradeResult {
                status: "running".into(),
                ..UpgradeResult::queued()
            },
        );
        store
            .save_upgrade(&upgrade.request_id, "running", &results)
            .await?;
        let cli = engines.cli(*engine).expect("upgrade targets have a CLI");
        let spec = engines
            .config()
            .packages
            .get(&key)
            .cloned()
            .unwrap_or_else(|| format!("{}@latest", cli.package));
        let result = npm_install(&engines.config().npm_prefix, &spec).await;
        tracing::info!(engine = %key, spec, status = %result.status, "engine upgrade step");
        results.insert(key, result);
        store
            .save_upgrade(&upgrade.request_id, "running", &results)
            .await?;
    }
    engines.forget_versions();
    let all_ok = results.values().all(|r| r.status == "succeeded");
    let status = if all_ok { "succeeded" } else { "failed" };
    store
        .save_upgrade(&upgrade.request_id, status, &results)
        .await
}

/// `npm install --global --prefix <prefix> <spec>`, with its output and how it ended.
async fn npm_install(prefix: &Path, spec: &str) -> UpgradeResult {
    let mut command = tokio::process::Command::new("npm");
    command
        .args(["install", "--global", "--prefix"])
        .arg(prefix)
        .args(["--no-audit", "--no-fund", "--no-update-notifier", spec])
        .env("NPM_CONFIG_UPDATE_NOTIFIER", "false")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let failed = |error: String, stdout: String, stderr: String| UpgradeResult {
        status: "failed".into(),
        stdout,
        stderr,
        error: Some(error),
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return failed(
                format!("Cannot run npm ({e}): install Node.js and npm on the server"),
                String::new(),
                String::new(),
            );
        }
    };
    let (mut out, mut err) = (
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let finished = tokio::time::timeout(NPM_TIMEOUT, async {
        let (_, _, status) = tokio::join!(
            out.read_to_end(&mut stdout),
            err.read_to_end(&mut stderr),
            child.wait()
        );
        status
    })
    .await;
    let (stdout, stderr) = (tail(&stdout), tail(&stderr));
    match finished {
        Ok(Ok(status)) if status.success() => UpgradeResult {
            status: "succeeded".into(),
            stdout,
            stderr,
            error: None,
        },
        Ok(Ok(status)) => failed(
            match status.code() {
                Some(code) => format!("Upgrade command exited with code {code}"),
                None => "Upgrade command was killed by a signal".into(),
            },
            stdout,
            stderr,
        ),
        Ok(Err(e)) => failed(format!("Cannot wait for npm: {e}"), stdout, stderr),
        Err(_) => failed(
            format!(
                "Upgrade command timed out after {} s",
                NPM_TIMEOUT.as_secs()
            ),
            stdout,
            stderr,
        ),
    }
}

/// The last [`OUTPUT_KEPT`] bytes of an output, as text.
fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(OUTPUT_KEPT);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
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

    #[test]
    fn outputs_keep_their_end() {
        let long = vec![b'a'; OUTPUT_KEPT + 10];
        assert_eq!(tail(&long).len(), OUTPUT_KEPT);
        assert_eq!(tail(b"short"), "short");
    }
}
