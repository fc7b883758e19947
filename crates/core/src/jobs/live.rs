//! Wake-ups for the event streams of runs that somebody is watching.
//!
//! The log files stay the only copy of a run's output: a stream reads the bytes from the file,
//! and this module tells it that there is something new (output appended, status changed).
//! Each watched run has a `watch` channel: sending never waits for receivers, and a slow stream
//! sees the latest tick and reads everything it missed from the file, so no subscriber can hold
//! up the run or the other subscribers. Runs nobody watches cost one map lookup per write.
//!
//! A watched run also keeps the chunks of output its streams sent last, serialized (see
//! [`super::events`]): the first stream to find new output reads it from the file for all of
//! them, and the others send the same chunks, so a thousand streams of one run cost one read
//! and one serialization per chunk, not a thousand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use skill_runner_types::clock::Timestamp;
use tokio::sync::{Semaphore, SemaphorePermit, watch};
use tokio_util::sync::CancellationToken;

use super::events::SharedLog;

/// Counters that move when a run has news.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tick {
    /// Bumped when output was appended to a log.
    pub output: u64,
    /// Bumped when the run's status (or pending question) changed.
    pub status: u64,
}

/// Log reads under way at once, across all streams. Each read is a short blocking call;
/// without a bound, hundreds of streams woken together would each take a blocking thread.
const LOG_READERS: usize = 8;

/// The channels of the watched runs.
#[derive(Debug)]
pub struct Feeds {
    runs: Mutex<HashMap<String, Arc<RunFeed>>>,
    closing: CancellationToken,
    reads: Semaphore,
}

impl Default for Feeds {
    fn default() -> Self {
        Self {
            runs: Mutex::default(),
            closing: CancellationToken::new(),
            reads: Semaphore::new(LOG_READERS),
        }
    }
}

/// A watched run: its channel, and the chunks its streams share (stdout, stderr).
#[derive(Debug)]
pub(super) struct RunFeed {
    tx: watch::Sender<Tick>,
    /// Held for a look at the shared chunks, never across an `await`.
    pub(super) logs: Mutex<[SharedLog; 2]>,
    /// Wakes the streams that wait while one of them reads a log for all (all at once).
    pub(super) read: [tokio::sync::Notify; 2],
}

/// A stream's end of a run's channel; dropping it forgets the run once nobody watches.
#[derive(Debug)]
pub struct Subscription {
    feeds: Arc<Feeds>,
    run_id: String,
    feed: Arc<RunFeed>,
    rx: Option<watch::Receiver<Tick>>,
    /// The status tick as of the last wait.
    status_seen: u64,
}

/// One event of a run's stream (`/events`) or of its conversation's (`/chat`).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    /// The SSE event name: `snapshot`, `stdout`, `stderr`, `status`, `chat_event`,
    /// `heartbeat` or `end`.
    pub name: &'static str,
    /// Where a reconnecting client resumes (`Last-Event-ID`): the log offsets
    /// `<stdout>:<stderr>` of a run's stream, the last item's `seq` of a conversation's.
    pub id: String,
    pub data: EventData,
}

/// An event's data: JSON, or JSON text serialized once for every stream that sends it.
#[derive(Debug, Clone, PartialEq)]
pub enum EventData {
    Json(Value),
    Text(Arc<str>),
}

impl From<Value> for EventData {
    fn from(value: Value) -> Self {
        Self::Json(value)
    }
}

impl StreamEvent {
    /// Said when nothing else was for a while, so proxies and clients keep the stream open.
    pub fn heartbeat(id: String) -> Self {
        Self {
            name: "heartbeat",
            id,
            data: json!({ "ts": Timestamp::now() }).into(),
        }
    }

    /// The stream's last event: the run `terminal`, or `waiting_user` for a reply.
    pub fn end(id: String, reason: &str) -> Self {
        Self {
            name: "end",
            id,
            data: json!({ "reason": reason }).into(),
        }
    }
}

/// What ended a stream's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The run has news; `status`: its status changed (since subscribing or the last news).
    News { status: bool },
    /// Nothing happened until the idle deadline: time for a heartbeat.
    Idle,
    /// The service is stopping.
    Closed,
}

