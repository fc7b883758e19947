//! SIGKILL the server while it installs or runs jobs, restart it, and check nothing is
//! half-done and no accepted job is lost.

use skill_runner_test_support as common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::postgres::{Store, pairs};
use common::{
    Package, TestDirs, TestServer, asker_skill, assert_group_gone, digest, digest_files,
    probe_skill, skill_package, tree,
};
use serde_json::json;

/// Incompressible bytes, so extraction takes long enough to be interrupted.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn big_package(major: u64) -> Package {
    let mut p = skill_package("big", &format!("{major}.0.0"));
    for i in 0..200 {
        p = p.file(
            &format!("data/part-{i:03}.bin"),
            noise(major * 1000 + i, 100 * 1024),
        );
    }
    p
}

fn expected(p: &Package) -> BTreeMap<String, (usize, u64)> {
    digest_files(&p.files)
}

fn version(p: &Package) -> String {
    String::from_utf8(p.files["VERSION"].clone()).unwrap()
}

#[tokio::test]
async fn sigkill_during_install_leaves_old_or_new_never_a_mix() {
    let dirs = TestDirs::new();
    let mut live = big_package(1);
    {
        let server = TestServer::start_with(dirs.clone(), &[]);
        assert_eq!(
            server.install_and_wait(live.zip()).await["status"],
            "succeeded"
        );
    }

    let mut outcomes = Vec::new();
    for (round, delay_ms) in [0u64, 5, 15, 30, 60, 100, 200, 400].into_iter().enumerate() {
        let next = big_package(round as u64 + 2);
        let mut server = TestServer::start_with(dirs.clone(), &[]);
        let rid = server.install(next.zip()).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        server.kill();

        let server = TestServer::start_with(dirs.clone(), &[]);
        let status = server.wait_install(&rid).await;
        let now_live = digest(&dirs.skills.join("big"));
        let old_version = version(&live);
        match status["status"].as_str().unwrap() {
            "succeeded" => {
                assert_eq!(
                    now_live,
                    expected(&next),
                    "round {round}: live must be the new version"
                );
                assert_eq!(
                    digest(&dirs.skills.join(".archive/big").join(&old_version)),
                    expected(&live),
                    "round {round}: the old version is archived whole"
                );
                live = next;
            }
            "failed" => {
                let error = status["error"].as_str().unwrap();
                assert!(error.contains("service restart"), "round {round}: {error}");
                assert_eq!(
                    now_live,
                    expected(&live),
                    "round {round}: live must be the old version"
                );
                assert!(!dirs.skills.join(".archive/big").join(&old_version).exists());
            }
            other => panic!("round {round}: unexpected status {other}"),
        }
        assert!(
            tree(&dirs.skills.join(".staging")).is_empty(),
            "round {round}: staging is cleared"
        );
        assert!(
            tree(&dirs.data.join("skill_installs")).is_empty(),
            "round {round}: uploads are cleared"
        );
        let (_, skill) = server.get("/v1/skills/big").await;
        assert_eq!(skill["health"], "healthy");
        outcomes.push((delay_ms, status["status"].as_str().unwrap().to_owned()));
    }
    eprintln!("kill delay → outcome: {outcomes:?}");
}

#[tokio::test]
async fn sigkill_with_jobs_running_and_queued_loses_nothing() {
    jobs_running_and_queued_survive_a_sigkill(Store::Sqlite).await;
}

/// The same on PostgreSQL: the restarted node takes the database over from the killed one.
#[tokio::test]
async fn sigkill_with_jobs_running_and_queued_loses_nothing_on_postgres() {
    jobs_running_and_queued_survive_a_sigkill(Store::Postgres).await;
}

