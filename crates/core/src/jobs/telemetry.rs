//! What the job core counts (through the `metrics` facade; the server exports it) and the one
//! log line of every run transition.
//!
//! Labels have few values each (engines, run states, error codes), so every series stays small.

use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use skill_runner_types::engine::Engine;
use skill_runner_types::run_state::RunStatus;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Runs that moved into `state` (`queued` counts creates and resumed runs).
pub const TRANSITIONS: &str = "skill_runner_run_transitions_total";
/// Runs that ended, by status and error code.
pub const ENDED: &str = "skill_runner_runs_ended_total";
/// From a turn's start to its end or question, seconds.
pub const TURN_SECONDS: &str = "skill_runner_turn_duration_seconds";
/// From entering the queue to taking a slot, seconds.
pub const QUEUE_WAIT_SECONDS: &str = "skill_runner_queue_wait_seconds";
/// Runs waiting for a slot.
pub const QUEUE_DEPTH: &str = "skill_runner_queue_depth";
/// Requests refused because the queue was full (answered 429).
pub const QUEUE_FULL: &str = "skill_runner_queue_full_total";
/// Creates answered from the result cache.
pub const CACHE_HITS: &str = "skill_runner_cache_hits_total";
/// Open event streams of runs.
pub const SSE_SUBSCRIBERS: &str = "skill_runner_sse_subscribers";
/// Failed attempts tried again (a failure that may pass), by engine.
pub const RETRIES: &str = "skill_runner_run_retries_total";
/// Heartbeats renewed by this node among those sharing a PostgreSQL database.
pub const LEASE_RENEWALS: &str = "skill_runner_lease_renewals_total";

/// The exported trace the current span belongs to; `None` when traces are not exported.
pub fn current_trace() -> Option<SpanContext> {
    let context = tracing::Span::current().context();
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// The span of one turn of a run, linked to the span that queued it (`origin`, from
/// [`current_trace`] at the time).
pub fn turn_span(node: &str, run_id: &str, origin: Option<SpanContext>) -> tracing::Span {
    let span = tracing::info_span!("run", run_id, node);
    if let Some(origin) = origin {
        span.add_link(origin);
    }
    span
}

/// A run's move, as its log line names it.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    /// The id the API and the console show for the run.
    pub request_id: &'a str,
    pub run_id: &'a str,
    pub engine: Engine,
    pub state: RunStatus,
    /// The code and message of a failure the move ends the run with.
    pub error: Option<(&'a str, &'a str)>,
}

/// Logs and counts a run's move on node `node`: one line with the request id a user sees and
/// the run id, a failure's code and message, and the trace id when traces are exported.
pub fn moved(node: &str, to: Transition<'_>) {
    let Transition {
        request_id, run_id, ..
    } = to;
    let (engine, state) = (to.engine.as_str(), to.state.as_str());
    // An absent trace or error leaves its field out of the line.
    let trace_id = current_trace().map(|t| tracing::field::display(t.trace_id()));
    match to.error {
        Some((code, error)) => tracing::warn!(
            request_id,
            run_id,
            node,
            engine,
            state,
            code,
            error,
            trace_id,
            "run moved"
        ),
        None => tracing::info!(
            request_id,
            run_id,
            node,
            engine,
            state,
            trace_id,
            "run moved"
        ),
    }
    metrics::counter!(TRANSITIONS, "engine" => engine, "state" => state).increment(1);
}

/// Counts a run's end.
pub fn ended(engine: Engine, status: RunStatus, code: Option<&str>) {
    metrics::counter!(ENDED, "engine" => engine.as_str(), "status" => status.as_str(),
                      "error_code" => code.unwrap_or("").to_owned())
    .increment(1);
}

/// Records how long a turn of `engine` took.
pub fn turn_took(engine: Engine, took: Duration) {
    metrics::histogram!(TURN_SECONDS, "engine" => engine.as_str()).record(took.as_secs_f64());
}

/// One open event stream; dropping it closes the count.
#[derive(Debug)]
pub struct Subscriber(());

impl Subscriber {
    pub fn open() -> Self {
        metrics::gauge!(SSE_SUBSCRIBERS).increment(1.0);
        Self(())
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        metrics::gauge!(SSE_SUBSCRIBERS).decrement(1.0);
    }
}
