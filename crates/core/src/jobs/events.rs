//! The live event stream of a run (`GET .../events`).
//!
//! Events, in the reference's names: `snapshot` first (`status`, `stdout_offset`,
//! `stderr_offset`, `pending_interaction_id`), then `stdout` / `stderr` chunks
//! `{from, to, chunk}` with byte offsets into `logs/stdout.txt` and `logs/stderr.txt`, `status`
//! on every change, `heartbeat` after an idle interval, and `end {reason}` once the run waits
//! for its user (`waiting_user`) or ended (`terminal`), after its final output and status.
//!
//! The log files are the only copy of the output: a stream reads them from its offsets and
//! waits on [`super::live`] for news, so a stream that falls behind reads what it missed from
//! the file and never holds anything up. A chunk never ends inside a multi-byte UTF-8 character
//! (the rest follows in the next chunk), so concatenating the chunks gives exactly the file's
//! bytes. Every event carries `id: <stdout_offset>:<stderr_offset>`, the offsets a client has
//! received up to and including it, so `Last-Event-ID` resumes a stream like the
//! `stdout_from` / `stderr_from` parameters do.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::Stream;
use serde_json::json;
use tokio::time::Instant;

use super::live::{Feeds, StreamEvent, Wake};
use super::{Jobs, Scope};
use crate::error::Result;
use crate::store::{Run, RunStatus};

/// The largest `chunk` of one event, in bytes.
const CHUNK_BYTES: usize = 8 * 1024;
/// Bytes read from one log before the stream yields them and reads on; bounds what a stream
/// holds in memory while its client is slow.
const READ_BYTES: usize = 64 * 1024;

/// Where a stream starts (or resumes) in the two logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offsets {
    pub stdout: u64,
    pub stderr: u64,
}

impl Offsets {
    /// Reads an event id (`<stdout>:<stderr>`) as sent in `Last-Event-ID`.
    pub fn from_event_id(id: &str) -> Option<Self> {
        let (stdout, stderr) = id.trim().split_once(':')?;
        Some(Self {
            stdout: stdout.parse().ok()?,
            stderr: stderr.parse().ok()?,
        })
    }

    fn event_id(self) -> String {
        format!("{}:{}", self.stdout, self.stderr)
    }
}

/// What a stream has shown of the run's state.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    status: RunStatus,
    pending_interaction_id: Option<u64>,
}

impl Shown {
    fn of(run: &Run) -> Self {
        Self {
            status: run.status,
            pending_interaction_id: run.pending_interaction_id,
        }
    }

    /// No more output or status changes will come until the user acts.
    fn settled(&self) -> bool {
        self.status.is_terminal() || self.status == RunStatus::WaitingUser
    }
}

impl Jobs {
    /// The event stream of a request's run from `from`; 404 before the run exists.
    pub async fn events(
        self: &Arc<Self>,
        scope: Scope,
        request_id: &str,
        from: Offsets,
    ) -> Result<impl Stream<Item = StreamEvent> + Send + 'static> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let run_id = run.run_id;
        // Subscribe before reading the run, so no change falls between the read and the wait.
        let mut subscription = self.feeds.subscribe(&run_id);
        let mut run = self
            .store
            .run(&run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("run {run_id} vanished"))?;
        let folder = self.folder(&run_id);
        let mut stdout = Cursor::open(folder.stdout_log(), from.stdout).await;
        let mut stderr = Cursor::open(folder.stderr_log(), from.stderr).await;
        let heartbeat = self.config.limits.sse_heartbeat;
        let jobs = self.clone();
        Ok(async_stream::stream! {
            // Counted while the stream lives: it is dropped when its client goes away.
            let _subscriber = super::telemetry::Subscriber::open();
            let mut sent = Offsets { stdout: stdout.offset, stderr: stderr.offset };
            let mut last_event = Instant::now();
            yield StreamEvent {
                name: "snapshot",
                id: sent.event_id(),
                data: json!({
                    "status": run.status,
                    "stdout_offset": sent.stdout,
                    "stderr_offset": sent.stderr,
                    "pending_interaction_id": run.pending_interaction_id,
                }),
            };
            // A run already settled still gets its status event after the rest of its output,
            // so every stream ends with the final output, the status, then `end` (a client that
            // reconnects between that status and `end` sees it again).
            let mut shown = (!Shown::of(&run).settled()).then(|| Shown::of(&run));
            let mut reread = false;
            loop {
                // Status before output: output written before a status change is in the file
                // by the time the change is read, so it goes out first.
                if reread {
                    match jobs.store.run(&run_id).await {
                        Ok(Some(fresh)) => run = fresh,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::error!(run_id, error = format!("{e:#}"), "event stream cannot read its run");
                            break;
                        }
                    }
                }
                let current = Shown::of(&run);
                let settled = current.settled();
                let (out, out_more) = stdout.read(settled, &jobs.feeds).await;
                let (err, err_more) = stderr.read(settled, &jobs.feeds).await;
                for (name, chunks) in [("stdout", out), ("stderr", err)] {
                    for chunk in chunks {
                        if name == "stdout" { sent.stdout = chunk.to } else { sent.stderr = chunk.to }
                        last_event = Instant::now();
                        yield StreamEvent {
                            name,
                            id: sent.event_id(),
                            data: json!({"from": chunk.from, "to": chunk.to, "chunk": chunk.text}),
                        };
                    }
                }
                if out_more || err_more {
                    reread = false;
                    continue;
                }
                if shown.as_ref() != Some(&current) {
                    shown = Some(current);
                    last_event = Instant::now();
                    yield StreamEvent {
                        name: "status",
                        id: sent.event_id(),
                        data: json!({
                            "status": run.status,
                            "updated_at": run.updated_at,
                            "error_code": run.error_code,
                            "pending_interaction_id": run.pending_interaction_id,
                        }),
                    };
                }
                if let Some(shown) = shown.as_ref().filter(|s| s.settled()) {
                    let reason = if shown.status == RunStatus::WaitingUser { "waiting_user" } else { "terminal" };
                    yield StreamEvent::end(sent.event_id(), reason);
                    break;
                }
                match subscription.wait(last_event + heartbeat).await {
                    Wake::News { status } => reread = status,
                    Wake::Idle => {
                        reread = false;
                        last_event = Instant::now();
                        yield StreamEvent::heartbeat(sent.event_id());
                    }
                    Wake::Closed => break,
                }
            }
        })
    }
}

