//! How a request and its run look through the API: the shapes of the run routes' answers
//! (`/v1/jobs/*`, `/v1/temp-skill-runs/*`, `/v1/management/runs/*`), built from the domain
//! values `jobs` returns.

use serde::Serialize;
use serde_json::{Value, json};
use skill_runner_core::tenants::Caller;

use crate::api::error::ApiError;
use crate::browse::{Preview, TreeEntry};
use crate::clock::Timestamp;
use crate::engines::Engine;
use crate::jobs::cancel::Canceled;
use crate::jobs::create::{Admitted, Arrival, NewJob, NewTempRun, Received};
use crate::jobs::interaction::{Pending, Reply};
use crate::jobs::views::{LogSpan, LogStream, Logs};
use crate::store::{Request, Run, RunStatus};

/// `GET /v1/jobs/{request_id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RequestStatus {
    pub request_id: String,
    pub status: RunStatus,
    pub skill_id: Option<String>,
    pub engine: String,
    /// The run serving this request (shared with earlier requests on a cache hit).
    pub run_id: Option<String>,
    pub cache_hit: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub pending_interaction_id: Option<u64>,
    pub interaction_count: u32,
    pub auto_decision_count: u32,
    pub last_auto_decision_at: Option<Timestamp>,
    /// `none`, `recovered_waiting` or `failed_reconciled`.
    pub recovery_state: String,
    pub recovered_at: Option<Timestamp>,
    pub recovery_reason: Option<String>,
    pub warnings: Vec<String>,
    /// `{code, message, hint}` of a failed or canceled run; `hint` says what to do about the
    /// code (`null` for a skill's own code).
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// How the run's latest turn was confined: `landlock`, `unavailable` (the kernel has no
    /// Landlock) or `off`; `null` before a turn started.
    pub sandbox_status: Option<String>,
    /// The IP address the request came from, as the service saw its connection (a proxy's,
    /// behind one); `null` for requests recorded before it was kept.
    pub client_address: Option<String>,
    /// The model the request named, if any.
    pub model: Option<String>,
    /// `auto` or `interactive`, as requested; the same as `effective_execution_mode` here (a
    /// request for a mode the skill lacks is refused at create).
    pub requested_execution_mode: crate::skill::ExecutionMode,
    pub effective_execution_mode: crate::skill::ExecutionMode,
    /// `multi_turn` for an interactive run, else `single_turn`.
    pub conversation_mode: &'static str,
    /// Whether the runner answers in the user's place when the reply times out.
    pub interactive_auto_reply: bool,
    pub interactive_reply_timeout_sec: u64,
    /// The turn under way or last run (1 for the first); 0 before any. A failed attempt
    /// tried again (`retry`) is a turn too.
    pub current_attempt: u32,
    /// While the run waits to be tried again after a failed attempt: when it may start.
    pub next_attempt_at: Option<Timestamp>,
    /// 1 (first) to 4.
    pub priority: u8,
    /// The run starts no earlier (`run_after` or `delay_seconds` of the create).
    pub run_after: Option<Timestamp>,
    /// The schedule whose tick made the request (or that was triggered), and that tick's time.
    pub schedule_id: Option<String>,
    pub schedule_tick_at: Option<Timestamp>,
    /// The attempts that failed and were tried again (`retry`), in order.
    pub retried_attempts: Vec<RetriedAttemptView>,
}

/// An attempt that failed and was tried again.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RetriedAttemptView {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// `{code, message}` of its failure.
    #[schema(value_type = Object)]
    pub error: Value,
    pub failed_at: Timestamp,
    /// When the next attempt could start, at the earliest.
    pub next_attempt_at: Timestamp,
}

impl From<crate::store::RetriedAttempt> for RetriedAttemptView {
    fn from(a: crate::store::RetriedAttempt) -> Self {
        Self {
            attempt: a.attempt,
            error: json!({"code": a.error_code, "message": a.error_message}),
            failed_at: a.failed_at,
            next_attempt_at: a.next_attempt_at,
        }
    }
}

