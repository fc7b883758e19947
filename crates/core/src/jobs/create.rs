//! Creating requests and receiving their uploads, for `/v1/jobs` and `/v1/temp-skill-runs`.
//!
//! Nothing is recorded until every check passed, and a refused upload leaves the request as it
//! was (a temporary run whose package is invalid is the exception the reference defines: the
//! request ends `failed`). A run is admitted to the queue before its row is written, so the
//! bound holds exactly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use skill_runner_types::clock::Timestamp;
use skill_runner_types::run_options::{RunSecrets, RuntimeOptions};
use uuid::{NoContext, Uuid};

use super::cache::{self, KeyParts};
use super::cluster::Place;
use super::executor::codes;
use super::validation;
use super::{Jobs, Scope};
use crate::engines::Engine;
use crate::error::{Error, Result};
use crate::skill::archive::{self, ArchiveError};
use crate::skill::{ExecutionMode, Rules, SkillEntry, SkillManifest, manifest};
use crate::store::{Binding, NewRequest, NewRun, Request, RequestKind, RunStatus, UploadState};
use crate::tenants::Caller;

/// A job to create: an installed skill with its inputs (checked in the reference's order).
#[derive(Debug, Clone)]
pub struct NewJob {
    pub skill_id: String,
    /// The skill's default engine when `None`.
    pub engine: Option<String>,
    /// Inline inputs; file inputs come with the upload.
    pub input: Value,
    pub parameter: Value,
    pub model: Option<String>,
    /// A provider of the engine ([`crate::providers`]); beats one named in `model`.
    pub provider_id: Option<String>,
    /// A reasoning effort of the model; beats one named in `model` (`model@effort`).
    pub effort: Option<String>,
    /// Checked against the allow-list before anything is recorded.
    pub runtime_options: Option<Value>,
    /// Other installed skills the run gets beside `skill_id`.
    pub skills: Vec<String>,
    pub arrival: Arrival,
    /// The request's id when the caller names it (a schedule's tick: one request per tick,
    /// whichever node makes it); a fresh one otherwise.
    pub request_id: Option<String>,
    /// Where the request came from.
    pub client_address: Option<String>,
    /// Who asked: the request belongs to its tenant.
    pub caller: Caller,
}

/// When, how urgently and how persistently a new run is to run, and where its end is sent:
/// the top-level `retry`, `priority`, `run_after`/`delay_seconds` and `callback_url` of a
/// create (a schedule's tick sets its `schedule_id`).
#[derive(Debug, Clone, Default)]
pub struct Arrival {
    pub retry: Option<Value>,
    pub priority: Option<Value>,
    pub run_after: Option<String>,
    pub delay_seconds: Option<Value>,
    pub callback_url: Option<String>,
    pub schedule_id: Option<String>,
    /// The schedule's tick that made the request.
    pub schedule_tick_at: Option<Timestamp>,
}

/// The longest a run may be put off (`run_after`, `delay_seconds`).
const LONGEST_DELAY: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

impl Arrival {
    /// Checks the fields and keeps them with the request's options; the error names the field.
    fn apply(self, options: &mut RuntimeOptions) -> Result<()> {
        if let Some(raw) = &self.retry {
            options.retry = Some(
                skill_runner_types::retry::RetryPolicy::read(raw, "retry")
                    .map_err(Error::invalid)?,
            );
        }
        if let Some(raw) = &self.priority {
            let priority = raw.as_u64().ok_or_else(|| {
                Error::invalid(format!(
                    "priority must be an integer from 1 (first) to 4, got {raw}"
                ))
            })?;
            options.priority =
                Some(skill_runner_types::priority::check(priority).map_err(Error::invalid)?);
        }
        let run_after = match (&self.run_after, &self.delay_seconds) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "run_after and delay_seconds both say when the run starts: send one of them",
                ));
            }
            (Some(text), None) => Some(Timestamp::parse(text).map_err(|e| {
                Error::invalid(format!(
                    "run_after must be an RFC 3339 time like 2026-12-01T09:30:00Z, got \
                     '{text}' ({e})"
                ))
            })?),
            (None, Some(raw)) => {
                let secs = raw.as_f64().filter(|s| *s >= 0.0).ok_or_else(|| {
                    Error::invalid(format!(
                        "delay_seconds must be a number of seconds (0 or more), got {raw}"
                    ))
                })?;
                Some(Timestamp::after(
                    std::time::Duration::try_from_secs_f64(secs).unwrap_or(LONGEST_DELAY),
                ))
            }
            (None, None) => None,
        };
        if let Some(at) = run_after {
            if at > Timestamp::after(LONGEST_DELAY) {
                return Err(Error::invalid(
                    "run_after (or delay_seconds) is more than a year ahead: use a schedule",
                ));
            }
            options.run_after = Some(at);
        }
        // Checked by `check_callback` (its form and its addresses).
        options.callback_url = self.callback_url;
        options.schedule_id = self.schedule_id;
        options.schedule_tick_at = self.schedule_tick_at;
        Ok(())
    }
}

