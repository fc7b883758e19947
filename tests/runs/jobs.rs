//! The job engine end to end against the real binary with `script` skills.

use skill_runner_test_support as common;

use common::{TestServer, assert_group_gone, probe_skill, unzip};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Every file of a bundle is in its manifest with the right size and hash, and vice versa.
fn check_manifest(files: &std::collections::BTreeMap<String, Vec<u8>>, manifest_name: &str) {
    let manifest: Value = serde_json::from_slice(&files[manifest_name]).unwrap();
    let listed = manifest["files"].as_array().unwrap();
    assert_eq!(listed.len(), files.len() - 1, "{manifest}");
    for entry in listed {
        let bytes = &files[entry["path"].as_str().unwrap()];
        assert_eq!(entry["size"], bytes.len());
        let hex: String = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(entry["sha256"], hex);
    }
}

#[tokio::test]
async fn file_input_and_parameter_run_to_success_with_result_artifacts_bundle_and_logs() {
    let server = TestServer::with_skills(&[probe_skill("probe", Some(true))], &[]);
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "engine": "script", "input": {"text": "hi"},
                   "parameter": {"mode": "ok"}, "runtime_options": {"debug": true}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued", "waits for the upload");
    assert_eq!(created["cache_hit"], false);
    let rid = created["request_id"].as_str().unwrap();
    let (_, before) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(before["status"], "queued");

    // As in the reference: a zip without a file expected under its input's name is taken, and
    // the run fails naming the input, the entry expected and what the zip held, with a hint.
    let (code, other) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "input": {"text": "no doc"}, "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{other}");
    let other = other["request_id"].as_str().unwrap();
    let (code, taken) = server.upload_inputs(other, vec![("other.txt", b"x")]).await;
    assert_eq!(code, 200, "{taken}");
    assert_eq!(taken["status"], "queued", "{taken}");
    let failed = server.wait_job(other).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "UPLOAD_INPUT_MISSING", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Input validation failed: ")
            && message.contains("input 'doc'")
            && message.contains("holds: other.txt"),
        "{message}"
    );
    assert!(failed["error"]["hint"].as_str().is_some(), "{failed}");
    let (_, result) = server.get(&format!("/v1/jobs/{other}/result")).await;
    assert_eq!(result["result"]["error"]["message"], message, "{result}");
    // A file the request named by its path in the zip (the reference's v0.7 way) that the zip
    // lacks is refused at once, as the reference does; the request waits for a proper upload.
    let (code, named) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "input": {"text": "v0.7", "doc": "papers/a.txt"},
                   "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{named}");
    let named = named["request_id"].as_str().unwrap();
    let (code, missing) = server.upload_inputs(named, vec![("other.txt", b"x")]).await;
    assert_eq!(code, 400, "{missing}");
    assert_eq!(
        missing["detail"]["code"], "UPLOAD_INPUT_MISSING",
        "{missing}"
    );
    let message = missing["detail"]["message"].as_str().unwrap();
    assert!(
        message.contains("input 'doc'") && message.contains("no 'papers/a.txt'"),
        "{message}"
    );
    let (code, up) = server
        .upload_inputs(named, vec![("papers/a.txt", b"by its path")])
        .await;
    assert_eq!(code, 200, "{up}");
    let done = server.wait_job(named).await;
    assert_eq!(done["status"], "succeeded", "{done}");

    let (code, uploaded) = server
        .upload_inputs(rid, vec![("doc", "Grüße, document\n".as_bytes())])
        .await;
    assert_eq!(code, 200, "{uploaded}");
    assert_eq!(uploaded["extracted_files"], json!(["doc"]));
    let (code, again) = server.upload_inputs(rid, vec![("doc", b"x")]).await;
    assert_eq!(code, 409, "second upload: {again}");

    let status = server.wait_job(rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert!(status["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(status["updated_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(status["error"], Value::Null);
    assert_eq!(status["recovery_state"], "none");

    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["request_id"], rid);
    let r = &result["result"];
    assert_eq!(r["status"], "success", "{result}");
    assert_eq!(r["data"], json!({"summary": "hi", "turn": 1}));
    assert_eq!(r["artifacts"], json!(["artifacts/report.md"]));
    assert_eq!(
        r["repair_level"], "deterministic_generic",
        "log line before the JSON"
    );
    assert_eq!(r["error"], Value::Null);
    let on_disk: Value = serde_json::from_slice(
        &std::fs::read(server.run_dir(&status).join("result/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(&on_disk, r);

    let (_, artifacts) = server.get(&format!("/v1/jobs/{rid}/artifacts")).await;
    assert_eq!(artifacts["artifacts"], json!(["artifacts/report.md"]));
    let (code, headers, body) = server
        .get_bytes(&format!("/v1/jobs/{rid}/artifacts/artifacts/report.md"))
        .await;
    assert_eq!(code, 200);
    assert_eq!(body, "Grüße, document\n".as_bytes());
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("report.md")
    );
    let (code, _) = server
        .get(&format!("/v1/jobs/{rid}/artifacts/report.md"))
        .await;
    assert_eq!(code, 404, "path must start with artifacts/");
    let (code, _) = server
        .get(&format!(
            "/v1/jobs/{rid}/artifacts/artifacts/..%2Finput.json"
        ))
        .await;
    assert_eq!(code, 400, "escapes are refused");

    let (_, logs) = server.get(&format!("/v1/jobs/{rid}/logs")).await;
    assert!(
        logs["stdout"].as_str().unwrap().starts_with("working\n"),
        "{logs}"
    );
    assert_eq!(logs["stderr"], "wärme ✓\n");

    // Debug bundle: the whole run folder, laid out as the reference's runner reads it.
    let (code, headers, zip) = server.get_bytes(&format!("/v1/jobs/{rid}/bundle")).await;
    assert_eq!(code, 200);
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("run_bundle_debug.zip")
    );
    check_debug_bundle(&unzip(&zip));

    // A second identical request without debug is a cache hit on the same run and gets the
    // plain bundle: result and artifacts only.
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "probe", "engine": "script", "input": {"text": "hi"},
                   "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    let rid2 = created["request_id"].as_str().unwrap();
    let (_, uploaded) = server
        .upload_inputs(rid2, vec![("doc", "Grüße, document\n".as_bytes())])
        .await;
    assert_eq!(uploaded["cache_hit"], true, "{uploaded}");
    let (_, headers, zip) = server.get_bytes(&format!("/v1/jobs/{rid2}/bundle")).await;
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("\"run_bundle.zip\"")
    );
    let files = unzip(&zip);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "artifacts/report.md",
            "bundle/manifest.json",
            "result/result.json"
        ]
    );
    check_manifest(&files, "bundle/manifest.json");

    // The debug bundle is there for every run, as clients since the reference's v0.4 ask.
    let (code, headers, zip) = server
        .get_bytes(&format!("/v1/jobs/{rid2}/bundle/debug"))
        .await;
    assert_eq!(code, 200);
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("run_bundle_debug.zip")
    );
    check_debug_bundle(&unzip(&zip));
}

/// A debug bundle: the artifacts run-relative, the request, logs, prompt and result, a true
/// manifest, and nothing under the workspace's own `artifacts/` path.
fn check_debug_bundle(files: &std::collections::BTreeMap<String, Vec<u8>>) {
    for name in [
        "artifacts/report.md",
        "request.json",
        "logs/stdout.txt",
        "logs/stderr.txt",
        "result/result.json",
    ] {
        assert!(files.contains_key(name), "{name}: {:?}", files.keys());
    }
    assert_eq!(files["artifacts/report.md"], "Grüße, document\n".as_bytes());
    assert!(
        !files
            .keys()
            .any(|n| n.starts_with("workspace/artifacts/") || n == "input.json"),
        "{:?}",
        files.keys()
    );
    check_manifest(files, "bundle/manifest_debug.json");
}

