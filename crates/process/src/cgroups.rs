//! A cgroup per turn, under the service's own cgroup: `<own>/skill-runner.<service pid>/<turn>`,
//! in cgroup v2 where the host has it and in the v1 hierarchies for what v2 does not hold here.
//!
//! Each of a turn's three measures is held where the host allows, v2 first:
//! - **memory** (`memory.max`, `memory.swap.max` 0; `memory.events` `oom_kill`), v2 where the
//!   `memory` controller is delegated to the service's group, else v1 `memory`
//!   (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`; `memory.oom_control`'s `oom_kill`);
//! - **processes** (`pids.max`; `pids.events` `max`), v2 where `pids` is delegated, else v1;
//! - **CPU time of all its processes**, v2's `cpu.stat` (kept by every v2 group, controller or
//!   not), else v1 `cpuacct`.
//!
//! A v2 group is made for every turn wherever the service may write the unified hierarchy (a
//! hybrid host's `/sys/fs/cgroup/unified` included): besides the CPU time, its `cgroup.kill`
//! ends everything in it at once. To delegate the v2 controllers, run the service in a cgroup
//! whose parent enabled them (`cgroup.subtree_control` with `+memory +pids`), e.g. a systemd
//! unit with `Delegate=yes`; the service enables them for its turns itself.
//!
//! The turn leader is born in the turn's v2 group and moves itself into its v1 groups before
//! it starts the command, so the command and everything it starts are counted, and a group
//! whose turn used more than its limit says so afterwards. When the service dies, its
//! [`super::Reaper`] empties its groups (killing their members: the crash clean-up where pid
//! namespaces are missing); at start-up the groups of services that are gone (the reaper was
//! killed too) are emptied and removed.

use std::path::{Path, PathBuf};

use super::limits::{Limits, Resource};

/// The hierarchies this service may create turn groups in: its own group in each.
#[derive(Debug, Clone, Default)]
pub struct Cgroups {
    hierarchies: Vec<Group>,
}

/// A cgroup version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Which of a turn's measures a group holds.
#[derive(Debug, Clone, Copy, Default)]
struct Holds {
    memory: bool,
    pids: bool,
    cpu: bool,
}

const V1_ROOT: &str = "/sys/fs/cgroup";
const PREFIX: &str = "skill-runner.";

impl Cgroups {
    /// Finds where this service may make turn groups, clears the groups that services no
    /// longer running left there, and creates this service's own.
    pub fn setup() -> Self {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let v2 = v2_place(&own, &mountinfo)
            .and_then(|parent| own_folder(&parent))
            .map(|dir| Group {
                holds: Holds {
                    memory: delegate(&dir, "memory"),
                    pids: delegate(&dir, "pids"),
                    cpu: true,
                },
                dir,
                version: Version::V2,
            });
        let held = v2.as_ref().map(|g| g.holds).unwrap_or_default();
        let mut hierarchies: Vec<Group> = v2.into_iter().collect();
        // What v2 does not hold, a v1 hierarchy of its own may.
        for controller in ["memory", "pids", "cpuacct"] {
            let holds = Holds {
                memory: controller == "memory",
                pids: controller == "pids",
                cpu: controller == "cpuacct",
            };
            let taken = (holds.memory && held.memory)
                || (holds.pids && held.pids)
                || (holds.cpu && held.cpu);
            let place = (!taken)
                .then(|| v1_place(&own, controller))
                .flatten()
                .and_then(|parent| own_folder(&parent));
            hierarchies.extend(place.map(|dir| Group {
                dir,
                version: Version::V1,
                holds,
            }));
        }
        Self { hierarchies }
    }

    /// This service's own folders, one per hierarchy.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.hierarchies.iter().map(|h| h.dir.clone()).collect()
    }

    /// The cgroup version holding a turn's memory; `None`: no cgroup does (an rlimit holds it).
    pub fn memory(&self) -> Option<Version> {
        self.version_holding(|h| h.memory)
    }

    /// The cgroup version counting a turn's processes, as [`Cgroups::memory`].
    pub fn pids(&self) -> Option<Version> {
        self.version_holding(|h| h.pids)
    }

    /// The cgroup version counting a turn's CPU time over all its processes, as
    /// [`Cgroups::memory`].
    pub fn cpu(&self) -> Option<Version> {
        self.version_holding(|h| h.cpu)
    }

    fn version_holding(&self, which: impl Fn(&Holds) -> bool) -> Option<Version> {
        let h = self.hierarchies.iter().find(|h| which(&h.holds))?;
        Some(h.version)
    }

    /// Creates the groups of turn `name` with `limits`.
    pub fn create(&self, name: &str, limits: &Limits) -> std::io::Result<TurnGroups> {
        let mut groups = TurnGroups::default();
        for hierarchy in &self.hierarchies {
            let group = Group {
                dir: hierarchy.dir.join(name),
                ..hierarchy.clone()
            };
            std::fs::create_dir(&group.dir)?;
            // Pushed first: a failed write below still removes the group.
            groups.groups.push(group.clone());
            group.limit(limits)?;
        }
        Ok(groups)
    }

    /// Removes this service's own groups (at shutdown; they are empty by then).
    pub fn remove(&self) {
        for hierarchy in &self.hierarchies {
            empty_and_remove(&hierarchy.dir);
        }
    }
}

