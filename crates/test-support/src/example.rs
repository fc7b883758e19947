//! The example client (`skill-runner-example-client`) as its own process on port 0, pointed at
//! a backend; killed when dropped.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::spawn_listening;

pub struct ExampleClient {
    child: Child,
    pub base: String,
    pub recordings: tempfile::TempDir,
    log: Arc<Mutex<Vec<String>>>,
}

impl ExampleClient {
    /// The client of the service at `backend` (a base URL), with extra environment variables.
    pub fn start(backend: &str, env: &[(&str, &str)]) -> Self {
        let recordings = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(super::bin("skill-runner-example-client"));
        cmd.env_remove("RUST_LOG")
            .env("SKILL_RUNNER_E2E_CLIENT_PORT", "0")
            .env("SKILL_RUNNER_E2E_CLIENT_BACKEND_BASE_URL", backend)
            .env("SKILL_RUNNER_E2E_CLIENT_RECORDINGS_DIR", recordings.path())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (child, base, log) = spawn_listening(cmd);
        Self {
            child,
            base,
            recordings,
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for ExampleClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
