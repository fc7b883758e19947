//! `/metrics`: what the service counts, in Prometheus's text format.
//!
//! The crates count through the `metrics` facade (the job core its runs, queue and event
//! streams; the process crate its egress verdicts); this module installs the one recorder,
//! adds what is read at scrape time (runs by state, from the store) and the HTTP requests.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use skill_runner_core::jobs::telemetry as jobs;

use crate::store::Store;

/// Seconds: from a fast request to a long agent turn.
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
    600.0,
];
/// How often histogram samples are folded in when nobody scrapes.
const UPKEEP: Duration = Duration::from_secs(5);

const RUNS: &str = "skill_runner_runs";
const HTTP_REQUESTS: &str = "skill_runner_http_requests_total";
const HTTP_SECONDS: &str = "skill_runner_http_request_duration_seconds";
const INFO: &str = "skill_runner_info";

/// The process's recorder, installed by the first call. Where another recorder was installed
/// first, the facade keeps feeding that one and this handle renders only what it records.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
            .expect("the buckets are not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_ok() {
            describe();
        }
        handle
    })
}

/// Installs the recorder, names this node, and folds histogram samples in every few seconds
/// (they would pile up between scrapes otherwise).
pub fn start(node_id: &str, store_kind: &'static str) {
    let handle = handle();
    metrics::gauge!(INFO, "version" => env!("CARGO_PKG_VERSION"), "node_id" => node_id.to_owned(),
                    "store" => store_kind)
    .set(1.0);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP);
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    });
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(INFO, "This node: its version, id and store (always 1)");
    describe_gauge!(
        RUNS,
        "Runs in each state, by engine, as the store holds them"
    );
    describe_counter!(jobs::TRANSITIONS, "Runs that moved into a state, by engine");
    describe_counter!(
        jobs::ENDED,
        "Runs that ended, by engine, status and error code"
    );
    describe_histogram!(jobs::TURN_SECONDS, "Duration of a turn, by engine");
    describe_histogram!(
        jobs::QUEUE_WAIT_SECONDS,
        "Time from entering the queue to a slot"
    );
    describe_gauge!(jobs::QUEUE_DEPTH, "Runs waiting for a slot");
    describe_counter!(
        jobs::QUEUE_FULL,
        "Requests refused with 429: the queue was full"
    );
    describe_counter!(jobs::CACHE_HITS, "Creates answered from the result cache");
    describe_gauge!(jobs::SSE_SUBSCRIBERS, "Open event streams of runs");
    describe_counter!(
        "skill_runner_egress_connections_total",
        "Connections of turns through the egress proxy, by verdict"
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by method, route and status"
    );
    describe_histogram!(
        HTTP_SECONDS,
        "Time to answer an HTTP request (to its headers)"
    );
}

/// The page a scrape gets: the counters, with the runs by state read from `store` now.
pub async fn render(store: &Store) -> anyhow::Result<String> {
    // Series set before and now missing must drop to zero, not keep their last count.
    static SEEN: Mutex<Option<HashSet<(&'static str, &'static str)>>> = Mutex::new(None);
    let counts = store.run_counts().await?;
    let now: HashSet<_> = counts
        .iter()
        .map(|(state, engine, _)| (state.as_str(), engine.as_str()))
        .collect();
    let gone: Vec<_> = {
        let mut seen = SEEN.lock().expect("seen lock");
        let seen = seen.get_or_insert_with(HashSet::new);
        let gone = seen.difference(&now).copied().collect();
        seen.extend(now.iter().copied());
        gone
    };
    for (state, engine) in gone {
        metrics::gauge!(RUNS, "state" => state, "engine" => engine).set(0.0);
    }
    for (state, engine, n) in counts {
        metrics::gauge!(RUNS, "state" => state.as_str(), "engine" => engine.as_str()).set(n as f64);
    }
    Ok(handle().render())
}

/// A middleware over the whole router: counts every request by its route (the pattern, so
/// ids do not make new series), times it, and writes its access log line (target
/// `skill_runner::access`, inside the request's span with its `x-request-id`).
pub async fn record_request(request: Request, next: Next) -> Response {
    let began = Instant::now();
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let took = began.elapsed();
    let status = response.status().as_u16();
    tracing::info!(target: "skill_runner::access", method, path, status,
                   ms = took.as_secs_f64() * 1000.0, "request");
    let status = status.to_string();
    metrics::histogram!(HTTP_SECONDS, "method" => method.clone(), "route" => route.clone())
        .record(took.as_secs_f64());
    metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route, "status" => status)
        .increment(1);
    response
}
