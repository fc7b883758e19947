//! One chat: the user's message, then model requests and tool calls in turn until the model
//! answers with text, every step recorded in the session as it happens.
//!
//! At most `max_tool_calls` rounds of tool calls are offered; then one last request without
//! tools. A call the tool box refuses is answered to the model as that call's result (so it can
//! correct itself) and the loop goes on; refused arguments count against
//! `max_validation_retries`, past which the chat ends `TOOL_INVOCATION_ERROR`. A provider that
//! fails beyond its retries ends the chat with `runtime.error` and `result{stop_reason:
//! "error"}`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use super::Agent;
use super::history::History;
use super::live::Published;
use super::provider::{Ask, Failure, Message, Provider, Reply, Usage};
use super::session::{Event, Stored, Writer};
use super::tool_output;
use super::tools::Toolbox;
use crate::config::Wire;

/// What the model is told about its situation.
const SYSTEM_PROMPT: &str = "You are a helpful assistant. The tools you are offered are skills \
    that run on the server. Call one when it helps to answer; if a call is refused or fails, \
    correct the call or explain the problem. Answer in plain text.";

/// A chat as asked for (checked by the API layer).
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub message: String,
    pub conversation_id: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub max_tool_calls: u32,
    pub max_tokens: u32,
    pub temperature: f64,
    pub max_validation_retries: u32,
    pub allowed_tools: Option<Vec<String>>,
    pub trace_id: String,
    /// Who asks: a new session is its tenant's, and only a session it may see is continued.
    pub caller: skill_runner_core::tenants::Caller,
}

/// A tool call of the chat, as the response lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub tool: String,
    pub arguments: Value,
    /// The arguments passed the tool's checks and the tool ran.
    pub validated: bool,
    /// The tool's Normalized Skill Result, or why the call was refused.
    pub result: Value,
}

/// How a chat ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOutcome {
    pub success: bool,
    /// The model's final text, or what went wrong.
    pub response: String,
    pub conversation_id: String,
    pub trace_id: String,
    pub tool_calls: Vec<ToolCallRecord>,
    pub provider: String,
    pub model: String,
    pub usage: Usage,
    pub validation_retries: u32,
    pub latency_ms: u64,
    pub stop_reason: String,
    pub steps: u32,
    /// `(code, message)` when the chat failed: `TOOL_INVOCATION_ERROR`, `PROVIDER_ERROR`,
    /// `INTERRUPTED` (the service stopped) or `INTERNAL`.
    pub error: Option<(String, String)>,
}

/// A chat ready to run: its session held, its provider and tools chosen.
pub struct Prepared {
    pub(super) request: ChatRequest,
    pub(super) provider: Provider,
    pub(super) toolbox: Toolbox,
    pub(super) writer: Writer,
    pub(super) events: Vec<Stored>,
    pub(super) new_session: bool,
    pub(super) started: Instant,
}

impl Prepared {
    pub fn session_id(&self) -> &str {
        self.writer.id()
    }
}

/// Events a caller's stream may fall behind by (see [`Recorder::stream`]).
pub const STREAM_BEHIND: usize = 256;

/// Where a chat's events go as they happen.
struct Recorder {
    writer: Writer,
    live: broadcast::Sender<Published>,
    /// The caller's stream, while it keeps up: one that falls [`STREAM_BEHIND`] events behind
    /// is let go, and reads the rest from the session's log.
    stream: Option<mpsc::Sender<Published>>,
    last_seq: u64,
}

impl Recorder {
    fn record(&mut self, event: Event) -> std::io::Result<()> {
        let stored = self.writer.append(event)?;
        let published = Published {
            after_seq: self.last_seq,
            stored,
        };
        if published.stored.seq > 0 {
            self.last_seq = published.stored.seq;
        }
        // A client that went away or does not read neither stops the chat nor holds its
        // events in memory.
        if let Some(stream) = &self.stream
            && stream.try_send(published.clone()).is_err()
        {
            self.stream = None;
        }
        let _ = self.live.send(published);
        Ok(())
    }

