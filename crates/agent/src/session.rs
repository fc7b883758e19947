//! Agent sessions: each chat is an append-only event log, `<data>/sessions/<32 hex>/events.jsonl`
//! (one compact JSON event per line) beside `meta.json` (`{session_id, created_at, metadata}`),
//! in the event shapes of the openagentic SDK (`system.init`, `user.message`, `assistant.message`,
//! `tool.use`, `tool.result`, `result`, `runtime.error`, …).
//!
//! Every stored event has a `seq`, from 1 and strictly increasing across reopenings (a reopened
//! session continues after its last stored event) and a `ts` (seconds since the epoch).
//! `assistant.delta` events are streamed but never stored. One writer at a time: a [`Writer`]
//! holds an exclusive lock on the log file (a second one waits for it, see [`Store::writer`]).
//! On open, a last line without its line end (a crash in the middle of a write) is dropped and
//! cut from the file; a line that is not an event anywhere else is an error naming the line.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One event of a session, as stored (`seq` and `ts` beside its `type` and fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub seq: u64,
    pub ts: f64,
    #[serde(flatten)]
    pub event: Event,
}

/// What happened in a session. Unknown fields are ignored when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "system.init")]
    SystemInit {
        session_id: String,
        cwd: String,
        sdk_version: String,
    },
    #[serde(rename = "user.message")]
    UserMessage { text: String },
    #[serde(rename = "user.compaction")]
    UserCompaction { auto: bool, reason: String },
    #[serde(rename = "user.question")]
    UserQuestion {
        question_id: String,
        prompt: String,
        choices: Vec<String>,
    },
    /// A piece of the model's text as it streams; never stored.
    #[serde(rename = "assistant.delta")]
    AssistantDelta { text_delta: String },
    #[serde(rename = "assistant.message")]
    AssistantMessage {
        text: String,
        #[serde(default)]
        is_summary: bool,
    },
    #[serde(rename = "tool.use")]
    ToolUse {
        tool_use_id: String,
        name: String,
        input: Value,
    },
    #[serde(rename = "tool.result")]
    ToolResult {
        tool_use_id: String,
        output: Value,
        is_error: bool,
        #[serde(default)]
        error_type: Option<String>,
        #[serde(default)]
        error_message: Option<String>,
    },
    #[serde(rename = "tool.output_compacted")]
    ToolOutputCompacted {
        tool_use_id: String,
        #[serde(default)]
        original_chars: usize,
        #[serde(default)]
        kept_chars: usize,
    },
    #[serde(rename = "hook.event")]
    HookEvent {
        name: String,
        #[serde(default)]
        data: Map<String, Value>,
    },
    #[serde(rename = "result")]
    Result {
        final_text: String,
        session_id: String,
        stop_reason: String,
        #[serde(default)]
        usage: Option<Value>,
        #[serde(default)]
        response_id: Option<String>,
        #[serde(default)]
        provider_metadata: Option<Value>,
        #[serde(default)]
        steps: u32,
    },
    #[serde(rename = "runtime.error")]
    RuntimeError {
        phase: String,
        error_type: String,
        error_message: String,
        #[serde(default)]
        provider: Option<String>,
        #[serde(default)]
        tool_use_id: Option<String>,
    },
}

impl Event {
    /// Its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SystemInit { .. } => "system.init",
            Event::UserMessage { .. } => "user.message",
            Event::UserCompaction { .. } => "user.compaction",
            Event::UserQuestion { .. } => "user.question",
            Event::AssistantDelta { .. } => "assistant.delta",
            Event::AssistantMessage { .. } => "assistant.message",
            Event::ToolUse { .. } => "tool.use",
            Event::ToolResult { .. } => "tool.result",
            Event::ToolOutputCompacted { .. } => "tool.output_compacted",
            Event::HookEvent { .. } => "hook.event",
            Event::Result { .. } => "result",
            Event::RuntimeError { .. } => "runtime.error",
        }
    }

    /// Whether the event is kept in the log (deltas are only streamed).
    pub fn persisted(&self) -> bool {
        !matches!(self, Event::AssistantDelta { .. })
    }
}

impl Stored {
    /// The event as served to a reader: JSON with the values of secret-looking fields
    /// (`password`, `api_key`, `*_token`, …) replaced, wherever a tool's input or output put them.
    pub fn redacted(&self) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        skill_runner_types::secrets::redact(&mut value);
        value
    }
}

