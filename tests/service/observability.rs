//! What an operator watches: `/metrics`, `/healthz`, `/readyz`, `/v1/system/version`, the
//! access log and the run transition log.

use std::time::Duration;

use skill_runner_test_support as common;

use common::{TestServer, probe_skill};
use prometheus_parse::{Sample, Scrape, Value as Metric};
use serde_json::json;

/// The page at `/metrics`, parsed as Prometheus text.
async fn scrape(server: &TestServer) -> Vec<Sample> {
    let response = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
    );
    let text = response.text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    Scrape::parse(lines)
        .expect("the page is Prometheus text")
        .samples
}

/// The sum of the series `name` that carry these `labels` (and any others); for a histogram,
/// its count. 0 when there is none.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match &s.value {
            Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v) => *v,
            Metric::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Metric::Summary(_) => panic!("{name} is a summary"),
        })
        .sum()
}

#[tokio::test]
async fn metrics_count_the_runs_made_and_logs_name_each_move() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_NODE_ID", "node-a"),
            ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
            ("SKILL_RUNNER_MAX_QUEUE_SIZE", "1"),
        ],
    );
    let job = |mode: &str, text: &str| json!({"skill_id": "probe", "parameter": {"mode": mode}, "input": {"text": text}});
    let mut succeeded = Vec::new();
    for text in ["a", "b", "c"] {
        let rid = server.create_job(job("ok", text)).await;
        assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
        succeeded.push(rid);
    }
    let failed = server.create_job(job("exit", "d")).await;
    assert_eq!(server.wait_job(&failed).await["status"], "failed");
    let (code, hit) = server.post_json("/v1/jobs", job("ok", "a")).await;
    assert_eq!(
        (code, hit["cache_hit"].as_bool()),
        (200, Some(true)),
        "{hit}"
    );

    // One turn running, one queued: the next create finds the queue full.
    let running = server.create_job(job("grandchild", "e")).await;
    server
        .wait_status(&format!("/v1/jobs/{running}"), &["running"])
        .await;
    let queued = server.create_job(job("ok", "f")).await;
    let (code, _) = server.post_json("/v1/jobs", job("ok", "g")).await;
    assert_eq!(code, 429);
    // An open event stream counts while it is open.
    let mut events = server
        .client
        .get(server.url(&format!("/v1/jobs/{running}/events")))
        .send()
        .await
        .unwrap();
    events.chunk().await.unwrap().expect("the snapshot");

    let samples = scrape(&server).await;
    let script = ("engine", "script");
    assert_eq!(
        value(
            &samples,
            "skill_runner_runs_ended_total",
            &[script, ("status", "succeeded")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_runs_ended_total",
            &[script, ("status", "failed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_runs",
            &[script, ("state", "succeeded")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_runs",
            &[script, ("state", "failed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_runs",
            &[script, ("state", "running")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_runs",
            &[script, ("state", "queued")]
        ),
        1.0
    );
    assert_eq!(value(&samples, "skill_runner_queue_depth", &[]), 1.0);
    assert_eq!(value(&samples, "skill_runner_queue_full_total", &[]), 1.0);
    assert_eq!(value(&samples, "skill_runner_cache_hits_total", &[]), 1.0);
    assert_eq!(value(&samples, "skill_runner_sse_subscribers", &[]), 1.0);
    assert_eq!(
        value(
            &samples,
            "skill_runner_run_transitions_total",
            &[script, ("state", "queued")]
        ),
        6.0,
        "every run made entered the queue"
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_run_transitions_total",
            &[script, ("state", "running")]
        ),
        5.0
    );
    assert_eq!(
        value(&samples, "skill_runner_turn_duration_seconds", &[script]),
        4.0,
        "the turns that ended were timed"
    );
    assert_eq!(value(&samples, "skill_runner_queue_wait_seconds", &[]), 5.0);
    let posts = [("method", "POST"), ("route", "/v1/jobs")];
    assert_eq!(
        value(
            &samples,
            "skill_runner_http_requests_total",
            &[posts[0], posts[1], ("status", "200")]
        ),
        7.0
    );
    assert_eq!(
        value(
            &samples,
            "skill_runner_http_requests_total",
            &[posts[0], posts[1], ("status", "429")]
        ),
        1.0
    );
    let info = samples
        .iter()
        .find(|s| s.metric == "skill_runner_info")
        .expect("the node's info");
    assert_eq!(info.labels.get("node_id"), Some("node-a"));
    assert_eq!(info.labels.get("store"), Some("sqlite"));

    drop(events);
    for rid in [&queued, &running] {
        let (code, _) = server
            .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
            .await;
        assert_eq!(code, 200);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let samples = scrape(&server).await;
        let canceled = [script, ("status", "canceled")];
        if value(&samples, "skill_runner_sse_subscribers", &[]) == 0.0
            && value(&samples, "skill_runner_runs_ended_total", &canceled) == 2.0
            && value(
                &samples,
                "skill_runner_runs",
                &[script, ("state", "running")],
            ) == 0.0
        {
            assert_eq!(value(&samples, "skill_runner_queue_depth", &[]), 0.0);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the counts settle");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The transition log: one line per move, with the run, the node and the state.
    let status = server.wait_job(&succeeded[0]).await;
    let run_id = status["run_id"].as_str().expect("a run id");
    let log = server.log();
    let moves: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("run moved") && l.contains(run_id))
        .collect();
    assert_eq!(moves.len(), 3, "queued, running, succeeded:\n{log}");
    for (line, state) in moves.iter().zip(["queued", "running", "succeeded"]) {
        assert!(
            line.contains("node=\"node-a\"") || line.contains("node=node-a"),
            "{line}"
        );
        assert!(
            line.contains(&format!("state=\"{state}\""))
                || line.contains(&format!("state={state}")),
            "{line}"
        );
    }
    // The access log: one line per request, with its status.
    assert!(
        log.lines().any(|l| l.contains("skill_runner::access")
            && l.contains("path=\"/v1/jobs\"")
            && l.contains("status=429")),
        "{log}"
    );
}

/// The probes answer without the token, and `skill-runner health` asks readiness where the
/// settings make the service listen. (Readiness under a failing SQLite database:
/// `db_faults`; under PostgreSQL: below.)
#[tokio::test]
async fn probes_are_open_and_the_health_check_asks_readiness() {
    let server = TestServer::start_with(
        common::TestDirs::new(),
        &[("SKILL_RUNNER_API_TOKENS", "sekret-token-for-tests")],
    );
    for path in ["/healthz", "/readyz"] {
        let (code, body) = server.get(path).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    assert_eq!(server.get("/healthz").await.1, json!({"status": "ok"}));
    assert_eq!(
        server.get("/readyz").await.1,
        json!({"status": "ready", "store": "ok", "storage": "ok", "draining": false})
    );
    for path in ["/metrics", "/v1/system/version"] {
        assert_eq!(server.get(path).await.0, 401, "{path} needs the token");
    }
    let version: serde_json::Value = server
        .client
        .get(server.url("/v1/system/version"))
        .bearer_auth("sekret-token-for-tests")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(version["service"], "skill-runner");
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(version["store"], "sqlite");
    assert!(
        version["node_id"]
            .as_str()
            .unwrap()
            .ends_with(&format!("-{}", server.pid())),
        "host name and pid by default: {version}"
    );

    // Re-executed without its environment at start, it still goes by its name in `ps`.
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", server.pid())).unwrap();
    assert_eq!(comm.trim(), "skill-runner");

    // The image's health check asks the same: on the address the settings name, or on
    // loopback for a service bound to every interface.
    let port = server.url("").rsplit(':').next().unwrap().to_owned();
    assert_eq!(
        health(&[("SKILL_RUNNER_BIND", &format!("127.0.0.1:{port}"))]).0,
        0
    );
    assert_eq!(
        health(&[("SKILL_RUNNER_BIND", &format!("0.0.0.0:{port}"))]).0,
        0
    );
    assert_eq!(health(&[("PORT", &port)]).0, 0);

    drop(server);
    let (code, said) = health(&[("PORT", &port)]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("cannot connect"), "{said}");
}

/// `skill-runner health` with `env` and no other setting: its exit code and what it printed.
fn health(env: &[(&str, &str)]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skill-runner"))
        .arg("health")
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap(), said)
}

/// A stand-in OpenTelemetry collector: keeps every OTLP/HTTP JSON body posted to `/v1/traces`.
async fn collector() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use axum::routing::post;
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).expect("OTLP JSON"));
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, bodies)
}

/// Every span the collector received.
fn spans(bodies: &[serde_json::Value]) -> Vec<serde_json::Value> {
    bodies
        .iter()
        .flat_map(|b| b["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn attribute<'a>(span: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

#[tokio::test]
async fn traces_go_to_the_collector_and_a_run_links_to_the_request_that_queued_it() {
    let (url, bodies) = collector().await;
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("SKILL_RUNNER_NODE_ID", "node-t"),
        ],
    );
    let rid = server
        .create_job(
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "input": {"text": "t"}}),
        )
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded");
    let run_id = status["run_id"].as_str().unwrap().to_owned();

    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let (run, create) = loop {
        let all = spans(&bodies.lock().unwrap());
        let run = all
            .iter()
            .find(|s| s["name"] == "run" && attribute(s, "run_id") == Some(&run_id))
            .cloned();
        let create = all.iter().find(|s| s["name"] == "POST /v1/jobs").cloned();
        if let (Some(run), Some(create)) = (run, create) {
            break (run, create);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "spans exported: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(attribute(&run, "node"), Some("node-t"));
    let link = &run["links"][0];
    assert_eq!(
        (&link["traceId"], &link["spanId"]),
        (&create["traceId"], &create["spanId"]),
        "the run's span links to the create request's: {run}"
    );
    let resource = &bodies.lock().unwrap()[0]["resourceSpans"][0]["resource"];
    assert!(
        resource.to_string().contains("\"skill-runner\""),
        "{resource}"
    );
    // The transition lines name the trace: the create's for `queued`, the run's after.
    let log = server.log();
    let line = |state: &str| {
        log.lines()
            .find(|l| {
                l.contains("run moved")
                    && l.contains(&run_id)
                    && l.contains(&format!("state=\"{state}\""))
            })
            .unwrap_or_else(|| panic!("no {state} line in\n{log}"))
            .to_owned()
    };
    let trace =
        |span: &serde_json::Value| format!("trace_id={}", span["traceId"].as_str().unwrap());
    assert!(
        line("queued").contains(&trace(&create)),
        "{}",
        line("queued")
    );
    assert!(
        line("succeeded").contains(&trace(&run)),
        "{}",
        line("succeeded")
    );
}

/// On PostgreSQL, readiness follows the database: a node whose database lacks this build's
/// latest migration, or went away, is not ready (503, `store: failed`; `skill-runner health`
/// fails) but lives, and is ready and works again once it is whole and back.
#[tokio::test]
async fn readiness_follows_postgres_going_away_and_coming_back() {
    let cluster = common::postgres::OwnCluster::start();
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[("SKILL_RUNNER_DATABASE_URL", &cluster.url)],
    );
    let ready = json!({"status": "ready", "store": "ok", "storage": "ok", "draining": false});
    assert_eq!(server.get("/readyz").await, (200, ready.clone()));

    // A database that lacks this build's latest migration is not ready; restored, it is.
    let sql = |statement: &str| {
        let status = std::process::Command::new(common::postgres::tool("psql"))
            .args([&cluster.url, "-v", "ON_ERROR_STOP=1", "-qc", statement])
            .status()
            .unwrap();
        assert!(status.success(), "{statement}");
    };
    sql(
        "CREATE TABLE kept AS SELECT * FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)",
    );
    sql("DELETE FROM _sqlx_migrations WHERE version = (SELECT version FROM kept)");
    let (code, body) = server.get("/readyz").await;
    assert_eq!(
        (code, body),
        (
            503,
            json!({"status": "not_ready", "store": "failed", "storage": "ok", "draining": false})
        )
    );
    server.wait_log("readiness: the store check failed").await;
    let port = server.url("").rsplit(':').next().unwrap().to_owned();
    let (code, said) = health(&[("PORT", &port)]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("answered 503") && said.contains("not_ready"),
        "{said}"
    );
    sql("INSERT INTO _sqlx_migrations SELECT * FROM kept");
    assert_eq!(server.get("/readyz").await, (200, ready.clone()));

    cluster.stop();
    let (code, body) = server.get("/readyz").await;
    assert_eq!((code, &body["store"]), (503, &json!("failed")), "{body}");
    assert_eq!(server.get("/healthz").await.0, 200, "the process lives");

    cluster.resume();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while server.get("/readyz").await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "ready again once the database is back: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
}

/// The operator's system routes: the settings in force and the log level changed while the
/// service runs, the latest log records found by run, level, source and text, and a data reset
/// that waits for active runs, confirms, counts and deletes.
#[tokio::test]
async fn settings_log_query_and_data_reset() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[("LOG_LEVEL", "info")]);
    let (code, settings) = server.get("/v1/management/system/settings").await;
    assert_eq!(code, 200, "{settings}");
    assert_eq!(settings["logging"]["server_level"], "INFO");
    assert_eq!(settings["reset_confirmation_text"], "CONFIRM RESET");
    let (code, options) = server.get("/v1/management/runtime-options").await;
    assert_eq!(code, 200, "{options}");
    assert_eq!(options["service_defaults"]["hard_timeout_seconds"], 1200);
    for name in [
        "env",
        "workspace",
        "preamble_prompt",
        "interactive_auto_reply",
        "no_cache",
    ] {
        assert!(
            options["options"]
                .as_array()
                .unwrap()
                .contains(&json!(name)),
            "{name}: {options}"
        );
    }

    // A run's records are found by its id.
    let rid = server
        .create_job(
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "input": {"text": "a"},
                           "runtime_options": {"no_cache": true}}),
        )
        .await;
    let status = server.wait_job(&rid).await;
    let run_id = status["run_id"].as_str().unwrap();
    let query = |params: &str| {
        let server = &server;
        let path = format!("/v1/management/system/logs/query?{params}");
        async move { server.get(&path).await }
    };
    let (code, page) = query(&format!("run_id={run_id}")).await;
    assert_eq!(code, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    assert!(!items.is_empty(), "{page}");
    assert!(
        items.iter().all(|i| i["fields"]["run_id"] == run_id),
        "{page}"
    );
    assert!(items.iter().any(|i| i["level"] == "INFO"));
    let (_, boot) = query("source=bootstrap&q=LISTENING").await;
    assert_eq!(
        boot["total_matched"], 1,
        "the start-up line, before serving: {boot}"
    );
    let (_, paged) = query("limit=1").await;
    assert_eq!(paged["items"].as_array().unwrap().len(), 1);
    assert_eq!(paged["next_cursor"], 1, "{paged}");
    for (params, says) in [
        ("source=elsewhere", "source must be one of"),
        ("level=LOUD", "level must be one of"),
        ("limit=0", "limit must be from 1 to 1000"),
    ] {
        let (code, body) = query(params).await;
        assert_eq!(code, 400, "{params}: {body}");
        assert!(body.to_string().contains(says), "{body}");
    }

    // Raised to WARNING, a run's INFO records are no longer logged.
    let (code, changed) = server
        .put_json(
            "/v1/management/system/settings",
            json!({"logging": {"server_level": "WARNING", "runtime_level": "WARNING"}}),
        )
        .await;
    assert_eq!(code, 200, "{changed}");
    assert_eq!(changed["logging"]["server_level"], "WARNING");
    let quiet = server
        .create_job(
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "input": {"text": "b"},
                           "runtime_options": {"no_cache": true}}),
        )
        .await;
    let status = server.wait_job(&quiet).await;
    let (_, page) = query(&format!(
        "run_id={}&level=INFO",
        status["run_id"].as_str().unwrap()
    ))
    .await;
    assert_eq!(page["total_matched"], 0, "{page}");
    for body in [
        json!({"logging": {"server_level": "LOUDEST"}}),
        json!({"logging": {"server_level": "INFO", "runtime_level": "DEBUG"}}),
        json!({"logging": {}}),
    ] {
        let (code, _) = server
            .put_json("/v1/management/system/settings", body.clone())
            .await;
        assert_eq!(code, 400, "{body}");
    }

    // The reset waits for active runs and needs its confirmation.
    let busy = server
        .create_job(
            json!({"skill_id": "probe", "parameter": {"mode": "sleep"}, "input": {"text": "c"},
                           "runtime_options": {"no_cache": true}}),
        )
        .await;
    let reset = |body: serde_json::Value| {
        let server = &server;
        async move {
            server
                .post_json("/v1/management/system/reset-data", body)
                .await
        }
    };
    let (code, _) = reset(json!({"confirmation": "yes"})).await;
    assert_eq!(code, 400);
    let (code, refused) = reset(json!({"confirmation": "CONFIRM RESET"})).await;
    assert_eq!(code, 409, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("active"),
        "{refused}"
    );
    let (code, _) = server
        .post_json(&format!("/v1/jobs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    let (code, counted) = reset(json!({"confirmation": "CONFIRM RESET", "dry_run": true,
                                       "include_logs": true}))
    .await;
    assert_eq!(code, 200, "{counted}");
    assert_eq!(
        (&counted["runs_deleted"], &counted["requests_deleted"]),
        (&json!(3), &json!(3))
    );
    assert!(counted["log_records_deleted"].as_u64().unwrap() > 0);
    let (_, still) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(still["status"], "succeeded", "a dry run deletes nothing");
    let folder = server.run_dir(&still);
    let (code, done) = reset(json!({"confirmation": "CONFIRM RESET", "include_logs": true})).await;
    assert_eq!(code, 200, "{done}");
    assert_eq!(done["runs_deleted"], 3);
    let (code, _) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(code, 404);
    assert!(!folder.exists(), "its folder went too");
    let (_, page) = query(&format!("run_id={run_id}")).await;
    assert_eq!(page["total_matched"], 0, "the log records went: {page}");
}
