//! OpenAI wire formats: the Responses API (codex) and Chat Completions (opencode, qwen, iflow).

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Action, Request, id, pieces, sse};

fn tools(
    body: &Map<String, Value>,
    read: impl Fn(&Value) -> Option<(String, Value)>,
) -> Vec<(String, Value)> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(read)
        .collect()
}

fn stream(body: &Map<String, Value>) -> bool {
    body.get("stream") == Some(&Value::Bool(true))
}

/// `POST .../responses`.
pub fn read_responses(body: &Map<String, Value>, _path: &str) -> Request {
    let format = body.get("text").and_then(|t| t.get("format"));
    Request {
        tools: tools(body, |t| {
            (t.get("type")? == "function").then_some(())?;
            Some((
                t.get("name")?.as_str()?.to_owned(),
                t.get("parameters").cloned().unwrap_or(json!({})),
            ))
        }),
        json_schema: format
            .filter(|f| f.get("type") == Some(&json!("json_schema")))
            .and_then(|f| f.get("schema").cloned()),
        stream: stream(body),
    }
}

pub fn responses(body: &Map<String, Value>, request: &Request, action: Action) -> Response {
    let message = |text: &str| {
        json!({
            "type": "message", "id": id("msg_"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })
    };
    let items = match &action {
        Action::Tool { name, args, say } => {
            let call = json!({
                "type": "function_call", "id": id("fc_"), "status": "completed",
                "call_id": id("call_"), "name": name, "arguments": args.to_string(),
            });
            say.as_deref()
                .map(message)
                .into_iter()
                .chain([call])
                .collect()
        }
        Action::Text(text) => vec![message(text)],
        Action::Error { .. } | Action::Hang => unreachable!("answered by the router"),
    };
    let response = json!({
        "id": id("resp_"), "object": "response", "created_at": skill_runner_types::clock::unix_now(),
        "status": "completed", "model": body.get("model").cloned().unwrap_or(json!("fake-model")),
        "output": items,
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15},
    });
    if !request.stream {
        return Json(response).into_response();
    }
    let mut events = Vec::new();
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    events.push((
        "response.created",
        json!({"type": "response.created", "sequence_number": 0, "response": started}),
    ));
    for (index, item) in items.iter().enumerate() {
        let mut added = item.clone();
        if let Some(text) = item.pointer("/content/0/text").and_then(Value::as_str) {
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            ));
            for piece in pieces(text) {
                events.push((
                    "response.output_text.delta",
                    json!({"type": "response.output_text.delta",
                    "item_id": item["id"], "output_index": index, "content_index": 0, "delta": piece}),
                ));
            }
            events.push((
                "response.output_text.done",
                json!({"type": "response.output_text.done",
                "item_id": item["id"], "output_index": index, "content_index": 0, "text": text}),
            ));
        } else {
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": index, "item": added}),
            ));
            events.push((
                "response.function_call_arguments.delta",
                json!({"type": "response.function_call_arguments.delta",
                "item_id": item["id"], "output_index": index, "delta": item["arguments"]}),
            ));
        }
        events.push((
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
    }
    events.push((
        "response.completed",
        json!({"type": "response.completed", "response": response}),
    ));
    sse(events
        .into_iter()
        .map(|(e, d)| (Some(e), d.to_string()))
        .collect())
}

/// `POST .../chat/completions`.
pub fn read_chat(body: &Map<String, Value>, _path: &str) -> Request {
    let format = body.get("response_format");
    let json_schema = match format.and_then(|f| f.get("type")).and_then(Value::as_str) {
        Some("json_schema") => format
            .and_then(|f| f.pointer("/json_schema/schema"))
            .cloned()
            .or(Some(json!({"type": "object"}))),
        Some("json_object") => {
            Some(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}))
        }
        _ => None,
    };
    Request {
        tools: tools(body, |t| {
            let f = t.get("function")?;
            Some((
                f.get("name")?.as_str()?.to_owned(),
                f.get("parameters").cloned().unwrap_or(json!({})),
            ))
        }),
        json_schema,
        stream: stream(body),
    }
}

pub fn chat(body: &Map<String, Value>, request: &Request, action: Action) -> Response {
    let (cid, created) = (id("chatcmpl-"), skill_runner_types::clock::unix_now());
    let model = body.get("model").cloned().unwrap_or(json!("fake-model"));
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    let (message, finish) = match &action {
        Action::Tool { name, args, say } => (
            json!({"role": "assistant", "content": say, "tool_calls": [
                {"id": id("call_"), "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}),
            "tool_calls",
        ),
        Action::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Action::Error { .. } | Action::Hang => unreachable!("answered by the router"),
    };
    if !request.stream {
        return Json(json!({
            "id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage,
        }))
        .into_response();
    }
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    match &action {
        Action::Tool { say, .. } => {
            let said = say.as_deref().map(pieces).unwrap_or_default();
            events.extend(said.into_iter().map(|p| chunk(json!({"content": p}), None)));
            let call = &message["tool_calls"][0];
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}),
                None,
            ));
            events.push(chunk(
                json!({"tool_calls": [{"index": 0,
                "function": {"arguments": call["function"]["arguments"]}}]}),
                None,
            ));
        }
        Action::Text(text) => events.extend(
            pieces(text)
                .into_iter()
                .map(|p| chunk(json!({"content": p}), None)),
        ),
        Action::Error { .. } | Action::Hang => {}
    }
    events.push(chunk(json!({}), Some(finish)));
    if body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        == Some(&Value::Bool(true))
    {
        events.push(
            json!({"id": cid, "object": "chat.completion.chunk", "created": created,
                           "model": model, "choices": [], "usage": usage})
            .to_string(),
        );
    }
    events.push("[DONE]".into());
    sse(events.into_iter().map(|d| (None, d)).collect())
}
