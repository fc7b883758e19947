//! Live runs: event streams with byte offsets, interactive turns, reply timeouts, and the
//! management API, all against the real binary.

use skill_runner_test_support as common;

use std::time::{Duration, Instant};

use common::{SseEvent, TestServer, asker_skill, probe_skill, reassemble, talker_skill};
use serde_json::{Value, json};

/// A small deterministic generator for disconnect points; the seed is printed so that a
/// failing sequence can be replayed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Follows a run's stream, disconnecting after a random number of events and resuming with
/// the offsets (or the event id) last received, until `end`. Returns every event received and
/// the number of connections used.
async fn follow_with_reconnects(
    server: &TestServer,
    rid: &str,
    by_event_id: bool,
    seed: u64,
) -> (Vec<SseEvent>, usize) {
    let mut rng = Lcg(seed);
    let mut events: Vec<SseEvent> = Vec::new();
    let (mut stdout, mut stderr) = (0u64, 0u64);
    let mut last_id: Option<String> = None;
    for connection in 1..=1000 {
        let mut stream = if by_event_id {
            // Stale query offsets on purpose: the header wins.
            server
                .events(
                    &format!("/v1/jobs/{rid}/events?stdout_from=0&stderr_from=0"),
                    last_id.as_deref(),
                )
                .await
        } else {
            server
                .events(
                    &format!("/v1/jobs/{rid}/events?stdout_from={stdout}&stderr_from={stderr}"),
                    None,
                )
                .await
        };
        let snapshot = stream.next().await.expect("a snapshot first");
        assert_eq!(snapshot.name, "snapshot");
        assert_eq!(snapshot.data["stdout_offset"], stdout);
        assert_eq!(snapshot.data["stderr_offset"], stderr);
        let budget = 1 + rng.below(12);
        for _ in 0..budget {
            let Some(event) = stream.next().await else {
                panic!("stream closed before `end`")
            };
            assert_eq!(
                event.id.as_deref(),
                Some(
                    format!(
                        "{}:{}",
                        if event.name == "stdout" {
                            event.data["to"].as_u64().unwrap()
                        } else {
                            stdout
                        },
                        if event.name == "stderr" {
                            event.data["to"].as_u64().unwrap()
                        } else {
                            stderr
                        }
                    )
                    .as_str()
                ),
                "the id carries the offsets received so far"
            );
            match event.name.as_str() {
                "stdout" => stdout = event.data["to"].as_u64().unwrap(),
                "stderr" => stderr = event.data["to"].as_u64().unwrap(),
                _ => {}
            }
            last_id = event.id.clone();
            let end = event.name == "end";
            events.push(event);
            if end {
                return (events, connection);
            }
        }
        // Dropping the stream here disconnects, possibly in the middle of a frame.
    }
    panic!("no `end` after 1000 connections");
}

#[tokio::test]
async fn reconnecting_clients_reassemble_the_logs_exactly() {
    let server = TestServer::with_skills(&[talker_skill("talker")], &[]);
    let rid = server
        .create_job(json!({"skill_id": "talker", "parameter": {"bursts": 40, "pause": 0.04}}))
        .await;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("disconnect seed: {seed}");
    let (by_offsets, by_id) = tokio::join!(
        follow_with_reconnects(&server, &rid, false, seed),
        follow_with_reconnects(&server, &rid, true, seed ^ 0x5eed),
    );
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let logs = server.run_dir(&status).join("logs");
    let stdout = std::fs::read(logs.join("stdout.txt")).unwrap();
    let stderr = std::fs::read(logs.join("stderr.txt")).unwrap();
    assert!(
        stdout.len() > 100_000,
        "the talker wrote {} bytes",
        stdout.len()
    );
    for (name, (events, connections)) in [("offsets", by_offsets), ("Last-Event-ID", by_id)] {
        assert!(connections >= 3, "{name}: only {connections} connections");
        assert_eq!(reassemble(&events, "stdout", 0), stdout, "{name}: stdout");
        assert_eq!(reassemble(&events, "stderr", 0), stderr, "{name}: stderr");
        assert!(
            events
                .iter()
                .filter(|e| e.name == "stdout")
                .all(|e| e.data["chunk"].as_str().unwrap().len() <= 8192),
            "chunks are at most 8 KiB"
        );
        let tail: Vec<&str> = events
            .iter()
            .rev()
            .take(2)
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            tail,
            ["end", "status"],
            "{name}: the final status, then end"
        );
        let last_status = events.iter().rev().find(|e| e.name == "status").unwrap();
        assert_eq!(last_status.data["status"], "succeeded");
        assert_eq!(events.last().unwrap().data, json!({"reason": "terminal"}));
        println!("{name}: {connections} connections, {} events", events.len());
    }
    // A finished run streams everything at once, from any offset.
    let from = stdout.len() as u64 - 10;
    let events = server
        .events(&format!("/v1/jobs/{rid}/events?stdout_from={from}"), None)
        .await
        .collect()
        .await;
    assert_eq!(reassemble(&events, "stdout", from), stdout[from as usize..]);
    assert_eq!(reassemble(&events, "stderr", 0), stderr);
}

#[tokio::test]
async fn five_hundred_subscribers_each_get_every_byte() {
    let server = TestServer::with_skills(&[talker_skill("talker")], &[]);
    let rid = server
        .create_job(json!({"skill_id": "talker", "parameter": {"bursts": 30, "pause": 0.03}}))
        .await;
    let server = std::sync::Arc::new(server);
    let started = Instant::now();
    let subscribers: Vec<_> = (0..500)
        .map(|_| {
            let server = server.clone();
            let rid = rid.clone();
            tokio::spawn(async move {
                server
                    .events(&format!("/v1/jobs/{rid}/events"), None)
                    .await
                    .collect()
                    .await
            })
        })
        .collect();
    let mut all = Vec::new();
    for s in subscribers {
        all.push(s.await.unwrap());
    }
    println!("500 subscribers done after {:?}", started.elapsed());
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded");
    let logs = server.run_dir(&status).join("logs");
    let stdout = std::fs::read(logs.join("stdout.txt")).unwrap();
    let stderr = std::fs::read(logs.join("stderr.txt")).unwrap();
    for events in &all {
        assert_eq!(reassemble(events, "stdout", 0), stdout);
        assert_eq!(reassemble(events, "stderr", 0), stderr);
        assert_eq!(events.last().unwrap().data["reason"], "terminal");
    }
}

