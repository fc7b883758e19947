//! The OpenAI Responses API (`POST {base}/responses`). With `previous_response_id` the provider
//! holds the conversation, so only what came after that answer is sent (the user's message, or
//! the `function_call_output` of each call); without it, the whole conversation.

use serde_json::{Value, json};

use super::{Ask, Call, Failure, Message, Reply, Usage, stream_error};

pub fn body(ask: &Ask<'_>) -> Value {
    let (previous, known) = match ask.previous {
        Some((id, known)) => (Some(id), known.min(ask.messages.len())),
        None => (None, 0),
    };
    let mut input = Vec::new();
    for message in &ask.messages[known..] {
        match message {
            Message::User(text) => input.push(json!({"role": "user", "content": text})),
            Message::Assistant { text, calls } => {
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                input.extend(calls.iter().map(|c| {
                    json!({"type": "function_call", "call_id": c.id, "name": c.name,
                           "arguments": c.arguments})
                }));
            }
            Message::ToolResult { call_id, output } => input.push(
                json!({"type": "function_call_output", "call_id": call_id, "output": output}),
            ),
        }
    }
    let mut body = json!({
        "model": ask.model,
        "instructions": ask.system,
        "input": input,
        "max_output_tokens": ask.max_tokens,
        "temperature": ask.temperature,
        "stream": true,
    });
    if let Some(previous) = previous {
        body["previous_response_id"] = json!(previous);
    }
    if !ask.tools.is_empty() {
        body["tools"] = ask
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name,
                            "description": t.description, "parameters": t.parameters})
            })
            .collect();
    }
    body
}

/// Reads the stream's text deltas, and the answer from `response.completed`.
#[derive(Debug, Default)]
pub struct Decoder {
    completed: Option<Value>,
}

impl super::Decoder for Decoder {
    fn frame(
        &mut self,
        event: &str,
        data: &Value,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), Failure> {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event);
        match kind {
            "response.output_text.delta" => {
                if let Some(text) = data.get("delta").and_then(Value::as_str) {
                    on_delta(text);
                }
            }
            "response.completed" => self.completed = data.get("response").cloned(),
            "response.failed" | "response.incomplete" | "error" => {
                return Err(stream_error(data));
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Reply, Failure> {
        let Some(response) = self.completed else {
            return Err(Failure::Malformed(
                "the stream ended before response.completed".into(),
            ));
        };
        let mut reply = Reply {
            response_id: response
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            usage: Usage {
                input_tokens: response
                    .pointer("/usage/input_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                output_tokens: response
                    .pointer("/usage/output_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            },
            ..Reply::default()
        };
        let mut calls = Vec::new();
        for item in response
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    for part in item
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(text) = part.get("text").and_then(Value::as_str) {
                            reply.text.push_str(text);
                        }
                    }
                }
                Some("function_call") => {
                    let field = |name: &str| {
                        item.get(name)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    calls.push(Call {
                        id: field("call_id"),
                        name: field("name"),
                        arguments: field("arguments"),
                    });
                }
                _ => {}
            }
        }
        reply.calls = super::named_calls(calls)?;
        Ok(reply)
    }
}