/// A temporary run to create: like a job without a skill id (the package and the input files
/// come with the upload; inline inputs are checked against the package's schema then).
#[derive(Debug, Clone)]
pub struct NewTempRun {
    pub engine: Option<String>,
    pub input: Value,
    pub parameter: Value,
    pub model: Option<String>,
    pub runtime_options: Option<Value>,
    pub arrival: Arrival,
    /// Where the request came from.
    pub client_address: Option<String>,
    /// Who asked: the request belongs to its tenant.
    pub caller: Caller,
}

/// A recorded request and where it stands.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub request_id: String,
    pub cache_hit: bool,
    /// `None` while the request waits for its upload.
    pub status: Option<RunStatus>,
}

/// An accepted upload: the run it started (or the cached run it was bound to).
#[derive(Debug, Clone)]
pub struct Received {
    pub request_id: String,
    pub cache_hit: bool,
    pub status: RunStatus,
    pub extracted_files: Vec<String>,
}

/// The files of an upload, saved by the HTTP layer.
#[derive(Debug, Default)]
pub struct UploadFiles {
    /// The inputs zip (`file`).
    pub inputs: Option<PathBuf>,
    /// The temporary skill package (`skill_package`).
    pub package: Option<PathBuf>,
}

/// A new request or run id: a UUID whose first bits are the time (version 7), so the rows
/// and index entries of requests and runs made together land on the same few B-tree pages.
/// With random ids (version 4) each create dirtied a page of its own in each index keyed by
/// them: under a flood of creates SQLite's WAL grew about twice as fast, and the checkpoints
/// that copy it back held every write for their syncs far more often.
///
/// A request id is the handle to its run, so the other 74 bits are all random (`NoContext`:
/// the uuid crate's default counter would make ids of the same millisecond follow each
/// other). Ids of one millisecond do not sort among themselves, which costs no locality. The
/// random end is also what tells ids of the same minute apart: the console shows an id's end.
fn new_id() -> String {
    Uuid::new_v7(uuid::Timestamp::now(NoContext)).to_string()
}

fn rejected(e: ArchiveError) -> Error {
    match e {
        ArchiveError::Rejected(m) => Error::invalid(m),
        ArchiveError::Io(e) => Error::Internal(e.into()),
    }
}

impl Jobs {
    /// The engine options a request's model, provider and effort select
    /// ([`validation::model`]). The model list (which may ask the CLI for its version) and
    /// the providers are only looked up when the request names something to check them for.
    async fn engine_options(&self, engine: Engine, ask: validation::ModelAsk<'_>) -> Result<Value> {
        let named = |v: Option<&str>| v.is_some_and(|v| !v.trim().is_empty());
        let list = match named(ask.model) || named(ask.provider_id) {
            true => self.engines.models(engine).await,
            false => None,
        };
        let to_provider = named(ask.provider_id) || ask.model.is_some_and(|m| m.contains('/'));
        let providers = match to_provider && crate::providers::supported(engine) {
            true => crate::providers::all(&self.store, engine).await?,
            false => Vec::new(),
        };
        validation::model(engine, ask, list.as_ref(), &providers)
    }

    /// Checks a request's `callback_url` (see [`crate::webhooks::Webhooks::check_callback`]).
    async fn check_callback(&self, caller: &Caller, options: &RuntimeOptions) -> Result<()> {
        match &options.callback_url {
            Some(url) => self.webhooks.check_callback(&caller.tenant_id, url).await,
            None => Ok(()),
        }
    }