/// `logs/range`: any bytes of a log, by offsets, clamped to its size, at most 1 MiB at a time.
#[tokio::test]
async fn a_range_of_a_log_is_read_by_byte_offsets() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let (status, _) = run_mode(&server, "ok").await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let rid = status["request_id"].as_str().unwrap();
    let stdout = std::fs::read(server.run_dir(&status).join("logs/stdout.txt")).unwrap();
    let size = stdout.len() as u64;
    let on = &server;
    let range = move |query: &str| {
        let path = format!("/v1/jobs/{rid}/logs/range?{query}");
        async move { on.get(&path).await }
    };

    let (code, first) = range("stream=stdout&byte_from=0&byte_to=7").await;
    assert_eq!(code, 200, "{first}");
    assert_eq!(
        first,
        json!({"request_id": rid, "stream": "stdout", "byte_from": 0, "byte_to": 7,
               "size": size, "chunk": "working"})
    );
    let (_, whole) = range("stream=stdout").await;
    assert_eq!(
        whole["chunk"].as_str().unwrap().as_bytes(),
        stdout.as_slice()
    );
    assert_eq!(whole["byte_to"], size);
    // Bytes 1..3 of the error log are "ä"; 1..2 cuts it.
    let (_, umlaut) = range("stream=stderr&byte_from=1&byte_to=3").await;
    assert_eq!(umlaut["chunk"], "ä", "{umlaut}");
    let (_, cut) = range("stream=stderr&byte_from=1&byte_to=2").await;
    assert_eq!(cut["chunk"], "\u{FFFD}", "{cut}");
    let (_, past) = range("stream=stdout&byte_from=100000").await;
    assert_eq!(
        (&past["byte_from"], &past["byte_to"], &past["chunk"]),
        (&json!(size), &json!(size), &json!(""))
    );
    let (_, prompt) = range("stream=prompt").await;
    assert_eq!(
        (&prompt["size"], &prompt["chunk"]),
        (&json!(0), &json!("")),
        "a script has no prompt"
    );
    let (code, refused) = range("stream=stdout&byte_from=5&byte_to=2").await;
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("byte_to"),
        "{refused}"
    );
    let (code, refused) = range("stream=pty").await;
    assert_eq!(code, 422, "{refused}");
    let (code, _) = server
        .get("/v1/jobs/no-such-request/logs/range?stream=stdout")
        .await;
    assert_eq!(code, 404);
    // The management route of the reference answers the same.
    let (code, managed) = server
        .get(&format!(
            "/v1/management/runs/{rid}/logs/range?stream=stdout&byte_from=0&byte_to=7"
        ))
        .await;
    assert_eq!((code, &managed), (200, &first));
}

async fn run_mode(server: &TestServer, mode: &str) -> (Value, Value) {
    let rid = server
        .create_job(json!({"skill_id": "probe", "engine": "script", "parameter": {"mode": mode}}))
        .await;
    let status = server.wait_job(&rid).await;
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    (status, result)
}

#[tokio::test]
async fn failing_paths_end_failed_with_the_reason() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", "2"),
            ("SKILL_RUNNER_KILL_GRACE_SECONDS", "1"),
        ],
    );
    let cases = [
        (
            "exit",
            Some("SKILL_EXITED"),
            "exited with code 3. The end of its stderr:\nboom on stderr",
        ),
        ("nojson", None, "Output JSON missing or unreadable"),
        ("badschema", None, "Output validation error"),
        ("noartifact", None, "Missing required artifacts: report.md"),
        ("error", None, "BAD_INPUT: skill said no"),
        ("late", Some("TIMEOUT"), "timed out"),
    ];
    for (mode, code, message) in cases {
        let (status, result) = run_mode(&server, mode).await;
        assert_eq!(status["status"], "failed", "{mode}: {status}");
        assert_eq!(status["error"]["code"], json!(code), "{mode}: {status}");
        let got = status["error"]["message"].as_str().unwrap();
        assert!(got.contains(message), "{mode}: {got}");
        assert_eq!(result["result"]["status"], "failed", "{mode}: {result}");
        assert_eq!(result["result"]["error"]["message"], got);
    }
    let (status, result) = run_mode(&server, "exit").await;
    assert_eq!(status["status"], "failed");
    // A failure the service can explain says where to look.
    let hint = status["error"]["hint"].as_str().unwrap();
    assert!(hint.contains("stderr"), "{status}");
    assert_eq!(result["result"]["error"]["hint"], hint);
    assert!(
        result["result"]["error"]["stderr"]
            .as_str()
            .unwrap()
            .contains("boom on stderr")
    );
}

