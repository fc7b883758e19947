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
//!
//! Among nodes, a turn another node runs is read from that node's own stream ([`super::relay`]):
//! the stream a client opened relays its events, ids unchanged, and reads the run again if
//! that node goes away.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::Stream;
use serde_json::json;
use tokio::time::Instant;

use super::live::{EventData, Feeds, RunFeed, StreamEvent, Subscription, Wake};
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

    pub(crate) fn event_id(self) -> String {
        format!("{}:{}", self.stdout, self.stderr)
    }
}

/// How often a stream reads a run again when its turn may start on another node, which wakes
/// no one here.
const ELSEWHERE_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// What a stream has shown of the run's state (read back from a relayed `status` event too).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
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
        scope: &Scope,
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
        let mut stdout = Cursor::open(folder.stdout_log(), from.stdout, 0).await;
        let mut stderr = Cursor::open(folder.stderr_log(), from.stderr, 1).await;
        let heartbeat = self.config.limits.sse_heartbeat;
        let among_nodes = self.store.cluster().is_some();
        let request_id = request_id.to_owned();
        let scope = scope.clone();
        let jobs = self.clone();
        Ok(async_stream::stream! {
            // Counted while the stream lives: it is dropped when its client goes away.
            let _subscriber = super::telemetry::Subscriber::open();
            // Offsets into logs that are on another node stay as asked: that node's stream
            // resumes there.
            let mut sent = if among_nodes && !folder.is_here().await {
                from
            } else {
                Offsets { stdout: stdout.offset, stderr: stderr.offset }
            };
            let mut last_event = Instant::now();
            yield StreamEvent {
                name: "snapshot",
                id: sent.event_id(),
                data: json!({
                    "status": run.status,
                    "stdout_offset": sent.stdout,
                    "stderr_offset": sent.stderr,
                    "pending_interaction_id": run.pending_interaction_id,
                }).into(),
            };
            // A run already settled still gets its status event after the rest of its output,
            // so every stream ends with the final output, the status, then `end` (a client that
            // reconnects between that status and `end` sees it again).
            let mut shown = (!Shown::of(&run).settled()).then(|| Shown::of(&run));
            let mut reread = false;
            let mut relayed_once = false;
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
                // Among nodes, a run whose folder is not here may run (or have run) elsewhere;
                // a settled run's holder is asked once.
                let elsewhere = among_nodes && !folder.is_here().await;
                if elsewhere && run.turn > 0 && !(settled && relayed_once)
                    && let Some(node) = jobs.holder_elsewhere(&run_id).await
                {
                    relayed_once = true;
                    let upstream = jobs.relayed(&node, &run_id, (&scope, &request_id), sent).await;
                    let mut upstream = std::pin::pin!(upstream);
                    while let Some(event) = futures_util::StreamExt::next(&mut upstream).await {
                        if let Some(offsets) = Offsets::from_event_id(&event.id) {
                            sent = offsets;
                        }
                        if event.name == "status" && let EventData::Text(data) = &event.data {
                            shown = serde_json::from_str(data).ok().or(shown);
                        }
                        let end = event.name == "end";
                        last_event = Instant::now();
                        yield event;
                        if end {
                            return;
                        }
                    }
                    // The service stopping ends a relayed stream too.
                    if jobs.feeds.is_closed() {
                        return;
                    }
                    // The holder's stream broke off (or never opened): read the run again and
                    // carry on from what was sent.
                    tokio::time::sleep(ELSEWHERE_POLL).await;
                    reread = true;
                    continue;
                }
                // Held by no live node: a settled run's copy in shared storage serves.
                if elsewhere && settled && run.turn > 0 && jobs.bring_back(&run_id).await {
                    stdout = Cursor::open(folder.stdout_log(), sent.stdout, 0).await;
                    stderr = Cursor::open(folder.stderr_log(), sent.stderr, 1).await;
                }
                let (out, out_more) = stdout.read(settled, &jobs.feeds, &subscription).await;
                let (err, err_more) = stderr.read(settled, &jobs.feeds, &subscription).await;
                for (name, chunks) in [("stdout", out), ("stderr", err)] {
                    for chunk in chunks {
                        if name == "stdout" { sent.stdout = chunk.to } else { sent.stderr = chunk.to }
                        last_event = Instant::now();
                        yield StreamEvent {
                            name,
                            id: sent.event_id(),
                            data: EventData::Text(chunk.data),
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
                            // A failed attempt tried again: the run waits queued until then.
                            "current_attempt": run.turn,
                            "next_attempt_at": (run.status == RunStatus::Queued && run.retries > 0)
                                .then_some(run.not_before).flatten(),
                        }).into(),
                    };
                }
                if let Some(shown) = shown.as_ref().filter(|s| s.settled()) {
                    let reason = if shown.status == RunStatus::WaitingUser { "waiting_user" } else { "terminal" };
                    yield StreamEvent::end(sent.event_id(), reason);
                    break;
                }
                // A run that may move on another node wakes no one here: it is read again
                // soon, and at each heartbeat.
                let heartbeat_due = last_event + heartbeat;
                let until = if elsewhere && !settled { heartbeat_due.min(Instant::now() + ELSEWHERE_POLL) } else { heartbeat_due };
                match subscription.wait(until).await {
                    Wake::News { status } => reread = status,
                    Wake::Idle if Instant::now() < heartbeat_due => reread = true,
                    Wake::Idle => {
                        reread = among_nodes;
                        last_event = Instant::now();
                        yield StreamEvent::heartbeat(sent.event_id());
                    }
                    Wake::Closed => break,
                }
            }
        })
    }

    /// `node`'s own events of the run from `from` on: they end with its stream, when that
    /// breaks off (logged) or when this service stops.
    async fn relayed(
        self: &Arc<Self>,
        node: &crate::store::NodeAddress,
        run_id: &str,
        target: (&Scope, &str),
        from: Offsets,
    ) -> impl Stream<Item = StreamEvent> + use<> {
        use futures_util::StreamExt as _;
        let secret = self
            .store
            .cluster()
            .map(|c| c.secret().to_owned())
            .unwrap_or_default();
        let heartbeat = self.config.limits.sse_heartbeat;
        let opened = self
            .relay
            .events(node, &secret, heartbeat, target, from)
            .await;
        let (run_id, node_id) = (run_id.to_owned(), node.id.clone());
        let jobs = self.clone();
        async_stream::stream! {
            let upstream = match opened {
                Ok(upstream) => upstream,
                Err(e) => {
                    tracing::debug!(run_id, node = node_id, error = format!("{e:#}"), "cannot relay the event stream");
                    return;
                }
            };
            let mut upstream = std::pin::pin!(upstream);
            loop {
                let event = tokio::select! {
                    event = upstream.next() => event,
                    () = jobs.feeds.closed() => return,
                };
                match event {
                    Some(Ok(event)) => yield event,
                    None => return,
                    Some(Err(e)) => {
                        tracing::debug!(run_id, node = node_id, error = format!("{e:#}"), "relayed event stream broke off");
                        return;
                    }
                }
            }
        }
    }

    /// The node holding `run_id`'s folder, when it is another live node.
    async fn holder_elsewhere(&self, run_id: &str) -> Option<crate::store::NodeAddress> {
        let cluster = self.store.cluster()?;
        match cluster.holder(run_id).await {
            Ok(node) => node.filter(|n| n.id != cluster.node_id()),
            Err(e) => {
                tracing::warn!(
                    run_id,
                    error = format!("{e:#}"),
                    "cannot tell which node holds the run"
                );
                None
            }
        }
    }
}