/// The groups of one turn.
#[derive(Debug, Default)]
pub struct TurnGroups {
    groups: Vec<Group>,
}

/// A group in one hierarchy: the service's own, or a turn's under it.
#[derive(Debug, Clone)]
struct Group {
    dir: PathBuf,
    version: Version,
    holds: Holds,
}

impl Group {
    fn limit(&self, limits: &Limits) -> std::io::Result<()> {
        let write = |file: &str, value: String| std::fs::write(self.dir.join(file), value);
        if self.holds.memory {
            let bytes = (limits.memory_mb << 20).to_string();
            match self.version {
                Version::V1 => {
                    write("memory.limit_in_bytes", bytes.clone())?;
                    // No swap beyond the limit where swap accounting exists.
                    let _ = write("memory.memsw.limit_in_bytes", bytes);
                }
                Version::V2 => {
                    write("memory.max", bytes)?;
                    // No swap at all where swap accounting exists.
                    let _ = write("memory.swap.max", "0".to_owned());
                }
            }
        }
        if self.holds.pids {
            write("pids.max", limits.pids.to_string())?;
        }
        Ok(())
    }

    /// The value of `key` in the flat-keyed file `file` of this group (0 when missing).
    fn count(&self, file: &str, key: &str) -> u64 {
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|text| keyed(&text, key))
            .unwrap_or(0)
    }
}

impl TurnGroups {
    /// The files the turn leader writes itself (`0`, its one thread) into: each v1 group's
    /// `tasks`. Moving one thread that names itself does not take the kernel's
    /// `cgroup_threadgroup_rwsem` for writing, as a write to `cgroup.procs` does, which waits
    /// for an RCU grace period (13 ms a turn measured on this hybrid host, 0.5 ms through
    /// `tasks`). The leader is single-threaded there, so the thread is the whole process.
    pub fn tasks(&self) -> Vec<PathBuf> {
        self.groups
            .iter()
            .filter(|g| g.version == Version::V1)
            .map(|g| g.dir.join("tasks"))
            .collect()
    }

    /// The v2 group the leader is born in (`clone3` with `CLONE_INTO_CGROUP`): v2 moves only
    /// whole processes, through that same lock, and a process created in its group is never
    /// moved.
    pub fn birthplace(&self) -> Option<PathBuf> {
        self.groups
            .iter()
            .find(|g| g.version == Version::V2)
            .map(|g| g.dir.clone())
    }

    /// What counts the CPU time of all the turn's processes, where a group does.
    pub fn cpu_counter(&self) -> Option<CpuCounter> {
        let group = self.groups.iter().find(|g| g.holds.cpu)?;
        Some(CpuCounter(group.clone()))
    }

    /// The limit the turn ran into, if its groups saw one.
    pub fn hit(&self) -> Option<Resource> {
        let oom_killed = |g: &Group| match g.version {
            Version::V1 => g.count("memory.oom_control", "oom_kill") > 0,
            Version::V2 => g.count("memory.events", "oom_kill") > 0,
        };
        if self.groups.iter().any(|g| g.holds.memory && oom_killed(g)) {
            return Some(Resource::Memory);
        }
        self.groups
            .iter()
            .any(|g| g.holds.pids && g.count("pids.events", "max") > 0)
            .then_some(Resource::Pids)
    }
}

/// The CPU time counter of a turn's group.
#[derive(Debug, Clone)]
pub struct CpuCounter(Group);

