//! How runs arrive: priorities among a tenant's waiting runs, runs put off until their time,
//! and creates made idempotent by a key, on SQLite and on PostgreSQL.

use std::time::Duration;

use serde_json::{Value, json};
use skill_runner_test_support as common;
use skill_runner_types::clock::Timestamp;

use common::postgres::{Store, pairs};
use common::{TestDirs, TestServer, probe_skill};

async fn server(store: Store) -> TestServer {
    let dirs = TestDirs::new();
    probe_skill("probe", None).write_into(&dirs.skills);
    let env = store.env(&[("SKILL_RUNNER_MAX_CONCURRENT", "1")]).await;
    TestServer::start_with(dirs, &pairs(&env))
}

async fn started_at(server: &TestServer, rid: &str) -> Timestamp {
    let (status, run) = server.get(&format!("/v1/management/runs/{rid}")).await;
    assert_eq!(status, 200, "{run}");
    Timestamp::parse(
        run["started_at"]
            .as_str()
            .unwrap_or_else(|| panic!("{run}")),
    )
    .unwrap()
}

/// 50 runs of priority 4 wait behind a running one; a run of priority 1 created after them
/// starts next, and they follow in their order.
async fn a_higher_priority_starts_first(store: Store) {
    let server = server(store).await;
    let blocker = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    server
        .wait_status(&format!("/v1/jobs/{blocker}"), &["running"])
        .await;
    let mut low = Vec::new();
    for n in 0..50 {
        let rid = server
            .create_job(json!({"skill_id": "probe", "priority": 4,
                               "parameter": {"mode": "ok", "n": n}}))
            .await;
        low.push(rid);
    }
    let urgent = server
        .create_job(json!({"skill_id": "probe", "priority": 1,
                           "parameter": {"mode": "ok", "n": 1000}}))
        .await;
    let (_, shown) = server.get(&format!("/v1/jobs/{urgent}")).await;
    assert_eq!(shown["priority"], 1, "{shown}");
    let (status, _) = server
        .post_json(&format!("/v1/jobs/{blocker}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200);
    for rid in low.iter().chain([&urgent]) {
        server
            .wait_status(&format!("/v1/jobs/{rid}"), &["succeeded"])
            .await;
    }
    let first_low = started_at(&server, &low[0]).await;
    assert!(
        started_at(&server, &urgent).await < first_low,
        "the priority-1 run started before every priority-4 run"
    );
    let mut order = Vec::new();
    for rid in &low {
        order.push(started_at(&server, rid).await);
    }
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "equals keep their order"
    );
}

/// A run put off (`run_after`, `delay_seconds`) waits queued until its time, then starts
/// within a second; a bad time is refused naming the field.
async fn a_put_off_run_waits_for_its_time(store: Store) {
    let server = server(store).await;
    let at = Timestamp::after(Duration::from_secs(3));
    let rid = server
        .create_job(json!({"skill_id": "probe", "run_after": at.to_string(),
                           "parameter": {"mode": "ok", "n": 1}}))
        .await;
    let (_, shown) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(shown["status"], "queued", "{shown}");
    assert_eq!(
        Timestamp::parse(shown["run_after"].as_str().unwrap()).unwrap(),
        Timestamp::parse(&at.to_string()).unwrap()
    );
    let delayed = server
        .create_job(json!({"skill_id": "probe", "delay_seconds": 1,
                           "parameter": {"mode": "ok", "n": 2}}))
        .await;
    // A run without a time passes the runs waiting for theirs.
    let now = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": 3}}))
        .await;
    server
        .wait_status(&format!("/v1/jobs/{now}"), &["succeeded"])
        .await;
    let (_, still) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(still["status"], "queued", "{still}");
    for id in [&rid, &delayed] {
        server
            .wait_status(&format!("/v1/jobs/{id}"), &["succeeded"])
            .await;
    }
    let started = started_at(&server, &rid).await;
    assert!(started >= at, "started {started} before its time {at}");
    let late = started.duration_since(at);
    assert!(
        late < Duration::from_secs(1),
        "started {late:?} after its time"
    );

    for (body, field) in [
        (
            json!({"run_after": "tomorrow"}),
            "run_after must be an RFC 3339 time",
        ),
        (
            json!({"delay_seconds": -1}),
            "delay_seconds must be a number",
        ),
        (
            json!({"run_after": at.to_string(), "delay_seconds": 1}),
            "send one of them",
        ),
        (
            json!({"priority": 0}),
            "priority must be an integer from 1 (first) to 4",
        ),
        (json!({"priority": "high"}), "priority must be an integer"),
        (
            json!({"retry": {"max_attempts": 0}}),
            "retry.max_attempts must be an integer",
        ),
        (
            json!({"callback_url": "ftp://x/"}),
            "callback_url: 'ftp://x/' must be an http",
        ),
        (
            json!({"callback_url": "https://93.184.215.14/h"}),
            "this tenant has no enabled webhook",
        ),
        (
            json!({"callback_url": "http://127.0.0.1:9/h"}),
            "public addresses only",
        ),
    ] {
        let mut body = body;
        body["skill_id"] = json!("probe");
        body["parameter"] = json!({"mode": "ok"});
        let (status, answer) = server.post_json("/v1/jobs", body).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer["detail"].to_string().contains(field), "{answer}");
    }
}

/// The same `Idempotency-Key` twice answers one request; with another body it is refused;
/// another tenant's key of the same name is its own.
async fn an_idempotency_key_makes_one_request(store: Store) {
    let server = server(store).await;
    let body = json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": 7}});
    let create = |key: &'static str, body: Value| {
        let server = &server;
        async move {
            let response = server
                .client
                .post(server.url("/v1/jobs"))
                .header("idempotency-key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, first) = create("order-1", body.clone()).await;
    assert_eq!(status, 200, "{first}");
    let (status, again) = create("order-1", body.clone()).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["request_id"], first["request_id"]);
    let (_, list) = server.get("/v1/management/runs?limit=50").await;
    assert_eq!(list["runs"].as_array().map_or(0, Vec::len), 1, "{list}");
    let mut other = body.clone();
    other["parameter"]["n"] = json!(8);
    let (status, refused) = create("order-1", other).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["detail"].to_string().contains("Idempotency-Key"),
        "{refused}"
    );
    let (status, fresh) = create("order-2", body.clone()).await;
    assert_eq!(status, 200);
    assert_ne!(fresh["request_id"], first["request_id"]);
    // A refused create keeps no key: the next one with it is a create of its own.
    let (status, _) = create("order-3", json!({"skill_id": "nope"})).await;
    assert_eq!(status, 404);
    let (status, made) = create("order-3", body).await;
    assert_eq!(status, 200, "{made}");
}

macro_rules! on_both_stores {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                super::$test(Store::Sqlite).await;
            }

            #[tokio::test]
            async fn postgres() {
                super::$test(Store::Postgres).await;
            }
        }
    )*};
}

on_both_stores!(
    a_higher_priority_starts_first,
    a_put_off_run_waits_for_its_time,
    an_idempotency_key_makes_one_request,
);
