//! Two nodes on one PostgreSQL database: they share one queue and either answers for any run;
//! a cancel reaches the node running the turn; a node killed mid-turn has its turn ended
//! `NODE_LOST` by the other, which runs what was left queued.

use std::path::Path;
use std::time::Duration;

use skill_runner_test_support as common;

use common::postgres::fresh_database;
use common::shared_storage::{Kind, SharedStorage};
use common::{TestDirs, TestServer, assert_group_gone, probe_skill};
use serde_json::{Value, json};

/// A node of the database at `url`, named `id`, one slot, taking its skills from `skills` (the
/// nodes share their skills dir, as a shared volume would); `extra` settings win.
fn node_with(url: &str, id: &str, skills: &Path, extra: &[(&str, &str)]) -> TestServer {
    let skills = skills.to_str().unwrap();
    let mut env = vec![
        ("SKILL_RUNNER_DATABASE_URL", url),
        ("SKILL_RUNNER_NODE_ID", id),
        ("SKILL_RUNNER_SKILLS_DIR", skills),
        ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
        ("SKILL_RUNNER_MAX_QUEUE_SIZE", "1000"),
        ("SKILL_RUNNER_NODE_TIMEOUT_SECONDS", "3"),
        ("SKILL_RUNNER_SSE_HEARTBEAT_SECONDS", "1"),
    ];
    env.extend_from_slice(extra);
    TestServer::start_with(TestDirs::new(), &env)
}

/// The `probe`, `probe-doc` (a file input) and `asker` skills in a skills dir of their own, and a fresh database.
async fn shared() -> (std::sync::Arc<TestDirs>, String) {
    let skills = TestDirs::new();
    probe_skill("probe", None).write_into(&skills.skills);
    probe_skill("probe-doc", Some(true)).write_into(&skills.skills);
    common::asker_skill("asker").write_into(&skills.skills);
    (skills, fresh_database().await)
}

/// Nodes `node-a` and `node-b` of one fresh database with [`shared`]'s skills (kept while the
/// first value lives), `extra` set.
async fn two_nodes(extra: &[(&str, &str)]) -> (std::sync::Arc<TestDirs>, TestServer, TestServer) {
    let (skills, url) = shared().await;
    let a = node_with(&url, "node-a", &skills.skills, extra);
    let b = node_with(&url, "node-b", &skills.skills, extra);
    (skills, a, b)
}

fn probe(mode: &str, text: &str) -> Value {
    json!({"skill_id": "probe", "parameter": {"mode": mode}, "input": {"text": text},
           "runtime_options": {"no_cache": true}})
}