impl Feeds {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts watching `run_id`. Subscribe before reading the state the ticks refer to, so
    /// no change falls between the read and the wait.
    pub fn subscribe(self: &Arc<Self>, run_id: &str) -> Subscription {
        let mut runs = self.lock();
        let feed = runs.entry(run_id.to_owned()).or_insert_with(|| {
            Arc::new(RunFeed {
                tx: watch::channel(Tick::default()).0,
                logs: Default::default(),
                read: Default::default(),
            })
        });
        let mut rx = feed.tx.subscribe();
        let status_seen = rx.borrow_and_update().status;
        Subscription {
            rx: Some(rx),
            feeds: self.clone(),
            feed: feed.clone(),
            run_id: run_id.to_owned(),
            status_seen,
        }
    }

    /// Output was appended to one of the run's logs.
    pub fn output(&self, run_id: &str) {
        self.bump(run_id, |t| t.output += 1);
    }

    /// The run's status changed.
    pub fn status(&self, run_id: &str) {
        self.bump(run_id, |t| t.status += 1);
    }

    /// Ends every stream (the service is stopping); clients reconnect to the next process.
    pub fn close(&self) {
        self.closing.cancel();
    }

    /// Whether [`Feeds::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Resolves once [`Feeds::close`] was called.
    pub async fn closed(&self) {
        self.closing.cancelled().await;
    }

    /// A turn to read from a log file (see [`LOG_READERS`]).
    pub async fn read_turn(&self) -> SemaphorePermit<'_> {
        self.reads
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    /// Runs with at least one subscriber.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.lock().len()
    }

    fn bump(&self, run_id: &str, f: impl FnOnce(&mut Tick)) {
        if let Some(feed) = self.lock().get(run_id) {
            feed.tx.send_modify(f);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RunFeed>>> {
        self.runs.lock().expect("feeds lock")
    }
}

impl Subscription {
    /// The run's output counter now: a read that starts after this sees every byte written
    /// before it moved.
    pub(super) fn output_tick(&self) -> u64 {
        self.rx
            .as_ref()
            .expect("receiver lives until drop")
            .borrow()
            .output
    }

    /// The run's shared chunks.
    pub(super) fn feed(&self) -> &RunFeed {
        &self.feed
    }

    /// Waits for the next tick after the last one seen and returns it.
    pub async fn changed(&mut self) -> Tick {
        let rx = self.rx.as_mut().expect("receiver lives until drop");
        // The sender lives in the map while this receiver exists, so this cannot fail.
        let _ = rx.changed().await;
        *rx.borrow_and_update()
    }

    /// Waits for the run's next news, `idle_until`, or the service closing.
    pub async fn wait(&mut self, idle_until: tokio::time::Instant) -> Wake {
        let feeds = self.feeds.clone();
        tokio::select! {
            tick = self.changed() => {
                let status = tick.status != self.status_seen;
                self.status_seen = tick.status;
                Wake::News { status }
            }
            () = tokio::time::sleep_until(idle_until) => Wake::Idle,
            () = feeds.closed() => Wake::Closed,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut runs = self.feeds.lock();
        drop(self.rx.take());
        if runs
            .get(&self.run_id)
            .is_some_and(|feed| feed.tx.receiver_count() == 0)
        {
            runs.remove(&self.run_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ticks_reach_every_subscriber_and_unwatched_runs_are_forgotten() {
        let feeds = Feeds::new();
        feeds.output("r1");
        assert_eq!(
            feeds.watched(),
            0,
            "writing to an unwatched run creates nothing"
        );
        let mut a = feeds.subscribe("r1");
        let mut b = feeds.subscribe("r1");
        feeds.output("r1");
        feeds.output("r1");
        feeds.status("r1");
        let expected = Tick {
            output: 2,
            status: 1,
        };
        assert_eq!(a.changed().await, expected);
        assert_eq!(
            b.changed().await,
            expected,
            "a slow subscriber sees the latest tick"
        );
        drop(a);
        assert_eq!(feeds.watched(), 1);
        drop(b);
        assert_eq!(feeds.watched(), 0);
    }
}
