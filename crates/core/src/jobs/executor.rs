//! Executing one run: from `queued` through its engine turn to a validated result.
//!
//! The run ends through one guarded transition out of `running`; whoever wins it (this
//! executor, a cancel, or shutdown) writes the result. A process that prints valid output after
//! it was canceled or timed out therefore changes nothing.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};
use skill_runner_types::run_options::RuntimeOptions;
use skill_runner_types::run_state::Move;
use tokio_util::sync::CancellationToken;

use super::{Jobs, Slot, validation};
use crate::engines::Turn;
use crate::engines::answer::RepairLevel;
use crate::process::OnOutput;
use crate::run_folder::{RunFolder, write_atomic_blocking};
use crate::runner::{self, Envelope, Observer, Outcome};
use crate::skill::{Rules, SkillManifest, manifest};
use crate::store::{
    Ended, Ending, ProcessMark, RepairRound, RequestKind, Run, RunStatus, UploadState,
};

/// Pauses between attempts to record a run's start or end.
const STORE_RETRIES: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(2),
];

/// Error codes of the reference.
pub mod codes {
    pub const TIMEOUT: &str = "TIMEOUT";
    pub const CANCELED_BY_USER: &str = "CANCELED_BY_USER";
    pub const RESTART_INTERRUPTED: &str = "ORCHESTRATOR_RESTART_INTERRUPTED";
    /// The request's secrets were no longer kept when its turn was to start.
    pub const RUNTIME_ENV_SECRET_MISSING: &str = "RUNTIME_ENV_SECRET_MISSING";
    /// An interactive turn at the skill's `max_attempt` asked again.
    pub const INTERACTIVE_MAX_ATTEMPT_EXCEEDED: &str = "INTERACTIVE_MAX_ATTEMPT_EXCEEDED";
    /// The workspace a run was to start from was gone by its first turn.
    pub const WORKSPACE_SOURCE_MISSING: &str = "WORKSPACE_SOURCE_MISSING";
    /// The upload lacks a required file input.
    pub const UPLOAD_INPUT_MISSING: &str = "UPLOAD_INPUT_MISSING";
    /// The job's provider was removed before its turn.
    pub const PROVIDER_NOT_FOUND: &str = "PROVIDER_NOT_FOUND";
    pub const INTERACTION_WAIT_TIMEOUT: &str = "INTERACTION_WAIT_TIMEOUT";
    pub const SESSION_RESUME_FAILED: &str = "SESSION_RESUME_FAILED";
    pub use crate::runner::MODEL_ENDPOINT_ERROR;
    /// Nobody logged the run's engine in within `SKILL_RUNNER_AUTH_WAIT_SECONDS`.
    pub const AUTH_WAIT_TIMEOUT: &str = "AUTH_WAIT_TIMEOUT";
    /// The service failed while executing the run (a store write, a file); the turn's
    /// processes were killed.
    pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
    /// The node running the turn stopped answering (or lost its heartbeat) and the turn was
    /// ended; another node may run the run's later turns.
    pub const NODE_LOST: &str = "NODE_LOST";
}

/// A turn's envelope as the result file and the run's ending (`result/result.json`,
/// `GET .../result`).
impl Envelope {
    fn to_value(&self, status: RunStatus, error: Option<Value>) -> Value {
        let status = match status {
            RunStatus::Succeeded => "success",
            other => other.as_str(),
        };
        json!({
            "status": status,
            "data": self.data,
            "artifacts": self.artifacts,
            "repair_level": self.repair_level.unwrap_or(RepairLevel::None),
            "validation_warnings": self.warnings,
            "warnings": self.notices,
            "error": error,
        })
    }

    /// The run's warnings: the answer's, then the service's notices.
    fn all_warnings(self) -> Vec<String> {
        self.warnings.into_iter().chain(self.notices).collect()
    }