/// Which of `nodes` holds the run's folder (its turn creates it just after the run shows
/// `running`: waited for).
async fn runs_on<'a>(nodes: &[&'a TestServer], status: &Value) -> &'a TestServer {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let held: Vec<_> = nodes
            .iter()
            .filter(|n| n.run_dir(status).exists())
            .collect();
        if held.len() == 1 || std::time::Instant::now() > deadline {
            assert_eq!(held.len(), 1, "one node holds the run's folder: {status}");
            return held[0];
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_nodes_share_the_queue_and_either_answers_for_any_run() {
    let (skills, a, b) = two_nodes(&[]).await;

    // Two long turns created on one node: with one slot each, the other node takes one.
    let first = a.create_job(probe("late", "1")).await;
    let second = a.create_job(probe("late", "2")).await;
    let mut statuses = Vec::new();
    for rid in [&first, &second] {
        statuses.push(
            a.wait_status(&format!("/v1/jobs/{rid}"), &["running"])
                .await,
        );
    }
    let holders = [
        runs_on(&[&a, &b], &statuses[0]).await,
        runs_on(&[&a, &b], &statuses[1]).await,
    ];
    assert!(
        !std::ptr::eq(holders[0], holders[1]),
        "each node runs one of the two turns"
    );

    // Either node answers for either run, and a cancel sent to the other node reaches it.
    let (on_b, on_a) = if std::ptr::eq(holders[0], &b) {
        (&first, &second)
    } else {
        (&second, &first)
    };
    let (_, seen) = a.get(&format!("/v1/jobs/{on_b}")).await;
    assert_eq!(
        seen["status"], "running",
        "node a reads node b's run: {seen}"
    );
    let stream = a.events(&format!("/v1/jobs/{on_b}/events"), None).await;
    let (code, canceled) = a
        .post_json(&format!("/v1/jobs/{on_b}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200, "{canceled}");
    assert_eq!(
        (&canceled["accepted"], &canceled["status"]),
        (&json!(true), &json!("canceled")),
        "{canceled}"
    );
    let status = b.wait_job(on_b).await;
    assert_eq!(status["status"], "canceled", "{status}");
    // Node a's stream of the run follows its status, though the turn ran on node b.
    let events = tokio::time::timeout(Duration::from_secs(20), stream.collect())
        .await
        .expect("node a's stream ends once the run does");
    let statuses: Vec<_> = events
        .iter()
        .filter(|e| e.name == "status")
        .map(|e| e.data["status"].clone())
        .collect();
    assert_eq!(statuses.last(), Some(&json!("canceled")), "{events:?}");
    assert_eq!(events.last().unwrap().data["reason"], "terminal");

    // Short jobs created on either node all succeed, wherever they ran.
    let mut short = Vec::new();
    for n in 0..6 {
        let creator = if n % 2 == 0 { &a } else { &b };
        short.push(creator.create_job(probe("ok", &format!("s{n}"))).await);
    }
    for rid in &short {
        let status = b.wait_job(rid).await;
        assert_eq!(status["status"], "succeeded", "{status}");
        let (_, result) = a.get(&format!("/v1/jobs/{rid}/result")).await;
        assert_eq!(result["result"]["status"], "success", "{result}");
        // Its files stay with the node that ran it; the other one forwards the read there.
        let holder = runs_on(&[&a, &b], &status).await;
        let other = if std::ptr::eq(holder, &a) { &b } else { &a };
        for view in [
            "artifacts",
            "logs",
            "bundle",
            "artifacts/artifacts/report.md",
        ] {
            let path = format!("/v1/jobs/{rid}/{view}");
            let (code, _, held) = holder.get_bytes(&path).await;
            assert_eq!(code, 200, "{path}");
            let (code, headers, forwarded) = other.get_bytes(&path).await;
            assert_eq!(code, 200, "{path}");
            assert_eq!(
                forwarded, held,
                "{path}: the same answer through either node"
            );
            if view == "bundle" {
                assert_eq!(headers["content-type"], "application/zip");
            }
        }
        // The console's pages of the run too: the holder renders them.
        let page = format!("/ui/management/runs/{rid}/files");
        let (code, _, held) = holder.get_bytes(&page).await;
        let (forwarded_code, _, forwarded) = other.get_bytes(&page).await;
        assert_eq!((code, forwarded_code), (200, 200), "{page}");
        assert_eq!(forwarded, held);
        assert!(String::from_utf8_lossy(&forwarded).contains("report.md"));
    }
    let (code, _) = b
        .post_json(&format!("/v1/jobs/{on_a}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_eq!(a.wait_job(on_a).await["status"], "canceled");

    // A skill installed through one node is the other's at once (one skills dir, and a
    // signal to read it again).
    let status = a.install_and_wait(probe_skill("fresh", None).zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let rid = b
        .create_job(
            json!({"skill_id": "fresh", "parameter": {"mode": "ok"}, "input": {"text": "new"}}),
        )
        .await;
    assert_eq!(b.wait_job(&rid).await["status"], "succeeded");
    // So is a folder an operator copies in by hand, with no signal at all (b read the dir
    // just now, so without looking again it would not see it for a while).
    probe_skill("by-hand", None).write_into(&skills.skills);
    let rid = b
        .create_job(
            json!({"skill_id": "by-hand", "parameter": {"mode": "ok"}, "input": {"text": "new"}}),
        )
        .await;
    assert_eq!(b.wait_job(&rid).await["status"], "succeeded");

    let (_, version) = b.get("/v1/system/version").await;
    assert_eq!(
        (&version["store"], &version["node_id"]),
        (&json!("postgres"), &json!("node-b"))
    );
}

#[tokio::test]
async fn a_lost_nodes_turn_ends_node_lost_and_what_it_left_queued_runs_elsewhere() {
    let (_skills, mut a, b) = two_nodes(&[]).await;

    // Both nodes busy: a with a turn that leaves a process group, b with a long one.
    let doomed = a.create_job(probe("grandchild", "a")).await;
    let busy = b.create_job(probe("late", "b")).await;
    let mut statuses = Vec::new();
    for rid in [&doomed, &busy] {
        statuses.push(
            a.wait_status(&format!("/v1/jobs/{rid}"), &["running"])
                .await,
        );
    }
    let (doomed, busy) = if runs_on(&[&a, &b], &statuses[0]).await.pid() == a.pid() {
        (doomed, busy)
    } else {
        (busy, doomed)
    };
    let doomed_status = a.get(&format!("/v1/jobs/{doomed}")).await.1;
    let pgid = common::wait_pgid(&a.workspace(&doomed_status)).await;
    let queued: Vec<String> = queued_while_busy(&b).await;

    a.kill();
    assert_group_gone(pgid);
    let status = b
        .wait_status_within(
            &format!("/v1/jobs/{doomed}"),
            &["failed"],
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(status["error"]["code"], "NODE_LOST", "{status}");

    // b's own turn ends; then it runs what node a left queued.
    let (code, _) = b
        .post_json(&format!("/v1/jobs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    for rid in &queued {
        let status = b.wait_job(rid).await;
        assert_eq!(status["status"], "succeeded", "{status}");
    }
    let (_, metrics) = b.get("/metrics").await;
    let metrics = metrics.as_str().expect("Prometheus text");
    assert!(
        metrics.contains("skill_runner_lease_renewals_total"),
        "heartbeats are counted"
    );
}

/// A turn of a lost node whose job asks for retries, of a skill safe to run again, is tried
/// again on the node left: its second attempt succeeds there.
#[tokio::test]
async fn a_lost_nodes_turn_is_retried_elsewhere_when_the_job_asks_and_the_skill_is_safe() {
    let (skills, url) = shared().await;
    probe_skill("probe-safe", None)
        .runner(json!({"retry": {"safe": true}}))
        .write_into(&skills.skills);
    let mut a = node_with(&url, "node-a", &skills.skills, &[]);
    let rid = a
        .create_job(
            json!({"skill_id": "probe-safe", "parameter": {"mode": "hangfirst"},
                           "retry": {"max_attempts": 2, "initial_delay_seconds": 0}}),
        )
        .await;
    let status = a
        .wait_status(&format!("/v1/jobs/{rid}"), &["running"])
        .await;
    let pgid = common::wait_pgid(&a.workspace(&status)).await;
    let b = node_with(&url, "node-b", &skills.skills, &[]);
    a.kill();
    assert_group_gone(pgid);
    let status = b
        .wait_status_within(
            &format!("/v1/jobs/{rid}"),
            &["succeeded", "failed"],
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["current_attempt"], 2, "{status}");
    assert_eq!(
        status["retried_attempts"][0]["error"]["code"], "NODE_LOST",
        "{status}"
    );
    assert!(b.run_dir(&status).exists(), "the second attempt ran on b");
}

/// Two short jobs created on `node` while every slot is busy: they wait in the database.
async fn queued_while_busy(node: &TestServer) -> Vec<String> {
    let mut queued = Vec::new();
    for n in 0..2 {
        let rid = node.create_job(probe("ok", &format!("q{n}"))).await;
        let (_, status) = node.get(&format!("/v1/jobs/{rid}")).await;
        assert_eq!(status["status"], "queued", "{status}");
        queued.push(rid);
    }
    queued
}

/// A node stopped (`SIGSTOP`) past the node timeout is declared lost and its turn ended by the
/// other; once continued, it learns it was lost and stops that turn itself, and what it would
/// still write about the run changes nothing.
#[tokio::test]
async fn a_node_frozen_past_its_timeout_stops_its_turn_when_it_wakes_and_changes_nothing() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let (_skills, a, b) = two_nodes(&[]).await;
    // One node busy with a long turn; the other then runs the turn to freeze.
    let (_, watcher, sleeper) = busy_one([&a, &b]).await;
    let frozen = a.create_job(probe("grandchild", "frozen")).await;
    let status = a
        .wait_status(&format!("/v1/jobs/{frozen}"), &["running"])
        .await;
    assert_eq!(runs_on(&[&a, &b], &status).await.pid(), sleeper.pid());
    let pgid = common::wait_pgid(&sleeper.workspace(&status)).await;

    kill(Pid::from_raw(sleeper.pid()), Signal::SIGSTOP).unwrap();
    let lost = watcher
        .wait_status_within(
            &format!("/v1/jobs/{frozen}"),
            &["failed"],
            Duration::from_secs(20),
        )
        .await;
    kill(Pid::from_raw(sleeper.pid()), Signal::SIGCONT).unwrap();
    assert_eq!(lost["error"]["code"], "NODE_LOST", "{lost}");
    // Its next heartbeat tells the node it was lost: it stops the turn.
    assert_group_gone(pgid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, after) = sleeper.get(&format!("/v1/jobs/{frozen}")).await;
    assert_eq!(
        (
            &after["status"],
            &after["error"]["code"],
            &after["updated_at"]
        ),
        (&json!("failed"), &json!("NODE_LOST"), &lost["updated_at"]),
        "the frozen node's late end changed nothing: {after}"
    );
    // It serves again: with the other node busy, it runs new work.
    let next = sleeper.create_job(probe("ok", "after")).await;
    let done = sleeper.wait_job(&next).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(runs_on(&[&a, &b], &done).await.pid(), sleeper.pid());
}

/// 500 jobs sent to both nodes in turn, eight at a time, the nodes sharing one storage folder:
/// each runs exactly once, on one node (one folder, one turn), both nodes take part, and each
/// run's folder reaches the storage.
async fn five_hundred_jobs_sent_to_both_nodes_run_exactly_once(kind: Kind) {
    let Some(shared) = SharedStorage::new(kind).await else {
        return;
    };
    let mut settings = shared.settings();
    settings.push(("SKILL_RUNNER_MAX_CONCURRENT", "4"));
    let (_skills, a, b) = two_nodes(&settings).await;
    let nodes = [a, b];
    let mut sent = Vec::new();
    for batch in 0..500 / 8 + 1 {
        let creates = (0..8)
            .map(|i| batch * 8 + i)
            .filter(|n| *n < 500)
            .map(|n| nodes[n % 2].create_job(probe("ok", &format!("job {n}"))));
        sent.extend(futures::future::join_all(creates).await);
    }
    assert_eq!(sent.len(), 500);
    let mut ran = [0; 2];
    let mut runs = std::collections::HashSet::new();
    for (n, rid) in sent.iter().enumerate() {
        let status = nodes[(n + 1) % 2].wait_job(rid).await;
        assert_eq!(status["status"], "succeeded", "{status}");
        assert!(
            runs.insert(status["run_id"].as_str().unwrap().to_owned()),
            "one run per job"
        );
        let holder = runs_on(&[&nodes[0], &nodes[1]], &status).await;
        ran[usize::from(holder.pid() == nodes[1].pid())] += 1;
        // One turn: the run's own output holds one result line.
        let stdout =
            std::fs::read_to_string(holder.run_dir(&status).join("logs/stdout.txt")).unwrap();
        assert_eq!(stdout.matches("summary").count(), 1, "{rid}: {stdout}");
    }
    assert!(ran[0] > 0 && ran[1] > 0, "both nodes ran jobs: {ran:?}");
    eprintln!("node a ran {}, node b ran {}", ran[0], ran[1]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for run_id in &runs {
        let copy = format!("runs/{run_id}.zip");
        while !shared.holds(&copy).await {
            assert!(std::time::Instant::now() < deadline, "{copy} is written");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The queue's bound is the cluster's: with both nodes' slots busy, a burst of 200 creates
/// sent to both nodes at once admits exactly the bound, and the others are told 429.
#[tokio::test]
async fn a_burst_against_both_nodes_admits_exactly_the_bound() {
    let (_skills, a, b) = two_nodes(&[("SKILL_RUNNER_MAX_QUEUE_SIZE", "5")]).await;
    let nodes = [a, b];
    for n in 0..2 {
        nodes[0]
            .create_running(probe("late", &format!("busy {n}")))
            .await;
    }
    let mut answers = Vec::new();
    for batch in 0..10 {
        let creates = (0..20).map(|i| {
            let node = &nodes[i % 2];
            let body = probe("late", &format!("burst {batch} {i}"));
            async move { node.post_json("/v1/jobs", body).await.0 }
        });
        answers.extend(futures::future::join_all(creates).await);
    }
    let admitted = answers.iter().filter(|c| **c == 200).count();
    let refused = answers.iter().filter(|c| **c == 429).count();
    assert_eq!((admitted, refused), (5, 195), "bound 5, both slots busy");
}

/// A long turn started on one of `nodes`: its request id, the node running it, and the other.
async fn busy_one(nodes: [&TestServer; 2]) -> (String, &TestServer, &TestServer) {
    let busy = nodes[0].create_job(probe("late", "busy")).await;
    let status = nodes[0]
        .wait_status(&format!("/v1/jobs/{busy}"), &["running"])
        .await;
    let runner = runs_on(&nodes, &status).await;
    (busy, runner, other(nodes, runner))
}

/// The other of two nodes.
fn other<'a>(nodes: [&'a TestServer; 2], one: &TestServer) -> &'a TestServer {
    if nodes[0].pid() == one.pid() {
        nodes[1]
    } else {
        nodes[0]
    }
}

/// A job submitted to a busy node runs on the other: its stream, opened on the node it was
/// submitted to while it waited, carries every byte the runner's own stream carries, and resumes
/// from a `Last-Event-ID`; a question it asks there is answered through the first node, and a
/// repeated reply through the runner gets the idempotent answer.
#[tokio::test]
async fn a_turn_on_one_node_is_watched_and_answered_through_the_other() {
    let (_skills, a, b) = two_nodes(&[]).await;

    // One node busy with a long turn: whatever is submitted next runs on the other.
    let (busy, submitter, runner) = busy_one([&a, &b]).await;

    let rid = submitter.create_job(probe("drip", "watched")).await;
    let watched = submitter
        .events(&format!("/v1/jobs/{rid}/events"), None)
        .await;
    let seen = tokio::time::timeout(Duration::from_secs(30), watched.collect())
        .await
        .expect("the relayed stream ends with the run");
    let status = runner.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(
        runs_on(&[&a, &b], &status).await.pid(),
        runner.pid(),
        "it ran on the idle node"
    );
    let logs = runner.run_dir(&status).join("logs");
    let stdout = std::fs::read(logs.join("stdout.txt")).unwrap();
    let stderr = std::fs::read(logs.join("stderr.txt")).unwrap();
    assert!(
        String::from_utf8_lossy(&stdout).contains("line 20 of the drip"),
        "the drip printed"
    );
    assert_eq!(common::reassemble(&seen, "stdout", 0), stdout);
    assert_eq!(common::reassemble(&seen, "stderr", 0), stderr);
    let end = seen.last().unwrap();
    assert_eq!(
        (end.name.as_str(), &end.data["reason"]),
        ("end", &json!("terminal"))
    );
    let own = runner
        .events(&format!("/v1/jobs/{rid}/events"), None)
        .await
        .collect()
        .await;
    let ids = |events: &[common::SseEvent]| -> Vec<Option<String>> {
        events
            .iter()
            .filter(|e| e.name == "end")
            .map(|e| e.id.clone())
            .collect()
    };
    assert_eq!(ids(&seen), ids(&own), "both end at the same offsets");

    // Resumed through the submitter from an event in the middle: the rest, exactly.
    let middle = seen
        .iter()
        .filter(|e| e.name == "stdout")
        .nth(3)
        .expect("several stdout chunks");
    let id = middle.id.clone().unwrap();
    let (from_out, from_err) = id.split_once(':').unwrap();
    let (from_out, from_err): (u64, u64) = (from_out.parse().unwrap(), from_err.parse().unwrap());
    let resumed = submitter
        .events(&format!("/v1/jobs/{rid}/events"), Some(&id))
        .await
        .collect()
        .await;
    assert_eq!(resumed[0].name, "snapshot");
    assert_eq!(resumed[0].data["stdout_offset"], from_out);
    assert_eq!(
        common::reassemble(&resumed, "stdout", from_out),
        stdout[from_out as usize..]
    );
    assert_eq!(
        common::reassemble(&resumed, "stderr", from_err),
        stderr[from_err as usize..]
    );

    // A question asked on the runner, answered through the submitter.
    let asked = submitter
        .create_job(json!({"skill_id": "asker", "parameter": {"asks": 1},
                           "runtime_options": {"execution_mode": "interactive"}}))
        .await;
    let waiting = submitter
        .wait_status(&format!("/v1/jobs/{asked}"), &["waiting_user"])
        .await;
    assert_eq!(runs_on(&[&a, &b], &waiting).await.pid(), runner.pid());
    let (_, pending) = submitter
        .get(&format!("/v1/jobs/{asked}/interaction/pending"))
        .await;
    assert_eq!(pending["pending"]["prompt"], "question 1?", "{pending}");
    let reply = json!({"interaction_id": waiting["pending_interaction_id"], "response": "through a",
                       "idempotency_key": "reply-1"});
    let (code, answer) = submitter
        .post_json(
            &format!("/v1/jobs/{asked}/interaction/reply"),
            reply.clone(),
        )
        .await;
    assert_eq!(code, 200, "{answer}");
    let (code, again) = runner
        .post_json(&format!("/v1/jobs/{asked}/interaction/reply"), reply)
        .await;
    assert_eq!((code, &again), (200, &answer), "the same answer, once");
    let done = submitter.wait_job(&asked).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, result) = submitter.get(&format!("/v1/jobs/{asked}/result")).await;
    assert_eq!(result["result"]["data"]["replies"], json!(["through a"]));
    let (code, _) = submitter
        .post_json(&format!("/v1/jobs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
}

/// With API tokens, a client reads a run's files through either node with its token; the node
/// it asks forwards the read with the nodes' shared secret, which a client cannot guess.
#[tokio::test]
async fn forwarded_reads_pass_on_the_nodes_secret_and_nothing_else_does() {
    let (_skills, a, b) =
        two_nodes(&[("SKILL_RUNNER_API_TOKENS", "cluster-token-for-tests")]).await;
    let call = |node: &TestServer, method: reqwest::Method, path: &str| {
        node.client
            .request(method, node.url(path))
            .bearer_auth("cluster-token-for-tests")
    };
    let created: Value = call(&a, reqwest::Method::POST, "/v1/jobs")
        .json(&probe("ok", "tokened"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rid = created["request_id"].as_str().unwrap().to_owned();
    let status = loop {
        let status: Value = call(&a, reqwest::Method::GET, &format!("/v1/jobs/{rid}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if status["status"] == "succeeded" {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let holder = runs_on(&[&a, &b], &status).await;
    let asked = other([&a, &b], holder);
    let path = format!("/v1/jobs/{rid}/artifacts/artifacts/report.md");
    let read = call(asked, reqwest::Method::GET, &path)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "report");
    for guess in ["", "0", "cluster-token-for-tests"] {
        let code = asked
            .client
            .get(asked.url(&path))
            .header("x-skill-runner-node", guess)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(code, 401, "a made-up node secret {guess:?} opens nothing");
    }
}

/// With shared storage, a node killed for good leaves nothing stranded: the other node serves
/// its finished run (files, bundle, stream) from the stored copy, takes its waiting run over,
/// and runs that run's next turn when the reply comes.
async fn with_shared_storage_a_dead_nodes_runs_are_served_and_resumed_elsewhere(kind: Kind) {
    let Some(storage) = SharedStorage::new(kind).await else {
        return;
    };
    let (skills, url) = shared().await;
    let with_storage = storage.settings();
    // Node a alone first, so that it runs both.
    let mut a = node_with(&url, "node-a", &skills.skills, &with_storage);
    let finished = a.create_job(probe("drip", "stored")).await;
    let finished_status = a.wait_job(&finished).await;
    assert_eq!(finished_status["status"], "succeeded", "{finished_status}");
    let asked = a
        .create_job(json!({"skill_id": "asker", "parameter": {"asks": 1},
                           "runtime_options": {"execution_mode": "interactive"}}))
        .await;
    let waiting = a
        .wait_status(&format!("/v1/jobs/{asked}"), &["waiting_user"])
        .await;
    for status in [&finished_status, &waiting] {
        let copy = format!("runs/{}.zip", status["run_id"].as_str().unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !storage.holds(&copy).await {
            assert!(std::time::Instant::now() < deadline, "{copy} is written");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let logs = a.run_dir(&finished_status).join("logs");
    let stdout = std::fs::read(logs.join("stdout.txt")).unwrap();
    let (_, _, bundle_on_a) = a.get_bytes(&format!("/v1/jobs/{finished}/bundle")).await;
    let b = node_with(&url, "node-b", &skills.skills, &with_storage);
    // The waiting run's copy is recorded just after it is written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.kill();

    // Node b serves the finished run once a is declared lost.
    let artifact = format!("/v1/jobs/{finished}/artifacts/artifacts/report.md");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let report = loop {
        let (code, _, body) = b.get_bytes(&artifact).await;
        if code == 200 {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{artifact}: {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(report, b"dripped");
    let (code, _, bundle) = b.get_bytes(&format!("/v1/jobs/{finished}/bundle")).await;
    assert_eq!(code, 200);
    assert_eq!(
        common::unzip(&bundle),
        common::unzip(&bundle_on_a),
        "the same bundle, rebuilt from the copy"
    );
    let events = b
        .events(&format!("/v1/jobs/{finished}/events"), None)
        .await
        .collect()
        .await;
    assert_eq!(common::reassemble(&events, "stdout", 0), stdout);
    let (_, ready) = b.get("/readyz").await;
    assert_eq!(ready["storage"], "ok", "{ready}");

    // The waiting run is b's now: still waiting, answered through b, its turn run on b.
    let (_, status) = b.get(&format!("/v1/jobs/{asked}")).await;
    assert_eq!(status["status"], "waiting_user", "{status}");
    let reply = json!({"interaction_id": waiting["pending_interaction_id"], "response": "later"});
    let (code, answer) = b
        .post_json(&format!("/v1/jobs/{asked}/interaction/reply"), reply)
        .await;
    assert_eq!(code, 200, "{answer}");
    let status = b.wait_job(&asked).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = b.get(&format!("/v1/jobs/{asked}/result")).await;
    assert_eq!(result["result"]["data"]["replies"], json!(["later"]));
    let done = b.get(&format!("/v1/jobs/{asked}")).await.1;
    assert!(
        b.run_dir(&done).join("logs/stdout.txt").exists(),
        "its folder came to b"
    );

    // A cleanup through b sweeps the runs of the node that left, their copies with them.
    let (code, counts) = b.post_json("/v1/jobs/cleanup", json!({})).await;
    assert_eq!(code, 200, "{counts}");
    assert_eq!(counts["runs_deleted"], 2, "{counts}");
    for status in [&finished_status, &done] {
        let run_id = status["run_id"].as_str().unwrap();
        assert!(!storage.holds(&format!("runs/{run_id}.zip")).await);
        assert!(!b.run_dir(status).exists());
    }
}

/// With shared storage, a job's uploads received by a busy node go to the storage, and the idle
/// node runs the job from there; the busy node serves its files by asking the one that ran it.
async fn with_shared_storage_an_uploaded_job_runs_on_whichever_node_is_free(kind: Kind) {
    let Some(shared) = SharedStorage::new(kind).await else {
        return;
    };
    let (_skills, a, b) = two_nodes(&shared.settings()).await;
    let (busy, busy_node, idle) = busy_one([&a, &b]).await;

    let (code, created) = busy_node
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe-doc", "input": {"text": "handed"}, "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    let rid = created["request_id"].as_str().unwrap();
    let (code, uploaded) = busy_node
        .upload_inputs(rid, vec![("doc", "Grüße from the busy node\n".as_bytes())])
        .await;
    assert_eq!(code, 200, "{uploaded}");
    let status = busy_node.wait_job(rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(runs_on(&[&a, &b], &status).await.pid(), idle.pid());
    let (code, _, report) = busy_node
        .get_bytes(&format!("/v1/jobs/{rid}/artifacts/artifacts/report.md"))
        .await;
    assert_eq!(code, 200);
    assert_eq!(report, "Grüße from the busy node\n".as_bytes());
    let (code, _) = busy_node
        .post_json(&format!("/v1/jobs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
}

/// With shared storage, nodes need no shared skills dir: a package installed through one node
/// is kept in the storage and installed by the other into its own skills dir, at the latest
/// when the other is asked for it (its signal may not have arrived yet).
async fn with_shared_storage_a_skill_installed_on_one_node_reaches_the_others_own_dir(kind: Kind) {
    let Some(storage) = SharedStorage::new(kind).await else {
        return;
    };
    let (skills_a, url) = shared().await;
    let skills_b = TestDirs::new();
    probe_skill("probe", None).write_into(&skills_b.skills);
    let with_storage = storage.settings();
    let a = node_with(&url, "node-a", &skills_a.skills, &with_storage);
    let b = node_with(&url, "node-b", &skills_b.skills, &with_storage);

    let status = a.install_and_wait(probe_skill("fresh", None).zip()).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert!(storage.holds("skills/fresh/1.0.0.zip").await);
    let (code, seen) = b.get("/v1/skills/fresh").await;
    assert_eq!(
        code, 200,
        "node b has it as soon as a says it is installed: {seen}"
    );
    assert!(
        skills_b.skills.join("fresh/SKILL.md").exists(),
        "in b's own dir"
    );
    let rid = b
        .create_job(
            json!({"skill_id": "fresh", "parameter": {"mode": "ok"}, "input": {"text": "b"}}),
        )
        .await;
    assert_eq!(b.wait_job(&rid).await["status"], "succeeded");

    // Standard skills from a repository's zip, versioned by their contents, reach b each as a
    // package of its own; a changed one replaces b's copy too.
    let repository = |notes: &str| {
        let mut entries = Vec::new();
        for skill in [
            common::standard_skill("alpha", "First."),
            common::standard_skill("beta", notes),
        ] {
            for (path, bytes) in &skill.files {
                entries.push((
                    format!("repo-main/skills/{}/{path}", skill.top),
                    bytes.clone(),
                ));
            }
        }
        common::build_zip(entries)
    };
    let status = a.install_and_wait(repository("Second.")).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    for id in ["alpha", "beta"] {
        let (code, seen) = b.get(&format!("/v1/skills/{id}")).await;
        assert_eq!(code, 200, "{seen}");
        assert_eq!(seen["format"], "agent-skill");
    }
    let status = a.install_and_wait(repository("Second, changed.")).await;
    let (_, on_a) = a.get("/v1/skills/beta").await;
    assert_eq!(status["skills"][1]["action"], "update", "{status}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, on_b) = b.get("/v1/skills/beta").await;
        if on_b["version"] == on_a["version"] {
            assert_eq!(on_b["description"], "Second, changed.");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "b kept {on_b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A package no node announced (its signal lost): a job asking for it finds it all the same.
    storage
        .put(
            "skills/unannounced/1.0.0.zip",
            probe_skill("unannounced", None).zip(),
        )
        .await;
    let rid = b
        .create_job(
            json!({"skill_id": "unannounced", "parameter": {"mode": "ok"}, "input": {"text": "b"}}),
        )
        .await;
    assert_eq!(b.wait_job(&rid).await["status"], "succeeded");
    let (code, _) = b.get("/v1/skills/no-such-skill").await;
    assert_eq!(code, 404, "a skill no node has is still not found");
}

/// The shared-storage tests, with a folder (`file://`) and with an S3-compatible server
/// (`s3://`).
macro_rules! on_both_storages {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            use super::*;

            #[tokio::test]
            async fn file() {
                super::$test(Kind::File).await;
            }

            #[tokio::test]
            async fn s3() {
                super::$test(Kind::S3).await;
            }
        }
    )*};
}

on_both_storages!(
    five_hundred_jobs_sent_to_both_nodes_run_exactly_once,
    with_shared_storage_a_dead_nodes_runs_are_served_and_resumed_elsewhere,
    with_shared_storage_an_uploaded_job_runs_on_whichever_node_is_free,
    with_shared_storage_a_skill_installed_on_one_node_reaches_the_others_own_dir,
);
