//! The service's own surface, tried as a hostile user would: special files and huge files left
//! in a run folder, a flood of output. Every request must get a bounded, prompt answer, and the
//! service must keep answering its health check.

use skill_runner_test_support as common;

use std::time::{Duration, Instant};

use common::TestServer;
use common::netns::{Isolation, isolate};
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
elif mode == "fill":
    with open("fill.bin", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
            f.flush()
elif mode == "wait":
    import time
    while not os.path.exists(p["until"]):
        time.sleep(0.05)
elif mode == "flood":
    width = p.get("width", 65536)
    chunk = "x" * (width - 1) + "\n"
    for _ in range(p["mib"] * (1 << 20) // width):
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

/// `count` connections that send nothing.
fn idle_sockets(server: &TestServer, count: usize) -> Vec<std::net::TcpStream> {
    let address = server.url("").trim_start_matches("http://").to_owned();
    (0..count)
        .map(|_| std::net::TcpStream::connect(&address).unwrap())
        .collect()
}

/// What the service sent on `socket` before closing it, waiting at most `limit`.
fn until_closed(socket: &mut std::net::TcpStream, limit: Duration) -> String {
    use std::io::Read as _;
    socket.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    match socket.read_to_end(&mut got) {
        Ok(_) => String::from_utf8_lossy(&got).into_owned(),
        Err(e) => panic!("still open after {limit:?}: {e}"),
    }
}

/// Sends a request on `socket`, a connection past a cap, and asserts it is told 503 and closed.
fn assert_turned_away(socket: &mut std::net::TcpStream) {
    std::io::Write::write_all(socket, b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let answer = until_closed(socket, Duration::from_secs(2));
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("Too many open connections"),
        "{answer}"
    );
}

async fn ping(server: &TestServer) -> u16 {
    let client = common::client();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        client.get(server.url("/v1/system/ping")).send(),
    )
    .await
    .expect("ping answers")
    .unwrap();
    answer.status().as_u16()
}

#[tokio::test]
async fn idle_connections_are_closed_and_ping_keeps_answering() {
    let server = server(&[("SKILL_RUNNER_HEADER_TIMEOUT_SECONDS", "2")]);
    let mut idle = idle_sockets(&server, 2000);
    assert_eq!(ping(&server).await, 204);
    // A keep-alive connection that went quiet after one request is closed too.
    let mut quiet = idle_sockets(&server, 1).remove(0);
    std::io::Write::write_all(
        &mut quiet,
        b"GET /v1/system/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .unwrap();
    let t0 = Instant::now();
    for socket in &mut idle {
        assert_eq!(until_closed(socket, Duration::from_secs(10)), "");
    }
    let answered = until_closed(&mut quiet, Duration::from_secs(10));
    assert!(answered.starts_with("HTTP/1.1 204"), "{answered}");
    eprintln!("2,000 idle connections closed within {:?}", t0.elapsed());
    assert_eq!(ping(&server).await, 204);
}

#[tokio::test]
async fn past_the_connection_cap_new_connections_are_told_503_and_it_recovers() {
    let server = server(&[
        ("SKILL_RUNNER_MAX_CONNECTIONS", "50"),
        ("SKILL_RUNNER_HEADER_TIMEOUT_SECONDS", "3"),
    ]);
    let mut held = idle_sockets(&server, 50);
    let mut turned = idle_sockets(&server, 20);
    for socket in &mut turned {
        assert_turned_away(socket);
    }
    // Asked at once, while the held ones are still within their header timeout (asked after
    // waiting on the silent one below, a loaded machine let them expire first: a flake): a
    // probe is served past the cap, so an orchestrator still sees the node.
    assert_eq!(ping(&server).await, 204);
    let client = common::client();
    for probe in ["/healthz", "/readyz"] {
        let answer = client.get(server.url(probe)).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{probe}");
    }
    // One that never sends its request is closed after its header timeout.
    let mut silent = idle_sockets(&server, 1).remove(0);
    assert_eq!(until_closed(&mut silent, Duration::from_secs(5)), "");
    for socket in &mut held {
        until_closed(socket, Duration::from_secs(10));
    }
    assert_eq!(ping(&server).await, 204);
}

/// 200 clients trickling request bodies (one byte every 5 s under an announced 10 MB): each is
/// cut once its body falls below the minimum rate and its connection closed, naming the
/// setting; meanwhile probes and a normal create answer, and a run completes.
#[tokio::test]
async fn trickled_bodies_are_cut_and_the_service_keeps_answering() {
    let server = server(&[("SKILL_RUNNER_BODY_MIN_BYTES_PER_SECOND", "1000")]);
    let mut slow = idle_sockets(&server, 200);
    for socket in &mut slow {
        std::io::Write::write_all(
            socket,
            b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 10000000\r\n\r\n{",
        )
        .unwrap();
    }
    let trickling: Vec<std::net::TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut trickling = trickling;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(5));
                for socket in &mut trickling {
                    let _ = std::io::Write::write_all(socket, b" ");
                }
            }
        })
    };
    assert_eq!(ping(&server).await, 204);
    let (_, status) = finished(&server, json!({"mode": "fifo"})).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let t0 = Instant::now();
    for socket in &mut slow {
        let answer = until_closed(socket, Duration::from_secs(30));
        assert!(answer.contains("slower than 1000 bytes/s"), "{answer}");
        assert!(
            answer.contains("SKILL_RUNNER_BODY_MIN_BYTES_PER_SECOND"),
            "{answer}"
        );
    }
    eprintln!(
        "200 trickled bodies cut within {:?} of the run's end",
        t0.elapsed()
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = trickler.join();
    assert_eq!(ping(&server).await, 204);
}