    /// A failed ending that keeps what the run produced.
    pub fn failed(self, code: Option<&str>, message: String, stderr: Option<String>) -> Ending {
        let error = json!({"code": code, "message": message, "stderr": stderr,
                           "hint": code.and_then(crate::hints::for_code)});
        Ending {
            status: RunStatus::Failed,
            result: Some(self.to_value(RunStatus::Failed, Some(error))),
            error_code: code.map(str::to_owned),
            error_message: Some(message),
            warnings: self.all_warnings(),
        }
    }

    fn succeeded(self) -> Ending {
        Ending {
            status: RunStatus::Succeeded,
            result: Some(self.to_value(RunStatus::Succeeded, None)),
            error_code: None,
            error_message: None,
            warnings: self.all_warnings(),
        }
    }

    /// The ending of a run canceled by its user.
    pub fn canceled(self) -> Ending {
        let message = "Canceled by user request";
        let error = json!({"code": codes::CANCELED_BY_USER, "message": message, "stderr": null});
        Ending {
            status: RunStatus::Canceled,
            result: Some(self.to_value(RunStatus::Canceled, Some(error))),
            error_code: Some(codes::CANCELED_BY_USER.into()),
            error_message: Some(message.into()),
            warnings: self.all_warnings(),
        }
    }
}

/// How a turn ended.
pub(super) enum TurnEnd {
    /// The run ends.
    Ended(Ending),
    /// The turn failed in a way that may pass: the run is tried again after `failed`.
    Retried {
        ending: Ending,
        failed: crate::store::RetriedAttempt,
    },
    /// The turn asked its user `question`; the run waits for a reply.
    Asked {
        question: Value,
        options: RuntimeOptions,
    },
}

/// A failure without a result file (inputs that never reached the engine).
fn failed_without_result(message: String) -> Ending {
    Ending {
        status: RunStatus::Failed,
        error_code: None,
        error_message: Some(message),
        warnings: vec![],
        result: None,
    }
}

