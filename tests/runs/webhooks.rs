//! Webhooks: a receiver on loopback verifies every delivery with the Standard Webhooks
//! reference library (`tests/fixtures/webhook_receiver.py`); a failed delivery is tried again
//! under the same `webhook-id`; `410` disables the endpoint; a job's `callback_url` is signed
//! the same way; targets on internal addresses are refused unless the operator allows them;
//! a node killed holding a delivery leaves it to another, which sends it once.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skill_runner_test_support as common;

use common::postgres::{Store, fresh_database, pairs};
use common::{TestDirs, TestServer, probe_skill};

/// The receiver: its folder (secrets, answers, deliveries) and port; killed when dropped.
struct Receiver {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Receiver {
    fn start() -> Option<Self> {
        let python = common::python_tools::program(
            "standardwebhooks",
            "SKILL_RUNNER_STANDARDWEBHOOKS_VENV",
            "python",
        )?;
        let dir = tempfile::tempdir().unwrap();
        let script: PathBuf = [
            env!("CARGO_MANIFEST_DIR"),
            "tests/fixtures/webhook_receiver.py",
        ]
        .iter()
        .collect();
        let mut child = Command::new(python)
            .arg(script)
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap();
        Some(Self { child, dir, port })
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn allow(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn write(&self, name: &str, lines: &[&str]) {
        std::fs::write(self.dir.path().join(name), lines.join("\n") + "\n").unwrap();
    }

    fn deliveries(&self) -> Vec<Value> {
        read_lines(&self.dir.path().join("deliveries.jsonl"))
    }

    /// Waits until `count` deliveries arrived; all of them.
    async fn wait_for(&self, count: usize, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.deliveries();
            if got.len() >= count || Instant::now() > deadline {
                assert!(got.len() >= count, "{count} deliveries expected: {got:#?}");
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn probe(mode: &str, n: u32) -> Value {
    json!({"skill_id": "probe", "parameter": {"mode": mode, "n": n}})
}

async fn deliveries_are_signed_retried_and_a_gone_endpoint_disabled(store: Store) {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let dirs = TestDirs::new();
    probe_skill("probe", None).write_into(&dirs.skills);
    let allow = receiver.allow();
    let env = store
        .env(&[("SKILL_RUNNER_WEBHOOK_ALLOW", allow.as_str())])
        .await;
    let server = TestServer::start_with(dirs, &pairs(&env));

    // Internal targets are refused, a name that resolves to loopback too.
    for url in [
        "http://localhost/h",
        format!("http://localhost:{}/h", receiver.port).as_str(),
        "http://10.0.0.1/h",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/h",
        "http://[::ffff:127.0.0.1]/h",
    ] {
        let (status, refused) = server
            .post_json(
                "/v1/webhooks",
                json!({"url": url, "events": ["run.succeeded"]}),
            )
            .await;
        assert_eq!(status, 400, "{url}: {refused}");
        assert!(
            refused["detail"]
                .to_string()
                .contains("public addresses only"),
            "{url}: {refused}"
        );
    }
    let (status, refused) = server
        .post_json(
            "/v1/webhooks",
            json!({"url": receiver.url("/h"), "events": ["run.finished"]}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    // A callback needs a webhook secret to be signed with.
    let mut callback = probe("ok", 0);
    callback["callback_url"] = json!(receiver.url("/callback"));
    let (status, refused) = server.post_json("/v1/jobs", callback.clone()).await;
    assert_eq!(status, 400, "{refused}");

    let (status, made) = server
        .post_json(
            "/v1/webhooks",
            json!({"url": receiver.url("/h"), "events": ["run.succeeded", "run.failed"]}),
        )
        .await;
    assert_eq!(status, 200, "{made}");
    let webhook_id = made["webhook_id"].as_str().unwrap().to_owned();
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{made}");
    let (_, listed) = server.get("/v1/webhooks").await;
    assert!(
        !listed.to_string().contains(&secret),
        "the secret is shown once"
    );
    receiver.write("secrets", &[&secret]);
    receiver.write("answers", &["500", "200"]);

    // A success, delivered at the second try under the same id.
    let rid = server.create_job(probe("ok", 1)).await;
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["succeeded"])
        .await;
    let got = receiver.wait_for(2, Duration::from_secs(20)).await;
    assert_eq!(got[0]["id"], got[1]["id"], "{got:#?}");
    assert!(got.iter().all(|d| d["verified"] == true), "{got:#?}");
    assert_eq!(got[1]["body"]["type"], "run.succeeded");
    assert_eq!(got[1]["body"]["data"]["request_id"], rid.as_str());
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let (_, log) = server
            .get(&format!("/v1/webhooks/{webhook_id}/deliveries"))
            .await;
        if log["deliveries"][0]["state"] == "delivered" || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let delivery = &log["deliveries"][0];
    assert_eq!(delivery["state"], "delivered", "{log}");
    assert_eq!(delivery["tries"][0]["status_code"], 500, "{log}");
    assert_eq!(delivery["tries"][0]["response"], "answered 500", "{log}");
    assert_eq!(delivery["tries"][1]["status_code"], 200, "{log}");

    // Sent again on request, under its own id.
    let delivery_id = delivery["delivery_id"].as_str().unwrap();
    let (status, _) = server
        .post_json(
            &format!("/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200);
    let got = receiver.wait_for(3, Duration::from_secs(10)).await;
    assert_eq!(got[2]["id"], delivery_id);

    // A failure, and a callback signed with the tenant's secret.
    let failed = server.create_job(probe("exit", 2)).await;
    server
        .wait_status(&format!("/v1/jobs/{failed}"), &["failed"])
        .await;
    let got = receiver.wait_for(4, Duration::from_secs(10)).await;
    assert_eq!(got[3]["body"]["type"], "run.failed");
    assert_eq!(got[3]["body"]["data"]["status"], "failed");
    callback["parameter"]["n"] = json!(3);
    let called = server.create_job(callback).await;
    let got = receiver.wait_for(6, Duration::from_secs(10)).await;
    let to_callback: Vec<&Value> = got
        .iter()
        .filter(|d| d["body"]["data"]["request_id"] == called.as_str())
        .collect();
    assert_eq!(
        to_callback.len(),
        2,
        "the webhook and the callback: {got:#?}"
    );
    assert!(to_callback.iter().all(|d| d["verified"] == true));

    // A rotation: both secrets sign for a day.
    let (status, rotated) = server
        .post_json(&format!("/v1/webhooks/{webhook_id}/rotate"), json!({}))
        .await;
    assert_eq!(status, 200, "{rotated}");
    let fresh = rotated["secret"].as_str().unwrap();
    assert_ne!(fresh, secret);
    receiver.write("secrets", &[fresh]);
    let later = server.create_job(probe("ok", 4)).await;
    server
        .wait_status(&format!("/v1/jobs/{later}"), &["succeeded"])
        .await;
    let got = receiver.wait_for(7, Duration::from_secs(10)).await;
    assert_eq!(got[6]["verified"], true, "{:#?}", got[6]);
    assert_eq!(
        got[6]["signature"].as_str().unwrap().split(' ').count(),
        2,
        "the old and the new secret sign"
    );

    // 410: the endpoint is disabled, and told nothing more.
    let taken = receiver.deliveries().len();
    let answers: Vec<String> = (0..taken).map(|_| "200".to_owned()).collect();
    let mut answers: Vec<&str> = answers.iter().map(String::as_str).collect();
    answers.push("410");
    receiver.write("answers", &answers);
    let gone = server.create_job(probe("ok", 5)).await;
    server
        .wait_status(&format!("/v1/jobs/{gone}"), &["succeeded"])
        .await;
    receiver.wait_for(taken + 1, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, listed) = server.get("/v1/webhooks").await;
        if listed["webhooks"][0]["disabled_at"].is_string() {
            assert!(listed.to_string().contains("410"), "{listed}");
            break;
        }
        assert!(Instant::now() < deadline, "not disabled: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = server.create_job(probe("ok", 6)).await;
    server
        .wait_status(&format!("/v1/jobs/{after}"), &["succeeded"])
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        receiver.deliveries().len(),
        taken + 1,
        "nothing after the 410"
    );

    let (status, _) = server.get("/v1/webhooks/wh_nope/deliveries").await;
    assert_eq!(status, 404);
    let (status, _) = server.delete(&format!("/v1/webhooks/{webhook_id}")).await;
    assert_eq!(status, 200);
    let (_, listed) = server.get("/v1/webhooks").await;
    assert_eq!(listed["webhooks"], json!([]));
}

#[tokio::test]
async fn deliveries_are_signed_retried_and_a_gone_endpoint_disabled_on_sqlite() {
    deliveries_are_signed_retried_and_a_gone_endpoint_disabled(Store::Sqlite).await;
}

#[tokio::test]
async fn deliveries_are_signed_retried_and_a_gone_endpoint_disabled_on_postgres() {
    deliveries_are_signed_retried_and_a_gone_endpoint_disabled(Store::Postgres).await;
}

/// A node that claimed a delivery and died before sending it: another node sends it once
/// the claim ran out, exactly once.
#[tokio::test]
async fn a_node_killed_holding_a_delivery_leaves_it_to_another() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let skills = TestDirs::new();
    probe_skill("probe", None).write_into(&skills.skills);
    let url = fresh_database().await;
    let allow = receiver.allow();
    let node = |id: &str, faults: &str| {
        let env = [
            ("SKILL_RUNNER_DATABASE_URL", url.as_str()),
            ("SKILL_RUNNER_NODE_ID", id),
            ("SKILL_RUNNER_SKILLS_DIR", skills.skills.to_str().unwrap()),
            ("SKILL_RUNNER_WEBHOOK_ALLOW", allow.as_str()),
            ("SKILL_RUNNER_TEST_FAULTS", faults),
        ];
        TestServer::start_with(TestDirs::new(), &env)
    };
    let mut a = node("node-a", "webhook-before-send*100");
    let (status, made) = a
        .post_json(
            "/v1/webhooks",
            json!({"url": receiver.url("/h"), "events": ["run.succeeded"]}),
        )
        .await;
    assert_eq!(status, 200, "{made}");
    receiver.write("secrets", &[made["secret"].as_str().unwrap()]);
    let rid = a.create_job(probe("ok", 1)).await;
    a.wait_status(&format!("/v1/jobs/{rid}"), &["succeeded"])
        .await;
    // Node a claims it and "dies" before sending.
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.kill();
    assert!(receiver.deliveries().is_empty());
    let b = node("node-b", "");
    let got = receiver.wait_for(1, Duration::from_secs(40)).await;
    assert!(got[0]["verified"] == true, "{got:#?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.deliveries().len(), 1, "delivered once");
    drop(b);
}

/// The address rules hold at each delivery, not only at creation: a webhook made while the
/// operator allowed its target is refused once the allowance is gone, and nothing reaches it.
#[tokio::test]
async fn a_target_is_checked_again_at_each_delivery() {
    let Some(receiver) = Receiver::start() else {
        return;
    };
    let dirs = TestDirs::new();
    probe_skill("probe", None).write_into(&dirs.skills);
    let allow = receiver.allow();
    let mut server = TestServer::start_with(
        dirs.clone(),
        &[("SKILL_RUNNER_WEBHOOK_ALLOW", allow.as_str())],
    );
    let (status, made) = server
        .post_json(
            "/v1/webhooks",
            json!({"url": receiver.url("/h"), "events": ["run.succeeded"]}),
        )
        .await;
    assert_eq!(status, 200, "{made}");
    let webhook_id = made["webhook_id"].as_str().unwrap().to_owned();
    server.kill();
    let server = TestServer::start_with(dirs, &[]);
    let rid = server.create_job(probe("ok", 1)).await;
    server
        .wait_status(&format!("/v1/jobs/{rid}"), &["succeeded"])
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let (_, log) = server
            .get(&format!("/v1/webhooks/{webhook_id}/deliveries"))
            .await;
        if log["deliveries"][0]["tries"][0].is_object() || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let tried = &log["deliveries"][0]["tries"][0];
    assert!(
        tried["error"]
            .as_str()
            .is_some_and(|e| e.contains("public addresses only")),
        "{log}"
    );
    assert_eq!(tried["status_code"], Value::Null, "{log}");
    assert!(
        receiver.deliveries().is_empty(),
        "nothing reached the target"
    );
}