#[tokio::test]
async fn create_validation_matches_the_reference() {
    let server = TestServer::with_skills(
        &[
            probe_skill("probe", None),
            probe_skill("optional", Some(false)),
        ],
        &[],
    );
    let post = |body: Value| server.post_json("/v1/jobs", body);
    let (code, body) = post(json!({"skill_id": "nope"})).await;
    assert_eq!(code, 404, "{body}");
    let (code, body) = post(json!({"skill_id": "probe", "engine": "gemini2"})).await;
    assert_eq!(code, 400);
    assert_eq!(body["detail"]["code"], "ENGINE_UNKNOWN", "{body}");
    assert_eq!(body["detail"]["requested_engine"], "gemini2");
    assert!(
        body["detail"]["effective_engines"]
            .as_array()
            .unwrap()
            .contains(&json!("script"))
    );
    let (code, body) = post(json!({"skill_id": "probe", "parameter": {"mode": "ok"},
                                   "runtime_options": {"turbo": true}}))
    .await;
    assert_eq!(code, 400);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("Unknown runtime_options: turbo"),
        "{body}"
    );
    let (code, body) = post(json!({"skill_id": "probe", "parameter": {"mode": "ok"},
                                   "runtime_options": {"no_cache": "yes"}}))
    .await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = post(json!({"skill_id": "probe", "parameter": {"mode": "ok"},
                                   "runtime_options": {"execution_mode": "interactive"}}))
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["detail"]["code"], "SKILL_EXECUTION_MODE_UNSUPPORTED",
        "{body}"
    );
    assert_eq!(body["detail"]["declared_execution_modes"], json!(["auto"]));
    let (code, body) =
        post(json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "model": "gpt-5"})).await;
    assert_eq!(code, 400);
    assert!(
        body["detail"].as_str().unwrap().contains("takes no model"),
        "{body}"
    );
    let (code, body) = post(
        json!({"skill_id": "optional", "parameter": {"mode": "ok"}, "input": {"doc": "../x"}}),
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("Input validation failed"),
        "{body}"
    );
    let (code, body) =
        post(json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "input": {"zzz": 1}})).await;
    assert_eq!(code, 400, "{body}");
    let (code, body) =
        post(json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "input": {"text": 5}})).await;
    assert_eq!(code, 400, "wrong type: {body}");
    let (code, body) = post(json!({"skill_id": "probe", "parameter": {}})).await;
    assert_eq!(code, 400, "missing required parameter: {body}");
    assert!(body["detail"].as_str().unwrap().contains("mode"), "{body}");
    let (code, body) =
        post(json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": "x"}})).await;
    assert_eq!(code, 400, "mistyped parameter: {body}");
    let (code, body) = post(json!({"engine": "script"})).await;
    assert_eq!(code, 422, "{body}");
    assert!(body["detail"].is_array());
    // Nothing was recorded by the refused requests.
    let runs = server.dirs.data.join("runs");
    assert!(!runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none());
    // The reference's tools send verbosity counts and 0/1 flags.
    let (code, body) = post(json!({"skill_id": "probe", "parameter": {"mode": "ok"},
                                   "runtime_options": {"verbose": 2, "no_cache": 1}}))
    .await;
    assert_eq!(code, 200, "{body}");
    // An optional file input may be omitted: an empty zip starts the run.
    let rid = server
        .create_job(
            json!({"skill_id": "optional", "parameter": {"mode": "ok"}, "input": {"text": "t"}}),
        )
        .await;
    let (code, up) = server.upload_inputs(&rid, vec![]).await;
    assert_eq!(code, 200, "{up}");
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
    let (code, _) = server.upload_inputs("no-such-request", vec![]).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn agent_turns_wait_for_their_own_places_and_script_runs_pass_them() {
    let agents = common::agents::Agents::new();
    // A codex that stays busy until canceled: it holds the only agent place.
    let codex = agents.path("npm/bin/codex");
    std::fs::write(
        &codex,
        "#!/bin/sh\n[ \"$1\" = --version ] && exec echo 'codex 0.170.0'\nexec sleep 60\n",
    )
    .unwrap();
    common::agents::make_executable(&codex);
    // Logged in, else its runs would wait for a login instead of holding the place.
    agents.login(".codex/auth.json");
    let dirs = common::TestDirs::new();
    common::report_skill("reporter").write_into(&dirs.skills);
    probe_skill("probe", None).write_into(&dirs.skills);
    let server = agents.server(
        dirs,
        &[
            ("SKILL_RUNNER_MAX_CONCURRENT", "3"),
            ("SKILL_RUNNER_MAX_CONCURRENT_AGENTS", "1"),
        ],
    );
    let agent_job = json!({"skill_id": "reporter", "engine": "codex", "input": {"text": "t"},
                           "runtime_options": {"no_cache": true}});
    let first = server.create_job(agent_job.clone()).await;
    server
        .wait_status(&format!("/v1/jobs/{first}"), &["running"])
        .await;
    let second = server.create_job(agent_job).await;
    let script = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    assert_eq!(server.wait_job(&script).await["status"], "succeeded");
    assert_eq!(
        server.get(&format!("/v1/jobs/{second}")).await.1["status"],
        "queued",
        "one agent place, and the first agent turn holds it"
    );
    let (code, _) = server
        .post_json(&format!("/v1/jobs/{first}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    server
        .wait_status(&format!("/v1/jobs/{second}"), &["running"])
        .await;
    let (code, _) = server
        .post_json(&format!("/v1/jobs/{second}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_eq!(server.wait_job(&second).await["status"], "canceled");
}

/// Turns run in a session of their own, apart from the service's: where the kernel groups the
/// scheduling by session (autogroup), all turns together weigh as much as the service, which
/// so keeps its share of the CPU for requests while turns keep the cores busy.
#[tokio::test]
async fn turns_run_in_a_session_apart_from_the_services() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "grandchild"}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{rid}"), &["running"])
        .await;
    let pgid = common::wait_pgid(&server.workspace(&status)).await;
    let members = common::group_members(pgid);
    assert!(!members.is_empty(), "the turn's processes live");
    // After the command's name: state, parent, group, session.
    let session = |pid: i32| common::stat_fields(pid).map(|f| f[3].clone());
    let autogroup = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok();
    let service = server.pid();
    for pid in members {
        assert_ne!(session(pid), session(service), "process {pid} of the turn");
        if let (Some(turn), Some(own)) = (autogroup(pid), autogroup(service)) {
            assert_ne!(turn, own, "process {pid} of the turn schedules apart");
        }
    }
    let (code, _) = server
        .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_group_gone(pgid);
}

/// A cancel sent the moment a run shows `running` reaches the turn while its leader is still
/// setting it up. The first process of a new pid namespace drops a SIGTERM it neither blocks
/// nor handles, so the leader starts with its signals blocked: with a 30 s grace, a lost
/// SIGTERM would leave the turn running until the SIGKILL.
#[tokio::test]
async fn a_cancel_at_the_start_of_a_turn_stops_it_at_once() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[("SKILL_RUNNER_KILL_GRACE_SECONDS", "30")],
    );
    for n in 0..10 {
        let rid = server
            .create_job(json!({"skill_id": "probe", "parameter": {"mode": "sleep", "n": n}}))
            .await;
        loop {
            let (_, status) = server.get(&format!("/v1/jobs/{rid}")).await;
            if status["status"] == "running" {
                break;
            }
        }
        let asked = std::time::Instant::now();
        let (code, c) = server
            .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
            .await;
        assert_eq!((code, &c["status"]), (200, &json!("canceled")), "{c}");
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(15),
            "round {n}: the turn outlived its SIGTERM ({:?})",
            asked.elapsed()
        );
    }
}

#[tokio::test]
async fn cancel_while_queued_and_running_kills_the_whole_group() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[("SKILL_RUNNER_MAX_CONCURRENT", "1")],
    );
    let running = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "grandchild"}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{running}"), &["running"])
        .await;
    let queued = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    assert_eq!(
        server.get(&format!("/v1/jobs/{queued}")).await.1["status"],
        "queued"
    );

    let (code, c) = server
        .post_json(&format!("/v1/jobs/{queued}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_eq!(c["accepted"], true, "{c}");
    assert_eq!(c["status"], "canceled");

    let pgid = common::wait_pgid(&server.workspace(&status)).await;
    assert!(
        common::group_members(pgid).len() >= 3,
        "script, sh -c and sleeps are running"
    );
    let (code, c) = server
        .post_json(&format!("/v1/jobs/{running}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_eq!(c["accepted"], true, "{c}");
    assert_group_gone(pgid);
    for rid in [&running, &queued] {
        let s = server.wait_job(rid).await;
        assert_eq!(s["status"], "canceled", "{s}");
        assert_eq!(s["error"]["code"], "CANCELED_BY_USER");
    }
    let (code, c) = server
        .post_json(&format!("/v1/jobs/{running}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_eq!(c["accepted"], false, "finished runs are not canceled again");
    let (_, result) = server.get(&format!("/v1/jobs/{running}/result")).await;
    assert_eq!(result["result"]["status"], "canceled", "{result}");
    // The slot came back: a new job runs.
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "runtime_options": {"no_cache": true}}))
        .await;
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
}

#[tokio::test]
async fn hard_timeout_kills_the_group_and_server_death_takes_children_along() {
    let mut server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", "1"),
            ("SKILL_RUNNER_KILL_GRACE_SECONDS", "1"),
        ],
    );
    let (rid, pgid) = start_grandchild(&server).await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["error"]["code"], "TIMEOUT", "{status}");
    assert_group_gone(pgid);

    // Now a run whose server is SIGKILLed mid-run.
    let dirs = server.dirs.clone();
    server.kill();
    let mut server = TestServer::start_with(dirs, &[]);
    let (_, pgid) = start_grandchild(&server).await;
    assert!(!common::group_members(pgid).is_empty());
    server.kill();
    assert_group_gone(pgid);
}

/// Starts a probe run that keeps a grandchild: its request id and process group, once running.
async fn start_grandchild(server: &TestServer) -> (String, i32) {
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "grandchild"}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{rid}"), &["running"])
        .await;
    (rid, common::wait_pgid(&server.workspace(&status)).await)
}

/// The parent pid of `pid` (field 4 of `/proc/<pid>/stat`).
fn parent_of(pid: i32) -> i32 {
    common::stat_fields(pid).unwrap()[1].parse().unwrap()
}

#[tokio::test]
async fn a_killed_forkserver_ends_its_turns_and_the_next_turn_gets_a_new_one() {
    async fn running(server: &TestServer) -> (String, i32, i32) {
        let (rid, pgid) = start_grandchild(server).await;
        // The group's leader is the turn leader, forked by the forkserver, a child of the service.
        let forkserver = parent_of(pgid);
        assert_eq!(parent_of(forkserver), server.pid());
        (rid, pgid, forkserver)
    }
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let (rid, pgid, forkserver) = running(&server).await;
    let cmdline = std::fs::read(format!("/proc/{forkserver}/cmdline")).unwrap();
    assert!(String::from_utf8_lossy(&cmdline).contains("forkserver"));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(forkserver),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_group_gone(pgid);
    let ended = server.wait_job(&rid).await;
    assert_eq!(ended["status"], "failed", "{ended}");

    let (rid, pgid, second) = running(&server).await;
    assert_ne!(second, forkserver, "a new forkserver");
    let (code, _) = server
        .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
        .await;
    assert_eq!(code, 200);
    assert_eq!(server.wait_job(&rid).await["status"], "canceled");
    assert_group_gone(pgid);
}