/// A request's state as the jobs routes show it, given its run (if any).
pub fn request_status(request: Request, run: Option<Run>) -> RequestStatus {
    let failure = |code: &Option<String>, message: &str| {
        let hint = code.as_deref().and_then(crate::hints::for_code);
        json!({"code": code, "message": message, "hint": hint})
    };
    let (status, error) = match (&run, &request.error) {
        (Some(run), _) => (
            run.status,
            run.error_message
                .as_ref()
                .map(|m| failure(&run.error_code, m)),
        ),
        (None, Some(message)) => (
            RunStatus::Failed,
            Some(failure(&request.error_code, message)),
        ),
        // Waiting for its upload: the reference's clients expect `queued`, not 404.
        (None, None) => (RunStatus::Queued, None),
    };
    let options = &request.runtime_options;
    let mode = options.execution_mode;
    RequestStatus {
        model: request.model.clone(),
        requested_execution_mode: mode,
        effective_execution_mode: mode,
        conversation_mode: match mode {
            crate::skill::ExecutionMode::Interactive => "multi_turn",
            crate::skill::ExecutionMode::Auto => "single_turn",
        },
        interactive_auto_reply: !options.interactive_require_user_reply,
        interactive_reply_timeout_sec: options.session_timeout_sec,
        current_attempt: run.as_ref().map_or(0, |r| r.turn),
        next_attempt_at: run
            .as_ref()
            .filter(|r| r.status == RunStatus::Queued && r.retries > 0)
            .and_then(|r| r.not_before),
        priority: options
            .priority
            .unwrap_or(skill_runner_types::priority::DEFAULT),
        run_after: options.run_after,
        schedule_id: options.schedule_id.clone(),
        schedule_tick_at: options.schedule_tick_at,
        retried_attempts: Vec::new(),
        status,
        error,
        skill_id: request.skill_id,
        // A temporary run whose package will choose its engine shows `""`, as it always did.
        engine: request.engine.map_or("", Engine::as_str).to_owned(),
        run_id: request.run_id,
        cache_hit: request.cache_hit,
        created_at: request.created_at,
        updated_at: run.as_ref().map_or(request.updated_at, |r| r.updated_at),
        pending_interaction_id: run.as_ref().and_then(|r| r.pending_interaction_id),
        interaction_count: run.as_ref().map_or(0, |r| r.interaction_count),
        auto_decision_count: run.as_ref().map_or(0, |r| r.auto_decision_count),
        last_auto_decision_at: run.as_ref().and_then(|r| r.last_auto_decision_at),
        recovery_state: run
            .as_ref()
            .map_or_else(|| "none".to_owned(), |r| r.recovery_state.clone()),
        recovered_at: run.as_ref().and_then(|r| r.recovered_at),
        recovery_reason: run.as_ref().and_then(|r| r.recovery_reason.clone()),
        sandbox_status: run.as_ref().and_then(|r| r.sandbox.clone()),
        client_address: request.client_address,
        warnings: run.map(|r| r.warnings).unwrap_or_default(),
        request_id: request.request_id,
    }
}

/// A run as the management routes show it: the request's status plus `poll_logs`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunState {
    #[serde(flatten)]
    pub status: RequestStatus,
    /// True while the run may still produce output (queued or running).
    pub poll_logs: bool,
    /// When the run's first turn started; `null` while it has not.
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// From the start to the end (or to now, while it runs), in milliseconds.
    pub duration_ms: Option<u64>,
}

impl RunState {
    pub fn of(request: Request, run: Run) -> Self {
        let (started_at, finished_at) = (run.started_at, run.finished_at);
        let duration_ms = started_at.map(|start| {
            let end = finished_at.unwrap_or_else(Timestamp::now);
            u64::try_from(end.duration_since(start).as_millis()).unwrap_or(u64::MAX)
        });
        let status = request_status(request, Some(run));
        Self {
            poll_logs: matches!(status.status, RunStatus::Queued | RunStatus::Running),
            status,
            started_at,
            finished_at,
            duration_ms,
        }
    }
}

/// `GET /v1/management/runs/{request_id}/files`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunFiles {
    pub request_id: String,
    pub run_id: String,
    pub entries: Vec<TreeEntry>,
}

/// `GET /v1/management/runs/{request_id}/file`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunFilePreview {
    pub request_id: String,
    pub run_id: String,
    /// The path, normalised.
    pub path: String,
    pub preview: Preview,
}

/// `POST /v1/jobs/{request_id}/cancel`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelResponse {
    pub request_id: String,
    pub run_id: String,
    pub status: RunStatus,
    /// True when this call canceled the run; false when it had already ended.
    pub accepted: bool,
    pub message: String,
}

/// `GET /v1/jobs/{request_id}/logs`: each log's last [`LOG_TAIL_BYTES`](crate::jobs::views::LOG_TAIL_BYTES).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunLogs {
    pub request_id: String,
    pub prompt: String,
    pub stdout: String,
    pub stderr: String,
    /// Which logs were longer than the limit and are cut to their end.
    pub truncated: LogsTruncated,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogsTruncated {
    pub prompt: bool,
    pub stdout: bool,
    pub stderr: bool,
}

