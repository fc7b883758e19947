//! A run's conversation as FCMP/1.0 events, the runtime protocol of the reference's later
//! versions (`GET .../events?cursor=`, `.../events/history`).
//!
//! The events are a projection of the conversation items ([`super::conversation`]) and of the
//! run's turns, made again on every read like the items are, so they keep the items' promise:
//! every projection yields the one before as its prefix, `seq` numbers are stable, and a
//! history and a live stream agree. State changes sit where they happened between the items:
//! `queued -> running` before a turn's first item (or as soon as the run says the turn began),
//! `running -> waiting_user` after a question, `waiting_user -> queued` after its reply or the
//! runner's decision, and the terminal change (with `data.terminal`) last.
//!
//! Envelope: `{protocol_version: "fcmp/1.0", run_id, seq, ts, engine, type, data,
//! meta: {attempt, local_seq}, raw_ref}`; `attempt` is the turn (1 for the first), `local_seq`
//! counts within it. Types: `conversation.state.changed`, `assistant.reasoning`,
//! `assistant.tool_call` (calls and their results), `assistant.command_execution`,
//! `assistant.message.intermediate`, `assistant.message.promoted` (right before the final
//! answer, as the reference sends it), `assistant.message.final`, `user.input.required`,
//! `interaction.reply.accepted`, `interaction.auto_decide.timeout`, `diagnostic.warning`
//! (`{code, detail?}`, one per warning of the run, before its end), and for an answer that
//! broke the output contract `assistant.message.superseded` and the reference's
//! `diagnostic.output_repair.*` (`started`, `round.started` with the round's `problems`,
//! `round.completed`, `converged`, `exhausted`), which the reference keeps in its audit files
//! and we give in the stream; a wait for the engine's login is `auth.required` with
//! `queued -> waiting_auth` and, once a login arrives, `auth.completed` with
//! `waiting_auth -> queued`. The CLIs do not stamp their lines, so an event read from the log
//! carries the time of the last event that has one (its turn's start, in effect). Raw output lines are not repeated as `raw.stdout`/`raw.stderr`
//! events: `raw_ref` points into the log, which `.../logs/range` serves, and the stream without
//! a `cursor` carries every byte.

use serde::Serialize;
use serde_json::{Value, json};

use super::conversation::{ChatItem, Kind};
use crate::clock::Timestamp;
use crate::runner;
use crate::store::{Run, RunStatus};

/// The `protocol_version` of every event.
pub const PROTOCOL: &str = "fcmp/1.0";
/// The most characters of a message a `summary` or `response_preview` holds.
const SUMMARY_CHARS: usize = 200;

/// One FCMP event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FcmpEvent {
    pub protocol_version: &'static str,
    pub run_id: String,
    /// 1, 2, ... over the whole run.
    pub seq: u64,
    pub ts: Timestamp,
    pub engine: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub data: Value,
    pub meta: Meta,
    pub raw_ref: Option<LogRange>,
}

/// The turn an event belongs to, and its place in that turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Meta {
    pub attempt: u32,
    pub local_seq: u64,
}

/// The bytes of a turn's log an event was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogRange {
    pub attempt_number: u32,
    pub stream: &'static str,
    pub byte_from: u64,
    pub byte_to: u64,
    pub encoding: &'static str,
}

/// Turns conversation items into FCMP events, in order.
#[derive(Debug)]
pub struct Fcmp {
    run_id: String,
    engine: &'static str,
    next_seq: u64,
    /// The state the events have shown so far.
    state: RunStatus,
    /// Turns whose start was shown.
    started: u32,
    /// Turns the run says it started, as last observed.
    begun: u32,
    /// The run's first start, once observed.
    first_start: Option<Timestamp>,
    attempt: u32,
    local_seq: u64,
    /// The time of the latest event that has one.
    ts: Timestamp,
    /// The latest assistant message (`message_id`), which a repair round supersedes.
    last_message: Option<String>,
    /// The repair round under way (its number and the most), until its turn's answer fits or
    /// the rounds run out.
    repairing: Option<(u64, u64)>,
}

