//! The invoke host: `POST /skills/{id}:invoke` runs a skill and answers its Normalized Skill
//! Result in the same response (the synchronous half of the user's documents).
//!
//! - [`catalog`]: which skills exist and how each runs.
//! - [`runners`]: programs (under the job core's supervisor) and remote HTTP skills.
//! - [`builtin`]: the four in-process skills; [`paths`]: their path policy.
//! - [`result`]: the result envelope, error codes and trace ids; [`route`]: the routing helper.

pub mod builtin;
pub mod catalog;
pub mod paths;
pub mod result;
pub mod route;
pub mod runners;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::InvokeConfig;
use crate::engines::{Engine, Engines};
use crate::process::Confinement;
use crate::process::Supervisor;
use crate::skill::schema::Schema;
use crate::skill::{Registry, SkillManifest, manifest};
use builtin::Ctx;
use catalog::{Catalogs, InvocableSkill, Runner};
use paths::AllowedRoot;
use result::{ErrorCode, Meta, Output, SkillError, SkillResult};
use runners::{ProgramCall, Scratch};

/// SIGTERM to SIGKILL for a skill program: a caller is waiting for the answer.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// Runs invoke calls; one per service.
#[derive(Debug)]
pub struct Host {
    catalogs: Catalogs,
    engines: Engines,
    root: AllowedRoot,
    supervisor: Supervisor,
    http: reqwest::Client,
    scratch_dir: PathBuf,
    debug: bool,
    /// Programs running at once.
    processes: tokio::sync::Semaphore,
}

