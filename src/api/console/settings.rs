//! `/ui/settings`: the configuration in effect — every setting with its variable, its flag,
//! its value and where that value came from — so an operator can check what the service was
//! started with without reading its environment. Secrets read as set or not
//! ([`crate::config::effective`]). Above it, what the reference's settings page does: the log
//! level changed while the service runs, this node's latest log records, and the data reset
//! behind its typed confirmation (the API's own checks: [`crate::api::system_admin`]).

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Lang, Page, render};
use crate::api::auth::Acting;
use crate::api::system_admin::{self, LogQuery, RESET_CONFIRMATION, ResetDone, ResetRequest};
use crate::config::effective::{Effective, Source};
use crate::state::AppState;

/// Log records the viewer shows at most: the latest matches.
const SHOWN_RECORDS: usize = 200;

/// One setting as the page shows it: its help rendered from Markdown.
struct Shown<'a> {
    s: &'a Effective,
    help: String,
}

/// The settings of one area (its catalogue key), in the order `--help` lists them.
struct Area<'a> {
    key: &'static str,
    settings: Vec<Shown<'a>>,
}

/// The area a setting belongs to, by its variable's name (the catalogue key of its heading).
fn area_of(variable: &str) -> &'static str {
    let name = variable.strip_prefix("SKILL_RUNNER_").unwrap_or(variable);
    let has = |parts: &[&str]| parts.iter().any(|p| name.contains(p));
    if name.starts_with("OPENSKILL_") {
        "settings.area.invoke"
    } else if has(&["LOG", "OTEL_", "RUST_"]) && !has(&["MAX_LOG"]) {
        "settings.area.logs"
    } else if has(&[
        "SANDBOX",
        "EGRESS",
        "WEBHOOK",
        "NAMESPACES",
        "CHILD_ENV",
        "DOC_ROOTS",
    ]) {
        "settings.area.sandbox"
    } else if has(&["PACKAGE", "RUN_SKILLS"]) {
        "settings.area.packages"
    } else if has(&["QUEUE", "CONCURRENT", "TENANT_"]) {
        "settings.area.queue"
    } else if has(&[
        "RUN_",
        "ENGINE_LIMITS",
        "HARD_TIMEOUT",
        "KILL_GRACE",
        "SERVE_MAX",
        "DISK_",
    ]) {
        "settings.area.limits"
    } else if has(&["RETENTION", "INTERVAL", "WAIT", "NODE_TIMEOUT", "HEARTBEAT"]) {
        "settings.area.timers"
    } else if has(&[
        "AUTH",
        "TOKENS",
        "ALLOWED_HOSTS",
        "CONNECTIONS",
        "STREAMS",
        "BODY_",
        "HEADER_",
        "LEGACY_API",
    ]) {
        "settings.area.access"
    } else if has(&[
        "AGENT",
        "NPM",
        "ENGINE",
        "OAUTH",
        "ISSUER",
        "_API_KEY",
        "_BASE_URL",
        "_MODEL",
    ]) {
        "settings.area.engines"
    } else {
        "settings.area.service"
    }
}

/// `settings` by area, areas in the order their first setting comes.
fn by_area(settings: &[Effective]) -> Vec<Area<'_>> {
    let mut areas: Vec<Area<'_>> = Vec::new();
    for s in settings {
        let key = area_of(&s.variable);
        let shown = Shown {
            s,
            help: skill_runner_web::markdown::to_html(&s.help),
        };
        match areas.iter_mut().find(|a| a.key == key) {
            Some(area) => area.settings.push(shown),
            None => areas.push(Area {
                key,
                settings: vec![shown],
            }),
        }
    }
    areas
}

#[derive(Template)]
#[template(path = "settings.html")]
struct SettingsPage<'a> {
    l: Lang,
    section: &'static str,
    areas: Vec<Area<'a>>,
    /// How many were given (by a variable or a flag) rather than left to their default.
    given: usize,
    level: String,
    confirmation: &'static str,
    error: Option<String>,
    done: Option<ResetDone>,
    status: u16,
}

#[derive(Template)]
#[template(path = "partials/log_level.html")]
struct LogLevel {
    l: Lang,
    level: String,
    error: Option<String>,
}

/// One record as the viewer shows it.
struct Record {
    ts: String,
    level: String,
    raw: String,
}

