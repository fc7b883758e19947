//! The fake model server: a scripted stand-in for the model APIs the agent CLIs call, so the
//! real CLIs can be tested with no network (the `fake-model` binary of this crate).
//!
//! It speaks the OpenAI Responses API (codex), OpenAI Chat Completions (opencode, qwen, iflow),
//! Gemini `generateContent`/`streamGenerateContent` (gemini) and Anthropic Messages (claude),
//! streamed when the request asks for it. Each wire format ([`openai`], [`gemini`],
//! [`anthropic`]) reads a request into a [`Request`] and renders the [`Action`] that
//! [`Script::decide`] picks for it:
//!
//! - Replies queued with `POST /__script {"replies": [...]}` come first, in order. Only requests
//!   that offer tools take them, so side calls (titles, routers, JSON-mode checks) never eat a
//!   test's script. A reply is `{"text": "..."}`, `{"shell": "<command>"}` (a call to whichever
//!   shell tool the CLI offered, its arguments filled from that tool's schema),
//!   `{"tool": "<name>", "args": {...}}`, `{"error": <status>, "message"?, "retry_after"?,
//!   "retry_after_ms"?}` (sent as `Retry-After` in seconds and `retry-after-ms`) or
//!   `{"hang": true}`
//!   (never answers); a shell or tool reply may add `"say": "<text>"`, said before the call in
//!   the same response; any reply may add `"delay_ms"`, and `"repeat": n` queues it n times.
//! - With the queue empty: a JSON-mode request gets an object made from its schema; anything
//!   else gets the default text (`--final-text`, or `POST /__script {"final_text": ...}`).
//!
//! Every request (method, path, headers, body, `received_ms` since the epoch) is kept in order
//! with what it was answered (`response: {status, body}`), served by `GET /__log` (and the
//! requests appended to `--log` as JSON lines when given);
//! `POST /__reset` clears script and log.
//!
//! The same server is also the OpenAI sign-in server the CLIs' logins use ([`oauth`]).

pub mod anthropic;
pub mod gemini;
pub mod oauth;
pub mod openai;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// What the model does for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Text(String),
    /// A call of tool `name` with these arguments, after text `say` when there is one.
    Tool {
        name: String,
        args: Value,
        say: Option<String>,
    },
    /// Answer this HTTP status with an error body (and `Retry-After: <seconds>`,
    /// `retry-after-ms: <milliseconds>` when set).
    Error {
        status: u16,
        message: String,
        retry_after: Option<u64>,
        retry_after_ms: Option<u64>,
    },
    /// Never answer.
    Hang,
}

/// What a wire format read from a model request.
#[derive(Debug, Default)]
pub struct Request {
    /// Offered tools: name and JSON Schema of the arguments.
    pub tools: Vec<(String, Value)>,
    /// The schema of a JSON-mode answer, if the request asks for one.
    pub json_schema: Option<Value>,
    /// The streamed form was asked for.
    pub stream: bool,
}

/// A queued reply and how long to wait before it.
#[derive(Debug, Clone)]
struct Reply {
    planned: Planned,
    delay: Duration,
}

/// A reply as queued: ready, or to be fitted to the tools of the request that takes it.
#[derive(Debug, Clone)]
enum Planned {
    Ready(Action),
    /// A shell call with this command, through whichever shell tool is offered, after text
    /// `say` when there is one.
    Shell {
        command: String,
        say: Option<String>,
    },
}

/// The shared state: the queue, the default text and the request log.
#[derive(Debug)]
pub struct Script {
    queue: Mutex<std::collections::VecDeque<Reply>>,
    final_text: Mutex<String>,
    log: Mutex<Vec<Value>>,
    log_file: Option<PathBuf>,
    /// The sign-in server's state.
    issuer: oauth::Issuer,
}

/// Shell tools by name, in the order they are preferred.
const SHELL_TOOLS: [&str; 8] = [
    "exec_command",
    "shell",
    "shell_command",
    "run_shell_command",
    "bash",
    "run_terminal_cmd",
    "execute_command",
    "terminal",
];