impl Host {
    /// Loads the catalog; clears call folders a previous process left behind in `scratch_dir`.
    pub async fn new(
        config: &InvokeConfig,
        scratch_dir: PathBuf,
        registry: Arc<Registry>,
        engines: Engines,
        supervisor: &Supervisor,
    ) -> anyhow::Result<Self> {
        if !config.debug {
            match tokio::fs::remove_dir_all(&scratch_dir).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(error = %e, "cannot clear old invoke call folders");
                }
                _ => {}
            }
        }
        tokio::fs::create_dir_all(&scratch_dir).await?;
        // rustls needs a process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            catalogs: Catalogs::open(config.clone(), registry).await,
            engines,
            root: AllowedRoot::new(config.allowed_root.clone()),
            supervisor: supervisor.with_grace(KILL_GRACE),
            http: reqwest::Client::builder().build()?,
            scratch_dir,
            debug: config.debug,
            processes: tokio::sync::Semaphore::new(config.max_processes),
        })
    }

    /// The invocable skills as of now.
    pub async fn catalog(&self) -> Arc<catalog::Catalog> {
        self.catalogs.current().await
    }

    /// The `GET /skills` body.
    pub async fn list(&self) -> Bytes {
        self.catalogs.current().await.list_json.clone()
    }

    /// Runs one call. `body` is the parsed request body (or why it could not be parsed);
    /// `cancel` fires when the caller has gone away. Logs one line per call.
    pub async fn invoke(
        &self,
        skill_id: &str,
        body: Result<Value, SkillError>,
        trace_id: String,
        cancel: &CancellationToken,
    ) -> SkillResult {
        let started = std::time::Instant::now();
        let (skill, runner_type, outcome) = self.dispatch(skill_id, body, &trace_id, cancel).await;
        record(
            skill_id,
            trace_id,
            skill.as_deref(),
            runner_type,
            outcome,
            started,
        )
    }

    async fn dispatch(
        &self,
        skill_id: &str,
        body: Result<Value, SkillError>,
        trace_id: &str,
        cancel: &CancellationToken,
    ) -> (
        Option<Arc<InvocableSkill>>,
        Option<String>,
        Result<Output, SkillError>,
    ) {
        if !manifest::is_valid_id(skill_id) {
            let error = SkillError::invalid("skill_id", format!("must be {}", manifest::ID_RULE));
            return (None, None, Err(error));
        }
        let body = match body {
            Ok(body) => body,
            Err(e) => return (None, None, Err(e)),
        };
        let Some(skill) = self.catalogs.current().await.skills.get(skill_id).cloned() else {
            let error =
                SkillError::new(ErrorCode::NotFound, format!("skill '{skill_id}' not found"))
                    .with_details(json!({"skill_id": skill_id}));
            return (None, None, Err(error));
        };
        // A package runs the engine the body names; the runner type says which.
        let engine = match &skill.runner {
            Runner::Package(package) => match self.package_engine(package, &body) {
                Ok(engine) => Some(engine),
                Err(e) => return (Some(skill), None, Err(e)),
            },
            _ => None,
        };
        let runner_type = match engine {
            Some(engine) => format!("engine:{engine}"),
            None => skill.runner.runner_type(),
        };
        let outcome = self.run(&skill, engine, body, trace_id, cancel).await;
        (Some(skill), Some(runner_type), outcome)
    }

    /// The engine a package call runs: `engine` in the body, else the skill's default, as for
    /// a job (it must be one of the skill's engines, with its CLI installed).
    fn package_engine(&self, skill: &SkillManifest, body: &Value) -> Result<Engine, SkillError> {
        let requested = match body.get("engine") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => Some(name.as_str()),
            Some(_) => return Err(SkillError::invalid("engine", "must be a string")),
        };
        // A call waits for its answer, never for a login.
        let refused = |e: crate::error::Error| match e.message() {
            Some(message) => SkillError::invalid("engine", message),
            None => SkillError::internal(format!("{e:#}")),
        };
        let engine =
            crate::jobs::validation::engine(skill, requested, &self.engines).map_err(refused)?;
        crate::jobs::validation::engine_ready(engine, &self.engines, false, false)
            .map_err(refused)?;
        Ok(engine)
    }

    async fn run(
        &self,
        skill: &InvocableSkill,
        engine: Option<Engine>,
        body: Value,
        trace_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Output, SkillError> {
        let Value::Object(mut body) = body else {
            return Err(SkillError::invalid(
                "body",
                "must be a JSON object {\"input\": {...}}",
            ));
        };
        let input = match body.remove("input") {
            Some(input @ Value::Object(_)) => input,
            Some(_) => return Err(SkillError::invalid("input", "must be a JSON object")),
            None => return Err(SkillError::invalid("input", "is required")),
        };
        if let Some(schema) = &skill.input_schema {
            check(schema, &input, ErrorCode::InvalidArgument)?;
        }
        let deadline = tokio::time::Instant::now() + skill.timeout;
        let output = match &skill.runner {
            Runner::Builtin(builtin) => {
                // A manifest may give a built-in a schema of its own; the built-in's still holds.
                let own = builtin.schema();
                if !skill.input_schema.as_ref().is_some_and(|s| s.same_as(own)) {
                    check(own, &input, ErrorCode::InvalidArgument)?;
                }
                self.builtin(*builtin, skill, input, deadline).await
            }
            Runner::Cli { python, entry } => {
                if !tokio::fs::try_exists(entry).await.unwrap_or(false) {
                    tracing::warn!(skill_id = skill.id, entry = %entry.display(), "the entry of an invoke skill is missing");
                    return Err(SkillError::internal(
                        "the skill's program is missing on the server",
                    ));
                }
                // The program runs in its own workspace: its entry is named absolutely.
                let entry = std::path::absolute(entry).map_err(|e| {
                    SkillError::internal(format!("cannot locate the skill's program: {e}"))
                })?;
                let program = entry.to_string_lossy().into_owned();
                let argv = if *python {
                    vec!["python3".into(), program]
                } else {
                    vec![program]
                };
                let env = vec![
                    (
                        "OPENSKILL_ALLOWED_ROOT".into(),
                        skill.allowed_root.to_string_lossy().into_owned(),
                    ),
                    ("OPENSKILL_SKILL_ID".into(), skill.id.clone()),
                    ("OPENSKILL_TRACE_ID".into(), trace_id.to_owned()),
                ];
                let _slot = self.program_slot(skill, deadline).await?;
                let scratch = Scratch::create(&self.scratch_dir, self.debug).await?;
                let call = self.program_call(skill, deadline, cancel);
                let confine = Confinement {
                    writable: vec![skill.allowed_root.clone()],
                    readable: vec![entry.clone()],
                    ..Confinement::default()
                };
                runners::cli(&call, &scratch, argv, env, confine, &input).await
            }
            Runner::Package(manifest) => {
                // Packages take the job's `parameter` too (optional in the body).
                let parameter = match body.remove("parameter") {
                    None | Some(Value::Null) => json!({}),
                    Some(p @ Value::Object(_)) => p,
                    Some(_) => {
                        return Err(SkillError::invalid("parameter", "must be a JSON object"));
                    }
                };
                let problems = manifest
                    .schema_docs
                    .parameter_checker()
                    .problems(&parameter);
                if let Some(first) = problems.first() {
                    return Err(SkillError::invalid("parameter", first.to_string()));
                }
                if !manifest.mcp_required_servers.is_empty() {
                    return Err(SkillError::invalid(
                        "skill",
                        "requires MCP servers (runner.json mcp.required_servers), which :invoke \
                         does not give: run it as a job (POST /v1/jobs)",
                    ));
                }
                let engine = engine.unwrap_or_else(|| manifest.default_engine());
                let _slot = self.program_slot(skill, deadline).await?;
                let scratch = Scratch::create(&self.scratch_dir, self.debug).await?;
                let call = self.program_call(skill, deadline, cancel);
                let adapter = self.engines.get(engine).ok_or_else(|| {
                    SkillError::internal(format!("engine {engine} has no adapter"))
                })?;
                runners::package(
                    &call,
                    &scratch,
                    adapter.as_ref(),
                    manifest,
                    &input,
                    &parameter,
                )
                .await
            }
            Runner::Http { url } => {
                runners::http(&self.http, url, &input, trace_id, skill.timeout).await
            }
            Runner::Unsupported(key) => Err(SkillError::internal(format!(
                "no runner for '{key}' on this server (available: inproc, cli:python, cli:exec, http)"
            ))),
        }?;
        if let Some(schema) = &skill.output_schema {
            check(schema, &output.data, ErrorCode::Internal).map_err(|e| SkillError {
                message: format!(
                    "the skill's output does not match its output_schema: {}",
                    e.message
                ),
                ..e
            })?;
        }
        Ok(output)
    }

    /// A place among the programs running at once (`OPENSKILL_MAX_PROCESSES`); waiting for one
    /// counts against the call's time limit.
    async fn program_slot(
        &self,
        skill: &InvocableSkill,
        deadline: tokio::time::Instant,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, SkillError> {
        match tokio::time::timeout_at(deadline, self.processes.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(SkillError::internal("the service is shutting down")),
            Err(_) => {
                let ms = skill.timeout.as_millis() as u64;
                Err(SkillError::new(
                    ErrorCode::Timeout,
                    format!("no program slot became free within {ms} ms (OPENSKILL_MAX_PROCESSES)"),
                )
                .with_details(json!({"timeout_ms": ms, "reason": "busy"})))
            }
        }
    }

    fn program_call<'a>(
        &'a self,
        skill: &InvocableSkill,
        deadline: tokio::time::Instant,
        cancel: &'a CancellationToken,
    ) -> ProgramCall<'a> {
        ProgramCall {
            supervisor: &self.supervisor,
            deadline,
            timeout: skill.timeout,
            cancel,
            debug: self.debug,
        }
    }

    async fn builtin(
        &self,
        builtin: builtin::Builtin,
        skill: &InvocableSkill,
        input: Value,
        deadline: tokio::time::Instant,
    ) -> Result<Output, SkillError> {
        let root = if skill.allowed_root == self.root.path() {
            self.root.clone()
        } else {
            AllowedRoot::new(skill.allowed_root.clone())
        };
        let std_deadline = deadline.into_std();
        if !builtin.blocking() {
            let ctx = Ctx {
                root: &root,
                deadline: std_deadline,
            };
            return builtin.run(&input, &ctx);
        }
        let task = tokio::task::spawn_blocking(move || {
            let ctx = Ctx {
                root: &root,
                deadline: std_deadline,
            };
            builtin.run(&input, &ctx)
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                tracing::error!(error = %e, skill = builtin.id(), "built-in skill panicked");
                Err(SkillError::internal("the skill failed unexpectedly"))
            }
            // The built-in itself overran its time limit: not a busy service.
            Err(_) => Err(runners::timed_out(skill.timeout)),
        }
    }
}

