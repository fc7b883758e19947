//! The Anthropic Messages wire format (claude).

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Action, Request, id, pieces, sse};

pub fn read(body: &Map<String, Value>, _path: &str) -> Request {
    Request {
        tools: body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let schema = t.get("input_schema").cloned().unwrap_or(json!({}));
                Some((t.get("name")?.as_str()?.to_owned(), schema))
            })
            .collect(),
        json_schema: None,
        stream: body.get("stream") == Some(&Value::Bool(true)),
    }
}

pub fn reply(body: &Map<String, Value>, request: &Request, action: Action) -> Response {
    let text = |text: &str| json!({"type": "text", "text": text});
    let (blocks, stop): (Vec<Value>, &str) = match &action {
        Action::Tool { name, args, say } => (
            say.as_deref()
                .map(text)
                .into_iter()
                .chain([
                    json!({"type": "tool_use", "id": id("toolu_"), "name": name, "input": args}),
                ])
                .collect(),
            "tool_use",
        ),
        Action::Text(said) => (vec![text(said)], "end_turn"),
        Action::Error { .. } | Action::Hang => unreachable!("answered by the router"),
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                       "cache_read_input_tokens": 0});
    let message = json!({
        "id": id("msg_"), "type": "message", "role": "assistant",
        "model": body.get("model").cloned().unwrap_or(json!("fake-model")),
        "content": blocks, "stop_reason": stop, "stop_sequence": null, "usage": usage,
    });
    if !request.stream {
        return Json(message).into_response();
    }
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": start}),
    )];
    for (index, block) in blocks.iter().enumerate() {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in pieces(text) {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": piece}}),
                ));
            }
        } else {
            events.push(("content_block_start", json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    sse(events
        .into_iter()
        .map(|(e, d)| (Some(e), d.to_string()))
        .collect())
}
