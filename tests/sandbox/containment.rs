//! Contained turns, tried as a hostile skill author would: a `script` turn reaches for the
//! service's own API, the machine's other ports and addresses, UDP, a host on another network
//! and other runs, and leaves `setsid` grandchildren behind when the service is killed. Every
//! attempt must fail. Tests that send traffic run in a network namespace of their own
//! ([`common::netns::isolate`]), so nothing leaves the test's loopback and the veth it made.

use skill_runner_test_support as common;

use std::io::Read as _;
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use common::TestServer;
use common::netns::{Isolation, isolate, nobody_connected, test_host};
use serde_json::{Value, json};

/// Carries out `parameter.attack` and prints what happened as `{"observed": {...}}`.
const ATTACKER: &str = r#"
import json, os, socket, subprocess, sys, time
p = json.load(sys.stdin)["parameter"]
attack = p["attack"]
seen = {}

def tcp(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = s.recv(200)
        return "CONNECTED: " + got[:60].decode("latin-1")
    except OSError as e:
        return "failed: " + (e.strerror or type(e).__name__)
    finally:
        s.close()

if attack == "tcp":
    for host, port in p["targets"]:
        seen["%s:%d" % (host, port)] = tcp(host, port)
elif attack == "fetch":
    import urllib.request, urllib.error
    for url in p["urls"]:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                seen[url] = "OK %d %s" % (r.status, r.read(40).decode())
        except urllib.error.HTTPError as e:
            seen[url] = "failed: HTTP %d %s" % (e.code, e.read(300).decode())
        except Exception as e:
            seen[url] = "failed: " + str(e)
    for host, port in p.get("targets", []):
        seen["%s:%d" % (host, port)] = tcp(host, port)
elif attack == "privileges":
    status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
        seen[key] = status[key].strip()
    try:
        socket.sethostname("hijacked")
        seen["sethostname"] = "DONE"
    except OSError as e:
        seen["sethostname"] = "failed: " + e.strerror
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        seen["raw socket"] = "OPENED"
    except OSError as e:
        seen["raw socket"] = "failed: " + e.strerror
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        seen["packet socket"] = "OPENED"
    except OSError as e:
        seen["packet socket"] = "failed: " + e.strerror
    os.makedirs("mnt", exist_ok=True)
    for name, argv in (("unshare", ["unshare", "-n", "true"]), ("mount", ["mount", "-t", "tmpfs", "x", "mnt"])):
        r = subprocess.run(argv, capture_output=True)
        seen[name] = "DONE" if r.returncode == 0 else "failed: " + r.stderr.decode()[-80:]
    fds = {}
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        try:
            fds[fd] = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            fds[fd] = "?"
    seen["fds"] = fds
elif attack == "unix":
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(p["path"])
        seen["unix"] = "CONNECTED"
    except OSError as e:
        seen["unix"] = "failed: " + (e.strerror or type(e).__name__)
elif attack == "fork":
    children = 0
    error = None
    for _ in range(p["count"]):
        try:
            pid = os.fork()
        except OSError as e:
            error = e.strerror
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
    seen["children"] = children
    seen["error"] = error
elif attack == "memory":
    held = []
    try:
        for _ in range(p["mb"] // 64):
            held.append(b"x" * (64 << 20))
        seen["allocated_mb"] = 64 * len(held)
    except MemoryError:
        seen["allocated_mb"] = "MemoryError at %d" % (64 * len(held))
elif attack == "file":
    written = 0
    try:
        with open("big.bin", "wb") as f:
            for _ in range(p["mb"]):
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1
    except OSError as e:
        seen["error"] = e.strerror
    seen["written_mb"] = written
elif attack == "disk":
    for i in range(p["files"]):
        with open("part-%d.bin" % i, "wb") as f:
            f.write(b"x" * (p["mb_each"] << 20))
        time.sleep(0.1)
    seen["files"] = p["files"]
elif attack == "cpu":
    end = time.time() + p["seconds"]
    n = 0
    while time.time() < end:
        n += 1
    seen["spun"] = n
elif attack == "shm":
    try:
        with open(p["read"]) as f:
            seen["read"] = "READ " + f.read()
    except OSError as e:
        seen["read"] = "failed: " + e.strerror
    with open(p["write"], "w") as f:
        f.write("left by a turn")
    seen["wrote"] = p["write"]
elif attack == "udp":
    for host, port in p["targets"]:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for _ in range(5):
                s.sendto(b"udp from a turn", (host, port))
            seen["%s:%d" % (host, port)] = "sent"
        except OSError as e:
            seen["%s:%d" % (host, port)] = "failed: " + (e.strerror or type(e).__name__)
elif attack == "listen":
    # Listens where it may (TCP, a socket file in the workspace), says so in `ready`, and
    # waits for another run to connect.
    servers = []
    try:
        tcp_server = socket.socket()
        tcp_server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp_server.bind(("127.0.0.1", p["port"]))
        tcp_server.listen(8)
        servers.append(("tcp", tcp_server))
        seen["tcp"] = "listening"
    except OSError as e:
        seen["tcp"] = "failed: " + (e.strerror or type(e).__name__)
    path = os.path.join(os.getcwd(), "door.sock")
    try:
        unix_server = socket.socket(socket.AF_UNIX)
        unix_server.bind(path)
        os.chmod(path, 0o777)
        unix_server.listen(8)
        servers.append(("unix", unix_server))
        seen["unix"] = "listening"
    except OSError as e:
        seen["unix"] = "failed: " + (e.strerror or type(e).__name__)
    open("ready", "w").close()
    accepted = []
    deadline = time.time() + p["seconds"]
    while time.time() < deadline:
        for name, server in servers:
            server.settimeout(0.1)
            try:
                server.accept()
                accepted.append(name)
            except OSError:
                pass
        if not servers:
            time.sleep(0.1)
    seen["accepted"] = accepted
elif attack == "leave":
    # What an earlier turn left listening (TCP and an abstract unix name) must be gone; this
    # turn's loopback works; then it leaves the same behind, held by a daemon of its own.
    seen["netns"] = os.readlink("/proc/self/ns/net")
    seen["earlier tcp"] = tcp("127.0.0.1", p["port"])
    named = socket.socket(socket.AF_UNIX)
    try:
        named.connect("\0" + p["name"])
        seen["earlier abstract"] = "CONNECTED"
    except OSError as e:
        seen["earlier abstract"] = "failed: " + (e.strerror or type(e).__name__)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", p["port"]))
    listener.listen(8)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + p["name"])
    abstract.listen(8)
    own = socket.create_connection(("127.0.0.1", p["port"]), timeout=3)
    seen["own loopback"] = "connected"
    own.close()
    if os.fork() == 0:
        os.setsid()
        time.sleep(600)
        os._exit(0)
elif attack == "setsid":
    # Grandchildren in sessions of their own, whose parent exits at once.
    for i in range(p["count"]):
        subprocess.Popen(["setsid", "sh", "-c",
            "python3 -c 'import time; time.sleep(600)' %s-%d & exit 0" % (p["token"], i)])
    time.sleep(600)
print(json.dumps({"observed": seen}))
"#;

fn attacker_skill() -> common::Package {
    common::observer_skill("attacker", ATTACKER, &["attack"])
}

/// The environment of a server whose turns share its network (`shared`), or get their own.
fn network(shared: bool) -> &'static [(&'static str, &'static str)] {
    match shared {
        true => &[("SKILL_RUNNER_NAMESPACES", "off")],
        false => &[],
    }
}