    /// `POST /v1/jobs`.
    pub async fn create_job(self: &Arc<Self>, body: NewJob) -> Result<Admitted> {
        let turn = self.tenant_turn(&body.caller.tenant_id, true).await?;
        let outcome = self.with_room(self.admit_job(body)).await;
        self.admitted(turn, outcome).await
    }

    async fn admit_job(self: &Arc<Self>, body: NewJob) -> Result<Admitted> {
        let skill = match self.installer.skill(&body.skill_id).await {
            Some(SkillEntry::Healthy(m)) => m,
            Some(SkillEntry::Degraded { error, .. }) => {
                return Err(Error::not_found(format!(
                    "Skill '{}' is installed but invalid: {error}",
                    body.skill_id
                )));
            }
            None => {
                return Err(Error::not_found(format!(
                    "Skill not found: '{}'",
                    body.skill_id
                )));
            }
        };
        let engine = validation::engine(&skill, body.engine.as_deref(), &self.engines)?;
        let (mut options, secrets) =
            RuntimeOptions::parse_request(body.runtime_options.as_ref()).map_err(Error::invalid)?;
        body.arrival.apply(&mut options)?;
        self.check_callback(&body.caller, &options).await?;
        validation::execution_mode(&skill, &options)?;
        validation::output_schema(&skill, &options)?;
        options.skills = self.run_skills(&skill, engine, &body.skills).await?;
        self.check_mcp(&skill, engine).await?;
        let ask = validation::ModelAsk {
            model: body.model.as_deref(),
            provider_id: body.provider_id.as_deref(),
            effort: body.effort.as_deref(),
        };
        let engine_options = self.engine_options(engine, ask).await?;
        validation::engine_ready(
            engine,
            &self.engines,
            self.waits_for_login(),
            engine_options.get("provider_id").is_some(),
        )?;
        let bound = self.check_reuse(&skill, &options, &body.input).await?;
        validation::inline_input(&skill, &body.input, &bound)?;
        validation::named_files(&skill, &body.input)?;
        validation::parameter(&skill, &body.parameter)?;

        let request = NewRequest {
            request_id: body.request_id.unwrap_or_else(new_id),
            kind: RequestKind::Job,
            skill_id: Some(skill.id.clone()),
            engine: Some(engine),
            model: body.model,
            engine_options,
            input: normalise_object(body.input),
            parameter: normalise_object(body.parameter),
            runtime_options: options,
            client_address: body.client_address,
            tenant_id: body.caller.tenant_id.to_string(),
            key_id: body.caller.key_id.as_deref().map(str::to_owned),
        };
        let request_id = request.request_id.clone();
        let kept = self.kept(&request_id, &secrets).await?;
        let recorded = self.record_job(&skill, request, &bound).await;
        if recorded.is_err() && kept {
            self.forget_secrets(&request_id).await;
        }
        recorded
    }

