//! Schedules: a job at each tick of a cron expression, exactly one per tick on any number of
//! nodes (one killed mid-way), `skip` leaving a tick out while the previous run still runs,
//! pause, trigger, and each tenant's own.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use skill_runner_test_support as common;
use skill_runner_types::clock::Timestamp;

use common::postgres::{Store, fresh_database, pairs};
use common::{TestDirs, TestServer, probe_skill};

/// The runs schedule `id` made, by tick (each tick's request ids).
async fn runs_of(server: &TestServer, id: &str) -> BTreeMap<String, Vec<String>> {
    let (status, list) = server.get("/v1/management/runs?limit=500").await;
    assert_eq!(status, 200, "{list}");
    let mut by_tick: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for run in list["runs"].as_array().unwrap() {
        if run["schedule_id"] == id
            && let Some(tick) = run["schedule_tick_at"].as_str()
        {
            by_tick
                .entry(tick.to_owned())
                .or_default()
                .push(run["request_id"].as_str().unwrap().to_owned());
        }
    }
    by_tick
}

/// Every tick between the first and the last made exactly one run: no duplicate, no gap.
fn one_run_per_tick(by_tick: &BTreeMap<String, Vec<String>>) {
    let ticks: Vec<Timestamp> = by_tick
        .keys()
        .map(|t| Timestamp::parse(t).unwrap())
        .collect();
    assert!(by_tick.values().all(|runs| runs.len() == 1), "{by_tick:#?}");
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]),
            Duration::from_secs(1),
            "a gap: {by_tick:#?}"
        );
    }
}