#[tokio::test]
async fn cache_hits_bind_to_the_earlier_run_and_any_change_misses() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", Some(true)), probe_skill("plain", None)],
        &[],
    );
    let body = |n: i64| json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": n}, "input": {"text": "t"}});
    async fn run(server: &TestServer, body: Value, doc: &[u8]) -> (Value, Value) {
        let rid = server.create_job(body).await;
        let (code, up) = server.upload_inputs(&rid, vec![("doc", doc)]).await;
        assert_eq!(code, 200, "{up}");
        (up, server.wait_job(&rid).await)
    }
    let (up, first) = run(&server, body(1), b"one").await;
    assert_eq!(up["cache_hit"], false);
    assert_eq!(first["status"], "succeeded");
    let (up, hit) = run(&server, body(1), b"one").await;
    assert_eq!(up["cache_hit"], true, "{up}");
    assert_eq!(up["status"], "succeeded");
    assert_eq!(hit["run_id"], first["run_id"], "bound to the earlier run");
    assert_eq!(hit["cache_hit"], true);

    let (up, _) = run(&server, body(2), b"one").await;
    assert_eq!(up["cache_hit"], false, "parameter changed");
    let (up, _) = run(&server, body(1), b"two").await;
    assert_eq!(up["cache_hit"], false, "file bytes changed");
    let mut no_cache = body(1);
    no_cache["runtime_options"] = json!({"no_cache": true});
    let (up, _) = run(&server, no_cache, b"one").await;
    assert_eq!(up["cache_hit"], false, "no_cache skips the lookup");
    let script = server.dirs.skills.join("probe/run.sh");
    let mut text = std::fs::read_to_string(&script).unwrap();
    text.push_str("# changed\n");
    std::fs::write(&script, text).unwrap();
    let (up, changed) = run(&server, body(1), b"one").await;
    assert_eq!(up["cache_hit"], false, "a skill file changed");
    assert_eq!(changed["status"], "succeeded");

    // Without file inputs the hit is answered by the create itself.
    let plain = json!({"skill_id": "plain", "parameter": {"mode": "ok"}, "input": {"text": "p"}});
    let rid = server.create_job(plain.clone()).await;
    assert_eq!(server.wait_job(&rid).await["status"], "succeeded");
    let (code, created) = server.post_json("/v1/jobs", plain).await;
    assert_eq!(code, 200);
    assert_eq!(created["cache_hit"], true, "{created}");
    assert_eq!(created["status"], "succeeded");
    let (_, result) = server
        .get(&format!(
            "/v1/jobs/{}/result",
            created["request_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(result["result"]["data"]["summary"], "p");
}

#[tokio::test]
async fn the_queue_bound_is_real_and_drains() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
            ("SKILL_RUNNER_MAX_QUEUE_SIZE", "3"),
        ],
    );
    let job = |i: usize| json!({"skill_id": "probe", "parameter": {"mode": "sleep", "n": i}});
    let first = server.create_job(job(0)).await;
    server
        .wait_status(&format!("/v1/jobs/{first}"), &["running"])
        .await;
    let mut accepted = vec![first];
    for i in 1..=3 {
        accepted.push(server.create_job(job(i)).await);
    }
    let resp = server
        .client
        .post(server.url("/v1/jobs"))
        .json(&job(4))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429, "request N+2 is refused");
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body, json!({"detail": "Job queue is full"}));
    for rid in &accepted {
        let (code, _) = server
            .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
            .await;
        assert_eq!(code, 200);
    }
    // Every place came back: the whole bound is available again (the worker may still be
    // stopping the canceled run, so no more than the bound is asked for).
    for i in 5..8 {
        let (code, body) = server
            .post_json(
                "/v1/jobs",
                json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": i}}),
            )
            .await;
        assert_eq!(code, 200, "after draining: {body}");
    }
}

/// The slot is the turn's, not the bookkeeping's: with one slot, a run whose result cannot be
/// recorded yet (the store fails, the write is retried after a pause) does not hold up the
/// next run, which starts and ends meanwhile.
#[tokio::test]
async fn a_slot_is_free_once_the_turn_is_over() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
            // The first end fails; with the pauses between tries (0.1 s, 0.5 s, ...) the end of
            // the first run is recorded at least 0.1 s after its turn.
            ("SKILL_RUNNER_TEST_FAULTS", "store-finish*3"),
        ],
    );
    let first = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": 1}}))
        .await;
    let second = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok", "n": 2}}))
        .await;
    let status = |rid: String| {
        let server = &server;
        async move { server.get(&format!("/v1/jobs/{rid}")).await.1["status"].clone() }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut second_ended_first = false;
    loop {
        let (a, b) = (status(first.clone()).await, status(second.clone()).await);
        if b == "succeeded" && a == "running" {
            second_ended_first = true;
        }
        if a == "succeeded" && b == "succeeded" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "first {a}, second {b}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(
        second_ended_first,
        "the second run waited for the first run's end to be recorded"
    );
}

#[tokio::test]
async fn no_slot_leaks_after_hundreds_of_mixed_outcomes() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_MAX_CONCURRENT", "2"),
            ("SKILL_RUNNER_MAX_QUEUE_SIZE", "1000"),
            ("SKILL_RUNNER_ENGINE_HARD_TIMEOUT_SECONDS", "1"),
            ("SKILL_RUNNER_KILL_GRACE_SECONDS", "1"),
        ],
    );
    let modes = [
        "ok",
        "exit",
        "nojson",
        "error",
        "badschema",
        "noartifact",
        "cancel",
    ];
    let mut rids = Vec::new();
    for i in 0..300usize {
        let mode = if i % 100 == 99 {
            "sleep"
        } else {
            modes[i % modes.len()]
        };
        let run_mode = if mode == "cancel" { "sleep" } else { mode };
        let rid = server
            .create_job(json!({"skill_id": "probe", "parameter": {"mode": run_mode, "n": i}}))
            .await;
        if mode == "cancel" {
            let (code, _) = server
                .post_json(&format!("/v1/jobs/{rid}/cancel"), json!({}))
                .await;
            assert_eq!(code, 200);
        }
        rids.push((rid, mode));
    }
    let mut counts = std::collections::BTreeMap::new();
    for (rid, mode) in &rids {
        let status = server.wait_job(rid).await;
        let expected = match *mode {
            "ok" => "succeeded",
            "cancel" => "canceled",
            _ => "failed",
        };
        assert_eq!(status["status"], expected, "{mode}: {status}");
        *counts.entry(expected).or_insert(0) += 1;
    }
    eprintln!("outcomes: {counts:?}");
    // Both slots are free again: two long jobs run side by side.
    let a = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "sleep", "n": 1000}}))
        .await;
    let b = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "sleep", "n": 1001}}))
        .await;
    server
        .wait_status(&format!("/v1/jobs/{a}"), &["running"])
        .await;
    server
        .wait_status(&format!("/v1/jobs/{b}"), &["running"])
        .await;
}

fn temp_form(package: Option<Vec<u8>>, inputs: Option<Vec<u8>>) -> reqwest::multipart::Form {
    let mut form = reqwest::multipart::Form::new().text("note", "unrelated fields are ignored");
    if let Some(p) = package {
        form = form.part(
            "skill_package",
            reqwest::multipart::Part::bytes(p).file_name("skill.zip"),
        );
    }
    if let Some(i) = inputs {
        form = form.part(
            "file",
            reqwest::multipart::Part::bytes(i).file_name("inputs.zip"),
        );
    }
    form
}

