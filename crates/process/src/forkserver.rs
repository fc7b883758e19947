//! The forkserver: one small helper, started once, that forks the turn leader of every
//! supervised process.
//!
//! Exec'ing the service's own binary as the leader of each turn cost about 2.7 ms of CPU (loading
//! and relocating a large position-independent executable), more than the `sh` it then started.
//! The forkserver pays that once. The service starts `skill-runner forkserver` with one end of a
//! socket pair as its stdin and, for each turn, sends the [`LeaderArgs`] (a length-prefixed JSON
//! frame) with the turn's stdin, stdout and stderr attached (`SCM_RIGHTS`), and a fourth
//! descriptor when the turn has doors to open ([`crate::egress`]). The forkserver never starts a
//! thread, so its forked child may run Rust code: the child (for a confined turn the first
//! process of a new pid namespace, in a network namespace of its own, see
//! [`super::net_pool`]) leads a new process group, takes the descriptors
//! as its own and runs the [`leader`](super::leader). The forkserver
//! answers `S <pid>` (or `E <reason>`), reaps its leaders and reports each end as
//! `X <pid> <code>` or `K <pid> <signal>`, one line each.
//!
//! It holds nothing of the service's: an empty environment, `/` as its folder, no descriptor but
//! the socket, and a session of its own (see [`serve`]: the turns schedule apart from the
//! service). When the service goes away the socket reaches end-of-file and the forkserver
//! exits; each leader's parent-death signal then makes it kill its tree, as when the service was
//! its parent. If the forkserver dies, the turns it reported on end as killed and the next turn
//! starts a new one.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, setns};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Interest};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;

use super::leader::LeaderArgs;
use super::net_pool::NetPool;
use super::sys;

/// Largest request frame: arguments and environment of one command (Linux caps both at
/// `ARG_MAX`, 2 MiB, in total).
const MAX_FRAME: usize = 8 << 20;

/// The service's side: starts the forkserver when first needed and again after it died.
#[derive(Debug)]
pub struct ForkServer {
    exe: PathBuf,
    conn: tokio::sync::Mutex<Option<Conn>>,
}

#[derive(Debug)]
struct Conn {
    write: OwnedWriteHalf,
    waiting: Arc<Mutex<Waiting>>,
}

/// Who waits for which answer of the forkserver.
#[derive(Debug, Default)]
struct Waiting {
    /// The socket closed: the forkserver is gone.
    gone: bool,
    /// Fork requests in the order they were sent (the forkserver answers in that order).
    forks: VecDeque<oneshot::Sender<io::Result<Leader>>>,
    exits: HashMap<i32, oneshot::Sender<Ended>>,
}

/// How a leader ended: its exit code, or the signal that ended it (the one that ended its
/// command); neither when the forkserver died, taking it along.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// A turn leader the forkserver forked.
#[derive(Debug)]
pub struct Leader {
    pub pid: i32,
    exit: Option<oneshot::Receiver<Ended>>,
    ended: Ended,
}

impl Leader {
    /// Waits until the leader has ended: its exit code, `None` when a signal ended it (or the
    /// forkserver died, taking it along). Cancel-safe, and answers again once ended.
    pub async fn wait(&mut self) -> Option<i32> {
        if let Some(exit) = self.exit.as_mut() {
            self.ended = exit.await.unwrap_or_default();
            self.exit = None;
        }
        self.ended.code
    }

    /// The signal that ended the leader, once [`Leader::wait`] answered.
    pub fn signal(&self) -> Option<i32> {
        self.ended.signal
    }
}

