//! The one place with `unsafe`: child set-up between `fork` and `exec`, the forkserver's
//! `fork`, taking ownership of descriptors received over a socket, and the allocator and code
//! pages of the service itself.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::Path;

use landlock::{RulesetCreated, RulesetCreatedAttr as _, RulesetStatus};
use nix::sys::signal::Signal;
use nix::unistd::{Pid, getppid};

use super::sandbox;

/// Makes the child die with `signal` when the thread that spawned it dies, so a crashed service
/// (or turn leader) leaves nothing behind.
pub fn die_with_parent(command: &mut impl PreExec, signal: Signal) {
    let parent = Pid::this();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid); it allocates nothing and takes no locks.
    #[allow(unsafe_code)]
    unsafe {
        command.step(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(io::Error::from)?;
            // The parent may have died between fork and prctl; then nobody would signal us.
            if getppid() != parent {
                return Err(io::Error::other("parent exited before the child started"));
            }
            Ok(())
        });
    }
}

/// Starts the child with no signal blocked (it inherits the spawner's mask otherwise).
pub fn unblock_signals(command: &mut impl PreExec) {
    // SAFETY: the closure only calls sigprocmask, which is async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        command.step(|| {
            nix::sys::signal::sigprocmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&nix::sys::signal::SigSet::empty()),
                None,
            )
            .map_err(io::Error::from)
        });
    }
}

/// Confines the child with `ruleset` plus read access to its own `/proc/<pid>`, which only the
/// child can name (`/proc/self` resolves to it there). A ruleset the kernel does not enforce
/// fails the start.
pub fn confine(command: &mut impl PreExec, ruleset: RulesetCreated) {
    // SAFETY: only the turn leader calls this, a single-threaded process, so allocating and
    // opening files between fork and exec cannot deadlock on a lock another thread held.
    #[allow(unsafe_code)]
    unsafe {
        command.step(move || {
            // The child's own duplicate of the ruleset's descriptor: a child that shares this
            // process's memory (`VforkCommand`) must leave the original here, to be closed.
            let mut rules = ruleset.try_clone()?;
            if let Some(own) = sandbox::rule(Path::new("/proc/self"), sandbox::own_proc_access()) {
                rules = rules.add_rule(own).map_err(io::Error::other)?;
            }
            let status = rules.restrict_self().map_err(io::Error::other)?;
            if status.ruleset == RulesetStatus::NotEnforced {
                return Err(io::Error::other(
                    "the kernel did not enforce the Landlock rules",
                ));
            }
            Ok(())
        });
    }
}