impl Script {
    pub fn new(final_text: String, log_file: Option<PathBuf>) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::default(),
            final_text: Mutex::new(final_text),
            log: Mutex::default(),
            log_file,
            issuer: oauth::Issuer::default(),
        })
    }

    /// The action for `request`, taking a queued reply when the request offers tools.
    pub fn decide(&self, request: &Request) -> (Action, Duration) {
        if !request.tools.is_empty()
            && let Some(reply) = self.queue.lock().expect("script lock").pop_front()
        {
            let action = match reply.planned {
                Planned::Ready(action) => action,
                Planned::Shell { command, say } => match shell_call(&request.tools, &command) {
                    Action::Tool { name, args, .. } => Action::Tool { name, args, say },
                    other => other,
                },
            };
            return (action, reply.delay);
        }
        if let Some(schema) = &request.json_schema {
            return (
                Action::Text(synthesize(schema, "").to_string()),
                Duration::ZERO,
            );
        }
        let text = self.final_text.lock().expect("script lock").clone();
        (Action::Text(text), Duration::ZERO)
    }

    /// A queued error reply applies to any model call, tools offered or not.
    fn take_error(&self) -> Option<(Action, Duration)> {
        let mut queue = self.queue.lock().expect("script lock");
        match queue.front() {
            Some(Reply {
                planned: Planned::Ready(Action::Error { .. } | Action::Hang),
                ..
            }) => queue.pop_front().map(|r| match r.planned {
                Planned::Ready(action) => (action, r.delay),
                Planned::Shell { .. } => unreachable!("matched a ready reply"),
            }),
            _ => None,
        }
    }

    /// Adds what was answered to log entry `index` (`response: {status, body}`, a streamed body
    /// as its `[event, data]` frames) and returns the response.
    async fn answered(&self, index: usize, response: Response) -> Response {
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let streamed = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
        let logged = if streamed {
            let frames = skill_runner_web::sse::Frames::default().push(&bytes);
            json!(frames)
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
        };
        if let Some(entry) = self.log.lock().expect("log lock").get_mut(index) {
            entry["response"] = json!({"status": parts.status.as_u16(), "body": logged});
        }
        Response::from_parts(parts, axum::body::Body::from(bytes))
    }

    /// Logs a request; its index in the log.
    fn record(&self, method: &Method, path: &str, headers: &HeaderMap, body: &Value) -> usize {
        let headers: Map<String, Value> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), json!(String::from_utf8_lossy(v.as_bytes()))))
            .collect();
        let received_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let entry = json!({"method": method.as_str(), "path": path, "headers": headers,
                           "body": body, "received_ms": received_ms});
        if let Some(file) = &self.log_file {
            use std::io::Write;
            let line = format!("{entry}\n");
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
            {
                let _ = f.write_all(line.as_bytes());
            }
        }
        let mut log = self.log.lock().expect("log lock");
        log.push(entry);
        log.len() - 1
    }

    fn push(&self, body: &Value) -> Result<usize, String> {
        if let Some(text) = body.get("final_text").and_then(Value::as_str) {
            *self.final_text.lock().expect("script lock") = text.to_owned();
        }
        let replies = match body.get("replies") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut replies = Vec::new();
                for item in items {
                    let reply = parse_reply(item)?;
                    let times = item.get("repeat").and_then(Value::as_u64).unwrap_or(1);
                    replies.extend(std::iter::repeat_n(reply, times.min(10_000) as usize));
                }
                replies
            }
            Some(_) => return Err("replies must be an array".into()),
        };
        let mut queue = self.queue.lock().expect("script lock");
        queue.extend(replies);
        Ok(queue.len())
    }
}

fn parse_reply(item: &Value) -> Result<Reply, String> {
    let delay = Duration::from_millis(item.get("delay_ms").and_then(Value::as_u64).unwrap_or(0));
    let say = item.get("say").and_then(Value::as_str).map(str::to_owned);
    let action = if let Some(text) = item.get("text").and_then(Value::as_str) {
        Planned::Ready(Action::Text(text.to_owned()))
    } else if let Some(command) = item.get("shell").and_then(Value::as_str) {
        Planned::Shell {
            command: command.to_owned(),
            say,
        }
    } else if let Some(name) = item.get("tool").and_then(Value::as_str) {
        Planned::Ready(Action::Tool {
            name: name.to_owned(),
            args: item.get("args").cloned().unwrap_or_else(|| json!({})),
            say,
        })
    } else if let Some(status) = item.get("error").and_then(Value::as_u64) {
        let message = item
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("fake model: scripted failure");
        Planned::Ready(Action::Error {
            status: status as u16,
            message: message.to_owned(),
            retry_after: item.get("retry_after").and_then(Value::as_u64),
            retry_after_ms: item.get("retry_after_ms").and_then(Value::as_u64),
        })
    } else if item.get("hang") == Some(&Value::Bool(true)) {
        Planned::Ready(Action::Hang)
    } else {
        return Err(format!("not a reply: {item}"));
    };
    Ok(Reply {
        planned: action,
        delay,
    })
}

