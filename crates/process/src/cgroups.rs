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
//! A turn's groups outlive it when it left them clean: nothing in them, no subgroup, no limit
//! reached, and at most [`REUSABLE_CHARGE`] of memory still charged. The next turn takes them
//! (with its own limits written) instead of new ones: making and removing three groups cost
//! about as much of the cores as the rest of a short turn's barriers, most of it in kernel
//! workers after the removal. Their CPU time is counted from where the new turn found it.
//!
//! The turn leader is born in the turn's v2 group and moves itself into its v1 groups before
//! it starts the command, so the command and everything it starts are counted, and a group
//! whose turn used more than its limit says so afterwards. When the service dies, its
//! [`super::Reaper`] empties its groups (killing their members: the crash clean-up where pid
//! namespaces are missing); at start-up the groups of services that are gone (the reaper was
//! killed too) are emptied and removed.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::limits::{Limits, Resource};

/// The hierarchies this service may create turn groups in: its own group in each.
#[derive(Debug, Clone, Default)]
pub struct Cgroups {
    hierarchies: Vec<Group>,
    /// Groups that ended turns left clean, for the next turns.
    idle: Arc<Mutex<Vec<Vec<Group>>>>,
}

/// Memory a turn's group may still be charged with once its processes are gone (kernel
/// objects and cache pages they left; reclaimed under pressure) and be taken by the next turn.
/// Above it the group is removed, so the next turn is not charged with what this one left.
pub const REUSABLE_CHARGE: u64 = 2 << 20;

/// Clean groups kept for the next turns at most: more turns than this never run together.
const IDLE_MAX: usize = 64;

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
        Self {
            hierarchies,
            idle: Arc::default(),
        }
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

    /// The groups of a new turn with `limits`: clean ones an ended turn left, or new ones
    /// named `name`.
    pub fn create(&self, name: &str, limits: &Limits) -> std::io::Result<TurnGroups> {
        let idle = self.idle.lock().expect("idle groups").pop();
        if let Some(groups) = idle {
            let mut turn = TurnGroups {
                groups,
                cpu_base: 0,
                idle: Some(self.idle.clone()),
            };
            if turn.groups.iter().all(|g| g.limit(limits).is_ok()) {
                turn.cpu_base = turn.cpu_counter().map_or(0, |c| c.0.ns());
                return Ok(turn);
            }
            // A limit below what the group still holds: a new group instead.
            turn.idle = None;
        }
        let mut turn = TurnGroups {
            groups: Vec::new(),
            cpu_base: 0,
            idle: Some(self.idle.clone()),
        };
        for hierarchy in &self.hierarchies {
            let group = Group {
                dir: hierarchy.dir.join(name),
                ..hierarchy.clone()
            };
            std::fs::create_dir(&group.dir)?;
            // Pushed first: a failed write below still removes the group.
            turn.groups.push(group.clone());
            group.limit(limits)?;
        }
        Ok(turn)
    }

    /// Removes this service's own groups (at shutdown; they are empty by then).
    pub fn remove(&self) {
        for hierarchy in &self.hierarchies {
            empty_and_remove(&hierarchy.dir);
        }
    }
}

/// The groups of one turn.
#[derive(Debug)]
pub struct TurnGroups {
    groups: Vec<Group>,
    /// The CPU time the groups had counted before this turn (earlier turns').
    cpu_base: u64,
    /// Where the groups go back when the turn leaves them clean; `None`: they are removed.
    idle: Option<Arc<Mutex<Vec<Vec<Group>>>>>,
}

/// A group in one hierarchy: the service's own, or a turn's under it.
#[derive(Debug, Clone)]
struct Group {
    dir: PathBuf,
    version: Version,
    holds: Holds,
}