async fn jobs_running_and_queued_survive_a_sigkill(store: Store) {
    let dirs = TestDirs::new();
    probe_skill("probe", None).write_into(&dirs.skills);
    let env = store.env(&[("SKILL_RUNNER_MAX_CONCURRENT", "1")]).await;
    let env = pairs(&env);
    let mut server = TestServer::start_with(dirs.clone(), &env);
    let running = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "grandchild"}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{running}"), &["running"])
        .await;
    let workspace = dirs
        .data
        .join("runs")
        .join(status["run_id"].as_str().unwrap())
        .join("workspace");
    let pgid = common::wait_pgid(&workspace).await;
    let mut queued = Vec::new();
    for n in 0..3 {
        queued.push(
            server
                .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": n}}))
                .await,
        );
    }
    // A burst of creates in flight when the server dies: every one answered 200 must survive.
    let burst: Vec<_> = (0..40)
        .map(|n| {
            let client = server.client.clone();
            let url = server.url("/v1/jobs");
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(n)).await;
                let body = json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": 100 + n}});
                let resp = client.post(url).json(&body).send().await.ok()?;
                if resp.status() != 200 {
                    return None;
                }
                let v: serde_json::Value = resp.json().await.ok()?;
                Some(v["request_id"].as_str()?.to_owned())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    server.kill();
    assert_group_gone(pgid);
    let mut accepted = queued.clone();
    for task in burst {
        accepted.extend(task.await.unwrap());
    }

    let server = TestServer::start_with(dirs.clone(), &env);
    let (_, version) = server.get("/v1/system/version").await;
    let kind = if store == Store::Postgres {
        "postgres"
    } else {
        "sqlite"
    };
    assert_eq!(version["store"], kind, "{version}");
    assert_eq!(
        dirs.data.join("skill_runner.db").exists(),
        store == Store::Sqlite,
        "PostgreSQL leaves no SQLite file in the data dir"
    );
    let status = server.wait_job(&running).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["recovery_state"], "failed_reconciled");
    assert_eq!(status["error"]["code"], "ORCHESTRATOR_RESTART_INTERRUPTED");
    assert!(status["recovered_at"].as_str().unwrap().ends_with('Z'));
    for rid in &accepted {
        let s = server.wait_job(rid).await;
        assert_eq!(
            s["status"], "succeeded",
            "accepted job {rid} after restart: {s}"
        );
    }
    eprintln!(
        "{} accepted jobs all succeeded after the restart",
        accepted.len()
    );
}

#[tokio::test]
async fn a_waiting_run_keeps_waiting_across_a_sigkill_and_resumes() {
    waiting_runs_survive_a_sigkill(Store::Sqlite).await;
}

#[tokio::test]
async fn a_waiting_run_keeps_waiting_across_a_sigkill_and_resumes_on_postgres() {
    waiting_runs_survive_a_sigkill(Store::Postgres).await;
}

