//! The agent chat (`POST /v1/agent/chat`) and its sessions, over real HTTP against the fake
//! model server: tool calls that really run, refused arguments answered per call id, limits,
//! provider failures and retries, Responses threading, resumed and concurrent sessions, and
//! streaming.

use skill_runner_test_support as common;

use std::time::Duration;

use common::{EventStream, FakeModel, TestDirs, TestServer};
use serde_json::{Value, json};

const KEY: &str = "sk-test-agent-key-0123";

/// A service whose every provider points at `fake`.
fn agent_server(fake: &FakeModel, dirs: std::sync::Arc<TestDirs>) -> TestServer {
    agent_server_with(fake, dirs, &[])
}

fn agent_server_with(
    fake: &FakeModel,
    dirs: std::sync::Arc<TestDirs>,
    extra: &[(&str, &str)],
) -> TestServer {
    let base = format!("{}/v1", fake.base);
    let mut env = vec![("SKILL_RUNNER_AGENT_MAX_RETRIES".to_owned(), "2".to_owned())];
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    for provider in ["OPENAI", "OPENAI_RESPONSES", "ANTHROPIC"] {
        env.push((
            format!("SKILL_RUNNER_AGENT_{provider}_BASE_URL"),
            base.clone(),
        ));
        env.push((format!("SKILL_RUNNER_AGENT_{provider}_API_KEY"), KEY.into()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::start_with(dirs, &env);
    std::fs::create_dir_all(server.dirs.data.join("files")).unwrap();
    server
}

async fn chat(server: &TestServer, body: Value) -> Value {
    let (status, answer) = server.post_json("/v1/agent/chat", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The session's events as the API serves them.
async fn session_events(server: &TestServer, id: &str) -> Vec<Value> {
    let (status, body) = server.get(&format!("/v1/sessions/{id}/events")).await;
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().unwrap().clone()
}

/// The content of the first tool message a model request carried.
fn first_tool_message(request: &Value) -> String {
    request["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// The tool call ids of the model's answer to request `n` (Chat Completions, streamed).
fn answered_call_ids(request: &Value) -> Vec<String> {
    let frames = request["response"]["body"].as_array().unwrap();
    frames
        .iter()
        .filter_map(|f| f[1].pointer("/choices/0/delta/tool_calls/0/id"))
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The id of the Responses API answer to `request`.
fn response_id(request: &Value) -> String {
    let frames = request["response"]["body"].as_array().unwrap();
    let completed = frames
        .iter()
        .find(|f| f[0] == "response.completed")
        .unwrap();
    completed[1]["response"]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_tool_call_then_text_is_recorded_event_by_event() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    std::fs::write(
        server.dirs.data.join("files/notes.txt"),
        "buy milk\nTODO: water the plants\n",
    )
    .unwrap();
    fake.script(json!([{"tool": "file_search", "args": {"query": "TODO"}},
                       {"text": "You have one TODO: water the plants."}]))
        .await;
    let resp = server
        .client
        .post(server.url("/v1/agent/chat"))
        .header("x-trace-id", "trace-42")
        .json(&json!({"message": "What is left to do?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-trace-id"], "trace-42");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["response"], "You have one TODO: water the plants.");
    assert_eq!(answer["trace_id"], "trace-42");
    assert_eq!(answer["error"], Value::Null);
    assert_eq!(answer["meta"]["provider"], "openai");
    assert_eq!(answer["meta"]["tool_calls_count"], 1);
    assert_eq!(answer["meta"]["validation_retries"], 0);
    assert_eq!(answer["meta"]["total_tokens"], 30);
    let call = &answer["tool_calls"][0];
    assert_eq!(
        (&call["tool"], &call["validated"]),
        (&json!("file_search"), &json!(true))
    );
    assert_eq!(
        call["result"]["data"]["matches"][0]["snippet"],
        "TODO: water the plants"
    );

    let id = answer["conversation_id"].as_str().unwrap();
    let events = session_events(&server, id).await;
    assert_eq!(
        types(&events),
        [
            "system.init",
            "user.message",
            "tool.use",
            "tool.result",
            "assistant.message",
            "result"
        ]
    );
    assert_eq!(seqs(&events), [1, 2, 3, 4, 5, 6]);
    assert_eq!(events[0]["session_id"], id);
    assert_eq!(events[2]["name"], "file_search");
    assert_eq!(events[2]["input"], json!({"query": "TODO"}));
    assert_eq!(events[3]["tool_use_id"], events[2]["tool_use_id"]);
    assert_eq!(events[3]["is_error"], false);
    assert_eq!(
        events[3]["output"]["data"]["matches"][0]["path"], "notes.txt",
        "the skill really ran: {}",
        events[3]
    );
    let result = &events[5];
    assert_eq!(result["stop_reason"], "end");
    assert_eq!(result["final_text"], answer["response"]);
    assert_eq!(result["steps"], 2);
    assert_eq!(result["provider_metadata"]["trace_id"], "trace-42");

    // The log on disk is what the API served: compact JSON, one event per line.
    let log = std::fs::read_to_string(server.dirs.data.join(format!("sessions/{id}/events.jsonl")))
        .unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, events);
    assert!(!log.contains(KEY));
    assert!(
        !server.log().contains(KEY),
        "the key reached the service log"
    );

    // The model was offered the skills, and got the result as the tool's answer to its call.
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0]["headers"]["authorization"],
        format!("Bearer {KEY}")
    );
    let offered: Vec<&str> = requests[0]["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for skill in ["calculator", "echo", "file_search", "log_transform"] {
        assert!(offered.contains(&skill), "{offered:?}");
    }
    let call_id = answered_call_ids(&requests[0]).remove(0);
    let tool_message = requests[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(tool_message["tool_call_id"], call_id.as_str());
    assert!(
        tool_message["content"]
            .as_str()
            .unwrap()
            .contains("water the plants")
    );
}

#[tokio::test]
async fn refused_arguments_are_answered_per_call_and_counted() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    fake.script(json!([
        {"tool": "calculator", "args": {"numbers": ["1", "2"], "ops": ["mean"]}},
        {"tool": "calculator", "args": {"numbers": [1, 2], "ops": ["mean"]}},
        {"text": "The mean is 1.5."}
    ]))
    .await;
    let answer = chat(&server, json!({"message": "mean of 1 and 2?"})).await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["meta"]["validation_retries"], 1);
    assert_eq!(answer["tool_calls"][0]["validated"], false);
    assert_eq!(answer["tool_calls"][1]["validated"], true);
    assert_eq!(
        answer["tool_calls"][1]["result"]["data"]["results"]["mean"],
        1.5
    );

    // Every call of every answer got a tool message in the next request.
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 3);
    for (n, request) in requests.iter().enumerate().take(2) {
        let next = requests[n + 1]["body"]["messages"].as_array().unwrap();
        for id in answered_call_ids(request) {
            let answered = next
                .iter()
                .find(|m| m["role"] == "tool" && m["tool_call_id"] == id.as_str())
                .unwrap_or_else(|| panic!("call {id} unanswered in {next:?}"));
            if n == 0 {
                let refusal: Value =
                    serde_json::from_str(answered["content"].as_str().unwrap()).unwrap();
                assert_eq!(refusal["error"]["type"], "InvalidArguments");
                let problem = &refusal["error"]["problems"][0];
                assert_eq!(problem["field"], "numbers/0");
                assert_eq!(problem["expected"], r#"type: "number""#);
                assert_eq!(problem["got"], r#""1""#);
            }
        }
    }
    let id = answer["conversation_id"].as_str().unwrap();
    let refused = &session_events(&server, id).await[3];
    assert_eq!(refused["type"], "tool.result");
    assert_eq!(refused["is_error"], true);
    assert_eq!(refused["error_type"], "InvalidArguments");
}

/// A refused call's problems name the field and what it wanted, never a secret's value: not to
/// the model, not in the session's events.
#[tokio::test]
async fn a_refusal_never_echoes_a_secret() {
    let fake = FakeModel::start();
    let dirs = TestDirs::new();
    let manifests = dirs.root.join("skills_manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("keyed.yaml"),
        "id: keyed\ntype: inproc\nentry: echo\ninput_schema:\n  type: object\n  properties:\n    api_key:\n      type: integer\n    text:\n      type: string\n",
    )
    .unwrap();
    let server = agent_server(&fake, dirs);
    fake.script(json!([
        {"tool": "keyed", "args": {"api_key": "sk-live-0123456789", "text": "hi"}},
        {"text": "Refused."}
    ]))
    .await;
    let answer = chat(&server, json!({"message": "call keyed"})).await;
    assert_eq!(answer["meta"]["validation_retries"], 1, "{answer}");
    let refusal = first_tool_message(&fake.requests().await[1]);
    assert!(!refusal.contains("sk-live"), "{refusal}");
    let refusal: Value = serde_json::from_str(&refusal).unwrap();
    let problem = &refusal["error"]["problems"][0];
    assert_eq!(problem["field"], "api_key");
    assert_eq!(problem["got"], r#""[redacted]""#);
    let events = session_events(&server, answer["conversation_id"].as_str().unwrap()).await;
    let events = serde_json::to_string(&events).unwrap();
    assert!(!events.contains("sk-live"), "{events}");
}

#[tokio::test]
async fn limits_refusals_and_provider_failures_end_chats_as_documented() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());

    // Four refused calls with the default limit of three.
    fake.script(json!([{"tool": "echo", "args": {"text": 5}, "repeat": 4}]))
        .await;
    let answer = chat(&server, json!({"message": "echo"})).await;
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["error"]["code"], "TOOL_INVOCATION_ERROR");
    assert_eq!(answer["meta"]["validation_retries"], 4);
    assert_eq!(answer["meta"]["stop_reason"], "error");
    let events = session_events(&server, answer["conversation_id"].as_str().unwrap()).await;
    let tail: Vec<&str> = types(&events).into_iter().rev().take(3).collect();
    assert_eq!(tail, ["result", "runtime.error", "tool.result"]);
    assert_eq!(events.last().unwrap()["stop_reason"], "error");
    assert_eq!(
        events[events.len() - 2]["error_type"],
        "TOOL_INVOCATION_ERROR"
    );

    // A tool outside allowed_tools is not offered and refused; an unknown one too; the loop
    // goes on.
    fake.post("/__reset", json!({})).await;
    fake.script(json!([
        {"tool": "calculator", "args": {"numbers": [1], "ops": ["sum"]}},
        {"tool": "no_such_tool", "args": {}},
        {"text": "I cannot do that."}
    ]))
    .await;
    let answer = chat(
        &server,
        json!({"message": "sum", "allowed_tools": ["echo"]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["response"], "I cannot do that.");
    assert_eq!(answer["meta"]["validation_retries"], 0);
    let events = session_events(&server, answer["conversation_id"].as_str().unwrap()).await;
    let errors: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool.result")
        .map(|e| &e["error_type"])
        .collect();
    assert_eq!(errors, [&json!("ToolNotAllowed"), &json!("UnknownTool")]);
    let not_allowed = events.iter().find(|e| e["type"] == "tool.result").unwrap();
    assert_eq!(
        not_allowed["error_message"],
        "Tool 'calculator' is not allowed"
    );
    assert_eq!(
        types(&events).iter().filter(|t| **t == "tool.use").count(),
        2
    );
    let requests = fake.requests().await;
    let offered = requests[0]["body"]["tools"].as_array().unwrap();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0]["function"]["name"], "echo");

    // max_tool_calls rounds, then one request without tools.
    fake.post("/__reset", json!({})).await;
    fake.script(json!([{"tool": "echo", "args": {"text": "again"}, "repeat": 5}]))
        .await;
    let answer = chat(&server, json!({"message": "loop", "max_tool_calls": 2})).await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["response"], "all done");
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 3);
    assert!(requests[2]["body"].get("tools").is_none());

    // A provider failing beyond the retries (three attempts in all).
    fake.post("/__reset", json!({})).await;
    fake.script(json!([{"error": 500, "message": "boom", "repeat": 3}]))
        .await;
    let answer = chat(&server, json!({"message": "hello"})).await;
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["error"]["code"], "PROVIDER_ERROR");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("boom")
    );
    assert_eq!(fake.requests().await.len(), 3);
    let events = session_events(&server, answer["conversation_id"].as_str().unwrap()).await;
    assert_eq!(
        types(&events),
        ["system.init", "user.message", "runtime.error", "result"]
    );
    assert_eq!(events[2]["phase"], "provider");
    assert_eq!(events[2]["provider"], "openai");
    assert_eq!(events[3]["stop_reason"], "error");

    // A 429 with Retry-After is waited out and retried.
    fake.post("/__reset", json!({})).await;
    fake.script(json!([{"error": 429, "retry_after": 1}, {"text": "after the wait"}]))
        .await;
    let answer = chat(&server, json!({"message": "hello"})).await;
    assert_eq!(answer["response"], "after the wait", "{answer}");
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 2);
    let waited =
        requests[1]["received_ms"].as_u64().unwrap() - requests[0]["received_ms"].as_u64().unwrap();
    assert!(waited >= 950, "retried after {waited} ms");

    // Requests that cannot start change nothing.
    let before = server.get("/v1/sessions").await.1["total"].clone();
    let (status, body) = server
        .post_json(
            "/v1/agent/chat",
            json!({"message": "hi", "provider": "qwen"}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("SKILL_RUNNER_AGENT_DASHSCOPE_API_KEY"),
        "{body}"
    );
    for (body, field) in [
        (json!({"message": " "}), "message"),
        (
            json!({"message": "x", "max_tool_calls": 11}),
            "max_tool_calls",
        ),
        (json!({"message": "x", "temperature": 3.0}), "temperature"),
    ] {
        let (status, answer) = server.post_json("/v1/agent/chat", body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["detail"][0]["loc"][1], field);
    }
    for body in [
        json!({"message": "x", "provider": "nope"}),
        json!({"message": "x", "allowed_tools": ["nope"]}),
        json!({"message": "x", "conversation_id": "../etc"}),
    ] {
        assert_eq!(server.post_json("/v1/agent/chat", body).await.0, 400);
    }
    let missing = "0".repeat(32);
    let (status, _) = server
        .post_json(
            "/v1/agent/chat",
            json!({"message": "x", "conversation_id": missing}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(server.get("/v1/sessions").await.1["total"], before);
}

#[tokio::test]
async fn responses_mode_threads_previous_response_ids_and_drops_a_refused_one() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    fake.script(json!([{"tool": "echo", "args": {"text": "hi"}}, {"text": "I said hi."}]))
        .await;
    let first = chat(
        &server,
        json!({"message": "say hi", "provider": "openai-responses"}),
    )
    .await;
    assert_eq!(first["response"], "I said hi.", "{first}");
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 2);
    assert!(
        requests[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("/responses")
    );
    assert!(requests[0]["body"].get("previous_response_id").is_none());
    assert_eq!(
        requests[1]["body"]["previous_response_id"],
        response_id(&requests[0])
    );
    let call_id = requests[0]["response"]["body"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f[0] == "response.output_item.done")
        .unwrap()[1]["item"]["call_id"]
        .clone();
    assert_eq!(
        requests[1]["body"]["input"],
        json!([{"type": "function_call_output", "call_id": call_id,
                "output": requests[1]["body"]["input"][0]["output"]}]),
        "only what the provider does not hold is sent"
    );

    // The next chat continues from the last answer.
    let id = first["conversation_id"].as_str().unwrap();
    fake.script(json!([{"text": "Hello again."}])).await;
    chat(
        &server,
        json!({"message": "again", "conversation_id": id, "provider": "openai-responses"}),
    )
    .await;
    let requests = fake.requests().await;
    assert_eq!(
        requests[2]["body"]["previous_response_id"],
        response_id(&requests[1])
    );
    assert_eq!(
        requests[2]["body"]["input"],
        json!([{"role": "user", "content": "again"}])
    );

    // A refused id: retried once without it, with the whole conversation.
    fake.script(
        json!([{"error": 400, "message": "Previous response not found."},
                       {"text": "Fresh start."}]),
    )
    .await;
    let third = chat(
        &server,
        json!({"message": "third", "conversation_id": id, "provider": "openai-responses"}),
    )
    .await;
    assert_eq!(third["response"], "Fresh start.", "{third}");
    let requests = fake.requests().await;
    assert_eq!(requests.len(), 5);
    assert!(requests[3]["body"].get("previous_response_id").is_some());
    assert!(requests[4]["body"].get("previous_response_id").is_none());
    let input = requests[4]["body"]["input"].as_array().unwrap();
    assert_eq!(input[0], json!({"role": "user", "content": "say hi"}));
    assert_eq!(
        input.last().unwrap(),
        &json!({"role": "user", "content": "third"})
    );
    assert!(
        input
            .iter()
            .any(|i| i["type"] == "function_call" && i["call_id"] == call_id)
    );
}

#[tokio::test]
async fn anthropic_messages_carry_tool_results_as_user_blocks() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    fake.script(
        json!([{"tool": "echo", "args": {"text": "hi"}, "say": "Calling echo."},
                       {"text": "Echoed."}]),
    )
    .await;
    let answer = chat(
        &server,
        json!({"message": "echo hi", "provider": "anthropic", "model": "claude-test"}),
    )
    .await;
    assert_eq!(answer["response"], "Echoed.", "{answer}");
    assert_eq!(answer["meta"]["model"], "claude-test");
    let requests = fake.requests().await;
    assert_eq!(requests[0]["headers"]["x-api-key"], KEY);
    let messages = requests[1]["body"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "text", "text": "Calling echo."})
    );
    assert_eq!(messages[1]["content"][1]["input"], json!({"text": "hi"}));
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], messages[1]["content"][1]["id"]);
    let id = answer["conversation_id"].as_str().unwrap();
    assert_eq!(
        types(&session_events(&server, id).await),
        [
            "system.init",
            "user.message",
            "assistant.message",
            "tool.use",
            "tool.result",
            "assistant.message",
            "result"
        ]
    );
}