#[derive(Template)]
#[template(path = "partials/log_records.html")]
struct LogRecords {
    l: Lang,
    records: Vec<Record>,
    total: usize,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "partials/reset_result.html")]
struct ResetResult {
    l: Lang,
    done: Option<ResetDone>,
    error: Option<String>,
    status: u16,
}

/// The level in force, as the reference names it (or the filter).
fn level_now(state: &AppState) -> String {
    let settings = system_admin::settings(state);
    settings.logging["server_level"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

impl SettingsPage<'_> {
    fn source(&self, source: &Source) -> &str {
        self.l.tr(match source {
            Source::Flag => "settings.flag",
            Source::Environment => "settings.environment",
            Source::Default => "settings.default",
            Source::Derived => "settings.derived",
            Source::Unset => "settings.unset",
        })
    }
}

/// `GET /ui/settings`.
pub async fn page(l: Lang, State(state): State<AppState>) -> Page {
    let settings = &state.config.effective;
    render(&SettingsPage {
        l,
        section: "settings",
        areas: by_area(settings),
        given: settings
            .iter()
            .filter(|s| matches!(s.source, Source::Flag | Source::Environment))
            .count(),
        level: level_now(&state),
        confirmation: RESET_CONFIRMATION,
        error: None,
        done: None,
        status: 200,
    })
}

/// The log level form: a level, or a filter that beats it.
#[derive(Debug, Deserialize)]
pub struct LevelForm {
    level: String,
    #[serde(default)]
    filter: String,
}

/// `POST /ui/settings/log-level`.
pub async fn set_level(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Form(form): Form<LevelForm>,
) -> Page {
    let asked = match form.filter.trim() {
        "" => form.level,
        filter => filter.to_owned(),
    };
    let error = system_admin::change_log_level(&state, &caller, &json!({"level": asked}))
        .await
        .err()
        .map(|e| e.into_message().1);
    render(&LogLevel {
        l,
        level: level_now(&state),
        error,
    })
}

/// The log viewer's form.
#[derive(Debug, Deserialize)]
pub struct LogsForm {
    #[serde(default)]
    q: String,
    #[serde(default)]
    level: String,
}

/// `GET /ui/settings/logs`: the latest matching records, oldest first.
pub async fn logs(l: Lang, Query(form): Query<LogsForm>) -> Page {
    let query = |cursor, limit| LogQuery {
        source: None,
        cursor,
        limit: Some(limit),
        q: Some(form.q.clone()),
        level: Some(form.level.clone()),
        from_ts: None,
        to_ts: None,
        run_id: None,
        request_id: None,
    };
    let page = system_admin::log_page(query(0, 1)).and_then(|first| {
        let from = first.total_matched.saturating_sub(SHOWN_RECORDS);
        system_admin::log_page(query(from, SHOWN_RECORDS))
    });
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let fragment = match page {
        Ok(page) => LogRecords {
            l,
            total: page.total_matched,
            records: page
                .items
                .iter()
                .map(|r| Record {
                    ts: text(&r["ts"]),
                    level: text(&r["level"]),
                    raw: text(&r["raw"]),
                })
                .collect(),
            error: None,
        },
        Err(e) => LogRecords {
            l,
            total: 0,
            records: Vec::new(),
            error: Some(e.into_message().1),
        },
    };
    render(&fragment)
}

/// The reset form.
#[derive(Debug, Deserialize)]
pub struct ResetForm {
    confirmation: String,
    #[serde(default)]
    include_logs: Option<String>,
    dry_run: String,
}

/// `POST /ui/settings/reset`: counts (`dry_run`) or deletes every run, once the confirmation is
/// typed; a refusal says why in place of the counts.
pub async fn reset(
    l: Lang,
    State(state): State<AppState>,
    Acting(caller): Acting,
    Form(form): Form<ResetForm>,
) -> Page {
    let request = ResetRequest {
        confirmation: form.confirmation,
        include_logs: form.include_logs.is_some(),
        dry_run: form.dry_run != "false",
        include_engine_catalog: false,
        include_engine_auth_sessions: false,
    };
    let fragment = match system_admin::reset(&state, &caller, request).await {
        Ok(done) => ResetResult {
            l,
            done: Some(done),
            error: None,
            status: 200,
        },
        Err(e) => {
            let (status, message) = e.into_message();
            ResetResult {
                l,
                done: None,
                error: Some(message),
                status: status.as_u16(),
            }
        }
    };
    render(&fragment)
}
