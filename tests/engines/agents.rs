//! Agent engines against the real CLIs, hermetically: each test re-runs itself inside a fresh
//! loopback-only network namespace (`unshare -n`), where it starts the fake model server and the
//! service, which starts the CLI. No packet can leave the machine.
//!
//! The CLIs come from `scripts/install-agent-clis.sh` (the managed npm prefix). Without them, or
//! without network namespaces, each test prints a loud skip line; under `CI=true` a missing CLI
//! fails instead.

use skill_runner_test_support as common;

use std::time::Duration;

use common::agents::{ENGINE_KEY, in_netns, npm_prefix, server_for};
use common::netns::{TEST_HOST, nobody_connected, test_host};
use common::{
    FakeModel, TestCa, TestDirs, TestServer, folder_mentions, processes_in, report_skill,
};
use serde_json::{Value, json};

const WRITE_REPORT: &str = "mkdir -p artifacts && echo 'all good' > artifacts/report.txt";

/// The path of `engine`'s model calls on the fake server.
fn model_path(engine: &str) -> &'static str {
    match engine {
        "codex" => "/v1/responses",
        "claude" => "/v1/messages",
        "gemini" => ":streamGenerateContent",
        _ => "/v1/chat/completions",
    }
}

fn model_calls(requests: &[Value], engine: &str) -> Vec<Value> {
    requests
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .unwrap_or("")
                .contains(model_path(engine))
        })
        .cloned()
        .collect()
}

async fn failure_context(server: &TestServer, fake: &FakeModel, rid: &str) -> String {
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
    format!(
        "logs: {logs}
model requests: {seen:?}"
    )
}

/// The status of run `rid` once it ended, which must be a success (what the model and the
/// run saw otherwise). Kilo's turn takes ~50 s on this machine (most of it its own start-up),
/// more in the container lane: the default minute is too short a bound for it.
async fn succeeded(server: &TestServer, fake: &FakeModel, rid: &str) -> Value {
    let status = server
        .wait_status_within(
            &format!("/v1/jobs/{rid}"),
            &["succeeded", "failed", "canceled"],
            Duration::from_secs(180),
        )
        .await;
    assert_eq!(
        status["status"],
        "succeeded",
        "{status}\n{}",
        failure_context(server, fake, rid).await
    );
    status
}

const ANSWER: &str = "Finished. {\"summary\": \"wrote it\", \"report\": \"artifacts/report.txt\"}";

/// The run's conversation, read from the CLI's own output: the shell command the model ran,
/// with its output (`output_has`), then the final answer and the closing notice. Returns the
/// items.
async fn assert_conversation(server: &TestServer, rid: &str, output_has: &str) -> Vec<Value> {
    let (code, history) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    assert_eq!(code, 200, "{history}");
    let items = history["events"].as_array().unwrap().clone();
    let shown = || serde_json::to_string_pretty(&items).unwrap();
    let n = items.len();
    assert!(n >= 3, "{}", shown());
    assert_eq!(items[n - 1]["kind"], "orchestration_notice", "{}", shown());
    assert_eq!(items[n - 1]["text"], "The run succeeded.");
    assert_eq!(items[n - 2]["kind"], "assistant_final", "{}", shown());
    assert_eq!(items[n - 2]["text"], ANSWER);
    let steps: Vec<&Value> = items
        .iter()
        .filter(|i| i["kind"] == "assistant_process")
        .collect();
    let ran = steps.iter().any(|i| {
        matches!(
            i["correlation"]["process_type"].as_str(),
            Some("command_execution" | "tool_call")
        ) && i["correlation"]["details"]
            .to_string()
            .contains(WRITE_REPORT)
    });
    assert!(ran, "no step ran the command: {}", shown());
    let output = steps.iter().any(|i| {
        let details = &i["correlation"]["details"];
        details["output"]
            .as_str()
            .is_some_and(|o| o.contains(output_has))
    });
    assert!(
        output,
        "no step carries the output {output_has:?}: {}",
        shown()
    );
    let seqs: Vec<u64> = items.iter().map(|i| i["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=n as u64).collect::<Vec<_>>());

    // The same conversation as FCMP events: the command as a tool call or command execution
    // carrying the item's details, the final answer, the warning that it was read out of
    // prose, and the terminal state change.
    let (code, fcmp) = server.get(&format!("/v1/jobs/{rid}/events/history")).await;
    assert_eq!(code, 200, "{fcmp}");
    let events = fcmp["events"].as_array().unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"conversation.state.changed"));
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "assistant.message.promoted",
            "assistant.message.final",
            "diagnostic.warning",
            "conversation.state.changed"
        ],
        "{fcmp}"
    );
    let promoted = &events[events.len() - 4]["data"];
    assert_eq!(promoted["text"], ANSWER);
    assert_eq!(
        promoted["details"],
        json!({"from": "intermediate", "to": "final"})
    );
    assert_eq!(
        promoted["replaces_message_id"],
        events[events.len() - 3]["data"]["message_id"]
    );
    assert_eq!(events[events.len() - 3]["data"]["text"], ANSWER);
    assert_eq!(
        events[events.len() - 2]["data"],
        json!({"code": "OUTPUT_REPAIRED_GENERIC"})
    );
    assert!(
        events.iter().any(|e| matches!(
            e["type"].as_str(),
            Some("assistant.command_execution" | "assistant.tool_call")
        ) && e["data"]["details"].to_string().contains(WRITE_REPORT)),
        "{fcmp}"
    );
    assert_eq!(events.last().unwrap()["data"]["to"], "succeeded");
    items
}