/// A piece of a log, its event data serialized once (`{from, to, chunk}`).
#[derive(Debug, Clone, PartialEq)]
struct Chunk {
    from: u64,
    to: u64,
    data: Arc<str>,
}

/// Most bytes of serialized chunks a watched run keeps per log for its streams; a stream
/// further behind reads the file on its own.
const SHARED_BYTES: usize = 1 << 20;

/// The chunks of one log that a run's streams sent last, contiguous up to `end`.
#[derive(Debug, Default)]
pub(super) struct SharedLog {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    /// Where the next chunk starts.
    end: u64,
    /// How far the last shared read went: beyond `end` when it ended inside a character.
    read_to: u64,
    /// The output tick before the last shared read that reached the end of the file: what was
    /// written before it is in the chunks. `None` before the first.
    complete_at: Option<u64>,
    /// A stream is reading the next chunks for the others.
    reading: bool,
}

impl SharedLog {
    /// The chunks from `offset` on (one starts there), up to `max` bytes of log.
    fn from(&self, offset: u64, max: usize) -> Vec<Chunk> {
        // Contiguous, so ordered by where they start.
        let Ok(first) = self.chunks.binary_search_by_key(&offset, |c| c.from) else {
            return Vec::new();
        };
        let limit = offset + max as u64;
        self.chunks
            .range(first..)
            .take_while(|c| c.to <= limit)
            .cloned()
            .collect()
    }

