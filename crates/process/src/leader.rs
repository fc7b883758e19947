//! The turn leader: the first process of every supervised turn, forked by the forkserver.
//!
//! It confines its one child (Landlock, applied before `exec` and inherited by everything the
//! child starts), then stays as a child subreaper: every descendant that is orphaned, including
//! one that called `setsid` to leave the process group, becomes its child. When the command
//! exits, the leader kills whatever is left of the tree and exits the way the command did, so
//! "the leader exited" always means "nothing of the turn is alive". On SIGTERM (the service's
//! cancel or timeout) it passes SIGTERM to the whole tree and SIGKILLs it after the grace
//! period; SIGHUP (the service died) kills the tree at once.
//!
//! It keeps no pipe open: once the command runs, its own stdin, stdout and stderr point at
//! `/dev/null`, so the service's log readers end when the last process of the turn does.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use nix::sys::resource::Resource;

use super::limits::Limits;
use super::{privileges, sandbox, sys};

/// What to run and how to confine it, as the service sends it to the forkserver
/// ([`super::forkserver`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LeaderArgs {
    /// Milliseconds between SIGTERM and SIGKILL of the tree.
    pub grace_ms: u64,
    /// Confine the command with Landlock.
    pub landlock: bool,
    /// Start in new pid and mount namespaces and a network namespace of its own: new for a turn
    /// with doors, else one the forkserver reuses ([`super::net_pool`]).
    pub isolate: bool,
    /// Take every privilege from the command ([`privileges`]).
    pub harden: bool,
    /// The unprivileged uid (and gid) the command runs as ([`super::run_uids`]); `None`: the
    /// service's.
    pub run_as: Option<u32>,
    /// The command's resource limits, `None`: none.
    pub limits: Option<Limits>,
    /// The files the leader writes itself into before the command starts: its v1 groups'
    /// `tasks`, and its v2 group's `cgroup.procs` where it could not be born there.
    pub cgroups: Vec<PathBuf>,
    /// The turn's v2 cgroup, which the forkserver creates the leader in.
    pub born_in: Option<PathBuf>,
    /// Whether a cgroup holds the memory limit (else `RLIMIT_DATA` does).
    pub memory_cgroup: bool,
    /// Whether a cgroup counts the turn's CPU time (else `RLIMIT_CPU` bounds each process).
    pub cpu_cgroup: bool,
    /// Whether a cgroup bounds the turn's processes (else `RLIMIT_NPROC` does, per uid).
    pub pids_cgroup: bool,
    /// The turn's own run folder: in its mount namespace, the folder that holds it (`runs/`)
    /// shows nothing else.
    pub own_folder: Option<PathBuf>,
    /// For a turn in the service's network: the only TCP ports it may connect to (its egress
    /// proxy's); it may bind none. `None`: TCP is not restricted.
    pub tcp_ports: Option<Vec<u16>>,
    /// Addresses to listen on inside the turn's network namespace (the turn's doors out, see
    /// [`crate::egress`]); the listeners go back to the service over the request's fourth
    /// descriptor, in this order, before the command starts.
    pub listen: Vec<std::net::SocketAddr>,
    /// Folders (or files) the command may read and write.
    pub writable: Vec<PathBuf>,
    /// Folders (or files) the command may read and execute.
    pub readable: Vec<PathBuf>,
    /// The command.
    pub argv: Vec<String>,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// The command's whole environment.
    pub env: Vec<(String, String)>,
}

/// Exit code when the command cannot be started (as a shell reports it).
pub const CANNOT_START: i32 = 127;

/// Runs the command to its end; never returns. When `parent` (the forkserver) dies, the leader
/// kills its tree at once (SIGHUP). `control` takes the listeners of [`LeaderArgs::listen`].
pub fn run(args: LeaderArgs, parent: Pid, control: Option<OwnedFd>) -> ! {
    let _ = nix::sys::prctl::set_child_subreaper(true);
    // A parent that died before this line is seen by the check after it. The parent's pid is
    // read from `/proc`, which counts in the service's pid namespace even when this process
    // is pid 1 of its own (where `getppid` answers 0).
    let armed = nix::sys::prctl::set_pdeathsig(Signal::SIGHUP);
    let ppid = super::proc_stat_fields_of("self").and_then(|f| f.get(1)?.parse().ok());
    if armed.is_err() || ppid != Some(parent.as_raw()) {
        eprintln!("skill-runner: the service exited before the turn started");
        std::process::exit(CANNOT_START);
    }
    if args.isolate
        && let Err(e) = set_up_namespaces(&args, control)
    {
        eprintln!("skill-runner: cannot set up the turn's namespaces: {e}");
        std::process::exit(CANNOT_START);
    }
    for procs in &args.cgroups {
        if let Err(e) = std::fs::write(procs, "0") {
            eprintln!("skill-runner: cannot join {}: {e}", procs.display());
            std::process::exit(CANNOT_START);
        }
    }
    // Blocked since the fork (the forkserver forks with them blocked), so none is missed; the
    // child unblocks them.
    let signals = signal_set();
    let _ = signals.thread_block();
    let child = match spawn(&args) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("skill-runner: cannot start '{}': {e}", args.argv[0]);
            std::process::exit(CANNOT_START);
        }
    };
    release_stdio();
    let grace = Duration::from_millis(args.grace_ms);
    let mut terminating = false;
    loop {
        if let Some(status) = reap(child) {
            kill_tree();
            finish(status);
        }
        match signals.wait() {
            Ok(Signal::SIGTERM | Signal::SIGINT) => {
                signal_tree(Signal::SIGTERM);
                if !terminating {
                    terminating = true;
                    std::thread::spawn(move || {
                        std::thread::sleep(grace);
                        let _ = kill(Pid::this(), Signal::SIGALRM);
                    });
                }
            }
            Ok(Signal::SIGHUP | Signal::SIGALRM) => signal_tree(Signal::SIGKILL),
            _ => {}
        }
    }
}

