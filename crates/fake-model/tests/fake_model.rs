//! The fake model server (`skill-runner fake-model`): each wire format, scripted replies,
//! errors, hangs and the request log.

use skill_runner_test_support as common;

use std::time::Duration;

use common::FakeModel;

use serde_json::{Value, json};

/// The `data:` payloads of an SSE body, parsed where they are JSON.
fn data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.to_owned())))
        .collect()
}

const SHELL: &str = "mkdir -p artifacts && echo hi > artifacts/out.txt";

#[tokio::test]
async fn each_wire_format_answers_scripted_tool_calls_and_text() {
    let fake = FakeModel::start();

    // OpenAI Responses (codex): a side call without tools keeps the script for the main call.
    fake.script(json!([{"shell": SHELL}, {"text": "{\"ok\": 1}"}]))
        .await;
    let (_, side) = fake.post("/v1/responses", json!({"input": "title?"})).await;
    assert_eq!(
        serde_json::from_str::<Value>(&side).unwrap()["output"][0]["content"][0]["text"],
        "all done"
    );
    let tools = json!([{"type": "function", "name": "exec_command",
                        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]);
    let (status, body) = fake
        .post(
            "/v1/responses",
            json!({"stream": true, "tools": tools, "input": []}),
        )
        .await;
    assert_eq!(status, 200);
    let events = data(&body);
    assert_eq!(events.first().unwrap()["type"], "response.created");
    let done = events
        .iter()
        .find(|e| e["type"] == "response.output_item.done")
        .unwrap();
    assert_eq!(done["item"]["name"], "exec_command");
    assert_eq!(
        serde_json::from_str::<Value>(done["item"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"cmd": SHELL})
    );
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    let (_, body) = fake
        .post("/v1/responses", json!({"stream": true, "tools": tools}))
        .await;
    let text: String = data(&body)
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "{\"ok\": 1}");

    // Chat Completions (opencode, qwen): streamed tool call, then streamed text and [DONE].
    fake.script(json!([{"shell": SHELL}, {"text": "finished: 😀 wärme"}]))
        .await;
    let tools = json!([{"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}, "description": {"type": "string"}}, "required": ["command", "description"]}}}]);
    let (_, body) = fake
        .post(
            "/v1/chat/completions",
            json!({"stream": true, "tools": tools, "stream_options": {"include_usage": true}}),
        )
        .await;
    let chunks = data(&body);
    let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "bash");
    let args: Value = serde_json::from_str(
        chunks[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        args,
        json!({"command": SHELL, "description": "Run a command"})
    );
    assert_eq!(chunks.last().unwrap(), &json!("[DONE]"));
    assert!(chunks.iter().any(|c| c["usage"]["total_tokens"] == 15));
    let (_, body) = fake
        .post(
            "/v1/chat/completions",
            json!({"stream": true, "tools": tools}),
        )
        .await;
    let text: String = data(&body)
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "finished: 😀 wärme");

    // Gemini: functionCall, JSON mode synthesised from the schema, plain generateContent.
    fake.script(json!([{"shell": SHELL}])).await;
    let tools = json!([{"functionDeclarations": [{"name": "run_shell_command",
        "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}}}]}]);
    let (_, body) = fake
        .post(
            "/v1beta/models/fake:streamGenerateContent?alt=sse",
            json!({"tools": tools}),
        )
        .await;
    let part = &data(&body)[0]["candidates"][0]["content"]["parts"][0];
    assert_eq!(
        part["functionCall"],
        json!({"name": "run_shell_command", "args": {"command": SHELL}})
    );
    let router = json!({"generationConfig": {"responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object", "properties": {"model_choice": {"type": "string"}, "reasoning": {"type": "string"}}}}});
    let (_, body) = fake
        .post("/v1beta/models/lite:generateContent", router)
        .await;
    let text = serde_json::from_str::<Value>(&body).unwrap()["candidates"][0]["content"]["parts"]
        [0]["text"]
        .clone();
    assert_eq!(
        serde_json::from_str::<Value>(text.as_str().unwrap()).unwrap(),
        json!({"model_choice": "flash", "reasoning": "fake"})
    );

    // Anthropic Messages (claude): tool_use through input_json_delta, text through text_delta.
    fake.script(json!([{"shell": SHELL}, {"text": "bye"}]))
        .await;
    let tools = json!([{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]);
    let (_, body) = fake
        .post(
            "/v1/messages?beta=true",
            json!({"stream": true, "tools": tools}),
        )
        .await;
    let events = data(&body);
    assert_eq!(events[1]["content_block"]["name"], "Bash");
    assert_eq!(
        serde_json::from_str::<Value>(events[2]["delta"]["partial_json"].as_str().unwrap())
            .unwrap(),
        json!({"command": SHELL})
    );
    assert_eq!(
        events
            .iter()
            .find(|e| e["type"] == "message_delta")
            .unwrap()["delta"]["stop_reason"],
        "tool_use"
    );
    let (_, body) = fake.post("/v1/messages", json!({"tools": tools})).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["content"][0]["text"],
        "bye"
    );

    // Every model request is logged, in order, with its headers and body.
    let requests = fake.requests().await;
    let paths: Vec<&str> = requests
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths.len(), 9, "{paths:?}");
    assert_eq!(paths[0], "/v1/responses");
    assert_eq!(
        paths[5],
        "/v1beta/models/fake:streamGenerateContent?alt=sse"
    );
    assert_eq!(requests[0]["body"], json!({"input": "title?"}));
    assert_eq!(requests[0]["headers"]["content-type"], "application/json");
}

#[tokio::test]
async fn errors_delays_and_hangs() {
    let fake = FakeModel::start();
    fake.script(json!([{"error": 500, "message": "boom"}, {"text": "late", "delay_ms": 300}, {"hang": true}])).await;
    // An error applies to the next model call, tools or not.
    let (status, body) = fake.post("/v1/chat/completions", json!({})).await;
    assert_eq!(status, 500);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["message"],
        "boom"
    );
    let tools = json!([{"type": "function", "function": {"name": "bash"}}]);
    let started = std::time::Instant::now();
    let (_, body) = fake
        .post("/v1/chat/completions", json!({"tools": tools}))
        .await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["choices"][0]["message"]["content"],
        "late"
    );
    let hung = fake
        .client
        .post(format!("{}/v1/chat/completions", fake.base))
        .json(&json!({}))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(hung.unwrap_err().is_timeout());
    let (status, body) = fake
        .post("/__script", json!({"replies": [{"what": 1}]}))
        .await;
    assert_eq!(status, 400, "{body}");
    let resp = fake
        .client
        .post(format!("{}/__reset", fake.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(fake.requests().await, Vec::<Value>::new());
}

/// The `fake-model` binary, as the docs run it by hand: it says where it listens, answers with
/// `--final-text`, and appends each request to `--log`.
#[test]
fn the_binary_listens_where_it_says_and_logs_requests() {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fake-model"))
        .args(["--listen", "127.0.0.1:0", "--final-text", "from the binary"])
        .arg("--log")
        .arg(&log)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line.trim().rsplit("http://").next().unwrap().to_owned();
    let body = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("from the binary"), "{answer}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 1, "{logged}");
    assert!(logged.contains("/v1/chat/completions"), "{logged}");
}
