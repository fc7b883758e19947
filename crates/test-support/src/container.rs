//! The service under test in a container: where `SKILL_RUNNER_TEST_IMAGE` names an image (the
//! container lane, `scripts/container-test.sh`, sets it to the image it built), a
//! [`super::TestServer`] runs `skill-runner serve` in a container of that image with podman
//! instead of the binary beside the tests, under the image's own user and podman's default
//! seccomp profile. The suites that run so see the service exactly as the image's users do.
//!
//! The container shares the test's network (the lane's `containers.conf` says `host`: inside a
//! network namespace a test made, that one), mounts the test's folder at the same path (so
//! paths in answers and on the test's side agree) and gets only the variables the test set.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The variable naming the image; unset or empty, services run on the host.
pub const IMAGE_VARIABLE: &str = "SKILL_RUNNER_TEST_IMAGE";

/// The uid of the image's `runner` user (the Dockerfile's `useradd --uid`).
pub const IMAGE_UID: u32 = 10001;

/// Where the host's agent CLIs (the npm prefix a test names) appear in the container,
/// read-only: the host keeps them under root's home, which the image's user cannot enter.
const NPM_PREFIX_INSIDE: &str = "/opt/skill-runner-test/npm";

/// The image the services under test run in, when the lane set one.
pub fn image() -> Option<String> {
    std::env::var(IMAGE_VARIABLE)
        .ok()
        .filter(|image| !image.trim().is_empty())
}

/// A service started in a container: its name (to remove it) and the `podman run` that shows
/// its output.
pub struct Started {
    pub name: String,
    pub command: Command,
}

/// `service` (the binary with the variables a test set, working in `root`) as a `podman run` of
/// `image`: the same variables, `root` mounted at its own path and handed to the image's user.
pub fn run_in(image: &str, service: &Command, root: &Path) -> Started {
    static STARTED: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "skill-runner-test-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    );
    hand_over(root);
    let mut command = Command::new("podman");
    command.args([
        "run",
        "--rm",
        "--name",
        &name,
        // Health checks would be scheduled with systemd timers; the lane has no systemd.
        "--health-interval",
        "disable",
    ]);
    let mount = format!("{0}:{0}", root.display());
    command.args(["-v", &mount, "-w"]).arg(root);
    // The image listens on 0.0.0.0:8000 (its SKILL_RUNNER_BIND); the test's PORT on loopback
    // stands unless the test names an address itself.
    let set = |name: &str| {
        service
            .get_envs()
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value)
    };
    if set("SKILL_RUNNER_BIND").is_none() {
        let port = set("PORT").and_then(|p| p.to_str()).unwrap_or("0");
        command.args(["-e", &format!("SKILL_RUNNER_BIND=127.0.0.1:{port}")]);
    }
    // The agent CLIs, lent read-only at one place inside: the prefix the test names, else the
    // one the service on the host would find. A prefix inside the test's folder is mounted
    // with it already.
    let named = set("SKILL_RUNNER_NPM_PREFIX").map(Path::new);
    let lent = match named {
        Some(prefix) => (!prefix.starts_with(root)).then(|| prefix.to_owned()),
        None => Some(super::agents::npm_prefix()).filter(|p| p.is_dir()),
    };
    if let Some(prefix) = &lent {
        let mut mount = prefix.as_os_str().to_owned();
        mount.push(format!(":{NPM_PREFIX_INSIDE}:ro"));
        command.arg("-v").arg(mount);
        command.args([
            "-e",
            &format!("SKILL_RUNNER_NPM_PREFIX={NPM_PREFIX_INSIDE}"),
        ]);
    }
    for (key, value) in service.get_envs() {
        let Some(value) = value else {
            continue;
        };
        if key == "SKILL_RUNNER_NPM_PREFIX" && lent.is_some() {
            continue;
        }
        let mut pair = key.to_owned();
        pair.push("=");
        pair.push(value);
        command.arg("-e").arg(pair);
    }
    command
        .arg(image)
        .arg("serve")
        .args(service.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    Started { name, command }
}

/// The test's folder and everything in it, owned by the image's user (the tests run as root,
/// which reads and writes it all the same).
fn hand_over(root: &Path) {
    let status = Command::new("chown")
        .args(["-R", &format!("{IMAGE_UID}:{IMAGE_UID}")])
        .arg(root)
        .status()
        .expect("chown runs");
    assert!(status.success(), "chown of {}", root.display());
}

/// The host's pid of the service in container `name`: the child of the container's first
/// process (`tini`).
pub fn service_pid(name: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let init = Command::new("podman")
            .args(["inspect", "--format", "{{.State.Pid}}", name])
            .stderr(Stdio::null())
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|pid| pid.trim().parse::<i32>().ok())
            .filter(|pid| *pid > 0);
        let service = init.and_then(|init| {
            let children =
                std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).ok()?;
            children.split_whitespace().next()?.parse().ok()
        });
        if let Some(pid) = service {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no service process in container {name}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes container `name` and what is left of it (the anonymous volumes of the image's
/// `VOLUME`s among it).
pub fn remove(name: &str) {
    let _ = Command::new("podman")
        .args(["rm", "--force", "--volumes", "--time", "0", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
