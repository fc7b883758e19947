//! A run's conversation over HTTP's two ways of reading it: the history so far
//! (`GET .../chat/history`) and a live stream (`GET .../chat`), both built by one
//! [`Conversation`] from the run's stdout log and questions (see [`crate::conversation`]).
//!
//! The stream sends `snapshot {status, cursor}`, then each item as `chat_event` (its SSE `id`
//! is its `seq`), `heartbeat {ts}` after an idle interval, and `end {reason}` once the run waits
//! for a reply (`waiting_user`, after the question) or ended (`terminal`, after the closing
//! notice). `cursor` (or `Last-Event-ID`) is the last `seq` a client has: the stream resumes
//! after it. Both answer 404 until the request has a run, like the event stream.

use std::sync::Arc;

use futures_util::Stream;
use serde_json::json;
use tokio::time::Instant;

use super::events::read_at;
use super::live::{StreamEvent, Wake};
use super::{Jobs, Scope};
use crate::error::Result;
use crate::jobs::conversation::{ChatItem, Conversation, RunEnd};
use crate::store::{Interaction, Run, RunStatus};

/// Log bytes read at a time while catching up.
const READ_BYTES: usize = 64 * 1024;

/// Items one catching-up step gathers at most (plus what one read of the log holds): a stream
/// or a page never holds a whole long conversation in memory.
const STEP_ITEMS: usize = 256;

/// Items one `/chat/history` page holds at most (each item's text is capped at 16 KiB).
pub const MAX_PAGE_ITEMS: usize = 1000;

/// A run's conversation so far.
#[derive(Debug)]
pub struct ChatHistory {
    pub run_id: String,
    pub status: RunStatus,
    /// The items in the asked range.
    pub items: Vec<ChatItem>,
    /// `seq` of the first and last item read (0 when none): the whole conversation's, unless
    /// the page filled up or `to_seq` was passed first.
    pub first_seq: u64,
    pub last_seq: u64,
    /// Items in the asked range follow the page (it holds `limit` of them).
    pub has_more: bool,
}

impl Jobs {
    /// The conversation of a request's run, items `from_seq..=to_seq` (either end open).
    pub async fn chat_history(
        &self,
        scope: Scope,
        request_id: &str,
        from_seq: Option<u64>,
        to_seq: Option<u64>,
        limit: usize,
    ) -> Result<ChatHistory> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let mut conversation = self.conversation(&run)?;
        let asked = self.store.interactions(&run.run_id).await?;
        let limit = limit.clamp(1, MAX_PAGE_ITEMS);
        let (mut page, mut first_seq, mut last_seq) = (Vec::new(), None, 0);
        let (mut has_more, mut passed) = (false, false);
        loop {
            let (items, more) = self.catch_up(&mut conversation, &run, &asked).await;
            for item in items {
                first_seq.get_or_insert(item.seq);
                last_seq = item.seq;
                passed |= to_seq.is_some_and(|to| item.seq > to);
                let wanted = from_seq.is_none_or(|from| item.seq >= from)
                    && to_seq.is_none_or(|to| item.seq <= to);
                if !wanted {
                    continue;
                }
                if page.len() == limit {
                    has_more = true;
                } else {
                    page.push(item);
                }
            }
            if has_more || passed || !more {
                break;
            }
        }
        Ok(ChatHistory {
            run_id: run.run_id,
            status: run.status,
            items: page,
            first_seq: first_seq.unwrap_or(0),
            last_seq,
            has_more,
        })
    }

    /// The live conversation of a request's run, after item `cursor`.
    pub async fn chat(
        self: &Arc<Self>,
        scope: Scope,
        request_id: &str,
        cursor: u64,
    ) -> Result<impl Stream<Item = StreamEvent> + Send + 'static> {
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let run_id = run.run_id.clone();
        // Subscribe before reading, so no change falls between a read and the wait.
        let mut subscription = self.feeds.subscribe(&run_id);
        let mut conversation = self.conversation(&run)?;
        let heartbeat = self.config.limits.sse_heartbeat;
        let jobs = self.clone();
        Ok(async_stream::stream! {
            let mut sent = cursor;
            let mut last_event = Instant::now();
            yield StreamEvent {
                name: "snapshot",
                id: sent.to_string(),
                data: json!({"status": run.status, "cursor": cursor}).into(),
            };
            let mut reread = true;
            let (mut run, mut asked) = (run, Vec::new());
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
                }
                let (items, more) = jobs.catch_up(&mut conversation, &run, &asked).await;
                for item in items {
                    if item.seq <= sent {
                        continue;
                    }
                    sent = item.seq;
                    last_event = Instant::now();
                    yield StreamEvent {
                        name: "chat_event",
                        id: sent.to_string(),
                        data: serde_json::to_value(&item).unwrap_or_default().into(),
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
            at: run.finished_at.or(Some(run.updated_at)),
        });
        let path = self.folder(&run.run_id).stdout_log();
        let mut items = Vec::new();
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
            items.extend(conversation.advance(&bytes, at_end, asked, end.as_ref()));
            if at_end {
                return (items, false);
            }
            if items.len() >= STEP_ITEMS {
                return (items, true);
            }
        }
    }
}