    fn add(&mut self, chunks: &[Chunk], read_to: u64) {
        for chunk in chunks {
            self.bytes += chunk.data.len();
            self.chunks.push_back(chunk.clone());
            self.end = chunk.to;
        }
        self.read_to = read_to;
        while self.bytes > SHARED_BYTES
            && let Some(old) = self.chunks.pop_front()
        {
            self.bytes -= old.data.len();
        }
    }
}

/// What the shared chunks hold for a stream.
enum Shared {
    /// Its next chunks (or that there are none), and whether more is left.
    Taken(Vec<Chunk>, bool),
    /// Nothing from its offset: it reads on its own, up to the shared chunks `gap` bytes ahead.
    Behind(Option<u64>),
    /// It is where they end and there may be news: its read is the shared one.
    AtEnd,
    /// It is where they end and another stream reads on: it waits for that read.
    Wait,
}

/// The turn of the stream reading a log for the others; ending it wakes them.
struct ReadTurn<'a> {
    feed: &'a RunFeed,
    log: usize,
}

impl Drop for ReadTurn<'_> {
    fn drop(&mut self) {
        self.feed.logs.lock().expect("shared logs lock")[self.log].reading = false;
        self.feed.read[self.log].notify_waiters();
    }
}

/// A stream's read position in one log.
#[derive(Debug)]
struct Cursor {
    path: PathBuf,
    offset: u64,
    /// Which of the run's shared logs (0 stdout, 1 stderr).
    log: usize,
}

impl Cursor {
    /// Starts at `offset`, or at the end of the log when it is shorter.
    async fn open(path: PathBuf, offset: u64, log: usize) -> Self {
        let len = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
        Self {
            offset: offset.min(len),
            path,
            log,
        }
    }

    /// The chunks appended since the last read, and whether more is left to read. Without
    /// `settled`, an incomplete character at the end waits for its remaining bytes.
    ///
    /// A stream at the end of what the run's streams share takes the next chunks from there,
    /// or reads them from the file for all of them (one reads, the others wait for it); a stream
    /// behind the shared chunks (or between two) reads the file on its own, up to where they
    /// end, and joins them there.
    async fn read(
        &mut self,
        settled: bool,
        feeds: &Feeds,
        subscription: &Subscription,
    ) -> (Vec<Chunk>, bool) {
        let tick = subscription.output_tick();
        let feed = subscription.feed();
        let gap = loop {
            // Armed before the look, so a read that ends right after it still wakes this one.
            let done = feed.read[self.log].notified();
            tokio::pin!(done);
            done.as_mut().enable();
            match self.shared(feed, settled, tick) {
                Shared::Taken(chunks, more) => return (chunks, more),
                Shared::Behind(gap) => break gap,
                Shared::Wait => done.await,
                Shared::AtEnd => {
                    // Whatever happens to this read (its client may go away), the others go on.
                    let _turn = ReadTurn {
                        feed,
                        log: self.log,
                    };
                    let (chunks, more, read_to) = self.read_file(READ_BYTES, settled, feeds).await;
                    let mut logs = feed.logs.lock().expect("shared logs lock");
                    let shared = &mut logs[self.log];
                    shared.add(&chunks, read_to);
                    if !more {
                        shared.complete_at = Some(tick);
                    }
                    return (chunks, more);
                }
            }
        };
        // Up to the shared chunks, if they are ahead: from there on this stream shares them.
        let max = match gap {
            Some(gap) if gap > 0 => READ_BYTES.min(gap as usize),
            _ => READ_BYTES,
        };
        let (chunks, more, _) = self.read_file(max, settled, feeds).await;
        // Reached the shared chunks: the next read takes them (unless this read stopped short
        // of them, before a character the shared ones already decoded as settled).
        let joined = !chunks.is_empty() && max < READ_BYTES;
        (chunks, more || joined)
    }

