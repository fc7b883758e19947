//! A run as a conversation: what its turns said, the questions it asked and the replies it got,
//! as numbered items (`GET .../chat`, `.../chat/history`).
//!
//! Nothing extra is kept while a run runs: the items are rebuilt from the run's stdout log,
//! read line by line through the engine's [`Transcriber`], with each question placed where the
//! asking turn's output ended (`interactions.stdout_offset`) and its reply right after it. The
//! log and the questions only grow, and an item is emitted only once what it is can no longer
//! change, so every rebuild yields the items of the one before as its prefix: `seq` numbers
//! are stable, a history and a live stream agree, and `cursor` resumes without repeats.
//!
//! The one item that waits is the assistant's latest message. Whether it is the turn's final
//! answer (`assistant_final`) or a step on the way (`assistant_message`) is known only when the
//! next thing is said or the turn ends, so it is held until then. A message that is only the
//! JSON of a question is left out (the question item says it better); raw stdout has it.
//!
//! Items follow the reference's chat replay shape (`protocol_version: "chat-replay/1.0"`,
//! `role`, `kind`, `text`, `correlation`). Kinds: `assistant_message`, `assistant_process`
//! (`correlation.process_type`: `reasoning`, `tool_call`, `tool_result`, `command_execution`,
//! with `details`), `assistant_final`, `user_input_required`, `interaction_reply`, and
//! `orchestration_notice` (a timed-out question decided by the runner, a repair round with
//! `correlation.repair_round`, a wait for the engine's login and its end with
//! `correlation.auth_wait`, and the run's end).
//! `raw_ref` gives the byte range of `logs/stdout.txt` an item was read from. Items read from
//! stdout have no `created_at` (the CLIs do not stamp their lines).
//!
//! A reader holds little whatever a run prints: a message keeps its first [`MESSAGE_CAP`]
//! bytes, a tool's or command's output its first [`OUTPUT_CAP`], and a line longer than
//! [`LINE_CAP`] is not parsed at all but read as a message of its first [`PREVIEW`] bytes.
//! Each cut ends in a marker naming the log bytes that hold the whole (also its `raw_ref`),
//! which `.../logs/range` serves, and the item's `correlation.truncated` is `true`.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};
use skill_runner_types::run_state::RunStatus;

use crate::clock::Timestamp;
use crate::engines::{EngineAdapter, Said, Transcriber};
use crate::store::{AuthWait, Interaction, RepairRound, Resolution};

/// The `protocol_version` of every item.
pub const PROTOCOL: &str = "chat-replay/1.0";
/// The most of a tool's or command's output an item carries; the log has the rest.
const OUTPUT_CAP: usize = 16 * 1024;
/// The most of a message an item carries.
const MESSAGE_CAP: usize = 64 * 1024;
/// The longest line read as the engine's output; a longer one is kept only as its preview.
const LINE_CAP: usize = 256 * 1024;
/// What an item shows of a line longer than [`LINE_CAP`].
const PREVIEW: usize = 16 * 1024;

/// Who says an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Assistant,
    User,
    System,
}

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    AssistantMessage,
    AssistantProcess,
    AssistantFinal,
    UserInputRequired,
    InteractionReply,
    OrchestrationNotice,
}

/// Where in a log an item was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RawRef {
    pub stream: &'static str,
    pub byte_from: u64,
    pub byte_to: u64,
}

/// One item of a run's conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatItem {
    pub protocol_version: &'static str,
    pub run_id: String,
    /// 1, 2, ... in conversation order.
    pub seq: u64,
    /// The turn it belongs to (1 for the first).
    pub attempt: u32,
    pub role: Role,
    pub kind: Kind,
    pub text: String,
    pub created_at: Option<Timestamp>,
    pub correlation: Map<String, Value>,
    pub raw_ref: Option<RawRef>,
}

/// What the store keeps of a run beside its log: its questions (read before the log), its
/// repair rounds and its waits for a login (read after it: each is kept before any output
/// that follows it, so the log holds nothing from past one not given).
#[derive(Debug, Clone, Copy, Default)]
pub struct Marks<'a> {
    pub asked: &'a [Interaction],
    pub repairs: &'a [RepairRound],
    pub waits: &'a [AuthWait],
}

/// How a run ended, for its closing notice.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub status: RunStatus,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// The run's warnings (`CODE: detail`, or a code alone).
    pub warnings: Vec<String>,
    pub at: Option<Timestamp>,
}

/// How a turn ended.
enum TurnEnd {
    Asked,
    Run(RunStatus),
}

/// The assistant's latest message, not yet emitted.
struct Held {
    text: String,
    from: u64,
    to: u64,
    /// Text was left out past [`MESSAGE_CAP`].
    cut: bool,
}