/// A call of the first offered shell tool running `command`, its arguments filled from the
/// tool's schema; the default text when no shell tool is offered.
fn shell_call(tools: &[(String, Value)], command: &str) -> Action {
    let found = SHELL_TOOLS.iter().find_map(|wanted| {
        tools
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
    });
    let Some((name, schema)) = found else {
        return Action::Text(format!("fake model: no shell tool offered for `{command}`"));
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let mut args = Map::new();
    for (key, prop) in props.into_iter().flatten() {
        if key == "command" || key == "cmd" {
            let value = if prop.get("type") == Some(&json!("array")) {
                json!(["bash", "-lc", command])
            } else {
                json!(command)
            };
            args.insert(key.clone(), value);
        }
    }
    for key in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(key) {
            let prop = props.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
            let value = if key == "description" {
                json!("Run a command")
            } else {
                synthesize(prop, key)
            };
            args.insert(key.to_owned(), value);
        }
    }
    if args.is_empty() {
        args.insert("command".into(), json!(command));
    }
    Action::Tool {
        name: name.clone(),
        args: Value::Object(args),
        say: None,
    }
}

/// A value that fits a (small) JSON Schema; names the gemini router asks for get values it
/// accepts.
pub fn synthesize(schema: &Value, name: &str) -> Value {
    match name {
        "next_speaker" => return json!("user"),
        "model_choice" => return json!("flash"),
        "reasoning" | "complexity_reasoning" => return json!("fake"),
        "complexity_score" => return json!(1),
        _ => {}
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.to_ascii_lowercase(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string")
            .to_ascii_lowercase(),
        _ if schema.get("properties").is_some() => "object".into(),
        _ => "string".into(),
    };
    match kind.as_str() {
        "object" => Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), synthesize(v, k)))
                .collect(),
        ),
        "array" => json!([]),
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        _ => json!("ok"),
    }
}

/// Splits text into small pieces, as a model streams it.
pub fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars.chunks(12).map(|c| c.iter().collect()).collect()
}

/// A `text/event-stream` body of `(event name, data)` pairs.
pub fn sse(events: Vec<(Option<&str>, String)>) -> Response {
    let mut body = String::new();
    for (event, data) in events {
        if let Some(event) = event {
            body.push_str(&format!("event: {event}\n"));
        }
        body.push_str(&format!("data: {data}\n\n"));
    }
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A short random id with a prefix.
pub fn id(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The router of the fake model server.
pub fn router(script: Arc<Script>) -> Router {
    Router::new().fallback(handle).with_state(script)
}

async fn handle(State(script): State<Arc<Script>>, request: HttpRequest) -> Response {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let query = parts.uri.query().unwrap_or_default();
    if let Some(response) = script
        .issuer
        .answer(&parts.method, parts.uri.path(), query, &bytes)
    {
        return response;
    }
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let path = parts.uri.path().to_owned();
    match (&parts.method, path.as_str()) {
        (&Method::POST, "/__script") => {
            return match script.push(&body) {
                Ok(n) => axum::Json(json!({"queued": n})).into_response(),
                Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
            };
        }
        (&Method::POST, "/__reset") => {
            script.queue.lock().expect("script lock").clear();
            script.log.lock().expect("log lock").clear();
            return StatusCode::NO_CONTENT.into_response();
        }
        (&Method::GET, "/__log") => {
            let log = script.log.lock().expect("log lock").clone();
            return axum::Json(json!({ "requests": log })).into_response();
        }
        _ => {}
    }
    let logged = script.record(
        &parts.method,
        parts.uri.to_string().as_str(),
        &parts.headers,
        &body,
    );
    let body = match body {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    if parts.method == Method::GET {
        return if path.ends_with("/models") {
            axum::Json(json!({
                "object": "list",
                "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake",
                          "type": "model", "display_name": "Fake"}],
                "models": [{"name": "models/fake-model", "displayName": "Fake",
                            "supportedGenerationMethods": ["generateContent"]}],
                "has_more": false,
            }))
            .into_response()
        } else {
            not_found(&path)
        };
    }
    if path.ends_with(":countTokens") {
        return axum::Json(json!({"totalTokens": 10})).into_response();
    }
    if path.ends_with("/messages/count_tokens") {
        return axum::Json(json!({"input_tokens": 10})).into_response();
    }
    type Wire = (
        fn(&Map<String, Value>, &str) -> Request,
        fn(&Map<String, Value>, &Request, Action) -> Response,
    );
    let wire: Wire = if path.ends_with("/responses") {
        (openai::read_responses, openai::responses)
    } else if path.ends_with("/chat/completions") {
        (openai::read_chat, openai::chat)
    } else if path.contains(":generateContent") || path.contains(":streamGenerateContent") {
        (gemini::read, gemini::reply)
    } else if path.ends_with("/messages") {
        (anthropic::read, anthropic::reply)
    } else {
        return not_found(&path);
    };
    let request = (wire.0)(&body, &path);
    let (action, delay) = script
        .take_error()
        .unwrap_or_else(|| script.decide(&request));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match action {
        Action::Hang => {
            // Held open until the client gives up.
            std::future::pending::<()>().await;
            unreachable!("pending never resolves")
        }
        Action::Error {
            status,
            message,
            retry_after,
            retry_after_ms,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = json!({"error": {"message": message, "type": "server_error",
                                        "code": status.as_u16(), "status": "INTERNAL"}});
            let mut response = (status, axum::Json(body)).into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, seconds.into());
            }
            if let Some(millis) = retry_after_ms {
                response
                    .headers_mut()
                    .insert("retry-after-ms", millis.into());
            }
            script.answered(logged, response).await
        }
        action => {
            script
                .answered(logged, (wire.1)(&body, &request, action))
                .await
        }
    }
}

