//! A run's conversation over HTTP's two ways of reading it: the history so far
//! (`GET .../chat/history`, `.../events/history`) and a live stream (`GET .../chat`,
//! `.../events?cursor=`), all built by one [`Conversation`] from the run's stdout log and
//! questions (see [`crate::conversation`]), presented by a [`Projection`]: the chat items
//! themselves, or FCMP events made of them ([`super::fcmp`]).
//!
//! The stream sends `snapshot {status, cursor, pending_interaction_id}`, then each item or event
//! as `chat_event` (its SSE `id` is its `seq`), `heartbeat {ts}` after an idle interval, and
//! `end {reason}` once the run waits for a reply (`waiting_user`, after the question) or ended
//! (`terminal`, after the closing notice). `cursor` (or `Last-Event-ID`) is the last `seq` a
//! client has: the stream resumes after it. Both answer 404 until the request has a run, like
//! the event stream.

use std::sync::Arc;

use futures_util::Stream;
use serde_json::json;
use tokio::time::Instant;

use super::events::read_at;
use super::live::{StreamEvent, Wake};
use super::{Jobs, Scope};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::jobs::conversation::{ChatItem, Conversation, Marks, RunEnd};
use crate::jobs::fcmp::{Fcmp, FcmpEvent};
use crate::store::{AuthWait, Interaction, RepairRound, Run, RunStatus};
use skill_runner_types::engine::Engine;

/// Log bytes read at a time while catching up.
const READ_BYTES: usize = 64 * 1024;

/// Items one catching-up step gathers at most (plus what one read of the log holds), and log
/// bytes it reads at most: a stream whose client does not read holds one step's items (each
/// capped, see [`crate::jobs::conversation`]) and never a whole long conversation.
const STEP_ITEMS: usize = 256;
const STEP_BYTES: usize = 2 * READ_BYTES;

/// Items one `/chat/history` page holds at most.
pub const MAX_PAGE_ITEMS: usize = 1000;
/// Bytes of JSON one history page holds at most (past its first item): a page of 1,000 long
/// messages would be 64 MB.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// How a reader presents a run's conversation: as its items, or as events made of them.
pub trait Projection: Sized + Send + 'static {
    type Out: serde::Serialize + Send + 'static;
    fn new(run: &Run) -> Self;
    /// Takes in the run as just read, before the log.
    fn observe(&mut self, run: &Run);
    fn item(&mut self, item: &ChatItem, out: &mut Vec<Self::Out>);
    /// The items read so far are in: what the run said beside them shows now.
    fn caught_up(&mut self, out: &mut Vec<Self::Out>);
    fn seq(out: &Self::Out) -> u64;
    fn ts(out: &Self::Out) -> Option<Timestamp>;
}

/// The conversation items themselves (`.../chat`).
pub struct Items;

impl Projection for Items {
    type Out = ChatItem;
    fn new(_: &Run) -> Self {
        Items
    }
    fn observe(&mut self, _: &Run) {}
    fn item(&mut self, item: &ChatItem, out: &mut Vec<ChatItem>) {
        out.push(item.clone());
    }
    fn caught_up(&mut self, _: &mut Vec<ChatItem>) {}
    fn seq(out: &ChatItem) -> u64 {
        out.seq
    }
    fn ts(out: &ChatItem) -> Option<Timestamp> {
        out.created_at
    }
}

/// FCMP events (`.../events?cursor=`, `.../events/history`).
impl Projection for Fcmp {
    type Out = FcmpEvent;
    fn new(run: &Run) -> Self {
        Fcmp::new(run)
    }
    fn observe(&mut self, run: &Run) {
        Fcmp::observe(self, run);
    }
    fn item(&mut self, item: &ChatItem, out: &mut Vec<FcmpEvent>) {
        Fcmp::item(self, item, out);
    }
    fn caught_up(&mut self, out: &mut Vec<FcmpEvent>) {
        Fcmp::caught_up(self, out);
    }
    fn seq(out: &FcmpEvent) -> u64 {
        out.seq
    }
    fn ts(out: &FcmpEvent) -> Option<Timestamp> {
        Some(out.ts)
    }
}

/// The part of a history asked for; every bound is inclusive, and an item without a time
/// passes the time bounds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Range {
    pub from_seq: Option<u64>,
    pub to_seq: Option<u64>,
    pub from_ts: Option<Timestamp>,
    pub to_ts: Option<Timestamp>,
}