    /// A text delta: streamed, not stored (its recording cannot fail).
    fn delta(&mut self, text: &str) {
        let _ = self.record(Event::AssistantDelta {
            text_delta: text.to_owned(),
        });
    }
}

/// Why the loop stopped early.
enum Stop {
    /// The chat ends with this code and message (already recorded as `runtime.error`).
    Failed(&'static str, String),
    /// The session could not be written.
    Io(std::io::Error),
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Self {
        Stop::Io(e)
    }
}

/// Runs a prepared chat to its end; `stream` gets its events as they happen.
pub async fn run(
    agent: Arc<Agent>,
    prepared: Prepared,
    stream: Option<mpsc::Sender<Published>>,
) -> ChatOutcome {
    let Prepared {
        request,
        provider,
        toolbox,
        writer,
        events,
        new_session,
        started,
    } = prepared;
    let session_id = writer.id().to_owned();
    let model = request
        .model
        .clone()
        .unwrap_or_else(|| provider.model.clone());
    let mut recorder = Recorder {
        last_seq: writer.next_seq() - 1,
        live: agent.live.start(&session_id),
        writer,
        stream,
    };
    let mut chat = Chat {
        agent: &agent,
        request: &request,
        provider: &provider,
        model: &model,
        toolbox: &toolbox,
        history: History::of(&events),
        tool_calls: Vec::new(),
        usage: Usage::default(),
        validation_retries: 0,
        steps: 0,
        response_id: None,
    };
    let ended = chat.converse(&mut recorder, new_session, &session_id).await;
    let (stop_reason, final_text, error) = match ended {
        Ok((reason, text)) => (reason, text, None),
        Err(Stop::Failed(code, message)) => ("error", String::new(), Some((code, message))),
        Err(Stop::Io(e)) => {
            tracing::error!(session_id, error = %e, "cannot write a chat session");
            let message = "the session could not be written".to_owned();
            ("error", String::new(), Some(("INTERNAL", message)))
        }
    };
    let result = Event::Result {
        final_text: final_text.clone(),
        session_id: session_id.clone(),
        stop_reason: stop_reason.to_owned(),
        usage: Some(json!({
            "input_tokens": chat.usage.input_tokens,
            "output_tokens": chat.usage.output_tokens,
            "total_tokens": chat.usage.total(),
        })),
        response_id: chat.response_id.clone(),
        provider_metadata: Some(json!({
            "provider": provider.name, "model": model, "trace_id": request.trace_id,
        })),
        steps: chat.steps,
    };
    if let Err(e) = recorder.record(result) {
        tracing::error!(session_id, error = %e, "cannot write a chat's result");
    }
    agent.live.end(&session_id);
    tracing::info!(
        session_id,
        trace_id = request.trace_id,
        provider = provider.name,
        stop_reason,
        steps = chat.steps,
        tool_calls = chat.tool_calls.len(),
        "agent chat"
    );
    ChatOutcome {
        success: error.is_none(),
        response: match &error {
            Some((_, message)) => message.clone(),
            None => final_text,
        },
        conversation_id: session_id,
        trace_id: request.trace_id.clone(),
        tool_calls: chat.tool_calls,
        provider: provider.name.to_owned(),
        model: model.clone(),
        usage: chat.usage,
        validation_retries: chat.validation_retries,
        latency_ms: started.elapsed().as_millis() as u64,
        stop_reason: stop_reason.to_owned(),
        steps: chat.steps,
        error: error.map(|(code, message)| (code.to_owned(), message)),
    }
}

/// `previous_response_id` threading (Responses API): whether it is used, and the answer the
/// provider holds the conversation up to with how many messages that covers.
struct Thread {
    on: bool,
    previous: Option<(String, usize)>,
}

/// The state of a chat under way.
struct Chat<'a> {
    agent: &'a Agent,
    request: &'a ChatRequest,
    provider: &'a Provider,
    model: &'a str,
    toolbox: &'a Toolbox,
    history: History,
    tool_calls: Vec<ToolCallRecord>,
    usage: Usage,
    validation_retries: u32,
    steps: u32,
    response_id: Option<String>,
}