impl ForkServer {
    /// `exe` is the service's own executable.
    pub fn new(exe: PathBuf) -> Self {
        Self {
            exe,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Forks a leader running `args` with `fds` as its stdin, stdout and stderr, plus the
    /// channel for its listeners when `args` asks for any.
    pub async fn fork(&self, args: &LeaderArgs, fds: Vec<OwnedFd>) -> io::Result<Leader> {
        let json = serde_json::to_vec(args).map_err(io::Error::other)?;
        let mut frame = u32::try_from(json.len())
            .map_err(|_| io::Error::other("the command is too large"))?
            .to_le_bytes()
            .to_vec();
        frame.extend(json);
        let answer = {
            let mut conn = self.conn.lock().await;
            let stale = conn
                .as_ref()
                .is_none_or(|c| c.waiting.lock().expect("not poisoned").gone);
            if stale {
                *conn = Some(Conn::start(&self.exe)?);
            }
            let live = conn.as_mut().expect("started above");
            let (tx, rx) = oneshot::channel();
            live.waiting
                .lock()
                .expect("not poisoned")
                .forks
                .push_back(tx);
            if let Err(e) = live.send(&frame, &fds).await {
                // A socket that fails a write is broken: the next fork starts a new forkserver.
                *conn = None;
                return Err(e);
            }
            rx
        };
        // The leader holds its own copies now; the service must not keep the pipes' far ends.
        drop(fds);
        answer
            .await
            .map_err(|_| io::Error::other("the forkserver exited"))?
    }
}

impl Conn {
    fn start(exe: &Path) -> io::Result<Conn> {
        let (stream, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut command = std::process::Command::new(exe);
        command
            .arg("forkserver")
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = tokio::process::Command::from(command).spawn()?;
        stream.set_nonblocking(true)?;
        let (read, write) = tokio::net::UnixStream::from_std(stream)?.into_split();
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        tokio::spawn(listen(read, waiting.clone(), child));
        Ok(Conn { write, waiting })
    }

    /// Sends one frame with the descriptors attached to its first bytes.
    async fn send(&mut self, frame: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
        let fds: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let stream: &tokio::net::UnixStream = self.write.as_ref();
        let sent = loop {
            stream.writable().await?;
            let attempt = stream.try_io(Interest::WRITABLE, || {
                sendmsg::<()>(
                    stream.as_raw_fd(),
                    &[io::IoSlice::new(frame)],
                    &[ControlMessage::ScmRights(&fds)],
                    MsgFlags::MSG_NOSIGNAL,
                    None,
                )
                .map_err(io::Error::from)
            });
            match attempt {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        self.write.write_all(&frame[sent..]).await
    }
}

/// Reads the forkserver's answers until its socket closes, then fails whoever still waits.
async fn listen(
    read: OwnedReadHalf,
    waiting: Arc<Mutex<Waiting>>,
    mut child: tokio::process::Child,
) {
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut waiting = waiting.lock().expect("not poisoned");
        match Answer::parse(&line) {
            Some(Answer::Forked(pid)) => {
                let (tx, rx) = oneshot::channel();
                waiting.exits.insert(pid, tx);
                let leader = Leader {
                    pid,
                    exit: Some(rx),
                    ended: Ended::default(),
                };
                let asked = waiting.forks.pop_front();
                if asked.is_none_or(|asked| asked.send(Ok(leader)).is_err()) {
                    // Whoever asked gave up meanwhile: nobody would supervise this turn.
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGHUP);
                }
            }
            Some(Answer::Refused(why)) => {
                if let Some(asked) = waiting.forks.pop_front() {
                    let _ = asked.send(Err(io::Error::other(why)));
                }
            }
            Some(Answer::Ended(pid, ended)) => {
                if let Some(tx) = waiting.exits.remove(&pid) {
                    let _ = tx.send(ended);
                }
            }
            None => tracing::warn!(line, "unexpected answer from the forkserver"),
        }
    }
    {
        let mut waiting = waiting.lock().expect("not poisoned");
        waiting.gone = true;
        waiting.forks.clear();
        waiting.exits.clear();
    }
    if let Ok(status) = child.wait().await
        && !status.success()
    {
        tracing::error!(%status, "the forkserver ended; the next turn starts a new one");
    }
}

/// One line from the forkserver.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Forked(i32),
    Refused(String),
    Ended(i32, Ended),
}

impl Answer {
    fn parse(line: &str) -> Option<Answer> {
        let (tag, rest) = line.split_once(' ')?;
        Some(match tag {
            "S" => Answer::Forked(rest.parse().ok()?),
            "E" => Answer::Refused(rest.to_owned()),
            "X" | "K" => {
                let (pid, n) = rest.split_once(' ')?;
                let n = Some(n.parse().ok()?);
                let ended = match tag {
                    "X" => Ended {
                        code: n,
                        signal: None,
                    },
                    _ => Ended {
                        code: None,
                        signal: n,
                    },
                };
                Answer::Ended(pid.parse().ok()?, ended)
            }
            _ => return None,
        })
    }
}

/// The forkserver itself (`skill-runner forkserver`); never returns.
pub fn serve() -> ! {
    // A session of its own, which its leaders and every turn inherit. Out of the service's
    // group: a Ctrl-C at the service's terminal is the service's to handle, not a reason to
    // take every turn down. And where the kernel groups the scheduling by session (autogroup,
    // on by default in Debian's and most distributions' kernels), all turns together weigh
    // as much as the service does: while they keep the cores busy, the service still gets
    // its share at once to answer requests, and a turn alone runs at full speed.
    if let Err(e) = nix::unistd::setsid() {
        fail(&format!("cannot start a session: {e}"));
    }
    let stdin = io::stdin();
    let socket = stdin.as_fd();
    let mut ended = SigSet::empty();
    ended.add(Signal::SIGCHLD);
    // Blocked so SIGCHLD is only read from the signalfd; leaders block their own set anyway.
    let _ = ended.thread_block();
    let mut signals =
        match SignalFd::with_flags(&ended, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
            Ok(fd) => Some(fd),
            Err(e) => fail(&format!("cannot watch children: {e}")),
        };
    let me = nix::unistd::getpid();
    super::privileges::prepare();
    let mut pool =
        NetPool::new().unwrap_or_else(|e| fail(&format!("cannot open its network: {e}")));
    loop {
        let (request, children) = {
            let signal_fd = signals.as_ref().expect("taken only in a child");
            let mut fds = [
                PollFd::new(socket, PollFlags::POLLIN),
                PollFd::new(signal_fd.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => fail(&format!("poll: {e}")),
            }
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            if ready(&fds[1]) {
                while let Ok(Some(_)) = signal_fd.read_signal() {}
            }
            (ready(&fds[0]), ready(&fds[1]))
        };
        if children {
            report_ended(socket, &mut pool);
        }
        if !request {
            continue;
        }
        let (mut args, stdio) = match receive(socket) {
            Ok(Some(request)) => request,
            Ok(None) => std::process::exit(0),
            Err(e) => fail(&format!("bad request: {e}")),
        };
        // A door-less turn borrows a namespace from the pool; a turn with doors gets a new one,
        // where the service will hold its listeners.
        let network = match args.isolate && args.listen.is_empty() {
            true => match pool.take() {
                Ok(ns) => Some(ns),
                Err(e) => {
                    answer(socket, &format!("E cannot make a network namespace: {e}\n"));
                    continue;
                }
            },
            false => None,
        };
        // The leader starts with its signals blocked ([`leader::signal_set`]); this process
        // takes its own mask back once the child exists.
        let mut mask = SigSet::empty();
        let _ = nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_BLOCK,
            Some(&super::leader::signal_set()),
            Some(&mut mask),
        );
        let forked = fork_leader(&mut args, network.is_none());
        if !matches!(forked, Ok(ForkResult::Child)) {
            let _ = nix::sys::signal::pthread_sigmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&mask),
                None,
            );
        }
        match forked {
            Ok(ForkResult::Child) => {
                drop(signals.take());
                // The leader holds no namespace of the pool's but the one it enters.
                drop(pool);
                become_leader(args, stdio, network, me)
            }
            Ok(ForkResult::Parent { child }) => {
                // Also set here, so the group exists before the service can signal it.
                let _ = nix::unistd::setpgid(child, child);
                if let Some(ns) = network {
                    pool.lend(child.as_raw(), ns);
                }
                answer(socket, &format!("S {child}\n"));
            }
            Err(e) => {
                if let Some(ns) = network {
                    pool.put_back(ns);
                }
                answer(socket, &format!("E cannot fork: {e}\n"));
            }
        }
    }
}