impl Range {
    fn holds(&self, seq: u64, ts: Option<Timestamp>) -> bool {
        self.from_seq.is_none_or(|from| seq >= from)
            && self.to_seq.is_none_or(|to| seq <= to)
            && ts.is_none_or(|ts| {
                self.from_ts.is_none_or(|from| ts >= from) && self.to_ts.is_none_or(|to| ts <= to)
            })
    }
}

/// A run's conversation so far.
#[derive(Debug)]
pub struct History<T> {
    pub run_id: String,
    pub status: RunStatus,
    /// The items in the asked range.
    pub items: Vec<T>,
    /// `seq` of the first and last item read (0 when none): the whole conversation's, unless
    /// the page filled up or `to_seq` was passed first.
    pub first_seq: u64,
    pub last_seq: u64,
    /// Items in the asked range follow the page (it holds `limit` of them).
    pub has_more: bool,
}

impl Jobs {
    /// The conversation of a request's run in `range`, as `P` presents it.
    pub async fn conversation_page<P: Projection>(
        &self,
        scope: &Scope,
        request_id: &str,
        range: Range,
        limit: usize,
    ) -> Result<History<P::Out>> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let mut conversation = self.conversation(&run)?;
        let mut projection = P::new(&run);
        let asked = self.store.interactions(&run.run_id).await?;
        let limit = limit.clamp(1, MAX_PAGE_ITEMS);
        let (mut page, mut page_bytes) = (Vec::new(), 0);
        let (mut first_seq, mut last_seq) = (None, 0);
        let (mut has_more, mut passed) = (false, false);
        let mut outs = Vec::new();
        projection.observe(&run);
        loop {
            let (items, more) = self.catch_up(&mut conversation, &run, &asked).await;
            for item in &items {
                projection.item(item, &mut outs);
            }
            projection.caught_up(&mut outs);
            for out in outs.drain(..) {
                let seq = P::seq(&out);
                first_seq.get_or_insert(seq);
                last_seq = seq;
                passed |= range.to_seq.is_some_and(|to| seq > to);
                if !range.holds(seq, P::ts(&out)) {
                    continue;
                }
                let bytes = json_len(&out);
                if page.len() == limit || (!page.is_empty() && page_bytes + bytes > MAX_PAGE_BYTES)
                {
                    has_more = true;
                } else {
                    page_bytes += bytes;
                    page.push(out);
                }
            }
            if has_more || passed || !more {
                break;
            }
        }
        Ok(History {
            run_id: run.run_id,
            status: run.status,
            items: page,
            first_seq: first_seq.unwrap_or(0),
            last_seq,
            has_more,
        })
    }

    /// The live conversation of a request's run as `P` presents it, after item `cursor`.
    pub async fn conversation_stream<P: Projection>(
        self: &Arc<Self>,
        scope: &Scope,
        request_id: &str,
        cursor: u64,
    ) -> Result<impl Stream<Item = StreamEvent> + Send + 'static> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let run_id = run.run_id.clone();
        // Subscribe before reading, so no change falls between a read and the wait.
        let mut subscription = self.feeds.subscribe(&run_id);
        let mut conversation = self.conversation(&run)?;
        let mut projection = P::new(&run);
        let heartbeat = self.config.limits.sse_heartbeat;
        let jobs = self.clone();
        Ok(async_stream::stream! {
            let mut sent = cursor;
            let mut last_event = Instant::now();
            yield StreamEvent {
                name: "snapshot",
                id: sent.to_string(),
                data: json!({
                    "status": run.status,
                    "cursor": cursor,
                    "pending_interaction_id": run.pending_interaction_id,
                }).into(),
            };
            let mut reread = true;
            let (mut run, mut asked) = (run, Vec::new());
            let mut outs = Vec::new();
            loop {
                // The run and its questions before the log: output written before a change of
                // either is in the log by the time the change is read.
                if reread {
                    let fresh = match jobs.store.run(&run_id).await {
                        Ok(Some(fresh)) => fresh,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::error!(run_id, error = format!("{e:#}"), "chat stream cannot read its run");
                            break;
                        }
                    };
                    match jobs.store.interactions(&run_id).await {
                        Ok(fresh) => asked = fresh,
                        Err(e) => {
                            tracing::error!(run_id, error = format!("{e:#}"), "chat stream cannot read the questions");
                            break;
                        }
                    }
                    run = fresh;
                    projection.observe(&run);
                }
                let (items, more) = jobs.catch_up(&mut conversation, &run, &asked).await;
                for item in &items {
                    projection.item(item, &mut outs);
                }
                projection.caught_up(&mut outs);
                for out in outs.drain(..) {
                    let seq = P::seq(&out);
                    if seq <= sent {
                        continue;
                    }
                    sent = seq;
                    last_event = Instant::now();
                    yield StreamEvent {
                        name: "chat_event",
                        id: sent.to_string(),
                        data: serde_json::to_value(&out).unwrap_or_default().into(),
                    };
                }
                if more {
                    // The rest of a long log, without waiting for news.
                    reread = false;
                    continue;
                }
                let reason = if conversation.ended() {
                    Some("terminal")
                } else if run.status == RunStatus::WaitingUser && conversation.awaits_reply() {
                    Some("waiting_user")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    yield StreamEvent::end(sent.to_string(), reason);
                    break;
                }
                match subscription.wait(last_event + heartbeat).await {
                    Wake::News { status } => reread = status,
                    Wake::Idle => {
                        reread = false;
                        last_event = Instant::now();
                        yield StreamEvent::heartbeat(sent.to_string());
                    }
                    Wake::Closed => break,
                }
            }
        })
    }

    fn conversation(&self, run: &Run) -> Result<Conversation> {
        let adapter = self
            .engines
            .get(run.engine)
            .ok_or_else(|| anyhow::anyhow!("no adapter for engine {}", run.engine.as_str()))?;
        Ok(Conversation::new(&run.run_id, adapter.clone()))
    }

    /// Reads the run's log from where `conversation` is, with `run` and `asked` read before
    /// it, until its end or [`STEP_ITEMS`] new items; returns them and whether the log holds
    /// more. A log that cannot be read gives what was read so far.
    async fn catch_up(
        &self,
        conversation: &mut Conversation,
        run: &Run,
        asked: &[Interaction],
    ) -> (Vec<ChatItem>, bool) {
        let end = run.status.is_terminal().then(|| RunEnd {
            status: run.status,
            error_code: run.error_code.clone(),
            error_message: run.error_message.clone(),
            warnings: run.warnings.clone(),
            at: run.finished_at.or(Some(run.updated_at)),
        });
        let path = self.folder(&run.run_id).stdout_log();
        let (mut items, mut read_bytes) = (Vec::new(), 0);
        loop {
            let (path, offset) = (path.clone(), conversation.log_read());
            let turn = self.feeds.read_turn().await;
            let read =
                tokio::task::spawn_blocking(move || read_at(&path, offset, READ_BYTES)).await;
            drop(turn);
            let bytes = match read {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(e)) => {
                    tracing::warn!(run_id = run.run_id, error = %e, "cannot read a run's stdout");
                    return (items, false);
                }
                Err(e) => {
                    tracing::error!(error = %e, "log reader panicked");
                    return (items, false);
                }
            };
            let at_end = bytes.len() < READ_BYTES;
            read_bytes += bytes.len();
            let Some(after) = self.read_after_log(run).await else {
                return (items, false);
            };
            let marks = Marks {
                asked: after.asked.as_deref().unwrap_or(asked),
                repairs: &after.repairs,
                waits: &after.waits,
            };
            items.extend(conversation.advance(&bytes, at_end, marks, end.as_ref()));
            if at_end {
                return (items, false);
            }
            if items.len() >= STEP_ITEMS || read_bytes >= STEP_BYTES {
                return (items, true);
            }
        }
    }
}

