//! Running a test inside a fresh loopback-only network namespace (`unshare -n`): the test binary
//! re-runs the one test there, so nothing it starts can reach beyond the machine. It also gets
//! UTS and mount namespaces of its own (`-u -m`, mounts private): a hostile turn whose barrier
//! broke renames or mounts over the test's namespaces, not the machine's.

use std::process::Command;

/// Set in the re-run test's environment.
pub const IN_NETNS: &str = "SKILL_RUNNER_TEST_IN_NETNS";

/// What to do with a test that wants a namespace of its own.
pub enum Isolation {
    /// This process is the one inside the namespace (loopback is up): run the test body.
    Inside,
    /// The test ran (and passed) in its namespace; nothing more to do here.
    RanInside,
    /// Namespaces are not available here; the reason has been printed loudly.
    Unavailable,
}

/// Inside the namespace, brings loopback up and answers [`Isolation::Inside`]. Outside, re-runs
/// `test` of this binary in a new namespace and asserts it passed. `test` is the test's whole
/// path, `concat!(module_path!(), "::", <name>)`, so it stays right wherever the test moves; its
/// first segment (the test binary's crate) is left out, as the test harness names tests.
pub fn isolate(test: &str) -> Isolation {
    let test = test.split_once("::").map_or(test, |(_, path)| path);
    if std::env::var_os(IN_NETNS).is_some() {
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(up.success(), "cannot bring up loopback in the namespace");
        return Isolation::Inside;
    }
    let probe = Command::new("unshare").args(["-n", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("\n*** skipped: no network namespace — {test} ***\n");
        return Isolation::Unavailable;
    }
    let out = Command::new("unshare")
        .args(["-n", "-u", "-m", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(IN_NETNS, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} failed in its namespace:\n{stdout}\n{stderr}"
    );
    Isolation::RanInside
}

/// The address of [`test_host`].
pub const TEST_HOST: &str = "10.211.0.1";

/// A host on another network, inside the test's own namespace (call it only inside one): a
/// veth pair whose first end has [`TEST_HOST`], with a listener there.
pub fn test_host() -> std::net::TcpListener {
    for args in [
        "link add srt-a type veth peer name srt-b",
        "addr add 10.211.0.1/24 dev srt-a",
        "addr add 10.211.0.2/24 dev srt-b",
        "link set srt-a up",
        "link set srt-b up",
    ] {
        let ok = Command::new("ip").args(args.split(' ')).status().unwrap();
        assert!(ok.success(), "ip {args}");
    }
    let host = std::net::TcpListener::bind((TEST_HOST, 0)).unwrap();
    // Reachable from the test's (and the service's) network.
    let port = host.local_addr().unwrap().port();
    drop(std::net::TcpStream::connect((TEST_HOST, port)).unwrap());
    host.accept().unwrap();
    host
}

/// Asserts nobody connected to `listener` (a non-blocking accept finds nothing queued).
pub fn nobody_connected(listener: &std::net::TcpListener) {
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "a turn connected to {}",
        listener.local_addr().unwrap()
    );
}
