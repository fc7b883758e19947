//! `/metrics`: what the service counts, in Prometheus's text format.
//!
//! The crates count through the `metrics` facade (the job core its runs, queue and event
//! streams; the process crate its egress verdicts); this module installs the one recorder,
//! adds what is read at scrape time (runs by state, from the store) and the HTTP requests.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Counter, Histogram};
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
        "Runs in each state, by engine and tenant, as the store holds them"
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
        jobs::RETRIES,
        "Failed attempts tried again after a failure that may pass, by engine"
    );
    describe_counter!(
        jobs::LEASE_RENEWALS,
        "Heartbeats this node renewed among the nodes of its PostgreSQL database"
    );
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

/// The page a scrape gets: the counters, with the runs by state read from `store` now (by
/// tenant: `tenant`, when given, leaves out the other tenants' series).
pub async fn render(store: &Store, tenant: Option<&str>) -> anyhow::Result<String> {
    /// A series of the run counts: state, engine, tenant.
    type Series = (&'static str, &'static str, String);
    // Series set before and now missing must drop to zero, not keep their last count.
    static SEEN: LazyLock<Mutex<HashSet<Series>>> = LazyLock::new(Mutex::default);
    let counts = store.run_counts().await?;
    let now: HashSet<_> = counts
        .iter()
        .map(|c| (c.status.as_str(), c.engine.as_str(), c.tenant_id.clone()))
        .collect();
    let gone: Vec<_> = {
        let mut seen = SEEN.lock().expect("seen lock");
        let gone = seen.difference(&now).cloned().collect();
        seen.extend(now.iter().cloned());
        gone
    };
    for (state, engine, tenant) in gone {
        metrics::gauge!(RUNS, "state" => state, "engine" => engine, "tenant" => tenant).set(0.0);
    }
    for c in counts {
        metrics::gauge!(RUNS, "state" => c.status.as_str(), "engine" => c.engine.as_str(),
                        "tenant" => c.tenant_id)
        .set(c.runs as f64);
    }
    let page = handle().render();
    Ok(match tenant {
        None => page,
        Some(tenant) => only_tenant(&page, tenant),
    })
}

/// `page` without the samples of tenants other than `tenant` (those without a tenant stay).
fn only_tenant(page: &str, tenant: &str) -> String {
    let own = format!(
        "tenant=\"{}\"",
        tenant.replace('\\', "\\\\").replace('"', "\\\"")
    );
    page.lines()
        .filter(|line| line.starts_with('#') || !line.contains("tenant=\"") || line.contains(&own))
        .flat_map(|line| [line, "\n"])
        .collect()
}

/// A middleware over the whole router: counts every request by its route (the pattern, so
/// ids do not make new series), times it, and writes its access log line (target
/// `skill_runner::access`, inside the request's span with its method, path and
/// `x-request-id` as `http_request_id`).
pub async fn record_request(request: Request, next: Next) -> Response {
    let began = Instant::now();
    let method = method_label(request.method());
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    crate::idle::answered();
    let took = began.elapsed();
    let status = response.status().as_u16();
    // To 0.01 ms: the digits past that are noise.
    let ms = (took.as_secs_f64() * 100_000.0).round() / 100.0;
    tracing::info!(target: "skill_runner::access", status, ms, "request");
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    RouteSeries::with(route, |series| {
        series.timed(method).record(took.as_secs_f64());
        series.counted(method, status).increment(1);
    });
    response
}

/// The standard methods as static labels; any other is `OTHER`.
fn method_label(method: &Method) -> &'static str {
    [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::HEAD,
        Method::OPTIONS,
        Method::PATCH,
    ]
    .iter()
    .find(|m| *m == method)
    .map_or("OTHER", Method::as_str)
}

/// One route's series, kept once registered: looking a handle up here allocates nothing,
/// where naming the series again would build its labels on every request.
#[derive(Default)]
struct RouteSeries {
    timed: HashMap<&'static str, Histogram>,
    counted: HashMap<(&'static str, u16), Counter>,
    route: String,
}

impl RouteSeries {
    /// Runs `use_series` on `route`'s series, registering them on first use.
    fn with(route: &str, use_series: impl FnOnce(&mut Self)) {
        static ALL: LazyLock<Mutex<HashMap<String, RouteSeries>>> = LazyLock::new(Mutex::default);
        let mut all = ALL.lock().expect("route series lock");
        if !all.contains_key(route) {
            let series = RouteSeries {
                route: route.to_owned(),
                ..Default::default()
            };
            all.insert(route.to_owned(), series);
        }
        use_series(all.get_mut(route).expect("just inserted"));
    }

    fn timed(&mut self, method: &'static str) -> &Histogram {
        let route = &self.route;
        self.timed.entry(method).or_insert_with(
            || metrics::histogram!(HTTP_SECONDS, "method" => method, "route" => route.clone()),
        )
    }

    fn counted(&mut self, method: &'static str, status: u16) -> &Counter {
        let route = &self.route;
        self.counted.entry((method, status)).or_insert_with(|| {
            metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route.clone(),
                              "status" => status.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_filter_keeps_its_series_and_the_services_own() {
        let page = "# TYPE skill_runner_runs gauge\n\
            skill_runner_runs{state=\"queued\",engine=\"script\",tenant=\"a\"} 2\n\
            skill_runner_runs{state=\"queued\",engine=\"script\",tenant=\"ab\"} 5\n\
            skill_runner_queue_depth 7\n";
        assert_eq!(
            only_tenant(page, "a"),
            "# TYPE skill_runner_runs gauge\n\
             skill_runner_runs{state=\"queued\",engine=\"script\",tenant=\"a\"} 2\n\
             skill_runner_queue_depth 7\n"
        );
    }
}