impl RunFiles {
    pub fn of(request_id: &str, run: Run, entries: Vec<TreeEntry>) -> Self {
        Self {
            request_id: request_id.to_owned(),
            run_id: run.run_id,
            entries,
        }
    }
}

impl RunFilePreview {
    pub fn of(request_id: &str, (run, path, preview): (Run, String, Preview)) -> Self {
        Self {
            request_id: request_id.to_owned(),
            run_id: run.run_id,
            path,
            preview,
        }
    }
}

impl CancelResponse {
    pub fn of(request_id: &str, canceled: Canceled) -> Self {
        Self {
            request_id: request_id.to_owned(),
            message: if canceled.accepted {
                "Cancel request accepted".into()
            } else {
                format!("The run already ended ({})", canceled.status.as_str())
            },
            run_id: canceled.run_id,
            status: canceled.status,
            accepted: canceled.accepted,
        }
    }
}

impl RunLogs {
    pub fn of(request_id: &str, logs: Logs) -> Self {
        Self {
            request_id: request_id.to_owned(),
            truncated: LogsTruncated {
                prompt: logs.prompt.cut,
                stdout: logs.stdout.cut,
                stderr: logs.stderr.cut,
            },
            prompt: logs.prompt.text,
            stdout: logs.stdout.text,
            stderr: logs.stderr.text,
        }
    }
}

/// `POST .../interaction/reply` body.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct ReplyBody {
    /// The id of the pending question (`pending.interaction_id`).
    pub interaction_id: u64,
    /// The answer: text, or any JSON the question's kind calls for.
    #[schema(value_type = Object)]
    pub response: Value,
    /// Makes retries safe: the same key with the same response is answered like the first
    /// call; with a different response it is refused (409).
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

impl From<ReplyBody> for Reply {
    fn from(body: ReplyBody) -> Self {
        Self {
            interaction_id: body.interaction_id,
            response: body.response,
            idempotency_key: body.idempotency_key,
        }
    }
}

/// Answer to an accepted reply.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplyAccepted {
    pub request_id: String,
    /// `queued`: the next turn waits for a slot.
    pub status: RunStatus,
    pub accepted: bool,
}

/// `GET .../interaction/pending`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PendingInteraction {
    pub request_id: String,
    pub status: RunStatus,
    /// The question waiting for a reply: `{interaction_id, kind, prompt, options, ui_hints,
    /// default_decision_policy, required_fields, context}`; `null` when none waits.
    #[schema(value_type = Option<Object>)]
    pub pending: Option<Value>,
    /// When the wait for a reply times out (`session_timeout_sec` after the question, or
    /// after a restart); `null` unless waiting.
    pub wait_deadline_at: Option<Timestamp>,
}

impl PendingInteraction {
    pub fn of(request_id: &str, pending: Pending) -> Self {
        Self {
            request_id: request_id.to_owned(),
            status: pending.status,
            pending: pending.question,
            wait_deadline_at: pending.wait_deadline,
        }
    }
}

/// The longest `?wait=` of a result or a pending question, in seconds.
pub const WAIT_MAX: u64 = 120;

/// `?wait=` of `GET .../result` and `GET .../interaction/pending`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
pub struct WaitQuery {
    /// Seconds (0–120) to wait for a run still under way (to end, or to ask) before
    /// answering; a run waiting for its user or a login answers at once. Default 0.
    #[serde(default)]
    #[param(value_type = Option<f64>)]
    pub wait: Option<String>,
}

impl WaitQuery {
    /// How long to wait; 422 naming `wait` for a value out of range.
    pub fn wait(&self) -> Result<std::time::Duration, ApiError> {
        match self.wait.as_deref().map(|w| w.trim().parse::<f64>()) {
            None => Ok(std::time::Duration::ZERO),
            Some(Ok(w)) if w.is_finite() && (0.0..=WAIT_MAX as f64).contains(&w) => {
                Ok(std::time::Duration::from_secs_f64(w))
            }
            Some(_) => Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                serde_json::json!([{"loc": ["query", "wait"],
                    "msg": format!("wait must be a number of seconds from 0 to {WAIT_MAX}"),
                    "type": "value_error"}]),
            )),
        }
    }
}

/// `GET .../logs/range` query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct LogRangeQuery {
    /// `stdout`, `stderr` or `prompt`.
    pub stream: LogStreamName,
    /// First byte (default 0).
    #[serde(default)]
    pub byte_from: u64,
    /// End, exclusive; default and at most 1 MiB after `byte_from`.
    pub byte_to: Option<u64>,
}

/// A log's name in `logs/range`.
#[derive(Debug, Clone, Copy, serde::Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogStreamName {
    Stdout,
    Stderr,
    Prompt,
}