impl CpuCounter {
    /// The CPU time of all the turn's processes so far, in nanoseconds (blocking).
    pub fn ns(&self) -> u64 {
        let group = &self.0;
        match group.version {
            Version::V1 => std::fs::read_to_string(group.dir.join("cpuacct.usage"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0),
            Version::V2 => group.count("cpu.stat", "usage_usec").saturating_mul(1000),
        }
    }
}

impl Drop for TurnGroups {
    /// Kills what is left in the groups and removes them.
    fn drop(&mut self) {
        for group in &self.groups {
            empty_and_remove(&group.dir);
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file (`key value` per line).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The service's own group in the unified (v2) hierarchy: where `cgroup2` is mounted, plus the
/// path of the `0::` line of `/proc/self/cgroup`.
fn v2_place(own: &str, mountinfo: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    let mount = mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        (fs.split(' ').next() == Some("cgroup2")).then(|| mount.split(' ').nth(4))?
    })?;
    Some(Path::new(mount).join(path.trim_start_matches('/')))
}

/// The service's own group in the v1 hierarchy of `controller`.
fn v1_place(own: &str, controller: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names.split(',').any(|n| n == controller).then_some(path)
    })?;
    Some(
        Path::new(V1_ROOT)
            .join(controller)
            .join(path.trim_start_matches('/')),
    )
}

/// Clears what gone services left under `parent` and makes this service's folder there.
fn own_folder(parent: &Path) -> Option<PathBuf> {
    clear_leftovers(parent);
    let mine = parent.join(format!("{PREFIX}{}", std::process::id()));
    std::fs::create_dir_all(&mine).ok()?;
    Some(mine)
}

/// Enables v2 `controller` for the turn groups under `dir`, where it was delegated to it.
fn delegate(dir: &Path, controller: &str) -> bool {
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    offered.split_whitespace().any(|c| c == controller)
        && std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}")).is_ok()
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
    // A v2 group ends all its members at once (kernels since 5.14).
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_hierarchy_is_found_where_cgroup2_is_mounted() {
        let own = "4:memory:/box/a\n0::/box/b\n";
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_place(own, hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified/box/b"))
        );
        let pure = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            v2_place("0::/\n", pure),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        let v1_only = "35 30 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(v2_place(own, v1_only), None);
        assert_eq!(
            v1_place(own, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/box/a"))
        );
        assert_eq!(v1_place(own, "pids"), None);
    }

    /// The files a turn's groups are limited, read and measured through, in each version. The
    /// kernel's side (that `memory.max` holds) needs a host whose v2 delegates `memory` and
    /// `pids`, which this project's machines do not; this checks what the service writes and
    /// how it reads what the kernel reports.
    #[test]
    fn each_version_is_limited_and_read_through_its_own_files() {
        let limits = Limits {
            memory_mb: 256,
            pids: 64,
            ..Limits::default()
        };
        let all = Holds {
            memory: true,
            pids: true,
            cpu: true,
        };
        for (version, oom_file, cpu_file, cpu_text, cpu_ns) in [
            (
                Version::V2,
                "memory.events",
                "cpu.stat",
                "usage_usec 1500\nuser_usec 1000\n",
                1_500_000,
            ),
            (
                Version::V1,
                "memory.oom_control",
                "cpuacct.usage",
                "1500000\n",
                1_500_000,
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let group = Group {
                dir: dir.path().to_owned(),
                version,
                holds: all,
            };
            group.limit(&limits).unwrap();
            let read = |file: &str| std::fs::read_to_string(dir.path().join(file)).unwrap();
            match version {
                Version::V2 => {
                    assert_eq!(read("memory.max"), "268435456");
                    assert_eq!(read("memory.swap.max"), "0");
                }
                Version::V1 => {
                    assert_eq!(read("memory.limit_in_bytes"), "268435456");
                    assert_eq!(read("memory.memsw.limit_in_bytes"), "268435456");
                }
            }
            assert_eq!(read("pids.max"), "64");
            let turn = TurnGroups {
                groups: vec![group.clone()],
            };
            assert_eq!(turn.hit(), None);
            std::fs::write(dir.path().join(cpu_file), cpu_text).unwrap();
            assert_eq!(turn.cpu_counter().unwrap().ns(), cpu_ns);
            std::fs::write(dir.path().join("pids.events"), "max 3\n").unwrap();
            assert_eq!(turn.hit(), Some(Resource::Pids));
            std::fs::write(dir.path().join(oom_file), "oom 1\noom_kill 1\n").unwrap();
            assert_eq!(turn.hit(), Some(Resource::Memory));
            // Not a cgroup: dropping the groups must not try to remove the temporary folder.
            std::mem::forget(turn);
        }
    }

    #[test]
    fn flat_keyed_files_are_read_by_key() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "max"), Some(3));
        assert_eq!(
            keyed("usage_usec 3987\nuser_usec 3987\n", "usage_usec"),
            Some(3987)
        );
        assert_eq!(keyed(events, "missing"), None);
    }
}
