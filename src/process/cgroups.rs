//! A cgroup per turn in the `memory`, `pids` and `cpuacct` hierarchies (cgroup v1, as on this
//! project's machines), under the service's own cgroup: `<own>/skill-runner.<service pid>/<turn>`.
//!
//! The turn leader moves itself into the turn's groups before it starts the command, so the
//! command and everything it starts are counted, and a group whose turn used more than its
//! limit says so afterwards (`memory.oom_control`'s `oom_kill`, `pids.events`' `max`). When
//! the service dies, its [`super::Reaper`] empties its groups (killing their members: the crash
//! clean-up where pid namespaces are missing); at start-up the groups of services that are gone
//! (the reaper was killed too) are emptied and removed.

use std::path::{Path, PathBuf};

use super::limits::{Limits, Resource};

/// The controllers this service may create turn groups in.
#[derive(Debug, Clone, Default)]
pub struct Cgroups {
    /// `<memory hierarchy>/<own>/skill-runner.<pid>`.
    memory: Option<PathBuf>,
    /// `<pids hierarchy>/<own>/skill-runner.<pid>`.
    pids: Option<PathBuf>,
    /// `<cpuacct hierarchy>/<own>/skill-runner.<pid>`: the turn's CPU time, all processes.
    cpu: Option<PathBuf>,
}

const ROOT: &str = "/sys/fs/cgroup";
const PREFIX: &str = "skill-runner.";

impl Cgroups {
    /// Finds the writable v1 `memory` and `pids` hierarchies, clears the groups that services
    /// no longer running left there, and creates this service's own.
    pub fn setup() -> Self {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let place = |controller: &str| -> Option<PathBuf> {
            let path = own.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
                names.split(',').any(|n| n == controller).then_some(path)
            })?;
            let parent = Path::new(ROOT)
                .join(controller)
                .join(path.trim_start_matches('/'));
            clear_leftovers(&parent);
            let mine = parent.join(format!("{PREFIX}{}", std::process::id()));
            std::fs::create_dir_all(&mine).ok()?;
            Some(mine)
        };
        Self {
            memory: place("memory"),
            pids: place("pids"),
            cpu: place("cpuacct"),
        }
    }

    /// This service's own folders, one per hierarchy.
    pub fn dirs(&self) -> Vec<PathBuf> {
        [&self.memory, &self.pids, &self.cpu]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// Whether turns get groups at all (for `barriers`).
    pub fn memory(&self) -> bool {
        self.memory.is_some()
    }

    pub fn pids(&self) -> bool {
        self.pids.is_some()
    }

    /// Whether a turn's CPU time is counted over all its processes.
    pub fn cpu(&self) -> bool {
        self.cpu.is_some()
    }

    /// Creates the groups of turn `name` with `limits`.
    pub fn create(&self, name: &str, limits: &Limits) -> std::io::Result<TurnGroups> {
        let mut groups = TurnGroups::default();
        if let Some(base) = &self.memory {
            let dir = base.join(name);
            std::fs::create_dir(&dir)?;
            groups.memory = Some(dir.clone());
            let bytes = (limits.memory_mb << 20).to_string();
            std::fs::write(dir.join("memory.limit_in_bytes"), &bytes)?;
            // No swap beyond the limit where swap accounting exists.
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), &bytes);
        }
        if let Some(base) = &self.pids {
            let dir = base.join(name);
            std::fs::create_dir(&dir)?;
            groups.pids = Some(dir.clone());
            std::fs::write(dir.join("pids.max"), limits.pids.to_string())?;
        }
        if let Some(base) = &self.cpu {
            let dir = base.join(name);
            std::fs::create_dir(&dir)?;
            groups.cpu = Some(dir);
        }
        Ok(groups)
    }

    /// Removes this service's own groups (at shutdown; they are empty by then).
    pub fn remove(&self) {
        for dir in [&self.memory, &self.pids, &self.cpu].into_iter().flatten() {
            empty_and_remove(dir);
        }
    }
}

/// The groups of one turn.
#[derive(Debug, Default)]
pub struct TurnGroups {
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
}

impl TurnGroups {
    /// The `cgroup.procs` files the turn leader writes itself into.
    pub fn procs(&self) -> Vec<PathBuf> {
        [&self.memory, &self.pids, &self.cpu]
            .into_iter()
            .flatten()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// The file that counts the turn's CPU time in nanoseconds, all its processes together.
    pub fn cpu_usage(&self) -> Option<PathBuf> {
        self.cpu.as_ref().map(|d| d.join("cpuacct.usage"))
    }

    /// The limit the turn ran into, if its groups saw one.
    pub fn hit(&self) -> Option<Resource> {
        let count = |dir: &Option<PathBuf>, file: &str, key: &str| -> u64 {
            dir.as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
                .and_then(|text| {
                    text.lines().find_map(|l| {
                        let (k, v) = l.split_once(' ')?;
                        (k == key).then(|| v.trim().parse().ok()).flatten()
                    })
                })
                .unwrap_or(0)
        };
        if count(&self.memory, "memory.oom_control", "oom_kill") > 0 {
            return Some(Resource::Memory);
        }
        if count(&self.pids, "pids.events", "max") > 0 {
            return Some(Resource::Pids);
        }
        None
    }
}

impl Drop for TurnGroups {
    /// Kills what is left in the groups and removes them.
    fn drop(&mut self) {
        for dir in [&self.memory, &self.pids, &self.cpu].into_iter().flatten() {
            empty_and_remove(dir);
        }
    }
}

/// Empties and removes the groups of services that are no longer running under `parent`.
fn clear_leftovers(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.windows(12).any(|w| w == b"skill-runner"));
        if !alive || pid == std::process::id() {
            empty_and_remove(&entry.path());
        }
    }
}

/// Kills every process in the group `dir` and its subgroups, then removes them.
pub fn empty_and_remove(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                empty_and_remove(&entry.path());
            }
        }
    }
    // A killed process leaves the group once it is reaped; a few tries cover that moment.
    for _ in 0..50 {
        let members = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in members.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    tracing::warn!(group = %dir.display(), "cannot remove a turn's cgroup");
}
