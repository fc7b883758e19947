//! A session's stored events as the conversation a model is sent when the chat resumes.

use serde_json::Value;

use super::provider::{Call, Message};
use super::session::{Event, Stored};

/// The most messages of earlier chats sent again (the user's documents' bound), cut at the
/// start of a user's message so no tool answer loses its call.
pub const MAX_MESSAGES: usize = 20;

/// What a resumed chat starts from.
#[derive(Debug, Default, PartialEq)]
pub struct History {
    pub messages: Vec<Message>,
    /// The last answer of a chat that ended well, by provider, for `previous_response_id`:
    /// (provider, response id, how many of `messages` that answer covers).
    pub previous: Option<(String, String, usize)>,
}

/// The text a tool call's arguments were sent as.
pub fn arguments_text(input: &Value) -> String {
    match input {
        // Arguments that were not JSON are kept as the text the model sent.
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

impl History {
    pub fn of(events: &[Stored]) -> Self {
        let mut messages: Vec<Message> = Vec::new();
        let mut previous = None;
        // Whether the last assistant message may still take calls (nothing followed it).
        let mut open_assistant = false;
        for stored in events {
            match &stored.event {
                Event::UserMessage { text } => {
                    messages.push(Message::User(text.clone()));
                    open_assistant = false;
                }
                Event::AssistantMessage { text, .. } => {
                    messages.push(Message::Assistant {
                        text: text.clone(),
                        calls: Vec::new(),
                    });
                    open_assistant = true;
                }
                Event::ToolUse {
                    tool_use_id,
                    name,
                    input,
                } => {
                    let call = Call {
                        id: tool_use_id.clone(),
                        name: name.clone(),
                        arguments: arguments_text(input),
                    };
                    match messages.last_mut() {
                        Some(Message::Assistant { calls, .. }) if open_assistant => {
                            calls.push(call);
                        }
                        _ => {
                            messages.push(Message::Assistant {
                                text: String::new(),
                                calls: vec![call],
                            });
                            open_assistant = true;
                        }
                    }
                }
                Event::ToolResult {
                    tool_use_id,
                    output,
                    ..
                } => {
                    messages.push(Message::ToolResult {
                        call_id: tool_use_id.clone(),
                        output: output.to_string(),
                    });
                    open_assistant = false;
                }
                Event::Result {
                    stop_reason,
                    response_id: Some(id),
                    provider_metadata,
                    ..
                } if stop_reason == "end" => {
                    let provider = provider_metadata
                        .as_ref()
                        .and_then(|m| m.get("provider"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    previous = Some((provider.to_owned(), id.clone(), messages.len()));
                    open_assistant = false;
                }
                _ => open_assistant = false,
            }
        }
        answer_every_call(&mut messages);
        let cut = start_of_tail(&messages);
        messages.drain(..cut);
        let previous = previous.map(|(p, id, covered)| (p, id, covered.saturating_sub(cut)));
        Self { messages, previous }
    }
}

/// Adds an answer for each call that has none (a chat that stopped between a call and its
/// result), as providers refuse a call left unanswered.
fn answer_every_call(messages: &mut Vec<Message>) {
    let mut index = 0;
    while index < messages.len() {
        if let Message::Assistant { calls, .. } = &messages[index] {
            let calls = calls.clone();
            let mut end = index + 1;
            while matches!(messages.get(end), Some(Message::ToolResult { .. })) {
                end += 1;
            }
            for call in calls {
                let answered = messages[index + 1..end].iter().any(
                    |m| matches!(m, Message::ToolResult { call_id, .. } if *call_id == call.id),
                );
                if !answered {
                    messages.insert(
                        end,
                        Message::ToolResult {
                            call_id: call.id,
                            output: r#"{"error":{"type":"Interrupted","message":"the call did not finish"}}"#.into(),
                        },
                    );
                    end += 1;
                }
            }
            index = end;
        } else {
            index += 1;
        }
    }
}

/// Where the kept tail starts: the latest user message that leaves at most [`MAX_MESSAGES`]
/// (or the last one, when a single exchange is longer).
fn start_of_tail(messages: &[Message]) -> usize {
    let users = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::User(_)))
        .map(|(i, _)| i);
    let mut start = 0;
    for user in users {
        start = user;
        if messages.len() - user <= MAX_MESSAGES {
            return user;
        }
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(events: Vec<Event>) -> Vec<Stored> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Stored {
                seq: i as u64 + 1,
                ts: 0.0,
                event,
            })
            .collect()
    }

    fn user(text: &str) -> Event {
        Event::UserMessage { text: text.into() }
    }

    fn end(id: &str) -> Event {
        Event::Result {
            final_text: "ok".into(),
            session_id: "s".into(),
            stop_reason: "end".into(),
            usage: None,
            response_id: Some(id.into()),
            provider_metadata: Some(json!({"provider": "openai-responses"})),
            steps: 1,
        }
    }

    #[test]
    fn calls_join_their_message_and_an_unanswered_call_gets_an_answer() {
        let history = History::of(&stored(vec![
            user("sum"),
            Event::AssistantMessage {
                text: "let me".into(),
                is_summary: false,
            },
            Event::ToolUse {
                tool_use_id: "c1".into(),
                name: "calculator".into(),
                input: json!({"numbers": [1]}),
            },
            Event::ToolResult {
                tool_use_id: "c1".into(),
                output: json!({"success": true}),
                is_error: false,
                error_type: None,
                error_message: None,
            },
            end("resp_1"),
            user("again"),
            // The service stopped while this call ran.
            Event::ToolUse {
                tool_use_id: "c2".into(),
                name: "echo".into(),
                input: json!("not json"),
            },
        ]));
        assert_eq!(history.messages.len(), 6, "{:?}", history.messages);
        let Message::Assistant { text, calls } = &history.messages[1] else {
            panic!("{:?}", history.messages)
        };
        assert_eq!((text.as_str(), calls.len()), ("let me", 1));
        let Message::Assistant { calls, .. } = &history.messages[4] else {
            panic!("{:?}", history.messages)
        };
        assert_eq!(calls[0].arguments, "not json");
        assert!(
            matches!(&history.messages[5], Message::ToolResult { call_id, output }
            if call_id == "c2" && output.contains("Interrupted"))
        );
        assert_eq!(
            history.previous,
            Some(("openai-responses".into(), "resp_1".into(), 3))
        );
    }

    #[test]
    fn long_sessions_keep_their_latest_exchanges_whole() {
        let mut events = Vec::new();
        for n in 0..15 {
            events.push(user(&format!("q{n}")));
            events.push(Event::AssistantMessage {
                text: format!("a{n}"),
                is_summary: false,
            });
        }
        let history = History::of(&stored(events));
        assert_eq!(history.messages.len(), 20);
        assert_eq!(history.messages[0], Message::User("q5".into()));
    }
}