impl Jobs {
    /// Executes a queued run's next turn under the switch `cancel`, holding `slot` until the
    /// turn is over; a run canceled while queued is skipped.
    pub(super) async fn execute(
        self: &Arc<Self>,
        run_id: &str,
        cancel: CancellationToken,
        slot: Slot,
    ) {
        if self.waits_for_login_of(run_id, slot.engine()).await {
            return;
        }
        let sandbox = self.sandbox().as_str();
        let started = retried("start", run_id, &self.disk, || {
            self.store.start_run(run_id, sandbox)
        });
        let run = match started.await {
            Ok(Some(run)) => {
                self.moved_to(&run.request_id, run_id, run.engine, RunStatus::Running);
                run
            }
            Ok(None) => return,
            Err(_) => {
                // Never a run left `queued` in no queue: it fails, or (when even that cannot
                // be recorded) the reconciler queues it again.
                let ending = internal_error("The service could not record the start of the run");
                self.finish(run_id, Move::Abort, None, ending).await;
                return;
            }
        };
        let (engine, began) = (run.engine, std::time::Instant::now());
        let request_id = run.request_id.clone();
        let turn = self.execute_started(run, &cancel, slot).await;
        super::telemetry::turn_took(engine, began.elapsed());
        let ending = match turn {
            Ok(TurnEnd::Ended(ending)) => ending,
            Ok(TurnEnd::Retried { ending, failed }) => match self.retry(run_id, &failed).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::error!(run_id, error = format!("{e:#}"), "cannot record a retry");
                    ending
                }
            },
            Ok(TurnEnd::Asked { question, options }) => {
                return self
                    .wait_for_user(&request_id, run_id, engine, question, &options)
                    .await;
            }
            // A volume that filled up under the run's start (its folder, its inputs) is no
            // internal error: the run says so, and the reserve is given up with its end.
            Err(e) if crate::disk_space::is_storage_full(&e) => {
                tracing::error!(run_id, error = format!("{e:#}"), "the data volume is full");
                Envelope::default().failed(
                    Some(crate::runner::DISK_FULL),
                    "The service's data volume filled up as the run started: it could not \
                     write the run's files. Free space there and run it again"
                        .to_owned(),
                    None,
                )
            }
            Err(e) => {
                tracing::error!(run_id, error = format!("{e:#}"), "run failed internally");
                internal_error(INTERNAL_MESSAGE)
            }
        };
        self.finish(run_id, Move::End, None, ending).await;
    }

    /// Ends a run whose execution panicked.
    pub(super) async fn fail_after_panic(&self, run_id: &str) {
        let ending = internal_error(INTERNAL_MESSAGE);
        self.finish(run_id, Move::End, None, ending).await;
    }

    /// Records `ending` by the move `by` (with `asked`, only while the run still waits on that
    /// question), with the cache entry of a success; the winner writes `result/result.json`
    /// and removes a temporary skill. Returns whether this call ended the run.
    pub(super) async fn finish(
        &self,
        run_id: &str,
        by: Move,
        asked: Option<u32>,
        ending: Ending,
    ) -> bool {
        // A run must not stay `running` with nothing behind it: a failing store gets a few
        // more tries, then the reconciler settles the run.
        if ending.error_code.as_deref() == Some(crate::runner::DISK_FULL) {
            // Room to record this end, and every other run's.
            self.disk.ran_out();
        }
        let recorded = retried("end", run_id, &self.disk, || {
            self.store.finish_run(run_id, by, asked, &ending)
        })
        .await;
        let ended = match recorded {
            Ok(Some(ended)) => ended,
            Ok(None) | Err(_) => return false,
        };
        let failure = ending
            .error_code
            .as_deref()
            .zip(ending.error_message.as_deref())
            .filter(|_| ending.status == RunStatus::Failed);
        self.moved(super::telemetry::Transition {
            request_id: &ended.request_id,
            run_id,
            engine: ended.engine,
            state: ending.status,
            error: failure,
        });
        self.forget_secrets(&ended.request_id).await;
        let code = ending.error_code.as_deref();
        super::telemetry::ended(ended.engine, ending.status, code);
        if let Err(e) = self.after_end(run_id, &ending, &ended).await {
            tracing::error!(
                run_id,
                error = format!("{e:#}"),
                "clean-up after the end of a run failed"
            );
        }
        self.share_settled(run_id, false);
        true
    }

    pub(super) async fn after_end(
        &self,
        run_id: &str,
        ending: &Ending,
        ended: &Ended,
    ) -> anyhow::Result<()> {
        if let Some(result) = &ending.result {
            write_atomic(
                &self.folder(run_id).result_file(),
                &serde_json::to_vec_pretty(result)?,
            )
            .await?;
        }
        if !ended.temp_skill {
            return Ok(());
        }
        let request = self.store.request(&ended.request_id).await?;
        if let Some(request) = request
            && let Some(temp_dir) = &request.temp_dir
            && !request.runtime_options.debug_keep_temp
            // Failing to delete is not the run's failure; retention retries later.
            && let Err(e) = tokio::fs::remove_dir_all(temp_dir).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(run_id, error = %e, "cannot delete the temporary skill");
        }
        Ok(())
    }

    /// The skill a run executes.
    pub(super) async fn skill_for(
        &self,
        run: &Run,
        kind: RequestKind,
    ) -> anyhow::Result<Arc<SkillManifest>> {
        let dir = std::path::PathBuf::from(&run.skill_dir);
        if kind == RequestKind::Job
            && let Some(m) = self
                .installer
                .registry()
                .snapshot()
                .await
                .skills
                .get(&run.skill_id)
                .and_then(|e| e.manifest())
            && m.path == dir
        {
            return Ok(m.clone());
        }
        let rules = match kind {
            RequestKind::Job => Rules::REGISTERED,
            RequestKind::Temp => Rules::TEMPORARY,
        };
        let loaded = tokio::task::spawn_blocking(move || manifest::load(&dir, rules)).await?;
        Ok(Arc::new(loaded.map_err(|e| anyhow::anyhow!("{}", e.0))?))
    }

    /// The required file inputs the run's upload lacks, each named with what the upload held.
    async fn missing_uploads(
        &self,
        skill: &Arc<SkillManifest>,
        request: &crate::store::Request,
        options: &RuntimeOptions,
        folder: &RunFolder,
    ) -> anyhow::Result<Vec<String>> {
        let (skill, input, bound, uploads) = (
            skill.clone(),
            request.input.clone(),
            options.bound_inputs(),
            folder.uploads(),
        );
        let missing = tokio::task::spawn_blocking(move || {
            let held: Vec<String> = skill_runner_skill::walk::files_under(&uploads)
                .unwrap_or_default()
                .into_iter()
                .map(|(rel, _)| rel)
                .collect();
            validation::missing_uploads(&skill, &input, &bound, &uploads, &held)
        })
        .await?;
        Ok(missing.into_iter().map(|m| m.problem).collect())
    }

    /// The other skills a request named, as installed now; why not, when one is gone.
    async fn extra_skills(&self, ids: &[String]) -> Result<Vec<Arc<SkillManifest>>, String> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let snapshot = self.installer.registry().snapshot().await;
        ids.iter()
            .map(|id| {
                snapshot
                    .skills
                    .get(id)
                    .and_then(|entry| entry.manifest())
                    .cloned()
                    .ok_or_else(|| {
                        format!(
                            "Skill '{id}', named by this request's skills, is no longer \
                             installed (or no longer valid): install it again, or create the job \
                             without it"
                        )
                    })
            })
            .collect()
    }

    /// Runs the turn of a started run and tells how it ended.
    async fn execute_started(
        &self,
        run: Run,
        cancel: &CancellationToken,
        slot: Slot,
    ) -> anyhow::Result<TurnEnd> {
        let run_id = run.run_id.as_str();
        let request = self
            .store
            .request(&run.request_id)
            .await?
            .context("request row vanished")?;
        let skill = match self.skill_for(&run, request.kind).await {
            Ok(s) => s,
            Err(e) => {
                return Ok(TurnEnd::Ended(failed_without_result(format!(
                    "Skill '{}' cannot be loaded: {e:#}",
                    run.skill_id
                ))));
            }
        };
        let folder = self.folder(run_id);
        let had_files = run.turn > 1 || request.upload_state == UploadState::Done;
        if had_files && !self.bring_back(run_id).await {
            // Its folder was on a node that is gone, with no copy: the turn starts from an
            // empty folder (with the replies from the store).
            tracing::warn!(run_id, "the turn starts without the run's earlier files");
        }
        let options = &request.runtime_options;
        folder
            .create(Some(serde_json::to_vec_pretty(&json!({
                "request_id": request.request_id,
                "skill_id": run.skill_id,
                "engine": run.engine,
                "model": request.model,
                "input": request.input,
                "parameter": request.parameter,
                "runtime_options": request.runtime_options,
            }))?))
            .await?;

        let secrets = if options.has_secrets() {
            match self.secrets_of(&request.request_id).await? {
                Some(secrets) => secrets,
                None => {
                    return Ok(TurnEnd::Ended(Envelope::default().failed(
                        Some(codes::RUNTIME_ENV_SECRET_MISSING),
                        "The secrets of this request (runtime_options.env, preamble_prompt) are \
                         no longer kept, so its turn cannot run: create the job again"
                            .into(),
                        None,
                    )));
                }
            }
        } else {
            Default::default()
        };
        if run.turn == 1
            && let Some(reuse) = &options.workspace
            && let Err(e) = self.seed_workspace(reuse, &folder).await
        {
            return Ok(TurnEnd::Ended(Envelope::default().failed(
                Some(codes::WORKSPACE_SOURCE_MISSING),
                e.to_string(),
                None,
            )));
        }
        // Only a run that took an upload can lack a file of it: the others make no extra hop.
        if run.turn == 1 && validation::takes_files(&skill, &request.input, &options.bound_inputs())
        {
            let missing = self
                .missing_uploads(&skill, &request, options, &folder)
                .await?;
            if !missing.is_empty() {
                return Ok(TurnEnd::Ended(Envelope::default().failed(
                    Some(codes::UPLOAD_INPUT_MISSING),
                    format!("Input validation failed: {missing:?}"),
                    None,
                )));
            }
        }
        let input = runner::resolved_input(&skill, &request.input, &folder);
        let problems = runner::input_problems(&skill, &input, &request.parameter);
        if !problems.is_empty() {
            return Ok(TurnEnd::Ended(failed_without_result(format!(
                "Input validation failed: {problems:?}"
            ))));
        }

        let engine = run.engine;
        let adapter = self
            .engines
            .get(engine)
            .with_context(|| format!("engine {engine} has no adapter"))?
            .clone();
        let mcp = match self.mcp_servers_for(&skill, engine).await? {
            Ok(servers) => servers,
            Err(why) => {
                return Ok(TurnEnd::Ended(failed_without_result(format!(
                    "MCP servers: {why}"
                ))));
            }
        };
        let bound = match self
            .tenant_secrets
            .bind(&request.tenant_id, run_id, &skill.secrets)
            .await?
        {
            Ok(bound) => bound,
            Err(name) => {
                return Ok(TurnEnd::Ended(Envelope::default().failed(
                    Some(runner::SECRET_NOT_FOUND),
                    format!(
                        "The skill asks for the secret {name} (runner.json secrets), which this \
                         run's tenant has not defined: create it with POST \
                         /v1/management/secrets {{\"name\": \"{name}\", \"value\": ..., \
                         \"hosts\": [...]}}"
                    ),
                    None,
                )));
            }
        };
        // The provider a job named: the operator may have removed it since.
        let provider = match request.engine_options["provider_id"].as_str() {
            None => None,
            Some(id) => match crate::providers::get(&self.store, engine, id).await? {
                Some(provider) => Some(provider),
                None => {
                    return Ok(TurnEnd::Ended(Envelope::default().failed(
                        Some(codes::PROVIDER_NOT_FOUND),
                        format!(
                            "The job names provider '{id}' of engine '{engine}', which no longer \
                             exists: add it again with PUT \
                             /v1/management/engines/{engine}/custom-providers/{id}, or run the \
                             job with another provider_id"
                        ),
                        None,
                    )));
                }
            },
        };
        let extra_skills = match self.extra_skills(&options.skills).await {
            Ok(skills) => skills,
            Err(why) => return Ok(TurnEnd::Ended(failed_without_result(why))),
        };
        let history = if run.interaction_count > 0 {
            self.history(run_id).await?
        } else {
            Vec::new()
        };
        let model_calls = Arc::default();
        let turn = Turn {
            skill: &skill,
            extra_skills: &extra_skills,
            output_schema: options.output_schema.as_ref(),
            feedback: options.collect_skill_run_feedback,
            repair: None,
            request_id: &request.request_id,
            folder: &folder,
            input: &input,
            parameter: &request.parameter,
            execution_mode: options.execution_mode,
            number: run.turn,
            reply: history.last().map(|h| &h["response"]),
            history: &history,
            session: run.engine_session.as_deref(),
            // The model as checked at create (a temporary run's is checked at its upload).
            model: request.engine_options["model"]
                .as_str()
                .or(request.model.as_deref()),
            effort: request.engine_options["model_reasoning_effort"].as_str(),
            provider: provider.as_ref().map(|p| &p.endpoint),
            preamble: secrets.preamble_prompt.as_deref().filter(|_| run.turn == 1),
            mcp: &mcp,
            model_calls: Some(&model_calls),
        };
        // A longer timeout than the operator's is taken, as the reference takes any, and
        // clamped, saying so.
        let cap = self.config.limits.hard_timeout;
        let hard_timeout = options
            .hard_timeout_seconds
            .map_or(cap, std::time::Duration::from_secs)
            .min(cap);
        let notes = options
            .hard_timeout_seconds
            .filter(|asked| *asked > cap.as_secs())
            .map(|asked| {
                format!(
                    "HARD_TIMEOUT_CLAMPED: runtime_options.hard_timeout_seconds is {asked}, above \
                     this service's hard timeout of {} s (SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS); \
                     the turn had {} s",
                    cap.as_secs(),
                    cap.as_secs()
                )
            })
            .into_iter()
            .collect();
        let feeds = self.feeds.clone();
        let id = run_id.to_owned();
        let plan = runner::Plan {
            env: Some(&secrets.env).filter(|env| !env.is_empty()),
            bound,
            notes,
            repair_rounds: options
                .output_repair_rounds
                .unwrap_or(runner::REPAIR_ROUNDS),
            adapter: adapter.as_ref(),
            turn: &turn,
            supervisor: &self.supervisor,
            deadline: tokio::time::Instant::now() + hard_timeout,
            cancel,
            on_output: Some(OnOutput(Arc::new(move || feeds.output(&id)))),
            output_limit: Some(runner::OutputLimit {
                bytes: self.config.limits.max_log_bytes,
                raise: "To raise it, set SKILL_RUNNER_RUN_MAX_LOG_MB.",
            }),
        };
        let observer = RunObserver { jobs: self, run_id };
        let outcome = runner::run(plan, &observer).await;
        drop(slot);
        let end = self.turn_end(outcome?, &run, &skill, options, hard_timeout);
        let failed = super::retries::Failed {
            run: &run,
            policy: options.retry.as_ref(),
            skill_safe: skill.retry_safe,
            answered: model_calls.answered(),
            retry_after: model_calls.retry_after(),
        };
        Ok(match end {
            TurnEnd::Ended(ending) => match failed.retry(&ending) {
                Some(failed) => TurnEnd::Retried { ending, failed },
                None => TurnEnd::Ended(ending),
            },
            other => other,
        })
    }

    /// How a turn's outcome ends it.
    fn turn_end(
        &self,
        outcome: Outcome,
        run: &Run,
        skill: &SkillManifest,
        options: &RuntimeOptions,
        hard_timeout: std::time::Duration,
    ) -> TurnEnd {
        let run_id = run.run_id.as_str();
        match outcome {
            Outcome::Succeeded(envelope) => TurnEnd::Ended(envelope.succeeded()),
            Outcome::Failed {
                envelope,
                code,
                message,
                stderr,
            } => TurnEnd::Ended(envelope.failed(code, message, stderr)),
            Outcome::Reported {
                envelope,
                reported,
                stderr,
            } => TurnEnd::Ended(envelope.failed(None, reported.text(), Some(stderr))),
            Outcome::Asked { question: _ } if skill.max_attempt.is_some_and(|m| run.turn >= m) => {
                TurnEnd::Ended(Envelope::default().failed(
                    Some(codes::INTERACTIVE_MAX_ATTEMPT_EXCEEDED),
                    format!(
                        "The skill allows {} turn(s) (runner.json max_attempt) and turn {} asked \
                         again instead of finishing",
                        skill.max_attempt.unwrap_or_default(),
                        run.turn
                    ),
                    None,
                ))
            }
            Outcome::Asked { question } => TurnEnd::Asked {
                question,
                options: options.clone(),
            },
            Outcome::TimedOut { envelope, stderr } => {
                let secs = hard_timeout.as_secs();
                TurnEnd::Ended(envelope.failed(
                    Some(codes::TIMEOUT),
                    format!("Engine timed out after {secs} s (hard timeout); its process group was killed"),
                    Some(stderr),
                ))
            }
            Outcome::Interrupted { envelope } => self.interrupted(run_id, envelope),
            Outcome::Unrecorded(e) => {
                tracing::error!(
                    run_id,
                    error = format!("{e:#}"),
                    "cannot record a started turn"
                );
                TurnEnd::Ended(internal_error(
                    "The service could not record the started turn; its processes were killed",
                ))
            }
        }
    }

    /// The end after the cancel switch fired and the process is gone: shutdown fails the
    /// run, a user cancel cancels it. Recording it only now means every byte the process wrote
    /// is in the logs before the run's status turns terminal.
    fn interrupted(&self, run_id: &str, envelope: Envelope) -> TurnEnd {
        if self.shutdown.is_cancelled() {
            return TurnEnd::Ended(Envelope::default().failed(
                Some(codes::RESTART_INTERRUPTED),
                "The service stopped while the run was executing".into(),
                None,
            ));
        }
        if self.fenced.lock().expect("fenced lock").remove(run_id) {
            return TurnEnd::Ended(Envelope::default().failed(
                Some(codes::NODE_LOST),
                "This node lost its place among the nodes while the run was executing".into(),
                None,
            ));
        }
        TurnEnd::Ended(envelope.canceled())
    }
}

