//! The operator's terminal: one engine CLI at a time in a pseudo-terminal, so an operator can
//! log it in from the console (`codex login`, …) with `HOME` at the agent home.
//!
//! The CLI is the leader of its own session with the terminal as its controlling terminal, so
//! it and everything it starts get the terminal's hang-up when the session is stopped, and it is
//! killed when the service dies. The session ends when the CLI exits; whatever it started that
//! still holds the terminal (a daemon that left its process group: Codex's) is killed then, so
//! nothing outlives the session or keeps the next one from starting. Its output goes to every
//! attached viewer, and the most recent [`BACKLOG`] bytes are replayed to a viewer that attaches
//! later (a reloaded page).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::sync::{broadcast, watch};

use super::sys;
use skill_runner_types::clock::Timestamp;

/// How much recent output a newly attached viewer is shown.
pub const BACKLOG: usize = 64 * 1024;

/// From the hang-up to SIGKILL when a session is stopped.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The one terminal session slot of the service.
#[derive(Debug, Default)]
pub struct Terminal {
    slot: Mutex<Option<Arc<Session>>>,
}

/// What the console is told about a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SessionInfo {
    pub session_id: String,
    pub engine: String,
    pub started_at: Timestamp,
    /// False once the CLI has exited.
    pub live: bool,
    /// The CLI's exit code once it exited (`null` while live, or when a signal ended it).
    pub exit_code: Option<i32>,
}

/// A running (or ended) session.
#[derive(Debug)]
pub struct Session {
    id: String,
    engine: String,
    started_at: Timestamp,
    pid: Pid,
    /// The terminal's device (`/dev/pts/N`), to find what still holds it.
    pts: Option<std::path::PathBuf>,
    input: Mutex<std::fs::File>,
    master: OwnedFd,
    output: broadcast::Sender<Vec<u8>>,
    backlog: Arc<Mutex<VecDeque<u8>>>,
    /// `Some(exit code)` once the CLI ended (`Some(None)` when a signal ended it).
    ended: watch::Sender<Option<Option<i32>>>,
}

/// A viewer attached to the session: what it missed, then what comes.
pub struct Viewer {
    pub session: Arc<Session>,
    pub replay: Vec<u8>,
    pub output: broadcast::Receiver<Vec<u8>>,
    pub ended: watch::Receiver<Option<Option<i32>>>,
}

/// What to start in a session.
pub struct Launch<'a> {
    pub engine: &'a str,
    pub program: &'a Path,
    /// Its arguments (an operator's terminal: none; a CLI's own login: `login …`).
    pub args: &'a [String],
    /// The whole environment of the CLI.
    pub env: Vec<(String, String)>,
    pub cwd: &'a Path,
}

/// Why a terminal session did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another session is live; the message says which.
    #[error("{0}")]
    Busy(String),
    /// The CLI could not be started in a pseudo-terminal.
    #[error("cannot start the terminal session: {0}")]
    Spawn(#[from] io::Error),
}

impl Terminal {
    /// Starts `launch` in a new session; refused while another session is live.
    pub fn start(&self, launch: Launch<'_>) -> Result<SessionInfo, StartError> {
        let mut slot = self.slot.lock().expect("terminal lock");
        if let Some(current) = slot.as_ref().filter(|s| s.is_live()) {
            return Err(StartError::Busy(format!(
                "A terminal session is already live ({} for {}); stop it first",
                current.id, current.engine
            )));
        }
        let session = Arc::new(Session::spawn(launch)?);
        let info = session.info();
        *slot = Some(session);
        Ok(info)
    }

    /// The current (or last) session.
    pub fn current(&self) -> Option<SessionInfo> {
        self.session().map(|s| s.info())
    }

    fn session(&self) -> Option<Arc<Session>> {
        self.slot.lock().expect("terminal lock").clone()
    }

    /// Hangs up the live session (SIGKILL after a grace period); false when none is live.
    pub fn stop(&self) -> bool {
        match self.session().filter(|s| s.is_live()) {
            Some(session) => {
                session.hang_up();
                true
            }
            None => false,
        }
    }

    /// Attaches a viewer to the current session.
    pub fn attach(&self) -> Option<Viewer> {
        let session = self.session()?;
        // Subscribed before the backlog is copied, so nothing falls between the two (a chunk
        // may be in both; the backlog is recent output, not a transcript).
        let output = session.output.subscribe();
        let replay = session
            .backlog
            .lock()
            .expect("backlog lock")
            .iter()
            .copied()
            .collect();
        let ended = session.ended.subscribe();
        Some(Viewer {
            session,
            replay,
            output,
            ended,
        })
    }