#[tokio::test]
async fn streams_show_cancel_heartbeats_and_end_at_shutdown() {
    let mut server = TestServer::with_skills(
        &[
            probe_skill("probe", None),
            probe_skill("upload", Some(true)),
        ],
        &[("SKILL_RUNNER_SSE_HEARTBEAT_SECONDS", "1")],
    );
    // `late` prints its answer when SIGTERM comes: that output must reach the stream before
    // the run's final status.
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "late"}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{rid}"), &["running"])
        .await;
    common::wait_pgid(&server.workspace(&status)).await;
    let mut stream = server.events(&format!("/v1/jobs/{rid}/events"), None).await;
    let snapshot = stream.next().await.unwrap();
    assert_eq!(snapshot.data["status"], "running");
    assert_eq!(snapshot.id.as_deref(), Some("0:0"));
    let quiet = Instant::now();
    let heartbeat = stream.next().await.unwrap();
    assert_eq!(heartbeat.name, "heartbeat", "{heartbeat:?}");
    assert!(heartbeat.data["ts"].is_string());
    assert!(quiet.elapsed() >= Duration::from_millis(900));

    let (code, _) = server
        .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    let rest = stream.collect().await;
    let status = rest.iter().find(|e| e.name == "status").unwrap();
    assert_eq!(status.data["status"], "canceled");
    assert_eq!(status.data["error_code"], "CANCELED_BY_USER");
    assert_eq!(rest.last().unwrap().data, json!({"reason": "terminal"}));
    let stdout = std::fs::read(
        server
            .run_dir(&status_of(&server, &rid).await)
            .join("logs/stdout.txt"),
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&stdout).contains("late"));
    assert_eq!(
        reassemble(&rest, "stdout", 0),
        stdout,
        "output written while stopping"
    );
    let (_, state) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(state["status"], "canceled");

    // No run yet (waiting for its upload), unknown request, malformed ids and offsets.
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "upload", "parameter": {"mode": "ok"}}),
        )
        .await;
    let waiting = created["request_id"].as_str().unwrap();
    let (code, body) = server.get(&format!("/v1/jobs/{waiting}/events")).await;
    assert_eq!(code, 404, "{body}");
    let (code, _) = server.get("/v1/jobs/nope/events").await;
    assert_eq!(code, 404);
    let resp = server
        .client
        .get(server.url(&format!("/v1/jobs/{rid}/events")))
        .header("last-event-id", "banana")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let (code, _) = server
        .get(&format!("/v1/jobs/{rid}/events?stdout_from=-1"))
        .await;
    assert_eq!(code, 422);

    // Open streams end when the service stops, and it stops promptly.
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut s = server.events(&format!("/v1/jobs/{rid}/events"), None).await;
        s.next().await.unwrap();
        streams.push(s);
    }
    let stopping = Instant::now();
    let exit = server.terminate();
    assert!(exit.success(), "{exit:?}");
    assert!(stopping.elapsed() < Duration::from_secs(10));
    for mut s in streams {
        while let Some(e) = s.next().await {
            assert_ne!(e.name, "end", "a shutdown is not the end of the run");
        }
    }
}

async fn status_of(server: &TestServer, rid: &str) -> Value {
    server.get(&format!("/v1/jobs/{rid}")).await.1
}

fn interactive(parameter: Value, extra: Value) -> Value {
    let mut options = json!({"execution_mode": "interactive"});
    for (k, v) in extra.as_object().unwrap() {
        options[k] = v.clone();
    }
    json!({"skill_id": "asker", "parameter": parameter, "runtime_options": options})
}