/// Auto mode: the model writes the artifact through the CLI's own shell tool and answers JSON
/// that matches the output schema.
///
/// The same shell command also tries to write outside the run: `../../escape.txt` (the runs
/// folder), a file in the service's working directory, and `$PWD/escape.txt` — `$PWD` is the
/// run's workspace, so that one lands inside the run. The tool's output, sent back to the model,
/// shows each attempt was made and denied.
///
/// With a network of its own, the turn holds only a placeholder for the engine's key: the same
/// command dumps its environment and every file of its home into an artifact, and the key is
/// found nowhere the run leaves anything, while the model (served over TLS with a test CA)
/// received it on every request. Sharing the service's network there is no door to hold it, and
/// the key is lent (as `barriers.secret` says).
async fn auto_job(engine: &str, shared: bool) {
    let ca = TestCa::new();
    let fake = match shared {
        true => FakeModel::start(),
        false => FakeModel::start_tls(&ca),
    };
    let ca_bundle = ca.ca_pem_path().to_str().unwrap().to_owned();
    let network: Vec<(&str, &str)> = match shared {
        true => vec![("SKILL_RUNNER_NAMESPACES", "off")],
        false => vec![("SKILL_RUNNER_EGRESS_CA_BUNDLE", &ca_bundle)],
    };
    let server = server_for(engine, &fake, &[report_skill("reporter")], &network);
    let service_cwd = server.dirs.root.join("escape.txt");
    let service_cwd = service_cwd.to_str().unwrap();
    let escapes = format!(
        "for f in ../../escape.txt \"$PWD/escape.txt\" {service_cwd}; do \
         if (echo escaped > \"$f\") 2>/dev/null; then echo \"WROTE $f\"; \
         else echo \"DENIED $f\"; fi; done"
    );
    // The shell tool also reaches for the service, another loopback port and a host on another
    // network, through the proxy the turn is given and around it.
    let other_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = test_host();
    let service = server.url("").trim_start_matches("http://").to_owned();
    let reach: Vec<String> = vec![
        format!("{service}/v1/jobs"),
        format!("127.0.0.1:{}/", other_port.local_addr().unwrap().port()),
        format!("{TEST_HOST}:{}/", host.local_addr().unwrap().port()),
    ];
    let probes = format!(
        "for t in {}; do for via in '' '--noproxy *'; do \
         if curl -sf -m 3 $via -o /dev/null \"http://$t\"; then echo \"REACHED $t\"; \
         else echo \"UNREACHABLE $t\"; fi; done; done",
        reach.join(" ")
    );
    // A turn that holds the key would dump it: only one that holds a placeholder does.
    let dump = match shared {
        true => "true",
        false => {
            "{ env; find \"$HOME\" -type f -exec cat {} + ; } > artifacts/dump.txt 2>&1; \
             grep -c sr-secret- artifacts/dump.txt"
        }
    };
    fake.script(json!([
        {"shell": format!("{WRITE_REPORT}; {dump}; {escapes}; {probes}"), "say": "I will write the report."},
        {"text": ANSWER}
    ]))
    .await;
    // The client's preamble reaches the model with the task (and is kept nowhere else).
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": engine, "input": {"text": "go"},
                           "runtime_options": {"preamble_prompt": "Client context: PREAMBLE-MARK-42"}}))
        .await;
    let status = succeeded(&server, &fake, &rid).await;
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"summary": "wrote it", "report": "artifacts/report.txt"})
    );
    let first = model_calls(&fake.requests().await, engine)[0]["body"].to_string();
    assert!(first.contains("PREAMBLE-MARK-42"), "{first}");
    let (_, shown) = server.get(&format!("/v1/management/runs/{rid}")).await;
    assert!(!shown.to_string().contains("PREAMBLE-MARK"), "{shown}");
    let artifacts = match shared {
        true => json!(["artifacts/report.txt"]),
        false => json!(["artifacts/dump.txt", "artifacts/report.txt"]),
    };
    assert_eq!(result["result"]["artifacts"], artifacts);
    let workspace = server.workspace(&status);
    let report = workspace.join("artifacts/report.txt");
    assert_eq!(std::fs::read_to_string(report).unwrap(), "all good\n");
    let calls = model_calls(&fake.requests().await, engine);
    assert!(calls.len() >= 2, "{calls:?}");
    // The tool's output reaches the model in a later request (opencode makes others between).
    let tool_output: String = calls[1..].iter().map(|c| c["body"].to_string()).collect();
    for denied in ["../../escape.txt", service_cwd] {
        assert!(
            tool_output.contains(&format!("DENIED {denied}")),
            "{denied} was not denied: {:?}",
            tool_output
                .match_indices("escape.txt")
                .map(|(i, _)| &tool_output[i.saturating_sub(200)..i + 10])
                .collect::<Vec<_>>()
        );
    }
    for target in &reach {
        assert!(
            tool_output
                .matches(&format!("UNREACHABLE {target}"))
                .count()
                == 2
                && !tool_output.contains(&format!("REACHED {target}")),
            "the shell tool reached {target}"
        );
    }
    nobody_connected(&other_port);
    nobody_connected(&host);
    // The CLI reached the model through its door, and nothing else did.
    let egress =
        std::fs::read_to_string(server.run_dir(&status).join("logs/egress.jsonl")).unwrap();
    let lines: Vec<Value> = egress
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fake_port = fake
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let to_model = |l: &&Value| l["host"] == "127.0.0.1" && l["port"] == fake_port;
    assert!(
        lines
            .iter()
            .filter(to_model)
            .any(|l| l["verdict"] == "allowed"),
        "{egress}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| !to_model(l))
            .all(|l| l["verdict"] == "denied"),
        "{egress}"
    );
    assert!(!server.dirs.root.join("escape.txt").exists());
    assert!(!server.dirs.data.join("runs/escape.txt").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("escape.txt")).unwrap(),
        "escaped\n",
        "$PWD is the run's workspace"
    );
    let prompt = calls[0]["body"].to_string();
    assert!(
        prompt.contains("reporter/SKILL.md") && prompt.contains("artifacts/"),
        "{prompt}"
    );
    let items = assert_conversation(&server, &rid, "DENIED ../../escape.txt").await;
    // What the model said before the call is a message of its own, before the step.
    let said = items
        .iter()
        .position(|i| i["kind"] == "assistant_message" && i["text"] == "I will write the report.");
    let step = items.iter().position(|i| i["kind"] == "assistant_process");
    assert!(
        said.is_some() && said < step,
        "{}",
        serde_json::to_string_pretty(&items).unwrap()
    );
    // The key reaches the model on every request, and is written nowhere in the run folder.
    for call in &calls {
        assert!(
            call["headers"].to_string().contains(ENGINE_KEY),
            "{}",
            call["headers"]
        );
    }
    assert!(
        !folder_mentions(&server.run_dir(&status), ENGINE_KEY),
        "the API key was written into the run folder"
    );
    let (_, shown) = server
        .get(&format!("/v1/management/engines/{engine}"))
        .await;
    let secrets = &shown["barriers"]["secret"];
    if shared {
        assert_eq!(secrets, "lent", "{shown}");
        return;
    }
    assert_eq!(secrets, "egress", "{shown}");
    // What the turn saw: a placeholder in place of the key.
    let dump =
        String::from_utf8_lossy(&std::fs::read(workspace.join("artifacts/dump.txt")).unwrap())
            .into_owned();
    assert!(dump.contains(&format!("sr-secret-{rid}-")), "{dump}");
    for path in [
        format!("/v1/jobs/{rid}/bundle"),
        format!("/v1/jobs/{rid}/events/history"),
        format!("/v1/jobs/{rid}/chat/history"),
        format!("/v1/jobs/{rid}/result"),
        format!("/v1/jobs/{rid}/logs"),
        format!("/v1/jobs/{rid}/artifacts/artifacts/dump.txt"),
    ] {
        let (code, _, body) = server.get_bytes(&path).await;
        assert_eq!(code, 200, "{path}");
        assert!(
            !body
                .windows(ENGINE_KEY.len())
                .any(|w| w == ENGINE_KEY.as_bytes()),
            "{path} holds the key"
        );
    }
}

