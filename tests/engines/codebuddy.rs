//! The `codebuddy` engine end to end against recorded output. CodeBuddy Code is not on the
//! public npm registry, so `crates/engines/tests/fixtures/codebuddy/codebuddy` stands in for it
//! (see that folder's README): the same matrix as the real CLIs (an auto run, an interactive
//! run resumed in its session, a model error, a silent CLI timed out), and a logged-out run
//! that an API key entered in an auth session resumes.

use skill_runner_test_support as common;

use common::folder_mentions;
use serde_json::{Value, json};

use crate::stand_in::{Stand, arg_after};

const KEY: &str = "sk-codebuddy-test";
const ENDPOINT: [(&str, &str); 2] = [
    ("SKILL_RUNNER_CODEBUDDY_BASE_URL", "http://127.0.0.1:9/v1"),
    ("SKILL_RUNNER_CODEBUDDY_API_KEY", KEY),
];

#[tokio::test]
async fn auto_job_writes_the_artifact_and_answers_json() {
    let stand = Stand::new("codebuddy");
    let server = stand.server("auto", &ENDPOINT);
    let rid = stand.start_job(&server, "auto").await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"summary": "wrote it", "report": "artifacts/report.txt"})
    );
    assert_eq!(
        result["result"]["artifacts"],
        json!(["artifacts/report.txt"])
    );

    // The conversation, read from the stream-json: the command with its result, the answer.
    let (_, chat) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    let kinds: Vec<&str> = chat["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"assistant_process"), "{chat}");
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["assistant_final", "orchestration_notice"],
        "{chat}"
    );
    assert!(chat.to_string().contains("artifacts/report.txt"), "{chat}");

    let calls = stand.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    let workspace = server.workspace(&status);
    assert_eq!(call["cwd"], workspace.to_str().unwrap());
    let argv: Vec<&str> = call["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        argv[..6],
        [
            "-p",
            "--output-format",
            "stream-json",
            "--permission-mode",
            "bypassPermissions",
            "--settings"
        ]
    );
    assert!(argv.contains(&"--strict-mcp-config"), "{argv:?}");
    assert_eq!(arg_after(call, "--setting-sources"), Some("project"));
    assert_eq!(arg_after(call, "--model"), Some("gpt-5.5"));
    assert_eq!(arg_after(call, "-r"), None);
    let settings: Value =
        serde_json::from_str(call["files"]["--settings"].as_str().unwrap()).unwrap();
    assert_eq!(settings["autoUpdates"], false, "{settings}");
    assert_eq!(settings["permissions"]["defaultMode"], "bypassPermissions");
    let mcp: Value = serde_json::from_str(call["files"]["--mcp-config"].as_str().unwrap()).unwrap();
    assert_eq!(mcp, json!({"mcpServers": {}}));
    let skill_md = workspace.join(".codebuddy/skills/reporter/SKILL.md");
    assert!(skill_md.is_file());
    assert!(
        call["prompt"]
            .as_str()
            .unwrap()
            .contains(skill_md.to_str().unwrap())
    );
    // The CLI is pointed at its model door with a placeholder: the service holds the key.
    assert_eq!(
        call["env"]["CODEBUDDY_BASE_URL"],
        "http://127.0.0.1:3127/v1"
    );
    assert_eq!(
        call["env"]["CODEBUDDY_API_KEY"],
        format!("sr-secret-{rid}-CODEBUDDY_API_KEY")
    );
    assert_eq!(
        call["secrets"],
        json!([]),
        "no other key reaches the CLI: {call}"
    );
    assert!(!folder_mentions(&server.run_dir(&status), KEY));

    let (_, models) = server.get("/v1/engines/codebuddy/models").await;
    assert_eq!(models["snapshot_version_used"], "2.118.2", "{models}");
}

#[tokio::test]
async fn interactive_job_resumes_the_same_session() {
    let stand = Stand::new("codebuddy");
    let server = stand.server("interactive", &ENDPOINT);
    stand.answered_run(&server).await;
    let calls = stand.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(
        arg_after(&calls[1], "-r"),
        Some("cb-3f9a2c71-8e44-4d0b-9a65-1c2b7d8e0f13"),
        "the reply did not resume the session the first turn reported"
    );
    assert!(calls[1]["prompt"].as_str().unwrap().contains("teal-green"));
}

#[tokio::test]
async fn model_http_500_fails_with_what_the_cli_said() {
    let stand = Stand::new("codebuddy");
    let server = stand.server("api-error", &ENDPOINT);
    let rid = stand.start_job(&server, "auto").await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    let message = status["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("500") && message.contains("model exploded"),
        "{status}"
    );
}