/// One address may hold so many connections; past it, its probes are still served.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_connections() {
    let server = server(&[
        ("SKILL_RUNNER_MAX_CONNECTIONS_PER_ADDRESS", "20"),
        ("SKILL_RUNNER_HEADER_TIMEOUT_SECONDS", "5"),
    ]);
    let _held = idle_sockets(&server, 20);
    assert_turned_away(&mut idle_sockets(&server, 1).remove(0));
    assert_eq!(ping(&server).await, 204, "a probe past the cap");
}

#[tokio::test]
async fn out_of_descriptors_the_service_turns_connections_away_and_recovers() {
    let dirs = common::TestDirs::new();
    common::observer_skill("leaver", LEAVER, &["mode"]).write_into(&dirs.skills);
    let server = TestServer::start_under(
        dirs,
        &[("SKILL_RUNNER_MAX_CONNECTIONS", "5000")],
        &["prlimit", "--nofile=256:256"],
    );
    let idle = idle_sockets(&server, 300);
    // Out of descriptors: a client is still answered, told to come back.
    assert_eq!(ping(&server).await, 503);
    server.wait_log("out of file descriptors").await;
    drop(idle);
    // Once the descriptors are back, everything works.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ping(&server).await != 204 {
        assert!(Instant::now() < deadline, "the service did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, status) = finished(&server, json!({"mode": "fifo"})).await;
    assert_eq!(status["status"], "succeeded", "{status}");
}

/// Every route refuses a `Host` that is not the service's (DNS rebinding) but the probes: a
/// container's health check or an orchestrator's probe names the address it dialled.
#[tokio::test]
async fn a_request_for_another_host_is_refused_on_every_route_but_the_probes() {
    let server = server(&[]);
    let client = common::client();
    for (method, path) in [
        ("GET", "/v1/management/runs"),
        ("POST", "/v1/jobs"),
        ("GET", "/v1/skills"),
        ("POST", "/v1/skills/echo:invoke"),
        ("POST", "/agent/chat"),
        ("GET", "/ui"),
        ("GET", "/static/console.css"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("POST", "/mcp"),
        ("GET", "/no/such/route"),
    ] {
        let request = client
            .request(method.parse().unwrap(), server.url(path))
            .header("host", "evil.example:8000")
            .header("content-type", "application/json")
            .body("{}");
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), 421, "{method} {path}");
        let body: Value = answer.json().await.unwrap();
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("SKILL_RUNNER_ALLOWED_HOSTS"),
            "{body}"
        );
    }
    for (path, status) in [
        ("/v1/system/ping", 204),
        ("/healthz", 200),
        ("/readyz", 200),
    ] {
        let answer = client
            .get(server.url(path))
            .header("host", "10.1.2.3:8000")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{path} answers a probe by address");
    }
    // Its own names are served.
    for host in ["localhost:1", "127.0.0.1", "[::1]:8000"] {
        let answer = client
            .get(server.url("/v1/skills"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{host}");
    }
    // A name the operator lists is served too.
    let listed = self::server(&[("SKILL_RUNNER_ALLOWED_HOSTS", "runner.internal")]);
    let answer = client
        .get(listed.url("/v1/system/ping"))
        .header("host", "runner.internal:8000")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
}

fn rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024
}