    /// Kills the session's processes at once (the service is stopping).
    pub fn kill(&self) {
        if let Some(session) = self.session().filter(|s| s.is_live()) {
            kill_all(session.pid, session.pts.as_deref());
        }
    }
}

impl Session {
    fn spawn(launch: Launch<'_>) -> io::Result<Self> {
        let pty = nix::pty::openpty(None, None).map_err(io::Error::from)?;
        let pts = nix::unistd::ttyname(&pty.slave).ok();
        let slave = std::fs::File::from(pty.slave);
        let mut command = Command::new(launch.program);
        command
            .args(launch.args)
            .env_clear()
            .envs(launch.env)
            .current_dir(launch.cwd)
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        sys::unblock_signals(&mut command);
        sys::controlling_terminal(&mut command);
        sys::die_with_parent(&mut command, Signal::SIGKILL);
        let mut child = command.spawn()?;
        drop(command);
        let pid = Pid::from_raw(child.id() as i32);
        let master = pty.master;
        let _ = sys::set_window_size(master.as_fd(), 100, 30);
        let mut reader = std::fs::File::from(master.try_clone()?);
        let input = std::fs::File::from(master.try_clone()?);
        let (output, _) = broadcast::channel(256);
        let (ended, _) = watch::channel(None);
        let backlog = Arc::new(Mutex::new(VecDeque::with_capacity(BACKLOG)));
        // The reader copies output until every holder of the terminal closed it (EIO).
        let (sender, kept) = (output.clone(), Arc::clone(&backlog));
        std::thread::Builder::new()
            .name("terminal-reader".into())
            .spawn(move || {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n @ 1..) = reader.read(&mut buf) {
                    let chunk = &buf[..n];
                    {
                        let mut kept = kept.lock().expect("backlog lock");
                        kept.extend(chunk);
                        let excess = kept.len().saturating_sub(BACKLOG);
                        kept.drain(..excess);
                    }
                    let _ = sender.send(chunk.to_vec());
                }
            })?;
        // The waiter ends the session when the CLI exits, and kills what it left holding the
        // terminal (which would keep the reader, and the terminal, alive).
        let (recorder, held) = (ended.clone(), pts.clone());
        std::thread::Builder::new()
            .name("terminal-waiter".into())
            .spawn(move || {
                let code = child.wait().ok().and_then(|s| s.code());
                kill_all(pid, held.as_deref());
                recorder.send_replace(Some(code));
            })?;
        Ok(Self {
            id: uuid::Uuid::new_v4().simple().to_string(),
            engine: launch.engine.to_owned(),
            started_at: Timestamp::now(),
            pid,
            pts,
            input: Mutex::new(input),
            master,
            output,
            backlog,
            ended,
        })
    }

    /// What the console is told about the session.
    pub fn info(&self) -> SessionInfo {
        let ended = *self.ended.borrow();
        SessionInfo {
            session_id: self.id.clone(),
            engine: self.engine.clone(),
            started_at: self.started_at,
            live: ended.is_none(),
            exit_code: ended.flatten(),
        }
    }

    fn is_live(&self) -> bool {
        self.ended.borrow().is_none()
    }

    /// Types `bytes` into the terminal.
    pub fn write(&self, bytes: &[u8]) -> io::Result<()> {
        self.input.lock().expect("input lock").write_all(bytes)
    }

    /// Tells the CLI the terminal's new size.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        sys::set_window_size(self.master.as_fd(), cols.max(1), rows.max(1))
    }

    fn hang_up(&self) {
        let _ = killpg(self.pid, Signal::SIGHUP);
        let (pid, pts) = (self.pid, self.pts.clone());
        let mut ended = self.ended.subscribe();
        tokio::spawn(async move {
            let gone = tokio::time::timeout(STOP_GRACE, ended.wait_for(Option::is_some)).await;
            if gone.is_err() {
                kill_all(pid, pts.as_deref());
            }
        });
    }
}

/// SIGKILL to the session's process group, and to every other process that holds its
/// terminal `pts` open (a daemon that left the group took the terminal with it).
fn kill_all(group: Pid, pts: Option<&Path>) {
    let _ = killpg(group, Signal::SIGKILL);
    let Some(pts) = pts else { return };
    let own = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let holds = std::fs::read_dir(entry.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == pts));
        if holds && let Ok(pid) = pid.parse::<i32>() {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}
