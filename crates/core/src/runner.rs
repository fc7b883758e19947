//! One turn of a skill, the same for jobs and for `:invoke`: from an engine's prepared
//! invocation to a classified, schema-checked outcome.
//!
//! [`run`] keeps the prompt log, starts the turn (confined, under the supervisor), waits for it
//! within its deadline, reads its answer through the engine's adapter, classifies it (final
//! data, a reported error, a question) and checks the data against the output schema and the
//! required artifacts. It knows no database and no HTTP: what a caller keeps while the turn runs
//! (its process group, the engine's session) goes through an [`Observer`], and the caller
//! phrases and records the [`Outcome`].

use std::future::Future;

use serde_json::{Map, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Timestamp;
use crate::egress::policy::permitted;
use crate::engines::answer::{self, RepairLevel, Reported, TurnOutcome};
use crate::engines::{EngineAdapter, Prepared, Reading, Turn};
use crate::process::{Completed, Exit, OnOutput, Supervisor, Windows};
use crate::run_folder::{RunFolder, is_plain_file};
use crate::skill::schema::Checker;
use crate::skill::{ExecutionMode, InputSource, SkillFormat, SkillManifest};
use crate::store::{ProcessMark, RepairRound};
use skill_runner_skill::walk::files_under;
use skill_runner_types::engine::Engine;

/// The largest stretch of a turn's stdout searched for its answer (the answer comes last).
const ANSWER_WINDOW: u64 = 8 * 1024 * 1024;
/// How much of stderr a failure carries.
const STDERR_TAIL: u64 = 4 * 1024;

/// What a turn produced: the answer's data, the artifacts, how the answer was repaired.
#[derive(Debug, Default)]
pub struct Envelope {
    pub data: Option<Value>,
    pub artifacts: Vec<String>,
    pub repair_level: Option<RepairLevel>,
    /// What checking and repairing the answer found (`validation_warnings`).
    pub warnings: Vec<String>,
    /// What the service says about how the turn ran (an option it clamped): the result's
    /// `warnings`.
    pub notices: Vec<String>,
}

/// How a turn ended.
#[derive(Debug)]
pub enum Outcome {
    /// Final data that matches the output schema, with every required artifact.
    Succeeded(Envelope),
    /// The turn failed: it could not start, exited badly, answered no JSON, or its answer
    /// broke the output schema or lacks an artifact.
    Failed {
        envelope: Envelope,
        /// The engine's own code for the failure, when it said one.
        code: Option<&'static str>,
        message: String,
        /// The end of stderr, when the process ran.
        stderr: Option<String>,
    },
    /// The skill answered with its own error object.
    Reported {
        envelope: Envelope,
        reported: Reported,
        stderr: String,
    },
    /// The turn asked its user a question (interactive mode only).
    Asked { question: Value },
    /// The turn overran its deadline; its whole tree was killed.
    TimedOut { envelope: Envelope, stderr: String },
    /// The cancel switch fired and the process is gone; the caller knows why.
    Interrupted { envelope: Envelope },
    /// The caller's [`Observer::started`] failed; the turn's tree was killed at once.
    Unrecorded(anyhow::Error),
}

/// What a caller keeps while a turn runs.
pub trait Observer: Sync {
    /// The turn's process started (`mark` identifies its group); the turn runs meanwhile. An
    /// error stops its whole tree and ends the turn [`Outcome::Unrecorded`].
    fn started(&self, mark: &ProcessMark) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// The engine session the turn continues in (known before it starts, or reported by it).
    fn session(&self, session: &str) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// A repair round of the turn begins (its process not started yet).
    fn repairing(&self, round: &RepairRound) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// An observer that keeps nothing (an `:invoke` call).
#[derive(Debug)]
pub struct Unobserved;

impl Observer for Unobserved {
    async fn started(&self, _: &ProcessMark) -> anyhow::Result<()> {
        Ok(())
    }

    async fn session(&self, _: &str) -> anyhow::Result<()> {
        Ok(())
    }

    async fn repairing(&self, _: &RepairRound) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Everything one turn needs.
#[derive(Clone)]
pub struct Plan<'a> {
    pub adapter: &'a dyn EngineAdapter,
    pub turn: &'a Turn<'a>,
    pub supervisor: &'a Supervisor,
    pub deadline: Instant,
    pub cancel: &'a CancellationToken,
    /// Called whenever the turn printed something (live event streams).
    pub on_output: Option<OnOutput>,
    /// Most bytes the run's stdout log may hold; `None`: no limit.
    pub output_limit: Option<OutputLimit>,
    /// The client's `env` for the turn, its values masked in the logs.
    pub env: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The skill's secrets ([`crate::secrets::Secrets::bind`]): the turn gets their
    /// placeholders, the egress puts the values in.
    pub bound: Vec<crate::egress::secrets::Bound>,
    /// What the service says about the turn beside its outcome (an option it clamped), added
    /// to the run's warnings.
    pub notes: Vec<String>,
    /// How many repair rounds an unfit answer gets ([`run`]).
    pub repair_rounds: u32,
}

/// Repair rounds an unfit answer gets unless the request says otherwise
/// (`runtime_options.output_repair_rounds`), as in the reference.
pub const REPAIR_ROUNDS: u32 = 3;

/// Warnings of a turn whose answer took repair rounds, as the reference names them.
pub(crate) const REPAIR_CONVERGED: &str = "OUTPUT_SCHEMA_REPAIR_CONVERGED";
pub(crate) const REPAIR_EXHAUSTED: &str = "OUTPUT_SCHEMA_REPAIR_EXHAUSTED";
const REPAIR_SKIPPED: &str = "OUTPUT_SCHEMA_REPAIR_SKIPPED_NO_SESSION_HANDLE";

/// The model endpoint failed the turn's latest model call (see [`blame_endpoint`]).
pub const MODEL_ENDPOINT_ERROR: &str = "MODEL_ENDPOINT_ERROR";

/// The skill asks for a secret its run's tenant has not defined.
pub const SECRET_NOT_FOUND: &str = "SECRET_NOT_FOUND";
/// The skill asks for a secret bound to no host its turns may reach.
pub const SECRET_HOST_NOT_ALLOWED: &str = "SECRET_HOST_NOT_ALLOWED";

/// The failure code of a turn that failed because the data volume filled up under it.
pub const DISK_FULL: &str = "DISK_FULL";
/// The shell could not find a program (exit 127), or the sandbox hides the one on `PATH`.
pub const COMMAND_NOT_FOUND: &str = "COMMAND_NOT_FOUND";
/// The shell found a program it could not start (exit 126).
pub const COMMAND_NOT_EXECUTABLE: &str = "COMMAND_NOT_EXECUTABLE";
/// A skill's own program (a script turn) exited non-zero or was killed by a signal, without
/// saying why in its output.
pub const SKILL_EXITED: &str = "SKILL_EXITED";
/// An agent CLI exited non-zero or was killed by a signal, without saying why in its output.
pub const ENGINE_EXITED: &str = "ENGINE_EXITED";

/// How many of stderr's last lines a failure's message ends with, and at most how many bytes.
const STDERR_LINES: usize = 12;
const STDERR_LINES_BYTES: usize = 2048;

/// The largest artifact searched for a secret's value.
const MASKED_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;

/// The prompt of a repair round: what was wrong with the answer, and what to answer.
fn repair_prompt(turn: &Turn<'_>, problems: &[String], round: u32, rounds: u32) -> String {
    let schema = turn.output_schema.unwrap_or(&turn.skill.schema_docs.output);
    let mut text = format!(
        "Your previous answer did not satisfy the output contract (repair round {round} of \
         {rounds}).\n\nValidation errors:\n"
    );
    for problem in problems {
        text.push_str(&format!("- {problem}\n"));
    }
    text.push_str(&format!(
        "\nReply with exactly one JSON object and nothing else: no explanation, no Markdown \
         fences. It must match this JSON Schema:\n{}",
        serde_json::to_string_pretty(schema).unwrap_or_default()
    ));
    if turn.execution_mode == ExecutionMode::Interactive {
        text.push_str(
            "\nIf you must ask the user instead, reply with the ask_user object described before.",
        );
    }
    text
}

/// A bound on a run's stdout log, and what sets it (for the failure's message).
#[derive(Debug, Clone, Copy)]
pub struct OutputLimit {
    pub bytes: u64,
    /// How an operator raises it.
    pub raise: &'static str,
}

/// Gives the turn its secrets: placeholders, which the egress replaces, where it `held`
/// ([`crate::process::Supervisor::holds_secrets`]); else the values themselves. Longer
/// placeholders go first, so none is replaced inside another (`T` inside `T_2`).
fn bind_secrets(
    spec: &mut crate::process::ProcessSpec,
    skill: &SkillManifest,
    mut bound: Vec<crate::egress::secrets::Bound>,
    values: &[Option<String>],
    held: bool,
) -> Option<Outcome> {
    let unbound = skill
        .secrets
        .iter()
        .find(|n| !bound.iter().any(|b| b.name == **n));
    let gone = bound.iter().zip(values).find(|(_, v)| v.is_none());
    let message = match (unbound, gone) {
        (Some(name), _) => format!(
            "The skill asks for the secret {name} (runner.json secrets), which only a job of a \
             tenant that defined it gets"
        ),
        (None, Some((b, _))) => format!("The secret {} was deleted as the turn started", b.name),
        (None, None) => {
            match spec.confine.as_mut().filter(|_| held) {
                Some(confine) => {
                    for b in &bound {
                        spec.env.push((b.name.clone(), b.placeholder.clone()));
                    }
                    bound.sort_by_key(|b| std::cmp::Reverse(b.placeholder.len()));
                    confine.bound = bound;
                }
                None => {
                    for (b, value) in bound.iter().zip(values.iter().flatten()) {
                        spec.env.push((b.name.clone(), value.clone()));
                    }
                }
            }
            return None;
        }
    };
    Some(Outcome::Failed {
        envelope: Envelope::default(),
        code: Some(SECRET_NOT_FOUND),
        message,
        stderr: None,
    })
}

/// Runs one turn. An answer that is no JSON object or breaks the output schema is repaired, as
/// in the reference: up to [`Plan::repair_rounds`] times the agent is told, in the session it
/// answered in, what was wrong (each round a process of its own, within the turn's
/// deadline). `Err` only when the service itself failed (a log it cannot write, an observer
/// that cannot record a session); the turn's tree is gone by then.
pub async fn run(plan: Plan<'_>, observer: &impl Observer) -> anyhow::Result<Outcome> {
    let rounds = plan.repair_rounds;
    let mut unfit = None;
    let mut outcome = run_once(plan.clone(), observer, &mut unfit).await?;
    let mut note = None;
    for round in 1..=rounds {
        let Some(Unfit { problems, session }) = unfit.take() else {
            if round > 1 && answered(&outcome) {
                note = Some(REPAIR_CONVERGED);
            }
            break;
        };
        let Some(session) = session else {
            // A script has no session to go back to, nor an agent to tell.
            if plan.adapter.cli().is_some() {
                note = Some(REPAIR_SKIPPED);
            }
            break;
        };
        let prompt = repair_prompt(plan.turn, &problems, round, rounds);
        // The unfit answer's output ends where the log ends now: the conversation places the
        // round there.
        let stdout_offset = tokio::fs::metadata(plan.turn.folder.stdout_log())
            .await
            .map_or(0, |m| m.len());
        let record = RepairRound {
            turn: plan.turn.number,
            round,
            rounds,
            stdout_offset,
            problems,
            started_at: Timestamp::now(),
        };
        observer.repairing(&record).await?;
        let turn = Turn {
            session: Some(&session),
            repair: Some(&prompt),
            ..plan.turn.clone()
        };
        let repaired = Plan {
            turn: &turn,
            notes: Vec::new(),
            ..plan.clone()
        };
        outcome = run_once(repaired, observer, &mut unfit).await?;
        if round == rounds {
            note = match &unfit {
                Some(_) => Some(REPAIR_EXHAUSTED),
                None if answered(&outcome) => Some(REPAIR_CONVERGED),
                None => None,
            };
        }
    }
    if let (Some(note), Some(envelope)) = (note, outcome.envelope_mut()) {
        envelope.warnings.push(note.to_owned());
        if note != REPAIR_SKIPPED {
            envelope.notices.extend(plan.notes);
        }
    }
    Ok(blame_endpoint(outcome, plan.turn.model_calls))
}

/// A turn that failed without a code of its own while the model endpoint had failed its
/// latest model call failed because of the endpoint: `MODEL_ENDPOINT_ERROR`, which a later
/// try may pass.
fn blame_endpoint(
    outcome: Outcome,
    calls: Option<&std::sync::Arc<crate::egress::ModelCalls>>,
) -> Outcome {
    match (outcome, calls.and_then(|c| c.failure())) {
        (
            Outcome::Failed {
                envelope,
                code: None,
                message,
                stderr,
            },
            Some(failure),
        ) => Outcome::Failed {
            envelope,
            code: Some(MODEL_ENDPOINT_ERROR),
            message: format!(
                "The model endpoint failed the turn's last model call ({failure}): {message}"
            ),
            stderr,
        },
        (outcome, _) => outcome,
    }
}

/// Whether a repair round got an answer that fits (a result, the skill's own error, or a
/// question).
fn answered(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Succeeded(_) | Outcome::Reported { .. } | Outcome::Asked { .. }
    )
}

impl Outcome {
    /// The envelope the outcome carries, if it has one.
    fn envelope_mut(&mut self) -> Option<&mut Envelope> {
        match self {
            Outcome::Succeeded(envelope)
            | Outcome::Failed { envelope, .. }
            | Outcome::Reported { envelope, .. }
            | Outcome::TimedOut { envelope, .. }
            | Outcome::Interrupted { envelope } => Some(envelope),
            Outcome::Asked { .. } | Outcome::Unrecorded(_) => None,
        }
    }
}

/// Why a turn's answer failed (no JSON object, or one that breaks the output schema), and
/// the session it was given in: what a repair round needs.
struct Unfit {
    problems: Vec<String>,
    session: Option<String>,
}

/// Runs one process of a turn: its first, or a repair round. A turn failed for an unfit answer
/// also says why in `unfit`.
async fn run_once(
    plan: Plan<'_>,
    observer: &impl Observer,
    unfit: &mut Option<Unfit>,
) -> anyhow::Result<Outcome> {
    let turn = plan.turn;
    let folder = turn.folder;
    let Prepared {
        mut spec,
        session,
        login,
        prompt,
    } = match plan.adapter.prepare(turn) {
        Ok(prepared) => prepared,
        Err(e) => return Ok(failed(Envelope::default(), format!("{e:#}"), None)),
    };
    spec.output_limit = plan.output_limit.map(|l| l.bytes);
    if let Some(env) = plan.env {
        // What the service sets for the turn keeps its value.
        let set: std::collections::HashSet<String> =
            spec.env.iter().map(|(k, _)| k.clone()).collect();
        spec.env.extend(
            env.iter()
                .filter(|(k, _)| !set.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    // The client's values and the MCP servers' secrets are masked in what the turn prints.
    // A secret's value as the turn starts, masked in what it prints (defence in depth: a
    // contained turn holds only the placeholder).
    let mut values: Vec<Option<String>> = Vec::new();
    for bound in &plan.bound {
        let value = bound.source.value().await;
        values.push(value.map(|v| secrecy::ExposeSecret::expose_secret(&v).to_owned()));
    }
    let door_key = match spec.confine.as_ref().and_then(|c| c.model_door.as_ref()) {
        Some(door) => door.key.source.value().await,
        None => None,
    };
    let secrets: Vec<&str> = plan
        .env
        .into_iter()
        .flat_map(|env| env.values())
        .chain(turn.mcp.iter().flat_map(|s| s.secret_values()))
        .chain(values.iter().flatten())
        .map(String::as_str)
        .chain(door_key.as_ref().map(secrecy::ExposeSecret::expose_secret))
        .collect();
    if !secrets.is_empty() {
        spec.secrets = crate::process::redact::Secrets::new(secrets);
    }
    let held = plan.supervisor.holds_secrets();
    if let Some(refused) = bind_secrets(&mut spec, turn.skill, plan.bound, &values, held) {
        return Ok(refused);
    }
    if let Some(confine) = spec.confine.as_mut() {
        confine.limits = turn.skill.limits;
        match permitted(&turn.skill.network_allow, plan.supervisor.egress_allow()) {
            Ok(granted) => {
                confine.allow.extend(granted);
                if let Some(lost) = confine
                    .bound
                    .iter()
                    .find(|b| !confine.allow.iter().any(|t| b.goes_to(&t.host, t.port)))
                {
                    return Ok(Outcome::Failed {
                        envelope: Envelope::default(),
                        code: Some(SECRET_HOST_NOT_ALLOWED),
                        message: format!(
                            "The secret {} is bound to hosts its turn may not reach: add one of \
                             them to the skill's runner.json network.allow (and the operator's \
                             SKILL_RUNNER_EGRESS_ALLOW), or bind the secret to a host the skill \
                             declares",
                            lost.name
                        ),
                        stderr: None,
                    });
                }
            }
            Err(refused) => {
                return Ok(Outcome::Failed {
                    envelope: Envelope::default(),
                    code: Some("EGRESS_NOT_PERMITTED"),
                    message: format!(
                        "The skill's runner.json network.allow names {refused}, which the \
                         operator's SKILL_RUNNER_EGRESS_ALLOW does not permit: add it there \
                         (e.g. SKILL_RUNNER_EGRESS_ALLOW={refused}) or remove it from the skill"
                    ),
                    stderr: None,
                });
            }
        }
    }
    let program = spec.argv.first().cloned().unwrap_or_default();
    // A program the sandbox finds elsewhere than PATH does: said, never silent.
    let outside = plan.supervisor.program_outside_sandbox(&spec);
    if let Some(outside) = outside.as_ref().filter(|o| o.runs.is_none()) {
        return Ok(Outcome::Failed {
            envelope: Envelope::default(),
            code: Some(COMMAND_NOT_FOUND),
            message: outside.explain(),
            stderr: None,
        });
    }
    if let Some(outside) = &outside {
        outside_sandbox_once(outside);
    }
    let secrets = spec.secrets.clone();
    if let Some(prompt) = &prompt {
        folder.append_prompt(turn.number, prompt).await?;
    }
    if let Some(session) = &session {
        observer.session(session).await?;
    }
    if plan.cancel.is_cancelled() {
        // Earlier turns' artifacts stay part of what a canceled run produced.
        let envelope = Envelope {
            artifacts: list_artifacts(folder).await?,
            ..Envelope::default()
        };
        return Ok(Outcome::Interrupted { envelope });
    }
    let running = match plan.supervisor.spawn(spec, plan.on_output).await {
        Ok(running) => running,
        Err(e) => {
            let message = format!("Cannot start the engine process '{program}': {e}");
            return Ok(failed(Envelope::default(), message, None));
        }
    };
    let windows = Windows {
        stdout: ANSWER_WINDOW,
        stderr: STDERR_TAIL,
    };
    // The start is recorded while the turn runs (a short turn would otherwise wait for the
    // store); a failure to record it stops the turn's whole tree.
    let mark = running.mark().clone();
    let stop = plan.cancel.child_token();
    let recording = async {
        let recorded = observer.started(&mark).await;
        if recorded.is_err() {
            stop.cancel();
        }
        recorded
    };
    let (recorded, completed) =
        tokio::join!(recording, running.complete(plan.deadline, &stop, windows));
    if let Err(e) = recorded {
        return Ok(Outcome::Unrecorded(e));
    }
    let Completed {
        exit,
        stdout,
        stderr,
    } = completed;
    // The turn is over: a refreshed login goes back to the agent home, the copies away.
    drop(login);
    let artifacts = list_artifacts(folder).await?;
    mask_artifacts(folder, &artifacts, &secrets).await;
    let mut envelope = Envelope {
        artifacts,
        notices: plan.notes,
        ..Envelope::default()
    };
    let reading = plan.adapter.read(&stdout, &stderr);
    if let Some(reported) = &reading.session
        && reading.session.as_deref() != turn.session
    {
        observer.session(reported).await?;
    }
    match exit {
        Exit::Canceled => return Ok(Outcome::Interrupted { envelope }),
        Exit::TimedOut => return Ok(Outcome::TimedOut { envelope, stderr }),
        Exit::OverLimit(hit) => {
            return Ok(Outcome::Failed {
                envelope,
                code: Some(hit.resource.code()),
                message: hit.to_string(),
                stderr: Some(stderr),
            });
        }
        Exit::LogUnwritable { disk_full } => {
            return Ok(Outcome::Failed {
                envelope,
                code: Some(if disk_full {
                    DISK_FULL
                } else {
                    "INTERNAL_ERROR"
                }),
                message: exit.describe(),
                stderr: Some(stderr),
            });
        }
        Exit::Exited { code: Some(c), .. }
            if c != 0 && crate::run_folder::volume_full(folder.root()) =>
        {
            return Ok(Outcome::Failed {
                envelope,
                code: Some(DISK_FULL),
                message: format!(
                    "The turn failed (exit code {c}) while the service's data volume was full: \
                     it could not write its files. Free space there and run it again"
                ),
                stderr: Some(stderr),
            });
        }
        Exit::TooMuchOutput => {
            let limit = plan.output_limit.map_or(0, |l| l.bytes);
            return Ok(Outcome::Failed {
                envelope,
                code: Some("RESOURCE_OUTPUT"),
                message: format!(
                    "The turn printed more than the {} MiB its run's stdout log keeps and was \
                     stopped. {}",
                    limit >> 20,
                    plan.output_limit.map_or("", |l| l.raise)
                ),
                stderr: Some(stderr),
            });
        }
        Exit::Exited { code: Some(0), .. } => {}
        Exit::Exited { code, signal } => {
            return Ok(match reading.failure {
                Some(failure) => Outcome::Failed {
                    envelope,
                    code: failure.code,
                    message: failure.message,
                    stderr: Some(stderr),
                },
                None => match code {
                    Some(c @ (126 | 127)) => Outcome::Failed {
                        code: Some(if c == 127 {
                            COMMAND_NOT_FOUND
                        } else {
                            COMMAND_NOT_EXECUTABLE
                        }),
                        message: not_started(&program, c, &stderr),
                        envelope,
                        stderr: Some(stderr),
                    },
                    _ => Outcome::Failed {
                        code: Some(if plan.adapter.engine() == Engine::Script {
                            SKILL_EXITED
                        } else {
                            ENGINE_EXITED
                        }),
                        message: exited(&program, code, signal, &stderr),
                        envelope,
                        stderr: Some(stderr),
                    },
                },
            });
        }
    }

    if turn.answers_in_text() {
        return Ok(text_answer(reading, envelope, &secrets, stderr));
    }
    let session = reading.session.clone().or(turn.session.map(str::to_owned));
    let Some((mut answer, repair)) = reading.answer else {
        return Ok(match reading.failure {
            Some(failure) => Outcome::Failed {
                envelope,
                code: failure.code,
                message: failure.message,
                stderr: Some(stderr),
            },
            None => {
                *unfit = Some(Unfit {
                    problems: vec!["your answer held no JSON object".into()],
                    session,
                });
                failed(
                    envelope,
                    "Output JSON missing or unreadable: the turn printed no JSON object".into(),
                    Some(stderr),
                )
            }
        });
    };
    // The log it was read from is masked; a value its JSON spelled another way is not.
    answer.values_mut().for_each(|v| secrets.mask_value(v));
    envelope.repair_level = Some(repair);
    if repair != RepairLevel::None {
        envelope.warnings.push("OUTPUT_REPAIRED_GENERIC".into());
    }
    let data = match answer::classify(answer) {
        TurnOutcome::Final(data) => data,
        TurnOutcome::Error(reported) => {
            return Ok(Outcome::Reported {
                envelope,
                reported,
                stderr,
            });
        }
        TurnOutcome::AskUser(_) if turn.execution_mode == ExecutionMode::Auto => {
            let message = "The skill asked its user a question, but the run is in auto mode";
            return Ok(failed(envelope, message.into(), Some(stderr)));
        }
        TurnOutcome::AskUser(question) => return Ok(Outcome::Asked { question }),
    };
    envelope.data = Some(data.clone());
    let problems = match turn.output_schema {
        Some(schema) => Checker::new(schema).messages(&data),
        None => turn.skill.schema_docs.output_checker().messages(&data),
    };
    if let Some(first) = problems.first() {
        let message = format!("Output validation error: {first}");
        *unfit = Some(Unfit { problems, session });
        return Ok(failed(envelope, message, None));
    }
    let missing = missing_artifacts(turn.skill, &envelope.artifacts);
    if !missing.is_empty() {
        let message = format!("Missing required artifacts: {}", missing.join(", "));
        return Ok(failed(envelope, message, None));
    }
    Ok(Outcome::Succeeded(envelope))
}

/// Logs that a program runs from elsewhere than `PATH` says, once per program and service
/// start: it is the machine's setting (a pyenv shim, say), the same for every run, so it is
/// the operator's to read, not each result's.
fn outside_sandbox_once(outside: &crate::process::ProgramOutside) {
    static TOLD: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let explained = outside.explain();
    let first = TOLD
        .lock()
        .map(|mut told| told.insert(explained.clone()))
        .unwrap_or(false);
    if first {
        tracing::warn!("PROGRAM_OUTSIDE_SANDBOX: {explained}");
    }
}

/// The end of a turn whose answer is the agent's final message (`{"text": ...}`).
fn text_answer(
    reading: Reading,
    mut envelope: Envelope,
    secrets: &crate::process::redact::Secrets,
    stderr: String,
) -> Outcome {
    let Some(text) = reading.text.filter(|t| !t.trim().is_empty()) else {
        let (code, message) = match reading.failure {
            Some(failure) => (failure.code, failure.message),
            None => (None, "The agent ended without a final message".to_owned()),
        };
        return Outcome::Failed {
            envelope,
            code,
            message,
            stderr: Some(stderr),
        };
    };
    let mut data = serde_json::json!({"text": text.trim()});
    secrets.mask_value(&mut data);
    envelope.data = Some(data);
    Outcome::Succeeded(envelope)
}

/// What exit code 127 (not found) or 126 (not executable) of `program` means, with the first
/// line its stderr says (`sh: 1: python3: not found`).
fn not_started(program: &str, code: i32, stderr: &str) -> String {
    let said = stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map_or_else(String::new, |l| format!(" ({l})"));
    let what = if code == 127 {
        "a command it ran was not found"
    } else {
        "a command it ran could not be started"
    };
    format!(
        "'{program}' exited with code {code}: {what}{said}. Inside the sandbox only the system, \
         the skill, the run folder and SKILL_RUNNER_SANDBOX_READ_PATHS can be read: install the \
         command there, or add its folder to SKILL_RUNNER_SANDBOX_READ_PATHS"
    )
}

/// `'sh' exited with code 1`, then the last lines of its stderr (already masked), so the
/// failure says why wherever its message is shown.
fn exited(program: &str, code: Option<i32>, signal: Option<i32>, stderr: &str) -> String {
    let how = match (code, signal) {
        (Some(c), _) => format!("'{program}' exited with code {c}"),
        (None, Some(n)) => format!(
            "'{program}' was killed by signal {}",
            crate::process::signal_name(n)
        ),
        (None, None) => format!("'{program}' was killed by a signal"),
    };
    match stderr_tail(stderr) {
        Some(tail) => format!("{how}. The end of its stderr:\n{tail}"),
        None => format!("{how}; it wrote nothing to stderr"),
    }
}

/// The last [`STDERR_LINES`] lines of `stderr` that say something, at most
/// [`STDERR_LINES_BYTES`] bytes of them; `None` when it said nothing.
pub fn stderr_tail(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    let tail = lines[lines.len().saturating_sub(STDERR_LINES)..].join("\n");
    if tail.len() <= STDERR_LINES_BYTES {
        return Some(tail);
    }
    let mut from = tail.len() - STDERR_LINES_BYTES;
    while !tail.is_char_boundary(from) {
        from += 1;
    }
    Some(format!("…{}", &tail[from..]))
}

fn failed(envelope: Envelope, message: String, stderr: Option<String>) -> Outcome {
    Outcome::Failed {
        envelope,
        code: None,
        message,
        stderr,
    }
}

/// Where a turn's input breaks the skill's schemas: the full input (inline values plus each
/// uploaded file as its path) and the parameter. Empty when both are valid.
pub fn input_problems(skill: &SkillManifest, input: &Value, parameter: &Value) -> Vec<String> {
    let docs = &skill.schema_docs;
    let mut problems = docs.input_checker().messages(input);
    problems.extend(docs.parameter_checker().messages(parameter));
    problems
}

/// Inline inputs plus each uploaded file input as its absolute path in the workspace.
pub fn resolved_input(skill: &SkillManifest, inline: &Value, folder: &RunFolder) -> Value {
    let mut input = match inline {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let uploads = folder.uploads();
    if skill.format == SkillFormat::AgentSkill {
        // Each file named, as its path in the workspace (those the upload holds).
        let files: Vec<Value> = crate::skill::standard::named_files(inline)
            .into_iter()
            .filter_map(|name| uploaded_file(&uploads, name, Some(&Value::from(name))))
            .map(|path| Value::String(path.to_string_lossy().into_owned()))
            .collect();
        if !files.is_empty() {
            input.insert("files".into(), Value::Array(files));
        }
        return Value::Object(input);
    }
    for (key, source) in skill.input_sources() {
        if source != InputSource::File {
            continue;
        }
        if let Some(path) = uploaded_file(&uploads, &key, input.get(&key)) {
            input.insert(key, Value::String(path.to_string_lossy().into_owned()));
        }
    }
    Value::Object(input)
}

/// Where the file input `key` is among the `uploads`: at the path the request's `input` names
/// for it (relative to `uploads/`, the reference's v0.7 way), else at `uploads/<key>` (the
/// earlier way); `None` when neither is a file.
pub fn uploaded_file(
    uploads: &std::path::Path,
    key: &str,
    named: Option<&Value>,
) -> Option<std::path::PathBuf> {
    let named = named
        .and_then(Value::as_str)
        .map(std::path::Path::new)
        .filter(|p| {
            p.is_relative()
                && p.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
        .map(|p| uploads.join(p));
    named
        .into_iter()
        .chain([uploads.join(key)])
        .find(|p| crate::run_folder::is_plain_file(p))
}

/// The files under the workspace's `artifacts/`, as `artifacts/<path>`, sorted: regular files
/// with one link only, the ones the service serves.
pub async fn list_artifacts(folder: &RunFolder) -> std::io::Result<Vec<String>> {
    let dir = folder.artifacts();
    let files = tokio::task::spawn_blocking(move || files_under(&dir))
        .await
        .map_err(std::io::Error::other)??;
    Ok(files
        .into_iter()
        .filter(|(_, path)| is_plain_file(path))
        .map(|(rel, _)| format!("artifacts/{rel}"))
        .collect())
}

/// Masks the values of `secrets` where they appear in the turn's artifacts (defence in depth:
/// a contained turn holds placeholders, never the values), keeping each file's length.
async fn mask_artifacts(
    folder: &RunFolder,
    artifacts: &[String],
    secrets: &crate::process::redact::Secrets,
) {
    if secrets.is_empty() || artifacts.is_empty() {
        return;
    }
    let workspace = folder.workspace();
    let artifacts = artifacts.to_vec();
    let secrets = secrets.clone();
    let masked = tokio::task::spawn_blocking(move || {
        for rel in artifacts {
            if let Err(e) = mask_file(&workspace, std::path::Path::new(&rel), &secrets) {
                tracing::warn!(artifact = rel, error = %e, "cannot mask an artifact");
            }
        }
    });
    let _ = masked.await;
}

/// Rewrites the plain file `rel` under `workspace` (opened beneath it, through no link) with the
/// values of `secrets` masked, when it holds any.
fn mask_file(
    workspace: &std::path::Path,
    rel: &std::path::Path,
    secrets: &crate::process::redact::Secrets,
) -> std::io::Result<()> {
    use std::io::Read as _;
    use std::os::unix::fs::FileExt as _;
    let mut file = crate::run_folder::open_beneath_for_update(workspace, rel)?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(MASKED_ARTIFACT_BYTES)
        .read_to_end(&mut bytes)?;
    let original = bytes.clone();
    secrets.mask(&mut bytes);
    if bytes == original {
        return Ok(());
    }
    file.write_all_at(&bytes, 0)
}

fn missing_artifacts(skill: &SkillManifest, artifacts: &[String]) -> Vec<String> {
    skill
        .artifacts
        .iter()
        .filter(|a| a.required)
        .filter(|a| {
            let pattern = glob::Pattern::new(&a.pattern).ok();
            !artifacts.iter().any(|path| {
                let rel = path.trim_start_matches("artifacts/");
                rel == a.pattern || pattern.as_ref().is_some_and(|p| p.matches(rel))
            })
        })
        .map(|a| a.pattern.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_names_its_code_or_signal_and_ends_with_the_end_of_stderr() {
        assert_eq!(
            exited("sh", Some(3), None, "\nboom\n\n"),
            "'sh' exited with code 3. The end of its stderr:\nboom"
        );
        assert_eq!(
            exited("python3", None, Some(9), ""),
            "'python3' was killed by signal 9 (SIGKILL); it wrote nothing to stderr"
        );
        let long: String = (1..=40).map(|n| format!("line {n}\n")).collect();
        let said = exited("sh", Some(1), None, &long);
        assert!(
            said.ends_with("line 40") && !said.contains("line 28\n"),
            "{said}"
        );
        assert!(
            said.contains("line 29"),
            "the last {STDERR_LINES} lines: {said}"
        );
        let wide = "x".repeat(5000);
        let said = exited("sh", Some(1), None, &wide);
        assert!(
            said.len() < STDERR_LINES_BYTES + 100 && said.contains('…'),
            "{said}"
        );
    }
}