impl Held {
    fn new(text: String, from: u64, to: u64) -> Self {
        let mut held = Self {
            text: String::new(),
            from,
            to,
            cut: false,
        };
        held.push(&text, to);
        held
    }

    /// Adds `text`, read up to log byte `to`, as far as [`MESSAGE_CAP`] lets it.
    fn push(&mut self, text: &str, to: u64) {
        self.to = to;
        if self.cut {
            return;
        }
        let room = MESSAGE_CAP - self.text.len();
        if text.len() <= room {
            self.text.push_str(text);
        } else {
            self.text.push_str(&text[..floor_char_boundary(text, room)]);
            self.cut = true;
        }
    }
}

/// A line longer than [`LINE_CAP`] being read past: where it began and its preview.
struct LongLine {
    from: u64,
    preview: String,
}

/// Builds a run's conversation as its log and questions grow.
pub struct Conversation {
    run_id: String,
    adapter: Arc<dyn EngineAdapter>,
    transcriber: Box<dyn Transcriber>,
    /// Log bytes given but not yet read, starting at `offset`.
    pending: Vec<u8>,
    offset: u64,
    turn: u32,
    held: Option<Held>,
    /// The line being read past, when it is too long to parse.
    long: Option<LongLine>,
    /// Questions placed, and replies placed (one behind while a question waits).
    asked: usize,
    replied: usize,
    /// Repair rounds placed.
    repaired: usize,
    /// Waits for a login placed, and their ends placed (one behind while a wait lasts).
    waited: usize,
    wait_ended: usize,
    ended: bool,
    next_seq: u64,
    out: Vec<ChatItem>,
}

impl Conversation {
    pub fn new(run_id: &str, adapter: Arc<dyn EngineAdapter>) -> Self {
        Self {
            run_id: run_id.to_owned(),
            transcriber: adapter.transcriber(),
            adapter,
            pending: Vec::new(),
            offset: 0,
            turn: 1,
            held: None,
            long: None,
            asked: 0,
            replied: 0,
            repaired: 0,
            waited: 0,
            wait_ended: 0,
            ended: false,
            next_seq: 1,
            out: Vec::new(),
        }
    }

    /// Where in the log the next bytes given to [`Self::advance`] must start.
    pub fn log_read(&self) -> u64 {
        self.offset + self.pending.len() as u64
    }

    /// Whether the closing notice was emitted: nothing more will come.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether the conversation stops at a question that has no reply yet.
    pub fn awaits_reply(&self) -> bool {
        self.replied < self.asked
    }

    /// Takes in `log` (the stdout bytes from [`Self::log_read`] on; all of the rest when
    /// `at_end`), what the store keeps of the run beside it ([`Marks`]), and how the run ended
    /// if it did (read before the log, so the log is complete by then); returns the new items.
    pub fn advance(
        &mut self,
        log: &[u8],
        at_end: bool,
        marks: Marks<'_>,
        end: Option<&RunEnd>,
    ) -> Vec<ChatItem> {
        let Marks {
            asked,
            repairs,
            waits,
        } = marks;
        self.pending.extend_from_slice(log);
        loop {
            if self.awaits_reply() {
                let question = &asked[self.asked - 1];
                if self.place_reply(question) {
                    continue;
                }
                // A run canceled or timed out while it waited gets no reply: it just ends.
                if let Some(end) = end.filter(|_| at_end && !self.ended) {
                    self.place_end(end);
                    self.ended = true;
                }
                break;
            }
            // A wait for a login lasts until a login arrives: nothing comes before its end but
            // the run's own end (a timeout, a cancel).
            if self.waited > self.wait_ended {
                let wait = &waits[self.waited - 1];
                if let Some(at) = wait.ended_at {
                    self.place_wait_end(wait, at);
                    continue;
                }
                if let Some(end) = end.filter(|_| at_end && !self.ended) {
                    self.place_end(end);
                    self.ended = true;
                }
                break;
            }
            // Turn t's repair rounds come before the question it ends in; a wait after turn t
            // (its question answered) before turn t + 1's rounds.
            let next_question = asked.get(self.asked);
            let next_wait = waits.get(self.waited);
            if let Some(round) = repairs.get(self.repaired).filter(|r| {
                next_question.is_none_or(|q| r.turn <= q.turn)
                    && next_wait.is_none_or(|w| r.turn <= w.turn)
            }) {
                let boundary = round.stdout_offset;
                self.read_lines(Some(boundary));
                if self.offset < boundary && !at_end {
                    break;
                }
                self.flush_line(Some(boundary));
                self.place_repair(round);
                continue;
            }
            if let Some(wait) = next_wait.filter(|w| next_question.is_none_or(|q| w.turn < q.turn))
            {
                let boundary = wait.stdout_offset;
                self.read_lines(Some(boundary));
                if self.offset < boundary && !at_end {
                    break;
                }
                self.flush_line(Some(boundary));
                self.place_wait(wait);
                continue;
            }
            if let Some(question) = next_question {
                // A question from before offsets were kept goes where the reading is.
                let boundary = question.stdout_offset.unwrap_or(self.offset);
                self.read_lines(Some(boundary));
                if self.offset < boundary && !at_end {
                    break;
                }
                self.flush_line(Some(boundary));
                self.end_turn(TurnEnd::Asked);
                self.place_question(question);
                continue;
            }
            self.read_lines(None);
            if let Some(end) = end.filter(|_| at_end && !self.ended) {
                self.flush_line(None);
                self.end_turn(TurnEnd::Run(end.status));
                self.place_end(end);
                self.ended = true;
            }
            break;
        }
        std::mem::take(&mut self.out)
    }