/// Each network attack runs twice, each time in a namespace the test made: with the turn in a
/// network namespace of its own (the default where the kernel allows it), and sharing the
/// service's network (`SKILL_RUNNER_NAMESPACES=off`, as where a seccomp profile refuses
/// namespaces), bounded there by Landlock's TCP rules and the seccomp socket filter.
macro_rules! in_both_networks {
    ($($name:ident),*) => {
        mod own_network {
            use super::*;
            $(#[tokio::test]
            async fn $name() {
                if let Isolation::Inside = isolate(concat!(module_path!(), "::", stringify!($name))) {
                    super::$name(false).await;
                }
            })*
        }
        mod shared_network {
            use super::*;
            $(#[tokio::test]
            async fn $name() {
                if let Isolation::Inside = isolate(concat!(module_path!(), "::", stringify!($name))) {
                    super::$name(true).await;
                }
            })*
        }
    };
}

in_both_networks!(
    runs_cannot_talk_to_each_other,
    a_turn_cannot_reach_the_service_api,
    a_turn_cannot_reach_other_loopback_ports_addresses_or_udp,
    a_turn_cannot_reach_a_host_on_another_network,
    a_skill_reaches_the_hosts_it_declares_and_the_operator_permits_and_nothing_else
);

fn server(env: &[(&str, &str)]) -> TestServer {
    TestServer::with_skills(&[attacker_skill()], env)
}