/// Takes every privilege from the child before it runs its program: its uid and gid when
/// `run_as` names others (supplementary groups dropped), all capabilities, `no_new_privs`, the
/// seccomp `filter` ([`super::privileges`]), and every descriptor above stderr that the
/// service did not mean to pass (whatever the service inherited from whoever started it) is
/// closed at `exec`.
pub fn harden(
    command: &mut impl PreExec,
    filter: &'static seccompiler::BpfProgram,
    run_as: Option<u32>,
) {
    // SAFETY: only the turn leader calls this, a single-threaded process, so the closure's
    // allocations between fork and exec cannot deadlock on a lock another thread held.
    #[allow(unsafe_code)]
    unsafe {
        command.step(move || {
            super::privileges::drop_capabilities(run_as)?;
            nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
            seccompiler::apply_filter(filter).map_err(io::Error::other)?;
            // Marked close-on-exec rather than closed: the standard library reports a failed
            // `exec` through a descriptor of its own, already close-on-exec.
            let marked = nix::libc::syscall(
                nix::libc::SYS_close_range,
                3 as nix::libc::c_uint,
                nix::libc::c_uint::MAX,
                nix::libc::CLOSE_RANGE_CLOEXEC as nix::libc::c_uint,
            );
            if marked < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sets the child's resource limits (soft, hard) before it runs its program.
pub fn limit_resources(
    command: &mut impl PreExec,
    limits: Vec<(nix::sys::resource::Resource, u64, u64)>,
) {
    // SAFETY: the closure only calls getrlimit and setrlimit, which are async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        command.step(move || {
            for &(resource, soft, hard) in &limits {
                // Never above the hard limit this process got: only raising it needs privilege.
                let (_, had) = nix::sys::resource::getrlimit(resource).map_err(io::Error::from)?;
                let hard = hard.min(had);
                nix::sys::resource::setrlimit(resource, soft.min(hard), hard)
                    .map_err(io::Error::from)?;
            }
            Ok(())
        });
    }
}

/// A command whose child runs set-up steps between its creation and `exec`: the standard
/// library's (a `fork`ed child), or the turn leader's [`VforkCommand`].
#[allow(unsafe_code)]
pub trait PreExec {
    /// Adds a step, run in the child in the order added; an error stops the start.
    ///
    /// # Safety
    ///
    /// As [`std::os::unix::process::CommandExt::pre_exec`]: `step` runs in the child, where
    /// only what the process that starts it allows is safe (see each implementation).
    unsafe fn step(&mut self, step: impl FnMut() -> io::Result<()> + Send + Sync + 'static);
}

#[allow(unsafe_code)]
impl PreExec for std::process::Command {
    unsafe fn step(&mut self, step: impl FnMut() -> io::Result<()> + Send + Sync + 'static) {
        // SAFETY: the caller's contract is `pre_exec`'s own.
        unsafe {
            self.pre_exec(step);
        }
    }
}

/// A command started the way `posix_spawn` starts one: its child runs in this process's
/// memory, on a stack of its own, while this process waits, until it calls `exec` (or fails
/// and exits). `fork` copied the turn leader's page tables, and every page either process
/// wrote afterwards was copied once more, and torn down again at the child's `exec`: the
/// largest share of a turn leader's CPU time. Set-up steps ([`PreExec`]) run in the child as
/// they would after `fork`, and their errors come back whole, not as a bare `errno`.
///
/// Only the turn leader uses it: a single-threaded process, so that the steps may allocate
/// (no other thread can hold the allocator's lock, and this one is stopped meanwhile).
pub struct VforkCommand {
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    /// Where `exec` looks for the program, in order, as `execvp` does with the command's
    /// own `PATH`.
    candidates: Vec<CString>,
    steps: Vec<Box<dyn FnMut() -> io::Result<()>>>,
}

/// The child's stack: set-up steps run Rust code (Landlock's rules, error messages), far less
/// than this.
const CHILD_STACK: usize = 256 * 1024;

/// Where `execvp` looks when `PATH` is not set.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

impl VforkCommand {
    /// `argv[0]` is the program, looked up on the `PATH` of `env` when it names no folder.
    /// A variable set twice in `env` keeps its last value, and the environment is sorted by
    /// name, as the standard library's `Command::envs` makes it.
    pub fn new(argv: &[String], env: &[(String, String)], cwd: &Path) -> io::Result<Self> {
        use std::os::unix::ffi::OsStrExt as _;
        let c = |s: &[u8]| {
            CString::new(s).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an argument, a variable or the folder holds a NUL byte",
                )
            })
        };
        let Some(program) = argv.first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no program"));
        };
        let env: std::collections::BTreeMap<&str, &str> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let candidates = if program.contains('/') {
            vec![c(program.as_bytes())?]
        } else {
            let path = env.get("PATH").copied().unwrap_or(DEFAULT_PATH);
            path.split(':')
                .map(|dir| match dir {
                    "" => c(program.as_bytes()),
                    dir => c(format!("{dir}/{program}").as_bytes()),
                })
                .collect::<io::Result<_>>()?
        };
        Ok(Self {
            argv: argv
                .iter()
                .map(|a| c(a.as_bytes()))
                .collect::<io::Result<_>>()?,
            env: env
                .iter()
                .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
                .collect::<io::Result<_>>()?,
            cwd: c(cwd.as_os_str().as_bytes())?,
            candidates,
            steps: Vec::new(),
        })
    }

    /// Starts the child; returns once it runs the program, or with the reason it could not.
    pub fn spawn(mut self) -> io::Result<Pid> {
        let argv = null_terminated(&self.argv);
        let env = null_terminated(&self.env);
        let stack = ChildStack::new(CHILD_STACK)?;
        let mut child = Child {
            command: &mut self,
            argv: &argv,
            env: &env,
            failure: None,
        };
        // SAFETY: `CLONE_VM | CLONE_VFORK` is how `posix_spawn` starts a child: it runs
        // `start_child` on `stack` (its own, mapped for it, with a guard page below) in this
        // process's memory, and this thread sleeps until the child calls `exec` or exits, so
        // nothing here runs meanwhile. `child` and everything it points to outlives the call;
        // the child writes only `failure`, read once this thread is back. This process has
        // one thread (see the type's documentation): the child's allocations cannot meet a
        // lock another thread holds. Without `CLONE_FILES`, `CLONE_FS` or `CLONE_SIGHAND`,
        // the child's descriptors, folder and signal dispositions are its own.
        #[allow(unsafe_code)]
        let pid = unsafe {
            nix::libc::clone(
                start_child,
                stack.top(),
                nix::libc::CLONE_VM | nix::libc::CLONE_VFORK | nix::libc::SIGCHLD,
                (&mut child as *mut Child<'_>).cast(),
            )
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        let pid = Pid::from_raw(pid);
        if let Some(failure) = child.failure.take() {
            let _ = nix::sys::wait::waitpid(pid, None);
            return Err(failure);
        }
        Ok(pid)
    }
}

#[allow(unsafe_code)]
impl PreExec for VforkCommand {
    unsafe fn step(&mut self, step: impl FnMut() -> io::Result<()> + Send + Sync + 'static) {
        self.steps.push(Box::new(step));
    }
}

/// What the child of [`VforkCommand::spawn`] reads, and the one thing it writes back.
struct Child<'a> {
    command: &'a mut VforkCommand,
    argv: &'a [*const nix::libc::c_char],
    env: &'a [*const nix::libc::c_char],
    failure: Option<io::Error>,
}