/// A temporary run the way clients of the reference's v0.7 make one: `POST /v1/jobs` with
/// `skill_source: "temp_upload"` (inline input allowed, checked against the package), then the
/// package and the inputs with the upload; read through `/v1/jobs`. The old routes still
/// answer, marked deprecated, and see only temporary runs.
#[tokio::test]
async fn a_temporary_run_goes_through_the_jobs_routes_as_v0_7_clients_send_it() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let package = probe_skill("tmp-probe", Some(true)).runner(json!({"version": null}));
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_source": "temp_upload", "engine": "script",
                   "input": {"text": "inline"}, "parameter": {"mode": "ok"}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued", "{created}");
    let rid = created["request_id"].as_str().unwrap().to_owned();
    let inputs = common::build_zip(vec![("doc".into(), b"v0.7 doc".to_vec())]);
    let (code, up) = server
        .post_form(
            &format!("/v1/jobs/{rid}/upload"),
            temp_form(Some(package.zip()), Some(inputs)),
        )
        .await;
    assert_eq!(code, 200, "{up}");
    assert_eq!(
        (&up["status"], &up["extracted_files"]),
        (&json!("queued"), &json!(["doc"]))
    );
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(result["result"]["status"], "success", "{result}");
    let (code, _, body) = server
        .get_bytes(&format!("/v1/jobs/{rid}/artifacts/artifacts/report.md"))
        .await;
    assert_eq!((code, body.as_slice()), (200, b"v0.7 doc".as_slice()));
    let (code, _) = server.get("/v1/skills/tmp-probe").await;
    assert_eq!(code, 404, "never installed");

    // An inline input the package's schema refuses fails the upload, naming the input.
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_source": "temp_upload", "engine": "script",
                   "input": {"text": 42}, "parameter": {"mode": "ok"}}),
        )
        .await;
    let bad = created["request_id"].as_str().unwrap();
    let (code, refused) = server
        .post_form(
            &format!("/v1/jobs/{bad}/upload"),
            temp_form(Some(package.zip()), None),
        )
        .await;
    assert_eq!(code, 400, "{refused}");
    assert!(refused.to_string().contains("text"), "{refused}");

    // The skill's source decides whether a skill id belongs.
    for (body, field) in [
        (
            json!({"skill_source": "temp_upload", "skill_id": "probe"}),
            "skill_id",
        ),
        (json!({"engine": "script"}), "skill_id"),
        (json!({"skill_source": "upload", "skill_id": "probe"}), ""),
    ] {
        let (code, refused) = server.post_json("/v1/jobs", body.clone()).await;
        assert_eq!(code, 422, "{body}: {refused}");
        assert!(refused.to_string().contains(field), "{body}: {refused}");
    }

    // The old routes answer for the same run, saying they are deprecated; an installed
    // skill's job is not theirs; the jobs routes say nothing of the kind.
    let old = server
        .client
        .get(server.url(&format!("/v1/temp-skill-runs/{rid}")))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 200);
    assert_eq!(old.headers()["deprecation"], "@1772755200");
    assert_eq!(old.headers()["sunset"], "Wed, 30 Jun 2027 00:00:00 GMT");
    assert_eq!(
        old.headers()["link"],
        "</v1/jobs>; rel=\"successor-version\""
    );
    let job = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let (code, _) = server.get(&format!("/v1/temp-skill-runs/{job}")).await;
    assert_eq!(code, 404, "the old routes see temporary runs only");
    let current = server
        .client
        .get(server.url(&format!("/v1/jobs/{job}")))
        .send()
        .await
        .unwrap();
    assert!(current.headers().get("deprecation").is_none());
}

#[tokio::test]
async fn temporary_skill_runs_run_once_and_leave_nothing() {
    let server = TestServer::with_skills(&[], &[("TEMP_SKILL_PACKAGE_MAX_BYTES", "20000")]);
    let package = probe_skill("tmp-probe", Some(true)).runner(json!({"version": null}));
    let create = |options: Value| {
        server.post_json(
            "/v1/temp-skill-runs",
            json!({"engine": "script", "parameter": {"mode": "ok"}, "runtime_options": options}),
        )
    };
    let (code, created) = create(json!({})).await;
    assert_eq!(code, 200, "{created}");
    assert_eq!(created["status"], "queued", "waiting for its upload");
    let rid = created["request_id"].as_str().unwrap().to_owned();
    let inputs = common::build_zip(vec![("doc".into(), b"temp doc".to_vec())]);
    let upload_path = format!("/v1/temp-skill-runs/{rid}/upload");
    let (code, up) = server
        .post_form(
            &upload_path,
            temp_form(Some(package.zip()), Some(inputs.clone())),
        )
        .await;
    assert_eq!(code, 200, "{up}");
    assert_eq!(up["extracted_files"], json!(["doc"]));
    let status = server
        .wait_status(
            &format!("/v1/temp-skill-runs/{rid}"),
            &["succeeded", "failed", "canceled"],
        )
        .await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server
        .get(&format!("/v1/temp-skill-runs/{rid}/result"))
        .await;
    assert_eq!(result["result"]["status"], "success");
    let (code, _, body) = server
        .get_bytes(&format!(
            "/v1/temp-skill-runs/{rid}/artifacts/artifacts/report.md"
        ))
        .await;
    assert_eq!((code, body.as_slice()), (200, b"temp doc".as_slice()));
    // Deleted by whoever ended the run, just after the status turned terminal.
    let temp = server.dirs.data.join("temp_skill_runs").join(&rid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while temp.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!temp.exists(), "temp skill deleted");
    // A temporary run is a job whose skill came with its upload: the jobs routes see it too.
    let (code, seen) = server.get(&format!("/v1/jobs/{rid}")).await;
    assert_eq!(
        (code, &seen["status"]),
        (200, &json!("succeeded")),
        "{seen}"
    );
    for family in ["/v1/temp-skill-runs", "/v1/jobs"] {
        let (code, chat) = server.get(&format!("{family}/{rid}/chat/history")).await;
        assert_eq!(code, 200, "{chat}");
        assert_eq!(
            chat["events"].as_array().unwrap().last().unwrap()["text"],
            "The run succeeded."
        );
    }
    let events = server
        .events(&format!("/v1/temp-skill-runs/{rid}/events"), None)
        .await
        .collect()
        .await;
    assert_eq!(events.last().unwrap().data["reason"], "terminal");
    // A stream opened after the end still gives the final status right before `end`.
    let before_end = &events[events.len() - 2];
    assert_eq!(
        (before_end.name.as_str(), &before_end.data["status"]),
        ("status", &json!("succeeded"))
    );
    let stdout = std::fs::read(server.run_dir(&status).join("logs/stdout.txt")).unwrap();
    assert_eq!(common::reassemble(&events, "stdout", 0), stdout);
    let (code, state) = server.get(&format!("/v1/management/runs/{rid}")).await;
    assert_eq!(
        (code, &state["status"]),
        (200, &json!("succeeded")),
        "management sees temporary runs"
    );
    let (code, _) = server.get("/v1/skills/tmp-probe").await;
    assert_eq!(code, 404, "never registered");
    let (code, again) = server
        .post_form(
            &upload_path,
            temp_form(Some(package.zip()), Some(inputs.clone())),
        )
        .await;
    assert_eq!(code, 409, "{again}");

    // Never cached: the same run again executes again.
    let (_, created) = create(json!({"debug_keep_temp": true})).await;
    let kept = created["request_id"].as_str().unwrap().to_owned();
    let (code, up) = server
        .post_form(
            &format!("/v1/temp-skill-runs/{kept}/upload"),
            temp_form(Some(package.zip()), Some(inputs)),
        )
        .await;
    assert_eq!((code, &up["cache_hit"]), (200, &json!(false)), "{up}");
    server
        .wait_status(&format!("/v1/temp-skill-runs/{kept}"), &["succeeded"])
        .await;
    assert!(
        server
            .dirs
            .data
            .join("temp_skill_runs")
            .join(&kept)
            .join("skill/tmp-probe/run.sh")
            .exists()
    );

    // An invalid package: 400 and the request ends failed.
    let (_, created) = create(json!({})).await;
    let bad = created["request_id"].as_str().unwrap().to_owned();
    let broken = probe_skill("tmp-probe", None).file("SKILL.md", "---\nname: other\n---\n");
    let (code, body) = server
        .post_form(
            &format!("/v1/temp-skill-runs/{bad}/upload"),
            temp_form(Some(broken.zip()), None),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("identity mismatch"),
        "{body}"
    );
    let status = server.get(&format!("/v1/temp-skill-runs/{bad}")).await.1;
    assert_eq!(status["status"], "failed", "{status}");

    // A package that refuses the request: the request fails with the human message and the
    // code kept apart.
    let (_, created) = create(json!({"execution_mode": "interactive"})).await;
    let refused = created["request_id"].as_str().unwrap().to_owned();
    let (code, _) = server
        .post_form(
            &format!("/v1/temp-skill-runs/{refused}/upload"),
            temp_form(Some(package.zip()), None),
        )
        .await;
    assert_eq!(code, 400);
    let status = server
        .get(&format!("/v1/temp-skill-runs/{refused}"))
        .await
        .1;
    assert_eq!(
        status["error"],
        json!({"code": "SKILL_EXECUTION_MODE_UNSUPPORTED",
               "message": "Skill 'tmp-probe' does not support execution_mode 'interactive'",
               "hint": null}),
        "{status}"
    );

    // A parameter missing a required field: accepted, and the run fails naming it.
    let (_, created) = server
        .post_json(
            "/v1/temp-skill-runs",
            json!({"engine": "script", "parameter": {}}),
        )
        .await;
    let unparameterised = created["request_id"].as_str().unwrap().to_owned();
    let doc = common::build_zip(vec![("doc".into(), b"d".to_vec())]);
    let (code, up) = server
        .post_form(
            &format!("/v1/temp-skill-runs/{unparameterised}/upload"),
            temp_form(Some(package.zip()), Some(doc)),
        )
        .await;
    assert_eq!((code, &up["status"]), (200, &json!("queued")), "{up}");
    let status = server
        .wait_status(
            &format!("/v1/temp-skill-runs/{unparameterised}"),
            &["succeeded", "failed"],
        )
        .await;
    let message = status["error"]["message"].as_str().unwrap_or_default();
    assert!(
        status["status"] == "failed"
            && message.starts_with("Input validation failed")
            && message.contains("mode"),
        "{status}"
    );

    // Oversize: 413 with the limit named; the request can still take a proper package.
    let (_, created) = create(json!({})).await;
    let big = created["request_id"].as_str().unwrap().to_owned();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..60_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    let oversize = probe_skill("tmp-probe", None).file("noise.bin", noise);
    let (code, body) = server
        .post_form(
            &format!("/v1/temp-skill-runs/{big}/upload"),
            temp_form(Some(oversize.zip()), None),
        )
        .await;
    assert_eq!(code, 413, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("20000"), "{body}");
    let (code, body) = server
        .post_form(
            &format!("/v1/temp-skill-runs/{big}/upload"),
            temp_form(None, None),
        )
        .await;
    assert_eq!(code, 422, "package is required: {body}");
}

