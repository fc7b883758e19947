//! The runners that leave this process: programs (`cli:python`, `cli:exec`) under the job
//! core's supervisor, installed packages through the runner core, and remote `http` skills.
//!
//! `cli:*` and `http` skills answer under the contract of the user's documents: the last JSON
//! object printed (or the response body); an object with a boolean `success` is a Normalized
//! Skill Result and is unwrapped (its `error.code` kept when it is one of ours), any other
//! object is the data. No JSON at all is `INTERNAL` with a preview of what came instead.
//! Installed packages answer exactly as in a job run ([`crate::runner`]), so both give the
//! same data.

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::result::{ErrorCode, Output, SkillError};
use crate::engines::answer::{self, Reported};
use crate::engines::{EngineAdapter, Turn};
use crate::process::{Completed, Confinement, Exit, ProcessSpec, Supervisor, Windows};
use crate::run_folder::RunFolder;
use crate::runner::{self, Outcome};
use crate::skill::{ExecutionMode, SkillManifest};

/// Most bytes a skill may print on stdout (or answer over HTTP).
pub const MAX_OUTPUT: u64 = 10 * 1024 * 1024;
/// How much of stderr an error carries in debug mode.
const STDERR_TAIL: u64 = 4 * 1024;
/// Characters of unreadable output quoted in an error.
const PREVIEW_CHARS: usize = 200;

/// A call's own scratch folder (`<data>/invocations/<id>`), laid out as a run folder (the
/// program works in its workspace), removed when dropped unless kept for debugging.
#[derive(Debug)]
pub struct Scratch {
    pub id: String,
    pub folder: RunFolder,
    keep: bool,
}

impl Scratch {
    pub async fn create(parent: &Path, keep: bool) -> Result<Self, SkillError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let folder = RunFolder::new(parent.join(&id));
        folder
            .create(None)
            .await
            .map_err(|e| SkillError::internal(format!("cannot create the call folder: {e}")))?;
        Ok(Self { id, folder, keep })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let dir = self.folder.root().to_path_buf();
            // Off the async threads; a failure leaves a folder that the next start removes.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || std::fs::remove_dir_all(dir))),
                Err(_) => drop(std::fs::remove_dir_all(dir)),
            }
        }
    }
}

/// What a program run needs besides its command.
#[derive(Debug)]
pub struct ProgramCall<'a> {
    pub supervisor: &'a Supervisor,
    pub deadline: Instant,
    pub timeout: Duration,
    pub cancel: &'a CancellationToken,
    /// Adds the stderr tail to errors.
    pub debug: bool,
}

/// `cli:python` / `cli:exec`: `{"input": ...}` on stdin, started in the call's workspace with
/// `OPENSKILL_ALLOWED_ROOT`, `OPENSKILL_SKILL_ID` and `OPENSKILL_TRACE_ID` set, confined to the
/// workspace plus `confine` (the allowed root, the entry file).
pub async fn cli(
    call: &ProgramCall<'_>,
    scratch: &Scratch,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    confine: Confinement,
    input: &Value,
) -> Result<Output, SkillError> {
    let mut spec = scratch.folder.process(argv, env, confine.readable);
    if let Some(own) = spec.confine.as_mut() {
        own.writable.extend(confine.writable);
    }
    spec.stdin = Some(serde_json::to_vec(&json!({ "input": input })).expect("input serialises"));
    spec.output_limit = Some(MAX_OUTPUT);
    let completed = run_program(call, spec).await?;
    interpret(call, completed)
}