#[tokio::test]
async fn sessions_resume_after_a_restart_and_survive_a_cut_last_line() {
    let fake = FakeModel::start();
    let dirs = TestDirs::new();
    let mut server = agent_server(&fake, dirs.clone());
    let first = chat(&server, json!({"message": "remember 7"})).await;
    let id = first["conversation_id"].as_str().unwrap().to_owned();
    assert_eq!(server.terminate().code(), Some(0));

    let server = agent_server(&fake, dirs);
    let log = server.dirs.data.join(format!("sessions/{id}/events.jsonl"));
    // A crash in the middle of a write left half a line.
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, br#"{"type":"user.message","seq":5,"ts":1.0,"te"#)
        .unwrap();
    drop(file);
    assert_eq!(
        session_events(&server, &id).await.len(),
        4,
        "the cut line is not an event"
    );

    fake.script(json!([{"text": "It was 7."}])).await;
    let second = chat(
        &server,
        json!({"message": "what was it?", "conversation_id": id}),
    )
    .await;
    assert_eq!(second["conversation_id"], id.as_str());
    let events = session_events(&server, &id).await;
    assert_eq!(seqs(&events), (1..=7).collect::<Vec<_>>());
    assert_eq!(
        types(&events)[4..],
        ["user.message", "assistant.message", "result"]
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.ends_with('\n') && !text.contains(r#""te{"#), "{text}");
    // The model got the earlier exchange.
    let requests = fake.requests().await;
    let messages = requests.last().unwrap()["body"]["messages"]
        .as_array()
        .unwrap();
    let said: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        said[1..],
        [
            ("user", "remember 7"),
            ("assistant", "all done"),
            ("user", "what was it?")
        ]
    );

    // The session API: listed newest first and paged, one session, its deletion.
    let other = chat(&server, json!({"message": "another"})).await;
    let (_, list) = server.get("/v1/sessions?limit=1").await;
    assert_eq!(list["total"], 2);
    assert_eq!(list["sessions"][0]["session_id"], other["conversation_id"]);
    assert_eq!(list["sessions"][0]["metadata"]["title"], "another");
    let (_, page) = server.get("/v1/sessions?limit=1&offset=1").await;
    assert_eq!(page["sessions"][0]["session_id"], id.as_str());
    let (status, one) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (one["last_seq"].as_u64(), one["live"].as_bool()),
        (Some(7), Some(false))
    );
    for bad in ["..%2F..%2Fetc", "ABCDEF", "not-a-session"] {
        assert_eq!(
            server.get(&format!("/v1/sessions/{bad}")).await.0,
            400,
            "{bad}"
        );
        assert_eq!(
            server.get(&format!("/v1/sessions/{bad}/events")).await.0,
            400
        );
    }
    assert_eq!(
        server
            .get(&format!("/v1/sessions/{}", "a".repeat(32)))
            .await
            .0,
        404
    );
    let deleted = server
        .client
        .delete(server.url(&format!("/v1/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(server.get(&format!("/v1/sessions/{id}")).await.0, 404);
    assert!(!log.exists());
}

#[tokio::test]
async fn a_streamed_chat_sends_deltas_live_and_stores_none() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    // 600 characters: the fake model streams them as 50 deltas.
    let text: String = (0..50).map(|n| format!("piece {n:03}.. ")).collect();
    assert_eq!(text.chars().count(), 600);
    fake.script(
        json!([{"tool": "echo", "args": {"text": "x"}, "delay_ms": 300},
                       {"text": text}]),
    )
    .await;
    let resp = server
        .client
        .post(server.url("/v1/agent/chat"))
        .json(&json!({"message": "stream it", "stream": true}))
        .send()
        .await
        .unwrap();
    let mut stream = EventStream::of(resp);
    let first = stream.next().await.unwrap();
    assert_eq!(first.name, "system.init");
    let id = first.data["session_id"].as_str().unwrap().to_owned();

    // A second reader follows the same chat while it runs.
    let mut follower = server
        .events(&format!("/v1/sessions/{id}/events"), None)
        .await;

    let mut got = vec![first];
    while let Some(event) = stream.next().await {
        got.push(event);
    }
    let names: Vec<&str> = got.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names.last(), Some(&"result"));
    let deltas: Vec<&str> = got
        .iter()
        .filter(|e| e.name == "assistant.delta")
        .map(|e| e.data["text_delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas.len(), 50);
    assert_eq!(deltas.concat(), text);
    let stored: Vec<u64> = got
        .iter()
        .filter(|e| e.name != "assistant.delta")
        .map(|e| e.data["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(stored, (1..=stored.len() as u64).collect::<Vec<_>>());

    let mut followed = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), follower.next())
        .await
        .unwrap()
    {
        let end = event.name == "end";
        followed.push(event);
        if end {
            break;
        }
    }
    let followed_names: Vec<&str> = followed.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(followed_names.last(), Some(&"end"));
    assert_eq!(followed_names[followed_names.len() - 2], "result");
    let followed_text: String = followed
        .iter()
        .filter(|e| e.name == "assistant.delta")
        .map(|e| e.data["text_delta"].as_str().unwrap())
        .collect();
    assert_eq!(followed_text, text, "the follower saw the text as it came");

    let log = std::fs::read_to_string(server.dirs.data.join(format!("sessions/{id}/events.jsonl")))
        .unwrap();
    assert!(!log.contains("assistant.delta"));
    assert_eq!(log.lines().count(), stored.len());
    // Read later, the stream sends the stored events and ends.
    let replay = server
        .events(&format!("/v1/sessions/{id}/events"), Some("3"))
        .await
        .collect()
        .await;
    assert_eq!(replay.first().unwrap().data["seq"], 4);
    assert_eq!(replay.last().unwrap().name, "end");
}

/// The body of a chunked HTTP/1.1 answer, read to its end.
fn dechunked(raw: &[u8]) -> String {
    let start = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (mut at, mut body) = (start, Vec::new());
    loop {
        let line_end = at + raw[at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[at..line_end]).unwrap(), 16).unwrap();
        if size == 0 {
            return String::from_utf8(body).unwrap();
        }
        body.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        at = line_end + 2 + size + 2;
    }
}

/// A streamed chat whose client does not read while 170,000 deltas (17 MB of events) come:
/// the chat goes on without holding them for it, and once the client reads, it gets every
/// stored event from the session's log, then the result.
#[tokio::test]
async fn a_streamed_chat_lets_a_client_that_does_not_read_fall_behind() {
    use std::io::{Read as _, Write as _};
    const PIECES: usize = 20_000;
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    let text = "0123456789ab".repeat(PIECES);
    fake.script(json!([{"tool": "echo", "args": {"text": "x"}}, {"text": text}]))
        .await;
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    let body = json!({"message": "stream it", "stream": true}).to_string();
    write!(
        socket,
        "POST /v1/agent/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The chat ends while nothing is read: its session is no longer live.
    let mut ended = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (_, list) = server.get("/v1/sessions").await;
        if let Some(session) = list["sessions"].as_array().and_then(|s| s.first()) {
            let id = session["session_id"].as_str().unwrap();
            let (_, one) = server.get(&format!("/v1/sessions/{id}")).await;
            if one["live"] == false && one["event_count"].as_u64() > Some(2) {
                ended = true;
                break;
            }
        }
    }
    assert!(ended, "the chat ended without its client reading");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut raw = Vec::new();
    socket.read_to_end(&mut raw).ok();
    let events = dechunked(&raw);
    let (mut stored, mut deltas, mut last) = (Vec::new(), 0, String::new());
    for frame in events.split("\n\n").filter(|f| !f.trim().is_empty()) {
        let field = |name: &str| {
            frame
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        let (name, data) = (field("event:").unwrap(), field("data:").unwrap());
        let data: Value = serde_json::from_str(&data).unwrap();
        match name.as_str() {
            "assistant.delta" => deltas += 1,
            "heartbeat" => {}
            _ => stored.push(data["seq"].as_u64().unwrap()),
        }
        last = name;
    }
    assert_eq!(last, "result", "the stream ends with the result");
    assert_eq!(
        stored,
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "every stored event once"
    );
    assert!(
        deltas < PIECES,
        "the client was let go behind the chat ({deltas} deltas)"
    );
}

#[tokio::test]
async fn two_chats_on_one_session_take_turns() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    let first = chat(&server, json!({"message": "start"})).await;
    let id = first["conversation_id"].as_str().unwrap().to_owned();
    fake.script(json!([{"text": "slow answer", "delay_ms": 800}, {"text": "quick answer"}]))
        .await;
    let slow = chat(&server, json!({"message": "one", "conversation_id": id}));
    let quick = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        chat(&server, json!({"message": "two", "conversation_id": id})).await
    };
    let (slow, quick) = tokio::join!(slow, quick);
    assert_eq!(slow["response"], "slow answer");
    assert_eq!(
        quick["response"], "quick answer",
        "the second chat waited for the first"
    );
    let events = session_events(&server, &id).await;
    assert_eq!(seqs(&events), (1..=events.len() as u64).collect::<Vec<_>>());
    let texts: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "user.message" || e["type"] == "result")
        .map(|e| e["text"].as_str().or(e["final_text"].as_str()).unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "start",
            "all done",
            "one",
            "slow answer",
            "two",
            "quick answer"
        ]
    );
    // The second chat's model request carried the first one's exchange.
    let last = fake.requests().await.pop().unwrap();
    let messages = last["body"]["messages"].as_array().unwrap();
    assert!(messages.iter().any(|m| m["content"] == "slow answer"));
}