#[tokio::test]
async fn cleanup_endpoint_and_retention_sweep_delete_finished_runs() {
    let server = TestServer::with_skills(
        &[probe_skill("probe", None)],
        &[
            ("SKILL_RUNNER_CLEANUP_INTERVAL_SECONDS", "1"),
            ("SKILL_RUNNER_FAILED_RUN_RETENTION_SECONDS", "1"),
        ],
    );
    let failed = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "exit"}}))
        .await;
    let ok = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let failed_status = server.wait_job(&failed).await;
    let ok_status = server.wait_job(&ok).await;
    assert!(server.run_dir(&failed_status).exists());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    // The sweep forgets the run first, then removes its folder.
    while server.get(&format!("/v1/jobs/{failed}")).await.0 != 404
        || server.run_dir(&failed_status).exists()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "failed run never swept"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        server.get(&format!("/v1/jobs/{ok}")).await.0,
        200,
        "succeeded runs are kept longer"
    );

    let hit = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let (code, counts) = server.post_json("/v1/jobs/cleanup", json!({})).await;
    assert_eq!(code, 200);
    assert_eq!(
        counts,
        json!({"runs_deleted": 1, "requests_deleted": 2, "cache_entries_deleted": 1}),
        "the run, both requests bound to it ({hit}), its cache entry"
    );
    assert!(!server.run_dir(&ok_status).exists());
    assert_eq!(server.get(&format!("/v1/jobs/{ok}")).await.0, 404);
}

/// A JSON body over the limit is 413 and one not declared JSON is 415, as HTTP says; a body
/// that is not valid JSON stays the reference's 422.
#[tokio::test]
async fn oversized_and_non_json_bodies_get_413_and_415() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    // A new connection each time: the server closes one whose body it refused unread.
    let _ = common::client();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let big = format!(
        "{{\"skill_id\": \"probe\", \"input\": {{\"text\": \"{}\"}}}}",
        "x".repeat(3 * 1024 * 1024)
    );
    for path in ["/v1/jobs", "/v1/temp-skill-runs"] {
        let send = |content_type: &'static str, body: String| {
            client
                .post(server.url(path))
                .header("content-type", content_type)
                .body(body)
                .send()
        };
        let answer = send("application/json", big.clone()).await.unwrap();
        assert_eq!(answer.status().as_u16(), 413, "{path}");
        let body: Value = answer.json().await.unwrap();
        assert!(body["detail"].as_str().is_some(), "{body}");
        let answer = send("text/plain", "{\"skill_id\": \"probe\"}".into())
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 415, "{path}");
        let body: Value = answer.json().await.unwrap();
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{body}"
        );
        let answer = send("application/json", "{not json".into()).await.unwrap();
        assert_eq!(answer.status().as_u16(), 422, "{path}");
    }
}

/// `/logs` returns each log's last MiB and says it cut it; a bundle of a large artifact is
/// complete and its manifest right (it is streamed into the zip, not read whole).
#[tokio::test]
async fn logs_are_cut_to_their_end_and_bundles_take_large_artifacts() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "big"}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (code, logs) = server.get(&format!("/v1/jobs/{rid}/logs")).await;
    assert_eq!(code, 200);
    let stdout = logs["stdout"].as_str().unwrap();
    assert_eq!(stdout.len(), 1024 * 1024);
    assert!(stdout.ends_with("{\"summary\":\"big\",\"turn\":1}\n"));
    assert!(stdout.contains("\na line of output\n"));
    assert_eq!(
        logs["truncated"],
        json!({"prompt": false, "stdout": true, "stderr": false})
    );
    assert_eq!(logs["prompt"], "", "script skills have no prompt");

    let (code, _, bytes) = server.get_bytes(&format!("/v1/jobs/{rid}/bundle")).await;
    assert_eq!(code, 200);
    let files = unzip(&bytes);
    assert_eq!(files["artifacts/report.md"].len(), 25_165_824);
    check_manifest(&files, "bundle/manifest.json");
}

/// A skill that prints `API_TOKEN` on both logs and in its answer, with what it knows of it.
fn token_printer() -> common::Package {
    const SCRIPT: &str = r#"import hashlib, json, os, sys, time
req = json.load(sys.stdin)
token = os.environ.get("API_TOKEN", "")
# Written in pieces, so the secret arrives cut across the service's reads.
for i in range(0, len(token), 5):
    sys.stdout.write(token[i:i + 5]); sys.stdout.flush(); time.sleep(0.01)
print(f"\nthe token is {token}", flush=True)
sys.stderr.write(f"stderr has {token}\n"); sys.stderr.flush()
time.sleep(req["parameter"].get("pause", 0))
print(json.dumps({"summary": f"token {token}", "length": len(token),
                  "sha256": hashlib.sha256(token.encode()).hexdigest(),
                  "other": os.environ.get("OTHER"), "home": os.environ.get("HOME")}))
"#;
    common::skill_package("token-printer", "1.0.0")
        .runner(json!({"entrypoint": {"script": ["python3", "run.py"]}}))
        .file("run.py", SCRIPT)
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "properties": {"pause": {"type": "number"}}}).to_string(),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary"]}).to_string(),
        )
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter(|e| {
            std::fs::read(e.path())
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        })
        .map(|e| e.path().to_owned())
        .collect()
}