    /// What the shared chunks hold for this stream at output tick `tick`.
    fn shared(&mut self, feed: &RunFeed, settled: bool, tick: u64) -> Shared {
        let mut logs = feed.logs.lock().expect("shared logs lock");
        let shared = &mut logs[self.log];
        if shared.complete_at.is_none() && shared.chunks.is_empty() {
            // The first read of this log: the shared chunks start where this stream is.
            (shared.end, shared.read_to) = (self.offset, self.offset);
        }
        // Nothing written since the last shared read, and no held-back character to decode.
        let complete = |shared: &SharedLog| {
            shared.complete_at.is_some_and(|at| at >= tick)
                && !(settled && shared.read_to > shared.end)
        };
        let hits = shared.from(self.offset, READ_BYTES);
        if let Some(last) = hits.last() {
            self.offset = last.to;
            let more = !(self.offset == shared.end && complete(shared));
            return Shared::Taken(hits, more);
        }
        if self.offset != shared.end {
            return Shared::Behind(shared.end.checked_sub(self.offset));
        }
        if complete(shared) {
            return Shared::Taken(Vec::new(), false);
        }
        if shared.reading {
            return Shared::Wait;
        }
        shared.reading = true;
        Shared::AtEnd
    }

    /// Up to `max` bytes from this stream's offset, as chunks; whether the read was cut at
    /// `max`, and how far it reached.
    async fn read_file(
        &mut self,
        max: usize,
        settled: bool,
        feeds: &Feeds,
    ) -> (Vec<Chunk>, bool, u64) {
        let (path, offset) = (self.path.clone(), self.offset);
        let turn = feeds.read_turn().await;
        let read = tokio::task::spawn_blocking(move || read_at(&path, offset, max)).await;
        drop(turn);
        let bytes = match read {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot read a log");
                return (Vec::new(), false, offset);
            }
            Err(e) => {
                tracing::error!(error = %e, "log reader panicked");
                return (Vec::new(), false, offset);
            }
        };
        let more = bytes.len() == max;
        let read_to = offset + bytes.len() as u64;
        let (pieces, _) = utf8_chunks(&bytes, CHUNK_BYTES, settled && !more);
        let mut chunks = Vec::with_capacity(pieces.len());
        for (len, text) in pieces {
            let from = self.offset;
            self.offset += len as u64;
            let data = json!({"from": from, "to": self.offset, "chunk": text}).to_string();
            chunks.push(Chunk {
                from,
                to: self.offset,
                data: data.into(),
            });
        }
        (chunks, more, read_to)
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

    /// The text of `chunks`, joined, and where they end.
    fn joined(chunks: &[Chunk]) -> String {
        chunks
            .iter()
            .map(|c| {
                serde_json::from_str::<serde_json::Value>(&c.data).unwrap()["chunk"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    #[tokio::test]
    async fn streams_share_what_one_of_them_read_and_a_stream_behind_catches_up_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.txt");
        let text = "añ€😀 line\n".repeat(8000);
        std::fs::write(&path, &text).unwrap();
        let feeds = Feeds::new();
        let subscription = feeds.subscribe("r1");
        let mut first = Cursor::open(path.clone(), 0, 0).await;
        let mut second = Cursor::open(path.clone(), 0, 0).await;
        // Resumed from an offset inside the first chunk (a character starts there).
        let mut late = Cursor::open(path.clone(), 6, 0).await;
        let (a, more) = first.read(false, &feeds, &subscription).await;
        assert!(more, "{} bytes is more than one read", text.len());
        let (b, _) = second.read(false, &feeds, &subscription).await;
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter().zip(&b).all(|(x, y)| Arc::ptr_eq(&x.data, &y.data)),
            "the second stream sends the chunks the first one read and serialized"
        );
        let mut seen = (String::new(), 6);
        loop {
            let (chunks, more) = late.read(true, &feeds, &subscription).await;
            seen.0 += &joined(&chunks);
            if !more {
                break;
            }
            // Every other stream moves on too: the shared chunks grow ahead of this one.
            first.read(false, &feeds, &subscription).await;
        }
        seen.1 = late.offset;
        assert_eq!(seen.1, text.len() as u64);
        assert_eq!(
            seen.0,
            text[6..],
            "the resumed stream got every byte from its offset"
        );
        let logs = subscription.feed().logs.lock().unwrap();
        assert!(
            logs[0].bytes <= SHARED_BYTES + CHUNK_BYTES * 2,
            "the shared chunks are bounded"
        );
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