/// A piece of a log.
#[derive(Debug, Clone, PartialEq)]
struct Chunk {
    from: u64,
    to: u64,
    text: String,
}

/// A stream's read position in one log.
#[derive(Debug)]
struct Cursor {
    path: PathBuf,
    offset: u64,
}

impl Cursor {
    /// Starts at `offset`, or at the end of the log when it is shorter.
    async fn open(path: PathBuf, offset: u64) -> Self {
        let len = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
        Self {
            offset: offset.min(len),
            path,
        }
    }

    /// The chunks appended since the last read, and whether more is left to read. Without
    /// `settled`, an incomplete character at the end waits for its remaining bytes.
    async fn read(&mut self, settled: bool, feeds: &Feeds) -> (Vec<Chunk>, bool) {
        let (path, offset) = (self.path.clone(), self.offset);
        let turn = feeds.read_turn().await;
        let read = tokio::task::spawn_blocking(move || read_at(&path, offset, READ_BYTES)).await;
        drop(turn);
        let bytes = match read {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot read a log");
                return (Vec::new(), false);
            }
            Err(e) => {
                tracing::error!(error = %e, "log reader panicked");
                return (Vec::new(), false);
            }
        };
        let more = bytes.len() == READ_BYTES;
        let (pieces, _) = utf8_chunks(&bytes, CHUNK_BYTES, settled && !more);
        let mut chunks = Vec::with_capacity(pieces.len());
        for (len, text) in pieces {
            let from = self.offset;
            self.offset += len as u64;
            chunks.push(Chunk {
                from,
                to: self.offset,
                text,
            });
        }
        (chunks, more)
    }
}

/// Up to `max` bytes of `path` from `offset`; nothing when the file does not exist yet.
pub(super) fn read_at(path: &std::path::Path, offset: u64, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match crate::run_folder::open_plain(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.take(max as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Splits `bytes` into pieces of at most `max` bytes (`max` >= 4) that end on character
/// boundaries, as `(byte length, text)`. An incomplete character at the very end is left out
/// unless `last`, when it is decoded lossily; invalid bytes elsewhere are decoded lossily too.
/// Returns the pieces and the bytes they cover.
fn utf8_chunks(bytes: &[u8], max: usize, last: bool) -> (Vec<(usize, String)>, usize) {
    let mut pieces = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let end = (pos + max).min(bytes.len());
        let tail = incomplete_tail(&bytes[pos..end]);
        let cut = if tail > 0 && (end < bytes.len() || !last) {
            end - tail
        } else {
            end
        };
        if cut == pos {
            break;
        }
        pieces.push((
            cut - pos,
            String::from_utf8_lossy(&bytes[pos..cut]).into_owned(),
        ));
        pos = cut;
    }
    (pieces, pos)
}

/// Length of a character at the end of `bytes` that still misses bytes (0 when none).
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let needs = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if needs > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_never_split_a_character() {
        let text = "añ€😀".repeat(100);
        let bytes = text.as_bytes();
        for max in [4, 5, 7, 8, 13] {
            let (pieces, used) = utf8_chunks(bytes, max, false);
            assert_eq!(used, bytes.len());
            assert!(pieces.iter().all(|(len, _)| *len <= max));
            let joined: String = pieces.iter().map(|(_, t)| t.as_str()).collect();
            assert_eq!(joined, text, "max {max}");
        }
    }

    #[test]
    fn an_incomplete_character_waits_unless_last() {
        let bytes = "ab€".as_bytes();
        let partial = &bytes[..3];
        assert_eq!(utf8_chunks(partial, 8, false), (vec![(2, "ab".into())], 2));
        assert_eq!(utf8_chunks(&partial[2..], 8, false), (vec![], 0));
        let (pieces, used) = utf8_chunks(partial, 8, true);
        assert_eq!(used, 3);
        assert_eq!(pieces[0].1, "ab\u{fffd}");
        // Invalid bytes in the middle do not stall the stream.
        let (pieces, used) = utf8_chunks(b"a\xffb", 8, false);
        assert_eq!((pieces[0].1.as_str(), used), ("a\u{fffd}b", 3));
    }

    #[test]
    fn event_ids_round_trip() {
        let o = Offsets {
            stdout: 12,
            stderr: 3,
        };
        assert_eq!(Offsets::from_event_id(&o.event_id()), Some(o));
        assert_eq!(Offsets::from_event_id("12"), None);
        assert_eq!(Offsets::from_event_id("a:1"), None);
    }
}