    /// How much of `pending` lies before `limit` (all of it when `None`).
    fn before(&self, limit: Option<u64>) -> usize {
        limit.map_or(self.pending.len(), |l| {
            usize::try_from(l.saturating_sub(self.offset))
                .unwrap_or(usize::MAX)
                .min(self.pending.len())
        })
    }

    /// Reads the complete lines of `pending` that end before `limit` (all of them when `None`);
    /// a line found longer than [`LINE_CAP`] is read past as it comes, keeping its preview.
    fn read_lines(&mut self, limit: Option<u64>) {
        let available = self.before(limit);
        let mut start = 0;
        loop {
            let newline = self.pending[start..available]
                .iter()
                .position(|b| *b == b'\n');
            match (newline, self.long.is_some()) {
                (Some(newline), true) => {
                    start += newline + 1;
                    self.end_long_line(self.offset + start as u64);
                }
                (None, true) => {
                    start = available;
                    break;
                }
                (Some(newline), false) => {
                    let end = start + newline + 1;
                    self.line(start, end);
                    start = end;
                }
                (None, false) => {
                    // What is there can only grow: past the cap now, past it when complete.
                    if content_len(&self.pending[start..available]) > LINE_CAP {
                        self.begin_long_line(start);
                        start = available;
                    }
                    break;
                }
            }
        }
        self.consume(start);
    }

    /// Reads what is left before `limit` (a turn's end) as a line of its own.
    fn flush_line(&mut self, limit: Option<u64>) {
        let len = self.before(limit);
        if self.long.is_some() {
            self.consume(len);
            self.end_long_line(self.offset);
        } else if len > 0 {
            self.line(0, len);
            self.consume(len);
        }
    }

    /// Starts reading past the line at `pending[start..]`, keeping its preview.
    fn begin_long_line(&mut self, start: usize) {
        let bytes = &self.pending[start..(start + PREVIEW).min(self.pending.len())];
        let preview = match std::str::from_utf8(bytes) {
            Ok(text) => text.to_owned(),
            // A character cut by the preview's end is left out; anything else invalid is shown
            // as the log's other lines are.
            Err(e) if e.error_len().is_none() => {
                String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned()
            }
            Err(_) => String::from_utf8_lossy(bytes).into_owned(),
        };
        self.long = Some(LongLine {
            from: self.offset + start as u64,
            preview,
        });
    }

    /// The long line ended at log byte `to` (after its line end, if any): a message of its
    /// preview and where the whole line is.
    fn end_long_line(&mut self, to: u64) {
        let Some(long) = self.long.take() else { return };
        let mut held = Held::new(long.preview, long.from, to);
        held.cut = true;
        self.release(Kind::AssistantMessage);
        self.held = Some(held);
    }

    fn consume(&mut self, bytes: usize) {
        self.pending.drain(..bytes);
        self.offset += bytes as u64;
    }

    /// Reads `pending[start..end]`, one line with or without its line end.
    fn line(&mut self, start: usize, end: usize) {
        if content_len(&self.pending[start..end]) > LINE_CAP {
            // As long as if it had come in pieces: read past, whatever the reads' sizes were.
            self.begin_long_line(start);
            self.end_long_line(self.offset + end as u64);
            return;
        }
        let text = String::from_utf8_lossy(&self.pending[start..end]);
        let text = text.trim_end_matches(['\n', '\r']);
        let (from, to) = (self.offset + start as u64, self.offset + end as u64);
        let mut said = Vec::new();
        self.transcriber.line(text, &mut said);
        for said in said {
            self.said(said, from, to);
        }
    }