/// Runs one attack to its end and returns what it observed.
async fn attack(server: &TestServer, parameter: Value) -> Value {
    let rid = server
        .create_job(json!({"skill_id": "attacker", "parameter": parameter}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (code, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    assert_eq!(code, 200, "{result}");
    result["result"]["data"]["observed"].clone()
}

fn port_of(server: &TestServer) -> u16 {
    server.url("").rsplit(':').next().unwrap().parse().unwrap()
}

/// Asserts every observation failed.
fn all_failed(observed: &Value) {
    let map = observed.as_object().unwrap();
    assert!(!map.is_empty());
    for (target, what) in map {
        let what = what.as_str().unwrap();
        assert!(what.starts_with("failed"), "{target}: {what}");
    }
}

async fn a_turn_cannot_reach_the_service_api(shared: bool) {
    let server = server(network(shared));
    let port = port_of(&server);
    let observed = attack(
        &server,
        json!({"attack": "tcp", "targets": [["127.0.0.1", port], ["localhost", port], ["::1", port]]}),
    )
    .await;
    all_failed(&observed);
}

async fn a_turn_cannot_reach_other_loopback_ports_addresses_or_udp(shared: bool) {
    let server = server(network(shared));
    let other_port = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_address = TcpListener::bind("127.0.0.2:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tcp_targets = json!([
        ["127.0.0.1", other_port.local_addr().unwrap().port()],
        ["127.0.0.2", other_address.local_addr().unwrap().port()],
    ]);
    all_failed(&attack(&server, json!({"attack": "tcp", "targets": tcp_targets})).await);
    nobody_connected(&other_port);
    nobody_connected(&other_address);

    let udp_port = udp.local_addr().unwrap().port();
    let observed = attack(
        &server,
        json!({"attack": "udp", "targets": [["127.0.0.1", udp_port]]}),
    )
    .await;
    // Sending succeeds in the turn's own namespace (its loopback is up), but nothing arrives.
    udp.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram from the turn arrived ({observed})"
    );
}

/// A host on another network: a veth pair in the test's own namespace, its address
/// `10.211.0.1`, with a listener there.
async fn a_turn_cannot_reach_a_host_on_another_network(shared: bool) {
    let host = test_host();
    let port = host.local_addr().unwrap().port();
    let server = server(network(shared));
    let observed = attack(
        &server,
        json!({"attack": "tcp", "targets": [["10.211.0.1", port], ["10.211.0.2", port]]}),
    )
    .await;
    all_failed(&observed);
    nobody_connected(&host);
}

/// A run listening on its loopback, or on a socket file in its workspace, is out of another
/// run's reach.
async fn runs_cannot_talk_to_each_other(shared: bool) {
    let mut env = vec![("SKILL_RUNNER_MAX_CONCURRENT", "2")];
    env.extend_from_slice(network(shared));
    let server = server(&env);
    // The listening run's socket file appears once it listens on both.
    let listener = server
        .create_job(json!({"skill_id": "attacker", "parameter": {
            "attack": "listen", "port": 47001, "seconds": 6}}))
        .await;
    let status = server
        .wait_status(&format!("/v1/jobs/{listener}"), &["running"])
        .await;
    let workspace = server.workspace(&status);
    let socket = workspace.join("door.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !workspace.join("ready").exists() {
        assert!(
            Instant::now() < deadline,
            "the listening run never got ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tcp = attack(
        &server,
        json!({"attack": "tcp", "targets": [["127.0.0.1", 47001]]}),
    )
    .await;
    all_failed(&tcp);
    let unix = attack(
        &server,
        json!({"attack": "unix", "path": socket.to_string_lossy()}),
    )
    .await;
    let own_network = barriers(&server).await["network"] == "namespace";
    if own_network {
        // The other run's folder does not exist for the turn (it sees its own run only).
        assert_eq!(unix["unix"], "failed: No such file or directory", "{unix}");
    } else {
        // Landlock keeps the other run's workspace out of reach.
        all_failed(&unix);
    }
    let done = server.wait_job(&listener).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, result) = server.get(&format!("/v1/jobs/{listener}/result")).await;
    let observed = &result["result"]["data"]["observed"];
    assert_eq!(observed["accepted"], json!([]), "{result}");
    if !own_network {
        // In the service's network a turn may bind no port at all.
        assert!(
            observed["tcp"].as_str().unwrap().starts_with("failed"),
            "{result}"
        );
    }
}

/// Which mechanism holds each barrier on the server's host, as the service reports it.
async fn barriers(server: &TestServer) -> Value {
    let (code, engines) = server.get("/v1/management/engines").await;
    assert_eq!(code, 200, "{engines}");
    engines["engines"][0]["barriers"].clone()
}

/// Every barrier holds by some mechanism where the tests run: on this machine as root, and in
/// the container lane as the image's user under podman's default seccomp profile.
#[tokio::test]
async fn every_barrier_holds_by_some_mechanism() {
    let server = server(&[]);
    let barriers = barriers(&server).await;
    for (barrier, mechanism) in barriers.as_object().unwrap() {
        assert_ne!(mechanism, "none", "{barrier} is not held: {barriers}");
    }
    assert_eq!(barriers["files"], "landlock", "{barriers}");
    let expected_network = if server.in_container() {
        "landlock-tcp+seccomp"
    } else {
        "namespace"
    };
    assert_eq!(barriers["network"], expected_network, "{barriers}");
}

/// Processes whose command line carries `token`.
fn carrying(token: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let mut cmdline = Vec::new();
            std::fs::File::open(format!("/proc/{pid}/cmdline"))
                .and_then(|mut f| f.read_to_end(&mut cmdline))
                .is_ok()
                && cmdline.windows(token.len()).any(|w| w == token.as_bytes())
        })
        .collect()
}