impl Chat<'_> {
    /// The loop; the stop reason and final text when it ends well.
    async fn converse(
        &mut self,
        recorder: &mut Recorder,
        new_session: bool,
        session_id: &str,
    ) -> Result<(&'static str, String), Stop> {
        if new_session {
            recorder.record(Event::SystemInit {
                session_id: session_id.to_owned(),
                cwd: self.agent.cwd.clone(),
                sdk_version: concat!("skill-runner/", env!("CARGO_PKG_VERSION")).to_owned(),
            })?;
        }
        recorder.record(Event::UserMessage {
            text: self.request.message.clone(),
        })?;
        let mut messages = std::mem::take(&mut self.history.messages);
        messages.push(Message::User(self.request.message.clone()));
        // With the Responses API, the answer the provider holds the conversation up to.
        let mut thread = Thread {
            on: self.provider.wire == Wire::Responses,
            previous: match &self.history.previous {
                Some((name, id, covered)) if name == self.provider.name => {
                    Some((id.clone(), *covered))
                }
                _ => None,
            },
        };
        let tools = self.toolbox.specs();
        let mut rounds = 0;
        loop {
            let offered = if rounds < self.request.max_tool_calls {
                &tools[..]
            } else {
                &[]
            };
            let reply = self.ask(recorder, &messages, offered, &mut thread).await?;
            self.steps += 1;
            self.usage.add(reply.usage);
            if reply.response_id.is_some() {
                self.response_id.clone_from(&reply.response_id);
            }
            if !reply.text.is_empty() {
                recorder.record(Event::AssistantMessage {
                    text: reply.text.clone(),
                    is_summary: false,
                })?;
            }
            messages.push(Message::Assistant {
                text: reply.text.clone(),
                calls: reply.calls.clone(),
            });
            if let (true, Some(id)) = (thread.on, &reply.response_id) {
                // The provider now holds everything up to this answer.
                thread.previous = Some((id.clone(), messages.len()));
            }
            if reply.calls.is_empty() {
                return Ok(("end", reply.text));
            }
            if offered.is_empty() {
                // Tools were not offered, yet the model asked for one.
                return Ok(("max_steps", reply.text));
            }
            rounds += 1;
            for call in &reply.calls {
                // Arguments that are not JSON are kept as the text the model sent.
                let arguments = serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                recorder.record(Event::ToolUse {
                    tool_use_id: call.id.clone(),
                    name: call.name.clone(),
                    input: arguments.clone(),
                })?;
                let output = self.call(recorder, call, arguments).await?;
                messages.push(Message::ToolResult {
                    call_id: call.id.clone(),
                    output,
                });
                if self.validation_retries > self.request.max_validation_retries {
                    let message = format!(
                        "the model sent invalid tool arguments {} times (max_validation_retries \
                         is {})",
                        self.validation_retries, self.request.max_validation_retries
                    );
                    return Err(self.fail(
                        recorder,
                        "tool",
                        "TOOL_INVOCATION_ERROR",
                        message,
                        Some(&call.id),
                    )?);
                }
            }
        }
    }

    /// One model request. A refused `previous_response_id` is retried once without it, and
    /// threading stops for the rest of the chat.
    async fn ask(
        &mut self,
        recorder: &mut Recorder,
        messages: &[Message],
        tools: &[super::provider::ToolSpec],
        thread: &mut Thread,
    ) -> Result<Reply, Stop> {
        let closing = self.agent.closing.clone();
        loop {
            let ask = Ask {
                model: self.model,
                system: SYSTEM_PROMPT,
                messages,
                tools,
                max_tokens: self.request.max_tokens,
                temperature: self.request.temperature,
                previous: thread.previous.as_ref().map(|(id, n)| (id.as_str(), *n)),
            };
            let sent = {
                let mut on_delta = |text: &str| recorder.delta(text);
                tokio::select! {
                    sent = self.agent.providers.send(self.provider, &ask, &mut on_delta) => Some(sent),
                    () = closing.cancelled() => None,
                }
            };
            let Some(sent) = sent else {
                let message = "the service is shutting down".to_owned();
                return Err(self.fail(recorder, "provider", "INTERRUPTED", message, None)?);
            };
            match sent {
                Ok(reply) => return Ok(reply),
                Err(Failure::Status {
                    status, message, ..
                }) if thread.previous.is_some() && (status == 400 || status == 404) => {
                    tracing::warn!(
                        provider = self.provider.name,
                        status,
                        message,
                        "previous_response_id refused; sending the whole conversation"
                    );
                    *thread = Thread {
                        on: false,
                        previous: None,
                    };
                }
                Err(failure) => {
                    let message = failure.to_string();
                    recorder.record(Event::RuntimeError {
                        phase: "provider".into(),
                        error_type: failure.kind().into(),
                        error_message: message.clone(),
                        provider: Some(self.provider.name.to_owned()),
                        tool_use_id: None,
                    })?;
                    return Err(Stop::Failed("PROVIDER_ERROR", message));
                }
            }
        }
    }

    /// Records a `runtime.error` and the stop it causes.
    fn fail(
        &self,
        recorder: &mut Recorder,
        phase: &str,
        code: &'static str,
        message: String,
        tool_use_id: Option<&str>,
    ) -> Result<Stop, Stop> {
        recorder.record(Event::RuntimeError {
            phase: phase.into(),
            error_type: code.into(),
            error_message: message.clone(),
            provider: Some(self.provider.name.to_owned()),
            tool_use_id: tool_use_id.map(str::to_owned),
        })?;
        Ok(Stop::Failed(code, message))
    }

    /// Runs (or refuses) one call and records its result; the output the model reads.
    async fn call(
        &mut self,
        recorder: &mut Recorder,
        call: &super::provider::Call,
        arguments: Value,
    ) -> Result<String, Stop> {
        let (output, full, validated, error) = match self.toolbox.check(call) {
            Ok(input) => {
                let cancel = self.agent.closing.child_token();
                let result = self
                    .agent
                    .host
                    .invoke(
                        &call.name,
                        Ok(json!({ "input": input })),
                        self.request.trace_id.clone(),
                        &cancel,
                    )
                    .await;
                let error = result
                    .error
                    .as_ref()
                    .map(|e| (e.code.as_str().to_owned(), e.message.clone()));
                let full = serde_json::to_value(&result).unwrap_or(Value::Null);
                (full.clone(), full, true, error)
            }
            Err(refusal) => {
                if refusal.invalid_arguments() {
                    self.validation_retries += 1;
                }
                let output = refusal.output();
                let error = Some((refusal.error_type.to_owned(), refusal.message.clone()));
                (output.clone(), output, false, error)
            }
        };
        let (capped, cut) = tool_output::cap(&output);
        if let Some(cut) = cut {
            recorder.record(Event::ToolOutputCompacted {
                tool_use_id: call.id.clone(),
                original_chars: cut.original_chars,
                kept_chars: cut.kept_chars,
            })?;
        }
        let (error_type, error_message) = error.map_or((None, None), |(t, m)| (Some(t), Some(m)));
        recorder.record(Event::ToolResult {
            tool_use_id: call.id.clone(),
            output: capped.clone(),
            is_error: error_type.is_some(),
            error_type,
            error_message,
        })?;
        self.tool_calls.push(ToolCallRecord {
            tool: call.name.clone(),
            arguments,
            validated,
            result: full,
        });
        Ok(capped.to_string())
    }
}

/// The metadata a new session is created with.
pub fn session_metadata(
    request: &ChatRequest,
    provider: &Provider,
    model: &str,
) -> Map<String, Value> {
    let title: String = request.message.chars().take(80).collect();
    let mut metadata = Map::new();
    metadata.insert("title".into(), json!(title));
    metadata.insert("provider".into(), json!(provider.name));
    metadata.insert("model".into(), json!(model));
    metadata
}