    fn said(&mut self, said: Said, from: u64, to: u64) {
        let (process_type, text, details) = match said {
            Said::Text {
                text,
                continues: true,
            } if self.held.is_some() => {
                self.held.as_mut().expect("checked").push(&text, to);
                return;
            }
            Said::Text { text, .. } => {
                self.release(Kind::AssistantMessage);
                self.held = Some(Held::new(text, from, to));
                return;
            }
            Said::Reasoning(text) => ("reasoning", capped(text.trim().to_owned()), json!({})),
            Said::ToolCall {
                id,
                name,
                arguments,
            } => (
                "tool_call",
                name.clone(),
                json!({"id": id, "name": name, "arguments": arguments}),
            ),
            Said::ToolResult {
                id,
                output,
                is_error,
            } => {
                let output = capped(output);
                (
                    "tool_result",
                    output.clone(),
                    json!({"id": id, "output": output, "is_error": is_error}),
                )
            }
            Said::Command {
                command,
                output,
                exit_code,
            } => (
                "command_execution",
                command.clone(),
                json!({"command": command, "output": capped(output), "exit_code": exit_code}),
            ),
        };
        self.release(Kind::AssistantMessage);
        let correlation = object(json!({"process_type": process_type, "details": details}));
        let raw = Some(stdout_ref(from, to));
        self.emit(
            Role::Assistant,
            Kind::AssistantProcess,
            text,
            None,
            correlation,
            raw,
        );
    }

    /// Emits the held message as `kind`, unless it is empty.
    fn release(&mut self, kind: Kind) {
        if let Some(held) = self.held.take() {
            let text = held.text.trim();
            if !text.is_empty() || held.cut {
                let mut correlation = Map::new();
                let mut text = text.to_owned();
                if held.cut {
                    text.push_str(&format!(
                        "\n… cut: logs/stdout.txt bytes {} to {} hold the whole message",
                        held.from, held.to
                    ));
                    correlation.insert("truncated".into(), Value::Bool(true));
                }
                let raw = Some(stdout_ref(held.from, held.to));
                self.emit(Role::Assistant, kind, text, None, correlation, raw);
            }
        }
    }

    fn end_turn(&mut self, end: TurnEnd) {
        match end {
            TurnEnd::Asked => {
                let question_only = self
                    .held
                    .as_ref()
                    .is_some_and(|held| serde_json::from_str::<Value>(held.text.trim()).is_ok());
                if question_only {
                    self.held = None;
                }
                self.release(Kind::AssistantMessage);
            }
            // Only a run that succeeded has a final answer: a failed run's last words are a
            // message like the others.
            TurnEnd::Run(RunStatus::Succeeded) => self.release(Kind::AssistantFinal),
            TurnEnd::Run(_) => self.release(Kind::AssistantMessage),
        }
        self.transcriber = self.adapter.transcriber();
    }

    fn place_question(&mut self, question: &Interaction) {
        self.asked += 1;
        let asked = &question.question;
        let text = asked
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or("The skill asks a question.")
            .to_owned();
        let correlation = object(json!({
            "interaction_id": question.interaction_id,
            "question": asked,
        }));
        let at = Some(question.asked_at);
        self.emit(
            Role::Assistant,
            Kind::UserInputRequired,
            text,
            at,
            correlation,
            None,
        );
    }

    /// Places the beginning of wait `wait` for the engine's login.
    fn place_wait(&mut self, wait: &AuthWait) {
        self.waited += 1;
        self.release(Kind::AssistantMessage);
        let engine = self.adapter.engine();
        let text = format!(
            "Engine '{engine}' is not logged in: the run waits for a login (the engine's page \
             /ui/engines/{engine}/models, or GET .../auth/session for the ways)."
        );
        let correlation = object(json!({
            "auth_wait": wait.seq,
            "engine": engine,
            "login_page": format!("/ui/engines/{engine}/models"),
        }));
        self.emit(
            Role::System,
            Kind::OrchestrationNotice,
            text,
            Some(wait.started_at),
            correlation,
            None,
        );
    }

    /// Places the end of wait `wait`: a login arrived at `at`.
    fn place_wait_end(&mut self, wait: &AuthWait, at: Timestamp) {
        self.wait_ended += 1;
        let engine = self.adapter.engine();
        let correlation = object(json!({
            "auth_wait": wait.seq,
            "engine": engine,
            "logged_in": true,
        }));
        self.emit(
            Role::System,
            Kind::OrchestrationNotice,
            format!("Engine '{engine}' is logged in: the run goes on."),
            Some(at),
            correlation,
            None,
        );
    }

    /// Places repair round `round`: the unfit answer before it was a step on the way, and the
    /// round's process starts reading afresh.
    fn place_repair(&mut self, round: &RepairRound) {
        self.repaired += 1;
        self.release(Kind::AssistantMessage);
        self.transcriber = self.adapter.transcriber();
        let mut text = format!(
            "The answer did not match the output contract; repair round {} of {} asks again:",
            round.round, round.rounds
        );
        for problem in &round.problems {
            text.push_str(&format!("\n- {problem}"));
        }
        let correlation = object(json!({
            "repair_round": round.round,
            "repair_rounds": round.rounds,
            "problems": round.problems,
        }));
        let at = Some(round.started_at);
        self.emit(
            Role::System,
            Kind::OrchestrationNotice,
            text,
            at,
            correlation,
            None,
        );
    }

