//! The `iflow` engine end to end against recorded output. iFlow's CLI is not on the npm
//! registry, so `crates/engines/tests/fixtures/iflow/iflow` stands in for it: it records how the service
//! started it and replays output in iFlow's documented format (see that folder's README).

use skill_runner_test_support as common;

use common::folder_mentions;
use serde_json::{Value, json};

use crate::stand_in::{Stand, arg_after};

const ENDPOINT: [(&str, &str); 2] = [
    ("SKILL_RUNNER_IFLOW_BASE_URL", "http://127.0.0.1:9/v1"),
    ("SKILL_RUNNER_IFLOW_API_KEY", "sk-iflow-test"),
];

#[tokio::test]
async fn auto_job_with_an_endpoint() {
    let stand = Stand::new("iflow");
    let server = stand.server(
        "auto",
        &[
            ENDPOINT[0],
            ENDPOINT[1],
            ("SKILL_RUNNER_CODEX_API_KEY", "sk-codex-secret"),
            ("UI_BASIC_AUTH_ENABLED", "true"),
            ("UI_BASIC_AUTH_USERNAME", "admin"),
            ("UI_BASIC_AUTH_PASSWORD", "admin-secret"),
        ],
    );
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
    // The CLI's text is one message, the final answer.
    let (_, chat) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    let said = stand.recorded("auto.stdout");
    assert_eq!(chat["count"], 2, "{chat}");
    assert_eq!(chat["events"][0]["kind"], "assistant_final");
    assert_eq!(chat["events"][0]["text"], said.trim());
    assert_eq!(chat["events"][1]["kind"], "orchestration_notice");

    let calls = stand.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    let workspace = server.workspace(&status);
    assert_eq!(call["cwd"], workspace.to_str().unwrap());
    assert_eq!(
        call["home"],
        workspace.join(".agent-home").to_str().unwrap()
    );
    assert!(call["argv"].as_array().unwrap().contains(&json!("-y")));
    assert_eq!(arg_after(call, "-m"), Some("qwen3-coder-plus"));
    assert_eq!(arg_after(call, "--resume"), None);
    let prompt = arg_after(call, "-p").unwrap();
    let skill_md = workspace.join(".iflow/skills/reporter/SKILL.md");
    assert!(
        prompt.contains(skill_md.to_str().unwrap()),
        "the prompt does not point at the skill copy: {prompt}"
    );
    assert!(skill_md.is_file());
    // The endpoint and key reach the CLI through its own IFLOW_<setting> variables: its model
    // door, and a placeholder for the key the service holds ...
    assert_eq!(call["env"]["IFLOW_baseUrl"], "http://127.0.0.1:3127/v1");
    assert_eq!(
        call["env"]["IFLOW_apiKey"],
        format!("sr-secret-{rid}-IFLOW_API_KEY")
    );
    let settings: Value =
        serde_json::from_str(call["files"][".iflow/settings.json"].as_str().unwrap()).unwrap();
    assert_eq!(settings["selectedAuthType"], "openai-compatible");
    assert_eq!(settings["approvalMode"], "yolo");
    assert_eq!(settings["sandbox"], false);
    assert_eq!(settings["telemetry"]["enabled"], false);
    // The run's home (logins live there during a turn) is neither listed nor previewed.
    let (_, files) = server
        .get(&format!("/v1/management/runs/{rid}/files"))
        .await;
    let listed = files["entries"].to_string();
    assert!(listed.contains("artifacts/report.txt"), "{files}");
    assert!(!listed.contains(".agent-home"), "{files}");
    let (code, _) = server
        .get(&format!(
            "/v1/management/runs/{rid}/file?path=.agent-home/.iflow/settings.json"
        ))
        .await;
    assert_eq!(code, 404);
    // No other secret of the service reaches the CLI ...
    assert_eq!(call["secrets"], json!([]), "{call}");
    // ... and the key is written nowhere in the run folder.
    assert!(!folder_mentions(&server.run_dir(&status), "sk-iflow-test"));

    let (_, engines) = server.get("/v1/engines").await;
    assert!(
        engines["engines"]
            .as_array()
            .unwrap()
            .contains(&json!({"engine": "iflow", "cli_version_detected": "0.5.19",
                "auth_ready": true})),
        "{engines}"
    );
    let (_, models) = server.get("/v1/engines/iflow/models").await;
    assert_eq!(models["snapshot_version_used"], "0.3.0", "{models}");
}