/// A run that tries to print 2 GiB (of short lines) is stopped at the log's 256 MiB, and read
/// back a page at a time, the service's memory staying bounded.
#[tokio::test]
async fn a_long_conversation_is_served_in_bounded_pages() {
    let server = server(&[]);
    let (rid, status) =
        finished(&server, json!({"mode": "flood", "mib": 2048, "width": 512})).await;
    assert_eq!(status["error"]["code"], "RESOURCE_OUTPUT", "{status}");
    let (code, page) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(page["count"], 1000, "{}", page["count"]);
    assert_eq!(page["has_more"], true);
    let next = page["next_from_seq"].as_u64().unwrap();
    assert_eq!(
        next,
        page["events"][999]["seq"].as_u64().unwrap() + 1,
        "the next page starts after this one"
    );
    let (_, second) = server
        .get(&format!(
            "/v1/jobs/{rid}/chat/history?from_seq={next}&limit=10"
        ))
        .await;
    assert_eq!(second["count"], 10);
    assert_eq!(second["events"][0]["seq"], next);
    let stdout = server.run_dir(&status).join("logs/stdout.txt");
    assert_eq!(std::fs::metadata(&stdout).unwrap().len(), 256 << 20);
    let rss = rss_mib(server.pid());
    eprintln!("service RSS after the pages: {rss} MiB");
    assert!(rss < 200, "{rss} MiB");
}