impl Child<'_> {
    /// Sets the child up and runs the program: returns only why it could not.
    fn exec(&mut self) -> io::Error {
        use nix::errno::Errno;
        // SAFETY: plain system calls on pointers that outlive them: chdir reads a C string,
        // signal installs no handler code (the default disposition). Rust ignores SIGPIPE in
        // its own programs; the program gets the default back, as `std::process` gives it.
        #[allow(unsafe_code)]
        unsafe {
            if nix::libc::chdir(self.command.cwd.as_ptr()) < 0 {
                return io::Error::last_os_error();
            }
            nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_DFL);
        }
        for step in &mut self.command.steps {
            if let Err(e) = step() {
                return e;
            }
        }
        // As `execvp`: the next folder on a missing file (or one it may not run), the program
        // as a shell script when the kernel cannot run it, and "permission denied" when that
        // was the only reason found.
        let mut denied = false;
        for path in &self.command.candidates {
            let errno = self.execve(path.as_ptr(), self.argv);
            let errno = match errno {
                Errno::ENOEXEC => self.as_script(path),
                errno => errno,
            };
            match errno {
                Errno::EACCES => denied = true,
                Errno::ENOENT
                | Errno::ESTALE
                | Errno::ENOTDIR
                | Errno::ENODEV
                | Errno::ETIMEDOUT => {}
                errno => return errno.into(),
            }
        }
        if denied { Errno::EACCES } else { Errno::ENOENT }.into()
    }

    /// Runs `path` with `/bin/sh`, as `execvp` runs a file without a `#!` line.
    fn as_script(&self, path: &CString) -> nix::errno::Errno {
        let shell = c"/bin/sh";
        let mut argv = vec![shell.as_ptr(), path.as_ptr()];
        argv.extend_from_slice(&self.argv[1..]);
        self.execve(shell.as_ptr(), &argv)
    }

    fn execve(
        &self,
        path: *const nix::libc::c_char,
        argv: &[*const nix::libc::c_char],
    ) -> nix::errno::Errno {
        // SAFETY: `path` is a C string and `argv` and `env` are null-terminated arrays of C
        // strings, all alive until the call returns (it only returns on failure).
        #[allow(unsafe_code)]
        unsafe {
            nix::libc::execve(path, argv.as_ptr(), self.env.as_ptr());
        }
        nix::errno::Errno::last()
    }
}