#[tokio::test]
async fn two_questions_two_replies_and_the_slot_is_free_while_waiting() {
    let server = TestServer::with_skills(
        &[asker_skill("asker"), probe_skill("probe", None)],
        &[("SKILL_RUNNER_MAX_CONCURRENT", "1")],
    );
    let rid = server
        .create_job(interactive(json!({"asks": 2}), json!({})))
        .await;
    let job = format!("/v1/jobs/{rid}");
    let status = server.wait_status(&job, &["waiting_user"]).await;
    assert_eq!(status["pending_interaction_id"], 11);
    assert_eq!(status["interaction_count"], 1);
    let (code, pending) = server.get(&format!("{job}/interaction/pending")).await;
    assert_eq!(code, 200);
    assert_eq!(pending["status"], "waiting_user");
    assert!(pending["wait_deadline_at"].as_str().unwrap() > status["updated_at"].as_str().unwrap());
    assert_eq!(pending["pending"]["interaction_id"], 11);
    assert_eq!(pending["pending"]["kind"], "choose_one");
    assert_eq!(pending["pending"]["prompt"], "question 1?");
    assert_eq!(
        pending["pending"]["options"],
        json!([{"label": "left", "value": "left"}, {"label": "right", "value": "right"}])
    );
    let events = server
        .events(&format!("{job}/events"), None)
        .await
        .collect()
        .await;
    assert_eq!(events[0].data["pending_interaction_id"], 11);
    assert_eq!(
        events.last().unwrap().data,
        json!({"reason": "waiting_user"})
    );
    let (code, result) = server.get(&format!("{job}/result")).await;
    assert_eq!(code, 404, "no result while waiting: {result}");

    // The only slot is free: another job runs to the end meanwhile.
    let other = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    assert_eq!(server.wait_job(&other).await["status"], "succeeded");

    let (code, body) = server
        .post_json(
            &format!("{job}/interaction/reply"),
            json!({"interaction_id": 11, "response": "left"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body,
        json!({"request_id": rid, "status": "queued", "accepted": true})
    );
    let status = server.wait_status(&job, &["waiting_user"]).await;
    assert_eq!(status["pending_interaction_id"], 12);
    assert_eq!(status["interaction_count"], 2);
    let (code, _) = server
        .post_json(
            &format!("{job}/interaction/reply"),
            json!({"interaction_id": 12, "response": {"text": "free form"}}),
        )
        .await;
    assert_eq!(code, 200);
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["pending_interaction_id"], Value::Null);
    assert_eq!(status["interaction_count"], 2);
    assert_eq!(status["auto_decision_count"], 0);
    let (_, result) = server.get(&format!("{job}/result")).await;
    let data = &result["result"]["data"];
    assert_eq!(data["turn"], 3);
    assert_eq!(data["reply"], json!({"text": "free form"}));
    assert_eq!(data["replies"], json!(["left", {"text": "free form"}]));
    assert_eq!(data["asked"], json!([11, 12]));
    let (_, pending) = server.get(&format!("{job}/interaction/pending")).await;
    assert_eq!(pending["pending"], Value::Null);
    assert_eq!(pending["wait_deadline_at"], Value::Null);
    // The log holds every turn: appended, never truncated.
    let stdout = std::fs::read_to_string(server.run_dir(&status).join("logs/stdout.txt")).unwrap();
    for turn in 1..=3 {
        assert!(
            stdout.contains(&format!("turn {turn} of an asker")),
            "{stdout}"
        );
    }
}

#[tokio::test]
async fn reply_errors_idempotency_and_a_single_winner() {
    let server = TestServer::with_skills(
        &[asker_skill("asker"), probe_skill("probe", None)],
        &[("SKILL_RUNNER_MAX_CONCURRENT", "1")],
    );
    let reply = |rid: &str, body: Value| {
        let path = format!("/v1/jobs/{rid}/interaction/reply");
        let server = &server;
        async move { server.post_json(&path, body).await }
    };
    // Not interactive: 400 on both routes. Unknown: 404.
    let auto = server
        .create_running(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    let (code, body) = reply(&auto, json!({"interaction_id": 1, "response": "x"})).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("execution_mode=interactive")
    );
    let (code, _) = server
        .get(&format!("/v1/jobs/{auto}/interaction/pending"))
        .await;
    assert_eq!(code, 400);
    let (code, _) = reply("nope", json!({"interaction_id": 1, "response": "x"})).await;
    assert_eq!(code, 404);
    let (code, _) = server.get("/v1/jobs/nope/interaction/pending").await;
    assert_eq!(code, 404);

    // Not waiting: the interactive run is still queued behind the sleeper.
    let rid = server
        .create_job(interactive(json!({"asks": 2}), json!({})))
        .await;
    let (code, body) = reply(&rid, json!({"interaction_id": 11, "response": "x"})).await;
    assert_eq!(code, 409, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("not waiting"));
    server
        .post_json(&format!("/v1/jobs/{auto}/cancel"), json!({}))
        .await;
    let job = format!("/v1/jobs/{rid}");
    server.wait_status(&job, &["waiting_user"]).await;

    // Stale id, malformed body.
    let (code, body) = reply(&rid, json!({"interaction_id": 12, "response": "x"})).await;
    assert_eq!(code, 409, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("stale"));
    let (code, _) = reply(&rid, json!({"interaction_id": 11})).await;
    assert_eq!(code, 422);

    // The same key: same response answers like the first time, another response is refused.
    let first = json!({"interaction_id": 11, "response": "left", "idempotency_key": "k1"});
    let (code, accepted) = reply(&rid, first.clone()).await;
    assert_eq!(code, 200);
    let (code, again) = reply(&rid, first.clone()).await;
    assert_eq!(
        (code, &again),
        (200, &accepted),
        "a retry gets the first answer"
    );
    let (code, body) = reply(
        &rid,
        json!({"interaction_id": 11, "response": "right", "idempotency_key": "k1"}),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("idempotency_key"));
    let (code, _) = reply(&rid, json!({"interaction_id": 11, "response": "late"})).await;
    assert_eq!(code, 409, "the question was answered");

    // Two replies at once to the second question: exactly one wins.
    server.wait_status(&job, &["waiting_user"]).await;
    let (a, b) = tokio::join!(
        reply(
            &rid,
            json!({"interaction_id": 12, "response": "A", "idempotency_key": "a"})
        ),
        reply(
            &rid,
            json!({"interaction_id": 12, "response": "B", "idempotency_key": "b"})
        ),
    );
    let mut codes = [a.0, b.0];
    codes.sort();
    assert_eq!(codes, [200, 409], "{a:?} {b:?}");
    let winner = if a.0 == 200 { "A" } else { "B" };
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded");
    let (_, result) = server.get(&format!("{job}/result")).await;
    assert_eq!(result["result"]["data"]["replies"], json!(["left", winner]));
    assert_eq!(result["result"]["data"]["turn"], 3, "one resume per reply");
    // Finished: not waiting. A retry of an accepted reply still gets its first answer.
    let (code, _) = reply(&rid, json!({"interaction_id": 12, "response": "C"})).await;
    assert_eq!(code, 409);
    let (code, _) = reply(&rid, first).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_reply_needs_a_place_in_the_queue() {
    let server = TestServer::with_skills(
        &[asker_skill("asker"), probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
            ("SKILL_RUNNER_MAX_QUEUE_SIZE", "1"),
        ],
    );
    let rid = server
        .create_job(interactive(json!({"asks": 1}), json!({})))
        .await;
    let job = format!("/v1/jobs/{rid}");
    server.wait_status(&job, &["waiting_user"]).await;
    // The slot is busy and the queue full.
    let busy = server
        .create_running(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    let queued = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let body = json!({"interaction_id": 11, "response": "x"});
    let resp = server
        .client
        .post(server.url(&format!("{job}/interaction/reply")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let (_, still) = server.get(&format!("{job}/interaction/pending")).await;
    assert_eq!(
        still["pending"]["interaction_id"], 11,
        "a refused reply changes nothing"
    );
    // A stale reply is still told it is stale, full queue or not.
    let (code, _) = server
        .post_json(
            &format!("{job}/interaction/reply"),
            json!({"interaction_id": 12, "response": "x"}),
        )
        .await;
    assert_eq!(code, 409);
    server
        .post_json(&format!("/v1/jobs/{queued}/cancel"), json!({}))
        .await;
    let (code, _) = server
        .post_json(&format!("{job}/interaction/reply"), body)
        .await;
    assert_eq!(code, 200);
    server
        .post_json(&format!("/v1/jobs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
}

#[tokio::test]
async fn a_resumed_turn_is_canceled_with_its_process() {
    let server = TestServer::with_skills(
        &[asker_skill("asker"), probe_skill("probe", None)],
        &[("SKILL_RUNNER_MAX_CONCURRENT", "1")],
    );
    let rid = server
        .create_job(interactive(json!({"asks": 1, "linger": true}), json!({})))
        .await;
    let job = format!("/v1/jobs/{rid}");
    let status = server.wait_status(&job, &["waiting_user"]).await;
    let (code, _) = server
        .post_json(
            &format!("{job}/interaction/reply"),
            json!({"interaction_id": 11, "response": "go"}),
        )
        .await;
    assert_eq!(code, 200);
    let log = server.run_dir(&status).join("logs/stdout.txt");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap().contains("lingering") {
        assert!(Instant::now() < deadline, "the second turn never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, body) = server.post_json(&format!("{job}/cancel"), json!({})).await;
    assert_eq!(code, 200);
    assert_eq!(
        (&body["accepted"], &body["status"]),
        (&json!(true), &json!("canceled")),
        "{body}"
    );
    // The turn's process is gone, so the only slot runs the next job at once.
    let next = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, s) = server.get(&format!("/v1/jobs/{next}")).await;
        if s["status"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "the slot stayed busy: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn reply_timeouts_decide_or_fail() {
    let server = TestServer::with_skills(&[asker_skill("asker")], &[]);
    let decide = server
        .create_job(interactive(
            json!({"asks": 1}),
            json!({"session_timeout_sec": 1, "interactive_require_user_reply": false}),
        ))
        .await;
    let strict = server
        .create_job(interactive(
            json!({"asks": 1}),
            json!({"session_timeout_sec": 1}),
        ))
        .await;
    let asked = Instant::now();
    server
        .wait_status(&format!("/v1/jobs/{decide}"), &["waiting_user"])
        .await;

    let status = server.wait_job(&decide).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert!(asked.elapsed() >= Duration::from_millis(900));
    assert_eq!(status["auto_decision_count"], 1);
    assert!(status["last_auto_decision_at"].is_string());
    let (_, result) = server.get(&format!("/v1/jobs/{decide}/result")).await;
    let reply = &result["result"]["data"]["reply"];
    assert_eq!(reply["source"], "auto_decide_timeout");
    assert_eq!(reply["reason"], "user_no_reply");
    assert_eq!(reply["interaction_id"], 11);
    assert_eq!(reply["policy"], "pick_first");
    assert!(
        reply["instruction"]
            .as_str()
            .unwrap()
            .contains("best judgement")
    );
    let (_, chat) = server.get(&format!("/v1/jobs/{decide}/chat/history")).await;
    let decided = &chat["events"][2];
    assert_eq!(decided["kind"], "orchestration_notice", "{chat}");
    assert_eq!(decided["role"], "system");
    assert_eq!(
        decided["correlation"]["resolution_mode"],
        "auto_decide_timeout"
    );

    let status = server.wait_job(&strict).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["error"]["code"], "INTERACTION_WAIT_TIMEOUT");
    assert_eq!(status["auto_decision_count"], 0);
    let (code, _) = server
        .post_json(
            &format!("/v1/jobs/{strict}/interaction/reply"),
            json!({"interaction_id": 11, "response": "too late"}),
        )
        .await;
    assert_eq!(code, 409);
    let (_, result) = server.get(&format!("/v1/jobs/{strict}/result")).await;
    assert_eq!(
        result["result"]["error"]["code"],
        "INTERACTION_WAIT_TIMEOUT"
    );
    // Its conversation ends after the unanswered question, and its stream ends too.
    let chat = server
        .events(&format!("/v1/jobs/{strict}/chat"), None)
        .await
        .collect()
        .await;
    assert_eq!(chat.last().unwrap().data, json!({"reason": "terminal"}));
    let items = chat_items(&chat);
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "assistant_message",
            "user_input_required",
            "orchestration_notice"
        ]
    );
    assert_eq!(
        items[2]["correlation"]["error_code"],
        "INTERACTION_WAIT_TIMEOUT"
    );

    // As FCMP events: the runner's decision, and a wait that ended the run while it waited.
    let (_, decided) = server
        .get(&format!("/v1/jobs/{decide}/events/history"))
        .await;
    let types = fcmp_summary(&decided["events"]);
    assert_eq!(
        types[4..8],
        [
            s("interaction.auto_decide.timeout"),
            s("conversation.state.changed waiting_user->queued"),
            s("conversation.state.changed queued->running"),
            s("assistant.message.intermediate"),
        ],
        "{decided}"
    );
    let timeout = &decided["events"][4]["data"];
    assert_eq!(
        (&timeout["interaction_id"], &timeout["policy"]),
        (&json!(11), &json!("pick_first"))
    );
    assert_eq!(
        decided["events"][5]["data"]["resume_cause"],
        "interaction_auto_decide_timeout"
    );
    let (_, failed) = server
        .get(&format!("/v1/jobs/{strict}/events/history"))
        .await;
    let events = failed["events"].as_array().unwrap();
    assert_eq!(
        fcmp_summary(&failed["events"]).last().unwrap(),
        "conversation.state.changed waiting_user->failed"
    );
    let terminal = &events.last().unwrap()["data"]["terminal"];
    assert_eq!(terminal["status"], "failed");
    assert_eq!(terminal["reason_code"], "INTERACTION_WAIT_TIMEOUT");
    assert_eq!(terminal["error"]["code"], "INTERACTION_WAIT_TIMEOUT");
}

fn s(text: &str) -> String {
    text.to_owned()
}

/// Each FCMP event's type, with the states of a state change.
/// The events' types, with each state change's move; the run's warnings left out (which ones
/// a run gets depends on the machine: `PROGRAM_OUTSIDE_SANDBOX` where the interpreter lies
/// outside the sandbox's reach).
fn fcmp_summary(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] != "diagnostic.warning")
        .map(|e| match e["type"].as_str().unwrap() {
            "conversation.state.changed" => format!(
                "conversation.state.changed {}->{}",
                e["data"]["from"].as_str().unwrap(),
                e["data"]["to"].as_str().unwrap()
            ),
            other => other.to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn management_routes_show_the_same_runs_as_the_jobs_routes() {
    let broken = common::skill_package("broken", "1.0.0").without("assets/output.schema.json");
    let server = TestServer::with_skills(
        &[
            asker_skill("asker"),
            probe_skill("probe", None),
            broken,
            // Placed by hand without a version, as the reference's own example skills ship.
            probe_skill("unversioned", None).runner(json!({"version": null})),
        ],
        &[],
    );
    let rid = server
        .create_job(interactive(json!({"asks": 1}), json!({})))
        .await;
    let job = format!("/v1/jobs/{rid}");
    let mgmt = format!("/v1/management/runs/{rid}");
    server.wait_status(&job, &["waiting_user"]).await;

    let (_, via_jobs) = server.get(&job).await;
    let (code, mut via_mgmt) = server.get(&mgmt).await;
    assert_eq!(code, 200);
    assert_eq!(via_mgmt["poll_logs"], false);
    // The list's extras: when the run started and how long it has run; it has not finished.
    assert!(via_mgmt["started_at"].is_string(), "{via_mgmt}");
    assert!(via_mgmt["duration_ms"].is_u64(), "{via_mgmt}");
    assert!(via_mgmt["finished_at"].is_null(), "{via_mgmt}");
    for extra in ["poll_logs", "started_at", "finished_at", "duration_ms"] {
        via_mgmt.as_object_mut().unwrap().remove(extra);
    }
    assert_eq!(via_mgmt, via_jobs);
    let (_, pending_jobs) = server.get(&format!("{job}/interaction/pending")).await;
    let (code, pending_mgmt) = server.get(&format!("{mgmt}/pending")).await;
    assert_eq!((code, &pending_mgmt), (200, &pending_jobs));
    let events = server
        .events(&format!("{mgmt}/events"), None)
        .await
        .collect()
        .await;
    assert_eq!(events.last().unwrap().data["reason"], "waiting_user");
    let (code, body) = server
        .post_json(
            &format!("{mgmt}/reply"),
            json!({"interaction_id": 11, "response": "via console"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let status = server.wait_job(&rid).await;
    let (_, mut state) = server.get(&mgmt).await;
    assert_eq!(
        state.as_object_mut().unwrap().remove("poll_logs"),
        Some(json!(false))
    );
    assert!(state["finished_at"].is_string(), "{state}");
    for extra in ["started_at", "finished_at", "duration_ms"] {
        state.as_object_mut().unwrap().remove(extra);
    }
    assert_eq!(state, status);

    // The run list: newest first, bounded.
    let newer = server
        .create_running(json!({"skill_id": "probe", "parameter": {"mode": "sleep"}}))
        .await;
    let (_, list) = server.get("/v1/management/runs?limit=1").await;
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);
    assert_eq!(list["runs"][0]["request_id"], newer);
    assert_eq!(list["runs"][0]["poll_logs"], true);
    let (_, list) = server.get("/v1/management/runs").await;
    let ids: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [newer.as_str(), rid.as_str()]);
    for bad in ["0", "1001", "x"] {
        let (code, _) = server
            .get(&format!("/v1/management/runs?limit={bad}"))
            .await;
        assert_eq!(code, 422, "limit={bad}");
    }
    let (code, body) = server
        .post_json(&format!("/v1/management/runs/{newer}/cancel"), json!({}))
        .await;
    assert_eq!((code, &body["accepted"]), (200, &json!(true)), "{body}");
    assert_eq!(server.wait_job(&newer).await["status"], "canceled");

    // Files and previews of the run folder.
    let (code, files) = server.get(&format!("{mgmt}/files")).await;
    assert_eq!(code, 200);
    assert_eq!(files["run_id"], status["run_id"]);
    let entries = files["entries"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e["rel_path"] == "logs/stdout.txt" && e["depth"] == 1 && e["is_dir"] == false)
    );
    let (code, file) = server
        .get(&format!("{mgmt}/file?path=./logs//stdout.txt"))
        .await;
    assert_eq!(code, 200, "{file}");
    assert_eq!(file["path"], "logs/stdout.txt");
    assert_eq!(file["preview"]["mode"], "text");
    let stdout = std::fs::read_to_string(server.run_dir(&status).join("logs/stdout.txt")).unwrap();
    assert_eq!(file["preview"]["content"], stdout);
    assert_eq!(file["preview"]["size"], stdout.len());
    for (path, code) in [
        ("../../etc/passwd", 400),
        ("/etc/passwd", 400),
        ("%20", 400),
        ("logs/missing.txt", 404),
        ("logs", 404),
    ] {
        let (got, body) = server.get(&format!("{mgmt}/file?path={path}")).await;
        assert_eq!(got, code, "{path}: {body}");
    }
    let (code, _) = server.get(&format!("{mgmt}/file")).await;
    assert_eq!(code, 422);
    let (code, _) = server.get("/v1/management/runs/nope/files").await;
    assert_eq!(code, 404);

    // Skills: summaries with health, details with files, parsed schemas.
    let (code, skills) = server.get("/v1/management/skills").await;
    assert_eq!(code, 200);
    let find = |id: &str| {
        skills["skills"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap()
    };
    let asker = find("asker");
    assert_eq!(asker["health"], "healthy");
    assert!(
        asker["effective_engines"]
            .as_array()
            .unwrap()
            .contains(&json!("script"))
    );
    assert_eq!(asker["execution_modes"], json!(["auto", "interactive"]));
    assert!(asker["installed_at"].as_str().unwrap().ends_with('Z'));
    let broken = find("broken");
    assert_eq!(broken["health"], "degraded");
    assert!(broken["health_error"].as_str().unwrap().contains("output"));
    assert_eq!(asker["warnings"], json!([]));
    let unversioned = find("unversioned");
    assert_eq!(unversioned["health"], "healthy", "{unversioned}");
    assert_eq!(unversioned["version"], "1.0.0");
    assert_eq!(
        unversioned["warnings"],
        json!(["runner.json has no 'version'; the skill is treated as 1.0.0"])
    );
    let (_, listed) = server.get("/v1/skills/unversioned").await;
    assert_eq!(listed["version"], "1.0.0");
    assert_eq!(listed["warnings"], unversioned["warnings"]);
    let (code, detail) = server.get("/v1/management/skills/asker").await;
    assert_eq!(code, 200);
    assert_eq!(
        detail["entrypoints"],
        json!({"script": ["python3", "run.py"]})
    );
    assert_eq!(detail["schemas"]["output"], "assets/output.schema.json");
    let files: Vec<&str> = detail["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rel_path"].as_str().unwrap())
        .collect();
    assert_eq!(files[0], "assets", "folders first");
    assert!(files.contains(&"run.py") && files.contains(&"assets/runner.json"));
    let (code, schemas) = server.get("/v1/management/skills/asker/schemas").await;
    assert_eq!(code, 200);
    assert_eq!(schemas["skill_id"], "asker");
    assert_eq!(schemas["output"]["required"], json!(["summary"]));
    let (code, _) = server.get("/v1/management/skills/broken/schemas").await;
    assert_eq!(code, 422);
    let (code, _) = server.get("/v1/management/skills/nope").await;
    assert_eq!(code, 404);
}

/// The `chat_event` items of `events`, checking each one's SSE id is its seq.
fn chat_items(events: &[SseEvent]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.name == "chat_event")
        .map(|e| {
            assert_eq!(e.id.as_deref(), Some(e.data["seq"].to_string().as_str()));
            e.data.clone()
        })
        .collect()
}

fn kinds(items: &[Value]) -> Vec<(u64, String, String)> {
    items
        .iter()
        .map(|i| {
            (
                i["seq"].as_u64().unwrap(),
                i["kind"].as_str().unwrap().to_owned(),
                i["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// An interactive run read as a conversation: live up to each question, resumed from a cursor
/// (query or `Last-Event-ID`, on the jobs and the management routes) without a repeat or a gap,
/// and the history holds the same items in the same order.
#[tokio::test]
async fn a_run_reads_as_a_conversation_live_resumed_and_in_history() {
    let server = TestServer::with_skills(&[asker_skill("asker")], &[]);
    let rid = server
        .create_job(interactive(json!({"asks": 2}), json!({})))
        .await;
    let job = format!("/v1/jobs/{rid}");
    let first = server
        .events(&format!("{job}/chat"), None)
        .await
        .collect()
        .await;
    assert_eq!(first[0].name, "snapshot");
    assert_eq!(first[0].data["cursor"], 0);
    assert_eq!(
        first.last().unwrap().data,
        json!({"reason": "waiting_user"})
    );
    let mut items = chat_items(&first);
    let s = |v: &str| v.to_owned();
    assert_eq!(
        kinds(&items),
        vec![
            (1, s("assistant_message"), s("turn 1 of an asker")),
            (2, s("user_input_required"), s("question 1?")),
        ]
    );
    assert_eq!(items[1]["correlation"]["interaction_id"], 11);
    assert_eq!(items[1]["role"], "assistant");
    assert_eq!(items[0]["protocol_version"], "chat-replay/1.0");
    assert!(items[0]["raw_ref"]["byte_to"].as_u64().unwrap() > 0);

    let reply = |id: u64, response: Value| {
        let server = &server;
        let path = format!("{job}/interaction/reply");
        async move {
            let (code, body) = server
                .post_json(&path, json!({"interaction_id": id, "response": response}))
                .await;
            assert_eq!(code, 200, "{body}");
        }
    };
    reply(11, json!("left")).await;
    let second = server
        .events(&format!("{job}/chat?cursor=2"), None)
        .await
        .collect()
        .await;
    assert_eq!(second[0].data["cursor"], 2);
    assert_eq!(
        second.last().unwrap().data,
        json!({"reason": "waiting_user"})
    );
    items.extend(chat_items(&second));

    reply(12, json!({"text": "free form"})).await;
    // The header wins over a stale cursor; the management route sees the same conversation.
    let third = server
        .events(
            &format!("/v1/management/runs/{rid}/chat?cursor=0"),
            Some("5"),
        )
        .await
        .collect()
        .await;
    assert_eq!(third.last().unwrap().data, json!({"reason": "terminal"}));
    items.extend(chat_items(&third));
    let summary: Vec<(u64, String, String)> = kinds(&items)
        .into_iter()
        .map(|(seq, kind, text)| (seq, kind, text.chars().take(30).collect()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, s("assistant_message"), s("turn 1 of an asker")),
            (2, s("user_input_required"), s("question 1?")),
            (3, s("interaction_reply"), s("left")),
            (4, s("assistant_message"), s("turn 2 of an asker")),
            (5, s("user_input_required"), s("question 2?")),
            (6, s("interaction_reply"), s(r#"{"text":"free form"}"#)),
            (7, s("assistant_message"), s("turn 3 of an asker")),
            (
                8,
                s("assistant_final"),
                s(r#"{"summary": "done", "turn": 3,"#)
            ),
            (9, s("orchestration_notice"), s("The run succeeded.")),
        ]
    );
    assert_eq!(
        items
            .iter()
            .map(|i| i["attempt"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 1, 2, 2, 2, 3, 3, 3, 3]
    );
    assert_eq!(items[2]["role"], "user");
    assert_eq!(items[8]["role"], "system");

    let (code, history) = server.get(&format!("{job}/chat/history")).await;
    assert_eq!(code, 200, "{history}");
    assert_eq!(history["events"], Value::Array(items.clone()));
    assert_eq!(history["count"], 9);
    assert_eq!(
        (
            history["cursor_floor"].clone(),
            history["cursor_ceiling"].clone()
        ),
        (json!(1), json!(9))
    );
    assert_eq!(history["status"], "succeeded");
    let (_, part) = server
        .get(&format!(
            "/v1/management/runs/{rid}/chat/history?from_seq=3&to_seq=5"
        ))
        .await;
    assert_eq!(part["events"], Value::Array(items[2..5].to_vec()));
    assert_eq!(part["cursor_ceiling"], 9);
    // A finished run's stream replays what is after the cursor, then ends.
    let replay = server
        .events(&format!("{job}/chat?cursor=7"), None)
        .await
        .collect()
        .await;
    assert_eq!(chat_items(&replay), items[7..].to_vec());

    let (code, _) = server.get(&format!("{job}/chat/history?from_seq=x")).await;
    assert_eq!(code, 422);
    let (code, _) = server.get(&format!("{job}/chat?cursor=-1")).await;
    assert_eq!(code, 422);
    let resp = server
        .client
        .get(server.url(&format!("{job}/chat")))
        .header("last-event-id", "1:2")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let (code, _) = server
        .get(&format!("/v1/temp-skill-runs/{rid}/chat/history"))
        .await;
    assert_eq!(
        code, 404,
        "a jobs request is unknown to the temporary-run routes"
    );
    let (code, _) = server.get("/v1/jobs/nope/chat/history").await;
    assert_eq!(code, 404);
}

/// An interactive run read as FCMP/1.0 events, as a v0.7 client reads them: `/events` with a
/// `cursor` up to each question, resumed after each reply, and `/events/history` holding the
/// same envelopes in the same order, filtered by `seq` and time.
#[tokio::test]
async fn a_run_reads_as_fcmp_events_live_resumed_and_in_history() {
    let server = TestServer::with_skills(&[asker_skill("asker")], &[]);
    let rid = server
        .create_job(interactive(json!({"asks": 2}), json!({})))
        .await;
    let job = format!("/v1/jobs/{rid}");
    let mut events = Vec::new();
    for (n, answer) in [json!("left"), json!({"text": "free form"}), Value::Null]
        .into_iter()
        .enumerate()
    {
        let cursor = events.len();
        let stream = server
            .events(&format!("{job}/events?cursor={cursor}"), None)
            .await
            .collect()
            .await;
        assert_eq!(stream[0].name, "snapshot");
        assert_eq!(stream[0].data["cursor"], cursor);
        let ended = if answer.is_null() {
            "terminal"
        } else {
            "waiting_user"
        };
        assert_eq!(stream.last().unwrap().data, json!({"reason": ended}));
        events.extend(chat_items(&stream));
        if !answer.is_null() {
            let id = 11 + n;
            let (code, body) = server
                .post_json(
                    &format!("{job}/interaction/reply"),
                    json!({"interaction_id": id, "response": answer}),
                )
                .await;
            assert_eq!(code, 200, "{body}");
        }
    }
    assert_eq!(
        fcmp_summary(&Value::Array(events.clone())),
        [
            "conversation.state.changed queued->running",
            "assistant.message.intermediate",
            "user.input.required",
            "conversation.state.changed running->waiting_user",
            "interaction.reply.accepted",
            "conversation.state.changed waiting_user->queued",
            "conversation.state.changed queued->running",
            "assistant.message.intermediate",
            "user.input.required",
            "conversation.state.changed running->waiting_user",
            "interaction.reply.accepted",
            "conversation.state.changed waiting_user->queued",
            "conversation.state.changed queued->running",
            "assistant.message.intermediate",
            "assistant.message.promoted",
            "assistant.message.final",
            "conversation.state.changed running->succeeded",
        ]
    );
    // The run's warnings come right before its end (which ones depends on the machine).
    let warnings = events
        .iter()
        .filter(|e| e["type"] == "diagnostic.warning")
        .count();
    let end = events.len() - 1;
    assert!(
        events[end - warnings..end]
            .iter()
            .all(|e| e["type"] == "diagnostic.warning" && e["data"]["code"].is_string()),
        "{events:?}"
    );
    let streamed = events.clone();
    events.drain(end - warnings..end);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let last = 17 + warnings as u64;
    assert_eq!(seqs, (1..=16).chain([last]).collect::<Vec<_>>());
    let (attempts, local): (Vec<u64>, Vec<u64>) = events
        .iter()
        .map(|e| {
            (
                e["meta"]["attempt"].as_u64().unwrap(),
                e["meta"]["local_seq"].as_u64().unwrap(),
            )
        })
        .unzip();
    assert_eq!(
        attempts,
        [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3]
    );
    assert_eq!(
        local,
        [
            1,
            2,
            3,
            4,
            5,
            6,
            1,
            2,
            3,
            4,
            5,
            6,
            1,
            2,
            3,
            4,
            5 + warnings as u64
        ]
    );
    let first = &events[0];
    assert_eq!(first["protocol_version"], "fcmp/1.0");
    assert_eq!(first["engine"], "script");
    assert!(first["ts"].as_str().unwrap().ends_with('Z'));
    assert_eq!(first["data"]["trigger"], "turn.started");
    assert_eq!(events[1]["data"]["text"], "turn 1 of an asker");
    assert_eq!(events[1]["raw_ref"]["stream"], "stdout");
    assert_eq!(events[1]["raw_ref"]["attempt_number"], 1);
    assert_eq!(events[2]["data"]["interaction_id"], 11);
    assert_eq!(events[2]["data"]["prompt"], "question 1?");
    assert_eq!(events[3]["data"]["pending_interaction_id"], 11);
    assert_eq!(events[4]["data"]["response_preview"], "left");
    assert_eq!(events[4]["data"]["resolution_mode"], "user_reply");
    assert_eq!(events[5]["data"]["resume_cause"], "interaction_reply");
    assert_eq!(events[14]["type"], "assistant.message.promoted");
    assert_eq!(events[14]["data"]["text"], events[15]["data"]["text"]);
    assert_eq!(events[16]["data"]["terminal"]["status"], "succeeded");
    let times: Vec<&str> = events.iter().map(|e| e["ts"].as_str().unwrap()).collect();
    assert!(times.is_sorted(), "{times:?}");
    // The raw_ref of an event reads back its bytes of the log.
    let raw = &events[1]["raw_ref"];
    let (code, range) = server
        .get(&format!(
            "{job}/logs/range?stream=stdout&byte_from={}&byte_to={}",
            raw["byte_from"], raw["byte_to"]
        ))
        .await;
    assert_eq!(code, 200);
    assert!(
        range["chunk"]
            .as_str()
            .unwrap()
            .contains("turn 1 of an asker")
    );

    let (code, history) = server.get(&format!("{job}/events/history")).await;
    assert_eq!(code, 200, "{history}");
    assert_eq!(history["events"], Value::Array(streamed.clone()));
    assert_eq!(
        (
            &history["count"],
            &history["source"],
            &history["cursor_ceiling"]
        ),
        (&json!(last), &json!("audit"), &json!(last))
    );
    let (_, part) = server
        .get(&format!(
            "/v1/management/runs/{rid}/events/history?from_seq=5&to_seq=7"
        ))
        .await;
    assert_eq!(part["events"], Value::Array(events[4..7].to_vec()));
    // Time bounds, in the reference's own format too (no offset: UTC).
    let reply_ts = events[4]["ts"].as_str().unwrap();
    let naive = reply_ts.trim_end_matches('Z');
    let (_, late) = server
        .get(&format!("{job}/events/history?from_ts={naive}"))
        .await;
    let late = late["events"].as_array().unwrap();
    assert!(!late.is_empty() && late.len() < streamed.len());
    assert!(late.iter().all(|e| e["ts"].as_str().unwrap() >= reply_ts));
    let (code, _) = server
        .get(&format!("{job}/events/history?from_ts=yesterday"))
        .await;
    assert_eq!(code, 422);
    // A finished run's FCMP stream replays what is after the cursor; a numeric Last-Event-ID
    // asks for it too.
    let replay = server
        .events(&format!("{job}/events"), Some("13"))
        .await
        .collect()
        .await;
    assert_eq!(chat_items(&replay), streamed[13..].to_vec());
    let (code, _) = server
        .get(&format!("{job}/events?cursor=1&stdout_from=0"))
        .await;
    assert_eq!(code, 422);
    // Without a cursor, the seed's byte stream as before.
    let seed = server
        .events(&format!("{job}/events"), None)
        .await
        .collect()
        .await;
    assert!(seed.iter().any(|e| e.name == "stdout"));
    let (code, _) = server
        .get(&format!("/v1/temp-skill-runs/{rid}/events/history"))
        .await;
    assert_eq!(code, 404);
}

/// A client that drops the conversation stream at random points and resumes from the last
/// `seq` it got receives every item of a chatty run exactly once, as the history has them.
#[tokio::test]
async fn a_conversation_resumed_at_random_points_loses_and_repeats_nothing() {
    let server = TestServer::with_skills(&[talker_skill("talker")], &[]);
    // The chat items, and the FCMP events made of them.
    for (route, extra, first) in [("chat", 0, 0), ("events", 2, 1)] {
        let rid = server
            .create_running(
                json!({"skill_id": "talker", "parameter": {"bursts": 60, "pause": 0.01},
                                   "runtime_options": {"no_cache": true}}),
            )
            .await;
        let mut rng = Lcg(7);
        let mut items: Vec<Value> = Vec::new();
        let mut connections = 0;
        'follow: loop {
            connections += 1;
            assert!(connections < 1000, "no end");
            let cursor = items.last().map_or(0, |i| i["seq"].as_u64().unwrap());
            let mut stream = server
                .events(&format!("/v1/jobs/{rid}/{route}?cursor={cursor}"), None)
                .await;
            assert_eq!(stream.next().await.unwrap().name, "snapshot");
            for _ in 0..1 + rng.below(8) {
                let event = stream.next().await.expect("the stream ends with `end`");
                match event.name.as_str() {
                    "chat_event" => items.push(event.data),
                    "end" => break 'follow,
                    _ => {}
                }
            }
        }
        let seqs: Vec<u64> = items.iter().map(|i| i["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "{route}: no gap, no repeat"
        );
        let (_, history) = server.get(&format!("/v1/jobs/{rid}/{route}/history")).await;
        assert_eq!(history["events"], Value::Array(items.clone()), "{route}");
        // 60 bursts plus six long lines, the final answer and the notice (as events, the
        // turn's start first, the answer promoted before it is given, and the terminal change
        // last, the run's warnings before it).
        let warnings = match route {
            "events" => items
                .iter()
                .filter(|e| e["type"] == "diagnostic.warning")
                .count(),
            _ => 0,
        };
        assert_eq!(
            items.len() - warnings,
            60 + 6 + 2 + extra,
            "{route}: {connections} connections"
        );
        let first_burst = &items[first];
        let text = first_burst["text"]
            .as_str()
            .or(first_burst["data"]["text"].as_str())
            .unwrap();
        assert!(text.starts_with("burst 0: wärme ✓ 😀 €"), "{route}: {text}");
    }
}

/// `runner.json` `max_attempt` bounds an interactive run's turns: a turn at the bound that asks
/// again fails the run; one that finishes succeeds. A bound that is not a positive integer makes
/// the skill invalid.
#[tokio::test]
async fn max_attempt_bounds_the_turns_of_an_interactive_run() {
    let limited = asker_skill("limited").runner(json!({"max_attempt": 2}));
    let broken = asker_skill("broken").runner(json!({"max_attempt": 0}));
    let server = TestServer::with_skills(&[limited, broken], &[]);
    let job = |asks: u64| {
        json!({"skill_id": "limited", "parameter": {"asks": asks},
        "runtime_options": {"execution_mode": "interactive", "no_cache": true}})
    };
    let (rid_ok, rid_over) = (
        server.create_job(job(1)).await,
        server.create_job(job(3)).await,
    );
    for (rid, id) in [(&rid_ok, 11), (&rid_over, 11), (&rid_over, 12)] {
        server
            .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user"])
            .await;
        let (code, body) = server
            .post_json(
                &format!("/v1/jobs/{rid}/interaction/reply"),
                json!({"interaction_id": id, "response": "go on"}),
            )
            .await;
        assert_eq!(code, 200, "{body}");
        if id == 11 && *rid == rid_over {
            // Turn 2 asks question 12 at the bound: no reply is awaited.
            let status = server.wait_job(rid).await;
            assert_eq!(status["status"], "failed", "{status}");
            assert_eq!(status["error"]["code"], "INTERACTIVE_MAX_ATTEMPT_EXCEEDED");
            assert!(
                status["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("turn 2 asked again"),
                "{status}"
            );
            break;
        }
    }
    let status = server.wait_job(&rid_ok).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, skills) = server.get("/v1/skills").await;
    let broken = skills
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "broken")
        .unwrap();
    assert_eq!(broken["health"], "degraded", "{broken}");
    assert!(
        broken["health_error"]
            .as_str()
            .unwrap()
            .contains("max_attempt")
    );
}

/// An interactive skill whose first turn asks for files (`upload_files`), and whose second
/// reads what it was sent.
fn file_asker() -> common::Package {
    const SCRIPT: &str = r#"import json, sys
req = json.load(sys.stdin)
if not req["history"]:
    print(json.dumps({"ask_user": {"interaction_id": 7, "kind": "upload_files",
        "prompt": "Send the paper", "ui_hints": {"files": [
            {"name": "paper", "required": True, "accept": ".pdf"},
            {"name": "notes", "required": False}]}}}))
else:
    reply = req["reply"]
    got = {f["slot"]: open(f["path"]).read() for f in reply["files"]}
    print(json.dumps({"summary": "read", "got": got, "message": reply.get("message"),
                      "names": sorted(f["name"] for f in reply["files"])}))
"#;
    common::skill_package("file-asker", "1.0.0")
        .runner(json!({"entrypoint": {"script": ["python3", "run.py"]},
                       "execution_modes": ["interactive"]}))
        .file("run.py", SCRIPT)
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary"]}).to_string(),
        )
}

/// A multipart file reply: `metadata` JSON and `files` parts.
fn file_reply(metadata: Option<&str>, files: &[(&str, &[u8])]) -> reqwest::multipart::Form {
    let mut form = reqwest::multipart::Form::new();
    if let Some(metadata) = metadata {
        form = form.text("metadata", metadata.to_owned());
    }
    for (name, bytes) in files {
        form = form.part(
            "files",
            reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string()),
        );
    }
    form
}

/// A question answered with files, as a v0.7 client does it: the handshake advertises the
/// limits, the reply binds each file to a slot of the question, the next turn reads them from
/// its workspace; every malformed reply is refused with the reference's status and changes
/// nothing, and a retry with the same key is the same reply.
#[tokio::test]
async fn a_question_is_answered_with_files() {
    let server = TestServer::with_skills(&[file_asker()], &[]);
    let (code, shake) = server
        .post_json(
            "/v1/system/handshake",
            json!({"schema": "zotero-agents.skillrunner-handshake.request.v1",
                   "client": {"name": "zotero-agents", "version": "0.5.4"},
                   "requested_protocols": ["skillrunner.job.v1", "skillrunner.sequence.v1",
                                           "skillrunner.interaction-files.v1"]}),
        )
        .await;
    assert_eq!(code, 200, "{shake}");
    assert_eq!(
        shake["schema"],
        "zotero-agents.skillrunner-handshake.response.v1"
    );
    assert_eq!(
        shake["protocols"],
        json!({"skillrunner.job.v1": {"supported": true},
               "skillrunner.sequence.v1": {"supported": false},
               "skillrunner.interaction-files.v1": {"supported": true, "max_files": 8,
                   "max_file_bytes": 33554432, "max_total_bytes": 67108864}})
    );
    let (_, bare) = server
        .post_json(
            "/v1/system/handshake",
            json!({"requested_protocols": ["skillrunner.job.v1"]}),
        )
        .await;
    assert!(
        bare["protocols"]
            .get("skillrunner.interaction-files.v1")
            .is_none(),
        "only when asked"
    );
    // No protocols named: the reference's default list.
    let (code, default) = server
        .post_json(
            "/v1/system/handshake",
            json!({"client": {"name": "zotero-agents", "version": "0.5.4"}}),
        )
        .await;
    assert_eq!(code, 200, "{default}");
    assert_eq!(
        default["protocols"],
        json!({"skillrunner.job.v1": {"supported": true},
               "skillrunner.sequence.v1": {"supported": false}})
    );

    let rid = server
        .create_job(json!({"skill_id": "file-asker",
                           "runtime_options": {"execution_mode": "interactive"}}))
        .await;
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["waiting_user"])
        .await;
    let (_, pending) = server
        .get(&format!("/v1/jobs/{rid}/interaction/pending"))
        .await;
    assert_eq!(pending["pending"]["kind"], "upload_files", "{pending}");
    let path = format!("/v1/jobs/{rid}/interaction/reply/files");
    let send = |form: reqwest::multipart::Form| {
        let (server, path) = (&server, &path);
        async move {
            let resp = server
                .client
                .post(server.url(path))
                .multipart(form)
                .send()
                .await
                .unwrap();
            let code = resp.status().as_u16();
            (code, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let meta = |id: u64, key: &str, bindings: Value| {
        json!({"interaction_id": id, "idempotency_key": key, "message": "here",
               "bindings": bindings})
        .to_string()
    };
    let both = json!([{"slot": "paper", "file_index": 0}, {"slot": "notes", "file_index": 1}]);
    let two: &[(&str, &[u8])] = &[("paper.pdf", b"PDF bytes"), ("../notes.txt", b"n")];
    let nine: Vec<(&str, &[u8])> = (0..9).map(|_| ("f", b"x".as_slice())).collect();
    for (form, code, says) in [
        (file_reply(None, two), 400, "no 'metadata' part"),
        (
            file_reply(Some("{not json"), two),
            400,
            "'metadata' is not JSON",
        ),
        (
            file_reply(
                Some(&json!({"interaction_id": 7, "bindings": []}).to_string()),
                two,
            ),
            422,
            "metadata.idempotency_key",
        ),
        (
            file_reply(Some(&meta(7, "k", both.clone())), &[]),
            422,
            "at least one file",
        ),
        (
            file_reply(
                Some(&meta(7, "k", json!([{"slot": "paper", "file_index": 0}]))),
                two,
            ),
            422,
            "file 1 is bound to no slot",
        ),
        (
            file_reply(
                Some(&meta(7, "k", json!([{"slot": "notes", "file_index": 0}]))),
                &two[..1],
            ),
            422,
            "required slot 'paper' has no file",
        ),
        (
            file_reply(
                Some(&meta(
                    7,
                    "k",
                    json!([{"slot": "other", "file_index": 0},
                                                  {"slot": "paper", "file_index": 1}]),
                )),
                two,
            ),
            422,
            "slot 'other' is not one the question asks for",
        ),
        (
            file_reply(
                Some(&meta(7, "k", json!([{"slot": "paper", "file_index": 0}]))),
                &[("empty.pdf", b"")],
            ),
            422,
            "is empty",
        ),
        (
            file_reply(Some(&meta(7, "k", both.clone())), &nine),
            413,
            "more than 8 files",
        ),
        (
            file_reply(Some(&meta(8, "k", both.clone())), two),
            409,
            "stale interaction",
        ),
    ] {
        let (got, body) = send(form).await;
        assert_eq!(got, code, "{says}: {body}");
        assert!(body.to_string().contains(says), "{says}: {body}");
    }
    let (_, still) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(still["status"], "waiting_user", "refusals change nothing");
    // A link the turn planted where the files go is not followed out of the run.
    let outside = tempfile::tempdir().unwrap();
    let planted = server
        .workspace(&still)
        .join("uploads/.interaction-replies");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(outside.path(), &planted).unwrap();
    let (code, refused) = send(file_reply(Some(&meta(7, "k0", both.clone())), two)).await;
    assert_eq!(code, 409, "{refused}");
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing written outside"
    );
    std::fs::remove_file(&planted).unwrap();

    let (code, accepted) = send(file_reply(Some(&meta(7, "k1", both.clone())), two)).await;
    assert_eq!(code, 200, "{accepted}");
    assert_eq!(accepted["status"], "queued");
    let (code, _) = send(file_reply(Some(&meta(7, "k1", both.clone())), two)).await;
    assert_eq!(code, 200, "the same key and files: the same reply");
    let (code, other) = send(file_reply(
        Some(&meta(7, "k1", both.clone())),
        &[("paper.pdf", b"other"), ("notes.txt", b"n")],
    ))
    .await;
    assert_eq!(code, 409, "{other}");

    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    let data = &result["result"]["data"];
    assert_eq!(
        data["got"],
        json!({"paper": "PDF bytes", "notes": "n"}),
        "{result}"
    );
    assert_eq!(data["message"], "here");
    assert_eq!(
        data["names"],
        json!(["../notes.txt", "paper.pdf"]),
        "names are shown, not used"
    );
    // The files are in the run's workspace, by slot.
    let replies = server
        .workspace(&status)
        .join("uploads/.interaction-replies/7");
    let stored: Vec<_> = walkdir_files(&replies);
    assert_eq!(stored, ["notes", "paper"], "{stored:?}");
}

fn walkdir_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .flat_map(|receipt| std::fs::read_dir(receipt.path()).unwrap().flatten())
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