/// Refused at install, at a temporary run's upload and by `tools:validate`, each in well under
/// two seconds, naming the bound, with the service's memory untouched.
#[tokio::test]
async fn a_schema_bomb_is_refused_on_every_path() {
    let server = server(&[]);
    // `allOf` doubling at each of 48 `$ref`s: 2^48 subschemas for every check.
    let bomb: Value = serde_json::from_str(include_str!("../fixtures/schema_bomb.json")).unwrap();
    let package =
        common::skill_package("bomb", "1.0.0").file("assets/input.schema.json", bomb.to_string());
    let refused = |text: &str| text.contains("more than 100000 subschemas");

    let t0 = Instant::now();
    let status = server.install_and_wait(package.zip()).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert!(refused(status["error"].as_str().unwrap()), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());

    let t0 = Instant::now();
    let (code, created) = server
        .post_json("/v1/temp-skill-runs", json!({"engine": "script"}))
        .await;
    assert_eq!(code, 200, "{created}");
    let rid = created["request_id"].as_str().unwrap();
    let form = reqwest::multipart::Form::new().part(
        "skill_package",
        reqwest::multipart::Part::bytes(package.runner(json!({"version": null})).zip())
            .file_name("skill.zip"),
    );
    let (code, body) = server
        .post_form(&format!("/v1/temp-skill-runs/{rid}/upload"), form)
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(refused(&body.to_string()), "{body}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());

    let t0 = Instant::now();
    let definition = json!({
        "name": "bomb", "category": "Test",
        "description": "Checks the bomb. When you need to see it refused.",
        "examples": [{"scenario": "s", "params": {"text": "x"}, "expected": "e"}],
        "input_schema": bomb,
    });
    let (code, report) = server
        .post_json("/v1/tools:validate", json!({"definition": definition}))
        .await;
    assert_eq!(code, 200, "{report}");
    assert_eq!(report["valid"], false);
    assert!(refused(&report["errors"].to_string()), "{report}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let rss = rss_mib(server.pid());
    assert!(rss < 200, "{rss} MiB");
}

/// Test folders whose data dir is a 48 MiB tmpfs (in the test's own mount namespace).
fn small_data_volume() -> std::sync::Arc<common::TestDirs> {
    let dirs = common::TestDirs::new();
    small_volume_on(&dirs.data, "48m");
    dirs
}

/// Mounts a tmpfs of `size` on `dir` (made if need be), in the test's own mount namespace.
fn small_volume_on(dir: &std::path::Path, size: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(mounted.success());
}

/// Fills the volume of the folder `dir` with its file `name` until `left` bytes are free.
fn fill_from_outside(dir: &std::path::Path, name: &str, left: u64) -> std::path::PathBuf {
    let file = dir.join(name);
    let free = nix::sys::statvfs::statvfs(dir).unwrap();
    let room = free.blocks_available() as u64 * free.fragment_size() as u64;
    let filled = std::process::Command::new("fallocate")
        .args(["-l", &(room - left).to_string()])
        .arg(&file)
        .status()
        .unwrap();
    assert!(filled.success());
    file
}

/// The data volume fills up under a turn (a 48 MiB tmpfs, in the test's own mount namespace):
/// the run ends `DISK_FULL`, new work is refused with 507 and changes nothing, what was stored
/// stays readable, and once space is back everything works again.
#[tokio::test]
async fn a_full_data_volume_fails_the_run_refuses_work_and_recovers() {
    match isolate(concat!(
        module_path!(),
        "::a_full_data_volume_fails_the_run_refuses_work_and_recovers"
    )) {
        Isolation::Inside => {}
        _ => return,
    }
    let dirs = small_data_volume();
    common::observer_skill("leaver", LEAVER, &["mode"]).write_into(&dirs.skills);
    let server = TestServer::start_with(dirs.clone(), &[("SKILL_RUNNER_DISK_RESERVE_MB", "4")]);
    let (kept, status) = finished(&server, json!({"mode": "fifo"})).await;
    assert_eq!(status["status"], "succeeded", "{status}");

    let (_, status) = finished(&server, json!({"mode": "fill"})).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["error"]["code"], "DISK_FULL", "{status}");
    let filler = server.workspace(&status).join("fill.bin");
    assert!(filler.exists());

    let before = server.get("/v1/management/runs").await.1["runs"]
        .as_array()
        .unwrap()
        .len();
    let body = json!({"skill_id": "leaver", "parameter": {"mode": "fifo"}});
    let (code, refused) = server.post_json("/v1/jobs", body.clone()).await;
    assert_eq!(code, 507, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("storage is full"),
        "{refused}"
    );
    let after = server.get("/v1/management/runs").await.1["runs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "nothing was created");
    let (code, result) = server.get(&format!("/v1/jobs/{kept}/result")).await;
    assert_eq!(code, 200, "{result}");
    assert_eq!(result["result"]["status"], "success");

    // An operator frees space: work is taken again.
    std::fs::remove_file(&filler).unwrap();
    let (code, created) = server.post_json("/v1/jobs", body).await;
    assert_eq!(code, 200, "{created}");
    let rid = created["request_id"].as_str().unwrap();
    assert_eq!(server.wait_job(rid).await["status"], "succeeded");
}

/// The data volume filled by something else than the service (nothing of its own failed to
/// write yet): creates, replies and installs answer 507 before anything is stored, a waiting
/// run keeps waiting, `/readyz` says `storage: full`; once space is back all of it works,
/// the waiting run answered.
#[tokio::test]
async fn a_volume_filled_from_outside_refuses_work_and_keeps_a_waiting_run() {
    match isolate(concat!(
        module_path!(),
        "::a_volume_filled_from_outside_refuses_work_and_keeps_a_waiting_run"
    )) {
        Isolation::Inside => {}
        _ => return,
    }
    let dirs = small_data_volume();
    common::copy_bundled_skills(&dirs.skills);
    common::observer_skill("leaver", LEAVER, &["mode"]).write_into(&dirs.skills);
    let server = TestServer::start_with(
        dirs.clone(),
        &[
            ("SKILL_RUNNER_DISK_RESERVE_MB", "4"),
            ("SKILL_RUNNER_MAX_CONCURRENT", "1"),
        ],
    );
    let (_, created) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "pick-one", "runtime_options": {"execution_mode": "interactive"}}),
        )
        .await;
    let asked = created["request_id"].as_str().unwrap().to_owned();
    let waiting = server
        .wait_status(&format!("/v1/jobs/{asked}"), &["waiting_user"])
        .await;
    // One run holds the only slot; another is queued behind it.
    let go = dirs.root.join("go");
    let holder = server
        .create_running(json!({"skill_id": "leaver", "parameter": {"mode": "wait", "until": go}}))
        .await;
    let queued = server
        .create_job(json!({"skill_id": "leaver", "parameter": {"mode": "fifo"}}))
        .await;

    // Something else fills the volume, to the last half MiB.
    let filler = fill_from_outside(&dirs.data, "filler.bin", 512 * 1024);

    let (code, refused) = server
        .post_json(
            "/v1/jobs",
            json!({"skill_id": "hello", "input": {"name": "x"}}),
        )
        .await;
    assert_eq!(code, 507, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("storage is full"),
        "{refused}"
    );
    let reply = json!({"interaction_id": waiting["pending_interaction_id"], "response": "red"});
    let (code, refused) = server
        .post_json(
            &format!("/v1/jobs/{asked}/interaction/reply"),
            reply.clone(),
        )
        .await;
    assert_eq!(code, 507, "{refused}");
    let (_, still) = server.get(&format!("/v1/jobs/{asked}")).await;
    assert_eq!(still["status"], "waiting_user", "{still}");
    let package = common::skill_package("late", "1.0.0").zip();
    let (code, refused) = server.upload(package.clone()).await;
    assert_eq!(code, 507, "{refused}");
    let (code, ready) = server.get("/readyz").await;
    assert_eq!((code, &ready["storage"]), (503, &json!("full")), "{ready}");
    // The reserve given up left room for the runs under way; something takes that too, and
    // the queued run starts on a volume with none: it ends saying so, not as an internal error.
    let rest = fill_from_outside(&dirs.data, "rest.bin", 0);
    std::fs::write(&go, "").unwrap_or_default();
    let ended = server.wait_job(&queued).await;
    assert_eq!(ended["error"]["code"], "DISK_FULL", "{ended}");
    std::fs::remove_file(&rest).unwrap();
    server.wait_job(&holder).await;

    // Space comes back: everything is taken again, the waiting run answered.
    std::fs::remove_file(&filler).unwrap();
    let (code, ready) = server.get("/readyz").await;
    assert_eq!((code, &ready["storage"]), (200, &json!("ok")), "{ready}");
    let (code, answer) = server
        .post_json(&format!("/v1/jobs/{asked}/interaction/reply"), reply)
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(server.wait_job(&asked).await["status"], "succeeded");
    let (code, installed) = server.upload(package).await;
    assert_eq!(code, 200, "{installed}");
}