impl Fcmp {
    pub fn new(run: &Run) -> Self {
        Self {
            run_id: run.run_id.clone(),
            engine: run.engine.as_str(),
            next_seq: 1,
            state: RunStatus::Queued,
            started: 0,
            begun: 0,
            first_start: None,
            attempt: 1,
            local_seq: 0,
            ts: run.created_at,
            last_message: None,
            repairing: None,
        }
    }

    /// Takes in the run as just read (before the log): a turn it started shows as begun once
    /// the items read with it are in ([`Self::caught_up`]): a wait for a login among them
    /// comes before it.
    pub fn observe(&mut self, run: &Run) {
        self.begun = self.begun.max(run.turn);
        self.first_start = self.first_start.or(run.started_at);
    }

    /// The items read so far are in: a turn the run said it began and no item showed yet
    /// shows now.
    pub fn caught_up(&mut self, out: &mut Vec<FcmpEvent>) {
        if self.begun > self.started {
            self.start(out);
        }
    }

    /// The events of conversation item `item`.
    pub fn item(&mut self, item: &ChatItem, out: &mut Vec<FcmpEvent>) {
        let end = item.kind == Kind::OrchestrationNotice && item.correlation.contains_key("status");
        // A wait for a login comes before the turn it holds back.
        let waits =
            item.kind == Kind::OrchestrationNotice && item.correlation.contains_key("auth_wait");
        // Anything else but the run's end was said by a turn, which therefore began.
        if !end && !waits {
            self.begun = self.begun.max(item.attempt);
        }
        if !waits {
            self.start(out);
        }
        if let Some(at) = item.created_at {
            self.ts = at;
        }
        let raw_ref = item.raw_ref.map(|raw| LogRange {
            attempt_number: item.attempt,
            stream: raw.stream,
            byte_from: raw.byte_from,
            byte_to: raw.byte_to,
            encoding: "utf-8",
        });
        let field = |name: &str| item.correlation.get(name).cloned().unwrap_or(Value::Null);
        match item.kind {
            Kind::AssistantProcess => {
                let process = item.correlation.get("process_type").and_then(Value::as_str);
                let (kind, classification) = match process {
                    Some("reasoning") => ("assistant.reasoning", "reasoning"),
                    Some("command_execution") => {
                        ("assistant.command_execution", "command_execution")
                    }
                    _ => ("assistant.tool_call", "tool_call"),
                };
                let data = message(item, classification, field("details"));
                self.emit(kind, data, raw_ref, out);
            }
            Kind::AssistantMessage => {
                self.last_message = Some(format!("m{}", item.seq));
                let data = message(item, "intermediate", json!({}));
                self.emit("assistant.message.intermediate", data, raw_ref, out);
            }
            Kind::AssistantFinal => {
                // As the reference: the turn's last message is promoted to its final answer,
                // then given as the final answer.
                let mut promoted = message(
                    item,
                    "promoted",
                    json!({"from": "intermediate", "to": "final"}),
                );
                promoted["replaces_message_id"] = promoted["message_id"].clone();
                self.emit("assistant.message.promoted", promoted, raw_ref, out);
                let data = message(item, "final", json!({}));
                self.emit("assistant.message.final", data, raw_ref, out);
            }
            Kind::UserInputRequired => {
                // A question is an answer that fits.
                self.repair_ended(None, out);
                let question = field("question");
                let kind = question.get("kind").cloned().unwrap_or(json!("open_text"));
                let data = json!({
                    "interaction_id": field("interaction_id"),
                    "kind": kind,
                    "prompt": item.text,
                });
                self.emit("user.input.required", data, None, out);
                let id = field("interaction_id");
                self.change(
                    RunStatus::WaitingUser,
                    "turn.needs_input",
                    json!({"pending_interaction_id": id, "pending_owner": "waiting_user"}),
                    out,
                );
            }
            Kind::InteractionReply => {
                let data = json!({
                    "interaction_id": field("interaction_id"),
                    "resolution_mode": "user_reply",
                    "accepted_at": self.ts,
                    "response_preview": preview(&item.text),
                });
                self.emit("interaction.reply.accepted", data, None, out);
                self.resume("interaction.reply.accepted", "interaction_reply", out);
            }
            Kind::OrchestrationNotice if item.correlation.contains_key("auth_wait") => {
                let data = json!({
                    "engine": field("engine"),
                    "auth_wait": field("auth_wait"),
                    "message": item.text,
                });
                if item.correlation.contains_key("logged_in") {
                    self.emit("auth.completed", data, None, out);
                    self.resume("auth.completed", "auth_completed", out);
                } else {
                    let mut data = data;
                    data["login_page"] = field("login_page");
                    self.emit("auth.required", data, None, out);
                    self.change(RunStatus::WaitingAuth, "auth.required", json!({}), out);
                }
            }
            Kind::OrchestrationNotice if item.correlation.contains_key("repair_round") => {
                let number = |name| field(name).as_u64().unwrap_or(1);
                let (round, rounds) = (number("repair_round"), number("repair_rounds"));
                match self.repairing {
                    None => self.repair_event(
                        "diagnostic.output_repair.started",
                        0,
                        "target output did not satisfy the attempt contract",
                        out,
                    ),
                    Some((before, _)) => self.repair_event(
                        "diagnostic.output_repair.round.completed",
                        before,
                        "schema still invalid",
                        out,
                    ),
                }
                self.supersede(round, out);
                let mut data = repair_data(round, "retrying with a strict schema repair prompt");
                data["problems"] = field("problems");
                self.emit("diagnostic.output_repair.round.started", data, None, out);
                self.repairing = Some((round, rounds));
            }
            Kind::OrchestrationNotice if !end => {
                let data = json!({
                    "interaction_id": field("interaction_id"),
                    "resolution_mode": "auto_decide_timeout",
                    "accepted_at": self.ts,
                    "policy": item.correlation.get("policy").cloned()
                        .unwrap_or(json!("engine_judgement")),
                });
                self.emit("interaction.auto_decide.timeout", data, None, out);
                self.resume(
                    "interaction.auto_decide.timeout",
                    "interaction_auto_decide_timeout",
                    out,
                );
            }
            Kind::OrchestrationNotice => {
                let status: RunStatus =
                    serde_json::from_value(field("status")).unwrap_or(RunStatus::Failed);
                let trigger = match status {
                    RunStatus::Succeeded => "turn.succeeded",
                    RunStatus::Canceled => "run.canceled",
                    _ => "turn.failed",
                };
                // What the run warns of, as the reference's `diagnostic.warning` events, before
                // its end.
                let warnings = item.correlation.get("warnings").and_then(Value::as_array);
                self.repair_ended(warnings, out);
                for warning in warnings.into_iter().flatten().filter_map(Value::as_str) {
                    let data = match warning.split_once(": ") {
                        Some((code, detail)) => json!({"code": code, "detail": detail}),
                        None => json!({"code": warning}),
                    };
                    self.emit("diagnostic.warning", data, None, out);
                }
                let mut terminal = json!({"status": status});
                if let Some(code) = item.correlation.get("error_code").and_then(Value::as_str) {
                    terminal["reason_code"] = json!(code);
                    terminal["error"] = json!({
                        "category": "runtime",
                        "code": code,
                        "message": field("error_message").as_str().unwrap_or(code),
                    });
                }
                self.change(status, trigger, json!({"terminal": terminal}), out);
            }
        }
    }