/// Interactive: the model asks, the run waits, the reply resumes the same session (whose
/// request carries the earlier history), and the run succeeds.
async fn interactive_job(engine: &str) {
    let fake = FakeModel::start();
    let question = r#"{"outcome": "ask_user", "interaction": {"interaction_id": 1, "kind": "open_text", "prompt": "Which colour, please?"}}"#;
    fake.script(json!([{"text": question}])).await;
    let server = server_for(engine, &fake, &[report_skill("reporter")], &[]);
    let rid = server
        .create_job(
            json!({"skill_id": "reporter", "engine": engine, "input": {"text": "go"},
                           "runtime_options": {"execution_mode": "interactive"}}),
        )
        .await;
    // Each turn starts the CLI: a heavy Node program that, on a loaded two-core CI machine,
    // took over the default minute (kilo's, in three runs), where alone it takes a quarter.
    let turn = std::time::Duration::from_secs(180);
    let status = server
        .wait_status_within(
            &format!("/v1/jobs/{rid}"),
            &["waiting_user", "failed", "succeeded"],
            turn,
        )
        .await;
    assert_eq!(
        status["status"],
        "waiting_user",
        "{status}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    let (_, pending) = server
        .get(&format!("/v1/jobs/{rid}/interaction/pending"))
        .await;
    assert_eq!(
        pending["pending"]["prompt"], "Which colour, please?",
        "{pending}"
    );
    let asked = model_calls(&fake.requests().await, engine).len();

    fake.script(json!([{"shell": WRITE_REPORT}, {"text": ANSWER}]))
        .await;
    let (code, body) = server
        .post_json(
            &format!("/v1/jobs/{rid}/interaction/reply"),
            json!({"interaction_id": 1, "response": "teal-green"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let status = server
        .wait_status_within(
            &format!("/v1/jobs/{rid}"),
            &["succeeded", "failed", "canceled"],
            turn,
        )
        .await;
    assert_eq!(
        status["status"],
        "succeeded",
        "{status}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    let calls = model_calls(&fake.requests().await, engine);
    let resumed = calls[asked].to_string();
    assert!(
        resumed.contains("Which colour, please?"),
        "the resumed request lacks the earlier history: {resumed}"
    );
    assert!(resumed.contains("teal-green"), "{resumed}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["data"]["summary"], "wrote it");
    // The question and the reply sit between the two turns; the question's own JSON is not
    // repeated as a message.
    let items = assert_conversation(&server, &rid, "").await;
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    let asked = kinds
        .iter()
        .position(|k| *k == "user_input_required")
        .unwrap();
    assert_eq!(items[asked]["text"], "Which colour, please?");
    assert_eq!(items[asked + 1]["kind"], "interaction_reply");
    assert_eq!(items[asked + 1]["text"], "teal-green");
    assert!(
        !items[..asked]
            .iter()
            .any(|i| i["text"].as_str().unwrap().contains("ask_user")),
        "{items:?}"
    );
}

/// A model answering HTTP 500 fails the run quickly, saying so.
async fn model_error(engine: &str) {
    let fake = FakeModel::start();
    // `retry-after-ms` is how a provider says when to try again; opencode and Kilo (an opencode
    // fork) wait that long between their five retries instead of backing off for about 80 s.
    fake.script(
        json!([{"error": 500, "message": "model exploded", "repeat": 100,
                        "retry_after_ms": 100}]),
    )
    .await;
    let server = server_for(engine, &fake, &[report_skill("reporter")], &[]);
    let started = std::time::Instant::now();
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": engine, "input": {"text": "go"}}))
        .await;
    let status = server
        .wait_status_within(
            &format!("/v1/jobs/{rid}"),
            &["succeeded", "failed", "canceled"],
            Duration::from_secs(200),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(status["status"], "failed", "{status}");
    let message = status["error"]["message"].as_str().unwrap_or("");
    let says = ["500", "model exploded", "model request failed"];
    assert!(
        says.iter().any(|s| message.contains(s)),
        "{status}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    // Qwen Code retries a 500 with backoff whatever its settings say (~80 s; it honours
    // `retry-after-ms` only on 429 and 503). opencode and Kilo honour the header, but start
    // slowly: up to a minute before their first request while the test run loads both cores.
    // The others honour SKILL_RUNNER_ENGINE_MAX_RETRIES.
    let bound = match engine {
        "qwen" => 150,
        "opencode" | "kilo" => 120,
        _ => 30,
    };
    assert!(took < Duration::from_secs(bound), "took {took:?}");
}

/// A model that never answers: the hard timeout ends the run with `TIMEOUT` and no CLI process
/// is left.
async fn model_hangs(engine: &str) {
    let fake = FakeModel::start();
    fake.script(json!([{"hang": true}, {"hang": true}, {"hang": true}]))
        .await;
    let server = server_for(
        engine,
        &fake,
        &[report_skill("reporter")],
        &[
            ("SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", "3"),
            ("SKILL_RUNNER_KILL_GRACE_SECONDS", "1"),
        ],
    );
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": engine, "input": {"text": "go"}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(
        (status["status"].as_str(), status["error"]["code"].as_str()),
        (Some("failed"), Some("TIMEOUT")),
        "{status}"
    );
    let run_dir = server.run_dir(&status);
    let left = processes_in(&run_dir);
    assert!(
        left.is_empty(),
        "processes left in the run folder: {left:?}"
    );
}

/// Two Agent Skills standard skills in one run: the CLI itself lists both (each description
/// carries a marker that the model's requests show, while the service's prompt names the
/// skills without them), the model runs the second skill's script from where the CLI keeps
/// skills, and the run ends with the agent's final message as `text` and the script's artifact.
async fn standard_skills_job(engine: &str) {
    let fake = FakeModel::start();
    let main = common::standard_skill("pdfx", "Makes PDF-like reports. DESC-MARK-51c2");
    let other = common::standard_skill("notes", "Keeps notes of a task. DESC-MARK-9e0b").file(
        "scripts/make.sh",
        "mkdir -p artifacts && echo noted > artifacts/notes.txt\n",
    );
    let server = server_for(engine, &fake, &[main.clone(), other.clone()], &[]);
    fake.script(json!([
        {"shell": "find \"$PWD\" -path '*skills/notes/scripts/make.sh' -exec sh {} \\;"},
        {"text": "Done: artifacts/notes.txt"}
    ]))
    .await;
    let rid = server
        .create_job(
            json!({"skill_id": "pdfx", "skills": ["notes"], "engine": engine,
                           "input": {"prompt": "take the notes"}}),
        )
        .await;
    let status = succeeded(&server, &fake, &rid).await;
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"text": "Done: artifacts/notes.txt"})
    );
    assert_eq!(
        result["result"]["artifacts"],
        json!(["artifacts/notes.txt"]),
        "{}",
        failure_context(&server, &fake, &rid).await
    );
    let calls = model_calls(&fake.requests().await, engine);
    let seen: String = calls.iter().map(|c| c["body"].to_string()).collect();
    for marker in ["DESC-MARK-51c2", "DESC-MARK-9e0b"] {
        assert!(
            seen.contains(marker),
            "the CLI did not list {marker}: {seen}"
        );
    }
    let prompt = std::fs::read_to_string(server.run_dir(&status).join("logs/prompt.txt")).unwrap();
    assert!(
        prompt.contains("\"pdfx\"") && prompt.contains("notes"),
        "{prompt}"
    );
    assert!(!prompt.contains("DESC-MARK"), "{prompt}");
    // Each CLI got the folders as installed: no runner.json added, named after the skill.
    let copies: Vec<std::path::PathBuf> = walkdir::WalkDir::new(server.workspace(&status))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == "SKILL.md")
        .map(|e| e.into_path())
        .collect();
    for skill in [&main, &other] {
        let copy = copies
            .iter()
            .find(|p| p.parent().unwrap().ends_with(&skill.top))
            .unwrap_or_else(|| panic!("no copy of {} in {copies:?}", skill.top));
        assert_eq!(std::fs::read(copy).unwrap(), skill.files["SKILL.md"]);
        assert!(!copy.parent().unwrap().join("assets/runner.json").exists());
    }
}

/// What a standard skill's run is given and gives back, on codex: a runtime `output_schema`
/// makes the answer validated JSON (repaired out of prose, or the run fails naming the
/// schema's complaint); `input.files` makes the run wait for an upload that holds them, and
/// the prompt names where they landed; and every create that cannot work is refused, naming
/// why.
#[tokio::test]
async fn a_standard_skill_run_answers_to_a_schema_and_takes_files() {
    if !in_netns(
        concat!(
            module_path!(),
            "::a_standard_skill_run_answers_to_a_schema_and_takes_files"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    let mut skills = vec![
        common::standard_skill("pdfx", "Makes reports."),
        report_skill("reporter").runner(json!({"engines": ["claude"]})),
    ];
    skills.extend((1..=8).map(|n| common::standard_skill(&format!("extra-{n}"), "More.")));
    let limit = (skills[0].files.values().map(Vec::len).sum::<usize>() * 2).to_string();
    let server = server_for(
        "codex",
        &fake,
        &skills,
        &[("SKILL_RUNNER_RUN_SKILLS_MAX_BYTES", &limit)],
    );
    let finished = |rid: String| {
        let server = &server;
        async move {
            let path = format!("/v1/jobs/{rid}");
            let status = server
                .wait_status_within(&path, &["succeeded", "failed"], Duration::from_secs(120))
                .await;
            let (_, result) = server.get(&format!("{path}/result")).await;
            (status, result)
        }
    };
    let schema = json!({"type": "object", "required": ["pages"],
                        "properties": {"pages": {"type": "integer"}}});
    let job = |extra: Value| {
        let mut body = json!({"skill_id": "pdfx", "engine": "codex", "input": {"prompt": "count"}});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };

    fake.script(json!([{"text": "Counted them.\n```json\n{\"pages\": 3}\n```"}]))
        .await;
    let rid = server
        .create_job(job(json!({"runtime_options": {"output_schema": schema}})))
        .await;
    let (status, result) = finished(rid).await;
    assert_eq!(status["status"], "succeeded", "{result}");
    assert_eq!(result["result"]["data"], json!({"pages": 3}));
    assert_eq!(result["result"]["repair_level"], "deterministic_generic");

    fake.script(json!([{"text": "{\"pages\": \"three\"}"}]))
        .await;
    let rid = server
        .create_job(job(
            json!({"runtime_options": {"output_schema": schema, "output_repair_rounds": 0}}),
        ))
        .await;
    let (status, result) = finished(rid).await;
    assert_eq!(status["status"], "failed", "{result}");
    assert!(
        result["result"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Output validation error: \"three\" is not of type")),
        "{result}"
    );

    // Files named in the input: the run waits for them, and the prompt says where they are.
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            job(json!({"input": {"prompt": "read it", "files": ["docs/a.txt"]}})),
        )
        .await;
    assert_eq!(created["status"], "queued", "{created}");
    let rid = created["request_id"].as_str().unwrap().to_owned();
    let (code, refused) = server
        .upload_inputs(&rid, vec![("other.txt", b"x".as_slice())])
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("docs/a.txt"), "{refused}");
    fake.script(json!([{"text": "Read it."}])).await;
    let (code, uploaded) = server
        .upload_inputs(&rid, vec![("docs/a.txt", b"hello".as_slice())])
        .await;
    assert_eq!(code, 200, "{uploaded}");
    let (status, result) = finished(rid).await;
    assert_eq!(
        result["result"]["data"],
        json!({"text": "Read it."}),
        "{status}"
    );
    let prompt = std::fs::read_to_string(server.run_dir(&status).join("logs/prompt.txt")).unwrap();
    let landed = server.workspace(&status).join("uploads/docs/a.txt");
    assert!(prompt.contains(landed.to_str().unwrap()), "{prompt}");

    // Creates that cannot work.
    let nine: Vec<String> = (1..=8).map(|n| format!("extra-{n}")).collect();
    let refusals = [
        (
            job(
                json!({"runtime_options": {"output_schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}),
            ),
            400,
            "not a valid JSON Schema",
        ),
        (
            json!({"skill_id": "reporter", "engine": "claude", "input": {"text": "t"},
                   "runtime_options": {"output_schema": schema}}),
            400,
            "OUTPUT_SCHEMA_UNSUPPORTED",
        ),
        (job(json!({"skills": nine})), 400, "RUN_SKILLS_TOO_MANY"),
        (
            job(json!({"skills": ["missing"]})),
            404,
            "Skill not found: 'missing' (named in skills)",
        ),
        (
            job(json!({"skills": ["reporter"]})),
            400,
            "SKILL_ENGINE_UNSUPPORTED",
        ),
        (
            job(json!({"skills": ["extra-1", "extra-2"]})),
            400,
            "RUN_SKILLS_TOO_LARGE",
        ),
        (
            job(json!({"input": {"prompt": "p", "files": ["../etc/passwd"]}})),
            400,
            "input.files names '../etc/passwd'",
        ),
        (
            json!({"skill_source": "temp_upload", "engine": "codex", "skills": ["pdfx"]}),
            422,
            "skills",
        ),
    ];
    for (body, code, says) in refusals {
        let (got, answer) = server.post_json("/v1/jobs", body.clone()).await;
        assert_eq!(got, code, "{body}: {answer}");
        assert!(
            answer["detail"].to_string().contains(says),
            "{body}: {answer}"
        );
    }
    // Within the limits, the other skill is taken.
    fake.script(json!([{"text": "ok"}])).await;
    let rid = server.create_job(job(json!({"skills": ["extra-1"]}))).await;
    let (status, _) = finished(rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
}

/// `collect_skill_run_feedback`, as the reference has it: the agent is told to write a note on
/// the skill when it succeeds, and the run's bundle carries the note beside the result; a run
/// that did not ask gets neither the instruction nor the note in its bundle.
#[tokio::test]
async fn a_feedback_note_is_asked_for_and_kept_with_the_result() {
    if !in_netns(
        concat!(
            module_path!(),
            "::a_feedback_note_is_asked_for_and_kept_with_the_result"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
    let note = "The steps were clear; the output schema could say more.";
    for asked in [true, false] {
        fake.script(json!([
            {"shell": format!("{WRITE_REPORT}; printf '{note}' > _skill_run_feedback.md")},
            {"text": ANSWER}
        ]))
        .await;
        let rid = server
            .create_job(
                json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"},
                               "runtime_options": {"collect_skill_run_feedback": asked}}),
            )
            .await;
        let status = succeeded(&server, &fake, &rid).await;
        let told =
            std::fs::read_to_string(server.run_dir(&status).join("logs/prompt.txt")).unwrap();
        assert_eq!(told.contains("_skill_run_feedback.md"), asked, "{told}");
        let (code, _, zip) = server.get_bytes(&format!("/v1/jobs/{rid}/bundle")).await;
        assert_eq!(code, 200);
        let files = common::unzip(&zip);
        assert!(
            files.contains_key("artifacts/report.txt"),
            "{:?}",
            files.keys()
        );
        match asked {
            true => assert_eq!(files["result/_skill_run_feedback.md"], note.as_bytes()),
            false => assert!(!files.contains_key("result/_skill_run_feedback.md")),
        }
    }
}

/// An answer that breaks the output schema goes back to the agent, in its session, with what
/// was wrong (the reference's output repair): two bad answers and a good one end `succeeded`
/// after two rounds; with `output_repair_rounds: 0` the first bad answer fails the run.
#[tokio::test]
async fn an_unfit_answer_is_repaired_in_the_same_session() {
    if !in_netns(
        concat!(
            module_path!(),
            "::an_unfit_answer_is_repaired_in_the_same_session"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    let server = server_for("codex", &fake, &[report_skill("reporter")], &[]);
    fake.script(json!([
        {"shell": WRITE_REPORT},
        {"text": "I wrote it."},
        {"text": "{\"summary\": 3}"},
        {"text": ANSWER}
    ]))
    .await;
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"}}))
        .await;
    let status = succeeded(&server, &fake, &rid).await;
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(
        result["result"]["data"],
        json!({"summary": "wrote it", "report": "artifacts/report.txt"})
    );
    assert!(
        result["result"]["validation_warnings"]
            .to_string()
            .contains("OUTPUT_SCHEMA_REPAIR_CONVERGED"),
        "{result}"
    );
    let prompts = std::fs::read_to_string(server.run_dir(&status).join("logs/prompt.txt")).unwrap();
    assert!(prompts.contains("repair round 1 of 3"), "{prompts}");
    assert!(
        prompts.contains("repair round 2 of 3") && !prompts.contains("round 3"),
        "{prompts}"
    );
    // The model heard what was wrong, in the conversation it had (codex resumes its thread).
    let calls = model_calls(&fake.requests().await, "codex");
    let last = calls.last().unwrap()["body"].to_string();
    assert!(
        last.contains("did not satisfy the output contract"),
        "{last}"
    );
    assert!(last.contains("I wrote it."), "the same session: {last}");
    // The repair is told in the run's events, each round where it began, and its warning
    // before the end.
    let (_, history) = server.get(&format!("/v1/jobs/{rid}/events/history")).await;
    let events = history["events"].as_array().unwrap();
    let n = events.len();
    assert_eq!(events[n - 2]["type"], "diagnostic.warning", "{history}");
    assert_eq!(
        events[n - 2]["data"]["code"],
        "OUTPUT_SCHEMA_REPAIR_CONVERGED"
    );
    assert_eq!(events[n - 1]["data"]["to"], "succeeded");
    let repair: Vec<String> = events
        .iter()
        .filter_map(|e| {
            let kind = e["type"].as_str().unwrap();
            let round = &e["data"]["internal_round_index"];
            match kind {
                "assistant.message.superseded" => {
                    Some(format!("superseded {}", e["data"]["repair_round_index"]))
                }
                _ if kind.starts_with("diagnostic.output_repair.") => Some(format!(
                    "{} {round}",
                    &kind["diagnostic.output_repair.".len()..]
                )),
                _ => None,
            }
        })
        .collect();
    assert_eq!(
        repair,
        [
            "started 0",
            "superseded 1",
            "round.started 1",
            "round.completed 1",
            "superseded 2",
            "round.started 2",
            "round.completed 2",
            "converged 2"
        ],
        "{history}"
    );
    let round_one = events
        .iter()
        .find(|e| e["type"] == "diagnostic.output_repair.round.started")
        .unwrap();
    assert!(
        round_one["data"]["problems"].to_string().contains("JSON"),
        "{round_one}"
    );
    // The chat shows each round as a notice after the answer it replaces.
    let (_, chat) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    let notices: Vec<&Value> = chat["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["correlation"]["repair_round"].is_u64())
        .collect();
    assert_eq!(notices.len(), 2, "{chat}");
    assert!(
        notices[1]["text"]
            .as_str()
            .unwrap()
            .contains("repair round 2 of 3"),
        "{chat}"
    );
    // And the timeline on its page, one step per round.
    let (_, page) = server.text(&format!("/ui/runs/{rid}")).await;
    assert_eq!(page.matches("data-step=\"repair\"").count(), 2, "{page}");
    assert!(page.contains("Repair round 2 of 3"), "{page}");

    fake.script(json!([{"text": "{\"summary\": 3}"}])).await;
    let rid = server
        .create_job(
            json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "again"},
                           "runtime_options": {"output_repair_rounds": 0, "no_cache": true}}),
        )
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert!(
        status["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Output validation error"),
        "{status}"
    );
}

/// A run of codex while it is logged out waits in `waiting_auth`, saying where to log in; an
/// OpenAI account signed in with a device code queues it, and codex answers with that login.
#[tokio::test]
async fn a_run_waits_for_a_sign_in_and_goes_on_with_it() {
    if !in_netns(
        concat!(
            module_path!(),
            "::a_run_waits_for_a_sign_in_and_goes_on_with_it"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    let dirs = skill_runner_test_support::TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let base = format!("{}/v1", fake.base);
    let server = skill_runner_test_support::agents::Agents::new().server(
        dirs,
        &[
            ("SKILL_RUNNER_CODEX_BASE_URL", base.as_str()),
            ("SKILL_RUNNER_OPENAI_AUTH_ISSUER", fake.base.as_str()),
            ("SKILL_RUNNER_ENGINE_MAX_RETRIES", "0"),
            (
                "SKILL_RUNNER_NPM_PREFIX",
                skill_runner_test_support::agents::npm_prefix()
                    .to_str()
                    .unwrap(),
            ),
        ],
    );
    fake.script(json!([{"shell": WRITE_REPORT}, {"text": ANSWER}]))
        .await;
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"}}))
        .await;
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_auth"])
        .await;
    let (_, waiting) = server.get(&format!("/v1/jobs/{rid}/auth/session")).await;
    assert!(
        waiting["auth_session"]["auth_methods"]
            .as_array()
            .unwrap()
            .contains(&json!("auth_code_or_url")),
        "{waiting}"
    );
    let (_, chat) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    assert!(
        chat.to_string().contains("/ui/engines/codex/models"),
        "the conversation says where to log in: {chat}"
    );

    let (code, session) = server
        .post_json(
            "/v1/engines/auth/oauth-proxy/sessions",
            json!({"engine": "codex", "transport": "oauth_proxy",
                   "auth_method": "auth_code_or_url"}),
        )
        .await;
    assert_eq!(code, 200, "{session}");
    let (code, _) = fake
        .post(
            "/__oauth/approve",
            json!({"user_code": session["user_code"]}),
        )
        .await;
    assert_eq!(code, 204);
    succeeded(&server, &fake, &rid).await;
    let calls = model_calls(&fake.requests().await, "codex");
    assert!(
        calls[0]["headers"].to_string().contains("fake-access-"),
        "codex used the signed-in account: {}",
        calls[0]["headers"]
    );
    let (_, history) = server.get(&format!("/v1/jobs/{rid}/events/history")).await;
    let kinds: Vec<String> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "conversation.state.changed" => {
                format!("{} -> {}", e["data"]["from"], e["data"]["to"]).replace('"', "")
            }
            other => other.to_owned(),
        })
        .collect();
    assert_eq!(
        kinds[..5],
        [
            "auth.required",
            "queued -> waiting_auth",
            "auth.completed",
            "waiting_auth -> queued",
            "queued -> running"
        ],
        "{history}"
    );
}

/// codex's own device login, delegated: the session shows the page and code it prints, the
/// terminal is taken while it runs, and it ends logged in once the code is approved; a login
/// canceled stops the CLI.
#[tokio::test]
async fn codex_logs_itself_in_with_a_device_code() {
    if !in_netns(
        concat!(module_path!(), "::codex_logs_itself_in_with_a_device_code"),
        "codex",
    ) {
        return;
    }
    let issuer = FakeModel::start();
    let agents = skill_runner_test_support::agents::Agents::new();
    let prefix = skill_runner_test_support::agents::npm_prefix();
    let server = agents.server(
        skill_runner_test_support::TestDirs::new(),
        &[
            ("SKILL_RUNNER_OPENAI_AUTH_ISSUER", issuer.base.as_str()),
            ("SKILL_RUNNER_NPM_PREFIX", prefix.to_str().unwrap()),
        ],
    );
    let start = json!({"engine": "codex", "transport": "cli_delegate",
                       "auth_method": "auth_code_or_url"});
    let (code, session) = server
        .post_json("/v1/engines/auth/cli-delegate/sessions", start.clone())
        .await;
    assert_eq!(code, 200, "{session}");
    assert_eq!(session["status"], "waiting_user", "{session}");
    assert_eq!(session["auth_url"], format!("{}/codex/device", issuer.base));
    let user_code = session["user_code"]
        .as_str()
        .expect("the code codex printed");
    let (code, busy) = server
        .post_json("/v1/engines/auth/cli-delegate/sessions", start.clone())
        .await;
    assert_eq!(code, 409, "one login in the terminal at a time: {busy}");
    let (code, _) = issuer
        .post("/__oauth/approve", json!({"user_code": user_code}))
        .await;
    assert_eq!(code, 204);
    let path = format!(
        "/v1/engines/auth/cli-delegate/sessions/{}",
        session["session_id"].as_str().unwrap()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let done = loop {
        let (_, now) = server.get(&path).await;
        if now["status"] != "waiting_user" || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(agents.path("agent-home/.codex/auth.json").is_file());
    let (_, status) = server.get("/v1/engines/auth-status").await;
    assert_eq!(status["engines"]["codex"]["auth_ready"], true, "{status}");

    // Canceled: the CLI stops, the terminal is free again.
    let (code, again) = server
        .post_json("/v1/engines/auth/cli-delegate/sessions", start.clone())
        .await;
    assert_eq!(code, 200, "{again}");
    let (code, canceled) = server
        .post_json(
            &format!(
                "/v1/engines/auth/cli-delegate/sessions/{}/cancel",
                again["session_id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(canceled["canceled"], true);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, terminal) = server.get("/ui/engines/tui/session").await;
        if terminal["session"]["live"] == false {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{terminal}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, refused) = server
        .post_json(
            "/v1/engines/auth/cli-delegate/sessions",
            json!({"engine": "claude", "transport": "cli_delegate"}),
        )
        .await;
    assert_eq!(code, 422, "{refused}");
}

/// A job naming an operator's provider and an effort reaches that provider's endpoint with
/// its key, model and effort, not the engine's own; what does not fit is refused naming what
/// would.
async fn provider_job(engine: &str) {
    let own = FakeModel::start();
    let gateway = FakeModel::start();
    let server = server_for(engine, &own, &[report_skill("reporter")], &[]);
    let base = match engine {
        "claude" => gateway.base.clone(),
        _ => format!("{}/v1", gateway.base),
    };
    const GATEWAY_KEY: &str = "sk-gateway-key-5d1e77";
    let path = format!("/v1/management/engines/{engine}/custom-providers/gw");
    let (code, view) = server
        .put_json(
            &path,
            json!({"provider_id": "GW", "base_url": base, "api_key": GATEWAY_KEY,
                   "models": ["m-small", {"id": "m-big", "supported_effort": ["low", "high"]}],
                   "default_model": "m-small"}),
        )
        .await;
    assert_eq!(code, 200, "{view}");
    assert_eq!(view["provider_id"], "gw");
    assert_eq!(view["api_key_configured"], true);
    assert!(!view.to_string().contains(GATEWAY_KEY), "{view}");
    let (_, listed) = server
        .get(&format!("/v1/management/engines/{engine}/custom-providers"))
        .await;
    assert_eq!(listed["supported"], true);
    assert_eq!(
        listed["providers"][0]["models"],
        json!(["m-small", "m-big"])
    );
    let (_, models) = server.get(&format!("/v1/engines/{engine}/models")).await;
    assert!(
        models["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "gw/m-big" && m["provider_id"] == "gw"),
        "{models}"
    );
    let job = |extra: Value| {
        let mut body = json!({"skill_id": "reporter", "engine": engine, "input": {"text": "go"}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // What does not fit is refused, naming what would.
    let (code, refused) = server
        .post_json("/v1/jobs", job(json!({"provider_id": "nope"})))
        .await;
    assert_eq!(code, 400, "{refused}");
    assert_eq!(refused["detail"]["code"], "ENGINE_PROVIDER_INVALID");
    assert!(
        refused["detail"]["allowed_values"]
            .as_array()
            .unwrap()
            .contains(&json!("gw")),
        "{refused}"
    );
    let (code, refused) = server
        .post_json(
            "/v1/jobs",
            job(json!({"provider_id": "gw", "effort": "high"})),
        )
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("'m-small' takes no reasoning effort"),
        "{refused}"
    );
    let (code, refused) = server
        .post_json("/v1/jobs", job(json!({"model": "gw/m-big@max"})))
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("low, high"), "{refused}");

    gateway
        .script(json!([{"shell": WRITE_REPORT}, {"text": ANSWER}]))
        .await;
    let rid = server
        .create_job(job(
            json!({"provider_id": "gw", "model": "m-big", "effort": "high"}),
        ))
        .await;
    succeeded(&server, &gateway, &rid).await;
    assert!(
        model_calls(&own.requests().await, engine).is_empty(),
        "the engine's own endpoint was not asked"
    );
    let calls = model_calls(&gateway.requests().await, engine);
    let first = calls.first().expect("the provider's endpoint was asked");
    let body = first["body"].to_string();
    assert!(body.contains("m-big"), "the provider's model: {body}");
    assert!(body.contains("\"high\""), "the effort: {body}");
    assert!(
        first["headers"].to_string().contains(GATEWAY_KEY),
        "the provider's key: {}",
        first["headers"]
    );
}

macro_rules! provider_matrix {
    ($($engine:ident),*) => {$(
        mod $engine {
            use super::*;

            #[tokio::test]
            async fn a_job_reaches_the_provider_it_names_with_its_effort() {
                if in_netns(concat!(module_path!(), "::a_job_reaches_the_provider_it_names_with_its_effort"), stringify!($engine)) {
                    provider_job(stringify!($engine)).await;
                }
            }
        }
    )*};
}

mod providers {
    use super::*;

    provider_matrix!(codex, claude, opencode, qwen, kilo);
}

macro_rules! cli_matrix {
    ($($engine:ident),*) => {$(
        mod $engine {
            use super::*;

            #[tokio::test]
            async fn auto_job_writes_the_artifact_and_answers_json() {
                if in_netns(concat!(module_path!(), "::auto_job_writes_the_artifact_and_answers_json"), stringify!($engine)) {
                    auto_job(stringify!($engine), false).await;
                }
            }

            /// Sharing the service's network, Landlock lets the CLI connect to its egress
            /// proxy's port only: the CLI must honour the proxy variables to reach its model.
            #[tokio::test]
            async fn auto_job_through_the_proxy_variables_when_sharing_the_network() {
                if in_netns(concat!(module_path!(), "::auto_job_through_the_proxy_variables_when_sharing_the_network"), stringify!($engine)) {
                    auto_job(stringify!($engine), true).await;
                }
            }

            #[tokio::test]
            async fn interactive_job_resumes_the_same_session() {
                if in_netns(concat!(module_path!(), "::interactive_job_resumes_the_same_session"), stringify!($engine)) {
                    interactive_job(stringify!($engine)).await;
                }
            }

            #[tokio::test]
            async fn standard_skills_are_listed_by_the_cli_itself() {
                if in_netns(concat!(module_path!(), "::standard_skills_are_listed_by_the_cli_itself"), stringify!($engine)) {
                    standard_skills_job(stringify!($engine)).await;
                }
            }

            #[tokio::test]
            async fn model_http_500_fails_quickly() {
                if in_netns(concat!(module_path!(), "::model_http_500_fails_quickly"), stringify!($engine)) {
                    model_error(stringify!($engine)).await;
                }
            }

            #[tokio::test]
            async fn silent_model_times_out_and_leaves_no_process() {
                if in_netns(concat!(module_path!(), "::silent_model_times_out_and_leaves_no_process"), stringify!($engine)) {
                    model_hangs(stringify!($engine)).await;
                }
            }
        }
    )*};
}

cli_matrix!(codex, gemini, claude, opencode, qwen, kilo);

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

#[tokio::test]
async fn engines_models_and_model_validation() {
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);
    let installed = npm_prefix().join("bin/codex").is_file();
    let (status, body) = server.get("/v1/engines").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["engines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["engine"].as_str().unwrap())
        .collect();
    // The active list: the legacy gemini and iflow are left out unless allowed.
    assert_eq!(
        names,
        ["codex", "claude", "opencode", "qwen", "kilo", "codebuddy"]
    );
    let codex = &body["engines"][0]["cli_version_detected"];
    if installed {
        assert_eq!(codex, "0.169.0");
    } else {
        eprintln!("\n*** codex CLI not installed: version detection checked as absent ***\n");
        assert!(codex.is_null());
    }
    let (status, models) = server.get("/v1/engines/codex/models").await;
    assert_eq!(status, 200);
    assert_eq!(models["source"], "pinned_snapshot");
    assert_eq!(models["snapshot_version_used"], "0.169.0");
    let reason = if installed {
        Value::Null
    } else {
        json!("cli_version_unknown")
    };
    assert_eq!(models["fallback_reason"], reason);
    assert!(
        models["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "gpt-5.5")
    );
    for missing in ["/v1/engines/script/models", "/v1/engines/nope/models"] {
        assert_eq!(server.get(missing).await.0, 404, "{missing}");
    }
    if !installed {
        return;
    }
    for (model, says) in [
        ("gpt-0", "not in the model list"),
        ("gpt-5.5@ultra", "does not support reasoning effort"),
    ] {
        let (status, body) = server
            .post_json("/v1/jobs", json!({"skill_id": "reporter", "engine": "codex", "model": model, "input": {"text": "x"}}))
            .await;
        assert_eq!(status, 400, "{body}");
        assert!(body["detail"].as_str().unwrap().contains(says), "{body}");
    }
}

#[tokio::test]
async fn two_concurrent_codex_runs_keep_their_own_models() {
    if !in_netns(
        concat!(
            module_path!(),
            "::two_concurrent_codex_runs_keep_their_own_models"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    let answer = json!({"text": ANSWER, "delay_ms": 5000});
    fake.script(json!([answer, answer])).await;
    let server = server_for(
        "codex",
        &fake,
        &[report_skill("reporter")],
        &[("SKILL_RUNNER_MAX_CONCURRENT", "2")],
    );
    let mut rids = Vec::new();
    for model in ["gpt-5.5", "gpt-5.5-mini@low"] {
        let rid = server
            .create_job(json!({"skill_id": "reporter", "engine": "codex", "model": model, "input": {"text": model}}))
            .await;
        rids.push(rid);
    }
    let mut homes = Vec::new();
    for rid in &rids {
        let status = server.wait_job(rid).await;
        assert_eq!(
            status["status"],
            "succeeded",
            "{status}\n{}",
            failure_context(&server, &fake, rid).await
        );
        homes.push(
            server
                .workspace(&status)
                .join(".agent-home/.codex/config.toml"),
        );
    }
    let configs: Vec<String> = homes
        .iter()
        .map(|h| std::fs::read_to_string(h).unwrap())
        .collect();
    assert!(
        configs[0].contains("model = \"gpt-5.5\"\n") && !configs[0].contains("mini"),
        "{}",
        configs[0]
    );
    assert!(
        configs[1].contains("model = \"gpt-5.5-mini\""),
        "{}",
        configs[1]
    );
    let calls = model_calls(&fake.requests().await, "codex");
    let at: Vec<u64> = calls
        .iter()
        .map(|c| c["received_ms"].as_u64().unwrap())
        .collect();
    assert!(at[1] - at[0] < 5000, "the runs did not overlap: {at:?}");
    let mut models: Vec<(String, Value)> = calls
        .iter()
        .map(|c| {
            (
                c["body"]["model"].as_str().unwrap().to_owned(),
                c["body"]["reasoning"]["effort"].clone(),
            )
        })
        .collect();
    models.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(models[0].0, "gpt-5.5");
    assert_eq!(
        models[1],
        ("gpt-5.5-mini".to_owned(), json!("low")),
        "{models:?}"
    );
}

/// `:invoke` of an agent skill runs one auto turn of its engine through the runner core that
/// jobs use: the same answer as a job, `meta.runner_type: "engine:codex"`.
#[tokio::test]
async fn an_agent_skill_answers_through_invoke_as_through_a_job() {
    if !in_netns(
        concat!(
            module_path!(),
            "::an_agent_skill_answers_through_invoke_as_through_a_job"
        ),
        "codex",
    ) {
        return;
    }
    let fake = FakeModel::start();
    fake.script(json!([
        {"shell": WRITE_REPORT}, {"text": ANSWER},
        {"shell": WRITE_REPORT}, {"text": ANSWER}
    ]))
    .await;
    let server = server_for(
        "codex",
        &fake,
        &[report_skill("reporter")],
        &[("OPENSKILL_TIMEOUT_MS", "120000")],
    );
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "go"}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, job) = server.get(&format!("/v1/jobs/{rid}/result")).await;

    let (code, invoked) = server
        .post_json(
            "/skills/reporter:invoke",
            json!({"input": {"text": "go"}, "engine": "codex"}),
        )
        .await;
    assert_eq!(
        code,
        200,
        "{invoked}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    assert_eq!(invoked["data"], job["result"]["data"], "{invoked}");
    assert_eq!(invoked["meta"]["runner_type"], "engine:codex");
    let calls = model_calls(&fake.requests().await, "codex");
    assert!(calls.len() >= 4, "two turns of two model calls: {calls:?}");
}

/// opencode's and Kilo's own `question` tool, which the reference saw wait forever for a
/// terminal answer in a headless turn: a model that reaches for it is answered at once and the
/// turn goes on to its answer instead of hanging until the hard timeout. (The configuration
/// denies the tool; with the pinned versions, `run` also answers it without the denial, checked
/// by removing it: the denial stays for versions that do not.)
async fn question_tool_is_denied(engine: &str) {
    let fake = FakeModel::start();
    fake.script(json!([
        {"tool": "question", "args": {"questions": [{"question": "Which one?", "header": "Pick",
            "options": [{"label": "a", "description": "the first"}]}]}},
        {"text": ANSWER}
    ]))
    .await;
    let server = server_for(
        engine,
        &fake,
        &[report_skill("reporter")],
        &[("SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", "90")],
    );
    let rid = server
        .create_job(json!({"skill_id": "reporter", "engine": engine, "input": {"text": "go"}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_ne!(
        status["error"]["code"],
        "TIMEOUT",
        "{status}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    let calls = model_calls(&fake.requests().await, engine);
    let told: String = calls[1..].iter().map(|c| c["body"].to_string()).collect();
    assert!(
        calls.len() >= 2,
        "the model heard back about its question call: {calls:?}"
    );
    assert!(told.contains("question"), "{told}");
}

#[tokio::test]
async fn opencode_question_tool_is_denied() {
    if in_netns(
        concat!(module_path!(), "::opencode_question_tool_is_denied"),
        "opencode",
    ) {
        question_tool_is_denied("opencode").await;
    }
}

#[tokio::test]
async fn kilo_question_tool_is_denied() {
    if in_netns(
        concat!(module_path!(), "::kilo_question_tool_is_denied"),
        "kilo",
    ) {
        question_tool_is_denied("kilo").await;
    }
}

/// A run of a logged-out engine waits in `waiting_auth`; the login file imported through the
/// run (opencode's own `auth.json`, as `opencode auth login` writes it) resumes it, the CLI
/// authenticates with it (the model sees its key) and the run succeeds. After a restart a
/// second run finds the login and runs at once.
#[tokio::test]
async fn a_logged_out_engine_waits_for_its_login_and_keeps_it_across_a_restart() {
    if !in_netns(
        concat!(
            module_path!(),
            "::a_logged_out_engine_waits_for_its_login_and_keeps_it_across_a_restart"
        ),
        "opencode",
    ) {
        return;
    }
    const KEY: &str = "sk-imported-login-7";
    let fake = FakeModel::start();
    fake.script(json!([{"text": ANSWER}, {"text": ANSWER}]))
        .await;
    let agent_home = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", fake.base);
    let env = [
        ("SKILL_RUNNER_OPENCODE_BASE_URL", base.as_str()),
        ("SKILL_RUNNER_ENGINE_MAX_RETRIES", "0"),
        (
            "SKILL_RUNNER_AGENT_HOME",
            agent_home.path().to_str().unwrap(),
        ),
    ];
    let dirs = TestDirs::new();
    report_skill("reporter").write_into(&dirs.skills);
    let mut server = TestServer::start_with(dirs.clone(), &env);
    let job = json!({"skill_id": "reporter", "engine": "opencode", "input": {"text": "go"}});

    let rid = server.create_job(job.clone()).await;
    let path = format!("/v1/jobs/{rid}");
    server.wait_status(&path, &["waiting_auth"]).await;
    let (_, session) = server.get(&format!("{path}/auth/session")).await;
    assert_eq!(
        session["auth_session"]["import_files"][0]["target_relpath"],
        ".local/share/opencode/auth.json",
        "{session}"
    );
    assert!(fake.requests().await.is_empty(), "no turn ran");
    let login = json!({"skill_runner": {"type": "api", "key": KEY}}).to_string();
    let part = reqwest::multipart::Part::bytes(login.into_bytes()).file_name("auth.json");
    let (code, accepted) = server
        .post_form(
            &format!("{path}/interaction/auth/import"),
            reqwest::multipart::Form::new().part("files", part),
        )
        .await;
    assert_eq!(code, 200, "{accepted}");
    let status = server.wait_job(&rid).await;
    assert_eq!(
        status["status"],
        "succeeded",
        "{status}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    let calls = model_calls(&fake.requests().await, "opencode");
    assert!(!calls.is_empty());
    for call in &calls {
        assert_eq!(call["headers"]["authorization"], format!("Bearer {KEY}"));
    }
    // The run had a copy for its turn; none is left in its folder.
    assert!(!folder_mentions(&server.run_dir(&status), KEY));

    server.terminate();
    let server = TestServer::start_with(dirs, &env);
    let (_, engines) = server.get("/v1/engines").await;
    let opencode = engines["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["engine"] == "opencode")
        .cloned();
    assert_eq!(opencode.unwrap()["auth_ready"], true, "{engines}");
    let rid = server.create_job(job).await;
    let status = server.wait_job(&rid).await;
    assert_eq!(
        status["status"],
        "succeeded",
        "{status}\n{}",
        failure_context(&server, &fake, &rid).await
    );
    let calls = model_calls(&fake.requests().await, "opencode");
    assert_eq!(
        calls.last().unwrap()["headers"]["authorization"],
        format!("Bearer {KEY}")
    );
}
