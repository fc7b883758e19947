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
//!
//! A run may also wait for its time (`run_after`, or its next attempt after a retried
//! failure): it is not ready before, and the queue wakes its workers when it is. Among a
//! tenant's ready runs, the higher priority goes first, raised by waiting (see
//! `skill_runner_types::priority`).
//!
//! Tenants share the slots evenly: of the runs that may start, the next is one of the tenant
//! holding the fewest slots (the oldest of its runs; between tenants holding as many, the
//! tenant of the oldest run). A tenant with a thousand runs queued therefore delays another
//! tenant's run by at most one slot coming free. A tenant's `max_running` quota bounds its
//! runs holding a slot at once: its other runs wait, and other tenants' pass them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use opentelemetry::trace::SpanContext;
use skill_runner_types::clock::Timestamp;
use skill_runner_types::engine::Engine;
use skill_runner_types::priority;
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
    turns: HashMap<Engine, usize>,
    /// Turns holding a slot, by tenant.
    tenants: HashMap<Arc<str>, usize>,
    closed: bool,
}

/// A run to queue: which, of what engine, whose, and how many of its tenant's runs may hold
/// a slot at once (`None`: no bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRun {
    pub run_id: String,
    pub engine: Engine,
    pub tenant: Arc<str>,
    pub max_running: Option<u32>,
    /// 1 (first) to 4.
    pub priority: u8,
    /// Not ready before.
    pub not_before: Option<Timestamp>,
}

/// A recorded run to queue, as its row says.
#[derive(Debug, Clone, Copy)]
pub struct Ticket<'a> {
    pub run_id: &'a str,
    pub engine: Engine,
    pub tenant: &'a str,
    pub priority: u8,
    pub not_before: Option<Timestamp>,
}

impl<'a> From<&'a crate::store::Run> for Ticket<'a> {
    fn from(run: &'a crate::store::Run) -> Self {
        Self {
            run_id: &run.run_id,
            engine: run.engine,
            tenant: &run.tenant_id,
            priority: run.priority,
            not_before: run.not_before,
        }
    }
}

impl<'a> From<&'a crate::store::NewRun> for Ticket<'a> {
    fn from(run: &'a crate::store::NewRun) -> Self {
        Self {
            run_id: &run.run_id,
            engine: run.engine,
            tenant: &run.tenant_id,
            priority: run.priority,
            not_before: run.not_before,
        }
    }
}

#[derive(Debug)]
struct Queued {
    run: QueuedRun,
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
    tenant: Arc<str>,
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

    /// Whether `run` may start beside the turns holding a place in `state`.
    fn may_start(&self, state: &State, run: &QueuedRun) -> bool {
        let engine = run.engine;
        let tenant_free = run
            .max_running
            .is_none_or(|max| state.held_by(&run.tenant) < max as usize);
        let agent_free = engine == Engine::Script || state.agents < self.max_agents;
        let engine_free = self
            .engine_limits
            .iter()
            .find(|(limited, _)| *limited == engine)
            .is_none_or(|(_, max)| state.turns.get(&engine).copied().unwrap_or(0) < *max);
        tenant_free && agent_free && engine_free
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
    pub fn push_unbounded(&self, run: QueuedRun) {
        let mut state = self.lock();
        state.runs.push_back(Queued::new(run));
        state.counted();
        drop(state);
        self.ready.notify_one();
    }

    /// Waits for the next run that may start (of the tenant holding the fewest slots, its
    /// highest priority as aged, its oldest among equals); `None` once the queue is closed,
    /// even with runs left in it.
    pub async fn pop(self: &Arc<Self>) -> Option<Popped> {
        loop {
            let notified = self.ready.notified();
            let wake_at;
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                let now = Timestamp::now();
                let next = state
                    .runs
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.ready(now) && self.may_start(&state, &r.run))
                    .min_by_key(|(at, r)| (state.held_by(&r.run.tenant), r.competes(now), *at))
                    .map(|(at, _)| at);
                if let Some(at) = next {
                    let Queued { run, since, origin } =
                        state.runs.remove(at).expect("a position in the queue");
                    if run.engine != Engine::Script {
                        state.agents += 1;
                    }
                    *state.turns.entry(run.engine).or_default() += 1;
                    *state.tenants.entry(run.tenant.clone()).or_default() += 1;
                    state.counted();
                    metrics::histogram!(telemetry::QUEUE_WAIT_SECONDS)
                        .record(since.elapsed().as_secs_f64());
                    return Some(Popped {
                        run_id: run.run_id,
                        place: TurnPlace {
                            queue: self.clone(),
                            engine: run.engine,
                            tenant: run.tenant,
                        },
                        origin,
                    });
                }
                wake_at = state
                    .runs
                    .iter()
                    .filter_map(|r| r.run.not_before.filter(|t| *t > now))
                    .min()
                    .map(|t| tokio::time::Instant::now() + t.duration_since(now));
            }
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
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
        state.runs.retain(|r| r.run.run_id != run_id);
        state.counted();
        before != state.runs.len()
    }

    /// Whether `run_id` waits in the queue.
    pub fn contains(&self, run_id: &str) -> bool {
        self.lock().runs.iter().any(|r| r.run.run_id == run_id)
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
    /// Turns of `tenant` holding a slot.
    fn held_by(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).copied().unwrap_or(0)
    }

    /// Publishes the queue's depth after a change.
    fn counted(&self) {
        metrics::gauge!(telemetry::QUEUE_DEPTH).set(self.runs.len() as f64);
    }
}