    /// The other skills a request names (`skills`), each once: installed and valid, runnable
    /// on `engine`, at most [`validation::MAX_RUN_SKILLS`] with the main one, and no larger
    /// together than `SKILL_RUNNER_RUN_SKILLS_MAX_BYTES`.
    async fn run_skills(
        &self,
        main: &Arc<SkillManifest>,
        engine: Engine,
        named: &[String],
    ) -> Result<Vec<String>> {
        let mut ids: Vec<String> = Vec::new();
        for id in named {
            if id != &main.id && !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        let mut skills = vec![main.clone()];
        for id in &ids {
            match self.installer.skill(id).await {
                Some(SkillEntry::Healthy(m)) => skills.push(m),
                Some(SkillEntry::Degraded { error, .. }) => {
                    return Err(Error::not_found(format!(
                        "Skill '{id}' (named in skills) is installed but invalid: {error}"
                    )));
                }
                None => {
                    return Err(Error::not_found(format!(
                        "Skill not found: '{id}' (named in skills)"
                    )));
                }
            }
        }
        validation::run_skills(&skills, engine, self.config.limits.run_skills_max_bytes)?;
        Ok(ids)
    }

    /// Refuses a skill whose required MCP servers its run on `engine` could not get.
    pub(super) async fn check_mcp(&self, skill: &SkillManifest, engine: Engine) -> Result<()> {
        if skill.mcp_required_servers.is_empty() {
            return Ok(());
        }
        match self.mcp_servers_for(skill, engine).await? {
            Ok(_) => Ok(()),
            Err(why) => Err(Error::invalid(serde_json::json!({
                "code": "MCP_SERVER_UNAVAILABLE",
                "message": format!("Skill '{}': {why}", skill.id),
            }))),
        }
    }

    /// The MCP servers a turn of `skill` on `engine` gets, or why it cannot get them.
    pub(super) async fn mcp_servers_for(
        &self,
        skill: &SkillManifest,
        engine: Engine,
    ) -> Result<std::result::Result<Vec<crate::engines::mcp::TurnServer>, String>> {
        if engine == Engine::Script {
            return Ok(Ok(Vec::new()));
        }
        crate::mcp_registry::McpRegistry::new(self.store.clone())
            .for_turn(skill, engine)
            .await
    }

    /// Keeps a new request's secrets, if it has any; says whether it did.
    async fn kept(&self, request_id: &str, secrets: &RunSecrets) -> Result<bool> {
        if secrets.is_empty() {
            return Ok(false);
        }
        self.keep_secrets(request_id, secrets).await?;
        Ok(true)
    }

    /// Records a validated job request, bound to a run unless it waits for its upload (a file
    /// input in `bound` comes from a reused workspace instead).
    async fn record_job(
        self: &Arc<Self>,
        skill: &SkillManifest,
        request: NewRequest,
        bound: &[String],
    ) -> Result<Admitted> {
        let request_id = request.request_id.clone();
        if validation::takes_files(skill, &request.input, bound) {
            self.store.create_request(&request, None).await?;
            return Ok(Admitted {
                request_id,
                cache_hit: false,
                status: None,
            });
        }
        let cache_key = self
            .cache_key(RequestKind::Job, skill, &request, None)
            .await?;
        let (binding, admission) = self.bind(skill, &request, cache_key).await?;
        self.store.create_request(&request, Some(&binding)).await?;
        Ok(self.bound(request_id, binding, admission).await)
    }

    /// `POST /v1/temp-skill-runs`: records the request; the skill arrives with the upload.
    pub async fn create_temp(self: &Arc<Self>, body: NewTempRun) -> Result<Admitted> {
        let turn = self.tenant_turn(&body.caller.tenant_id, true).await?;
        let outcome = self.with_room(self.admit_temp(body)).await;
        self.admitted(turn, outcome).await
    }

    async fn admit_temp(self: &Arc<Self>, body: NewTempRun) -> Result<Admitted> {
        let (mut options, secrets) =
            RuntimeOptions::parse_request(body.runtime_options.as_ref()).map_err(Error::invalid)?;
        body.arrival.apply(&mut options)?;
        self.check_callback(&body.caller, &options).await?;
        if options.workspace.is_some() {
            return Err(Error::invalid(
                "runtime_options.workspace: a temporary skill's run starts in a fresh workspace \
                 (reuse is for installed skills)",
            ));
        }
        let engine = match body
            .engine
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            None => None,
            Some(name) => Some(Engine::parse(name).ok_or_else(|| {
                Error::invalid(format!(
                    "Unknown engine '{name}'; known engines: {}",
                    Engine::ALL.map(Engine::as_str).join(", ")
                ))
            })?),
        };
        for (field, value) in [("input", &body.input), ("parameter", &body.parameter)] {
            if !matches!(value, Value::Null | Value::Object(_)) {
                return Err(Error::invalid(format!("{field} must be an object")));
            }
        }
        let request = NewRequest {
            request_id: new_id(),
            kind: RequestKind::Temp,
            skill_id: None,
            // Chosen against the skill at upload when omitted.
            engine,
            model: body.model,
            engine_options: Value::Object(Default::default()),
            input: normalise_object(body.input),
            parameter: normalise_object(body.parameter),
            runtime_options: options,
            client_address: body.client_address,
            tenant_id: body.caller.tenant_id.to_string(),
            key_id: body.caller.key_id.as_deref().map(str::to_owned),
        };
        let kept = self.kept(&request.request_id, &secrets).await?;
        if let Err(e) = self.store.create_request(&request, None).await {
            if kept {
                self.forget_secrets(&request.request_id).await;
            }
            return Err(e.into());
        }
        Ok(Admitted {
            request_id: request.request_id,
            cache_hit: false,
            status: None,
        })
    }

