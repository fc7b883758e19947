//! Claude Code's `--output-format stream-json`, which Qwen Code copies: one JSON event per
//! line, each with the `session_id`; `assistant` and `user` events carry content blocks (text,
//! thinking, tool calls, tool results), and a final `result` event the answer or the failure.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::cli::{self, Line};
use super::{Reading, Said};

/// The events read here; a line of any other type (`system`, `stream_event`) is skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    Assistant {
        #[serde(default)]
        message: Message,
    },
    User {
        #[serde(default)]
        message: Message,
    },
    Result {
        result: Option<String>,
        is_error: Option<bool>,
        subtype: Option<String>,
        error: Option<ErrorBody>,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
struct Message {
    #[serde(default)]
    content: Content,
}

/// A message's content: blocks, or anything else (a user's prompt as plain text), which says
/// nothing here.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Blocks(Vec<Block>),
    Other(IgnoredAny),
}

impl Default for Content {
    fn default() -> Self {
        Content::Other(IgnoredAny)
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        tool_use_id: Option<String>,
        content: Option<Value>,
        is_error: Option<bool>,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    message: Option<String>,
}

impl Content {
    fn blocks(self) -> Vec<Block> {
        match self {
            Content::Blocks(blocks) => blocks,
            Content::Other(_) => Vec::new(),
        }
    }
}

/// What one line says: the assistant's text, thinking and tool calls, and the tool results
/// sent back.
pub fn transcribe(line: &str, said: &mut Vec<Said>) {
    let Some(Line::<Event> { event, .. }) = cli::typed(line) else {
        return;
    };
    match event {
        Event::Assistant { message } => {
            for block in message.content.blocks() {
                match block {
                    Block::Text { text } => said.push(Said::Text {
                        text,
                        continues: false,
                    }),
                    Block::Thinking { thinking } => said.push(Said::Reasoning(thinking)),
                    Block::ToolUse { id, name, input } => said.push(Said::ToolCall {
                        id,
                        name,
                        arguments: input,
                    }),
                    _ => {}
                }
            }
        }
        Event::User { message } => {
            for block in message.content.blocks() {
                if let Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } = block
                {
                    said.push(Said::ToolResult {
                        id: tool_use_id,
                        output: cli::text_of(content.as_ref()),
                        is_error: is_error == Some(true),
                    });
                }
            }
        }
        _ => {}
    }
}

/// Reads a turn: the session from any event's `session_id`, the answer from the final
/// `result` (else the last assistant text), and a failure from a `result` with `is_error` (or
/// an `error*` subtype).
pub fn read(stdout: &str, engine: &str) -> Reading {
    let mut reading = Reading::default();
    let (mut last_text, mut result, mut error) = (None, None, None);
    for Line::<Event> { session_id, event } in cli::typed_events(stdout) {
        if session_id.is_some() {
            reading.session = session_id;
        }
        match event {
            Event::Assistant { message } => {
                let text: String = message
                    .content
                    .blocks()
                    .into_iter()
                    .filter_map(|block| match block {
                        Block::Text { text } => Some(text),
                        _ => None,
                    })
                    .collect();
                if !text.is_empty() {
                    last_text = Some(text);
                }
            }
            Event::Result {
                result: text,
                is_error,
                subtype,
                error: failed,
            } => {
                let errored = subtype.as_deref().is_some_and(|s| s.starts_with("error"));
                if is_error == Some(true) || errored {
                    error = text.or(failed.and_then(|e| e.message)).or(subtype);
                } else {
                    result = text;
                }
            }
            _ => {}
        }
    }
    cli::conclude(reading, engine, result.or(last_text).as_deref(), error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn transcribes_text_thinking_tool_calls_and_results() {
        let mut said = Vec::new();
        for line in [
            r#"{"type":"system","subtype":"init","session_id":"s"}"#,
            r#"{"type":"user","message":{"role":"user","content":"the prompt"},"session_id":"s"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Looking."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},"session_id":"s"}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"is_error":false}]},"session_id":"s"}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"denied","is_error":true}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"server_tool_use","id":"x"}]}}"#,
        ] {
            transcribe(line, &mut said);
        }
        assert_eq!(
            said,
            vec![
                Said::Reasoning("hmm".into()),
                Said::Text {
                    text: "Looking.".into(),
                    continues: false
                },
                Said::ToolCall {
                    id: Some("t1".into()),
                    name: "Bash".into(),
                    arguments: json!({"command": "ls"}),
                },
                Said::ToolResult {
                    id: Some("t1".into()),
                    output: "a\nb".into(),
                    is_error: false,
                },
                Said::ToolResult {
                    id: Some("t2".into()),
                    output: "denied".into(),
                    is_error: true,
                },
            ]
        );
    }

    #[test]
    fn an_error_subtype_without_text_is_the_failure() {
        let out = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"partial"}]},"session_id":"s-9"}
{"type":"result","subtype":"error_max_turns","session_id":"s-9"}"#;
        let reading = read(out, "claude");
        assert_eq!(reading.session.as_deref(), Some("s-9"));
        assert!(reading.answer.is_none());
        let failure = reading.failure.unwrap();
        assert!(failure.message.contains("error_max_turns"), "{failure:?}");
    }
}
