//! The service's own surface, tried as a hostile user would: special files and huge files left
//! in a run folder, a flood of output. Every request must get a bounded, prompt answer, and the
//! service must keep answering its health check.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{Value, json};

/// Leaves what `parameter.mode` says in its artifacts, or floods its stdout.
const LEAVER: &str = r#"
import json, os, sys
p = json.load(sys.stdin)["parameter"]
mode = p["mode"]
os.makedirs("artifacts", exist_ok=True)
if mode == "fifo":
    os.mkfifo("artifacts/pipe")
    with open("artifacts/ok.txt", "w") as f:
        f.write("fine")
elif mode == "sparse":
    with open("artifacts/big.bin", "wb") as f:
        f.truncate(p["bytes"])
    with open("artifacts/ok.txt", "w") as f:
        f.write("fine")
elif mode == "flood":
    chunk = "x" * 65535 + "\n"
    for _ in range(p["mib"] * 16):
        sys.stdout.write(chunk)
print(json.dumps({"observed": {"mode": mode}}))
"#;

fn server(env: &[(&str, &str)]) -> TestServer {
    TestServer::with_skills(&[common::observer_skill("leaver", LEAVER, &["mode"])], env)
}

async fn finished(server: &TestServer, parameter: Value) -> (String, Value) {
    let rid = server
        .create_job(json!({"skill_id": "leaver", "parameter": parameter}))
        .await;
    let status = server.wait_job(&rid).await;
    (rid, status)
}

/// Pings the service every 20 ms while `work` runs; returns the slowest answer.
async fn slowest_ping_during<F: std::future::Future>(server: &TestServer, work: F) -> Duration {
    let client = common::client();
    let ping = server.url("/v1/system/ping");
    let done = tokio_util::sync::CancellationToken::new();
    let stop = done.clone();
    let pinger = tokio::spawn(async move {
        let mut slowest = Duration::ZERO;
        while !stop.is_cancelled() {
            let t0 = Instant::now();
            let answer = tokio::time::timeout(Duration::from_secs(10), client.get(&ping).send())
                .await
                .expect("ping answers")
                .unwrap();
            assert_eq!(answer.status(), 204);
            slowest = slowest.max(t0.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slowest
    });
    work.await;
    done.cancel();
    pinger.await.unwrap()
}

#[tokio::test]
async fn a_fifo_in_a_run_folder_blocks_nothing() {
    let server = server(&[]);
    let (rid, status) = finished(&server, json!({"mode": "fifo"})).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, listed) = server.get(&format!("/v1/jobs/{rid}/artifacts")).await;
    assert_eq!(listed["artifacts"], json!(["artifacts/ok.txt"]), "{listed}");

    let client = common::client();
    let paths = [
        format!("/v1/jobs/{rid}/artifacts/artifacts/pipe"),
        format!("/v1/management/runs/{rid}/file?path=workspace/artifacts/pipe"),
    ];
    let flood = async {
        let requests = (0..600).map(|i| {
            let url = server.url(&paths[i % 2]);
            let client = client.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(30), client.get(&url).send())
                    .await
                    .expect("answered")
                    .unwrap()
                    .status()
                    .as_u16()
            }
        });
        let codes = futures::future::join_all(requests).await;
        assert!(codes.iter().all(|&c| c == 404), "{codes:?}");
    };
    let slowest = slowest_ping_during(&server, flood).await;
    // Answered, not starved: a blocked reader would hold a thread for good. (How fast, on a
    // release build, is the benchmark's soak figure; this debug build shares two cores with
    // the 600 requests.)
    eprintln!("slowest ping under 600 FIFO requests: {slowest:?}");
    assert!(slowest < Duration::from_secs(5), "{slowest:?}");
    // The bundle leaves the FIFO out and holds the file.
    let (code, _, bytes) = server.get_bytes(&format!("/v1/jobs/{rid}/bundle")).await;
    assert_eq!(code, 200);
    let files = common::unzip(&bytes);
    assert!(files.contains_key("artifacts/ok.txt"), "{:?}", files.keys());
    assert!(
        !files.keys().any(|n| n.ends_with("pipe")),
        "{:?}",
        files.keys()
    );
}

