//! The bounded FIFO of runs waiting for a slot.
//!
//! Admission is reserved before a run is written, so the bound is exact under concurrent
//! creates: at most `max` runs are admitted and not yet started. A worker pops the oldest run
//! that may start; the number of workers is the number of slots, so a slot is held exactly as
//! long as a worker executes a run and cannot leak. A run of an agent engine may start only
//! while fewer than `max_agents` agent turns hold a slot: their CLIs take a core and a model
//! call each, where a `script` turn is a short, confined program. A script run therefore
//! passes agent runs that wait for an agent place; runs of one lane start in order. An engine
//! may also have a bound of its own (`SKILL_RUNNER_ENGINE_LIMITS`: a provider's rate limit, a
//! licence): its runs then wait for a place of that engine, and others pass them. Closing the
//! queue (shutdown) is decided under the same lock as a pop, so no run leaves the queue once
//! shutdown began: queued runs stay queued.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use opentelemetry::trace::SpanContext;
use skill_runner_types::engine::Engine;
use tokio::sync::Notify;

use super::telemetry;

/// The engines with a bound of their own on turns at once (`SKILL_RUNNER_ENGINE_LIMITS`).
pub type EngineLimits = Vec<(Engine, usize)>;

#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    ready: Notify,
    max: usize,
    max_agents: usize,
    engine_limits: EngineLimits,
}

#[derive(Debug, Default)]
struct State {
    runs: VecDeque<Queued>,
    reserved: usize,
    /// Agent turns holding a slot.
    agents: usize,
    /// Turns holding a slot, by engine.
    turns: std::collections::HashMap<Engine, usize>,
    closed: bool,
}

#[derive(Debug)]
struct Queued {
    run_id: String,
    engine: Engine,
    since: std::time::Instant,
    origin: Option<SpanContext>,
}

/// A run taken from the queue, with its place among the turns of its engine.
#[derive(Debug)]
pub struct Popped {
    pub run_id: String,
    pub place: TurnPlace,
    /// The exported span that queued it (a request, or the runner's own decision).
    pub origin: Option<SpanContext>,
}

/// A turn's place among those of its engine (and of the agents, for an agent engine);
/// dropping it gives the place back.
#[derive(Debug)]
pub struct TurnPlace {
    queue: Arc<Queue>,
    engine: Engine,
}

/// A place in the queue, held while the run is being recorded; dropping it unused gives the
/// place back.
#[derive(Debug)]
pub struct Admission {
    queue: Arc<Queue>,
    used: bool,
}

impl Queue {
    /// A queue of at most `max` runs, whose runs start at most `max_agents` agent turns at once
    /// and no more turns of an engine than `engine_limits` says.
    pub fn new(max: usize, max_agents: usize, engine_limits: EngineLimits) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            max,
            max_agents,
            engine_limits,
        })
    }

    /// The engines with a bound of their own.
    pub fn engine_limits(&self) -> &EngineLimits {
        &self.engine_limits
    }

    /// Whether a turn of `engine` may start beside those holding a place in `state`.
    fn may_start(&self, state: &State, engine: Engine) -> bool {
        let agent_free = engine == Engine::Script || state.agents < self.max_agents;
        let engine_free = self
            .engine_limits
            .iter()
            .find(|(limited, _)| *limited == engine)
            .is_none_or(|(_, max)| state.turns.get(&engine).copied().unwrap_or(0) < *max);
        agent_free && engine_free
    }

    /// A place for one more run, or `None` when `max` runs are already waiting.
    pub fn try_admit(self: &Arc<Self>) -> Option<Admission> {
        let mut state = self.lock();
        if state.runs.len() + state.reserved >= self.max {
            metrics::counter!(telemetry::QUEUE_FULL).increment(1);
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
    pub fn push_unbounded(&self, run_id: String, engine: Engine) {
        let mut state = self.lock();
        state.runs.push_back(Queued::new(run_id, engine));
        state.counted();
        drop(state);
        self.ready.notify_one();
    }

    /// Waits for the oldest run that may start; `None` once the queue is closed, even with
    /// runs left in it.
    pub async fn pop(self: &Arc<Self>) -> Option<Popped> {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                let startable = state
                    .runs
                    .iter()
                    .position(|r| self.may_start(&state, r.engine));
                if let Some(at) = startable {
                    let run = state.runs.remove(at).expect("a position in the queue");
                    if run.engine != Engine::Script {
                        state.agents += 1;
                    }
                    *state.turns.entry(run.engine).or_default() += 1;
                    state.counted();
                    metrics::histogram!(telemetry::QUEUE_WAIT_SECONDS)
                        .record(run.since.elapsed().as_secs_f64());
                    return Some(Popped {
                        run_id: run.run_id,
                        place: TurnPlace {
                            queue: self.clone(),
                            engine: run.engine,
                        },
                        origin: run.origin,
                    });
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
        state.runs.retain(|r| r.run_id != run_id);
        state.counted();
        before != state.runs.len()
    }

    /// Whether `run_id` waits in the queue.
    pub fn contains(&self, run_id: &str) -> bool {
        self.lock().runs.iter().any(|r| r.run_id == run_id)
    }

    /// Whether an agent turn could take a place now.
    pub fn agent_place_free(&self) -> bool {
        self.lock().agents < self.max_agents
    }

    /// Runs waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.lock().runs.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("queue lock")
    }
}

impl State {
    /// Publishes the queue's depth after a change.
    fn counted(&self) {
        metrics::gauge!(telemetry::QUEUE_DEPTH).set(self.runs.len() as f64);
    }
}

impl Queued {
    fn new(run_id: String, engine: Engine) -> Self {
        Self {
            run_id,
            engine,
            since: std::time::Instant::now(),
            origin: telemetry::current_trace(),
        }
    }
}

impl TurnPlace {
    pub fn engine(&self) -> Engine {
        self.engine
    }
}

impl Drop for TurnPlace {
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        if self.engine != Engine::Script {
            state.agents -= 1;
        }
        if let Some(turns) = state.turns.get_mut(&self.engine) {
            *turns -= 1;
        }
        drop(state);
        // A run may have waited for this place while every other worker was idle.
        self.queue.ready.notify_one();
    }
}

