//! The database under the service: files that stop taking writes (made immutable, as a volume
//! turned read-only after I/O errors leaves them), files deleted while open, and another
//! process asking for the file the service holds alone.

use skill_runner_test_support as common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::immutable::Immutable;
use common::{TestServer, probe_skill};
use serde_json::{Value, json};

/// A job that succeeds at once, never answered from the cache.
fn job() -> Value {
    json!({"skill_id": "probe", "parameter": {"mode": "ok"}, "runtime_options": {"no_cache": true}})
}

/// The SQLite files in `server`'s data dir.
fn database_files(server: &TestServer) -> Vec<PathBuf> {
    [
        "skill_runner.db",
        "skill_runner.db-wal",
        "skill_runner.db-shm",
    ]
    .iter()
    .map(|f| server.dirs.data.join(f))
    .collect()
}

/// A refusal because of the database: 503, saying so, never its cause.
fn assert_unavailable(code: u16, body: &Value) {
    assert_eq!(code, 503, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("database is unavailable"), "{detail}");
    assert!(!detail.contains("skill_runner.db"), "{detail}");
}

/// Making a key is a write: refused as unavailable.
async fn assert_key_refused(server: &TestServer) {
    let (code, body) = server
        .post_json(
            "/v1/management/tenants/default/keys",
            json!({"role": "admin", "name": "ops"}),
        )
        .await;
    assert_unavailable(code, &body);
}

async fn wait_ready(server: &TestServer, ready: bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = server.get("/readyz").await;
        if (code == 200) == ready {
            return body;
        }
        assert!(Instant::now() < deadline, "readiness stayed {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Database files made immutable mid-service: writes answer 503 and readiness is false, with
/// the cause in the log, reads go on, and the process lives; once the files can be written
/// again it serves as before, and a restart finds every job it accepted.
#[tokio::test]
async fn database_files_made_immutable_answer_503_until_they_can_be_written_again() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let before = server.create_job(job()).await;
    assert_eq!(server.wait_job(&before).await["status"], "succeeded");

    let Some(held) = Immutable::set(&database_files(&server), module_path!()) else {
        return;
    };
    for _ in 0..5 {
        let (code, body) = server.post_json("/v1/jobs", job()).await;
        assert_unavailable(code, &body);
        let (code, body) = server.get(&format!("/v1/jobs/{before}")).await;
        assert_eq!(
            (code, &body["status"]),
            (200, &json!("succeeded")),
            "{body}"
        );
    }
    assert_key_refused(&server).await;
    let body = wait_ready(&server, false).await;
    assert_eq!(body["store"], "failed", "{body}");
    server
        .wait_log("request failed: the database is unavailable")
        .await;
    server.wait_log("Operation not permitted").await;
    // The watch and the checkpointer look at the files meanwhile: the process lives on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(server.get("/healthz").await.0, 200, "{}", server.log());

    drop(held);
    wait_ready(&server, true).await;
    let after = server.create_job(job()).await;
    assert_eq!(server.wait_job(&after).await["status"], "succeeded");
    server.wait_log("the database can be written again").await;

    let dirs = server.dirs.clone();
    drop(server);
    let server = TestServer::start_with(dirs, &[]);
    for rid in [before, after] {
        let (code, body) = server.get(&format!("/v1/jobs/{rid}")).await;
        assert_eq!(
            (code, &body["status"]),
            (200, &json!("succeeded")),
            "{body}"
        );
    }
    let (_, runs) = server.get("/v1/management/runs").await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2, "{runs}");
}

/// The database deleted under the service: the watch notices without a write and says so
/// loudly; every write is refused from then on (nothing is answered as accepted that a
/// restart would not find) and readiness is false.
#[tokio::test]
async fn a_database_deleted_under_the_service_takes_no_more_writes() {
    let server = TestServer::with_skills(&[probe_skill("probe", None)], &[]);
    let before = server.create_job(job()).await;
    assert_eq!(server.wait_job(&before).await["status"], "succeeded");

    for file in database_files(&server) {
        let _ = std::fs::remove_file(file);
    }
    server
        .wait_log("the database file was gone (No such file or directory")
        .await;
    for _ in 0..3 {
        let (code, body) = server.post_json("/v1/jobs", job()).await;
        assert_unavailable(code, &body);
    }
    assert_key_refused(&server).await;
    let (code, body) = server.get("/readyz").await;
    assert_eq!((code, &body["store"]), (503, &json!("failed")), "{body}");
    assert_eq!(server.get("/healthz").await.0, 200);

    // Restarted, it opens a new database: no run of those it refused.
    let dirs = server.dirs.clone();
    drop(server);
    let server = TestServer::start_with(dirs, &[]);
    let (_, runs) = server.get("/v1/management/runs").await;
    assert_eq!(runs["runs"], json!([]), "{runs}");
}

/// `skill-runner keys create` while the service holds the database fails at once, saying what
/// to do instead; once the service stopped it makes the key, which the service then requires.
#[tokio::test]
async fn the_keys_cli_refuses_a_database_the_service_holds_and_works_once_it_stopped() {
    let server = TestServer::start();
    let keys_create = |data: &std::path::Path| {
        std::process::Command::new(common::bin("skill-runner"))
            .args(["keys", "create", "--role", "admin", "--name", "ops"])
            .env("SKILL_RUNNER_DATA_DIR", data)
            .env_remove("SKILL_RUNNER_DATABASE_URL")
            .output()
            .unwrap()
    };
    let asked = Instant::now();
    let refused = keys_create(&server.dirs.data);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "answered at once, not after a busy wait"
    );
    assert!(
        said.contains("in use by another process")
            && said.contains("POST /v1/management/tenants/{tenant_id}/keys"),
        "{said}"
    );
    assert_eq!(server.get("/v1/management/runs").await.0, 200, "still open");

    let dirs = server.dirs.clone();
    drop(server);
    let made = keys_create(&dirs.data);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let key = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    let server = TestServer::start_with(dirs, &[]);
    assert_eq!(server.get("/v1/management/runs").await.0, 401);
    let status = server
        .client
        .get(server.url("/v1/management/runs"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
}
