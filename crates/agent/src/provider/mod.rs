//! The model providers a chat talks to, and one streamed model request in a provider's wire
//! format: OpenAI-compatible Chat Completions ([`chat_completions`], the `openai` and
//! `dashscope` presets), the OpenAI Responses API ([`responses`], threaded by
//! `previous_response_id`) and Anthropic Messages ([`anthropic`]).
//!
//! Every request asks for the streamed form, so one reading path per format serves chats that
//! stream and chats that do not (text deltas go to whoever listens). Transient failures (429,
//! 5xx, a dropped connection, a read timeout) before anything streamed are retried a bounded
//! number of times, waiting `Retry-After` when the provider sends one, else backing off.

pub mod anthropic;
pub mod chat_completions;
pub mod responses;

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use skill_runner_web::sse::Frames;

use crate::config::{ChatConfig, ModelEndpoint, PRESETS, Wire, preset};
use secrecy::ExposeSecret;

/// A message of a conversation, in no provider's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User(String),
    Assistant {
        text: String,
        calls: Vec<Call>,
    },
    /// The answer to call `call_id`, as the JSON text the model reads.
    ToolResult {
        call_id: String,
        output: String,
    },
}

/// A tool call the model made; `arguments` is the JSON text it sent (maybe not JSON at all).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema of an object.
    pub parameters: Value,
}

/// Tokens a request cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub text: String,
    pub calls: Vec<Call>,
    pub usage: Usage,
    /// The Responses API's id of this answer, for `previous_response_id`.
    pub response_id: Option<String>,
}

/// One request to the model.
#[derive(Debug)]
pub struct Ask<'a> {
    pub model: &'a str,
    pub system: &'a str,
    /// The whole conversation so far.
    pub messages: &'a [Message],
    /// Offered tools; none offered when empty.
    pub tools: &'a [ToolSpec],
    pub max_tokens: u32,
    pub temperature: f64,
    /// With the Responses API: the answer the provider already holds the conversation up to,
    /// and how many of `messages` it holds (only the rest is sent).
    pub previous: Option<(&'a str, usize)>,
}

/// Why a model request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    /// The provider answered an error status.
    #[error("the provider answered {status}: {message}")]
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// No answer: the connection failed, broke, or stayed silent past the time limit.
    #[error("the provider could not be reached: {0}")]
    Transport(String),
    /// An answer that is not the wire format, or an error reported inside the stream.
    #[error("the provider's answer could not be read: {0}")]
    Malformed(String),
}

impl Failure {
    /// What `runtime.error` calls it.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Status { .. } => "ProviderError",
            Failure::Transport(_) => "ProviderUnavailable",
            Failure::Malformed(_) => "ProviderProtocolError",
        }
    }

    fn transient(&self) -> bool {
        match self {
            Failure::Status { status, .. } => *status == 408 || *status == 429 || *status >= 500,
            Failure::Transport(_) => true,
            Failure::Malformed(_) => false,
        }
    }
}

/// A configured provider, as a chat uses it; its key never reaches a log (`Debug` shows it redacted).
#[derive(Debug, Clone)]
pub struct Provider {
    pub name: &'static str,
    pub wire: Wire,
    pub base_url: String,
    api_key: Option<secrecy::SecretString>,
    pub model: String,
}

/// Why a chat cannot use the provider it asked for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PickError {
    #[error("unknown provider '{name}'; known providers: {known}")]
    Unknown { name: String, known: String },
    #[error(
        "provider '{name}' is not configured: set {variable} (and {base_url_variable} for a \
         compatible server of your own)"
    )]
    Unconfigured {
        name: String,
        variable: String,
        base_url_variable: String,
    },
}

/// The configured providers and the HTTP client they share.
#[derive(Debug)]
pub struct Providers {
    default: String,
    configured: BTreeMap<&'static str, Provider>,
    http: reqwest::Client,
    max_retries: u32,
    /// First wait before a retry when the provider says nothing; doubled per retry.
    backoff: Duration,
}

/// The longest `Retry-After` that is waited; a longer one fails the request instead.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

impl Providers {
    pub fn new(config: &ChatConfig) -> anyhow::Result<Self> {
        let configured = PRESETS
            .iter()
            .filter_map(|preset| {
                let ModelEndpoint { endpoint, model } = config.endpoints.get(preset.name)?;
                let provider = Provider {
                    name: preset.name,
                    wire: preset.wire,
                    base_url: endpoint
                        .base_url
                        .clone()
                        .unwrap_or_else(|| preset.base_url.to_owned()),
                    api_key: endpoint.api_key.clone(),
                    model: model.clone().unwrap_or_else(|| preset.model.to_owned()),
                };
                Some((preset.name, provider))
            })
            .collect();
        // rustls needs a process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            .read_timeout(config.timeout)
            .build()?;
        Ok(Self {
            default: config.provider.clone(),
            configured,
            http,
            max_retries: config.max_retries,
            backoff: Duration::from_millis(500),
        })
    }