/// The result of a call that began at `started`, logged as the call's one line.
pub fn record(
    skill_id: &str,
    trace_id: String,
    skill: Option<&InvocableSkill>,
    runner_type: Option<String>,
    outcome: Result<Output, SkillError>,
    started: std::time::Instant,
) -> SkillResult {
    let (data, truncated, error) = match outcome {
        Ok(output) => (Some(output.data), output.truncated, None),
        Err(error) => (None, None, Some(error)),
    };
    let result = SkillResult {
        success: error.is_none(),
        skill_id: skill_id.to_owned(),
        trace_id,
        data,
        error,
        meta: Meta {
            latency_ms: started.elapsed().as_millis() as u64,
            version: skill
                .and_then(|s| s.version.clone())
                .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned()),
            truncated,
            runner_type,
        },
    };
    let error = result.error.as_ref();
    tracing::info!(
        trace_id = result.trace_id,
        skill_id = result.skill_id,
        runner_type = result.meta.runner_type.as_deref().unwrap_or("-"),
        latency_ms = result.meta.latency_ms,
        success = result.success,
        error_code = error.map_or("-", |e| e.code.as_str()),
        error_message = error.map_or("-", |e| e.message.as_str()),
        "invoke"
    );
    result
}

/// Validates `value` against `schema`; the first problem names its field.
fn check(schema: &Schema, value: &Value, code: ErrorCode) -> Result<(), SkillError> {
    let problems = schema.problems(value);
    let Some(first) = problems.first() else {
        return Ok(());
    };
    let message = if first.field.is_empty() {
        first.reason.clone()
    } else {
        format!("{}: {}", first.field, first.reason)
    };
    let errors: Vec<Value> = problems
        .iter()
        .map(|p| json!({"field": p.field, "reason": p.reason}))
        .collect();
    Err(SkillError::new(code, message)
        .with_details(json!({"field": first.field, "reason": first.reason, "errors": errors})))
}