/// `runtime_options.env` reaches the turn and nothing else: its values are kept apart (0600)
/// only while the run lives, are masked in both logs (byte for byte) and so in the answer, and
/// appear in no response, event, bundle, service log line or file of the data dir.
#[tokio::test]
async fn runtime_env_reaches_the_turn_and_never_comes_back_out() {
    const SENTINEL: &str = "sk-SENTINEL-7f3a9c2e-wärme";
    let server = TestServer::with_skills(&[token_printer()], &[]);
    let body = json!({"skill_id": "token-printer", "parameter": {"pause": 1.0},
        "runtime_options": {"env": {"API_TOKEN": SENTINEL, "OTHER": "plain", "HOME2": "x"},
                            "preamble_prompt": "Answer briefly."}});
    let rid = server.create_job(body.clone()).await;
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["running"])
        .await;
    let kept = server.dirs.data.join(format!("run_secrets/{rid}.json"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&kept), 0o600, "kept for the service's user only");
    assert_eq!(mode(kept.parent().unwrap()), 0o700);
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert!(!kept.exists(), "gone once the run ended");

    // The turn had the values, and the service's own HOME.
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    let data = &result["result"]["data"];
    assert_eq!(data["length"], SENTINEL.chars().count());
    assert_eq!(data["sha256"], hex(&Sha256::digest(SENTINEL.as_bytes())));
    assert_eq!(
        data["other"], "*****",
        "every value is a secret: 'plain' came and was masked"
    );
    assert_ne!(data["home"], Value::Null);
    let stars = "*".repeat(SENTINEL.len());
    // Its answer spelled it as JSON does (`w\u00e4rme`): masked as spelled.
    let summary = data["summary"].as_str().unwrap();
    let masked = summary.strip_prefix("token ").unwrap();
    assert!(
        !masked.is_empty() && masked.chars().all(|c| c == '*'),
        "{summary}"
    );
    // Masked byte for byte: the log keeps its length, the offsets stay true.
    let stdout = std::fs::read_to_string(server.run_dir(&status).join("logs/stdout.txt")).unwrap();
    assert!(
        stdout.starts_with(&format!("{stars}\nthe token is {stars}\n")),
        "{stdout}"
    );

    // Nothing the service answers, streams or bundles holds it.
    let mut seen = Vec::new();
    for path in [
        format!("/v1/jobs/{rid}"),
        format!("/v1/jobs/{rid}/result"),
        format!("/v1/jobs/{rid}/logs"),
        format!("/v1/jobs/{rid}/logs/range?stream=stdout&byte_from=0"),
        format!("/v1/jobs/{rid}/logs/range?stream=stderr&byte_from=0"),
        format!("/v1/jobs/{rid}/chat/history"),
        format!("/v1/jobs/{rid}/events/history"),
        format!("/v1/jobs/{rid}/artifacts"),
        format!("/v1/management/runs/{rid}"),
        format!("/v1/management/runs/{rid}/files"),
        format!("/v1/management/runs/{rid}/file?path=input.json"),
        "/v1/management/runs".to_owned(),
    ] {
        let (code, _, bytes) = server.get_bytes(&path).await;
        assert_eq!(code, 200, "{path}");
        seen.push((path, bytes));
    }
    for (path, stream) in [
        ("seed events", format!("/v1/jobs/{rid}/events")),
        ("fcmp events", format!("/v1/jobs/{rid}/events?cursor=0")),
        ("chat", format!("/v1/jobs/{rid}/chat")),
    ] {
        let events = server.events(&stream, None).await.collect().await;
        let text = format!("{events:?}");
        assert!(
            text.contains("the token is"),
            "{path} carries the output: {text}"
        );
        seen.push((path.to_owned(), text.into_bytes()));
    }
    for bundle in ["bundle", "bundle/debug"] {
        let (code, _, zip) = server.get_bytes(&format!("/v1/jobs/{rid}/{bundle}")).await;
        assert_eq!(code, 200);
        for (name, bytes) in unzip(&zip) {
            seen.push((format!("{bundle}: {name}"), bytes));
        }
    }
    for (what, bytes) in &seen {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains(SENTINEL), "{what} holds the secret: {text}");
        assert!(
            !text.contains("Answer briefly"),
            "{what} holds the preamble: {text}"
        );
    }
    let (_, shown) = server.get(&format!("/v1/jobs/{rid}")).await;
    let (_, run) = server.get(&format!("/v1/management/runs/{rid}")).await;
    assert!(
        !format!("{shown}{run}").contains("plain"),
        "no value shown at all"
    );
    assert!(
        !server.log().contains(SENTINEL),
        "the service's log holds it"
    );
    assert_eq!(
        files_holding(&server.dirs.data, SENTINEL.as_bytes()),
        Vec::<std::path::PathBuf>::new(),
        "no file of the data dir (the store, the run folder) holds it"
    );

    // A run given secrets skips the cache both ways.
    let again = server.create_job(body).await;
    let (_, created) = server.get(&format!("/v1/jobs/{again}")).await;
    assert_eq!(created["cache_hit"], false);
    let plain = server
        .create_job(json!({"skill_id": "token-printer", "parameter": {"pause": 1.0}}))
        .await;
    let (_, plain) = server.get(&format!("/v1/jobs/{plain}")).await;
    assert_eq!(
        plain["cache_hit"], false,
        "nothing was cached from the run with secrets"
    );
}

/// Bad `env`, `preamble_prompt` and `hard_timeout_seconds` are refused at create, naming the
/// key, and change nothing (a timeout above the service's is taken: see below).
#[tokio::test]
async fn runtime_secrets_and_timeouts_are_checked_at_create() {
    let server = TestServer::with_skills(&[token_printer()], &[]);
    for (options, says) in [
        (
            json!({"env": {"PATH": "/evil"}}),
            "runtime_options.env.PATH",
        ),
        (
            json!({"env": {"api_token": "x"}}),
            "name 'api_token' is not allowed",
        ),
        (
            json!({"env": {"A": {"redacted": true}}}),
            "runtime_options.env.A must be a string",
        ),
        (
            json!({"preamble_prompt": 3}),
            "preamble_prompt must be a string",
        ),
        (
            json!({"hard_timeout_seconds": 0}),
            "hard_timeout_seconds must be a positive integer",
        ),
    ] {
        let (code, body) = server
            .post_json(
                "/v1/jobs",
                json!({"skill_id": "token-printer", "runtime_options": options}),
            )
            .await;
        assert_eq!(code, 400, "{options}: {body}");
        assert!(body.to_string().contains(says), "{options}: {body}");
    }
    let (_, runs) = server.get("/v1/management/runs").await;
    assert_eq!(runs["runs"], json!([]), "nothing was recorded");
    let secrets = server.dirs.data.join("run_secrets");
    assert!(!secrets.exists() || std::fs::read_dir(&secrets).unwrap().next().is_none());
}