    /// The provider called `requested`, or the default one.
    pub fn pick(&self, requested: Option<&str>) -> Result<&Provider, PickError> {
        let name = requested.unwrap_or(&self.default);
        let Some(preset) = preset(name) else {
            let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
            return Err(PickError::Unknown {
                name: name.to_owned(),
                known: known.join(", "),
            });
        };
        self.configured
            .get(preset.name)
            .ok_or_else(|| PickError::Unconfigured {
                name: preset.name.to_owned(),
                variable: format!("SKILL_RUNNER_AGENT_{}_API_KEY", preset.var),
                base_url_variable: format!("SKILL_RUNNER_AGENT_{}_BASE_URL", preset.var),
            })
    }

    /// Sends `ask`, retrying transient failures that happened before anything streamed.
    /// `on_delta` gets the answer's text as it arrives.
    pub async fn send(
        &self,
        provider: &Provider,
        ask: &Ask<'_>,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Reply, Failure> {
        let mut attempt = 0;
        loop {
            let mut streamed = false;
            let mut relay = |text: &str| {
                streamed = true;
                on_delta(text);
            };
            let failure = match self.attempt(provider, ask, &mut relay).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => redact(
                    failure,
                    provider.api_key.as_ref().map(ExposeSecret::expose_secret),
                ),
            };
            if streamed || !failure.transient() || attempt >= self.max_retries {
                return Err(failure);
            }
            let wait = match &failure {
                Failure::Status {
                    retry_after: Some(wait),
                    ..
                } if *wait > MAX_RETRY_AFTER => return Err(failure),
                Failure::Status {
                    retry_after: Some(wait),
                    ..
                } => *wait,
                _ => self.backoff * 2u32.pow(attempt),
            };
            tracing::warn!(provider = provider.name, attempt, error = %failure, wait_ms = wait.as_millis() as u64, "retrying a model request");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    async fn attempt(
        &self,
        provider: &Provider,
        ask: &Ask<'_>,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Reply, Failure> {
        let (path, body, mut decoder): (&str, Value, Box<dyn Decoder>) = match provider.wire {
            Wire::ChatCompletions => (
                "/chat/completions",
                chat_completions::body(ask),
                Box::new(chat_completions::Decoder::default()) as Box<dyn Decoder>,
            ),
            Wire::Responses => (
                "/responses",
                responses::body(ask),
                Box::new(responses::Decoder::default()) as Box<dyn Decoder>,
            ),
            Wire::Anthropic => (
                "/messages",
                anthropic::body(ask),
                Box::new(anthropic::Decoder::default()) as Box<dyn Decoder>,
            ),
        };
        let url = format!("{}{path}", provider.base_url.trim_end_matches('/'));
        let mut request = self.http.post(url).json(&body);
        if let Some(key) = &provider.api_key {
            request = match provider.wire {
                Wire::Anthropic => request.header("x-api-key", key.expose_secret()),
                _ => request.bearer_auth(key.expose_secret()),
            };
        }
        if provider.wire == Wire::Anthropic {
            request = request.header("anthropic-version", "2023-06-01");
        }
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = response.text().await.unwrap_or_default();
            return Err(Failure::Status {
                status: status.as_u16(),
                message: error_message(&text),
                retry_after,
            });
        }
        let mut frames = Frames::default();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(transport)?;
            for (event, data) in frames.push(&chunk) {
                decoder.frame(&event, &data, on_delta)?;
            }
        }
        decoder.finish()
    }
}

/// Reads one wire format's stream, frame by frame.
trait Decoder: Send {
    fn frame(
        &mut self,
        event: &str,
        data: &Value,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), Failure>;

    /// The answer, once the stream has ended.
    fn finish(self: Box<Self>) -> Result<Reply, Failure>;
}

fn transport(e: reqwest::Error) -> Failure {
    let what = if e.is_timeout() {
        "no answer within the time limit".to_owned()
    } else {
        // The source says what went wrong (refused, reset); the URL adds nothing secret.
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    };
    Failure::Transport(what)
}

/// The message of an error body (`{"error": {"message": ...}}` in every format), else its
/// first 500 characters.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    match message {
        Some(message) => message.to_owned(),
        None => body.chars().take(500).collect(),
    }
}

/// `failure` with the provider's key cut out, should a provider repeat it.
fn redact(failure: Failure, key: Option<&str>) -> Failure {
    let Some(key) = key.filter(|k| k.len() >= 4) else {
        return failure;
    };
    let cut = |text: String| text.replace(key, "[redacted]");
    match failure {
        Failure::Status {
            status,
            message,
            retry_after,
        } => Failure::Status {
            status,
            message: cut(message),
            retry_after,
        },
        Failure::Transport(m) => Failure::Transport(cut(m)),
        Failure::Malformed(m) => Failure::Malformed(cut(m)),
    }
}

/// A stream's error event (`{"error": {...}}`, `{"type": "error", ...}`) as a failure.
fn stream_error(data: &Value) -> Failure {
    let message = data
        .pointer("/error/message")
        .or_else(|| data.pointer("/response/error/message"))
        .or_else(|| data.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("the stream reported an error");
    Failure::Malformed(message.to_owned())
}

/// The calls of an answer, each with a name and an id (made up when the provider sent none).
fn named_calls(calls: Vec<Call>) -> Result<Vec<Call>, Failure> {
    calls
        .into_iter()
        .enumerate()
        .map(|(n, mut call)| {
            if call.name.is_empty() {
                return Err(Failure::Malformed(format!("tool call {n} has no name")));
            }
            if call.id.is_empty() {
                call.id = format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
            }
            Ok(call)
        })
        .collect()
}