fn not_found(path: &str) -> Response {
    let body = json!({"error": {"message": format!("fake model: no route for {path}")}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// The server's routes over a fresh script, for callers that serve them their own way (over
/// TLS, say) rather than through [`serve`].
pub fn app(final_text: String, log_file: Option<PathBuf>) -> Router {
    router(Script::new(final_text, log_file))
}

/// Serves the fake model server on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    final_text: String,
    log_file: Option<PathBuf>,
) -> std::io::Result<()> {
    axum::serve(listener, app(final_text, log_file)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(names: &[(&str, Value)]) -> Vec<(String, Value)> {
        names
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect()
    }

    #[test]
    fn shell_calls_fit_each_clis_tool() {
        let codex = tools(&[(
            "exec_command",
            json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}),
        )]);
        assert_eq!(
            shell_call(&codex, "echo hi"),
            Action::Tool {
                name: "exec_command".into(),
                args: json!({"cmd": "echo hi"}),
                say: None,
            }
        );
        let opencode = tools(&[
            ("read", json!({})),
            (
                "bash",
                json!({"type": "object", "properties": {"command": {"type": "string"}, "description": {"type": "string"}}, "required": ["command", "description"]}),
            ),
        ]);
        assert_eq!(
            shell_call(&opencode, "ls"),
            Action::Tool {
                name: "bash".into(),
                args: json!({"command": "ls", "description": "Run a command"}),
                say: None,
            }
        );
        let array = tools(&[(
            "shell",
            json!({"properties": {"command": {"type": "array"}}}),
        )]);
        assert_eq!(
            shell_call(&array, "ls"),
            Action::Tool {
                name: "shell".into(),
                args: json!({"command": ["bash", "-lc", "ls"]}),
                say: None,
            }
        );
        let claude = tools(&[(
            "Bash",
            json!({"properties": {"command": {"type": "string"}}}),
        )]);
        assert!(matches!(shell_call(&claude, "ls"), Action::Tool { name, .. } if name == "Bash"));
        assert!(matches!(
            shell_call(&tools(&[("read", json!({}))]), "ls"),
            Action::Text(_)
        ));
    }

    #[test]
    fn queued_replies_go_to_requests_with_tools() {
        let script = Script::new("done".into(), None);
        script.push(&json!({"replies": [{"text": "first"}, {"error": 500, "repeat": 2}, {"hang": true, "delay_ms": 5}]})).unwrap();
        let side = Request::default();
        assert_eq!(script.decide(&side).0, Action::Text("done".into()));
        let main = Request {
            tools: tools(&[("bash", json!({}))]),
            ..Request::default()
        };
        assert_eq!(script.decide(&main).0, Action::Text("first".into()));
        // Errors (here repeated) and hangs apply to the next model call of any kind.
        for _ in 0..2 {
            assert!(matches!(
                script.take_error(),
                Some((Action::Error { status: 500, .. }, _))
            ));
        }
        assert_eq!(
            script.take_error(),
            Some((Action::Hang, Duration::from_millis(5)))
        );
        assert_eq!(script.take_error(), None);
        let json_mode = Request {
            json_schema: Some(
                json!({"type": "object", "properties": {"next_speaker": {"type": "string"}, "n": {"type": "integer"}}}),
            ),
            ..Request::default()
        };
        assert_eq!(
            script.decide(&json_mode).0,
            Action::Text(json!({"next_speaker": "user", "n": 1}).to_string())
        );
        assert!(script.push(&json!({"replies": [{"nonsense": 1}]})).is_err());
    }
}
