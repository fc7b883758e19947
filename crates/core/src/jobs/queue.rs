//! The bounded FIFO of runs waiting for a slot.
//!
//! Admission is reserved before a run is written, so the bound is exact under concurrent
//! creates: at most `max` runs are admitted and not yet started. A worker pops the oldest run;
//! the number of workers is the number of slots, so a slot is held exactly as long as a worker
//! executes a run and cannot leak. Closing the queue (shutdown) is decided under the same lock
//! as a pop, so no run leaves the queue once shutdown began: queued runs stay queued.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    ready: Notify,
    max: usize,
}

#[derive(Debug, Default)]
struct State {
    runs: VecDeque<String>,
    reserved: usize,
    closed: bool,
}

/// A place in the queue, held while the run is being recorded; dropping it unused gives the
/// place back.
#[derive(Debug)]
pub struct Admission {
    queue: Arc<Queue>,
    used: bool,
}

impl Queue {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            max,
        })
    }

    /// A place for one more run, or `None` when `max` runs are already waiting.
    pub fn try_admit(self: &Arc<Self>) -> Option<Admission> {
        let mut state = self.lock();
        if state.runs.len() + state.reserved >= self.max {
            return None;
        }
        state.reserved += 1;
        Some(Admission {
            queue: self.clone(),
            used: false,
        })
    }

    /// Queues a run regardless of the bound: one admitted before a restart, or one the runner
    /// itself resumed (an automatic decision), which cannot be refused.
    pub fn push_unbounded(&self, run_id: String) {
        self.lock().runs.push_back(run_id);
        self.ready.notify_one();
    }

    /// Waits for the oldest run; `None` once the queue is closed, even with runs left in it.
    pub async fn pop(&self) -> Option<String> {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                if let Some(run_id) = state.runs.pop_front() {
                    return Some(run_id);
                }
            }
            notified.await;
        }
    }

    /// Stops handing out runs (shutdown): every waiting and later [`Queue::pop`] answers `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_waiters();
    }

    /// Takes a canceled run out of the queue so it no longer counts against the bound.
    pub fn remove(&self, run_id: &str) -> bool {
        let mut state = self.lock();
        let before = state.runs.len();
        state.runs.retain(|r| r != run_id);
        before != state.runs.len()
    }

    /// Whether `run_id` waits in the queue.
    pub fn contains(&self, run_id: &str) -> bool {
        self.lock().runs.iter().any(|r| r == run_id)
    }

    /// Runs waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.lock().runs.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("queue lock")
    }
}

impl Admission {
    /// Puts the run at the back of the queue.
    pub fn enqueue(mut self, run_id: String) {
        self.used = true;
        let mut state = self.queue.lock();
        state.reserved -= 1;
        state.runs.push_back(run_id);
        drop(state);
        self.queue.ready.notify_one();
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if !self.used {
            self.queue.lock().reserved -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bound_counts_reservations_and_order_is_fifo() {
        let q = Queue::new(2);
        let a = q.try_admit().unwrap();
        let b = q.try_admit().unwrap();
        assert!(q.try_admit().is_none(), "two places taken");
        drop(b);
        let b = q.try_admit().expect("an unused place comes back");
        a.enqueue("r1".into());
        b.enqueue("r2".into());
        assert!(q.try_admit().is_none());
        assert!(q.remove("r2"));
        let c = q.try_admit().unwrap();
        c.enqueue("r3".into());
        assert_eq!(q.pop().await.as_deref(), Some("r1"));
        assert_eq!(q.pop().await.as_deref(), Some("r3"));
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn a_closed_queue_hands_out_nothing_and_keeps_its_runs() {
        let q = Queue::new(4);
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await }
        });
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(waiting.await.unwrap(), None, "a waiting worker is released");
        q.push_unbounded("r1".into());
        assert_eq!(q.pop().await, None, "a ready run is not handed out");
        assert_eq!(q.waiting(), 1);
    }
}