/// `hard_timeout_seconds` shortens the turn's timeout; `interactive_auto_reply` and
/// `interactive_reply_timeout_sec` are the later names of the reply options.
#[tokio::test]
async fn a_run_may_ask_for_a_shorter_hard_timeout() {
    let server = TestServer::with_skills(&[token_printer()], &[]);
    let rid = server
        .create_job(
            json!({"skill_id": "token-printer", "parameter": {"pause": 30},
                           "runtime_options": {"hard_timeout_seconds": 1, "no_cache": true}}),
        )
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["error"]["code"], "TIMEOUT");
    assert!(
        status["error"]["message"]
            .as_str()
            .unwrap()
            .contains("after 1 s"),
        "{status}"
    );
    // A longer one than the service's is taken, as the reference takes any, and clamped with
    // a warning.
    let rid = server
        .create_job(json!({"skill_id": "token-printer", "runtime_options": {"hard_timeout_seconds": 999_999, "no_cache": true}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let warnings = status["warnings"].to_string();
    assert!(
        warnings.contains("HARD_TIMEOUT_CLAMPED: runtime_options.hard_timeout_seconds is 999999"),
        "{status}"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A skill that carries on from its workspace: it reads `notes.txt` (what earlier runs noted),
/// appends its `text`, writes `artifacts/out.txt`, and reads its file input `doc` (required).
fn chain_skill() -> common::Package {
    const SCRIPT: &str = r#"import json, os, sys
req = json.load(sys.stdin)
text = req["parameter"]["text"]
notes = open("notes.txt").read() if os.path.exists("notes.txt") else ""
with open("notes.txt", "a") as f:
    f.write(text + "\n")
os.makedirs("artifacts", exist_ok=True)
open("artifacts/out.txt", "w").write(f"out of {text}")
doc = open(req["input"]["doc"]).read()
print(json.dumps({"summary": "ok", "before": notes, "doc": doc}))
"#;
    common::skill_package("chain", "1.0.0")
        .runner(json!({"entrypoint": {"script": ["python3", "run.py"]}}))
        .file("run.py", SCRIPT)
        .file(
            "assets/input.schema.json",
            json!({"type": "object", "required": ["doc"],
                   "properties": {"doc": {"type": "string", "x-input-source": "file"}}})
            .to_string(),
        )
        .file(
            "assets/parameter.schema.json",
            json!({"type": "object", "required": ["text"],
                   "properties": {"text": {"type": "string"}}})
            .to_string(),
        )
        .file(
            "assets/output.schema.json",
            json!({"type": "object", "required": ["summary"]}).to_string(),
        )
}

/// A later job starts from a copy of an earlier run's workspace, and a file an earlier run
/// wrote becomes its file input without an upload; the source's workspace stays as it was.
#[tokio::test]
async fn a_later_job_starts_from_an_earlier_runs_workspace() {
    let server = TestServer::with_skills(&[chain_skill()], &[]);
    // The first run gets its document by upload.
    let (code, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "chain", "parameter": {"text": "one"}}),
        )
        .await;
    assert_eq!(code, 200, "{created}");
    let first = created["request_id"].as_str().unwrap().to_owned();
    let (code, uploaded) = server
        .upload_inputs(&first, vec![("doc", b"the document".as_slice())])
        .await;
    assert_eq!(code, 200, "{uploaded}");
    let status = server.wait_job(&first).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let first_workspace = server.workspace(&status);

    // The second carries on: the earlier notes are there, and its `doc` is the first run's
    // artifact, bound instead of uploaded.
    let reuse = |request_id: &str, bindings: Value| {
        json!({"skill_id": "chain", "parameter": {"text": "two"},
               "input": {"doc": "doc"},
               "runtime_options": {"workspace": {"mode": "reuse", "request_id": request_id,
                                                 "file_bindings": bindings}}})
    };
    let bind = |source: &str, path: &str| {
        json!([{"input_key": "doc", "source_request_id": source, "source_path": path,
                "target_path": "doc"}])
    };
    let second = server
        .create_job(reuse(&first, bind(&first, "artifacts/out.txt")))
        .await;
    let status = server.wait_job(&second).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{second}/result")).await;
    let data = &result["result"]["data"];
    assert_eq!(data["before"], "one\n", "{result}");
    assert_eq!(data["doc"], "out of one");
    let notes =
        |workspace: &std::path::Path| std::fs::read_to_string(workspace.join("notes.txt")).unwrap();
    assert_eq!(notes(&server.workspace(&status)), "one\ntwo\n");
    assert_eq!(
        notes(&first_workspace),
        "one\n",
        "the source is left as it was"
    );
    // The chain goes on from the second, binding a file of the first.
    let third = server
        .create_job(reuse(&second, bind(&first, "uploads/doc")))
        .await;
    let status = server.wait_job(&third).await;
    let (_, result) = server.get(&format!("/v1/jobs/{third}/result")).await;
    assert_eq!(result["result"]["data"]["before"], "one\ntwo\n", "{status}");
    assert_eq!(result["result"]["data"]["doc"], "the document");
    assert_eq!(status["cache_hit"], false);

    // Refusals name what is wrong and record nothing.
    let (_, failed) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "chain", "parameter": {"text": "x"}}),
        )
        .await;
    let waiting = failed["request_id"].as_str().unwrap().to_owned();
    for (body, code, says) in [
        (
            reuse("nope", json!([])),
            404,
            "Workspace source request 'nope' not found",
        ),
        (reuse(&waiting, json!([])), 409, "has not succeeded"),
        (
            reuse(&first, bind(&first, "artifacts/missing.txt")),
            400,
            "has no plain file 'artifacts/missing.txt'",
        ),
        (
            reuse(&first, bind(&first, "../../etc/passwd")),
            400,
            "must be a relative path",
        ),
        (
            reuse(
                &first,
                json!([{"input_key": "text", "source_request_id": first,
                                   "source_path": "notes.txt", "target_path": "text"}]),
            ),
            400,
            "'text' is not a file input",
        ),
    ] {
        let (got, answer) = server.post_json("/v1/jobs", body).await;
        assert_eq!(got, code, "{answer}");
        assert!(answer.to_string().contains(says), "{answer}");
    }
    // A reused workspace whose binding does not cover `doc` still waits for its upload.
    let (_, waits) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "chain", "parameter": {"text": "w"},
                   "runtime_options": {"workspace": {"mode": "reuse", "request_id": first}}}),
        )
        .await;
    assert_eq!(waits["status"], "queued", "{waits}");
}

/// A run's files through the jobs routes (tree, preview, download), as v0.7 clients read them,
/// and the client's address kept with the request.
#[tokio::test]
async fn a_runs_files_and_its_clients_address() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let rid = server
        .create_job(
            json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "input": {"text": "hi"}}),
        )
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["client_address"], "127.0.0.1");
    let (_, run) = server.get(&format!("/v1/management/runs/{rid}")).await;
    assert_eq!(run["client_address"], "127.0.0.1");
    let (_, seen) = server.get("/v1/runtime/network/client-address").await;
    assert_eq!(seen, json!({"client_ip": "127.0.0.1"}));

    let (code, files) = server.get(&format!("/v1/jobs/{rid}/files")).await;
    assert_eq!(code, 200, "{files}");
    let paths: Vec<&str> = files["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["rel_path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"logs/stdout.txt"), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.starts_with("home")),
        "the run's home is not shown: {paths:?}"
    );
    let (_, preview) = server
        .get(&format!("/v1/jobs/{rid}/file?path=logs/stdout.txt"))
        .await;
    assert_eq!(preview["preview"]["mode"], "text", "{preview}");
    let (code, headers, bytes) = server
        .get_bytes(&format!(
            "/v1/jobs/{rid}/file?path=logs/stdout.txt&download=true"
        ))
        .await;
    assert_eq!(code, 200);
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("stdout.txt")
    );
    assert_eq!(
        bytes,
        std::fs::read(server.run_dir(&status).join("logs/stdout.txt")).unwrap()
    );
    for (path, code) in [("../x", 400), ("home/.bashrc", 404), ("logs/nope", 404)] {
        let (got, _, _) = server
            .get_bytes(&format!("/v1/jobs/{rid}/file?path={path}&download=true"))
            .await;
        assert_eq!(got, code, "{path}");
    }
}