    /// Places the reply to `question` if it has one, and starts the next turn.
    fn place_reply(&mut self, question: &Interaction) -> bool {
        let (Some(response), Some(resolution)) = (&question.response, question.resolution) else {
            return false;
        };
        self.replied += 1;
        self.turn += 1;
        let mut correlation = object(json!({
            "interaction_id": question.interaction_id,
            "resolution_mode": resolution.as_str(),
            "response": response,
        }));
        let (role, kind, text) = match resolution {
            Resolution::UserReply => (
                Role::User,
                Kind::InteractionReply,
                match response {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                },
            ),
            Resolution::AutoDecideTimeout => {
                if let Some(policy) = response.get("policy") {
                    correlation.insert("policy".into(), policy.clone());
                }
                correlation.remove("response");
                (
                    Role::System,
                    Kind::OrchestrationNotice,
                    "No reply came in time; the run decides by itself.".to_owned(),
                )
            }
        };
        self.emit(role, kind, text, question.replied_at, correlation, None);
        true
    }

    fn place_end(&mut self, end: &RunEnd) {
        let text = match end.status {
            RunStatus::Succeeded => "The run succeeded.".to_owned(),
            RunStatus::Canceled => "The run was canceled.".to_owned(),
            _ => match (&end.error_message, &end.error_code) {
                (Some(message), _) => format!("The run failed: {message}"),
                (None, Some(code)) => format!("The run failed ({code})."),
                (None, None) => "The run failed.".to_owned(),
            },
        };
        let correlation = object(json!({
            "status": end.status,
            "error_code": end.error_code,
            "error_message": end.error_message,
            "warnings": end.warnings,
        }));
        self.emit(
            Role::System,
            Kind::OrchestrationNotice,
            text,
            end.at,
            correlation,
            None,
        );
    }

    fn emit(
        &mut self,
        role: Role,
        kind: Kind,
        text: String,
        created_at: Option<Timestamp>,
        correlation: Map<String, Value>,
        raw_ref: Option<RawRef>,
    ) {
        self.out.push(ChatItem {
            protocol_version: PROTOCOL,
            run_id: self.run_id.clone(),
            seq: self.next_seq,
            attempt: self.turn,
            role,
            kind,
            text,
            created_at,
            correlation,
            raw_ref,
        });
        self.next_seq += 1;
    }
}