/// What is read of a run after its log ([`Marks`]).
struct AfterLog {
    repairs: Vec<RepairRound>,
    waits: Vec<AuthWait>,
    /// The questions again, when the run waited for a login: one asked before the wait must
    /// not be missing beside it.
    asked: Option<Vec<Interaction>>,
}

impl Jobs {
    /// The repair rounds and waits for a login of `run`, read after its log (a script runs no
    /// agent: it has none); `None` when the store cannot be read.
    async fn read_after_log(&self, run: &Run) -> Option<AfterLog> {
        if run.engine == Engine::Script {
            return Some(AfterLog {
                repairs: Vec::new(),
                waits: Vec::new(),
                asked: None,
            });
        }
        let read = async {
            let repairs = self.store.repair_rounds(&run.run_id).await?;
            let waits = self.store.auth_waits(&run.run_id).await?;
            let asked = match waits.is_empty() {
                true => None,
                false => Some(self.store.interactions(&run.run_id).await?),
            };
            anyhow::Ok(AfterLog {
                repairs,
                waits,
                asked,
            })
        };
        match read.await {
            Ok(after) => Some(after),
            Err(e) => {
                tracing::warn!(
                    run_id = run.run_id,
                    error = format!("{e:#}"),
                    "cannot read a run's repair rounds and waits"
                );
                None
            }
        }
    }
}

/// The length of `value` as JSON, counted without building it.
fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