#[tokio::test]
async fn setsid_grandchildren_die_with_a_killed_service() {
    const ROUNDS: usize = 20;
    const PER_RUN: usize = 2;
    let mut survivors = Vec::new();
    for round in 0..ROUNDS {
        let token = format!("srt-orphan-{}-{round}", std::process::id());
        let mut server = server(&[("SKILL_RUNNER_MAX_CONCURRENT", "2")]);
        for _ in 0..2 {
            server
                .create_job(json!({"skill_id": "attacker", "parameter": {
                    "attack": "setsid", "count": PER_RUN, "token": token}}))
                .await;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while carrying(&token).len() < 2 * PER_RUN {
            assert!(
                Instant::now() < deadline,
                "round {round}: the grandchildren never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !carrying(&token).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = carrying(&token);
        for pid in &left {
            // The test's own outer limit: nothing it provoked outlives it.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        survivors.extend(left);
    }
    assert_eq!(
        survivors,
        Vec::<i32>::new(),
        "grandchildren outlived a killed service"
    );
}

/// The service's helper processes (`reaper`, `forkserver`) whose command line names `what`.
fn helper_of(service: i32, what: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            common::stat_fields(*pid).is_some_and(|f| f[1] == service.to_string())
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == what.as_bytes()))
        })
}