/// The signals the leader waits for. They must be blocked from its first instruction: as the
/// first process of a new pid namespace it is immune to a signal from outside that it neither
/// blocks nor handles, so a cancel's SIGTERM arriving while it sets the turn up would be
/// dropped, and the turn would run on until the SIGKILL after the grace period.
pub(crate) fn signal_set() -> SigSet {
    let mut signals = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGALRM,
    ] {
        signals.add(s);
    }
    signals
}

/// Sets up the turn's own network and mount namespaces: its doors, its own `/dev/shm`, and no
/// other run in sight.
fn set_up_namespaces(args: &LeaderArgs, control: Option<OwnedFd>) -> std::io::Result<()> {
    open_doors(&args.listen, control)?;
    make_mounts_private()?;
    // A data dir (or a skill) kept under /dev/shm would vanish under the turn's own: such a
    // turn shares the machine's /dev/shm (docs/security.md, *Limits*).
    let under_shm = (args.own_folder.iter())
        .chain(&args.writable)
        .chain(&args.readable)
        .any(|p| p.starts_with(SHM));
    if !under_shm {
        private_shm(args.limits.map_or(64, |l| l.memory_mb))?;
    }
    if let Some(own) = &args.own_folder {
        hide_siblings(own)?;
    }
    Ok(())
}

/// Brings up loopback in the turn's new network namespace, listens on each of `listen` and
/// hands the listeners to the service over `control`. A door-less turn has nothing to do here:
/// its namespace came from the forkserver's pool with loopback up ([`super::net_pool`]).
fn open_doors(listen: &[std::net::SocketAddr], control: Option<OwnedFd>) -> std::io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::os::fd::AsRawFd as _;
    if listen.is_empty() {
        return Ok(());
    }
    sys::loopback_up()?;
    let control = control.ok_or_else(|| std::io::Error::other("no channel for the listeners"))?;
    let listeners = listen
        .iter()
        .map(std::net::TcpListener::bind)
        .collect::<std::io::Result<Vec<_>>>()?;
    let fds: Vec<i32> = listeners.iter().map(|l| l.as_raw_fd()).collect();
    sendmsg::<()>(
        control.as_raw_fd(),
        &[std::io::IoSlice::new(b"L")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

fn spawn(args: &LeaderArgs) -> std::io::Result<Pid> {
    let mut command = sys::VforkCommand::new(&args.argv, &args.env, &args.cwd)?;
    sys::unblock_signals(&mut command);
    sys::die_with_parent(&mut command, Signal::SIGKILL);
    if args.landlock {
        let rules = sandbox::ruleset(&args.writable, &args.readable, args.tcp_ports.as_deref())
            .map_err(std::io::Error::other)?;
        sys::confine(&mut command, rules);
    }
    if let Some(limits) = args.limits {
        let uid = args
            .run_as
            .unwrap_or_else(|| nix::unistd::getuid().as_raw());
        // RLIMIT_NPROC binds no uid 0 process: no need to count root's tasks.
        let others = (!args.pids_cgroup && uid != 0).then(|| tasks_of(uid));
        sys::limit_resources(
            &mut command,
            rlimits(&limits, args.memory_cgroup, args.cpu_cgroup, others),
        );
    }
    if args.harden {
        let filter = privileges::filter(args.isolate).map_err(std::io::Error::other)?;
        sys::harden(&mut command, filter, args.run_as);
    }
    command.spawn()
}

/// The rlimits (soft, hard) of a command with `limits`: `RLIMIT_DATA`, `RLIMIT_CPU` and
/// `RLIMIT_NPROC` only where no cgroup holds memory, counts CPU time or bounds the processes of
/// the whole turn. The kernel counts `RLIMIT_NPROC` over every task of the uid, so the turn's
/// bound is its own limit on top of the `others` the uid runs when it starts (the service's
/// threads, other turns). `RLIMIT_CPU` sends `SIGXCPU` at the soft
/// limit and `SIGKILL` a second later, so the turn's end names its cause.
fn rlimits(
    limits: &Limits,
    memory_cgroup: bool,
    cpu_cgroup: bool,
    others: Option<u64>,
) -> Vec<(Resource, u64, u64)> {
    let mib = |n: u64| n.saturating_mul(1 << 20);
    let mut all = vec![
        (
            Resource::RLIMIT_FSIZE,
            mib(limits.file_mb),
            mib(limits.file_mb),
        ),
        (
            Resource::RLIMIT_NOFILE,
            limits.open_files,
            limits.open_files,
        ),
        (Resource::RLIMIT_CORE, 0, 0),
    ];
    if !memory_cgroup {
        let memory = mib(limits.memory_mb);
        all.push((Resource::RLIMIT_DATA, memory, memory));
    }
    if !cpu_cgroup {
        let cpu = limits.cpu_seconds;
        all.push((Resource::RLIMIT_CPU, cpu, cpu.saturating_add(1)));
    }
    if let Some(others) = others {
        let pids = limits.pids.saturating_add(others);
        all.push((Resource::RLIMIT_NPROC, pids, pids));
    }
    all
}

/// The tasks (threads included, as `RLIMIT_NPROC` counts them) of real uid `uid` in this
/// process's view of `/proc`.
fn tasks_of(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|status| {
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
            };
            (field("Uid:")? == u64::from(uid)).then(|| field("Threads:"))?
        })
        .sum()
}