#[tokio::test]
async fn a_huge_artifact_is_neither_served_nor_bundled() {
    let server = server(&[
        ("SKILL_RUNNER_RUN_FILE_MB", "4096"),
        ("SKILL_RUNNER_SERVE_MAX_MB", "64"),
    ]);
    let (rid, status) = finished(&server, json!({"mode": "sparse", "bytes": 3u64 << 30})).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (code, body) = server
        .get(&format!("/v1/jobs/{rid}/artifacts/artifacts/big.bin"))
        .await;
    assert_eq!(code, 413, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("3221225472 bytes") && detail.contains("SKILL_RUNNER_SERVE_MAX_MB"),
        "{detail}"
    );
    let (code, _, bytes) = server.get_bytes(&format!("/v1/jobs/{rid}/bundle")).await;
    assert_eq!(code, 200);
    assert!(bytes.len() < 1 << 20, "the bundle is {} bytes", bytes.len());
    let manifest: Value =
        serde_json::from_slice(&common::unzip(&bytes)["bundle/manifest.json"]).unwrap();
    let big = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "artifacts/big.bin")
        .unwrap();
    assert!(
        big["left_out"]
            .as_str()
            .unwrap()
            .contains("SKILL_RUNNER_SERVE_MAX_MB"),
        "{manifest}"
    );
}

#[tokio::test]
async fn output_past_the_log_limit_fails_the_run_and_stays_bounded() {
    let server = server(&[("SKILL_RUNNER_RUN_MAX_LOG_MB", "4")]);
    let (_, status) = finished(&server, json!({"mode": "flood", "mib": 64})).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["error"]["code"], "RESOURCE_OUTPUT", "{status}");
    let message = status["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("4 MiB") && message.contains("SKILL_RUNNER_RUN_MAX_LOG_MB"),
        "{message}"
    );
    let stdout = server.run_dir(&status).join("logs/stdout.txt");
    assert_eq!(std::fs::metadata(&stdout).unwrap().len(), 4 << 20);
}

/// `zip`, with every `from` (its local header and its central-directory entry) renamed `to`:
/// the zip writer refuses a second entry of one name, so the duplicate is patched in.
fn renamed(mut zip: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut patched = 0;
    for at in 0..zip.len() - from.len() {
        if zip[at..at + from.len()] == *from.as_bytes() {
            zip[at..at + to.len()].copy_from_slice(to.as_bytes());
            patched += 1;
        }
    }
    assert_eq!(patched, 2);
    zip
}

#[tokio::test]
async fn a_package_with_a_name_twice_is_refused_naming_it() {
    let server = TestServer::with_skills(&[common::probe_skill("probe", Some(true))], &[]);
    let twice = common::skill_package("twice", "1.0.0").file("notes.tx1", "first");
    let zip = twice.clone().file("notes.tx2", "second").zip();
    let status = server
        .install_and_wait(renamed(zip, "twice/notes.tx2", "twice/notes.tx1"))
        .await;
    assert_eq!(status["status"], "failed", "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(
        error.contains("entry 'twice/notes.tx1' appears twice"),
        "{error}"
    );
    // An input upload is read by the same rules.
    let rid = server
        .create_job(json!({"skill_id": "probe", "parameter": {"mode": "ok"}}))
        .await;
    let zip = common::build_zip(vec![
        ("doc".into(), b"1".to_vec()),
        ("dox".into(), b"2".to_vec()),
    ]);
    let part = reqwest::multipart::Part::bytes(renamed(zip, "dox", "doc")).file_name("in.zip");
    let (code, body) = server
        .post_form(
            &format!("/v1/jobs/{rid}/upload"),
            reqwest::multipart::Form::new().part("file", part),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("'doc' appears twice"), "{body}");
}