/// Without namespaces (turns share the service's pid namespace), `kill -9` of the service
/// still leaves nothing: its reaper kills what is left in the turns' cgroups, double-forked
/// daemons included. Were the reaper and the turn leaders killed first (nothing left to clean
/// up), the next start kills what the gone service's turns left in their cgroups.
#[tokio::test]
async fn without_namespaces_nothing_outlives_a_killed_service_either() {
    const ROUNDS: usize = 10;
    let mut survivors = Vec::new();
    for round in 0..ROUNDS {
        // Even rounds: the service alone is killed. Odd rounds: its reaper and the turn
        // leaders first, then the service; the next start cleans up.
        let reaper_too = round % 2 == 1;
        let token = format!("srt-leftover-{}-{round}", std::process::id());
        let shared = [
            ("SKILL_RUNNER_MAX_CONCURRENT", "2"),
            ("SKILL_RUNNER_NAMESPACES", "off"),
        ];
        let mut server = server(&shared);
        server
            .create_job(json!({"skill_id": "attacker", "parameter": {
                "attack": "setsid", "count": 3, "token": token}}))
            .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while carrying(&token).len() < 3 {
            assert!(Instant::now() < deadline, "round {round}: nothing started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if reaper_too {
            let reaper = helper_of(server.pid(), "reaper").expect("the service has a reaper");
            let forkserver = helper_of(server.pid(), "forkserver").expect("and a forkserver");
            let leaders = common::processes_in(Path::new("/"))
                .into_iter()
                .filter(|pid| {
                    common::stat_fields(*pid).is_some_and(|f| f[1] == forkserver.to_string())
                });
            for pid in std::iter::once(reaper).chain(leaders) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        server.kill();
        let next = reaper_too.then(|| self::server(&shared));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !carrying(&token).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(next);
        let left = carrying(&token);
        for pid in &left {
            // The test's own outer limit: nothing it provoked outlives it.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        survivors.extend(left.into_iter().map(|pid| (round, pid)));
    }
    assert_eq!(
        survivors,
        Vec::<(usize, i32)>::new(),
        "processes outlived a killed service"
    );
}

/// Answers every connection with a fixed HTTP response naming `who`, on its own thread.
fn web_server(who: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                use std::io::Write as _;
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let body = format!("hello from {who}");
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn egress_lines(server: &TestServer, status: &Value) -> Vec<Value> {
    let text = std::fs::read_to_string(server.run_dir(status).join("logs/egress.jsonl"))
        .unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn a_skill_reaches_the_hosts_it_declares_and_the_operator_permits_and_nothing_else(
    shared: bool,
) {
    let allowed = web_server("allowed");
    let other = web_server("other");
    let declared = format!("127.0.0.1:{allowed}");
    let skill = attacker_skill().runner(json!({
        "entrypoint": {"script": ["python3", "attacker.py"]},
        "network": {"allow": [declared]}
    }));
    let policy = format!("{declared},*.example.com");
    let mut env = network(shared).to_vec();
    env.push(("SKILL_RUNNER_EGRESS_ALLOW", &policy));
    let server = TestServer::with_skills(std::slice::from_ref(&skill), &env);
    let rid = server
        .create_job(json!({"skill_id": "attacker", "parameter": {
            "attack": "fetch",
            "urls": [format!("http://127.0.0.1:{allowed}/"), format!("http://127.0.0.1:{other}/"),
                     "http://169.254.169.254/latest/meta-data/"],
            "targets": [["127.0.0.1", allowed], ["127.0.0.1", other]]}}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "succeeded", "{status}");
    let (_, result) = server.get(&format!("/v1/jobs/{rid}/result")).await;
    let seen = &result["result"]["data"]["observed"];
    assert_eq!(
        seen[format!("http://127.0.0.1:{allowed}/")],
        "OK 200 hello from allowed",
        "{seen}"
    );
    let refused = seen[format!("http://127.0.0.1:{other}/")].as_str().unwrap();
    assert!(
        refused.starts_with("failed: HTTP 403") && refused.contains("allow-list"),
        "{refused}"
    );
    let metadata = seen["http://169.254.169.254/latest/meta-data/"]
        .as_str()
        .unwrap();
    assert!(metadata.starts_with("failed: HTTP 403"), "{metadata}");
    // Straight to the port: in its own network the declared host is bridged; sharing the
    // service's, the turn may connect to its proxy's port only. The other host is out of reach.
    let direct = seen[format!("127.0.0.1:{allowed}")].as_str().unwrap();
    match shared {
        false => assert!(direct.starts_with("CONNECTED: HTTP/1.1 200"), "{seen}"),
        true => assert!(direct.starts_with("failed"), "{seen}"),
    }
    assert!(
        seen[format!("127.0.0.1:{other}")]
            .as_str()
            .unwrap()
            .starts_with("failed"),
        "{seen}"
    );

    // Every connection is one line of the run's egress log.
    let lines = egress_lines(&server, &status);
    let verdicts: Vec<(String, u64, String)> = lines
        .iter()
        .map(|l| {
            (
                l["host"].as_str().unwrap().to_owned(),
                l["port"].as_u64().unwrap(),
                l["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let count = |port: u16, verdict: &str| {
        verdicts
            .iter()
            .filter(|(h, p, v)| h == "127.0.0.1" && *p == u64::from(port) && v == verdict)
            .count()
    };
    let routes = if shared { 1 } else { 2 };
    assert_eq!(count(allowed, "allowed"), routes, "{lines:?}");
    assert_eq!(count(other, "denied"), 1, "{lines:?}");
    assert!(verdicts.contains(&("169.254.169.254".into(), 80, "denied".into())));
    let through = lines
        .iter()
        .find(|l| l["port"] == allowed && l["via"] == "proxy")
        .unwrap();
    assert_eq!(through["method"], "GET");
    assert!(
        through["bytes_received"].as_u64().unwrap() > 20,
        "{through}"
    );
    assert!(through["bytes_sent"].as_u64().unwrap() > 20, "{through}");
    // `/metrics` counts the same verdicts.
    let (_, metrics) = server.get("/metrics").await;
    let metrics = metrics.as_str().expect("Prometheus text");
    for verdict in ["allowed", "denied"] {
        let logged = verdicts.iter().filter(|(_, _, v)| v == verdict).count();
        let series =
            format!("skill_runner_egress_connections_total{{verdict=\"{verdict}\"}} {logged}");
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in\n{metrics}"
        );
    }
    // A refusal shows in the run's stderr (and so in its events).
    let stderr = std::fs::read_to_string(server.run_dir(&status).join("logs/stderr.txt")).unwrap();
    assert!(
        stderr.contains(&format!("[skill-runner] egress denied: 127.0.0.1:{other}")),
        "{stderr}"
    );

    // The operator permits nothing: the same skill is refused before it starts.
    drop(server);
    let strict = TestServer::with_skills(&[skill], network(shared));
    let rid = strict
        .create_job(json!({"skill_id": "attacker", "parameter": {"attack": "fetch", "urls": []}}))
        .await;
    let status = strict.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    let (_, result) = strict.get(&format!("/v1/jobs/{rid}/result")).await;
    let error = &result["result"]["error"];
    assert_eq!(error["code"], "EGRESS_NOT_PERMITTED", "{result}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&declared) && message.contains("SKILL_RUNNER_EGRESS_ALLOW"),
        "{message}"
    );
}

/// Run in the test's own UTS and mount namespaces: were the barrier broken, the turn would
/// rename and mount over those, not the machine's.
#[tokio::test]
async fn a_turn_has_no_privileges() {
    match isolate(concat!(module_path!(), "::a_turn_has_no_privileges")) {
        Isolation::Inside => {}
        _ => return,
    }
    let server = server(&[]);
    let seen = attack(&server, json!({"attack": "privileges"})).await;
    // A service without capabilities (the image's user) cannot empty the bounding set; with
    // no_new_privs nothing the turn runs can gain a capability from it.
    let service = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let privileged = !service.contains("CapEff:\t0000000000000000");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        if set != "CapBnd" || privileged {
            assert_eq!(seen[set], "0000000000000000", "{set}: {seen}");
        }
    }
    assert_eq!(seen["NoNewPrivs"], "1", "{seen}");
    assert_eq!(seen["Seccomp"], "2", "a seccomp filter: {seen}");
    for refused in [
        "sethostname",
        "raw socket",
        "packet socket",
        "unshare",
        "mount",
    ] {
        assert!(
            seen[refused].as_str().unwrap().starts_with("failed"),
            "{refused}: {seen}"
        );
    }
    assert_eq!(
        seen["fds"],
        json!({}),
        "descriptors reached the turn: {seen}"
    );
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_ne!(hostname.trim(), "hijacked");
}

/// A descriptor the service was started with (as from a careless launcher's `9<file`) does
/// not reach its turns.
#[tokio::test]
async fn no_descriptor_of_the_service_reaches_a_turn() {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "inherited-secret").unwrap();
    let dirs = common::TestDirs::new();
    attacker_skill().write_into(&dirs.skills);
    let server = TestServer::start_inheriting(dirs, &[], secret.path());
    // The service itself holds the descriptor.
    let held = std::fs::read_link(format!("/proc/{}/fd/9", server.pid())).unwrap();
    assert_eq!(held, secret.path());
    let seen = attack(&server, json!({"attack": "privileges"})).await;
    assert_eq!(
        seen["fds"],
        json!({}),
        "descriptors reached the turn: {seen}"
    );
}

/// Runs one attack that must end the run `failed` with `code`; returns the run's status.
async fn over_limit(server: &TestServer, parameter: Value, code: &str) -> Value {
    let rid = server
        .create_job(json!({"skill_id": "attacker", "parameter": parameter}))
        .await;
    let status = server.wait_job(&rid).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["error"]["code"], code, "{status}");
    common::assert_nothing_runs_in(&server.run_dir(&status));
    status
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit() {
    let server = server(&[("SKILL_RUNNER_RUN_PIDS", "64")]);
    let bomb = json!({"attack": "fork", "count": 3000});
    if barriers(&server).await["resources"] == "rlimits" {
        // Without a pids cgroup, RLIMIT_NPROC: the fork past the bound fails in the turn.
        let observed = attack(&server, bomb).await;
        let children = observed["children"].as_u64().unwrap();
        assert!(children < 64, "{observed}");
        assert_eq!(
            observed["error"], "Resource temporarily unavailable",
            "{observed}"
        );
    } else {
        let status = over_limit(&server, bomb, "RESOURCE_PIDS").await;
        let message = status["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("processes (64)") && message.contains("SKILL_RUNNER_RUN_PIDS"),
            "{message}"
        );
    }
    // The next run is unaffected.
    let fine = attack(&server, json!({"attack": "tcp", "targets": []})).await;
    assert_eq!(fine, json!({}));
}

#[tokio::test]
async fn memory_past_the_skills_own_limit_ends_the_run() {
    // The skill asks for less than the operator's cap: its request holds.
    let skill = attacker_skill().runner(json!({
        "entrypoint": {"script": ["python3", "attacker.py"]},
        "limits": {"memory_mb": 256}
    }));
    let server = TestServer::with_skills(&[skill], &[]);
    let hog = json!({"attack": "memory", "mb": 3072});
    if barriers(&server).await["resources"] == "rlimits" {
        // Without a memory cgroup, RLIMIT_DATA: the allocation past it fails in the turn.
        let observed = attack(&server, hog).await;
        let allocated = observed["allocated_mb"].as_str().unwrap_or_default();
        let mb: u64 = allocated
            .strip_prefix("MemoryError at ")
            .and_then(|mb| mb.parse().ok())
            .unwrap_or_else(|| panic!("the allocation was not refused: {observed}"));
        assert!(mb < 256, "{observed}");
        return;
    }
    let status = over_limit(&server, hog, "RESOURCE_MEMORY").await;
    let message = status["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("memory (256 MiB)") && message.contains("limits.memory_mb"),
        "{message}"
    );
}

#[tokio::test]
async fn writes_past_the_file_and_disk_caps_end_the_run() {
    let server = server(&[
        ("SKILL_RUNNER_RUN_FILE_MB", "32"),
        ("SKILL_RUNNER_RUN_MAX_DISK_MB", "64"),
    ]);
    let status = over_limit(
        &server,
        json!({"attack": "file", "mb": 200}),
        "RESOURCE_FILE",
    )
    .await;
    let big = server.workspace(&status).join("big.bin");
    assert!(std::fs::metadata(big).unwrap().len() <= 32 << 20);

    let status = over_limit(
        &server,
        json!({"attack": "disk", "files": 50, "mb_each": 8}),
        "RESOURCE_DISK",
    )
    .await;
    let written: u64 = std::fs::read_dir(server.workspace(&status))
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(
        written < 50 * (8 << 20),
        "the turn wrote all it wanted: {written}"
    );
}

#[tokio::test]
async fn cpu_time_past_its_cap_ends_the_run() {
    let server = server(&[("SKILL_RUNNER_RUN_CPU_SECONDS", "1")]);
    over_limit(
        &server,
        json!({"attack": "cpu", "seconds": 20}),
        "RESOURCE_CPU",
    )
    .await;
}

/// An operator may keep the data dir on the machine's tmpfs, `/dev/shm`: turns still run there
/// (sharing that `/dev/shm`, which their own would hide).
#[tokio::test]
async fn a_data_dir_under_dev_shm_still_runs_turns() {
    let dirs = common::TestDirs::in_folder(Path::new("/dev/shm"));
    attacker_skill().write_into(&dirs.skills);
    let server = TestServer::start_with(dirs, &[]);
    let seen = attack(&server, json!({"attack": "privileges"})).await;
    assert_eq!(seen["NoNewPrivs"], "1", "{seen}");
}

/// Door-less turns reuse network namespaces ([`skill_runner`]'s forkserver pool): one after
/// another, each turn finds nothing of what the turn before it left listening there, over TCP
/// or an abstract unix name, and its own loopback is up.
#[tokio::test]
async fn a_reused_network_namespace_holds_nothing_of_the_turn_before() {
    let server = server(&[("SKILL_RUNNER_MAX_CONCURRENT", "1")]);
    let mut namespaces = Vec::new();
    for _ in 0..6 {
        let seen = attack(
            &server,
            json!({"attack": "leave", "port": 47002, "name": "srt-left-behind"}),
        )
        .await;
        assert_eq!(seen["own loopback"], "connected", "{seen}");
        for earlier in ["earlier tcp", "earlier abstract"] {
            let what = seen[earlier].as_str().unwrap();
            assert!(what.starts_with("failed"), "{earlier}: {what}");
        }
        namespaces.push(seen["netns"].as_str().unwrap().to_owned());
    }
    namespaces.sort();
    namespaces.dedup();
    // Reused, so the checks above were made in namespaces a turn had used before.
    assert!(
        namespaces.len() < 6,
        "no namespace was reused: {namespaces:?}"
    );
}

#[tokio::test]
async fn dev_shm_is_private_to_each_turn_and_gone_after_it() {
    let server = server(&[]);
    let name = format!("/dev/shm/srt-shm-{}", std::process::id());
    let first = attack(
        &server,
        json!({"attack": "shm", "write": name, "read": "/dev/shm/none"}),
    )
    .await;
    let left = std::path::Path::new(&name).exists();
    // The test's own outer limit: nothing it provoked stays on the machine.
    let _ = std::fs::remove_file(&name);
    assert!(
        !left,
        "a turn's /dev/shm file stayed on the machine ({first})"
    );
    let second = attack(
        &server,
        json!({"attack": "shm", "write": format!("{name}-2"), "read": name}),
    )
    .await;
    let _ = std::fs::remove_file(format!("{name}-2"));
    assert!(
        second["read"].as_str().unwrap().starts_with("failed"),
        "{second}"
    );
}