/// The child's first and only frame of its own.
extern "C" fn start_child(child: *mut nix::libc::c_void) -> nix::libc::c_int {
    // SAFETY: `spawn` passes a `Child` it keeps alive, and sleeps while this runs.
    #[allow(unsafe_code)]
    let child = unsafe { &mut *child.cast::<Child<'_>>() };
    let failure = child.exec();
    child.failure = Some(failure);
    // SAFETY: ends the child without running this process's exit handlers, which belong to
    // the parent whose memory this is.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::_exit(super::leader::CANNOT_START)
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const nix::libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A child's stack: a private mapping with an inaccessible page below it, so that an overflow
/// faults instead of writing over this process's memory.
struct ChildStack {
    base: std::ptr::NonNull<nix::libc::c_void>,
    len: usize,
}

impl ChildStack {
    fn new(size: usize) -> io::Result<Self> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, mprotect};
        let guard = page_size();
        let len = size + guard;
        let nonzero = std::num::NonZeroUsize::new(len).ok_or_else(|| io::Error::other("empty"))?;
        // SAFETY: a new anonymous mapping overlaps nothing; the guard page is its own first
        // page, which nothing references.
        #[allow(unsafe_code)]
        unsafe {
            let base = mmap_anonymous(
                None,
                nonzero,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_STACK,
            )?;
            let stack = Self { base, len };
            mprotect(base, guard, ProtFlags::PROT_NONE)?;
            Ok(stack)
        }
    }

    /// The stack's top (it grows down), aligned as the ABI asks.
    fn top(&self) -> *mut nix::libc::c_void {
        let end = self.base.as_ptr() as usize + self.len;
        (end & !15) as *mut nix::libc::c_void
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the child that used the mapping has called `exec` or exited by now.
        #[allow(unsafe_code)]
        unsafe {
            let _ = nix::sys::mman::munmap(self.base, self.len);
        }
    }
}

fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(4096)
}

/// Ends this process the way its child ended, by `signal`, without a core dump.
pub fn die_by(signal: Signal) -> ! {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, sigprocmask};
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    // SAFETY: restoring the default disposition installs no handler code; this process is
    // single-threaded in what it does next (raise, then exit).
    #[allow(unsafe_code)]
    unsafe {
        let _ = nix::sys::signal::signal(signal, SigHandler::SigDfl);
    }
    let mut set = SigSet::empty();
    set.add(signal);
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let _ = nix::sys::signal::raise(signal);
    std::process::exit(128 + signal as i32)
}