/// Why a session could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Not `^[0-9a-f]{32}$`.
    #[error("'{0}' is not a session id (32 lower-case hex digits)")]
    BadId(String),
    #[error("session {0} not found")]
    NotFound(String),
    /// A chat holds the session.
    #[error("session {0} is in use by a chat")]
    Busy(String),
    /// A stored line that is not an event (and not an unterminated last line).
    #[error("session {id}: line {line} of events.jsonl is not an event: {problem}")]
    Corrupt {
        id: String,
        line: usize,
        problem: String,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Whether `id` is a session id.
pub fn valid_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The sessions folder.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// A session's `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub session_id: String,
    pub created_at: String,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// The tenant of the chat that made it; absent (sessions made before tenants) is the
    /// default tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

impl Meta {
    /// Whether a caller seeing `tenant`'s sessions (every tenant's when `None`) sees this one.
    pub fn visible_to(&self, tenant: Option<&str>) -> bool {
        let own = self
            .tenant_id
            .as_deref()
            .unwrap_or(skill_runner_core::tenants::DEFAULT_TENANT);
        tenant.is_none_or(|t| t == own)
    }
}

impl Store {
    /// The sessions under `root` (`<data>/sessions`).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn dir(&self, id: &str) -> Result<PathBuf, SessionError> {
        if !valid_id(id) {
            return Err(SessionError::BadId(id.to_owned()));
        }
        Ok(self.root.join(id))
    }

    /// Starts a new session of `tenant_id` and returns its writer.
    pub fn create(
        &self,
        metadata: Map<String, Value>,
        tenant_id: &str,
    ) -> Result<Writer, SessionError> {
        std::fs::create_dir_all(&self.root)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.dir(&id)?;
        std::fs::create_dir_all(&dir)?;
        let meta = Meta {
            session_id: id.clone(),
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            metadata,
            tenant_id: Some(tenant_id.to_owned()),
        };
        let text = serde_json::to_vec_pretty(&meta).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("meta.json"), text)?;
        Ok(self.writer(&id)?.0)
    }

    /// The writer of session `id` and its events so far, once no other writer holds it (waits
    /// for the lock: call from a blocking thread).
    pub fn writer(&self, id: &str) -> Result<(Writer, Vec<Stored>), SessionError> {
        let dir = self.dir(id)?;
        if !dir.join("meta.json").is_file() {
            return Err(SessionError::NotFound(id.to_owned()));
        }
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(dir.join("events.jsonl"))?;
        file.lock()?;
        let (events, complete) = read_events(id, &file)?;
        if complete < file.metadata()?.len() {
            // A crash cut the last write short: that line never happened.
            file.set_len(complete)?;
        }
        let writer = Writer {
            id: id.to_owned(),
            next_seq: events.last().map_or(1, |e| e.seq + 1),
            file,
        };
        Ok((writer, events))
    }

    /// Every session's meta and when its log last changed, newest first. A folder that is not
    /// a readable session is skipped (and logged).
    pub fn list(&self) -> Result<Vec<(Meta, Option<SystemTime>)>, SessionError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut sessions = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            let Some(id) = name.to_str().filter(|id| valid_id(id)) else {
                continue;
            };
            match self.meta(id) {
                Ok(meta) => {
                    let changed = std::fs::metadata(self.root.join(id).join("events.jsonl"))
                        .and_then(|m| m.modified())
                        .ok();
                    sessions.push((meta, changed));
                }
                Err(e) => tracing::warn!(session_id = id, error = %e, "skipping a session"),
            }
        }
        sessions.sort_by(|a, b| {
            (&b.0.created_at, &b.0.session_id).cmp(&(&a.0.created_at, &a.0.session_id))
        });
        Ok(sessions)
    }

    /// Session `id`'s `meta.json`.
    pub fn meta(&self, id: &str) -> Result<Meta, SessionError> {
        let dir = self.dir(id)?;
        match std::fs::read(dir.join("meta.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| SessionError::Corrupt {
                id: id.to_owned(),
                line: 0,
                problem: format!("meta.json: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(SessionError::NotFound(id.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Removes session `id`, unless a chat holds it.
    pub fn delete(&self, id: &str) -> Result<(), SessionError> {
        let dir = self.dir(id)?;
        self.meta(id)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("events.jsonl"))?;
        if log.try_lock().is_err() {
            return Err(SessionError::Busy(id.to_owned()));
        }
        // Renamed first, so a chat opening it meanwhile finds no session rather than half of one.
        let doomed = self.root.join(format!(".deleted-{id}"));
        std::fs::rename(&dir, &doomed)?;
        drop(log);
        std::fs::remove_dir_all(&doomed)?;
        Ok(())
    }

    /// The stored events of session `id` after `after_seq` (all when 0), and its meta.
    pub fn read(&self, id: &str, after_seq: u64) -> Result<(Meta, Vec<Stored>), SessionError> {
        let dir = self.dir(id)?;
        let meta = self.meta(id)?;
        let events = match File::open(dir.join("events.jsonl")) {
            Ok(file) => read_events(id, &file)?.0,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        Ok((
            meta,
            events.into_iter().filter(|e| e.seq > after_seq).collect(),
        ))
    }
}

/// Every complete event of a log, and the length of its complete lines.
fn read_events(id: &str, file: &File) -> Result<(Vec<Stored>, u64), SessionError> {
    let mut reader = BufReader::new(file);
    reader.seek(SeekFrom::Start(0))?;
    let (mut events, mut complete, mut line) = (Vec::new(), 0u64, Vec::new());
    let mut number = 0;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 || line.last() != Some(&b'\n') {
            // The end, or an unterminated last line (dropped).
            return Ok((events, complete));
        }
        number += 1;
        let stored: Stored = serde_json::from_slice(&line).map_err(|e| SessionError::Corrupt {
            id: id.to_owned(),
            line: number,
            problem: e.to_string(),
        })?;
        if events
            .last()
            .is_some_and(|last: &Stored| stored.seq <= last.seq)
        {
            return Err(SessionError::Corrupt {
                id: id.to_owned(),
                line: number,
                problem: format!("seq {} does not follow the line before", stored.seq),
            });
        }
        events.push(stored);
        complete += read as u64;
    }
}

/// The one writer of a session's log, holding its lock until dropped.
#[derive(Debug)]
pub struct Writer {
    id: String,
    next_seq: u64,
    file: File,
}

impl Writer {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Records `event`: stored with the next `seq` and the time, or (a delta) only stamped.
    pub fn append(&mut self, event: Event) -> std::io::Result<Stored> {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if !event.persisted() {
            return Ok(Stored { seq: 0, ts, event });
        }
        let stored = Stored {
            seq: self.next_seq,
            ts,
            event,
        };
        let mut line = serde_json::to_vec(&stored).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write per line: a crash leaves at most an unterminated last line.
        self.file.write_all(&line)?;
        self.next_seq += 1;
        Ok(stored)
    }

    /// The `seq` the next stored event gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn log_path(root: &Path, id: &str) -> PathBuf {
        root.join(id).join("events.jsonl")
    }

    fn store() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path().join("sessions"));
        (tmp, store)
    }

    #[test]
    fn events_round_trip_and_unknown_fields_are_ignored() {
        let init = Stored {
            seq: 1,
            ts: 12.5,
            event: Event::SystemInit {
                session_id: "a".repeat(32),
                cwd: "/w".into(),
                sdk_version: "1".into(),
            },
        };
        let text = serde_json::to_string(&init).unwrap();
        assert!(text.contains(r#""type":"system.init""#), "{text}");
        assert_eq!(serde_json::from_str::<Stored>(&text).unwrap(), init);
        let result: Stored = serde_json::from_value(json!({
            "type": "result", "seq": 7, "ts": 1.0, "final_text": "hi", "session_id": "s",
            "stop_reason": "end", "steps": 2, "surprise": true
        }))
        .unwrap();
        assert_eq!(
            result.event,
            Event::Result {
                final_text: "hi".into(),
                session_id: "s".into(),
                stop_reason: "end".into(),
                usage: None,
                response_id: None,
                provider_metadata: None,
                steps: 2,
            }
        );
    }

    #[test]
    fn seq_continues_across_reopenings_and_deltas_are_never_stored() {
        let (tmp, store) = store();
        let mut writer = store.create(Map::new(), "default").unwrap();
        let id = writer.id().to_owned();
        writer
            .append(Event::UserMessage { text: "hi".into() })
            .unwrap();
        for n in 0..50 {
            let delta = writer
                .append(Event::AssistantDelta {
                    text_delta: format!("{n} "),
                })
                .unwrap();
            assert_eq!(delta.seq, 0);
        }
        writer
            .append(Event::AssistantMessage {
                text: "hello".into(),
                is_summary: false,
            })
            .unwrap();
        drop(writer);
        let mut writer = store.writer(&id).unwrap().0;
        let third = writer
            .append(Event::UserMessage {
                text: "again".into(),
            })
            .unwrap();
        assert_eq!(third.seq, 3);
        drop(writer);
        let (meta, events) = store.read(&id, 0).unwrap();
        assert_eq!(meta.session_id, id);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        let log = std::fs::read_to_string(log_path(&tmp.path().join("sessions"), &id)).unwrap();
        assert!(!log.contains("assistant.delta"), "{log}");
        assert_eq!(store.read(&id, 2).unwrap().1.len(), 1);
    }

    #[test]
    fn a_cut_last_line_is_dropped_and_a_bad_line_elsewhere_is_named() {
        let (tmp, store) = store();
        let mut writer = store.create(Map::new(), "default").unwrap();
        let id = writer.id().to_owned();
        writer
            .append(Event::UserMessage { text: "one".into() })
            .unwrap();
        drop(writer);
        let path = log_path(&tmp.path().join("sessions"), &id);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"type":"user.message","seq":2,"ts":1.0,"te"#)
            .unwrap();
        drop(file);
        assert_eq!(
            store.read(&id, 0).unwrap().1.len(),
            1,
            "the cut line is not an event"
        );
        let mut writer = store.writer(&id).unwrap().0;
        let next = writer
            .append(Event::UserMessage { text: "two".into() })
            .unwrap();
        assert_eq!(next.seq, 2, "the cut line never happened");
        drop(writer);
        let log = std::fs::read_to_string(&path).unwrap();
        assert_eq!(log.lines().count(), 2, "{log}");

        std::fs::write(&path, format!("not json\n{log}")).unwrap();
        let error = store.read(&id, 0).unwrap_err().to_string();
        assert!(error.contains("line 1 of events.jsonl"), "{error}");
    }

    #[test]
    fn ids_that_are_not_32_hex_digits_are_refused() {
        let (_tmp, store) = store();
        for id in ["../x", "ABCDEF0123456789abcdef0123456789", "abc", ""] {
            assert!(
                matches!(store.read(id, 0), Err(SessionError::BadId(_))),
                "{id}"
            );
        }
        assert!(matches!(
            store.read(&"0".repeat(32), 0),
            Err(SessionError::NotFound(_))
        ));
    }

    #[test]
    fn secrets_are_redacted_when_served_and_counts_are_kept() {
        let stored = Stored {
            seq: 3,
            ts: 1.0,
            event: Event::ToolUse {
                tool_use_id: "c".into(),
                name: "http".into(),
                input: json!({"api_key": "sk-1", "Auth-Token": "t", "nested": [{"password": 5}],
                              "input_tokens": 10, "query": "token"}),
            },
        };
        let served = stored.redacted();
        assert_eq!(
            served["input"],
            json!({"api_key": "[redacted]", "Auth-Token": "[redacted]",
                   "nested": [{"password": "[redacted]"}], "input_tokens": 10, "query": "token"})
        );
    }

    #[test]
    fn a_session_held_by_a_chat_is_not_deleted() {
        let (tmp, store) = store();
        let writer = store.create(Map::new(), "default").unwrap();
        let id = writer.id().to_owned();
        assert!(matches!(store.delete(&id), Err(SessionError::Busy(_))));
        drop(writer);
        store.delete(&id).unwrap();
        assert!(matches!(store.read(&id, 0), Err(SessionError::NotFound(_))));
        assert_eq!(
            std::fs::read_dir(tmp.path().join("sessions"))
                .unwrap()
                .count(),
            0
        );
        assert!(store.list().unwrap().is_empty());
    }

    #[test]
    fn a_second_writer_waits_for_the_first() {
        let (_tmp, store) = store();
        let mut first = store.create(Map::new(), "default").unwrap();
        let id = first.id().to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        let other = store.clone();
        let waiter = std::thread::spawn(move || {
            let mut second = other.writer(&id).unwrap().0;
            let stored = second
                .append(Event::UserMessage {
                    text: "second".into(),
                })
                .unwrap();
            tx.send(stored.seq).unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            rx.try_recv().is_err(),
            "the second writer got in while the first held the log"
        );
        first
            .append(Event::UserMessage {
                text: "first".into(),
            })
            .unwrap();
        drop(first);
        waiter.join().unwrap();
        assert_eq!(
            rx.recv().unwrap(),
            2,
            "the second continues after the first"
        );
    }
}