impl Admission {
    /// Puts the run at the back of the queue.
    pub fn enqueue(mut self, run_id: String, engine: Engine) {
        self.used = true;
        let mut state = self.queue.lock();
        state.reserved -= 1;
        state.runs.push_back(Queued::new(run_id, engine));
        state.counted();
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
        let q = Queue::new(2, 2, vec![]);
        let a = q.try_admit().unwrap();
        let b = q.try_admit().unwrap();
        assert!(q.try_admit().is_none(), "two places taken");
        drop(b);
        let b = q.try_admit().expect("an unused place comes back");
        a.enqueue("r1".into(), Engine::Script);
        b.enqueue("r2".into(), Engine::Script);
        assert!(q.try_admit().is_none());
        assert!(q.remove("r2"));
        let c = q.try_admit().unwrap();
        c.enqueue("r3".into(), Engine::Script);
        assert_eq!(q.pop().await.map(|p| p.run_id).as_deref(), Some("r1"));
        assert_eq!(q.pop().await.map(|p| p.run_id).as_deref(), Some("r3"));
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn a_closed_queue_hands_out_nothing_and_keeps_its_runs() {
        let q = Queue::new(4, 4, vec![]);
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await }
        });
        tokio::task::yield_now().await;
        q.close();
        assert!(
            waiting.await.unwrap().is_none(),
            "a waiting worker is released"
        );
        q.push_unbounded("r1".into(), Engine::Script);
        assert!(q.pop().await.is_none(), "a ready run is not handed out");
        assert_eq!(q.waiting(), 1);
    }

    #[tokio::test]
    async fn agent_runs_wait_for_an_agent_place_and_scripts_pass_them() {
        let q = Queue::new(8, 1, vec![]);
        q.push_unbounded("a1".into(), Engine::Codex);
        q.push_unbounded("a2".into(), Engine::Claude);
        q.push_unbounded("s1".into(), Engine::Script);
        let first = q.pop().await.unwrap();
        assert_eq!(first.run_id, "a1");
        let second = q.pop().await.unwrap();
        assert_eq!(
            second.run_id, "s1",
            "the script passes the agent run that waits for a place"
        );
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await.map(|p| p.run_id) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a2 waits while a1 holds the place");
        drop(first);
        assert_eq!(waiting.await.unwrap().as_deref(), Some("a2"));
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn an_engine_with_a_bound_of_its_own_waits_for_its_places_and_others_pass() {
        let q = Queue::new(8, 4, vec![(Engine::Codex, 1)]);
        for (id, engine) in [
            ("c1", Engine::Codex),
            ("c2", Engine::Codex),
            ("q1", Engine::Qwen),
        ] {
            q.push_unbounded(id.into(), engine);
        }
        let first = q.pop().await.unwrap();
        assert_eq!(first.run_id, "c1");
        assert_eq!(
            q.pop().await.unwrap().run_id,
            "q1",
            "another engine passes the codex run waiting for codex's one place"
        );
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await.map(|p| p.run_id) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "c2 waits while c1 runs");
        drop(first);
        assert_eq!(waiting.await.unwrap().as_deref(), Some("c2"));
    }
}