/// Turns that fill their logs, two at a time, leave the service's memory where it was: the
/// large buffers behind their answers go back to the system once freed.
#[tokio::test]
async fn flooding_turns_leave_the_service_memory_bounded() {
    let server = server(&[
        ("SKILL_RUNNER_RUN_MAX_LOG_MB", "32"),
        ("SKILL_RUNNER_MAX_CONCURRENT", "2"),
    ]);
    for _ in 0..5 {
        let (a, b) = tokio::join!(
            finished(&server, json!({"mode": "flood", "mib": 64, "width": 1024})),
            finished(&server, json!({"mode": "flood", "mib": 64, "width": 1024})),
        );
        for (_, status) in [a, b] {
            assert_eq!(status["error"]["code"], "RESOURCE_OUTPUT", "{status}");
        }
    }
    let rss = rss_mib(server.pid());
    eprintln!("service RSS after ten flooding turns: {rss} MiB");
    assert!(rss < 90, "{rss} MiB");
}

/// `GET path` sent on a new connection whose answer is never read.
fn unread_stream(server: &TestServer, path: &str) -> std::net::TcpStream {
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    std::io::Write::write_all(&mut socket, request.as_bytes()).unwrap();
    socket
}

/// The service's highest RSS over `span`, sampled every 50 ms.
async fn peak_rss_over(server: &TestServer, span: Duration) -> u64 {
    let until = Instant::now() + span;
    let mut peak = rss_mib(server.pid());
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(rss_mib(server.pid()));
    }
    peak
}