impl Group {
    /// Writes `limits`, over whatever an earlier turn's were.
    fn limit(&self, limits: &Limits) -> std::io::Result<()> {
        let write = |file: &str, value: String| std::fs::write(self.dir.join(file), value);
        if self.holds.memory {
            let bytes = (limits.memory_mb << 20).to_string();
            match self.version {
                Version::V1 => {
                    // The memory limit may not exceed the memory-and-swap one: that one is
                    // raised first, for a reused group whose last turn had a lower limit.
                    let _ = write("memory.memsw.limit_in_bytes", "-1".to_owned());
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

    /// The CPU time this group has counted, in nanoseconds.
    fn ns(&self) -> u64 {
        match self.version {
            Version::V1 => std::fs::read_to_string(self.dir.join("cpuacct.usage"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0),
            Version::V2 => self.count("cpu.stat", "usage_usec").saturating_mul(1000),
        }
    }

    /// Whether a memory limit ended one of this group's processes.
    fn oom_killed(&self) -> bool {
        match self.version {
            Version::V1 => self.count("memory.oom_control", "oom_kill") > 0,
            Version::V2 => self.count("memory.events", "oom_kill") > 0,
        }
    }

    /// Whether the process limit refused a fork in this group.
    fn pids_reached(&self) -> bool {
        self.count("pids.events", "max") > 0
    }

    /// Whether nothing of the turn is left in this group (its processes end with the turn's
    /// pid namespace, or with the turn leader's kill of its tree).
    fn vacant(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).is_ok_and(|m| m.trim().is_empty())
    }

    /// Whether the next turn may take this group as its own: nothing left in it, without
    /// subgroups (a cgroup folder links once more for each), no limit reached and little
    /// memory charged. A group something was left in is removed rather than emptied and
    /// reused: here (kernel 6.18), once a v2 group's `cgroup.kill` had been written, every
    /// process later born in it (`clone3` into it, as turn leaders start) was killed at once.
    fn clean(&self) -> bool {
        let charged = |file: &str| {
            std::fs::read_to_string(self.dir.join(file))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        self.vacant()
            && std::fs::metadata(&self.dir).is_ok_and(|m| m.nlink() == 2)
            && !(self.holds.memory && self.oom_killed())
            && !(self.holds.pids && self.pids_reached())
            && (!self.holds.memory
                || match self.version {
                    Version::V1 => charged("memory.usage_in_bytes"),
                    Version::V2 => charged("memory.current"),
                }
                .is_some_and(|bytes| bytes <= REUSABLE_CHARGE))
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
        Some(CpuCounter(group.clone(), self.cpu_base))
    }

    /// The limit the turn ran into, if its groups saw one. Reused groups never saw one: a
    /// group whose turn reached a limit is removed ([`Group::clean`]).
    pub fn hit(&self) -> Option<Resource> {
        if self.groups.iter().any(|g| g.holds.memory && g.oom_killed()) {
            return Some(Resource::Memory);
        }
        self.groups
            .iter()
            .any(|g| g.holds.pids && g.pids_reached())
            .then_some(Resource::Pids)
    }
}

/// The CPU time counter of a turn's group, and what it had counted before the turn.
#[derive(Debug, Clone)]
pub struct CpuCounter(Group, u64);

impl CpuCounter {
    /// The CPU time of all the turn's processes so far, in nanoseconds (blocking).
    pub fn ns(&self) -> u64 {
        self.0.ns().saturating_sub(self.1)
    }
}

impl Drop for TurnGroups {
    /// Keeps the groups for the next turn when they are clean, else kills what is left in
    /// them and removes them.
    fn drop(&mut self) {
        if let Some(idle) = self.idle.take()
            && self.groups.iter().all(Group::clean)
        {
            let mut idle = idle.lock().expect("idle groups");
            if idle.len() < IDLE_MAX {
                idle.push(std::mem::take(&mut self.groups));
                return;
            }
        }
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
                cpu_base: 0,
                idle: None,
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

    /// This process's own groups, each with a folder of `name` made under it, in the real
    /// hierarchies (named apart from the service's, which services clear when they start);
    /// `None` where this host or user may not make groups.
    fn test_hierarchies(name: &str) -> Option<Cgroups> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mut hierarchies = Vec::new();
        let places = [
            (v2_place(&own, &mountinfo), Version::V2, "cpu"),
            (v1_place(&own, "memory"), Version::V1, "memory"),
            (v1_place(&own, "pids"), Version::V1, "pids"),
        ];
        for (place, version, holds) in places {
            let dir = place?.join(name);
            std::fs::create_dir(&dir).ok()?;
            let holds = Holds {
                memory: holds == "memory",
                pids: holds == "pids",
                cpu: holds == "cpu",
            };
            hierarchies.push(Group {
                dir,
                version,
                holds,
            });
        }
        Some(Cgroups {
            hierarchies,
            idle: Arc::default(),
        })
    }

    /// Runs `script` in `turn`'s groups to its end, as a turn leader would be placed.
    fn run_in(turn: &TurnGroups, script: &str) {
        let mut places: Vec<String> = turn
            .tasks()
            .iter()
            .map(|t| t.display().to_string())
            .collect();
        places.extend(
            turn.birthplace()
                .map(|d| d.join("cgroup.procs").display().to_string()),
        );
        let status = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "for f in {}; do echo $$ > $f || exit 9; done; {script}",
                    places.join(" ")
                ),
            ])
            .status()
            .unwrap();
        assert_ne!(status.code(), Some(9), "cannot join the groups");
    }

    /// Groups an ended turn left clean serve the next turn, with that turn's limits and its
    /// CPU time counted from zero; groups that reached a limit, kept a process or grew a
    /// subgroup are removed instead.
    #[test]
    fn clean_groups_serve_the_next_turn_and_others_are_removed() {
        let name = format!("pool-test.{}", std::process::id());
        let Some(cgroups) = test_hierarchies(&name) else {
            eprintln!("no writable cgroup hierarchies here: nothing to check");
            return;
        };
        let small = Limits {
            memory_mb: 64,
            pids: 8,
            ..Limits::default()
        };
        let large = Limits {
            memory_mb: 256,
            pids: 64,
            ..Limits::default()
        };
        let dirs = |t: &TurnGroups| t.groups.iter().map(|g| g.dir.clone()).collect::<Vec<_>>();
        let read = |dir: &Path, file: &str| {
            std::fs::read_to_string(dir.join(file))
                .unwrap()
                .trim()
                .to_owned()
        };

        // A turn that used some CPU time.
        let first = cgroups.create("a", &small).unwrap();
        let first_dirs = dirs(&first);
        run_in(&first, "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done");
        let used = first.cpu_counter().unwrap().ns();
        assert!(used > 1_000_000, "{used} ns");
        drop(first);
        assert_eq!(
            cgroups.idle.lock().unwrap().len(),
            1,
            "kept for the next turn"
        );

        let second = cgroups.create("b", &large).unwrap();
        assert_eq!(dirs(&second), first_dirs, "the same groups");
        assert!(cgroups.idle.lock().unwrap().is_empty());
        let memory = second.groups.iter().find(|g| g.holds.memory).unwrap();
        assert_eq!(
            read(&memory.dir, "memory.limit_in_bytes"),
            (256u64 << 20).to_string()
        );
        let pids = second.groups.iter().find(|g| g.holds.pids).unwrap();
        assert_eq!(read(&pids.dir, "pids.max"), "64");
        assert!(
            second.cpu_counter().unwrap().ns() < used,
            "counted from this turn on"
        );
        // This turn reaches its process limit: its groups go.
        std::fs::write(pids.dir.join("pids.max"), "1").unwrap();
        run_in(&second, "true & wait");
        assert_eq!(second.hit(), Some(Resource::Pids));
        drop(second);
        assert!(cgroups.idle.lock().unwrap().is_empty());
        assert!(first_dirs.iter().all(|d| !d.exists()), "removed");

        // A subgroup, or a process left behind (killed), keeps a turn's groups from being
        // reused.
        let third = cgroups.create("c", &small).unwrap();
        assert_eq!(third.hit(), None);
        let memory = third
            .groups
            .iter()
            .find(|g| g.holds.memory)
            .unwrap()
            .dir
            .clone();
        std::fs::create_dir(memory.join("inner")).unwrap();
        let third_dirs = dirs(&third);
        drop(third);
        assert!(cgroups.idle.lock().unwrap().is_empty());
        assert!(third_dirs.iter().all(|d| !d.exists()), "removed");
        let fourth = cgroups.create("d", &small).unwrap();
        run_in(&fourth, "sleep 30 > /dev/null 2>&1 &");
        let fourth_dirs = dirs(&fourth);
        drop(fourth);
        assert!(cgroups.idle.lock().unwrap().is_empty());
        assert!(
            fourth_dirs.iter().all(|d| !d.exists()),
            "emptied and removed"
        );

        cgroups.remove();
        assert!(cgroups.hierarchies.iter().all(|h| !h.dir.exists()));
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