const SHM: &str = "/dev/shm";

/// Keeps what the turn mounts in its own mount namespace (new with its pid namespace): nothing
/// propagates back to the service's.
fn make_mounts_private() -> nix::Result<()> {
    use nix::mount::{MsFlags, mount};
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
}

/// Gives the turn a `/dev/shm` of its own, a tmpfs of at most `size_mb`: nothing one turn
/// leaves there reaches another or stays behind.
fn private_shm(size_mb: u64) -> nix::Result<()> {
    use nix::mount::{MsFlags, mount};
    if !std::path::Path::new(SHM).is_dir() {
        return Ok(());
    }
    mount(
        Some("tmpfs"),
        SHM,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("size={size_mb}m,mode=1777").as_str()),
    )
}

/// Covers the folder that holds `own` (the other runs' folders) with an empty tmpfs in the
/// turn's mount namespace and puts `own` back in it: a socket file in another run's workspace,
/// which Landlock does not guard (it does not check `connect`), cannot even be named.
fn hide_siblings(own: &std::path::Path) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, open};
    use nix::mount::{MsFlags, mount};
    use nix::sys::stat::Mode;
    use std::os::fd::AsRawFd as _;
    let (Some(parent), Some(name)) = (own.parent(), own.file_name()) else {
        return Ok(());
    };
    // Opened before the cover hides it.
    let keep = open(
        own,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    mount(
        Some("tmpfs"),
        parent,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=64k,mode=0755"),
    )?;
    let place = parent.join(name);
    std::fs::create_dir(&place)?;
    let source = format!("/proc/self/fd/{}", keep.as_raw_fd());
    mount(
        Some(source.as_str()),
        &place,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )?;
    Ok(())
}

/// Points stdin, stdout and stderr at `/dev/null`, so only the turn holds the log pipes.
fn release_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// Reaps every child that has ended; returns the command's status once it has.
fn reap(command: Pid) -> Option<WaitStatus> {
    let mut ended = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return ended,
            Ok(status) if status.pid() == Some(command) => ended = Some(status),
            Ok(_) | Err(_) => {}
        }
    }
}

/// Exits as the command did: with its code, or by its signal.
fn finish(status: WaitStatus) -> ! {
    match status {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, signal, _) => sys::die_by(signal),
        _ => std::process::exit(CANNOT_START),
    }
}

/// Kills every descendant and reaps them all, until this process has no child left.
fn kill_tree() {
    // As a subreaper, every descendant left once the command ended hangs below a child of this
    // process: with no child left there is nothing to look for in /proc (the usual case).
    while !matches!(
        waitpid(None, Some(WaitPidFlag::WNOHANG)),
        Err(Errno::ECHILD)
    ) {
        signal_tree(Signal::SIGKILL);
        let _ = waitpid(None, None);
    }
}

fn signal_tree(signal: Signal) {
    if Pid::this().as_raw() == 1 {
        // The first process of the turn's own pid namespace: every other process in it is
        // the turn's, and `kill(-1)` reaches them all (not this one).
        let _ = kill(Pid::from_raw(-1), signal);
        return;
    }
    for pid in descendants(Pid::this().as_raw()) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// Every live process below `root`, from `/proc`.
fn descendants(root: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        if let Some(ppid) = super::proc_stat_fields(pid).and_then(|f| f.get(1)?.parse().ok()) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = BTreeSet::new();
    let mut next = vec![root];
    while let Some(pid) = next.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if found.insert(child) {
                next.push(child);
            }
        }
    }
    found.into_iter().collect()
}
