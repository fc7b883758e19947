//! Running a test inside a fresh loopback-only network namespace (`unshare -n`): the test binary
//! re-runs the one test there, so nothing it starts can reach beyond the machine.

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
/// `test` of this binary in a new namespace and asserts it passed.
pub fn isolate(test: &str) -> Isolation {
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
        .arg("-n")
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