/// Forks the leader of `args`, born in the turn's v2 cgroup where it has one. Where that
/// cannot be done (a seccomp profile that refuses `clone3`, as Docker's default answers
/// `ENOSYS`; an older kernel), the leader is forked as before and joins the group itself.
fn fork_leader(args: &mut LeaderArgs, new_network: bool) -> nix::Result<ForkResult> {
    if let Some(dir) = args.born_in.clone() {
        if let Ok(group) = std::fs::File::open(&dir) {
            let forked = sys::fork_single_threaded(args.isolate, new_network, Some(group.as_fd()));
            if forked.is_ok() {
                return forked;
            }
        }
        args.cgroups.push(dir.join("cgroup.procs"));
    }
    sys::fork_single_threaded(args.isolate, new_network, None)
}

fn fail(why: &str) -> ! {
    eprintln!("skill-runner forkserver: {why}");
    std::process::exit(1)
}

/// Makes this forked child the turn leader: its own process group, the turn's stdio (and the
/// channel for its listeners, when it has one), in the `network` namespace it borrowed.
fn become_leader(
    args: LeaderArgs,
    mut fds: Vec<OwnedFd>,
    network: Option<OwnedFd>,
    forkserver: Pid,
) -> ! {
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    let control = (fds.len() > 3).then(|| fds.pop()).flatten();
    // Replaces the socket on stdin too: a leader holds nothing of the forkserver's.
    let _ = nix::unistd::dup2_stdin(&fds[0]);
    let _ = nix::unistd::dup2_stdout(&fds[1]);
    let _ = nix::unistd::dup2_stderr(&fds[2]);
    drop(fds);
    if let Some(ns) = network
        && let Err(e) = setns(ns, CloneFlags::CLONE_NEWNET)
    {
        eprintln!("skill-runner: cannot enter the turn's network namespace: {e}");
        std::process::exit(super::leader::CANNOT_START);
    }
    super::leader::run(args, forkserver, control)
}

