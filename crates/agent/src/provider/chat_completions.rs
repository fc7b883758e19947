//! OpenAI-compatible Chat Completions (`POST {base}/chat/completions`): OpenAI, DashScope's
//! compatible mode, and every server that copies them. A tool's answer is a `role: tool`
//! message per `tool_call_id`, the shape the API requires (the user's documents' demo sent it as
//! a user message).

use serde_json::{Value, json};

use super::{Ask, Call, Failure, Message, Reply, Usage, stream_error};

pub fn body(ask: &Ask<'_>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": ask.system})];
    messages.extend(ask.messages.iter().map(|message| match message {
        Message::User(text) => json!({"role": "user", "content": text}),
        Message::Assistant { text, calls } if calls.is_empty() => {
            json!({"role": "assistant", "content": text})
        }
        Message::Assistant { text, calls } => json!({
            "role": "assistant",
            "content": if text.is_empty() { Value::Null } else { json!(text) },
            "tool_calls": calls.iter().map(|c| json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })).collect::<Vec<_>>(),
        }),
        Message::ToolResult { call_id, output } => {
            json!({"role": "tool", "tool_call_id": call_id, "content": output})
        }
    }));
    let mut body = json!({
        "model": ask.model,
        "messages": messages,
        "max_tokens": ask.max_tokens,
        "temperature": ask.temperature,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !ask.tools.is_empty() {
        body["tools"] = ask
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
    }
    body
}

/// Reads `chat.completion.chunk`s: text deltas, tool calls assembled by index, usage.
#[derive(Debug, Default)]
pub struct Decoder {
    reply: Reply,
    /// Tool calls by their index in the stream.
    calls: Vec<Call>,
    done: bool,
}

impl super::Decoder for Decoder {
    fn frame(
        &mut self,
        _event: &str,
        data: &Value,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), Failure> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.get("error").is_some() {
            return Err(stream_error(data));
        }
        if let Some(usage) = data.get("usage").filter(|u| u.is_object()) {
            self.reply.usage = Usage {
                input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
            };
        }
        let Some(delta) = data.pointer("/choices/0/delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.reply.text.push_str(text);
            on_delta(text);
        }
        for part in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = part.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if index > 127 {
                return Err(Failure::Malformed(format!("tool call index {index}")));
            }
            while self.calls.len() <= index {
                self.calls.push(Call {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
            }
            let call = &mut self.calls[index];
            if let Some(id) = part.get("id").and_then(Value::as_str) {
                call.id = id.to_owned();
            }
            if let Some(name) = part.pointer("/function/name").and_then(Value::as_str) {
                call.name.push_str(name);
            }
            if let Some(arguments) = part.pointer("/function/arguments").and_then(Value::as_str) {
                call.arguments.push_str(arguments);
            }
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Reply, Failure> {
        let Decoder {
            mut reply,
            calls,
            done,
        } = *self;
        if !done {
            return Err(Failure::Malformed("the stream ended before [DONE]".into()));
        }
        reply.calls = super::named_calls(calls)?;
        Ok(reply)
    }
}