    /// A `diagnostic.output_repair.*` event of round `round` (0 before the first).
    fn repair_event(
        &mut self,
        kind: &'static str,
        round: u64,
        reason: &str,
        out: &mut Vec<FcmpEvent>,
    ) {
        self.emit(kind, repair_data(round, reason), None, out);
    }

    /// `assistant.message.superseded`: the latest message was no answer that fits, and round
    /// `round` is to replace it.
    fn supersede(&mut self, round: u64, out: &mut Vec<FcmpEvent>) {
        if let Some(id) = self.last_message.take() {
            let data = json!({
                "message_id": id,
                "message_family_id": id,
                "reason": "output_repair_started",
                "repair_round_index": round,
                "replacement_expected": true,
            });
            self.emit("assistant.message.superseded", data, None, out);
        }
    }

    /// Ends the repair under way: a question (`warnings` `None`) is an answer that fits; at
    /// the run's end its `warnings` say whether the last round converged or the rounds ran
    /// out (a run that failed otherwise meanwhile, a timeout, says neither).
    fn repair_ended(&mut self, warnings: Option<&Vec<Value>>, out: &mut Vec<FcmpEvent>) {
        let Some((round, rounds)) = self.repairing.take() else {
            return;
        };
        let warned = |code: &str| {
            warnings
                .into_iter()
                .flatten()
                .any(|w| w.as_str() == Some(code))
        };
        if warned(runner::REPAIR_EXHAUSTED) {
            self.repair_event(
                "diagnostic.output_repair.round.completed",
                round,
                "schema still invalid",
                out,
            );
            self.supersede(rounds + 1, out);
            let reason = "bounded schema repair rounds were exhausted";
            self.repair_event("diagnostic.output_repair.exhausted", round, reason, out);
        } else if warnings.is_none() || warned(runner::REPAIR_CONVERGED) {
            self.repair_event(
                "diagnostic.output_repair.round.completed",
                round,
                "schema validated",
                out,
            );
            self.repair_event(
                "diagnostic.output_repair.converged",
                round,
                "repair produced a valid payload",
                out,
            );
        }
    }

