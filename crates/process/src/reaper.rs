//! The group reaper: a small helper process that kills engine process groups when the service
//! dies without cleaning up (SIGKILL, OOM, panic abort).
//!
//! The service starts `skill-runner reaper` with a pipe on its stdin and writes `+<pgid>` when
//! an engine group starts and `-<pgid>` when it ends, and once `c<dir>` for each of its cgroup
//! folders. The helper sits in its own process group, so terminal signals aimed at the service
//! do not reach it. When the pipe reaches end-of-file, which the kernel guarantees once the
//! service is gone, it SIGKILLs every group still listed, then every process left in the turns'
//! cgroups (a daemon that left its group, where turns have no pid namespace of their own) and
//! removes them, and exits. Parent-death signals cannot do this alone: they reach only the
//! direct child, not its children.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The service's end of the pipe to the reaper.
#[derive(Debug)]
pub struct Reaper {
    pipe: Mutex<(Child, ChildStdin)>,
}

impl Reaper {
    /// Starts `<exe> reaper` in its own process group.
    pub fn spawn(exe: &Path) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(exe)
            .arg("reaper")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take().expect("stdin is piped");
        Ok(Self {
            pipe: Mutex::new((child, stdin)),
        })
    }

    pub fn watch(&self, pgid: i32) {
        self.send(&format!("+{pgid}\n"));
    }

    pub fn forget(&self, pgid: i32) {
        self.send(&format!("-{pgid}\n"));
    }

    /// Every turn cgroup under `dir` (the service's own) is emptied when the service is gone.
    pub fn watch_cgroups(&self, dir: &Path) {
        self.send(&format!("c{}\n", dir.display()));
    }

    fn send(&self, line: &str) {
        let mut pipe = self.pipe.lock().expect("reaper pipe lock");
        // Writes of a few bytes to a pipe are atomic and do not block while the reaper reads.
        if let Err(e) = pipe.1.write_all(line.as_bytes()) {
            tracing::error!(error = %e, "the group reaper is gone; crash clean-up relies on restart recovery");
        }
    }
}

/// The reaper's main loop (`skill-runner reaper`): returns when the service is gone.
pub fn run(input: impl BufRead) {
    let mut groups = BTreeSet::new();
    let mut cgroups = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if let Some(dir) = line.strip_prefix('c') {
            cgroups.push(std::path::PathBuf::from(dir));
            continue;
        }
        let (op, id) = line.split_at(line.len().min(1));
        let Ok(pgid) = id.trim().parse::<i32>() else {
            continue;
        };
        match op {
            "+" => {
                groups.insert(pgid);
            }
            "-" => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    for dir in cgroups {
        super::cgroups::empty_and_remove(&dir);
    }
}