/// A run printing 60 lines of 2 MiB, watched by 60 streams that never read and 10 history
/// readers at once: the service holds a bounded few hundred KiB per reader, gives the memory
/// back when they go, and a client that reads gets every byte (the cut items through
/// `logs/range`).
#[tokio::test]
async fn streams_that_never_read_hold_little_and_a_reader_still_gets_every_byte() {
    const LINE: usize = 2 << 20;
    let server = server(&[]);
    let (rid, status) =
        finished(&server, json!({"mode": "flood", "mib": 120, "width": LINE})).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    // The idle figure once the allocator has seen a read of this run.
    let (code, _) = server.get(&format!("/v1/jobs/{rid}/chat/history")).await;
    assert_eq!(code, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_mib(server.pid());

    let mut sockets = Vec::new();
    for path in ["chat", "chat?cursor=0", "events?cursor=0"] {
        for _ in 0..20 {
            sockets.push(unread_stream(&server, &format!("/v1/jobs/{rid}/{path}")));
        }
    }
    let histories = (0..10).map(|_| {
        let url = server.url(&format!("/v1/jobs/{rid}/chat/history"));
        async move {
            let answer = common::client().get(url).send().await.unwrap();
            assert_eq!(answer.status(), 200);
            answer.json::<Value>().await.unwrap()
        }
    });
    let (pages, peak) = tokio::join!(
        futures::future::join_all(histories),
        peak_rss_over(&server, Duration::from_secs(6)),
    );
    eprintln!("service RSS idle {idle} MiB, with 60 unread streams and 10 pages {peak} MiB");
    assert!(peak < idle + 64, "{peak} MiB against {idle} MiB idle");
    for page in &pages {
        let bytes = serde_json::to_vec(page).unwrap().len();
        assert!(bytes < 2 << 20, "a history page is {bytes} bytes");
    }

    drop(sockets);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_mib(server.pid());
    eprintln!("service RSS after they closed: {after} MiB");
    assert!(after < idle + 16, "{after} MiB against {idle} MiB idle");

    // A reader: every line is one cut message whose raw_ref names its bytes, served whole.
    let events = server
        .events(&format!("/v1/jobs/{rid}/chat"), None)
        .await
        .collect()
        .await;
    assert_eq!(events.last().unwrap().name, "end");
    let cut: Vec<&Value> = events
        .iter()
        .filter(|e| e.name == "chat_event" && e.data["correlation"]["truncated"] == true)
        .map(|e| &e.data)
        .collect();
    assert_eq!(cut.len(), 60, "every line is cut");
    let mut next = 0;
    for item in &cut {
        let (from, to) = (
            item["raw_ref"]["byte_from"].as_u64().unwrap(),
            item["raw_ref"]["byte_to"].as_u64().unwrap(),
        );
        assert_eq!(
            (from, to - from),
            (next, LINE as u64),
            "{}",
            item["raw_ref"]
        );
        assert!(item["text"].as_str().unwrap().ends_with(&format!(
            "… cut: logs/stdout.txt bytes {from} to {to} hold the whole message"
        )));
        let mut line = String::new();
        while (line.len() as u64) < to - from {
            let at = from + line.len() as u64;
            let (code, range) = server
                .get(&format!(
                    "/v1/jobs/{rid}/logs/range?stream=stdout&byte_from={at}&byte_to={to}"
                ))
                .await;
            assert_eq!(code, 200, "{range}");
            line.push_str(range["chunk"].as_str().unwrap());
        }
        assert_eq!(line.len(), LINE);
        assert!(line[..LINE - 1].bytes().all(|b| b == b'x') && line.ends_with('\n'));
        next = to;
    }
}

/// Past a cap on open streams (per run, per client address; the MCP endpoint's too), opening
/// one more answers 429 naming the cap, and a closed stream frees its place.
#[tokio::test]
async fn open_streams_are_capped_per_run_and_per_address() {
    let server = server(&[
        ("SKILL_RUNNER_MAX_STREAMS_PER_RUN", "2"),
        ("SKILL_RUNNER_MAX_STREAMS_PER_ADDRESS", "3"),
    ]);
    // Runs that go on until the server stops, so their streams stay open.
    let waiting = json!({"skill_id": "leaver", "parameter": {"mode": "wait", "until": "/never"}});
    let one = server.create_job(waiting.clone()).await;
    let two = server.create_job(waiting.clone()).await;
    let three = server.create_job(waiting).await;
    // Streams held open: the request is sent, the answer stays unread.
    let first = unread_stream(&server, &format!("/v1/jobs/{one}/chat"));
    let _second = unread_stream(&server, &format!("/v1/jobs/{one}/events"));
    let refused = |path: String| {
        let url = server.url(&path);
        async move {
            let answer = common::client().get(url).send().await.unwrap();
            let retry = answer.headers().get("retry-after").cloned();
            let code = answer.status().as_u16();
            let body = match code {
                200 => Value::Null,
                _ => answer.json::<Value>().await.unwrap(),
            };
            (code, retry, body)
        }
    };
    // The unread streams were counted once their answer began.
    let (mut code, mut retry, mut body) = (0, None, Value::Null);
    for _ in 0..50 {
        (code, retry, body) = refused(format!("/v1/jobs/{one}/events?cursor=0")).await;
        if code == 429 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code, 429, "{body}");
    assert_eq!(retry.unwrap(), "1");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("this run (2 at most)"),
        "{body}"
    );
    let _third = unread_stream(&server, &format!("/v1/jobs/{two}/chat"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, _, body) = refused(format!("/v1/jobs/{three}/chat")).await;
    assert_eq!(code, 429, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("your address (3 at most)"),
        "{body}"
    );
    // The MCP endpoint's event stream counts too.
    let answer = common::client()
        .get(server.url("/mcp"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    // An unknown run is 404 whatever the caps.
    let (code, _, _) = refused("/v1/jobs/nope/chat".into()).await;
    assert_eq!(code, 404);
    drop(first);
    let mut opened = 0;
    for _ in 0..50 {
        let answer = common::client()
            .get(server.url(&format!("/v1/jobs/{three}/chat")))
            .send()
            .await
            .unwrap();
        opened = answer.status().as_u16();
        if opened == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(opened, 200, "a closed stream frees its place");
}

/// Bytes of only `a` and `b` in a random order: deflate keeps them to about a sixth, well
/// within the ratio a package may have.
fn two_letter_text(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if state & 1 == 0 { b'a' } else { b'b' }
        })
        .collect()
}

/// On volumes something else left 3 MiB free: a package too large for the data volume is
/// refused at its upload with 507 (not stored cut short, to fail later as "not a valid zip"),
/// and one whose files fill the skills folder's volume as they are extracted fails saying so.
#[tokio::test]
async fn installs_on_a_full_volume_say_so() {
    match isolate(concat!(
        module_path!(),
        "::installs_on_a_full_volume_say_so"
    )) {
        Isolation::Inside => {}
        _ => return,
    }
    let dirs = small_data_volume();
    let server = TestServer::start_with(dirs.clone(), &[("SKILL_RUNNER_DISK_RESERVE_MB", "4")]);
    let filler = fill_from_outside(&dirs.data, "filler.bin", 3 << 20);

    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..5 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    let too_large = common::skill_package("too-large", "1.0.0")
        .file("assets/noise.bin", noise)
        .zip();
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(too_large).file_name("p.zip"),
    );
    let sent = common::client()
        .post(server.url("/v1/skill-packages/install"))
        .multipart(form)
        .send()
        .await;
    match sent {
        Ok(answer) => {
            assert_eq!(answer.status(), 507);
            let body: Value = answer.json().await.unwrap();
            assert!(
                body["detail"].to_string().contains("storage is full"),
                "{body}"
            );
        }
        // The answer came before the rest of the body was read, and the connection's close
        // may reach the client first: what matters is below.
        Err(e) => assert!(e.is_request(), "{e}"),
    }
    let requests = dirs.data.join("skill_installs/requests");
    let kept = || std::fs::read_dir(&requests).map_or(0, |entries| entries.count());
    for _ in 0..100 {
        if kept() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(kept(), 0, "nothing of the cut upload is kept");

    std::fs::remove_file(&filler).unwrap();
    small_volume_on(&dirs.skills, "16m");
    fill_from_outside(&dirs.skills, "filler.bin", 3 << 20);
    let text = two_letter_text(12 << 20);
    let fills = common::skill_package("fills", "1.0.0")
        .file("assets/text.txt", text)
        .zip();
    assert!(fills.len() < 2 << 20, "{} bytes", fills.len());
    let installed = server.install_and_wait(fills).await;
    assert_eq!(installed["status"], "failed", "{installed}");
    let error = installed["error"].as_str().unwrap();
    assert!(
        error.contains("skills folder's volume is full") && !error.contains("zip"),
        "{error}"
    );
    let (code, _) = server.get("/v1/skills/fills").await;
    assert_eq!(code, 404, "nothing of it was installed");
}