/// What a job keeps while its turn runs: the process group (for crash recovery) and the
/// engine session (for the next turn to resume).
struct RunObserver<'a> {
    jobs: &'a Jobs,
    run_id: &'a str,
}

impl Observer for RunObserver<'_> {
    async fn started(&self, mark: &ProcessMark) -> anyhow::Result<()> {
        skill_runner_types::faults::check("store-after-spawn")?;
        self.jobs
            .store
            .set_run_process(self.run_id, Some(mark))
            .await
    }

    async fn session(&self, session: &str) -> anyhow::Result<()> {
        self.jobs.store.set_run_session(self.run_id, session).await
    }

    async fn repairing(&self, round: &RepairRound) -> anyhow::Result<()> {
        self.jobs.store.record_repair(self.run_id, round).await
    }
}

/// What a run that failed inside the service says (the cause is in the log only).
const INTERNAL_MESSAGE: &str = "Internal error while executing the run";

/// The ending of a run the service itself failed (`INTERNAL_ERROR`).
pub(super) fn internal_error(message: &str) -> Ending {
    Envelope::default().failed(Some(codes::INTERNAL_ERROR), message.to_owned(), None)
}

/// Runs a store write, trying again after each of [`STORE_RETRIES`] when it fails; `what`
/// (`start`, `end`) names it in the log. A write that found no room gives up the disk reserve
/// before the next try.
async fn retried<T, F>(
    what: &str,
    run_id: &str,
    disk: &crate::disk_space::DiskSpace,
    mut write: impl FnMut() -> F,
) -> anyhow::Result<T>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut pauses = STORE_RETRIES.iter();
    loop {
        match write().await {
            Ok(value) => return Ok(value),
            Err(e) if crate::disk_space::is_storage_full(&e) && !disk.is_full() => {
                disk.ran_out();
            }
            Err(e) => match pauses.next() {
                Some(pause) => {
                    tracing::warn!(
                        run_id,
                        error = format!("{e:#}"),
                        "cannot record the {what} of a run; retrying"
                    );
                    tokio::time::sleep(*pause).await;
                }
                None => {
                    tracing::error!(
                        run_id,
                        error = format!("{e:#}"),
                        "cannot record the {what} of a run"
                    );
                    return Err(e);
                }
            },
        }
    }
}

/// [`write_atomic_blocking`] in one blocking task (rather than a hop to the blocking pool per
/// step).
pub async fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (path, bytes) = (path.to_path_buf(), bytes.to_vec());
    tokio::task::spawn_blocking(move || write_atomic_blocking(&path, &bytes))
        .await
        .map_err(std::io::Error::other)?
}