/// Makes the child the leader of a new session whose controlling terminal is its stdin (the
/// slave side of a pseudo-terminal), as a login shell has it: the terminal's signals (Ctrl-C,
/// hang-up when the other side closes) reach the child and its group.
pub fn controlling_terminal(command: &mut impl PreExec) {
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (setsid, ioctl); it allocates nothing and takes no locks.
    #[allow(unsafe_code)]
    unsafe {
        command.step(|| {
            nix::unistd::setsid().map_err(io::Error::from)?;
            if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Tells a pseudo-terminal (by its master side) its size in character cells.
pub fn set_window_size(
    terminal: std::os::fd::BorrowedFd<'_>,
    cols: u16,
    rows: u16,
) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let size = nix::libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which outlives the call.
    #[allow(unsafe_code)]
    let done = unsafe { nix::libc::ioctl(terminal.as_raw_fd(), nix::libc::TIOCSWINSZ, &size) };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The arguments of `clone3` (the kernel's `struct clone_args`, version 2: with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `clone3`'s flag to create the child in the cgroup (v2) whose directory `cgroup` holds.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Forks the forkserver, a single-threaded process. With `isolate`, the child starts as the
/// first process (pid 1) of a new pid namespace, in a new mount namespace: when it exits the
/// kernel kills everything left in its pid namespace, and what it mounts (its own `/dev/shm`)
/// is its own. With `new_network` too, it starts in a new network namespace, which holds only
/// a loopback interface of its own (down until [`loopback_up`]). With `cgroup` (a v2 group's
/// directory), the child is created in that group rather than moved there later.
pub fn fork_single_threaded(
    isolate: bool,
    new_network: bool,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
) -> nix::Result<nix::unistd::ForkResult> {
    use std::os::fd::AsRawFd as _;
    if !isolate && cgroup.is_none() {
        // SAFETY: only the forkserver calls this, and it never starts a thread, so the child
        // can allocate and take locks: no other thread held one at the fork.
        #[allow(unsafe_code)]
        return unsafe { nix::unistd::fork() };
    }
    let mut flags = 0;
    if isolate {
        flags |= (nix::libc::CLONE_NEWPID | nix::libc::CLONE_NEWNS) as u64;
        if new_network {
            flags |= nix::libc::CLONE_NEWNET as u64;
        }
    }
    // SAFETY (both calls): `clone` or `clone3` without `CLONE_VM` and without a new stack is
    // `fork` with namespace flags (and a cgroup): the child gets a copy of this
    // single-threaded process, so, as after `fork`, no lock is held by a thread that does not
    // exist there. `clone3` reads `args`, which outlives the call, for the size given. glibc's
    // `fork` wrapper also refreshes its cached thread id; nothing the leader runs (Rust's std,
    // which keeps its own thread ids, `posix_spawn`) reads that cache.
    #[allow(unsafe_code)]
    let pid = match cgroup {
        // Plain `clone` where no group is asked for: `clone3` is missing from older kernels
        // and refused by some seccomp profiles.
        None => unsafe {
            nix::libc::syscall(
                nix::libc::SYS_clone,
                flags | nix::libc::SIGCHLD as u64,
                0 as nix::libc::c_ulong,
                0 as nix::libc::c_ulong,
                0 as nix::libc::c_ulong,
                0 as nix::libc::c_ulong,
            )
        },
        Some(group) => {
            let mut args = CloneArgs {
                flags: flags | CLONE_INTO_CGROUP,
                exit_signal: nix::libc::SIGCHLD as u64,
                cgroup: group.as_raw_fd() as u64,
                ..CloneArgs::default()
            };
            unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_clone3,
                    &mut args as *mut CloneArgs,
                    std::mem::size_of::<CloneArgs>(),
                )
            }
        }
    };
    match pid {
        -1 => Err(nix::errno::Errno::last()),
        0 => Ok(nix::unistd::ForkResult::Child),
        pid => Ok(nix::unistd::ForkResult::Parent {
            child: Pid::from_raw(pid as i32),
        }),
    }
}

/// Brings up the loopback interface of this process's network namespace (a new namespace has
/// `lo` down: nothing, not even 127.0.0.1, would answer).
pub fn loopback_up() -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let socket = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `ifreq` is plain data; zeroed is a valid value for every field.
    #[allow(unsafe_code)]
    let mut request: nix::libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as nix::libc::c_char;
    }
    // SAFETY: both ioctls read and write one `ifreq`, which outlives the calls; the flags
    // field of the union is the one SIOCGIFFLAGS fills and SIOCSIFFLAGS reads.
    #[allow(unsafe_code)]
    unsafe {
        if nix::libc::ioctl(socket.as_raw_fd(), nix::libc::SIOCGIFFLAGS, &mut request) < 0 {
            return Err(io::Error::last_os_error());
        }
        request.ifr_ifru.ifru_flags |= (nix::libc::IFF_UP | nix::libc::IFF_RUNNING) as i16;
        if nix::libc::ioctl(socket.as_raw_fd(), nix::libc::SIOCSIFFLAGS, &request) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Takes ownership of descriptors the kernel just installed in this process (`SCM_RIGHTS`).
pub fn adopt_received(fds: &[RawFd]) -> Vec<OwnedFd> {
    // SAFETY: each descriptor was created by `recvmsg` for this process a moment ago and is
    // owned by nothing else, so exactly one `OwnedFd` closes it.
    #[allow(unsafe_code)]
    fds.iter()
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect()
}

/// Keeps every allocation of 256 KiB or more in its own mapping, returned to the system when
/// freed. glibc otherwise raises that threshold to the largest block freed so far (up to
/// 32 MiB): after one turn's 8 MiB answer window, same-sized buffers of turns running at the
/// same time come from per-thread arenas, which keep the memory once it is free.
pub fn return_large_allocations() {
    // SAFETY: mallopt only changes allocator parameters; it is called once, at start-up,
    // before any other thread exists.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::mallopt(nix::libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// Takes the service's own code and constants out of its resident set (see the server's
/// `idle`); returns the bytes of mappings released. Only the executable's read-only private
/// mappings holding no page of their own (`Anonymous: 0 kB`: none was copied on write, as
/// relocated data is) are released: their pages come back from the page cache on their next
/// use, the same bytes.
pub fn release_startup_code() -> io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut candidate: Option<(usize, usize)> = None;
    let mut released = 0;
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Anonymous:") {
            if let (Some((start, end)), Some("0")) =
                (candidate.take(), kib.split_whitespace().next())
            {
                released += drop_pages(start, end)?;
            }
            continue;
        }
        // A mapping's header: address perms offset dev inode path.
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        let [range, perms, _, _, _, path] = fields[..] else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        candidate = match (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) {
            (Ok(start), Ok(end))
                if matches!(perms, "r-xp" | "r--p") && Path::new(path.trim_start()) == exe =>
            {
                Some((start, end))
            }
            _ => None,
        };
    }
    Ok(released)
}

/// Drops the pages of the read-only file mapping `start..end` (see [`release_startup_code`]).
fn drop_pages(start: usize, end: usize) -> io::Result<usize> {
    let len = end.saturating_sub(start);
    let Some(addr) = std::ptr::NonNull::new(start as *mut std::ffi::c_void) else {
        return Ok(0);
    };
    // SAFETY: `start..end` is a whole private mapping of the executable that cannot be written
    // and holds no page copied on write: dropping its pages only makes the next use of each
    // fault it back in from the file, the same bytes.
    #[allow(unsafe_code)]
    unsafe { nix::sys::mman::madvise(addr, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED) }?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A process forked with a v2 group's directory starts in that group (where this machine
    /// has a writable cgroup2 hierarchy: root on a v2 or hybrid host).
    #[test]
    fn a_child_forked_into_a_v2_group_is_born_there() {
        use std::os::fd::AsFd as _;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root = mountinfo
            .lines()
            .find(|l| l.contains(" - cgroup2 "))
            .and_then(|l| l.split(' ').nth(4));
        let Some(root) = root else {
            eprintln!("no cgroup2 hierarchy mounted: nothing to fork into");
            return;
        };
        let dir = Path::new(root).join(format!("skill-runner-test.{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&dir) {
            eprintln!("cannot make a group in {root}: {e}");
            return;
        }
        let group = std::fs::File::open(&dir).unwrap();
        let child = match fork_single_threaded(false, false, Some(group.as_fd())).unwrap() {
            nix::unistd::ForkResult::Child => loop {
                // Only async-signal-safe calls here: the test harness has other threads.
                nix::unistd::pause();
            },
            nix::unistd::ForkResult::Parent { child } => child,
        };
        let cgroup = std::fs::read_to_string(format!("/proc/{child}/cgroup")).unwrap();
        nix::sys::signal::kill(child, Signal::SIGKILL).unwrap();
        nix::sys::wait::waitpid(child, None).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let expected = format!("0::/{}", dir.strip_prefix(root).unwrap().display());
        assert!(
            cgroup.lines().any(|l| l == expected),
            "the child is not in {expected}: {cgroup} (this process: {own})"
        );
    }

    fn write_program(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn exit_code(pid: Pid) -> i32 {
        match nix::sys::wait::waitpid(pid, None).unwrap() {
            nix::sys::wait::WaitStatus::Exited(_, code) => code,
            other => panic!("the child ended with {other:?}"),
        }
    }

    /// As `execvp` with the command's own `PATH` (its last value): a folder whose match may
    /// not run is passed over, a program without `#!` runs with `/bin/sh` (with its arguments), the child works
    /// in its own folder, and a program found nowhere, or only where it may not run, is named
    /// by the reason.
    #[test]
    fn a_vfork_child_finds_its_program_as_execvp_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write_program(&root.join("a/prog"), "#!/bin/sh\necho a > out\n", 0o644);
        write_program(
            &root.join("b/prog"),
            "#!/bin/sh\necho b \"$1\" > out\n",
            0o755,
        );
        write_program(&root.join("c/bare"), "echo bare \"$1\" > out\n", 0o755);
        let path = format!(
            "/nowhere:{}:{}",
            root.join("a").display(),
            root.join("b").display()
        );
        // Set twice: the last value holds.
        let env = vec![
            ("PATH".to_owned(), "/nowhere".to_owned()),
            ("PATH".to_owned(), path),
        ];
        let work = root.join("work");
        std::fs::create_dir(&work).unwrap();
        let start = |argv: &[&str], env: &[(String, String)]| {
            let argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
            VforkCommand::new(&argv, env, &work).unwrap().spawn()
        };

        let pid = start(&["prog", "one"], &env).unwrap();
        assert_eq!(exit_code(pid), 0);
        assert_eq!(
            std::fs::read_to_string(work.join("out")).unwrap(),
            "b one\n"
        );

        let bare = root.join("c/bare").display().to_string();
        let pid = start(&[&bare, "two"], &env).unwrap();
        assert_eq!(exit_code(pid), 0);
        assert_eq!(
            std::fs::read_to_string(work.join("out")).unwrap(),
            "bare two\n"
        );

        let missing = start(&["no-such-program"], &env).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound, "{missing}");
        let only_a = [("PATH".to_owned(), root.join("a").display().to_string())];
        let denied = start(&["prog"], &only_a).unwrap_err();
        assert_eq!(denied.kind(), io::ErrorKind::PermissionDenied, "{denied}");
    }

    /// The program's environment holds each variable once, with its last value, sorted by
    /// name, as `std::process::Command` gives it.
    #[test]
    fn a_vfork_childs_environment_holds_each_variable_once() {
        let dir = tempfile::tempdir().unwrap();
        let out = std::fs::File::create(dir.path().join("env")).unwrap();
        let set = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let env = [set("X", "first"), set("A", "a"), set("X", "second")];
        let mut command =
            VforkCommand::new(&["/usr/bin/env".to_owned()], &env, Path::new("/")).unwrap();
        // SAFETY: dup2 only, on a descriptor the step owns.
        #[allow(unsafe_code)]
        unsafe {
            command.step(move || nix::unistd::dup2_stdout(&out).map_err(io::Error::from));
        }
        let pid = command.spawn().unwrap();
        assert_eq!(exit_code(pid), 0);
        let seen = std::fs::read_to_string(dir.path().join("env")).unwrap();
        assert_eq!(seen, "A=a\nX=second\n");
    }

    /// A step's error stops the start and comes back as the step made it; the child is
    /// reaped, and the command's descriptors stay this process's to close.
    #[test]
    fn a_vfork_childs_failed_step_comes_back_whole() {
        let argv = vec!["true".to_owned()];
        let env = vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())];
        let mut command = VforkCommand::new(&argv, &env, Path::new("/")).unwrap();
        // SAFETY: the step makes no system call and allocates nothing.
        #[allow(unsafe_code)]
        unsafe {
            command.step(|| Err(io::ErrorKind::Unsupported.into()));
        }
        let failed = command.spawn().unwrap_err();
        assert_eq!(failed.kind(), io::ErrorKind::Unsupported, "{failed}");
        assert_eq!(
            nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)),
            Err(nix::errno::Errno::ECHILD),
            "the failed child is reaped"
        );

        let open = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let before = open();
        let rules = sandbox::ruleset(&[], &[PathBuf::from("/")], None).unwrap();
        let mut command = VforkCommand::new(&argv, &env, Path::new("/")).unwrap();
        confine(&mut command, rules);
        let pid = command.spawn().unwrap();
        assert_eq!(exit_code(pid), 0);
        assert_eq!(open(), before, "the ruleset's descriptor is closed here");
    }

    /// Resident pages backed by files, KiB.
    fn resident_file_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Code that goes through relocated data (trait objects' vtables, formatting's tables).
    fn work() -> String {
        let steps: Vec<Box<dyn Fn(u64) -> u64>> = vec![
            Box::new(|x| x.wrapping_mul(3)),
            Box::new(|x| x.wrapping_add(7)),
            Box::new(|x| x.rotate_left(5)),
        ];
        let total = (0..1000u64).fold(1, |acc, n| steps[(n % 3) as usize](acc ^ n));
        let map: std::collections::HashMap<String, f64> = (0..50)
            .map(|i| (format!("k{i}"), f64::from(i) / 7.0))
            .collect();
        format!(
            "{total:x} {:.3} {:?}",
            map["k42"],
            std::path::Path::new("/a/b").parent()
        )
    }

    #[test]
    fn released_pages_come_back_unchanged_and_the_resident_set_shrinks() {
        let expected = work();
        let before = resident_file_kib();
        let released = release_startup_code().unwrap();
        let after = resident_file_kib();
        assert!(released > 0, "the test binary's own code was released");
        assert!(
            after < before,
            "file-backed resident set {before} KiB -> {after} KiB"
        );
        assert_eq!(work(), expected);
        let threaded = std::thread::spawn(work).join().unwrap();
        assert_eq!(threaded, expected);
        assert!(
            release_startup_code().unwrap() > 0,
            "again, as when a node falls idle"
        );
        assert_eq!(work(), expected);
    }
}