#[tokio::test]
async fn interactive_job_resumes_the_reported_session() {
    let stand = Stand::new("iflow");
    let server = stand.server("interactive", &ENDPOINT);
    let rid = stand.answered_run(&server).await;
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["data"]["summary"], "wrote it");

    let calls = stand.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(
        arg_after(&calls[1], "--resume"),
        Some("session-7e0c4b1a-2d3f-4a5b-8c6d-9e0f1a2b3c4d"),
        "the reply did not resume the session the first turn reported"
    );
    assert!(arg_after(&calls[1], "-p").unwrap().contains("teal-green"));
    assert!(arg_after(&calls[0], "-p").unwrap().contains("ask_user"));

    // `/logs` carries each turn's prompt, as the CLI received it, under a turn header.
    let (_, logs) = server.get(&format!("/v1/jobs/{rid}/logs")).await;
    let expected = format!(
        "=== turn 1 ===\n{}\n\n=== turn 2 ===\n{}\n\n",
        arg_after(&calls[0], "-p").unwrap(),
        arg_after(&calls[1], "-p").unwrap()
    );
    assert_eq!(logs["prompt"], expected);
}

/// A reply cannot resume a conversation whose session id the CLI never reported: the run
/// fails saying so, rather than starting a new conversation that lacks the task.
#[tokio::test]
async fn a_reply_without_a_known_session_fails_clearly() {
    let stand = Stand::new("iflow");
    let server = stand.server("no-session", &ENDPOINT);
    let rid = stand.start_job(&server, "interactive").await;
    let status = server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user", "failed"])
        .await;
    assert_eq!(status["status"], "waiting_user", "{status}");
    let (code, body) = server
        .post_json(
            &format!("/v1/jobs/{rid}/interaction/reply"),
            json!({"interaction_id": 1, "response": "teal-green"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert!(
        status["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reported no session id"),
        "{status}"
    );
    assert_eq!(
        stand.calls().len(),
        1,
        "the CLI was started without a session"
    );
}

#[tokio::test]
async fn model_errors_fail_with_what_the_cli_said() {
    let stand = Stand::new("iflow");
    let server = stand.server("api-error", &ENDPOINT);
    let rid = stand.start_job(&server, "auto").await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(
        status["error"]["message"],
        "iflow: the model request failed: [API Error: 500 Internal Server Error: model exploded]"
    );
    assert_eq!(status["error"]["code"], Value::Null, "{status}");

    let stand = Stand::new("iflow");
    let server = stand.server("auth-error", &ENDPOINT);
    let rid = stand.start_job(&server, "auto").await;
    let status = server.wait_job(&rid).await;
    assert_eq!(
        (status["status"].as_str(), status["error"]["code"].as_str()),
        (Some("failed"), Some("AUTH_REQUIRED")),
        "{status}"
    );
}

#[tokio::test]
async fn a_silent_cli_times_out_and_leaves_no_process() {
    Stand::new("iflow").times_out(&ENDPOINT).await;
}

/// Without a configured key the CLI uses the login in the agent home, lent to the run's home
/// for the turn: a token the CLI refreshed goes back, and the run folder keeps no copy.
#[tokio::test]
async fn the_agent_home_login_is_lent_for_the_turn() {
    let stand = Stand::new("iflow");
    let login = stand.agent_home.join(".iflow/oauth_creds.json");
    std::fs::create_dir_all(login.parent().unwrap()).unwrap();
    std::fs::write(&login, r#"{"access_token": "original-token"}"#).unwrap();
    // Both of iFlow's login files make a login (else the run would wait for one).
    let accounts = stand.agent_home.join(".iflow/iflow_accounts.json");
    std::fs::write(&accounts, r#"{"active": "someone"}"#).unwrap();
    let server = stand.server("auto", &[("FAKE_CLI_REFRESH", "1")]);
    let rid = stand.start_job(&server, "auto").await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");

    let call = &stand.calls()[0];
    assert_eq!(
        call["files"][".iflow/oauth_creds.json"], r#"{"access_token": "original-token"}"#,
        "the login was not lent: {call}"
    );
    let settings: Value =
        serde_json::from_str(call["files"][".iflow/settings.json"].as_str().unwrap()).unwrap();
    assert_eq!(settings["selectedAuthType"], "oauth-iflow");
    assert_eq!(call["env"].get("IFLOW_apiKey"), None);
    assert_eq!(arg_after(call, "-m"), None);

    assert_eq!(
        std::fs::read_to_string(&login).unwrap(),
        r#"{"access_token": "refreshed-token"}"#,
        "the refreshed login did not go back to the agent home"
    );
    let run_dir = server.run_dir(&status);
    assert!(!folder_mentions(&run_dir, "refreshed-token"));
    assert!(!folder_mentions(&run_dir, "original-token"));
}