/// An installed package: one auto turn of `adapter` in the call's folder, through the runner
/// core that job runs use.
pub async fn package(
    call: &ProgramCall<'_>,
    scratch: &Scratch,
    adapter: &dyn EngineAdapter,
    skill: &SkillManifest,
    input: &Value,
    parameter: &Value,
) -> Result<Output, SkillError> {
    let turn = Turn {
        preamble: None,
        // `:invoke` gives no MCP servers (a package that requires some is refused).
        mcp: &[],
        model_calls: None,
        skill,
        extra_skills: &[],
        output_schema: None,
        feedback: false,
        repair: None,
        request_id: &scratch.id,
        folder: &scratch.folder,
        input,
        parameter,
        execution_mode: ExecutionMode::Auto,
        number: 1,
        reply: None,
        history: &[],
        session: None,
        model: None,
        effort: None,
        provider: None,
    };
    let plan = runner::Plan {
        notes: Vec::new(),
        repair_rounds: runner::REPAIR_ROUNDS,
        env: None,
        bound: Vec::new(),
        adapter,
        turn: &turn,
        supervisor: call.supervisor,
        deadline: call.deadline,
        cancel: call.cancel,
        on_output: None,
        output_limit: Some(runner::OutputLimit {
            bytes: MAX_OUTPUT,
            raise: "An invoke call's output is bounded; write large results to files.",
        }),
    };
    let outcome = runner::run(plan, &runner::Unobserved)
        .await
        .map_err(|e| SkillError::internal(format!("{e:#}")))?;
    let with_stderr = |e: SkillError, stderr: Option<String>| match stderr {
        Some(stderr) if call.debug => {
            let mut details = e.details.clone().unwrap_or_else(|| json!({}));
            details["stderr"] = json!(stderr);
            e.with_details(details)
        }
        _ => e,
    };
    match outcome {
        Outcome::Succeeded(envelope) => Ok(envelope.data.unwrap_or(Value::Null).into()),
        Outcome::Failed {
            message, stderr, ..
        } => Err(with_stderr(SkillError::internal(message), stderr)),
        Outcome::Reported {
            reported, stderr, ..
        } => Err(with_stderr(reported_error(reported), Some(stderr))),
        Outcome::TimedOut { stderr, .. } => Err(with_stderr(timed_out(call.timeout), Some(stderr))),
        Outcome::Interrupted { .. } => Err(SkillError::internal("the call was abandoned")),
        Outcome::Asked { .. } => Err(SkillError::internal(
            "the skill asked its user a question; invoke calls are not interactive",
        )),
        Outcome::Unrecorded(e) => Err(SkillError::internal(format!("{e:#}"))),
    }
}

async fn run_program(call: &ProgramCall<'_>, spec: ProcessSpec) -> Result<Completed, SkillError> {
    let program = spec.argv.first().cloned().unwrap_or_default();
    let running = call
        .supervisor
        .spawn(spec, None)
        .await
        .map_err(|e| SkillError::internal(format!("cannot start '{program}': {e}")))?;
    let windows = Windows {
        stdout: MAX_OUTPUT,
        stderr: STDERR_TAIL,
    };
    Ok(running.complete(call.deadline, call.cancel, windows).await)
}

/// A finished program's answer.
fn interpret(call: &ProgramCall<'_>, done: Completed) -> Result<Output, SkillError> {
    let with_stderr = |e: SkillError| {
        if !call.debug {
            return e;
        }
        let mut details = e.details.clone().unwrap_or_else(|| json!({}));
        details["stderr"] = json!(done.stderr);
        e.with_details(details)
    };
    let code = match done.exit {
        Exit::TimedOut => return Err(with_stderr(timed_out(call.timeout))),
        Exit::TooMuchOutput => {
            return Err(with_stderr(SkillError::internal(format!(
                "the skill printed more than {MAX_OUTPUT} bytes"
            ))));
        }
        Exit::Canceled => return Err(SkillError::internal("the call was abandoned")),
        Exit::LogUnwritable { .. } => return Err(SkillError::internal(done.exit.describe())),
        Exit::OverLimit(hit) => {
            // The invoke contract's codes are fixed: the limit's own code goes in the details.
            let error = SkillError::internal(hit.to_string())
                .with_details(json!({"resource": hit.resource.code(), "limit": hit.limit}));
            return Err(with_stderr(error));
        }
        Exit::Exited { code, .. } => code,
    };
    // Scripts of the user's documents report failures as JSON on stderr with stdout empty.
    let answer = answer::last_object(&done.stdout).or_else(|| {
        done.stdout
            .trim()
            .is_empty()
            .then(|| answer::last_object(&done.stderr))
            .flatten()
    });
    let unreadable = |what: String| {
        let shown = if done.stdout.trim().is_empty() {
            &done.stderr
        } else {
            &done.stdout
        };
        with_stderr(SkillError::internal(what).with_details(json!({
            "exit_code": code,
            "output_preview": preview(shown),
        })))
    };
    match answer {
        Some(answer) => match read_answer(answer) {
            Ok(_) if code != Some(0) => Err(unreadable(format!(
                "the skill printed a result but {}",
                exit_text(code)
            ))),
            outcome => outcome.map_err(with_stderr),
        },
        None => Err(unreadable(format!(
            "the skill printed no JSON object ({})",
            exit_text(code)
        ))),
    }
}