    /// Where the HTTP layer saves an upload's files before [`Jobs::accept_upload`].
    pub fn upload_dir(&self, kind: RequestKind, request_id: &str) -> PathBuf {
        match kind {
            RequestKind::Job => self.config.data.requests().join(request_id),
            RequestKind::Temp => self.config.data.temp_runs().join(request_id),
        }
    }

    /// Takes the request's only upload; 404 for unknown requests (or ones `scope` does not
    /// see), 409 when it already has one.
    pub async fn claim_upload(&self, scope: &Scope, request_id: &str) -> Result<Request> {
        let request = self.request_in(scope, request_id).await?;
        if !self.store.claim_upload(request_id).await? {
            // A request created with nothing to upload never had a slot to take.
            if request.upload_state == UploadState::None {
                return Err(Error::conflict(
                    "This request takes no upload: its skill has no file inputs, so its run \
                     started when it was created. Send inline values in the create's input",
                ));
            }
            return Err(Error::conflict(
                "Run already started: this request already received its upload",
            ));
        }
        Ok(request)
    }

    /// Gives the upload slot back after the HTTP layer failed to save the files.
    pub async fn release_upload(&self, request: &Request) {
        let dir = self.upload_dir(request.kind, &request.request_id);
        let _ = tokio::fs::remove_dir_all(&dir).await;
        if let Err(e) = self.store.release_upload(&request.request_id).await {
            tracing::error!(error = format!("{e:#}"), "cannot release an upload claim");
        }
    }

    /// Validates a claimed upload and starts (or cache-binds) its run. On refusal the claim
    /// is released, except for an invalid temporary package, which fails the request.
    pub async fn accept_upload(
        self: &Arc<Self>,
        request: Request,
        files: UploadFiles,
    ) -> Result<Received> {
        if !self.disk.accepting() {
            self.release_upload(&request).await;
            return Err(Error::StorageFull);
        }
        // The run it queues counts against the tenant's max_queued.
        let _turn = match self.tenant_turn(&request.tenant_id, false).await {
            Ok(turn) => turn,
            Err(e) => {
                self.release_upload(&request).await;
                return Err(e);
            }
        };
        let outcome = self.try_accept_upload(&request, files).await;
        if let Err(Refusal::Retry(e) | Refusal::Fail(e)) = &outcome
            && self.ran_out(e)
        {
            self.release_upload(&request).await;
            return Err(Error::StorageFull);
        }
        match &outcome {
            Ok(_) => {}
            Err(Refusal::Fail(refused)) if refused.message().is_some() => {
                // A structured detail keeps its code apart from its human message.
                let message = refused.message().unwrap_or_default();
                let code = refused.code();
                let dir = self.upload_dir(request.kind, &request.request_id);
                let _ = tokio::fs::remove_dir_all(&dir).await;
                self.store
                    .fail_upload(&request.request_id, code, &message)
                    .await?;
            }
            Err(_) => self.release_upload(&request).await,
        }
        outcome.map_err(Refusal::into_error)
    }

