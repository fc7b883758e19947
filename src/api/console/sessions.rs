//! `/ui/sessions`: the agent's chat sessions, read-only — the list, and one session's events
//! as a conversation that refreshes itself while a chat is under way.

use crate::api::auth::Acting;
use askama::Template;
use axum::extract::{Path, State};
use serde_json::Value;
use skill_runner_core::tenants::Caller;
use skill_runner_web::markdown;

use super::{Lang, Page, render};
use crate::agent::session::{Event, Stored};
use crate::api::agent::{SessionSummary, list_all, read_session};
use crate::state::AppState;

/// How many sessions the list shows.
const LIST_LIMIT: usize = 200;

#[derive(Template)]
#[template(path = "sessions.html")]
struct SessionsPage {
    l: Lang,
    section: &'static str,
    sessions: Vec<SessionSummary>,
}

#[derive(Template)]
#[template(path = "session.html")]
struct SessionPage {
    l: Lang,
    section: &'static str,
    id: String,
    title: String,
    rows: Vec<Row>,
    live: bool,
}

#[derive(Template)]
#[template(path = "partials/session_events.html")]
struct SessionEvents {
    l: Lang,
    id: String,
    rows: Vec<Row>,
    live: bool,
}

/// One event as the page shows it.
struct Row {
    seq: u64,
    kind: &'static str,
    /// `user`, `assistant` or `system` (placement and colour).
    role: &'static str,
    /// A short heading (a tool's name, a stop reason); empty when the text says it all.
    label: String,
    text: String,
    /// What the model said, as sanitised HTML from its Markdown (instead of `text`).
    html: Option<String>,
    /// JSON shown as code (a call's input, a tool's output).
    code: Option<String>,
}

/// The longest JSON shown for one event.
const CODE_CHARS: usize = 4_000;

fn pretty(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    if text.chars().count() <= CODE_CHARS {
        return text;
    }
    let kept: String = text.chars().take(CODE_CHARS).collect();
    format!("{kept}\n…")
}

impl Row {
    fn of(stored: &Stored) -> Option<Self> {
        // Served values are redacted, as on the API.
        let served = stored.redacted();
        let (role, label, text, code) = match &stored.event {
            Event::SystemInit { .. } => ("system", String::new(), String::new(), None),
            Event::UserMessage { text } => ("user", String::new(), text.clone(), None),
            Event::AssistantMessage { text, .. } => {
                ("assistant", String::new(), text.clone(), None)
            }
            Event::ToolUse { name, .. } => (
                "assistant",
                name.clone(),
                String::new(),
                Some(pretty(&served["input"])),
            ),
            Event::ToolResult {
                error_type,
                error_message,
                ..
            } => (
                "assistant",
                error_type.clone().unwrap_or_default(),
                error_message.clone().unwrap_or_default(),
                Some(pretty(&served["output"])),
            ),
            Event::ToolOutputCompacted {
                original_chars,
                kept_chars,
                ..
            } => (
                "system",
                String::new(),
                format!("{original_chars} → {kept_chars}"),
                None,
            ),
            Event::RuntimeError {
                error_type,
                error_message,
                ..
            } => ("system", error_type.clone(), error_message.clone(), None),
            Event::Result {
                stop_reason,
                final_text,
                ..
            } => ("system", stop_reason.clone(), final_text.clone(), None),
            Event::UserQuestion { prompt, .. } => {
                ("assistant", String::new(), prompt.clone(), None)
            }
            Event::UserCompaction { .. }
            | Event::HookEvent { .. }
            | Event::AssistantDelta { .. } => {
                return None;
            }
        };
        // The model's own words are Markdown.
        let said = matches!(
            stored.event,
            Event::AssistantMessage { .. } | Event::Result { .. } | Event::UserQuestion { .. }
        );
        Some(Self {
            seq: stored.seq,
            kind: stored.event.kind(),
            role,
            label,
            html: (said && !text.is_empty()).then(|| markdown::said_to_html(&text)),
            text,
            code,
        })
    }
}

async fn events(
    l: Lang,
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<(SessionEvents, String), super::ConsoleError> {
    let (meta, stored) = read_session(state, caller, id, 0).await?;
    let title = meta
        .metadata
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let events = SessionEvents {
        l,
        id: id.to_owned(),
        rows: stored.iter().filter_map(Row::of).collect(),
        live: state.agent.follow(id).is_some(),
    };
    Ok((events, title))
}

/// `GET /ui/sessions`.
pub async fn page(l: Lang, State(state): State<AppState>, Acting(caller): Acting) -> Page {
    let (_, sessions) = list_all(&state, &caller, 0, LIST_LIMIT).await?;
    render(&SessionsPage {
        l,
        section: "sessions",
        sessions,
    })
}

/// `GET /ui/sessions/{session_id}`.
pub async fn detail(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(id): Path<String>,
) -> Page {
    let (events, title) = events(l, &state, &caller, &id).await?;
    render(&SessionPage {
        l,
        section: "sessions",
        id,
        title,
        rows: events.rows,
        live: events.live,
    })
}

/// `GET /ui/management/sessions/{session_id}/events`: refreshes itself while a chat is under way.
pub async fn events_fragment(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Path(id): Path<String>,
) -> Page {
    render(&events(l, &state, &caller, &id).await?.0)
}