    /// Shows the next turn's start, if the run began one not yet shown.
    fn start(&mut self, out: &mut Vec<FcmpEvent>) {
        if self.state != RunStatus::Queued || self.begun <= self.started {
            return;
        }
        if self.started == 0
            && let Some(at) = self.first_start
        {
            self.ts = at;
        }
        self.started += 1;
        self.attempt = self.started;
        self.local_seq = 0;
        self.change(RunStatus::Running, "turn.started", json!({}), out);
    }

    /// A reply or decision sends the run back to the queue, and on if its next turn began.
    fn resume(&mut self, trigger: &str, cause: &str, out: &mut Vec<FcmpEvent>) {
        self.change(
            RunStatus::Queued,
            trigger,
            json!({"resume_cause": cause}),
            out,
        );
        self.start(out);
    }

    /// A `conversation.state.changed` event to `to`, with `extra` data fields.
    fn change(&mut self, to: RunStatus, trigger: &str, extra: Value, out: &mut Vec<FcmpEvent>) {
        let mut data = json!({
            "from": self.state,
            "to": to,
            "trigger": trigger,
            "updated_at": self.ts,
            "pending_interaction_id": null,
        });
        if let (Some(data), Value::Object(extra)) = (data.as_object_mut(), extra) {
            data.extend(extra);
        }
        self.state = to;
        self.emit("conversation.state.changed", data, None, out);
    }

    fn emit(
        &mut self,
        kind: &'static str,
        data: Value,
        raw_ref: Option<LogRange>,
        out: &mut Vec<FcmpEvent>,
    ) {
        self.local_seq += 1;
        out.push(FcmpEvent {
            protocol_version: PROTOCOL,
            run_id: self.run_id.clone(),
            seq: self.next_seq,
            ts: self.ts,
            engine: self.engine,
            kind,
            data,
            meta: Meta {
                attempt: self.attempt,
                local_seq: self.local_seq,
            },
            raw_ref,
        });
        self.next_seq += 1;
    }
}

/// The data of a `diagnostic.output_repair.*` event, in the reference's fields.
fn repair_data(round: u64, reason: &str) -> Value {
    json!({
        "internal_round_index": round,
        "repair_stage": "schema_repair_rounds",
        "candidate_source": "stdout",
        "reason": reason,
    })
}

/// The data of an assistant event: its text, a summary of it, and what it is.
fn message(item: &ChatItem, classification: &str, details: Value) -> Value {
    let summary = preview(&item.text);
    json!({
        "message_id": format!("m{}", item.seq),
        "summary": if summary.is_empty() { classification.to_owned() } else { summary },
        "classification": classification,
        "details": details,
        "text": item.text,
    })
}

fn preview(text: &str) -> String {
    let line = text.trim();
    match line.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}