/// Reports every leader that has ended, and takes back the namespace each borrowed: its pid
/// namespace, and with it every process of the turn, is gone once it is reaped.
fn report_ended(socket: BorrowedFd<'_>, pool: &mut NetPool) {
    loop {
        let (pid, line) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, format!("X {pid} {code}\n")),
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                (pid, format!("K {pid} {}\n", signal as i32))
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        pool.returned(pid.as_raw());
        answer(socket, &line);
    }
}

/// Writes one answer line; a service that is gone ends the forkserver.
fn answer(socket: BorrowedFd<'_>, line: &str) {
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(socket, rest) {
            Ok(n) => rest = &rest[n..],
            Err(Errno::EINTR) => {}
            Err(_) => std::process::exit(0),
        }
    }
}

/// Reads one request: `None` at end-of-file (the service is gone).
fn receive(socket: BorrowedFd<'_>) -> io::Result<Option<(LeaderArgs, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (got, stdio) = {
        let mut iov = [io::IoSliceMut::new(&mut header)];
        let message = recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut stdio = Vec::new();
        for control in message.cmsgs()? {
            if let ControlMessageOwned::ScmRights(fds) = control {
                stdio.extend(sys::adopt_received(&fds));
            }
        }
        (message.bytes, stdio)
    };
    if got == 0 {
        return Ok(None);
    }
    read_exact(socket, &mut header[got..])?;
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    read_exact(socket, &mut body)?;
    let args: LeaderArgs = serde_json::from_slice(&body).map_err(io::Error::other)?;
    let wanted = if args.listen.is_empty() { 3 } else { 4 };
    if stdio.len() != wanted {
        return Err(io::Error::other(format!(
            "{} descriptors instead of {wanted}",
            stdio.len()
        )));
    }
    Ok(Some((args, stdio)))
}

/// Reads exactly `buf.len()` bytes, never more: the next frame's descriptors must stay with it.
fn read_exact(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match nix::unistd::read(socket, &mut buf[filled..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(Answer::parse("S 42"), Some(Answer::Forked(42)));
        assert_eq!(
            Answer::parse("E cannot fork: EAGAIN"),
            Some(Answer::Refused("cannot fork: EAGAIN".into()))
        );
        let exited = Ended {
            code: Some(3),
            signal: None,
        };
        assert_eq!(Answer::parse("X 42 3"), Some(Answer::Ended(42, exited)));
        let killed = Ended {
            code: None,
            signal: Some(9),
        };
        assert_eq!(Answer::parse("K 42 9"), Some(Answer::Ended(42, killed)));
        assert_eq!(Answer::parse("X 42"), None);
        assert_eq!(Answer::parse("K 42"), None);
        assert_eq!(Answer::parse("Q 1"), None);
    }
}