async fn waiting_runs_survive_a_sigkill(store: Store) {
    let dirs = TestDirs::new();
    asker_skill("asker").write_into(&dirs.skills);
    probe_skill("probe", None).write_into(&dirs.skills);
    let env = store.env(&[("SKILL_RUNNER_MAX_CONCURRENT", "1")]).await;
    let env = pairs(&env);
    let mut server = TestServer::start_with(dirs.clone(), &env);
    let body = json!({"skill_id": "asker", "parameter": {"asks": 1},
                      "runtime_options": {"execution_mode": "interactive"}});
    let rid = server.create_job(body.clone()).await;
    // A second waiting run whose reply was accepted just before the crash: it is queued and
    // must run after the restart.
    let replied = server.create_job(body.clone()).await;
    // A third one decides by itself at its timeout, which the restart must re-arm.
    let mut timed = body;
    timed["runtime_options"]["session_timeout_sec"] = json!(4);
    timed["runtime_options"]["interactive_require_user_reply"] = json!(false);
    let timed = server.create_job(timed).await;
    for r in [&rid, &replied, &timed] {
        server
            .wait_status(&format!("/v1/jobs/{r}"), &["waiting_user"])
            .await;
    }
    // The slot is busy, so the accepted reply leaves its run queued when the server dies.
    server
        .create_running(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    let (code, _) = server
        .post_json(
            &format!("/v1/jobs/{replied}/interaction/reply"),
            json!({"interaction_id": 11, "response": "before"}),
        )
        .await;
    assert_eq!(code, 200);
    server.kill();

    let server = TestServer::start_with(dirs.clone(), &env);
    let (_, status) = server.get(&format!("/v1/jobs/{replied}")).await;
    assert_eq!(
        status["recovery_state"], "none",
        "queued at the crash: {status}"
    );
    let (_, status) = server.get(&format!("/v1/jobs/{timed}")).await;
    assert_eq!(status["recovery_state"], "recovered_waiting", "{status}");
    let job = format!("/v1/jobs/{rid}");
    let (_, status) = server.get(&job).await;
    assert_eq!(status["status"], "waiting_user", "{status}");
    assert_eq!(status["recovery_state"], "recovered_waiting");
    assert_eq!(status["recovery_reason"], "resumable_waiting_preserved");
    assert!(status["recovered_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(status["pending_interaction_id"], 11);
    let (_, pending) = server.get(&format!("{job}/interaction/pending")).await;
    assert_eq!(pending["pending"]["prompt"], "question 1?");
    let (code, _) = server
        .post_json(
            &format!("{job}/interaction/reply"),
            json!({"interaction_id": 11, "response": "after"}),
        )
        .await;
    assert_eq!(code, 200);
    for (r, answer) in [(&rid, "after"), (&replied, "before")] {
        let status = server.wait_job(r).await;
        assert_eq!(status["status"], "succeeded", "{status}");
        let (_, result) = server.get(&format!("/v1/jobs/{r}/result")).await;
        assert_eq!(result["result"]["data"]["replies"], json!([answer]));
    }
    let status = server.wait_job(&timed).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["auto_decision_count"], 1);
}

/// SIGTERM with both slots busy and 18 runs queued: no queued run is taken during shutdown (a
/// worker whose run the shutdown ended used to pop the next one and fail it as interrupted);
/// after a restart all 18 run and succeed. Repeated, because the race was a coin toss.
#[tokio::test]
async fn sigterm_leaves_every_queued_run_queued() {
    for round in 0..6 {
        let dirs = TestDirs::new();
        probe_skill("probe", None).write_into(&dirs.skills);
        let slots = [("SKILL_RUNNER_MAX_CONCURRENT", "2")];
        let mut server = TestServer::start_with(dirs.clone(), &slots);
        // Runs that end at once when the shutdown signals them.
        for _ in 0..2 {
            let rid = server
                .create_job(json!({"skill_id": "probe", "parameter": {"mode": "late"}}))
                .await;
            server
                .wait_status(&format!("/v1/jobs/{rid}"), &["running"])
                .await;
        }
        let mut queued = Vec::new();
        for i in 0..18 {
            queued.push(
                server
                    .create_job(json!({"skill_id": "probe", "input": {"text": format!("q{i}")},
                                       "parameter": {"mode": "ok"}, "runtime_options": {"no_cache": true}}))
                    .await,
            );
        }
        assert!(server.terminate().success());
        let server = TestServer::start_with(dirs.clone(), &slots);
        for rid in &queued {
            let status = server.wait_job(rid).await;
            assert_eq!(status["status"], "succeeded", "round {round}: {status}");
        }
    }
}

/// The store fails while the service runs (injected in the test build): a failure on the first
/// `start_run` and the first `finish` is retried and the run succeeds; a `finish` that keeps
/// failing leaves the run to the reconciler, which ends it `failed` `INTERNAL_ERROR`; a start
/// that keeps failing fails the run at once. No process is left either way.
#[tokio::test]
async fn store_failures_at_start_and_finish_are_retried_then_reconciled() {
    let cases = [
        ("store-start-run,store-finish", "succeeded", None),
        ("store-finish*4", "failed", Some("lost track")),
        (
            "store-start-run*4",
            "failed",
            Some("could not record the start"),
        ),
    ];
    for (faults, wanted, says) in cases {
        let server = TestServer::with_skills(
            &[probe_skill("probe", None)],
            &[
                ("SKILL_RUNNER_TEST_FAULTS", faults),
                ("SKILL_RUNNER_RECONCILE_INTERVAL_SECONDS", "1"),
            ],
        );
        let rid = server
            .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
            .await;
        let status = server.wait_job(&rid).await;
        assert_eq!(status["status"], wanted, "{faults}: {status}");
        if let Some(says) = says {
            assert_eq!(
                status["error"]["code"], "INTERNAL_ERROR",
                "{faults}: {status}"
            );
            let message = status["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{faults}: {status}");
        }
        common::assert_nothing_runs_in(&server.run_dir(&status));
    }
}
