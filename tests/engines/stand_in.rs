//! Stand-ins for the agent CLIs that are not on the npm registry (iFlow, CodeBuddy): an
//! executable in `crates/engines/tests/fixtures/<cli>/` that records how the service started it
//! and replays output in the CLI's documented format (see each folder's README). The scenario
//! it plays is `FAKE_CLI_SCENARIO`; each call appends a record to `.fake-cli-calls.jsonl` in
//! the turn's workspace (the only place a confined turn may write).

use skill_runner_test_support as common;

use std::path::{Path, PathBuf};

use common::{TestDirs, TestServer, report_skill};
use serde_json::{Value, json};

/// A managed npm prefix whose `bin/<cli>` is the stand-in, plus where its calls are recorded.
pub struct Stand {
    _tmp: tempfile::TempDir,
    cli: &'static str,
    prefix: String,
    pub agent_home: PathBuf,
    /// The stand-in and its recordings, which confined turns may read.
    fixtures: String,
    /// The runs folders of the servers started, where the stand-in leaves its records.
    runs: std::cell::RefCell<Vec<PathBuf>>,
    /// Records collected so far (removed from the run folders once read).
    seen: std::cell::RefCell<Vec<Value>>,
}

impl Stand {
    pub fn new(cli: &'static str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("npm/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/engines/tests/fixtures")
            .join(cli);
        std::os::unix::fs::symlink(fixtures.join(cli), bin.join(cli)).unwrap();
        Self {
            cli,
            prefix: tmp.path().join("npm").to_str().unwrap().to_owned(),
            agent_home: tmp.path().join("agent-home"),
            fixtures: fixtures.to_str().unwrap().to_owned(),
            runs: Default::default(),
            seen: Default::default(),
            _tmp: tmp,
        }
    }

    /// The recorded output file `name` of this CLI.
    pub fn recorded(&self, name: &str) -> String {
        std::fs::read_to_string(Path::new(&self.fixtures).join(name)).unwrap()
    }

    /// The service, with the stand-in playing `scenario`.
    pub fn server(&self, scenario: &str, extra: &[(&str, &str)]) -> TestServer {
        self.server_with(scenario, extra, &[])
    }

    /// [`Self::server`] with `skills` installed besides `reporter`.
    pub fn server_with(
        &self,
        scenario: &str,
        extra: &[(&str, &str)],
        skills: &[common::Package],
    ) -> TestServer {
        let dirs = TestDirs::new();
        report_skill("reporter").write_into(&dirs.skills);
        for skill in skills {
            skill.write_into(&dirs.skills);
        }
        self.runs.borrow_mut().push(dirs.data.join("runs"));
        let mut env = vec![
            ("SKILL_RUNNER_NPM_PREFIX", self.prefix.as_str()),
            ("SKILL_RUNNER_AGENT_HOME", self.agent_home.to_str().unwrap()),
            ("SKILL_RUNNER_SANDBOX_READ_PATHS", self.fixtures.as_str()),
            // The stand-in's own switches reach it only when passed through.
            (
                "SKILL_RUNNER_CHILD_ENV_PASSTHROUGH",
                "FAKE_CLI_SCENARIO,FAKE_CLI_REFRESH",
            ),
            ("FAKE_CLI_SCENARIO", scenario),
            // iflow is a legacy engine, as the reference marks it: new runs only while allowed.
            ("SKILL_RUNNER_LEGACY_ENGINES", "iflow"),
        ];
        env.extend_from_slice(extra);
        TestServer::start_with(dirs, &env)
    }

    /// Starts a job of this CLI's engine in `mode`.
    pub async fn start_job(&self, server: &TestServer, mode: &str) -> String {
        server
            .create_job(
                json!({"skill_id": "reporter", "engine": self.cli, "input": {"text": "go"},
                               "runtime_options": {"execution_mode": mode}}),
            )
            .await
    }

    /// Every call of the stand-in so far, in order. Each run's record is taken out of its
    /// workspace, so the run folders hold only what the service and the CLI wrote.
    pub fn calls(&self) -> Vec<Value> {
        for runs in self.runs.borrow().iter() {
            for run in std::fs::read_dir(runs).into_iter().flatten().flatten() {
                let file = run.path().join("workspace/.fake-cli-calls.jsonl");
                if let Ok(text) = std::fs::read_to_string(&file) {
                    let mut seen = self.seen.borrow_mut();
                    seen.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
                    std::fs::remove_file(&file).unwrap();
                }
            }
        }
        let mut all = self.seen.borrow().clone();
        all.sort_by(|a, b| a["t"].as_f64().partial_cmp(&b["t"].as_f64()).unwrap());
        all
    }
}

impl Stand {
    /// An interactive run: it waits on the recorded question, the reply queues it, and it
    /// succeeds. Returns the request id.
    pub async fn answered_run(&self, server: &TestServer) -> String {
        let rid = self.start_job(server, "interactive").await;
        let path = format!("/v1/jobs/{rid}");
        let status = server
            .wait_status(&path, &["waiting_user", "failed", "succeeded"])
            .await;
        assert_eq!(status["status"], "waiting_user", "{status}");
        let (_, pending) = server.get(&format!("{path}/interaction/pending")).await;
        assert_eq!(pending["pending"]["prompt"], "Which colour, please?");
        let (code, body) = server
            .post_json(
                &format!("{path}/interaction/reply"),
                json!({"interaction_id": 1, "response": "teal-green"}),
            )
            .await;
        assert_eq!(code, 200, "{body}");
        let status = server.wait_job(&rid).await;
        assert_eq!(status["status"], "succeeded", "{status}");
        rid
    }

    /// A CLI that never answers: the run fails `TIMEOUT` after a 2 s hard timeout and leaves
    /// no process behind.
    pub async fn times_out(&self, endpoint: &[(&str, &str)]) {
        let mut env = endpoint.to_vec();
        env.extend([
            ("SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", "2"),
            ("SKILL_RUNNER_KILL_GRACE_SECONDS", "1"),
        ]);
        let server = self.server("hang", &env);
        let rid = self.start_job(&server, "auto").await;
        let status = server.wait_job(&rid).await;
        assert_eq!(
            (status["status"].as_str(), status["error"]["code"].as_str()),
            (Some("failed"), Some("TIMEOUT")),
            "{status}"
        );
        let left = common::processes_in(&server.run_dir(&status));
        assert!(left.is_empty(), "processes left: {left:?}");
    }
}

/// The argument after `flag` in a recorded call.
pub fn arg_after<'a>(call: &'a Value, flag: &str) -> Option<&'a str> {
    let argv = call["argv"].as_array().unwrap();
    let at = argv.iter().position(|a| a == flag)?;
    argv.get(at + 1)?.as_str()
}