    async fn try_accept_upload(
        self: &Arc<Self>,
        request: &Request,
        files: UploadFiles,
    ) -> Result<Received, Refusal> {
        let dir = self.upload_dir(request.kind, &request.request_id);
        let (skill, engine) = match request.kind {
            RequestKind::Job => {
                let id = request.skill_id.clone().unwrap_or_default();
                let skill = self
                    .installer
                    .skill(&id)
                    .await
                    .as_ref()
                    .and_then(SkillEntry::manifest)
                    .cloned()
                    .ok_or_else(|| {
                        Refusal::Retry(Error::not_found(format!(
                            "Skill '{id}' of this request is no longer installed"
                        )))
                    })?;
                let engine = request.engine.unwrap_or(Engine::Script);
                (skill, engine)
            }
            RequestKind::Temp => {
                let package = files.package.clone().ok_or_else(|| {
                    Refusal::Retry(Error::Missing {
                        location: "body",
                        field: "skill_package",
                    })
                })?;
                self.temp_skill(request, &package, &dir).await?
            }
        };

        let uploads = dir.join("uploads");
        let _ = tokio::fs::remove_dir_all(&uploads).await;
        let extracted = match &files.inputs {
            Some(zip) => {
                let (zip, dest, limits) =
                    (zip.clone(), uploads.clone(), self.config.package_limits);
                tokio::task::spawn_blocking(move || archive::extract_upload(&zip, &dest, &limits))
                    .await
                    .map_err(|e| Refusal::Retry(Error::Internal(e.into())))?
                    .map_err(|e| Refusal::Retry(rejected(e)))?
            }
            None => Vec::new(),
        };
        // A file the request named by its path and the zip lacks is refused now, naming it
        // (the request waits for a proper upload); one expected under its input's name fails
        // the run, as in the reference.
        let bound = request.runtime_options.bound_inputs();
        let refused: Vec<String> =
            validation::missing_uploads(&skill, &request.input, &bound, &uploads, &extracted)
                .into_iter()
                .filter(|missing| missing.declared)
                .map(|missing| missing.problem)
                .collect();
        if !refused.is_empty() {
            let _ = tokio::fs::remove_dir_all(&uploads).await;
            return Err(Refusal::Retry(Error::invalid(serde_json::json!({
                "code": codes::UPLOAD_INPUT_MISSING,
                "message": format!("The upload lacks required input files: {}", refused.join("; ")),
            }))));
        }

        let new_request = NewRequest {
            request_id: request.request_id.clone(),
            kind: request.kind,
            skill_id: Some(skill.id.clone()),
            engine: Some(engine),
            model: request.model.clone(),
            engine_options: request.engine_options.clone(),
            input: request.input.clone(),
            parameter: request.parameter.clone(),
            runtime_options: request.runtime_options.clone(),
            client_address: request.client_address.clone(),
            tenant_id: request.tenant_id.clone(),
            key_id: request.key_id.clone(),
        };
        let cache_key = self
            .cache_key(request.kind, &skill, &new_request, Some(&uploads))
            .await
            .map_err(Refusal::Retry)?;
        let (binding, admission) = self
            .bind(&skill, &new_request, cache_key)
            .await
            .map_err(Refusal::Retry)?;
        let mut anywhere = false;
        if let Binding::Run(run) = &binding {
            let folder = self.folder(&run.run_id);
            tokio::fs::create_dir_all(folder.workspace())
                .await
                .map_err(retry_io)?;
            if !extracted.is_empty() || uploads.exists() {
                tokio::fs::rename(&uploads, folder.uploads())
                    .await
                    .map_err(retry_io)?;
            }
            // Among nodes with shared storage, a job's uploads go there and the run may run
            // on any node (a temporary skill stays on this one, with the run, and so do
            // secrets, which never leave the node that received them).
            if request.kind == RequestKind::Job && !request.runtime_options.has_secrets() {
                anywhere = self.hand_over(&run.run_id).await;
            }
        }
        let temp = (request.kind == RequestKind::Temp)
            .then(|| (skill.id.clone(), dir.to_string_lossy().into_owned()));
        let completed = self
            .store
            .complete_upload(
                &request.request_id,
                &binding,
                temp.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                anywhere,
            )
            .await;
        if let Err(e) = completed {
            // Not recorded (among nodes, a queue that filled meanwhile): the folder made for
            // the run goes, and the client sends its upload again.
            if let Binding::Run(run) = &binding {
                let _ = tokio::fs::remove_dir_all(self.folder(&run.run_id).root()).await;
                self.forget_copy(&run.run_id).await;
            }
            return Err(Refusal::Retry(e.into()));
        }
        if request.kind == RequestKind::Job {
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
        let created = self
            .bound(request.request_id.clone(), binding, admission)
            .await;
        Ok(Received {
            request_id: created.request_id,
            cache_hit: created.cache_hit,
            status: created.status.unwrap_or(RunStatus::Queued),
            extracted_files: extracted,
        })
    }

    /// Extracts and validates a temporary package and checks the request against it.
    async fn temp_skill(
        &self,
        request: &Request,
        package: &Path,
        dir: &Path,
    ) -> Result<(Arc<SkillManifest>, Engine), Refusal> {
        let (package, dest, limits) = (package.to_path_buf(), dir.join("skill"), {
            let mut l = self.config.package_limits;
            l.max_compressed_bytes = self.config.limits.temp_package_max_bytes;
            l
        });
        let _ = tokio::fs::remove_dir_all(&dest).await;
        let loaded = tokio::task::spawn_blocking(move || {
            let top = archive::extract_package(&package, &dest, &limits)?;
            manifest::load(&top, Rules::TEMPORARY)
                .map_err(|e| ArchiveError::Rejected(format!("invalid skill package: {}", e.0)))
        })
        .await
        .map_err(|e| Refusal::Retry(Error::Internal(e.into())))?;
        let skill = Arc::new(loaded.map_err(|e| Refusal::Fail(rejected(e)))?);
        let requested = request.engine.map(Engine::as_str);
        let engine = validation::engine(&skill, requested, &self.engines).map_err(Refusal::Fail)?;
        validation::execution_mode(&skill, &request.runtime_options).map_err(Refusal::Fail)?;
        self.check_mcp(&skill, engine)
            .await
            .map_err(Refusal::Fail)?;
        let ask = validation::ModelAsk {
            model: request.model.as_deref(),
            ..Default::default()
        };
        let options = self
            .engine_options(engine, ask)
            .await
            .map_err(Refusal::Fail)?;
        validation::engine_ready(
            engine,
            &self.engines,
            self.waits_for_login(),
            options.get("provider_id").is_some(),
        )
        .map_err(Refusal::Fail)?;
        validation::inline_input(&skill, &request.input, &[]).map_err(Refusal::Fail)?;
        validation::named_files(&skill, &request.input).map_err(Refusal::Fail)?;
        validation::output_schema(&skill, &request.runtime_options).map_err(Refusal::Fail)?;
        // The parameter is checked when the run starts (a failed run naming every problem).
        Ok((skill, engine))
    }

    /// The cache key of a request, `None` when its run must not be cached (temporary skills,
    /// interactive runs, runs given secrets, another workspace, an output schema, other skills
    /// or a feedback note to write: the runtime options the key leaves out).
    async fn cache_key(
        self: &Arc<Self>,
        kind: RequestKind,
        skill: &SkillManifest,
        request: &NewRequest,
        uploads: Option<&Path>,
    ) -> Result<Option<String>> {
        let options = &request.runtime_options;
        if kind == RequestKind::Temp
            || options.execution_mode == ExecutionMode::Interactive
            || options.has_secrets()
            || options.workspace.is_some()
            || options.output_schema.is_some()
            || !options.skills.is_empty()
            || options.collect_skill_run_feedback
        {
            return Ok(None);
        }
        // Without an upload, a skill whose files are as they were hashed needs no blocking
        // task: most creates take this way.
        let kept = match uploads {
            None => self.fingerprints.kept(&skill.path),
            Some(_) => None,
        };
        let (fingerprint, files) = match kept {
            Some(fingerprint) => (fingerprint, Vec::new()),
            None => {
                let skill_dir = skill.path.clone();
                let uploads = uploads.map(Path::to_path_buf);
                let jobs = self.clone();
                tokio::task::spawn_blocking(move || {
                    let files = match uploads {
                        Some(dir) if dir.exists() => cache::file_manifest(&dir)?,
                        _ => Vec::new(),
                    };
                    Ok::<_, std::io::Error>((jobs.fingerprints.of(&skill_dir)?, files))
                })
                .await
                .map_err(|e| Error::Internal(e.into()))??
            }
        };
        Ok(Some(cache::key(&KeyParts {
            tenant_id: &request.tenant_id,
            skill_id: &skill.id,
            engine: request.engine.map_or("", Engine::as_str),
            skill_fingerprint: &fingerprint,
            parameter: &request.parameter,
            engine_options: &request.engine_options,
            input: &request.input,
            files: &files,
        })))
    }

    /// A cache hit, or a fresh run with its place in the queue (429 when full).
    async fn bind(
        &self,
        skill: &SkillManifest,
        request: &NewRequest,
        cache_key: Option<String>,
    ) -> Result<(Binding, Option<Place>)> {
        if let Some(key) = &cache_key
            && !request.runtime_options.no_cache
            && let Some(run_id) = self.store.cached_run(key).await?
        {
            return Ok((Binding::CacheHit(run_id), None));
        }
        let admission = self.admit().await?;
        let options = &request.runtime_options;
        let run = NewRun {
            run_id: new_id(),
            tenant_id: request.tenant_id.clone(),
            skill_id: skill.id.clone(),
            skill_dir: skill.path.to_string_lossy().into_owned(),
            engine: request.engine.unwrap_or(Engine::Script),
            cache_key,
            priority: options
                .priority
                .unwrap_or(skill_runner_types::priority::DEFAULT),
            not_before: options.run_after,
            schedule_id: options.schedule_id.clone(),
            callback_url: options.callback_url.clone(),
        };
        Ok((Binding::Run(run), Some(admission)))
    }

    /// Queues a recorded run and says what the client sees.
    async fn bound(
        &self,
        request_id: String,
        binding: Binding,
        admission: Option<Place>,
    ) -> Admitted {
        match (binding, admission) {
            (Binding::Run(run), Some(admission)) => {
                // Told before it is handed on: the log shows `queued` before `running`.
                self.moved_to(&request_id, &run.run_id, run.engine, RunStatus::Queued);
                self.enqueue(admission, (&run).into()).await;
                Admitted {
                    request_id,
                    cache_hit: false,
                    status: Some(RunStatus::Queued),
                }
            }
            _ => {
                metrics::counter!(super::telemetry::CACHE_HITS).increment(1);
                Admitted {
                    request_id,
                    cache_hit: true,
                    status: Some(RunStatus::Succeeded),
                }
            }
        }
    }

    /// The request, if it exists and `scope` may see it.
    pub async fn request_in(&self, scope: &Scope, request_id: &str) -> Result<Request> {
        match self.store.request(request_id).await? {
            Some(r) if scope.admits(&r) => Ok(r),
            _ => Err(Error::not_found("Request not found")),
        }
    }
}

/// Why an upload was refused, and what happens to the request.
enum Refusal {
    /// The request keeps waiting for a corrected upload.
    Retry(Error),
    /// The request ends `failed` (an invalid temporary package).
    Fail(Error),
}

impl Refusal {
    fn into_error(self) -> Error {
        match self {
            Self::Retry(e) | Self::Fail(e) => e,
        }
    }
}

impl Jobs {
    /// `admit` when the data volume has room: refused ([`Error::StorageFull`]) while it is
    /// full, and a failure for want of space puts the service in that state.
    async fn with_room<T>(&self, admit: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        if !self.disk.accepting() {
            return Err(Error::StorageFull);
        }
        admit.await.map_err(|e| match self.ran_out(&e) {
            true => Error::StorageFull,
            false => e,
        })
    }

