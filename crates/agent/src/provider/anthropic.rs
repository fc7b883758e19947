//! Anthropic Messages (`POST {base}/messages`). Tool answers are `tool_result` blocks of a user
//! turn, and turns of the same role are merged, as the API requires them to alternate.

use serde_json::{Map, Value, json};

use super::{Ask, Call, Failure, Message, Reply, stream_error};

pub fn body(ask: &Ask<'_>) -> Value {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in ask.messages {
        let (role, blocks) = match message {
            Message::User(text) => ("user", vec![json!({"type": "text", "text": text})]),
            Message::Assistant { text, calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                blocks.extend(calls.iter().map(|c| {
                    // A model that sent arguments that are not an object gets `{}` back.
                    let input = serde_json::from_str::<Map<String, Value>>(&c.arguments)
                        .unwrap_or_default();
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
                }));
                ("assistant", blocks)
            }
            Message::ToolResult { call_id, output } => (
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": output})],
            ),
        };
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let mut body = json!({
        "model": ask.model,
        "system": ask.system,
        "messages": turns
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect::<Vec<_>>(),
        "max_tokens": ask.max_tokens,
        // Anthropic's scale ends at 1.
        "temperature": ask.temperature.min(1.0),
        "stream": true,
    });
    if !ask.tools.is_empty() {
        body["tools"] = ask
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                            "input_schema": t.parameters})
            })
            .collect();
    }
    body
}

/// Reads content blocks (text deltas, tool calls with their JSON in pieces) and usage.
#[derive(Debug, Default)]
pub struct Decoder {
    reply: Reply,
    /// Tool calls by content block index.
    calls: Vec<(u64, Call)>,
    stopped: bool,
}

impl super::Decoder for Decoder {
    fn frame(
        &mut self,
        event: &str,
        data: &Value,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), Failure> {
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(event);
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                self.reply.usage.input_tokens = data
                    .pointer("/message/usage/input_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
            }
            "content_block_start" => {
                let block = &data["content_block"];
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    let field = |name: &str| block[name].as_str().unwrap_or_default().to_owned();
                    self.calls.push((
                        index,
                        Call {
                            id: field("id"),
                            name: field("name"),
                            arguments: String::new(),
                        },
                    ));
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        self.reply.text.push_str(text);
                        on_delta(text);
                    }
                    Some("input_json_delta") => {
                        if let Some((_, call)) = self.calls.iter_mut().find(|(i, _)| *i == index) {
                            call.arguments
                                .push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(out) = data.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.reply.usage.output_tokens = out;
                }
            }
            "message_stop" => self.stopped = true,
            "error" => return Err(stream_error(data)),
            _ => {}
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Reply, Failure> {
        let Decoder {
            mut reply,
            calls,
            stopped,
        } = *self;
        if !stopped {
            return Err(Failure::Malformed(
                "the stream ended before message_stop".into(),
            ));
        }
        let calls = calls
            .into_iter()
            .map(|(_, mut call)| {
                // A call without arguments streams none.
                if call.arguments.is_empty() {
                    call.arguments = "{}".into();
                }
                call
            })
            .collect();
        reply.calls = super::named_calls(calls)?;
        Ok(reply)
    }
}