#[tokio::test]
async fn silent_cli_times_out_and_leaves_no_process() {
    Stand::new("codebuddy").times_out(&ENDPOINT).await;
}

/// CodeBuddy has no login file the service knows: a run without a key waits in `waiting_auth`
/// saying so, and an API key entered in an auth session resumes it; the key reaches the CLI and
/// nothing else.
#[tokio::test]
async fn a_key_entered_in_an_auth_session_resumes_a_waiting_run() {
    let stand = Stand::new("codebuddy");
    let server = stand.server("auto", &[ENDPOINT[0]]);
    let rid = stand.start_job(&server, "auto").await;
    let path = format!("/v1/jobs/{rid}");
    server.wait_status(&path, &["waiting_auth"]).await;
    let (_, session) = server.get(&format!("{path}/auth/session")).await;
    assert_eq!(
        session["auth_session"]["auth_methods"],
        json!(["api_key"]),
        "{session}"
    );
    assert_eq!(session["auth_session"]["import_files"], json!([]));
    let part = reqwest::multipart::Part::bytes(b"{}".to_vec()).file_name("auth.json");
    let (code, refused) = server
        .post_form(
            &format!("{path}/interaction/auth/import"),
            reqwest::multipart::Form::new().part("files", part),
        )
        .await;
    assert_eq!(code, 422, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("API key"),
        "{refused}"
    );

    let (code, started) = server
        .post_json(
            "/v1/management/engines/codebuddy/auth/sessions",
            json!({"auth_method": "api_key"}),
        )
        .await;
    assert_eq!(code, 200, "{started}");
    let id = started["session_id"].as_str().unwrap();
    let (code, done) = server
        .post_json(
            &format!("/v1/management/engines/codebuddy/auth/sessions/{id}/input"),
            json!({"kind": "api_key", "value": KEY}),
        )
        .await;
    assert_eq!(code, 200, "{done}");
    assert_eq!(done["resumed_runs"], 1, "{done}");
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let calls = stand.calls();
    assert_eq!(calls.len(), 1, "no turn ran before the key: {calls:?}");
    // The key entered is held at the egress like a configured one.
    assert_eq!(
        calls[0]["env"]["CODEBUDDY_API_KEY"],
        format!("sr-secret-{rid}-CODEBUDDY_API_KEY")
    );
    assert!(!folder_mentions(&server.run_dir(&status), KEY));
    assert!(!server.log().contains(KEY));
}