async fn a_schedule_makes_one_run_per_tick_and_skips_an_overlap(store: Store) {
    let dirs = TestDirs::new();
    probe_skill("probe", None).write_into(&dirs.skills);
    let env = store.env(&[]).await;
    let server = TestServer::start_with(dirs, &pairs(&env));
    for (body, says) in [
        (
            json!({"skill_id": "probe", "cron": "61 * * * *"}),
            "is not a cron",
        ),
        (
            json!({"skill_id": "probe", "cron": "* * * * *", "timezone": "Nowhere"}),
            "timezone",
        ),
        (
            json!({"skill_id": "probe", "cron": "* * * * *", "overlap": "pile"}),
            "overlap must be",
        ),
        (json!({"skill_id": "probe"}), "cron is required"),
        (json!({"cron": "* * * * *"}), "skill_id is required"),
        (
            json!({"skill_id": "probe", "cron": "* * * * *", "colour": 1}),
            "'colour' is not a field",
        ),
    ] {
        let (status, refused) = server.post_json("/v1/schedules", body.clone()).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert!(refused["detail"].to_string().contains(says), "{refused}");
    }
    let (status, made) = server
        .post_json(
            "/v1/schedules",
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "cron": "* * * * * *",
                   "timezone": "Europe/Berlin"}),
        )
        .await;
    assert_eq!(status, 200, "{made}");
    let id = made["schedule_id"].as_str().unwrap().to_owned();
    assert_eq!(made["next_runs"].as_array().unwrap().len(), 5, "{made}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, paused) = server
        .patch_json(&format!("/v1/schedules/{id}"), json!({"paused": true}))
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["next_runs"], json!([]));
    // A changed job keeps the schedule's skill unless it names another.
    let (status, changed) = server
        .patch_json(
            &format!("/v1/schedules/{id}"),
            json!({"parameter": {"mode": "ok", "n": 2}}),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["job"]["skill_id"], "probe", "{changed}");
    assert_eq!(changed["job"]["parameter"]["n"], 2, "{changed}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let by_tick = runs_of(&server, &id).await;
    assert!(by_tick.len() >= 3, "{by_tick:#?}");
    one_run_per_tick(&by_tick);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(runs_of(&server, &id).await, by_tick, "paused: no more runs");
    let (status, triggered) = server
        .post_json(&format!("/v1/schedules/{id}/trigger"), json!({}))
        .await;
    assert_eq!(status, 200, "{triggered}");
    let rid = triggered["request_id"].as_str().unwrap();
    let (_, shown) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(shown["schedule_id"], id.as_str(), "{shown}");

    // `skip`: while a run sleeps, the ticks make no other.
    let (_, slow) = server
        .post_json(
            "/v1/schedules",
            json!({"skill_id": "probe", "parameter": {"mode": "sleep"}, "cron": "* * * * * *",
                   "overlap": "skip"}),
        )
        .await;
    let slow_id = slow["schedule_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, shown) = server.get(&format!("/v1/schedules/{slow_id}")).await;
    assert_eq!(shown["last_outcome"], "skipped_overlap", "{shown}");
    assert_eq!(runs_of(&server, &slow_id).await.len(), 1);
    let (status, _) = server.delete(&format!("/v1/schedules/{slow_id}")).await;
    assert_eq!(status, 200);
    let (status, _) = server.get(&format!("/v1/schedules/{slow_id}")).await;
    assert_eq!(status, 404);

    // `cancel_previous`: each tick cancels the run still sleeping and makes its own.
    let (_, eager) = server
        .post_json(
            "/v1/schedules",
            json!({"skill_id": "probe", "parameter": {"mode": "sleep"}, "cron": "* * * * * *",
                   "overlap": "cancel_previous", "runtime_options": {"no_cache": true}}),
        )
        .await;
    let eager_id = eager["schedule_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let runs = loop {
        let runs = runs_of(&server, &eager_id).await;
        if runs.len() >= 2 || std::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (status, _) = server
        .patch_json(
            &format!("/v1/schedules/{eager_id}"),
            json!({"paused": true}),
        )
        .await;
    assert_eq!(status, 200);
    let first = runs.values().next().unwrap()[0].clone();
    let (_, shown) = server.get(&format!("/v1/jobs/{first}")).await;
    assert_eq!(shown["status"], "canceled", "{runs:#?}: {shown}");
    for rids in runs.values().skip(1) {
        server
            .post_json(&format!("/v1/jobs/{}/cancel", rids[0]), json!({}))
            .await;
    }
}

#[tokio::test]
async fn a_schedule_makes_one_run_per_tick_and_skips_an_overlap_on_sqlite() {
    a_schedule_makes_one_run_per_tick_and_skips_an_overlap(Store::Sqlite).await;
}

#[tokio::test]
async fn a_schedule_makes_one_run_per_tick_and_skips_an_overlap_on_postgres() {
    a_schedule_makes_one_run_per_tick_and_skips_an_overlap(Store::Postgres).await;
}

/// Two nodes tick one schedule every second for ten seconds, one killed by SIGKILL half-way:
/// every tick made exactly one run.
#[tokio::test]
async fn two_nodes_make_one_run_per_tick_though_one_dies() {
    let skills = TestDirs::new();
    probe_skill("probe", None).write_into(&skills.skills);
    let url = fresh_database().await;
    let node = |id: &str| {
        let env = [
            ("SKILL_RUNNER_DATABASE_URL", url.as_str()),
            ("SKILL_RUNNER_NODE_ID", id),
            ("SKILL_RUNNER_SKILLS_DIR", skills.skills.to_str().unwrap()),
            ("SKILL_RUNNER_NODE_TIMEOUT_SECONDS", "3"),
        ];
        TestServer::start_with(TestDirs::new(), &env)
    };
    let mut a = node("node-a");
    let b = node("node-b");
    let (status, made) = a
        .post_json(
            "/v1/schedules",
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "cron": "* * * * * *",
                   "runtime_options": {"no_cache": true}}),
        )
        .await;
    assert_eq!(status, 200, "{made}");
    let id = made["schedule_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_secs(5)).await;
    a.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (status, _) = b
        .patch_json(&format!("/v1/schedules/{id}"), json!({"paused": true}))
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let by_tick = runs_of(&b, &id).await;
    assert!(by_tick.len() >= 8, "ten seconds of ticks: {by_tick:#?}");
    one_run_per_tick(&by_tick);
}
