//! Filesystem confinement of a turn with Landlock: what the kernel lets a turn's processes
//! touch, whatever they run.
//!
//! A confined process may write its run's workspace (and the few devices programs need) and
//! read and execute the system and the paths its engine needs; nothing else exists for it: not
//! the database, other runs, uploads, the skills dir, the service's working directory or the
//! agent home. `/proc` is not readable as a whole (any process's `/proc/<pid>/environ`, with its
//! engine key, would be), only the turn leader's own `/proc/<pid>`, granted from inside the
//! child before `exec` (see [`crate::sys::confine`]). Signals and abstract UNIX
//! sockets are scoped to the turn, so it cannot signal or connect to anything outside it.
//! Rules apply to everything the turn starts, and cannot be lifted.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, Scope,
};

/// The newest Landlock ABI this service knows the rules of; older kernels enforce what they can.
const ABI_USED: ABI = ABI::V6;

/// `SKILL_RUNNER_SANDBOX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// Confine where the kernel supports it, and warn once where it does not.
    Auto,
    /// Refuse to start without confinement.
    Required,
    /// Run unconfined (an explicit choice).
    Off,
}

impl SandboxMode {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "required" => Some(Self::Required),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}

/// Whether turns are confined, as reported by the management API and run status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum SandboxStatus {
    Landlock,
    /// `auto` on a kernel without Landlock.
    Unavailable,
    Off,
}

impl SandboxStatus {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which mechanism holds each barrier around a turn on this host (`sandbox_status` reports
/// them with the engines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Barriers {
    /// What a turn may read and write: `landlock` or `none`.
    pub files: &'static str,
    /// Where a turn may connect: `namespace` (its own network, doors to its allow-list through
    /// the egress proxy), `landlock-tcp+seccomp` (the service's network, but TCP `connect` only
    /// to its own egress proxy's port, no `bind`, no UDP, raw, packet or netlink sockets) or
    /// `none` (the service's network).
    pub network: &'static str,
    /// What ends a turn's processes, even after the service was killed: `pid-namespace`, or
    /// `process-group` (the turn leader as subreaper and the group reaper, which a
    /// double-forked daemon can outlive when the service is killed).
    pub processes: &'static str,
    /// `capabilities-dropped+seccomp` or `none`.
    pub privileges: &'static str,
    /// Which uid a turn runs under: `per-run-uid` (one of `SKILL_RUNNER_RUN_UIDS` each),
    /// `one-uid` (the one configured uid) or `service-uid` (the service's own).
    pub users: &'static str,
    /// What holds a turn's memory and processes: `cgroup-v2+rlimits`, `cgroup-v1+rlimits`,
    /// `cgroup-v1+v2+rlimits` (one in each), `rlimits` (memory by `RLIMIT_DATA`, processes by
    /// `RLIMIT_NPROC` per uid, not for uid 0) or `none`; file size and open files are rlimits, the workspace's size
    /// is watched.
    pub resources: &'static str,
    /// What counts a turn's CPU time against its cap: `cgroup-v2` or `cgroup-v1` (all its
    /// processes together), `rlimit` (`RLIMIT_CPU`, each process on its own) or `none`.
    pub cpu_time: &'static str,
    /// Where a turn's secrets are: `egress` (it holds placeholders; the egress puts the values
    /// in on requests to their hosts) or `lent` (it holds the values: no network of its own to
    /// open a model door in, or an engine whose login cannot work from a placeholder).
    pub secret: &'static str,
}

impl Barriers {
    /// `cgroups`: the cgroup version holding memory, processes and CPU time, each if any
    /// ([`super::cgroups::Cgroups::memory`]); `users`: the [`super::run_uids::RunUids::kind`]
    /// of the configured uids, if any.
    pub fn of(
        sandbox: SandboxStatus,
        isolate: bool,
        tcp_rules: bool,
        cgroups: [Option<super::cgroups::Version>; 3],
        users: Option<&'static str>,
    ) -> Self {
        use super::cgroups::Version::{V1, V2};
        let [memory, pids, cpu] = cgroups;
        let on = sandbox != SandboxStatus::Off;
        Self {
            files: if sandbox == SandboxStatus::Landlock {
                "landlock"
            } else {
                "none"
            },
            network: match (isolate, tcp_rules && sandbox == SandboxStatus::Landlock) {
                (true, _) => "namespace",
                (false, true) => "landlock-tcp+seccomp",
                (false, false) => "none",
            },
            processes: if isolate {
                "pid-namespace"
            } else {
                "process-group"
            },
            privileges: if on {
                "capabilities-dropped+seccomp"
            } else {
                "none"
            },
            users: users.filter(|_| on).unwrap_or("service-uid"),
            resources: match (on, memory, pids) {
                (false, _, _) => "none",
                (true, Some(V2), Some(V2)) => "cgroup-v2+rlimits",
                (true, Some(V1), Some(V1)) => "cgroup-v1+rlimits",
                (true, Some(_), Some(_)) => "cgroup-v1+v2+rlimits",
                (true, _, _) => "rlimits",
            },
            secret: match sandbox == SandboxStatus::Landlock && (isolate || tcp_rules) {
                true => "egress",
                false => "lent",
            },
            cpu_time: match (on, cpu) {
                (false, _) => "none",
                (true, Some(V2)) => "cgroup-v2",
                (true, Some(V1)) => "cgroup-v1",
                (true, None) => "rlimit",
            },
        }
    }
}

/// Whether the running kernel enforces Landlock (creates a ruleset, restricts nothing).
pub fn landlock_supported() -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .is_ok()
}