/// MCP servers of the registry reach the CLI: a `default` one in every turn of its engines, a
/// `declared` one in the runs of skills that require it. Their secrets are in the turn's
/// configuration only while it runs, masked in what it prints, and shown by no view.
#[tokio::test]
async fn mcp_servers_from_the_registry_reach_the_cli_and_their_secrets_nothing_else() {
    const TOKEN: &str = "mcp-token-5d1e";
    const BEARER: &str = "mcp-bearer-77c0";
    let needs = |id: &str, servers: Value| {
        common::report_skill(id).runner(json!({"mcp": {"required_servers": servers}}))
    };
    let stand = Stand::new("codebuddy");
    let server = stand.server_with(
        "auto",
        &ENDPOINT,
        &[
            needs("needs-papers", json!(["papers"])),
            needs("needs-nothing-known", json!(["nowhere"])),
        ],
    );

    let papers = json!({"activation": "declared", "scope": "run-local", "transport": "stdio",
        "command": "papers-mcp", "args": ["--fast"],
        "auth": {"env": [{"name": "PAPERS_TOKEN", "value": TOKEN}]}});
    let (code, saved) = server
        .put_json("/v1/management/mcp/servers/papers", papers)
        .await;
    assert_eq!(code, 200, "{saved}");
    assert_eq!(
        saved["auth"]["env"],
        json!([{"name": "PAPERS_TOKEN", "configured": true, "masked_value": "********"}])
    );
    let everywhere = json!({"activation": "default", "scope": "run-local", "transport": "http",
        "engines": ["codebuddy", "claude"], "url": "https://mcp.example/api",
        "auth": {"headers": [{"name": "Authorization", "prefix": "Bearer ", "value": BEARER}]}});
    let (code, saved) = server
        .put_json("/v1/management/mcp/servers/everywhere", everywhere)
        .await;
    assert_eq!(code, 200, "{saved}");
    assert_eq!(saved["effective_engines"], json!(["claude", "codebuddy"]));
    // Refused definitions name the field; a secret named again without a value is kept.
    for (body, says) in [
        (
            json!({"activation": "default", "scope": "run-local", "transport": "stdio"}),
            "command",
        ),
        (
            json!({"activation": "default", "scope": "run-local", "transport": "sse",
                "url": "ftp://x"}),
            "url",
        ),
        (
            json!({"activation": "default", "scope": "run-local", "transport": "stdio",
                "command": "x", "engines": ["iflow"]}),
            "iflow",
        ),
        (
            json!({"activation": "default", "scope": "run-local", "transport": "stdio",
                "command": "x", "auth": {"env": [{"name": "NEW"}]}}),
            "has no value",
        ),
    ] {
        let (code, refused) = server
            .put_json("/v1/management/mcp/servers/bad", body.clone())
            .await;
        assert_eq!(code, 422, "{body}: {refused}");
        assert!(refused.to_string().contains(says), "{body}: {refused}");
    }
    let (code, _) = server
        .put_json(
            "/v1/management/mcp/servers/bad",
            json!({"activation": "sometimes"}),
        )
        .await;
    assert!((400..500).contains(&code));
    let kept = json!({"activation": "declared", "scope": "run-local", "transport": "stdio",
        "command": "papers-mcp", "args": ["--fast"], "auth": {"env": [{"name": "PAPERS_TOKEN"}]}});
    let (code, saved) = server
        .put_json("/v1/management/mcp/servers/papers", kept)
        .await;
    assert_eq!(
        (code, &saved["auth"]["env"][0]["configured"]),
        (200, &json!(true))
    );
    let (_, listed) = server.get("/v1/management/mcp/servers").await;
    let ids: Vec<&str> = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["everywhere", "papers"]);
    assert!(!listed.to_string().contains(TOKEN) && !listed.to_string().contains(BEARER));

    // A skill requiring a server the registry lacks is refused at create.
    let (code, refused) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "needs-nothing-known", "engine": "codebuddy", "input": {"text": "go"}}),
        )
        .await;
    assert_eq!(code, 400, "{refused}");
    assert_eq!(refused["detail"]["code"], "MCP_SERVER_UNAVAILABLE");
    assert!(refused.to_string().contains("nowhere"), "{refused}");

    let rid = server
        .create_job(
            json!({"skill_id": "needs-papers", "engine": "codebuddy", "input": {"text": "go"}}),
        )
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let calls = stand.calls();
    let given: Value =
        serde_json::from_str(calls[0]["files"]["--mcp-config"].as_str().unwrap()).unwrap();
    assert_eq!(
        given,
        json!({"mcpServers": {
            "everywhere": {"type": "http", "url": "https://mcp.example/api",
                           "headers": {"Authorization": format!("Bearer {BEARER}")}},
            "papers": {"type": "stdio", "command": "papers-mcp", "args": ["--fast"],
                       "env": {"PAPERS_TOKEN": TOKEN}}}})
    );
    // The configuration went with the turn; what the CLI printed is masked.
    let run_dir = server.run_dir(&status);
    assert!(
        !run_dir
            .join("workspace/.agent-home/.codebuddy/mcp.json")
            .exists()
    );
    let (_, logs) = server.get(&format!("/v1/jobs/{rid}/logs")).await;
    assert!(
        logs["stderr"]
            .as_str()
            .unwrap()
            .contains("MCP servers configured"),
        "{logs}"
    );
    for secret in [TOKEN, BEARER] {
        assert!(!logs.to_string().contains(secret), "{logs}");
        assert!(
            !folder_mentions(&run_dir, secret),
            "{secret} in the run folder"
        );
        assert!(!server.log().contains(secret));
    }

    // A skill that requires nothing gets the default server only.
    let rid = stand.start_job(&server, "auto").await;
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
    let calls = stand.calls();
    let given: Value =
        serde_json::from_str(calls[1]["files"]["--mcp-config"].as_str().unwrap()).unwrap();
    let names: Vec<&String> = given["mcpServers"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["everywhere"]);

    let (code, deleted) = server.delete("/v1/management/mcp/servers/papers").await;
    assert_eq!(
        (code, deleted),
        (200, json!({"server_id": "papers", "deleted": true}))
    );
    let (code, refused) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "needs-papers", "engine": "codebuddy", "input": {"text": "go"}}),
        )
        .await;
    assert_eq!(
        (code, &refused["detail"]["code"]),
        (400, &json!("MCP_SERVER_UNAVAILABLE"))
    );
}
