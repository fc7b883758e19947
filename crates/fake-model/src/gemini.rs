//! The Gemini wire format: `models/<m>:generateContent` and `:streamGenerateContent` (gemini).

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{Action, Request, id, sse};

pub fn read(body: &Map<String, Value>, path: &str) -> Request {
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
        .flatten()
        .filter_map(|f| {
            let schema = f
                .get("parametersJsonSchema")
                .or(f.get("parameters"))
                .cloned();
            Some((
                f.get("name")?.as_str()?.to_owned(),
                schema.unwrap_or(json!({})),
            ))
        })
        .collect();
    let config = body.get("generationConfig");
    let json_mode =
        config.and_then(|c| c.get("responseMimeType")) == Some(&json!("application/json"));
    Request {
        tools,
        json_schema: json_mode.then(|| {
            config
                .and_then(|c| c.get("responseJsonSchema").or(c.get("responseSchema")))
                .cloned()
                .unwrap_or(json!({"type": "object"}))
        }),
        stream: path.contains(":streamGenerateContent"),
    }
}

pub fn reply(_body: &Map<String, Value>, request: &Request, action: Action) -> Response {
    let parts: Vec<Value> = match action {
        Action::Tool { name, args, say } => say
            .map(|text| json!({"text": text}))
            .into_iter()
            .chain([json!({"functionCall": {"name": name, "args": args}})])
            .collect(),
        Action::Text(text) => vec![json!({"text": text})],
        Action::Error { .. } | Action::Hang => unreachable!("answered by the router"),
    };
    let response = json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "fake-model", "responseId": id(""),
    });
    if request.stream {
        // One chunk carries the whole answer; the CLI accepts that.
        sse(vec![(None, response.to_string())])
    } else {
        Json(response).into_response()
    }
}