fn exit_text(code: Option<i32>) -> String {
    match code {
        Some(n) => format!("exit code {n}"),
        None => "killed by a signal".into(),
    }
}

pub fn timed_out(timeout: Duration) -> SkillError {
    let ms = timeout.as_millis() as u64;
    SkillError::new(
        ErrorCode::Timeout,
        format!("the skill did not finish within {ms} ms"),
    )
    .with_details(json!({"timeout_ms": ms}))
}

fn preview(text: &str) -> String {
    text.trim().chars().take(PREVIEW_CHARS).collect()
}

/// An answer object → the call's outcome (see the module notes).
fn read_answer(mut answer: Map<String, Value>) -> Result<Output, SkillError> {
    match answer.get("success") {
        Some(Value::Bool(true)) => Ok(Output {
            truncated: answer
                .get("meta")
                .and_then(|m| m.get("truncated"))
                .and_then(Value::as_bool),
            data: answer.remove("data").unwrap_or(Value::Null),
        }),
        Some(Value::Bool(false)) => {
            let error = answer.get("error").filter(|e| !e.is_null());
            Err(reported_error(answer::reported(
                error.or(answer.get("message")),
            )))
        }
        _ => Ok(Value::Object(answer).into()),
    }
}

/// A skill's own error: our codes pass through, others become `INTERNAL` with the original
/// code in `details.skill_code`.
fn reported_error(reported: Reported) -> SkillError {
    let known = reported.code.as_deref().and_then(ErrorCode::parse);
    let mut error = SkillError::new(known.unwrap_or(ErrorCode::Internal), reported.message);
    error.details = reported.details;
    if let (None, Some(code)) = (known, reported.code) {
        let mut details = error.details.take().unwrap_or_else(|| json!({}));
        if !details.is_object() {
            details = json!({"details": details});
        }
        details["skill_code"] = json!(code);
        error.details = Some(details);
    }
    error
}

/// `http`: POSTs `{"input": ...}` with `X-Trace-Id`; the response body is the answer.
pub async fn http(
    client: &reqwest::Client,
    url: &str,
    input: &Value,
    trace_id: &str,
    timeout: Duration,
) -> Result<Output, SkillError> {
    let request = async {
        let mut response = client
            .post(url)
            .header("x-trace-id", trace_id)
            .json(&json!({ "input": input }))
            .send()
            .await?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() as u64 + chunk.len() as u64 > MAX_OUTPUT {
                return Ok((status, None));
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, reqwest::Error>((status, Some(body)))
    };
    let (status, body) = match tokio::time::timeout(timeout, request).await {
        Err(_) => return Err(timed_out(timeout)),
        Ok(Err(e)) => {
            tracing::warn!(url, error = %e, "an HTTP skill cannot be reached");
            return Err(SkillError::internal(
                "the skill's HTTP endpoint cannot be reached",
            ));
        }
        Ok(Ok(answer)) => answer,
    };
    let Some(body) = body else {
        return Err(SkillError::internal(format!(
            "the skill's HTTP response is larger than {MAX_OUTPUT} bytes"
        )));
    };
    let text = String::from_utf8_lossy(&body);
    let unreadable = |what: String| {
        SkillError::internal(what).with_details(json!({
            "status": status.as_u16(),
            "output_preview": preview(&text),
        }))
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(answer)) => match read_answer(answer) {
            Ok(_) if !status.is_success() => {
                Err(unreadable(format!("{url} answered HTTP {status}")))
            }
            outcome => outcome,
        },
        _ if !status.is_success() => Err(unreadable(format!("{url} answered HTTP {status}"))),
        _ => Err(unreadable(format!("{url} did not answer a JSON object"))),
    }
}