    /// `Ok` while the data volume has room for new work (a create, a reply, an install), else
    /// [`Error::StorageFull`]: refused before anything is stored, so nothing is half taken.
    pub fn has_room(&self) -> Result<()> {
        match self.disk.accepting() {
            true => Ok(()),
            false => Err(Error::StorageFull),
        }
    }

    /// Whether the data volume is full (the readiness check's `storage: full`).
    pub fn storage_full(&self) -> bool {
        self.has_room().is_err()
    }

    /// Whether `e` is a write that found no room; then the disk reserve is given up.
    pub(super) fn ran_out(&self, e: &Error) -> bool {
        let full = match e {
            Error::StorageFull => true,
            Error::Internal(cause) => crate::disk_space::is_storage_full(cause),
            _ => false,
        };
        if full {
            self.disk.ran_out();
        }
        full
    }
}

fn retry_io(e: std::io::Error) -> Refusal {
    Refusal::Retry(e.into())
}

fn normalise_object(v: Value) -> Value {
    match v {
        Value::Null => Value::Object(Default::default()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids made one after another start with the time they were made (what keeps a group of
    /// creates on a few index pages), and ids made together differ in their last characters
    /// (what the console shows and searches).
    #[test]
    fn ids_follow_the_time_they_were_made_and_differ_at_their_end() {
        let ids: Vec<String> = (0..2000).map(|_| new_id()).collect();
        // The first 48 bits (12 hex digits) are the millisecond.
        let times: Vec<&str> = ids.iter().map(|id| &id[..13]).collect();
        assert!(times.is_sorted(), "{times:?}");
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
        assert!(ids.iter().all(|id| Uuid::parse_str(id).is_ok()));

        // What the console shows of an id: made in the same millisecond or not, the ends differ.
        let ends: std::collections::HashSet<&str> = ids.iter().map(|id| &id[28..]).collect();
        assert!(ends.len() > 1990, "{} distinct ends of 2000", ends.len());
    }
}