#[tokio::test]
async fn a_silent_provider_is_timed_out_and_retried() {
    let fake = FakeModel::start();
    let server = agent_server_with(
        &fake,
        TestDirs::new(),
        &[("SKILL_RUNNER_AGENT_TIMEOUT_SECONDS", "1")],
    );
    fake.script(json!([{"hang": true}, {"text": "finally"}]))
        .await;
    let answer = chat(&server, json!({"message": "hello?"})).await;
    assert_eq!(answer["response"], "finally", "{answer}");
    assert_eq!(fake.requests().await.len(), 2);
    server.wait_log("retrying a model request").await;
}

#[tokio::test]
async fn a_chat_under_way_at_shutdown_ends_recorded_and_resumes() {
    let fake = FakeModel::start();
    let dirs = TestDirs::new();
    let mut server = agent_server(&fake, dirs.clone());
    fake.script(json!([{"hang": true}])).await;
    let client = server.client.clone();
    let url = server.url("/v1/agent/chat");
    let pending = tokio::spawn(async move {
        client
            .post(url)
            .json(&json!({"message": "wait for it"}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    // The chat is under way once the model has its request.
    while fake.requests().await.is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = tokio::task::spawn_blocking(move || {
        let status = server.terminate();
        (status, server)
    });
    let answer = pending.await.unwrap();
    let (status, _server) = status.await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["error"]["code"], "INTERRUPTED");

    let server = agent_server(&fake, dirs);
    let id = answer["conversation_id"].as_str().unwrap();
    let events = session_events(&server, id).await;
    assert_eq!(
        types(&events),
        ["system.init", "user.message", "runtime.error", "result"]
    );
    assert_eq!(events[3]["stop_reason"], "error");
    let resumed = chat(&server, json!({"message": "again", "conversation_id": id})).await;
    assert_eq!(resumed["success"], true, "{resumed}");
    assert_eq!(session_events(&server, id).await.len(), 7);
}

#[tokio::test]
async fn big_tool_output_is_capped_and_secrets_are_served_redacted() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    let lines: String = (0..300)
        .map(|n| format!("match {n} {}\n", "x".repeat(150)))
        .collect();
    std::fs::write(server.dirs.data.join("files/big.txt"), lines).unwrap();
    fake.script(json!([
        {"tool": "file_search", "args": {"query": "match", "limit": 200}},
        {"tool": "echo", "args": {"text": "hi", "api_key": "sk-leaked-123"}},
        {"text": "Done."}
    ]))
    .await;
    // The documents' own route, without /v1.
    let (status, answer) = server
        .post_json("/agent/chat", json!({"message": "find every match"}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(
        answer["tool_calls"][0]["result"]["data"]["matches"]
            .as_array()
            .unwrap()
            .len(),
        200,
        "the response keeps the whole result"
    );
    let id = answer["conversation_id"].as_str().unwrap();
    let events = session_events(&server, id).await;
    let cut = events
        .iter()
        .find(|e| e["type"] == "tool.output_compacted")
        .unwrap();
    assert!(cut["original_chars"].as_u64().unwrap() > 8_000, "{cut}");
    assert!(cut["kept_chars"].as_u64().unwrap() <= 8_000, "{cut}");
    let sent = first_tool_message(&fake.requests().await[1])
        .chars()
        .count();
    assert!(sent <= 8_000, "the model got {sent} characters");
    let call = events
        .iter()
        .find(|e| e["type"] == "tool.use" && e["name"] == "echo")
        .unwrap();
    assert_eq!(call["input"]["api_key"], "[redacted]");
    assert_eq!(call["input"]["text"], "hi");
}

/// Agent sessions belong to the tenant of the chat that made them: another tenant's keys find
/// none of them (list, read, events, delete, continuing the chat), answered as for a session
/// that does not exist; the tenant's own keys and an admin find them.
#[tokio::test]
async fn a_tenants_sessions_are_its_own() {
    let fake = FakeModel::start();
    let server = agent_server(&fake, TestDirs::new());
    let admin = server.first_key("admin", None).await;
    let call = |key: String, method: &'static str, path: String, body: Option<Value>| {
        let server = &server;
        async move {
            let mut request = common::client()
                .request(method.parse().unwrap(), server.url(&path))
                .bearer_auth(key);
            if let Some(body) = body {
                request = request.json(&body);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let mut keys = Vec::new();
    for name in ["a", "b"] {
        let (status, tenant) = call(
            admin.clone(),
            "POST",
            "/v1/management/tenants".into(),
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(status, 200, "{tenant}");
        let tenant: Value = serde_json::from_str(&tenant).unwrap();
        let (status, key) = call(
            admin.clone(),
            "POST",
            format!(
                "/v1/management/tenants/{}/keys",
                tenant["tenant_id"].as_str().unwrap()
            ),
            Some(json!({"role": "submit", "name": name})),
        )
        .await;
        assert_eq!(status, 200, "{key}");
        let key: Value = serde_json::from_str(&key).unwrap();
        keys.push(key["key"].as_str().unwrap().to_owned());
    }
    let (a, b) = (keys[0].clone(), keys[1].clone());
    let (status, answer) = call(
        a.clone(),
        "POST",
        "/v1/agent/chat".into(),
        Some(json!({"message": "secret-session-text"})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let id = answer["conversation_id"].as_str().unwrap().to_owned();
    let unknown = "0123456789abcdef0123456789abcdef".to_owned();

    for (method, path, body) in [
        ("GET", "/v1/sessions/{}", None),
        ("GET", "/v1/sessions/{}/events", None),
        ("DELETE", "/v1/sessions/{}", None),
        (
            "POST",
            "/v1/agent/chat",
            Some(json!({"message": "hi", "conversation_id": "{}"})),
        ),
        ("GET", "/ui/sessions/{}", None),
    ] {
        let with = |id: &str| {
            (
                path.replace("{}", id),
                body.as_ref()
                    .map(|b| serde_json::from_str(&b.to_string().replace("{}", id)).unwrap()),
            )
        };
        let (theirs_path, theirs_body) = with(&id);
        let (none_path, none_body) = with(&unknown);
        let theirs = call(b.clone(), method, theirs_path.clone(), theirs_body).await;
        let none = call(b.clone(), method, none_path, none_body).await;
        assert_eq!(theirs.0, 404, "{method} {theirs_path}: {}", theirs.1);
        assert_eq!(
            (theirs.0, theirs.1.replace(&id, "<id>")),
            (none.0, none.1.replace(&unknown, "<id>")),
            "{method} {theirs_path} as another tenant answers as for an unknown session"
        );
        assert!(!theirs.1.contains("secret-session-text"));
    }
    let (_, listed) = call(b.clone(), "GET", "/v1/sessions".into(), None).await;
    assert!(!listed.contains(&id), "{listed}");
    let (_, page) = call(b.clone(), "GET", "/ui/sessions".into(), None).await;
    assert!(!page.contains(&id));
    for key in [&a, &admin] {
        let (status, body) = call(
            key.clone(),
            "GET",
            format!("/v1/sessions/{id}/events"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("secret-session-text"));
        let (_, listed) = call(key.clone(), "GET", "/v1/sessions".into(), None).await;
        assert!(listed.contains(&id), "{listed}");
    }
}