impl Queued {
    /// Whether its time has come.
    fn ready(&self, now: Timestamp) -> bool {
        self.run.not_before.is_none_or(|t| t <= now)
    }

    /// The priority it competes with, raised by the time it has been ready.
    fn competes(&self, now: Timestamp) -> u8 {
        let waited = match self.run.not_before {
            Some(t) => now.duration_since(t).min(self.since.elapsed()),
            None => self.since.elapsed(),
        };
        priority::effective(self.run.priority, waited)
    }

    fn new(run: QueuedRun) -> Self {
        Self {
            run,
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
        if let Some(held) = state.tenants.get_mut(&self.tenant) {
            *held -= 1;
            if *held == 0 {
                state.tenants.remove(&self.tenant);
            }
        }
        drop(state);
        // A run may have waited for this place while every other worker was idle.
        self.queue.ready.notify_one();
    }
}

impl Admission {
    /// Puts the run at the back of the queue.
    pub fn enqueue(mut self, run: QueuedRun) {
        self.used = true;
        let mut state = self.queue.lock();
        state.reserved -= 1;
        state.runs.push_back(Queued::new(run));
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

    /// A run of the default tenant, unbounded.
    fn run(id: &str, engine: Engine) -> QueuedRun {
        of("default", None, id, engine)
    }

    fn of(tenant: &str, max_running: Option<u32>, id: &str, engine: Engine) -> QueuedRun {
        QueuedRun {
            run_id: id.into(),
            engine,
            tenant: tenant.into(),
            max_running,
            priority: priority::DEFAULT,
            not_before: None,
        }
    }

    #[tokio::test]
    async fn a_higher_priority_goes_first_and_a_run_waits_for_its_time() {
        let q = Queue::new(100, 4, vec![]);
        for n in 0..50 {
            q.push_unbounded(QueuedRun {
                priority: 4,
                ..run(&format!("low{n}"), Engine::Script)
            });
        }
        let soon = Timestamp::after(std::time::Duration::from_millis(300));
        q.push_unbounded(QueuedRun {
            not_before: Some(soon),
            priority: 1,
            ..run("later", Engine::Script)
        });
        q.push_unbounded(QueuedRun {
            priority: 1,
            ..run("urgent", Engine::Script)
        });
        assert_eq!(q.pop().await.unwrap().run_id, "urgent");
        assert_eq!(
            q.pop().await.unwrap().run_id,
            "low0",
            "a run whose time has not come is passed"
        );
        let q = Queue::new(4, 4, vec![]);
        q.push_unbounded(QueuedRun {
            not_before: Some(soon),
            ..run("later", Engine::Script)
        });
        let popped = q.pop().await.unwrap();
        assert_eq!(popped.run_id, "later");
        assert!(Timestamp::now() >= soon, "never before its time");
    }

    #[tokio::test]
    async fn bound_counts_reservations_and_order_is_fifo() {
        let q = Queue::new(2, 2, vec![]);
        let a = q.try_admit().unwrap();
        let b = q.try_admit().unwrap();
        assert!(q.try_admit().is_none(), "two places taken");
        drop(b);
        let b = q.try_admit().expect("an unused place comes back");
        a.enqueue(run("r1", Engine::Script));
        b.enqueue(run("r2", Engine::Script));
        assert!(q.try_admit().is_none());
        assert!(q.remove("r2"));
        let c = q.try_admit().unwrap();
        c.enqueue(run("r3", Engine::Script));
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
        q.push_unbounded(run("r1", Engine::Script));
        assert!(q.pop().await.is_none(), "a ready run is not handed out");
        assert_eq!(q.waiting(), 1);
    }

    #[tokio::test]
    async fn agent_runs_wait_for_an_agent_place_and_scripts_pass_them() {
        let q = Queue::new(8, 1, vec![]);
        q.push_unbounded(run("a1", Engine::Codex));
        q.push_unbounded(run("a2", Engine::Claude));
        q.push_unbounded(run("s1", Engine::Script));
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
            q.push_unbounded(run(id, engine));
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

    #[tokio::test]
    async fn tenants_share_the_slots_and_one_over_its_max_running_waits() {
        let q = Queue::new(2000, 4, vec![]);
        for n in 0..1000 {
            q.push_unbounded(of("a", None, &format!("a{n}"), Engine::Script));
        }
        let a0 = q.pop().await.unwrap();
        let a1 = q.pop().await.unwrap();
        assert_eq!((a0.run_id.as_str(), a1.run_id.as_str()), ("a0", "a1"));
        q.push_unbounded(of("b", None, "b0", Engine::Script));
        drop(a0);
        assert_eq!(
            q.pop().await.unwrap().run_id,
            "b0",
            "the next slot goes to the tenant holding none, not to a's thousand"
        );
        drop(a1);
        assert_eq!(q.pop().await.unwrap().run_id, "a2");

        let q = Queue::new(8, 4, vec![]);
        for id in ["c0", "c1", "c2"] {
            q.push_unbounded(of("c", Some(1), id, Engine::Script));
        }
        q.push_unbounded(of("d", None, "d0", Engine::Script));
        let c0 = q.pop().await.unwrap();
        assert_eq!(c0.run_id, "c0");
        assert_eq!(
            q.pop().await.unwrap().run_id,
            "d0",
            "c holds its one place: d passes"
        );
        let waiting = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await.map(|p| p.run_id) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "c1 waits while c0 runs");
        drop(c0);
        assert_eq!(waiting.await.unwrap().as_deref(), Some("c1"));
    }
}