impl From<LogStreamName> for LogStream {
    fn from(name: LogStreamName) -> Self {
        match name {
            LogStreamName::Stdout => LogStream::Stdout,
            LogStreamName::Stderr => LogStream::Stderr,
            LogStreamName::Prompt => LogStream::Prompt,
        }
    }
}

/// `GET .../logs/range`: bytes `byte_from..byte_to` of one log, clamped to its `size`;
/// `chunk` is their text (an invalid or cut UTF-8 sequence as U+FFFD).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LogRange {
    pub request_id: String,
    pub stream: LogStreamName,
    pub byte_from: u64,
    pub byte_to: u64,
    /// The log's whole size now.
    pub size: u64,
    pub chunk: String,
}

impl LogRange {
    pub fn of(request_id: &str, stream: LogStreamName, span: LogSpan) -> Self {
        Self {
            request_id: request_id.to_owned(),
            stream,
            byte_from: span.from,
            byte_to: span.to,
            size: span.size,
            chunk: String::from_utf8_lossy(&span.bytes).into_owned(),
        }
    }
}

/// Where a job's skill comes from.
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SkillSource {
    /// An installed skill, named by `skill_id`.
    #[default]
    Installed,
    /// A skill package sent with the upload (`skill_package`), run once and never installed;
    /// `skill_id` stays empty.
    TempUpload,
}

/// `POST /v1/jobs` body (serialized again only to tell one body from another, for an
/// `Idempotency-Key`).
#[derive(Debug, serde::Deserialize, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"skill_id": "hello", "input": {"name": "Ada"}}))]
pub struct CreateJob {
    #[serde(default)]
    pub skill_source: SkillSource,
    /// Required for an installed skill; empty for `temp_upload`.
    #[serde(default)]
    pub skill_id: Option<String>,
    /// Default: `codex`, or `script` for skills with their own entrypoint.
    #[serde(default)]
    pub engine: Option<String>,
    /// Inline inputs (`x-input-source: inline`); file inputs come with the upload.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub input: Value,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameter: Value,
    #[serde(default)]
    pub model: Option<String>,
    /// A provider of the engine (its own or one under
    /// `/v1/management/engines/{engine}/custom-providers`); beats a `<provider>/` in `model`.
    #[serde(default)]
    pub provider_id: Option<String>,
    /// A reasoning effort of the model (`default`: none asked); beats `model@effort`.
    #[serde(default)]
    pub effort: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<crate::api::openapi::RuntimeOptionsBody>)]
    pub runtime_options: Option<Value>,
    /// Other installed skills the run gets beside `skill_id` (at most 8 skills in all); the
    /// agent lists them all and uses those that fit.
    #[serde(default)]
    pub skills: Vec<String>,
    /// How a failure that may pass on a later try is retried: `{"max_attempts": 3,
    /// "initial_delay_seconds": 2, "max_delay_seconds": 300, "jitter": true, "timeouts":
    /// false}` (`runtime_options.retry` also works; this one wins).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub retry: Option<Value>,
    /// 1 (first) to 4; 2 when absent.
    #[serde(default)]
    #[schema(value_type = Option<u8>)]
    pub priority: Option<Value>,
    /// RFC 3339: the run starts no earlier.
    #[serde(default)]
    pub run_after: Option<String>,
    /// Seconds from now the run starts no earlier (instead of `run_after`).
    #[serde(default)]
    #[schema(value_type = Option<f64>)]
    pub delay_seconds: Option<Value>,
    /// An `http(s)` URL told of the run's end, signed as the tenant's webhooks are.
    #[serde(default)]
    pub callback_url: Option<String>,
    /// Fields the service does not know: ignored, as the reference ignores them (its clients
    /// may send more), and named in the answer's `warnings`.
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: std::collections::BTreeMap<String, Value>,
}

/// The fields a create knows, for [`ignored_fields`]'s guesses.
const CREATE_FIELDS: [&str; 15] = [
    "skill_source",
    "skill_id",
    "engine",
    "input",
    "parameter",
    "model",
    "provider_id",
    "effort",
    "runtime_options",
    "skills",
    "retry",
    "priority",
    "run_after",
    "delay_seconds",
    "callback_url",
];

/// A warning for each field of `unknown`, with the known field it most looks like.
pub fn ignored_fields<'a>(unknown: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    unknown
        .into_iter()
        .map(|name| {
            let guess = CREATE_FIELDS
                .iter()
                .map(|known| (strsim::jaro_winkler(name, known), *known))
                .filter(|(score, _)| *score >= 0.85)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map_or_else(String::new, |(_, known)| {
                    format!(" (did you mean '{known}'?)")
                });
            format!("UNKNOWN_FIELD: '{name}' is not a field of this request and was ignored{guess}")
        })
        .collect()
}