fn stdout_ref(byte_from: u64, byte_to: u64) -> RawRef {
    RawRef {
        stream: "stdout",
        byte_from,
        byte_to,
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The length of a line without its line end (every `\r` and `\n` it ends with).
fn content_len(line: &[u8]) -> usize {
    line.iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |last| last + 1)
}

/// The largest `at` or less that falls on a character boundary of `text`.
fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// `text` cut to [`OUTPUT_CAP`] bytes on a character boundary, saying how much was left out.
fn capped(mut text: String) -> String {
    if text.len() <= OUTPUT_CAP {
        return text;
    }
    let cut = floor_char_boundary(&text, OUTPUT_CAP);
    let left = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!("\n… {left} more bytes in logs/stdout.txt"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::config::EngineConfig;
    use crate::engines::{codex::Codex, gemini::Gemini, script::ScriptEngine};

    fn codex() -> Arc<dyn EngineAdapter> {
        Arc::new(Codex {
            config: Arc::new(EngineConfig::for_tests()),
        })
    }

    fn succeeded() -> RunEnd {
        RunEnd {
            warnings: Vec::new(),
            status: RunStatus::Succeeded,
            error_code: None,
            error_message: None,
            at: None,
        }
    }

    fn question(offset: u64, response: Option<Value>) -> Interaction {
        Interaction {
            seq: 1,
            interaction_id: 7,
            turn: 1,
            question: json!({"kind": "choose_one", "prompt": "Which colour?", "options": ["red"]}),
            asked_at: Timestamp::now(),
            resolution: response.as_ref().map(|_| Resolution::UserReply),
            response,
            idempotency_key: None,
            replied_at: None,
            stdout_offset: Some(offset),
        }
    }

    fn summary(items: &[ChatItem]) -> Vec<(u64, u32, Kind, String)> {
        items
            .iter()
            .map(|i| (i.seq, i.attempt, i.kind, i.text.clone()))
            .collect()
    }

    const CODEX: &str = concat!(
        r#"{"type":"thread.started","thread_id":"t-1"}"#,
        "\n",
        r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"I will write the report."}}"#,
        "\n",
        r#"{"type":"item.completed","item":{"id":"item_1","type":"reasoning","text":"**Writing**"}}"#,
        "\n",
        r#"{"type":"item.started","item":{"id":"item_2","type":"command_execution","command":"echo hi","aggregated_output":"","status":"in_progress"}}"#,
        "\n",
        r#"{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"echo hi","aggregated_output":"hi\n","exit_code":0,"status":"completed"}}"#,
        "\n",
        r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Done: {\"ok\": true}"}}"#,
        "\n",
        r#"{"type":"turn.completed","usage":{}}"#,
        "\n",
    );

    #[test]
    fn a_codex_turn_reads_as_messages_steps_and_a_final_answer() {
        let mut chat = Conversation::new("r1", codex());
        let items = chat.advance(CODEX.as_bytes(), true, Marks::default(), Some(&succeeded()));
        assert_eq!(
            summary(&items),
            vec![
                (
                    1,
                    1,
                    Kind::AssistantMessage,
                    "I will write the report.".into()
                ),
                (2, 1, Kind::AssistantProcess, "**Writing**".into()),
                (3, 1, Kind::AssistantProcess, "echo hi".into()),
                (4, 1, Kind::AssistantFinal, "Done: {\"ok\": true}".into()),
                (5, 1, Kind::OrchestrationNotice, "The run succeeded.".into()),
            ]
        );
        assert_eq!(items[1].correlation["process_type"], "reasoning");
        let command = &items[2].correlation;
        assert_eq!(command["process_type"], "command_execution");
        assert_eq!(command["details"]["output"], "hi\n");
        assert_eq!(command["details"]["exit_code"], 0);
        let raw = items[2].raw_ref.unwrap();
        let line = &CODEX[raw.byte_from as usize..raw.byte_to as usize];
        assert!(
            line.contains("\"item.completed\"") && line.contains("echo hi"),
            "{line}"
        );
        assert_eq!(items[4].role, Role::System);
        assert!(chat.ended());
    }

    #[test]
    fn any_split_of_the_log_gives_the_same_items_and_the_last_message_waits_for_the_end() {
        let whole = Conversation::new("r1", codex()).advance(
            CODEX.as_bytes(),
            true,
            Marks::default(),
            Some(&succeeded()),
        );
        for step in [1, 7, 100] {
            let mut chat = Conversation::new("r1", codex());
            let mut items = Vec::new();
            for piece in CODEX.as_bytes().chunks(step) {
                items.extend(chat.advance(piece, false, Marks::default(), None));
            }
            // The run has not ended: the last message may still be followed by more.
            assert_eq!(items.len(), 3, "step {step}: {:?}", summary(&items));
            assert_eq!(chat.log_read(), CODEX.len() as u64);
            items.extend(chat.advance(b"", true, Marks::default(), Some(&succeeded())));
            assert_eq!(items, whole, "step {step}");
        }
    }

    #[test]
    fn questions_and_replies_sit_between_the_turns_that_asked_and_resumed() {
        let turn1 = "turn 1\n{\"ask_user\": {\"prompt\": \"Which colour?\"}}\n";
        let turn2 = "turn 2\n{\"choice\": \"red\"}\n";
        let script: Arc<dyn EngineAdapter> = Arc::new(ScriptEngine);
        let mut chat = Conversation::new("r1", script);
        let asked = [question(turn1.len() as u64, None)];
        let mut items = chat.advance(
            turn1.as_bytes(),
            false,
            Marks {
                asked: &asked,
                ..Default::default()
            },
            None,
        );
        assert!(chat.awaits_reply());
        // Nothing new while the question waits.
        assert!(
            chat.advance(
                b"",
                false,
                Marks {
                    asked: &asked,
                    ..Default::default()
                },
                None
            )
            .is_empty()
        );
        let replied = [question(turn1.len() as u64, Some(json!("red")))];
        items.extend(chat.advance(
            turn2.as_bytes(),
            true,
            Marks {
                asked: &replied,
                ..Default::default()
            },
            Some(&succeeded()),
        ));
        assert_eq!(
            summary(&items),
            vec![
                (1, 1, Kind::AssistantMessage, "turn 1".into()),
                (2, 1, Kind::UserInputRequired, "Which colour?".into()),
                (3, 2, Kind::InteractionReply, "red".into()),
                (4, 2, Kind::AssistantMessage, "turn 2".into()),
                (5, 2, Kind::AssistantFinal, "{\"choice\": \"red\"}".into()),
                (6, 2, Kind::OrchestrationNotice, "The run succeeded.".into()),
            ]
        );
        assert_eq!(items[1].correlation["interaction_id"], 7);
        assert_eq!(items[1].correlation["question"]["options"], json!(["red"]));
        assert_eq!(items[2].role, Role::User);
    }

    #[test]
    fn a_run_that_ends_while_it_waits_ends_after_its_question() {
        let turn1 = "{\"ask_user\": {\"prompt\": \"Which colour?\"}}\n";
        let asked = [question(turn1.len() as u64, None)];
        let timed_out = RunEnd {
            warnings: Vec::new(),
            status: RunStatus::Failed,
            error_code: Some("INTERACTION_WAIT_TIMEOUT".into()),
            error_message: Some("No reply in time".into()),
            at: None,
        };
        let mut chat = Conversation::new("r1", Arc::new(ScriptEngine));
        let items = chat.advance(
            turn1.as_bytes(),
            true,
            Marks {
                asked: &asked,
                ..Default::default()
            },
            Some(&timed_out),
        );
        assert_eq!(
            summary(&items),
            vec![
                (1, 1, Kind::UserInputRequired, "Which colour?".into()),
                (
                    2,
                    1,
                    Kind::OrchestrationNotice,
                    "The run failed: No reply in time".into()
                ),
            ]
        );
        assert!(chat.ended());
    }

    #[test]
    fn a_log_read_past_a_question_splits_at_it() {
        let turn1 = "turn 1\n{\"ask_user\": {\"prompt\": \"Which colour?\"}}\n";
        let log = format!("{turn1}turn 2\n{{\"choice\": \"red\"}}\n");
        let asked = [question(turn1.len() as u64, Some(json!("red")))];
        let mut live = Conversation::new("r1", Arc::new(ScriptEngine));
        let mut items = live.advance(
            turn1.as_bytes(),
            false,
            Marks {
                asked: &asked[..0],
                ..Default::default()
            },
            None,
        );
        items.extend(live.advance(
            b"",
            false,
            Marks {
                asked: &asked,
                ..Default::default()
            },
            None,
        ));
        items.extend(live.advance(
            &log.as_bytes()[turn1.len()..],
            true,
            Marks {
                asked: &asked,
                ..Default::default()
            },
            Some(&succeeded()),
        ));
        let whole = Conversation::new("r1", Arc::new(ScriptEngine)).advance(
            log.as_bytes(),
            true,
            Marks {
                asked: &asked,
                ..Default::default()
            },
            Some(&succeeded()),
        );
        assert_eq!(whole, items);
        assert_eq!(whole[1].kind, Kind::UserInputRequired);
        assert_eq!(whole[3].text, "turn 2");
    }

    #[test]
    fn a_repair_round_supersedes_the_answer_before_it() {
        let log = "not json\n{\"summary\": 3}\n{\"summary\": \"ok\"}\n";
        let round = |round, offset| RepairRound {
            turn: 1,
            round,
            rounds: 3,
            stdout_offset: offset,
            problems: vec![format!("problem {round}")],
            started_at: Timestamp::now(),
        };
        let repairs = [round(1, 9), round(2, 24)];
        let whole = Conversation::new("r1", Arc::new(ScriptEngine)).advance(
            log.as_bytes(),
            true,
            Marks {
                repairs: &repairs,
                ..Default::default()
            },
            Some(&succeeded()),
        );
        let kinds: Vec<(Kind, &str)> = whole.iter().map(|i| (i.kind, i.text.as_str())).collect();
        assert_eq!(kinds[0], (Kind::AssistantMessage, "not json"));
        assert_eq!(kinds[1].0, Kind::OrchestrationNotice);
        assert!(kinds[1].1.contains("repair round 1 of 3") && kinds[1].1.contains("- problem 1"));
        assert_eq!(whole[1].correlation["repair_round"], 1);
        assert_eq!(kinds[2], (Kind::AssistantMessage, "{\"summary\": 3}"));
        assert_eq!(whole[3].correlation["repair_round"], 2);
        assert_eq!(kinds[4], (Kind::AssistantFinal, "{\"summary\": \"ok\"}"));
        assert_eq!(kinds.len(), 6);
        // A live reader meets each round only once the log reached it, with the same items.
        let mut live = Conversation::new("r1", Arc::new(ScriptEngine));
        let mut items = live.advance(
            &log.as_bytes()[..9],
            false,
            Marks {
                repairs: &repairs[..1],
                ..Default::default()
            },
            None,
        );
        items.extend(live.advance(
            &log.as_bytes()[9..30],
            false,
            Marks {
                repairs: &repairs,
                ..Default::default()
            },
            None,
        ));
        items.extend(live.advance(
            &log.as_bytes()[30..],
            true,
            Marks {
                repairs: &repairs,
                ..Default::default()
            },
            Some(&succeeded()),
        ));
        assert_eq!(items, whole);
    }

    /// Items of `log` read in pieces of `piece` bytes, as a live reader gets them.
    fn read_in_pieces(engine: Arc<dyn EngineAdapter>, log: &[u8], piece: usize) -> Vec<ChatItem> {
        let mut chat = Conversation::new("r1", engine);
        let mut items = Vec::new();
        for chunk in log.chunks(piece) {
            items.extend(chat.advance(chunk, false, Marks::default(), None));
        }
        items.extend(chat.advance(b"", true, Marks::default(), Some(&succeeded())));
        items
    }

    #[test]
    fn a_line_past_the_cap_is_its_preview_and_where_the_whole_is() {
        let long = "x".repeat(2 * 1024 * 1024);
        let exactly = "y".repeat(LINE_CAP);
        let log = format!("short\n{long}\r\n{exactly}\r\nlast without end {long}");
        let whole = read_in_pieces(Arc::new(ScriptEngine), log.as_bytes(), log.len());
        for piece in [64 * 1024, 4096, 1000] {
            assert_eq!(
                read_in_pieces(Arc::new(ScriptEngine), log.as_bytes(), piece),
                whole,
                "the same items whatever the reads' sizes ({piece})"
            );
        }
        let kinds: Vec<Kind> = whole.iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::AssistantMessage,
                Kind::AssistantMessage,
                Kind::AssistantMessage,
                Kind::AssistantFinal,
                Kind::OrchestrationNotice
            ]
        );
        let second = &whole[1];
        let from = "short\n".len() as u64;
        let to = from + long.len() as u64 + 2;
        assert_eq!(second.raw_ref, Some(stdout_ref(from, to)));
        assert!(second.text.starts_with(&"x".repeat(PREVIEW)));
        assert!(
            second.text.ends_with(&format!(
                "\n… cut: logs/stdout.txt bytes {from} to {to} hold the whole message"
            )),
            "{}",
            &second.text[PREVIEW..]
        );
        assert!(second.text.len() < PREVIEW + 100);
        assert_eq!(second.correlation["truncated"], json!(true));
        // A line of exactly the cap is parsed, and its message kept to the message cap.
        let (kept, _) = whole[2].text.split_once("\n… cut:").unwrap();
        assert_eq!(kept, &exactly[..MESSAGE_CAP]);
        // The last line, with no line end, is cut at the run's end.
        assert_eq!(whole[3].raw_ref.unwrap().byte_to, log.len() as u64);
        assert!(whole[3].text.starts_with("last without end xxx"));
        assert_eq!(whole[3].correlation["truncated"], json!(true));
    }

    #[test]
    fn a_long_message_keeps_its_first_bytes_and_a_json_engine_its_structure() {
        let text = "é".repeat(MESSAGE_CAP);
        let line = json!({"type": "item.completed",
            "item": {"id": "i", "type": "agent_message", "text": text}});
        let log = format!("{line}\n");
        let items = read_in_pieces(codex(), log.as_bytes(), 8192);
        let message = &items[0];
        assert_eq!(message.kind, Kind::AssistantFinal);
        let (kept, marker) = message.text.split_once("\n… cut:").unwrap();
        assert_eq!(
            kept,
            "é".repeat(MESSAGE_CAP / 2),
            "cut on a character boundary"
        );
        assert!(marker.contains(&format!("bytes 0 to {}", log.len())));
        assert_eq!(message.correlation["truncated"], json!(true));
    }

    #[test]
    fn streamed_text_is_one_message_and_a_cancel_leaves_it_unfinished() {
        let log = concat!(
            r#"{"type":"message","role":"user","content":"the prompt"}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":"Let me ","delta":true}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":"look.","delta":true}"#,
            "\n",
            r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t1","parameters":{"command":"ls"}}"#,
            "\n",
            r#"{"type":"tool_result","tool_id":"t1","status":"error","output":"denied"}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":"Stopping","delta":true}"#,
        );
        let gemini: Arc<dyn EngineAdapter> = Arc::new(Gemini {
            config: Arc::new(EngineConfig::for_tests()),
        });
        let canceled = RunEnd {
            warnings: Vec::new(),
            status: RunStatus::Canceled,
            ..succeeded()
        };
        let items = Conversation::new("r1", gemini).advance(
            log.as_bytes(),
            true,
            Marks::default(),
            Some(&canceled),
        );
        assert_eq!(
            summary(&items),
            vec![
                (1, 1, Kind::AssistantMessage, "Let me look.".into()),
                (2, 1, Kind::AssistantProcess, "run_shell_command".into()),
                (3, 1, Kind::AssistantProcess, "denied".into()),
                (4, 1, Kind::AssistantMessage, "Stopping".into()),
                (
                    5,
                    1,
                    Kind::OrchestrationNotice,
                    "The run was canceled.".into()
                ),
            ]
        );
        assert_eq!(
            items[1].correlation["details"]["arguments"]["command"],
            "ls"
        );
        assert_eq!(items[2].correlation["details"]["is_error"], true);
    }

    #[test]
    fn long_output_is_capped_on_a_character_boundary() {
        let text = "é".repeat(OUTPUT_CAP);
        let capped = capped(text);
        assert!(capped.len() < OUTPUT_CAP + 64);
        assert!(capped.ends_with(&format!("{} more bytes in logs/stdout.txt", OUTPUT_CAP)));
    }
}