/// Whether the running kernel's Landlock restricts TCP by port (ABI 4, Linux 6.7).
pub fn landlock_tcp_supported() -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
        .and_then(|r| r.create())
        .is_ok()
}

/// Whether this process may give turns namespaces of their own (root, or `CAP_SYS_ADMIN`, and
/// no seccomp profile refusing `unshare`, as Docker's default one does). Tried in a thread of
/// its own, whose new network namespace goes away with it.
pub fn namespaces_supported() -> bool {
    std::thread::spawn(|| nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).is_ok())
        .join()
        .unwrap_or(false)
}

/// The sandbox a mode gives on a kernel that does or does not support Landlock; `required`
/// without support is an error (the problem with `SKILL_RUNNER_SANDBOX`).
pub fn decide(mode: SandboxMode, supported: bool) -> Result<SandboxStatus, String> {
    match (mode, supported) {
        (SandboxMode::Off, _) => Ok(SandboxStatus::Off),
        (_, true) => Ok(SandboxStatus::Landlock),
        (SandboxMode::Auto, false) => Ok(SandboxStatus::Unavailable),
        (SandboxMode::Required, false) => Err(
            "'required', but this kernel does not enforce Landlock (needs Linux 5.13 or later \
             with 'landlock' in the LSM list)"
                .to_owned(),
        ),
    }
}

/// The system a confined process reads and executes, whatever its engine.
pub const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// Read: device nodes (Bun-based CLIs list `/dev`).
const DEVICES: &str = "/dev";
/// Read and write: devices programs open for writing, and POSIX shared memory (opencode).
const DEVICES_WRITABLE: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Builds the rules: `writable` read+write, `readable` read+execute, plus the system and the
/// devices; with `tcp`, TCP too: no `bind`, `connect` only to those ports (a turn that shares
/// the service's network). Paths that do not exist are skipped. Built before `fork`, so the
/// child only adds its own `/proc/<pid>` and restricts itself.
pub fn ruleset(
    writable: &[PathBuf],
    readable: &[PathBuf],
    tcp: Option<&[u16]>,
) -> Result<RulesetCreated, RulesetError> {
    let all = AccessFs::from_all(ABI_USED);
    let read = AccessFs::from_read(ABI_USED);
    let mut ruleset = Ruleset::default().handle_access(all)?;
    if tcp.is_some() {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let mut ruleset = ruleset.scope(Scope::from_all(ABI_USED))?.create()?;
    for &port in tcp.unwrap_or_default() {
        ruleset = ruleset.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    let system = SYSTEM.iter().map(PathBuf::from);
    let rules = writable
        .iter()
        .cloned()
        .map(|p| (p, all))
        .chain(DEVICES_WRITABLE.iter().map(|p| (PathBuf::from(p), all)))
        .chain(readable.iter().cloned().chain(system).map(|p| (p, read)))
        .chain([(
            PathBuf::from(DEVICES),
            AccessFs::ReadFile | AccessFs::ReadDir,
        )]);
    for (path, access) in rules {
        if let Some(rule) = rule(&path, access) {
            ruleset = ruleset.add_rule(rule)?;
        }
    }
    Ok(ruleset)
}

/// A rule for `path` if it exists, with the rights that apply to its kind (a file cannot carry
/// directory rights).
pub fn rule(path: &Path, access: BitFlags<AccessFs>) -> Option<PathBeneath<PathFd>> {
    use nix::sys::stat::{SFlag, fstat};
    let fd = PathFd::new(path).ok()?;
    // The kind of what was opened (one path walk, not two).
    let kind = SFlag::from_bits_truncate(fstat(&fd).ok()?.st_mode) & SFlag::S_IFMT;
    let access = if kind == SFlag::S_IFDIR {
        access
    } else {
        access & AccessFs::from_file(ABI_USED)
    };
    Some(PathBeneath::new(fd, access))
}

/// What the turn leader's own `/proc/<pid>` is granted (runtimes read `/proc/self/...`).
pub fn own_proc_access() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_kernels_decide_the_sandbox() {
        use SandboxMode::*;
        assert_eq!(decide(Auto, true), Ok(SandboxStatus::Landlock));
        assert_eq!(decide(Required, true), Ok(SandboxStatus::Landlock));
        assert_eq!(decide(Auto, false), Ok(SandboxStatus::Unavailable));
        assert_eq!(decide(Off, true), Ok(SandboxStatus::Off));
        assert_eq!(decide(Off, false), Ok(SandboxStatus::Off));
        let refused = decide(Required, false).unwrap_err();
        assert!(refused.contains("does not enforce Landlock"), "{refused}");
        assert_eq!(refused.lines().count(), 1);
    }

    #[test]
    fn modes_parse() {
        assert_eq!(SandboxMode::parse(" Auto "), Some(SandboxMode::Auto));
        assert_eq!(SandboxMode::parse("required"), Some(SandboxMode::Required));
        assert_eq!(SandboxMode::parse("off"), Some(SandboxMode::Off));
        assert_eq!(SandboxMode::parse("on"), None);
    }
}