impl CreateJob {
    fn arrival(&mut self) -> Arrival {
        Arrival {
            retry: self.retry.take(),
            priority: self.priority.take(),
            run_after: self.run_after.take(),
            delay_seconds: self.delay_seconds.take(),
            callback_url: self.callback_url.take(),
            ..Arrival::default()
        }
    }
}

/// `POST /v1/temp-skill-runs` body: like a job, without skill id and inputs.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct CreateTemp {
    #[serde(default)]
    pub engine: Option<String>,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameter: Value,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<crate::api::openapi::RuntimeOptionsBody>)]
    pub runtime_options: Option<Value>,
}

/// Answer to a create.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Created {
    pub request_id: String,
    pub cache_hit: bool,
    /// `queued` while the request waits for its upload.
    pub status: RunStatus,
    /// What the service ignored in the request (`UNKNOWN_FIELD: …`); absent when nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Answer to an upload.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Uploaded {
    pub request_id: String,
    pub cache_hit: bool,
    pub status: RunStatus,
    pub extracted_files: Vec<String>,
}

/// What `POST /v1/jobs` creates.
pub enum NewRequest {
    Job(NewJob),
    Temp(NewTempRun),
}

impl NewRequest {
    /// The request of body `b` from `client_address`. An installed skill needs its id, a
    /// temporary one must not have one (as the reference answers, 422 naming the field).
    pub fn of(
        mut b: CreateJob,
        client_address: Option<String>,
        caller: Caller,
    ) -> Result<Self, ApiError> {
        let arrival = b.arrival();
        let skill_id = b.skill_id.filter(|id| !id.trim().is_empty());
        match (b.skill_source, skill_id) {
            (SkillSource::TempUpload, _) if !b.skills.is_empty() => Err(ApiError::invalid_field(
                "skills",
                "skills names installed skills for a run of an installed skill; a temporary \
                 skill's run takes none: leave it out, or install the skills",
            )),
            (SkillSource::TempUpload, _) if b.provider_id.is_some() || b.effort.is_some() => {
                Err(ApiError::invalid_field(
                    if b.provider_id.is_some() {
                        "provider_id"
                    } else {
                        "effort"
                    },
                    "a temporary skill's run takes its model as `model` only (an effort as \
                     `model@effort`); provider_id and effort are for runs of installed skills",
                ))
            }
            (SkillSource::Installed, Some(skill_id)) => Ok(Self::Job(NewJob {
                skill_id,
                engine: b.engine,
                input: b.input,
                parameter: b.parameter,
                model: b.model,
                provider_id: b.provider_id,
                effort: b.effort,
                runtime_options: b.runtime_options,
                skills: b.skills,
                arrival,
                request_id: None,
                client_address,
                caller,
            })),
            (SkillSource::Installed, None) => Err(ApiError::invalid_field(
                "skill_id",
                "skill_id is required for an installed skill (or send skill_source \
                 \"temp_upload\" and the package with the upload)",
            )),
            (SkillSource::TempUpload, None) => Ok(Self::Temp(NewTempRun {
                engine: b.engine,
                input: b.input,
                parameter: b.parameter,
                model: b.model,
                runtime_options: b.runtime_options,
                arrival,
                client_address,
                caller,
            })),
            (SkillSource::TempUpload, Some(_)) => Err(ApiError::invalid_field(
                "skill_id",
                "skill_id must be empty for skill_source \"temp_upload\": the skill comes with \
                 the upload (skill_package)",
            )),
        }
    }
}

impl CreateTemp {
    /// The temporary run of this body from `client_address`.
    pub fn into_run(self, client_address: Option<String>, caller: Caller) -> NewTempRun {
        NewTempRun {
            engine: self.engine,
            input: Value::Null,
            parameter: self.parameter,
            model: self.model,
            runtime_options: self.runtime_options,
            arrival: Arrival::default(),
            client_address,
            caller,
        }
    }
}

impl From<Admitted> for Created {
    fn from(a: Admitted) -> Self {
        Self {
            request_id: a.request_id,
            cache_hit: a.cache_hit,
            status: a.status.unwrap_or(RunStatus::Queued),
            warnings: Vec::new(),
        }
    }
}

impl From<Received> for Uploaded {
    fn from(r: Received) -> Self {
        Self {
            request_id: r.request_id,
            cache_hit: r.cache_hit,
            status: r.status,
            extracted_files: r.extracted_files,
        }
    }
}
