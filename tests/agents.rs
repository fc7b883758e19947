//! Agent engines against the real CLIs, hermetically: each test re-runs itself inside a fresh
//! loopback-only network namespace (`unshare -n`), where it starts the fake model server and the
//! service, which starts the CLI. No packet can leave the machine.
//!
//! The CLIs come from `scripts/install-agent-clis.sh` (the managed npm prefix). Without them, or
//! without network namespaces, each test prints a loud skip line; under `CI=true` a missing CLI
//! fails instead.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{FakeModel, TestDirs, TestServer, skill_package};
use serde_json::{Value, json};

const IN_NETNS: &str = "SKILL_RUNNER_TEST_IN_NETNS";

fn npm_prefix() -> PathBuf {
    if let Some(prefix) = std::env::var_os("SKILL_RUNNER_NPM_PREFIX") {
        return prefix.into();
    }
    let cache = std::env::var_os("SKILL_RUNNER_AGENT_CACHE_DIR").map_or_else(
        || {
            PathBuf::from(std::env::var("HOME").unwrap())
                .join(".local/share/skill-runner/agent-cache")
        },
        PathBuf::from,
    );
    cache.join("npm")
}

/// True inside the namespace, where the test body runs. Outside, re-runs `test` in a new
/// namespace and checks it passed (or prints why it cannot), and returns false.
fn in_netns(test: &str, cli: &str) -> bool {
    if std::env::var_os(IN_NETNS).is_some() {
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(up.success(), "cannot bring up loopback in the namespace");
        return true;
    }
    if !npm_prefix().join("bin").join(cli).is_file() {
        let line = format!(
            "skipped: {cli} CLI not installed in {} (run scripts/install-agent-clis.sh) — {test}",
            npm_prefix().display()
        );
        assert!(std::env::var_os("CI").is_none(), "{line}");
        eprintln!("\n*** {line} ***\n");
        return false;
    }
    let probe = Command::new("unshare").args(["-n", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("\n*** skipped: no network namespace ({cli}) — {test} ***\n");
        return false;
    }
    let out = Command::new("unshare")
        .arg("-n")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(IN_NETNS, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} failed in its namespace:\n{stdout}\n{stderr}"
    );
    false
}

/// A skill for agents: writes a report artifact and answers its summary.
fn report_skill(id: &str) -> common::Package {
    skill_package(id, "1.0.0")
        .runner(json!({"engines": ["codex", "gemini", "claude", "opencode", "qwen"],
                       "execution_modes": ["auto", "interactive"]}))
        .file(
            "SKILL.md",
            format!("---\nname: {id}\ndescription: writes a report\n---\n# {id}\n\nWrite artifacts/report.txt, then answer.\n"),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary", "report"],
                   "properties": {"summary": {"type": "string"}, "report": {"type": "string"}}})
            .to_string(),
        )
}

/// The service with `engine` pointed at the fake model server.
fn server_for(
    engine: &str,
    fake: &FakeModel,
    skills: &[common::Package],
    extra: &[(&str, &str)],
) -> TestServer {
    let upper = engine.to_ascii_uppercase();
    let base = match engine {
        "codex" | "opencode" | "qwen" => format!("{}/v1", fake.base),
        _ => fake.base.clone(),
    };
    let base_var = format!("SKILL_RUNNER_{upper}_BASE_URL");
    let key_var = format!("SKILL_RUNNER_{upper}_API_KEY");
    let mut env: Vec<(&str, &str)> = vec![
        (&base_var, &base),
        (&key_var, "sk-test"),
        ("SKILL_RUNNER_ENGINE_MAX_RETRIES", "0"),
    ];
    env.extend_from_slice(extra);
    let dirs = TestDirs::new();
    for skill in skills {
        skill.write_into(&dirs.skills);
    }
    TestServer::start_with(dirs, &env)
}

const WRITE_REPORT: &str = "mkdir -p artifacts && echo 'all good' > artifacts/report.txt";

#[tokio::test]
async fn codex_auto_job_writes_the_artifact_and_answers_json() {
    if !in_netns(
        "codex_auto_job_writes_the_artifact_and_answers_json",
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    fake.script(json!([
        {"shell": WRITE_REPORT},
        {"text": "Finished. {\"summary\": \"wrote it\", \"report\": \"artifacts/report.txt\"}"},
    ]))
    .await;
    let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"}}))
        .await;
    let status = server.wait_job(&rid).await;
    let (_, logs) = server.get(&format!("/v1/jobs/{rid}/logs")).await;
    let seen: Vec<String> = fake
        .requests()
        .await
        .iter()
        .map(|r| {
            format!(
                "{} tools={}",
                r["path"],
                r["body"]["tools"].as_array().map_or(0, Vec::len)
            )
        })
        .collect();
    assert_eq!(status["status"], "succeeded", "{status}\n{logs}\n{seen:?}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"summary": "wrote it", "report": "artifacts/report.txt"})
    );
    assert_eq!(
        result["result"]["artifacts"],
        json!(["artifacts/report.txt"])
    );
    let report = server.run_dir(&status).join("artifacts/report.txt");
    assert_eq!(std::fs::read_to_string(report).unwrap(), "all good\n");

    let requests = fake.requests().await;
    let model_calls: Vec<&Value> = requests
        .iter()
        .filter(|r| r["path"] == "/v1/responses")
        .collect();
    assert_eq!(model_calls.len(), 2, "{requests:?}");
    assert_eq!(model_calls[0]["headers"]["authorization"], "Bearer sk-test");
    let prompt = model_calls[0]["body"].to_string();
    assert!(
        prompt.contains("reporter/SKILL.md") && prompt.contains("artifacts/"),
        "{prompt}"
    );
}

#[tokio::test]
async fn a_missing_cli_is_refused_at_create() {
    let empty = tempfile::tempdir().unwrap();
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let prefix = empty.path().to_str().unwrap();
    let server = TestServer::start_with(
        dirs,
        &[
            ("SKILL_RUNNER_NPM_PREFIX", prefix),
            ("PATH", "/usr/bin:/bin"),
        ],
    );
    let (status, body) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["detail"]["code"], "ENGINE_CLI_MISSING");
    let message = body["detail"]["message"].as_str().unwrap();
    assert!(
        message.contains("'codex'") && message.contains("POST /v1/engines/upgrades"),
        "{message}"
    );
}
