//! Process supervision: every engine turn, invoke program and npm upgrade runs here, one
//! implementation for all.
//!
//! A process starts as the child of a turn leader ([`leader`], forked by the [`forkserver`]), which
//! leads its own process group (for a confined turn, also its own pid and network namespaces),
//! confines the command ([`sandbox`], [`privileges`]) and kills every descendant when the command
//! ends, even one that left the group. A turn with an allow-list reaches it through the doors
//! the service serves ([`crate::egress`]). The command starts from the
//! allow-listed environment ([`env`]) plus its spec's variables, in its spec's folder, with
//! stdin closed unless the spec feeds it. stdout and stderr are read concurrently and appended
//! byte for byte to the log files (never truncated, so offsets stay valid across turns and
//! multi-byte characters are never split by decoding). Cancel and the hard timeout send SIGTERM
//! to the whole group and SIGKILL after a grace period. A parent-death signal and the
//! [`reaper::Reaper`] make sure a crashed service takes its turns with it, and a [`Running`]
//! handle dropped before it was waited for kills its group.

pub mod cgroups;
pub mod egress;
pub mod env;
pub mod forkserver;
pub mod handover;
pub mod leader;
pub mod limits;
mod net_pool;
pub mod privileges;
pub mod reaper;
pub mod redact;
pub mod run_folder;
pub mod run_uids;
pub mod sandbox;
mod sys;
pub mod terminal;
mod watch;

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::egress::{Doors, Egress, EgressLog, ModelDoor, Served, Target};

pub use env::ChildEnv;
pub use reaper::Reaper;
pub use sandbox::SandboxStatus;
pub use skill_runner_types::ProcessMark;
pub use sys::{release_startup_code, return_large_allocations};

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// argv; the first element is looked up on `PATH` unless it contains a `/`.
    pub argv: Vec<String>,
    /// The working directory (also `PWD`).
    pub cwd: PathBuf,
    /// Added to the allow-listed environment ([`ChildEnv::base`]): a process gets a key only
    /// when its spec passes it.
    pub env: Vec<(String, String)>,
    /// Written to stdin, which is then closed; `None` leaves stdin closed from the start.
    pub stdin: Option<Vec<u8>>,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    /// Most bytes each log file holds (earlier turns' output counts). More on stdout ends the
    /// group ([`Exit::TooMuchOutput`]); more on stderr is read and dropped, with one line
    /// saying so.
    pub output_limit: Option<u64>,
    /// What the process may touch when the sandbox is on; `None` runs it unconfined (npm
    /// upgrades, which write the managed prefix and npm's cache).
    pub confine: Option<Confinement>,
    /// Values masked in both logs as they are written (a client's secret `env`).
    pub secrets: redact::Secrets,
}

/// What a confined process may use: folders besides the system ([`sandbox::SYSTEM`]) and the
/// paths every confined process reads ([`Launch::readable`]), and the network.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Read and write.
    pub writable: Vec<PathBuf>,
    /// Read and execute.
    pub readable: Vec<PathBuf>,
    /// The `host:port`s the process may reach through the egress proxy; empty: no network.
    pub allow: Vec<Target>,
    /// Where each of its connections is written down (`logs/egress.jsonl`).
    pub egress_log: PathBuf,
    /// What the skill asks for below the operator's caps ([`Launch::limits`]). The first
    /// `writable` folder (the workspace) is the one whose size counts.
    pub limits: limits::Requested,
    /// The run folder the process belongs to; in a mount namespace of its own, the folder that
    /// holds it shows no other run.
    pub own_folder: Option<PathBuf>,
    /// The engine's endpoint behind a model door, when the service holds its key.
    pub model_door: Option<ModelDoor>,
    /// The skill's secrets, which the proxy puts in on requests to their hosts.
    pub bound: Vec<egress::secrets::Bound>,
}

/// How processes are started, fixed at start-up.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The service's own executable, started once as the [`forkserver`].
    pub exe: PathBuf,
    /// The environment every process starts from.
    pub env: ChildEnv,
    pub sandbox: SandboxStatus,
    /// Whether each confined process starts in new pid and network namespaces.
    pub isolate: bool,
    /// Whether Landlock can bound TCP by port: then a turn that shares the service's network
    /// connects only to its own egress proxy.
    pub tcp_rules: bool,
    /// `SKILL_RUNNER_EGRESS_ALLOW`: which hosts a skill may ask its turns to reach.
    pub egress_allow: Vec<crate::egress::HostPattern>,
    /// The operator's caps on a turn's resources (`SKILL_RUNNER_RUN_*`).
    pub limits: limits::Limits,
    /// Where turns get cgroups of their own.
    pub cgroups: cgroups::Cgroups,
    /// Read and execute for every confined process: the managed npm prefix and
    /// `SKILL_RUNNER_SANDBOX_READ_PATHS`.
    pub readable: Vec<PathBuf>,
    /// `SKILL_RUNNER_RUN_UIDS`: the uids confined turns run under; `None`: the service's.
    pub run_uids: Option<run_uids::RunUids>,
    /// The egress's CA and upstream TLS; `None` when turns are not confined.
    pub tls: Option<Arc<egress::tls::Tls>>,
}

impl Launch {
    /// What every confined process may run programs from: the system's folders and
    /// [`Launch::readable`].
    fn run_from(&self) -> impl Iterator<Item = PathBuf> + '_ {
        (sandbox::SYSTEM.iter().map(PathBuf::from)).chain(self.readable.iter().cloned())
    }
}

/// A program name the sandbox resolves elsewhere than `PATH` does
/// ([`Supervisor::program_outside_sandbox`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramOutside {
    pub program: String,
    /// The first match on `PATH`, which confined processes cannot read.
    pub first: PathBuf,
    /// The match that runs instead, if any.
    pub runs: Option<PathBuf>,
}

impl ProgramOutside {
    /// Why, and what to do: a folder to add to `SKILL_RUNNER_SANDBOX_READ_PATHS`.
    pub fn explain(&self) -> String {
        // The folder to lend: for a shim or a bin folder of a tool's home (`~/.pyenv/shims`),
        // the home (`~/.pyenv`), whose versions the shim starts.
        let dir = self.first.parent().unwrap_or(Path::new("/"));
        let lend = match dir.file_name().and_then(|n| n.to_str()) {
            Some("shims" | "bin") => dir.parent().unwrap_or(dir),
            _ => dir,
        };
        let instead = match &self.runs {
            Some(runs) => format!("the turn runs {} instead", runs.display()),
            None => "the turn finds no other".to_owned(),
        };
        format!(
            "'{}' is {} on PATH, outside what a confined turn may read, so {instead}: add {} \
             to SKILL_RUNNER_SANDBOX_READ_PATHS to use it",
            self.program,
            self.first.display(),
            lend.display()
        )
    }
}

/// Whether `path` is a file some execute bit is set on.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Called after every append to a log, so live streams can read the new bytes at once.
#[derive(Clone)]
pub struct OnOutput(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for OnOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnOutput")
    }
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited by itself: `code` is `None` when a signal killed it, and `signal` names it.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// The hard timeout ended it.
    TimedOut,
    /// A cancel ended it.
    Canceled,
    /// It wrote more than [`ProcessSpec::output_limit`] to stdout.
    TooMuchOutput,
    /// It went over one of its resource limits.
    OverLimit(limits::LimitHit),
    /// Its output could not be stored (`disk_full`: for want of space), so it was stopped.
    LogUnwritable { disk_full: bool },
}

impl Exit {
    /// How a process that did not succeed ended, for a failure message.
    pub fn describe(self) -> String {
        match self {
            Exit::Exited { code: Some(n), .. } => format!("Exit code {n}"),
            Exit::Exited {
                code: None,
                signal: Some(n),
            } => format!("The process was killed by signal {}", signal_name(n)),
            Exit::Exited { code: None, .. } => "The process was killed by a signal".to_owned(),
            Exit::TimedOut => "The process ran past its time limit and was killed".to_owned(),
            Exit::Canceled => "The process was canceled".to_owned(),
            Exit::TooMuchOutput => {
                "The process wrote more than its output limit and was killed".to_owned()
            }
            Exit::OverLimit(hit) => hit.to_string(),
            Exit::LogUnwritable { disk_full: true } => {
                "The turn was stopped: the service's data volume is full, so its output could \
                 not be stored. Free space there; later runs work again at once"
                    .to_owned()
            }
            Exit::LogUnwritable { disk_full: false } => {
                "The turn was stopped: the service could not store its output".to_owned()
            }
        }
    }
}

/// `9 (SIGKILL)`: a signal's number with its name, when it has one.
pub fn signal_name(n: i32) -> String {
    match nix::sys::signal::Signal::try_from(n) {
        Ok(signal) => format!("{n} ({})", signal.as_str()),
        Err(_) => n.to_string(),
    }
}

/// A finished process with the end of what it wrote, decoded (invalid UTF-8 replaced).
#[derive(Debug, Clone)]
pub struct Completed {
    pub exit: Exit,
    /// The last `stdout_window` bytes of its stdout; an answer is printed last.
    pub stdout: String,
    /// The last `stderr_window` bytes of its stderr.
    pub stderr: String,
}

/// How much of each stream [`Running::complete`] reads back.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub stdout: u64,
    pub stderr: u64,
}

/// Starts and supervises engine processes.
#[derive(Debug, Clone)]
pub struct Supervisor {
    launch: Arc<Launch>,
    forks: Arc<forkserver::ForkServer>,
    reaper: Option<Arc<Reaper>>,
    /// Time between SIGTERM and SIGKILL.
    grace: Duration,
    /// The real paths of [`Launch::run_from`], resolved once: most turns' programs are found
    /// there.
    fixed_roots: Arc<[PathBuf]>,
}

/// How long past the grace period the service waits for a turn leader to end its tree before
/// it kills the group itself.
const LEADER_MARGIN: Duration = Duration::from_secs(2);

/// Where a turn's doors are opened.
enum Opening {
    /// Inside the turn's own network namespace, by its leader, which sends the listeners back
    /// over `control` (`theirs`, the leader's end, goes to the forkserver with the request).
    Inside {
        doors: Doors,
        control: std::os::fd::OwnedFd,
        theirs: Option<std::os::fd::OwnedFd>,
    },
    /// In the service's network, by the service, for a turn that shares it.
    Here {
        doors: Doors,
        listener: std::net::TcpListener,
    },
}

impl Opening {
    fn doors(&self) -> &Doors {
        match self {
            Opening::Inside { doors, .. } | Opening::Here { doors, .. } => doors,
        }
    }
}

/// How long a turn leader may take to open its network's listeners.
const LISTENERS_LIMIT: Duration = Duration::from_secs(10);

/// How long log readers may drain after the group is gone; a process that escaped the group
/// (a daemon that called setsid) could otherwise hold a pipe open forever.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

impl Supervisor {
    pub fn new(launch: Launch, reaper: Option<Arc<Reaper>>, grace: Duration) -> Self {
        if let Some(reaper) = &reaper {
            for dir in launch.cgroups.dirs() {
                reaper.watch_cgroups(&dir);
            }
        }
        let fixed_roots = real_paths(launch.run_from());
        Self {
            forks: Arc::new(forkserver::ForkServer::new(launch.exe.clone())),
            launch: Arc::new(launch),
            reaper,
            grace,
            fixed_roots: fixed_roots.into(),
        }
    }

    /// The same supervisor with another SIGTERM-to-SIGKILL grace period.
    pub fn with_grace(&self, grace: Duration) -> Self {
        Self {
            launch: self.launch.clone(),
            forks: self.forks.clone(),
            reaper: self.reaper.clone(),
            grace,
            fixed_roots: self.fixed_roots.clone(),
        }
    }

    /// Where a turn's model door listens, when turns have networks of their own to open one in
    /// and the egress its TLS to reach the endpoint.
    pub fn model_door(&self) -> Option<std::net::SocketAddr> {
        (self.holds_secrets() && self.launch.isolate).then_some(egress::MODEL_DOOR)
    }

    /// Whether the egress holds turns' secrets: Landlock keeps a turn from the files that hold
    /// them (the database, the CA's key) and its connections go through its doors only. Else a
    /// secret is lent to the turn.
    pub fn holds_secrets(&self) -> bool {
        self.launch.sandbox == SandboxStatus::Landlock
            && self.launch.tls.is_some()
            && (self.launch.isolate || self.launch.tcp_rules)
    }

    /// The certificate (PEM) of the egress's CA, when turns are confined.
    pub fn egress_ca(&self) -> Option<&str> {
        self.launch.tls.as_deref().map(egress::tls::Tls::ca_pem)
    }

    /// Whether processes are confined.
    pub fn sandbox(&self) -> SandboxStatus {
        self.launch.sandbox
    }

    /// Removes what the supervisor holds on the machine (its cgroups) once no turn runs.
    pub fn release(&self) {
        self.launch.cgroups.remove();
    }

    /// Which mechanism holds each barrier around a turn.
    pub fn barriers(&self) -> sandbox::Barriers {
        let cgroups = &self.launch.cgroups;
        sandbox::Barriers::of(
            self.launch.sandbox,
            self.launch.isolate,
            self.launch.tcp_rules,
            [cgroups.memory(), cgroups.pids(), cgroups.cpu()],
            self.launch.run_uids.as_ref().map(run_uids::RunUids::kind),
        )
    }

    /// Where the program of a confined `spec` comes from, when the sandbox changes it: the
    /// first `argv[0]` on the process's `PATH` lies outside what a confined process may read, so
    /// the kernel skips it (a later match runs instead, or none does). `None` when the program
    /// is found where the turn can run it, or for an unconfined process.
    pub fn program_outside_sandbox(&self, spec: &ProcessSpec) -> Option<ProgramOutside> {
        let confine = spec.confine.as_ref()?;
        if self.launch.sandbox != SandboxStatus::Landlock {
            return None;
        }
        let program = spec.argv.first()?;
        if program.contains('/') {
            return None;
        }
        let path = spec
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
            .or(self.launch.env.path())?;
        // Looked up one folder at a time: the rest of `PATH` only matters when the first
        // match is out of reach.
        let mut found = std::env::split_paths(path)
            .map(|dir| dir.join(program))
            .filter(|p| is_executable(p));
        let first = &found.next()?;
        let under = |p: &Path, roots: &[PathBuf]| {
            std::fs::canonicalize(p).is_ok_and(|real| roots.iter().any(|r| real.starts_with(r)))
        };
        if under(first, &self.fixed_roots) {
            return None;
        }
        // Resolved afresh: the turn's own folders, and whatever changed since the start.
        let roots = real_paths(
            self.launch
                .run_from()
                .chain(confine.readable.iter().cloned())
                .chain(confine.writable.iter().cloned()),
        );
        let reachable = |p: &Path| under(p, &roots);
        if reachable(first) {
            return None;
        }
        Some(ProgramOutside {
            program: program.clone(),
            first: first.clone(),
            runs: found.find(|p| reachable(p)),
        })
    }

    /// Which hosts a skill may ask its turns to reach.
    pub fn egress_allow(&self) -> &[crate::egress::HostPattern] {
        &self.launch.egress_allow
    }

    /// The environment every process starts from.
    pub fn child_env(&self) -> &ChildEnv {
        &self.launch.env
    }

    /// The resource limits of `spec`'s turn: none for an unconfined process.
    fn limits(&self, spec: &ProcessSpec) -> Option<limits::Limits> {
        let confine = spec
            .confine
            .as_ref()
            .filter(|_| self.launch.sandbox != SandboxStatus::Off)?;
        Some(self.launch.limits.lowered_by(&confine.limits))
    }

    /// Whether `spec`'s turn shares the service's network with Landlock bounding its TCP.
    fn shares_network_with_tcp_rules(&self, spec: &ProcessSpec) -> bool {
        spec.confine.is_some()
            && !self.launch.isolate
            && self.launch.tcp_rules
            && self.launch.sandbox == SandboxStatus::Landlock
    }

    /// The doors of `spec`'s turn to its allow-list, if it has any and a network to open them.
    fn doors(&self, spec: &ProcessSpec) -> std::io::Result<Option<Opening>> {
        let Some(confine) = &spec.confine else {
            return Ok(None);
        };
        if self.launch.isolate {
            let Some(doors) = Doors::plan(&confine.allow, confine.model_door.as_ref()) else {
                return Ok(None);
            };
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
            return Ok(Some(Opening::Inside {
                doors,
                control: ours.into(),
                theirs: Some(theirs.into()),
            }));
        }
        if self.shares_network_with_tcp_rules(spec) && !confine.allow.is_empty() {
            let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
            let doors = Doors::proxy_at(listener.local_addr()?);
            return Ok(Some(Opening::Here { doors, listener }));
        }
        Ok(None)
    }

    /// What the turn leader of `spec` runs, and how confined.
    fn leader_args(&self, spec: &ProcessSpec, opening: Option<&Opening>) -> leader::LeaderArgs {
        let confine = match (self.launch.sandbox, &spec.confine) {
            (SandboxStatus::Landlock, Some(confine)) => Some(confine),
            _ => None,
        };
        let mut env: Vec<(String, String)> = self.launch.env.base.clone();
        env.push(("PWD".to_owned(), spec.cwd.to_string_lossy().into_owned()));
        env.extend(spec.env.iter().cloned());
        if let Some(opening) = opening {
            env.extend(opening.doors().env.iter().cloned());
        }
        // A turn whose secrets the proxy puts in trusts the certificates it shows for their
        // hosts.
        let trust = self
            .launch
            .tls
            .as_ref()
            .filter(|_| opening.is_some() && confine.is_some_and(|c| !c.bound.is_empty()));
        if let Some(tls) = trust {
            env.extend(tls.trust_env());
        }
        let tcp_ports = self
            .shares_network_with_tcp_rules(spec)
            .then(|| match opening {
                Some(Opening::Here { listener, .. }) => listener
                    .local_addr()
                    .map(|a| vec![a.port()])
                    .unwrap_or_default(),
                _ => Vec::new(),
            });
        leader::LeaderArgs {
            grace_ms: self.grace.as_millis().try_into().unwrap_or(u64::MAX),
            landlock: confine.is_some(),
            isolate: self.launch.isolate && spec.confine.is_some(),
            harden: self.launch.sandbox != SandboxStatus::Off && spec.confine.is_some(),
            run_as: None,
            limits: self.limits(spec),
            cgroups: Vec::new(),
            born_in: None,
            memory_cgroup: self.launch.cgroups.memory().is_some(),
            cpu_cgroup: self.launch.cgroups.cpu().is_some(),
            pids_cgroup: self.launch.cgroups.pids().is_some(),
            own_folder: spec.confine.as_ref().and_then(|c| c.own_folder.clone()),
            tcp_ports,
            listen: match opening {
                Some(Opening::Inside { doors, .. }) => {
                    doors.listen.iter().map(|(address, _)| *address).collect()
                }
                _ => Vec::new(),
            },
            writable: confine.map(|c| c.writable.clone()).unwrap_or_default(),
            readable: confine
                .map(|c| {
                    c.readable
                        .iter()
                        .chain(&self.launch.readable)
                        .cloned()
                        .chain(trust.map(|tls| tls.trust_dir().to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
            argv: spec.argv.clone(),
            cwd: spec.cwd.clone(),
            env,
        }
    }

    /// Starts `spec`; the returned handle must be [`Running::complete`]d. `on_output` runs after
    /// each append to either log.
    pub async fn spawn(
        &self,
        spec: ProcessSpec,
        on_output: Option<OnOutput>,
    ) -> std::io::Result<Running> {
        use nix::fcntl::OFlag;
        use tokio::net::unix::pipe;
        if spec.argv.is_empty() {
            return Err(std::io::Error::other("empty argv"));
        }
        let mut opening = self.doors(&spec)?;
        let mut args = self.leader_args(&spec, opening.as_ref());
        let cgroups = args
            .limits
            .map(|limits| (self.launch.cgroups.clone(), limits));
        let logs = [spec.stdout_log.clone(), spec.stderr_log.clone()];
        // The logs and the turn's cgroups in one blocking task: each is a hop to a blocking
        // thread and back otherwise.
        let ([(stdout_file, stdout_start), (stderr_file, stderr_start)], groups) =
            tokio::task::spawn_blocking(move || -> std::io::Result<_> {
                let logs = open_logs(&logs)?;
                let groups = cgroups
                    .map(|(cgroups, limits)| {
                        cgroups.create(&uuid::Uuid::new_v4().simple().to_string(), &limits)
                    })
                    .transpose()?;
                Ok((logs, groups))
            })
            .await
            .map_err(std::io::Error::other)??;
        if let Some(groups) = &groups {
            args.cgroups = groups.tasks();
            args.born_in = groups.birthplace();
        }
        let (stdin_theirs, stdin_ours) = match spec.stdin {
            Some(_) => {
                let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
                (read, Some(write))
            }
            None => (std::fs::File::open("/dev/null")?.into(), None),
        };
        let (stdout_ours, stdout_theirs) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (stderr_ours, stderr_theirs) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let mut fds = vec![stdin_theirs, stdout_theirs, stderr_theirs];
        if let Some(Opening::Inside { theirs, .. }) = opening.as_mut() {
            fds.extend(theirs.take());
        }
        let turn_uid = match (&self.launch.run_uids, &spec.confine) {
            (Some(uids), Some(confine)) if args.harden => {
                let (uids, confine) = (uids.clone(), confine.clone());
                let turn_uid = tokio::task::spawn_blocking(move || {
                    run_uids::TurnUid::start(
                        &uids,
                        confine.own_folder.as_deref(),
                        &confine.writable,
                    )
                })
                .await
                .map_err(std::io::Error::other)??;
                // The turn may reopen its standard streams (`/dev/stdout`), which checks the
                // pipes' owner.
                for pipe in &fds[usize::from(spec.stdin.is_none())..3] {
                    nix::unistd::fchown(
                        pipe,
                        Some(turn_uid.uid().into()),
                        Some(turn_uid.uid().into()),
                    )?;
                }
                args.run_as = Some(turn_uid.uid());
                Some(turn_uid)
            }
            _ => None,
        };
        let leader = self.forks.fork(&args, fds).await?;
        let pid = leader.pid;
        // From here on a failure drops the guard, which ends the turn's tree.
        let group = GroupGuard {
            pgid: pid,
            reaper: self.reaper.clone(),
        };
        if let Some(reaper) = &self.reaper {
            reaper.watch(pid);
        }
        let served = match (opening, &spec.confine) {
            (Some(opening), Some(confine)) => {
                let log = EgressLog {
                    lines: confine.egress_log.clone(),
                    notices: spec.stderr_log.clone(),
                    on_output: on_output.clone(),
                };
                let (listeners, doors) = match opening {
                    Opening::Inside { doors, control, .. } => {
                        (receive_listeners(control, doors.listen.len()).await?, doors)
                    }
                    Opening::Here { doors, listener } => (vec![listener], doors),
                };
                let egress = Egress {
                    allow: confine.allow.clone(),
                    bound: confine.bound.clone(),
                    tls: self.launch.tls.clone(),
                    log: Arc::new(log),
                };
                Some(Served::start(listeners, &doors, egress)?)
            }
            _ => None,
        };
        let stdin_task = match (stdin_ours, spec.stdin) {
            (Some(pipe), Some(bytes)) => {
                let mut pipe = pipe::Sender::from_owned_fd(pipe)?;
                Some(tokio::spawn(async move {
                    // A process that exits without reading its stdin is not an error here.
                    let _ = pipe.write_all(&bytes).await;
                }))
            }
            _ => None,
        };
        let stdout_pipe = pipe::Receiver::from_owned_fd(stdout_ours)?;
        let stderr_pipe = pipe::Receiver::from_owned_fd(stderr_ours)?;
        let overflow = CancellationToken::new();
        let unwritable = Unwritable::default();
        let stdout = tokio::spawn(copy_to_log(
            Box::new(stdout_pipe),
            stdout_file,
            on_output.clone(),
            spec.output_limit.map(|max| Limit {
                max: max.saturating_sub(stdout_start),
                overflow: Some(overflow.clone()),
            }),
            unwritable.clone(),
            spec.secrets.clone(),
        ));
        let stderr = tokio::spawn(copy_to_log(
            Box::new(stderr_pipe),
            stderr_file,
            on_output,
            spec.output_limit.map(|max| Limit {
                max: max.saturating_sub(stderr_start),
                overflow: None,
            }),
            unwritable.clone(),
            spec.secrets.clone(),
        ));
        let watched = args
            .limits
            .zip(
                spec.confine
                    .as_ref()
                    .and_then(|c| c.writable.first().cloned()),
            )
            .map(|(limits, root)| watch::Watched {
                limits,
                root,
                cpu: groups.as_ref().and_then(cgroups::TurnGroups::cpu_counter),
            });
        Ok(Running {
            leader,
            pid,
            group,
            turn_uid,
            served,
            groups,
            watched,
            mark: ProcessMark {
                pgid: pid,
                boot_id: boot_id(),
                start_ticks: start_ticks(pid).unwrap_or(0),
            },
            stdin_task,
            stdout,
            stderr,
            overflow,
            unwritable,
            stdout_log: spec.stdout_log,
            stderr_log: spec.stderr_log,
            stdout_start,
            stderr_start,
            supervisor: self.clone(),
        })
    }
}

/// A process under supervision.
#[derive(Debug)]
pub struct Running {
    leader: forkserver::Leader,
    pid: i32,
    /// Kills the group if this handle is dropped before [`Running::complete`] ended it.
    group: GroupGuard,
    /// The uid the turn runs under, held until its tree is dead.
    turn_uid: Option<run_uids::TurnUid>,
    /// The turn's doors to its allow-list, served while it runs.
    served: Option<Served>,
    /// The turn's cgroups, removed when it is over.
    groups: Option<cgroups::TurnGroups>,
    /// The turn's limits and what the supervisor measures against them.
    watched: Option<watch::Watched>,
    mark: ProcessMark,
    stdin_task: Option<JoinHandle<()>>,
    stdout: JoinHandle<std::io::Result<()>>,
    stderr: JoinHandle<std::io::Result<()>>,
    /// Fired by a log copier when its stream passes the output limit.
    overflow: CancellationToken,
    /// Fired by a log copier that cannot write its log.
    unwritable: Unwritable,
    stdout_log: PathBuf,
    stderr_log: PathBuf,
    stdout_start: u64,
    stderr_start: u64,
    supervisor: Supervisor,
}

impl Running {
    /// What identifies the process group, to record for crash recovery.
    pub fn mark(&self) -> &ProcessMark {
        &self.mark
    }

    /// Waits until the process exits, `deadline` passes, or `cancel` fires (in the last two
    /// cases the group is terminated), then reads back the end of each stream. Always leaves
    /// no process of the group alive.
    pub async fn complete(
        mut self,
        deadline: Instant,
        cancel: &CancellationToken,
        windows: Windows,
    ) -> Completed {
        let exit = tokio::select! {
            // Passing the output limit wins over an exit at the same moment.
            biased;
            () = self.overflow.cancelled() => Exit::TooMuchOutput,
            () = self.unwritable.fired.cancelled() => Exit::LogUnwritable {
                disk_full: self.unwritable.disk_full.load(std::sync::atomic::Ordering::Relaxed),
            },
            code = self.leader.wait() => Exit::Exited { code, signal: None },
            () = tokio::time::sleep_until(deadline) => Exit::TimedOut,
            () = cancel.cancelled() => Exit::Canceled,
            hit = watch::watch(self.watched.clone()) => Exit::OverLimit(hit),
        };
        if !matches!(exit, Exit::Exited { .. }) {
            self.terminate().await;
        }
        // The leader is gone; anything it left behind in its group goes too.
        self.group.end();
        let signal = self.leader.signal();
        let exit = match exit {
            Exit::Exited { code, .. } => Exit::Exited { code, signal },
            other => other,
        };
        let groups = self.groups.take();
        let turn_uid = self.turn_uid.take();
        let watched = self.watched.take();
        if let Some(served) = self.served.take() {
            served.close().await;
        }
        if let Some(task) = self.stdin_task.take() {
            task.abort();
        }
        drain(self.stdout).await;
        drain(self.stderr).await;
        let logs = [
            (self.stdout_log, self.stdout_start, windows.stdout),
            (self.stderr_log, self.stderr_start, windows.stderr),
        ];
        // The limit check and both tails in one blocking task: each `tokio::fs` call would be a
        // hop of its own.
        let ended = exit;
        let (exit, [stdout, stderr], groups) = tokio::task::spawn_blocking(move || {
            // Only a turn that ended by itself is measured: a cancel or a timeout is why the
            // others ended.
            let exit = match exit {
                Exit::Exited { .. } => watch::over_limit(groups.as_ref(), signal, watched.as_ref())
                    .map_or(exit, Exit::OverLimit),
                other => other,
            };
            drop(turn_uid);
            (
                exit,
                logs.map(|(path, from, max)| tail(&path, from, max)),
                groups,
            )
        })
        .await
        .unwrap_or_else(|_| (ended, Default::default(), None));
        // The turn's processes are gone: removing its empty cgroups need not hold its slot.
        if let Some(groups) = groups {
            tokio::task::spawn_blocking(move || drop(groups));
        }
        Completed {
            exit,
            stdout,
            stderr,
        }
    }

    /// SIGTERM to the group; the leader SIGKILLs its tree after the grace period. If it has
    /// not ended by then, SIGKILL to the group.
    async fn terminate(&mut self) {
        signal_group(self.pid, Signal::SIGTERM);
        if tokio::time::timeout(self.supervisor.grace + LEADER_MARGIN, self.leader.wait())
            .await
            .is_err()
        {
            signal_group(self.pid, Signal::SIGKILL);
            self.leader.wait().await;
        }
    }
}

/// A process group that is killed when its handle goes away without ending it, so a failure
/// after a turn started (a store write, a log file) never leaves its processes running.
#[derive(Debug)]
struct GroupGuard {
    pgid: i32,
    reaper: Option<Arc<Reaper>>,
}

impl GroupGuard {
    /// Kills what is left of the group (nothing, once its leader ended it) and stops watching.
    fn end(&mut self) {
        if self.pgid > 0 {
            signal_group(self.pgid, Signal::SIGKILL);
            if let Some(reaper) = &self.reaper {
                reaper.forget(self.pgid);
            }
            self.pgid = 0;
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.pgid > 0 {
            // SIGHUP makes the leader kill its whole tree (escaped members too) and exit; a
            // SIGKILL to the group could kill the leader before it did.
            let _ = nix::sys::signal::kill(Pid::from_raw(self.pgid), Signal::SIGHUP);
            if let Some(reaper) = &self.reaper {
                reaper.forget(self.pgid);
            }
        }
    }
}

/// The `count` listeners a turn leader opened in its network namespace, sent over `control`
/// before its command starts; an error when the leader ended without sending them.
async fn receive_listeners(
    control: std::os::fd::OwnedFd,
    count: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::AsRawFd as _;
    let stream = std::os::unix::net::UnixStream::from(control);
    stream.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(stream)?;
    let receive = async {
        loop {
            stream.readable().await?;
            let got = stream.try_io(tokio::io::Interest::READABLE, || {
                let mut byte = [0u8; 1];
                let mut iov = [std::io::IoSliceMut::new(&mut byte)];
                let mut space = nix::cmsg_space!([std::os::fd::RawFd; 16]);
                let message = recvmsg::<()>(
                    stream.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    MsgFlags::MSG_CMSG_CLOEXEC,
                )
                .map_err(std::io::Error::from)?;
                let mut fds = Vec::new();
                for control in message.cmsgs().map_err(std::io::Error::from)? {
                    if let ControlMessageOwned::ScmRights(raw) = control {
                        fds.extend(sys::adopt_received(&raw));
                    }
                }
                Ok(fds)
            });
            match got {
                Ok(fds) => return Ok(fds),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    };
    let fds: Vec<std::os::fd::OwnedFd> = tokio::time::timeout(LISTENERS_LIMIT, receive)
        .await
        .map_err(|_| std::io::Error::other("the turn leader did not open its network"))??;
    if fds.len() != count {
        return Err(std::io::Error::other(
            "the turn leader could not open its network (see the turn's stderr)",
        ));
    }
    Ok(fds.into_iter().map(std::net::TcpListener::from).collect())
}

fn signal_group(pgid: i32, signal: Signal) {
    // ESRCH (no such group) is the normal case once everything has exited.
    let _ = killpg(Pid::from_raw(pgid), signal);
}

/// Kills what is left of a group recorded before a crash, if that group is still ours.
pub fn kill_recorded_group(mark: &ProcessMark) -> bool {
    if mark.boot_id != boot_id() {
        return false;
    }
    let ours = group_members(mark.pgid)
        .into_iter()
        .any(|pid| start_ticks(pid).is_some_and(|t| t >= mark.start_ticks));
    if ours {
        signal_group(mark.pgid, Signal::SIGKILL);
    }
    ours
}

/// The real paths of `paths` that exist.
fn real_paths(paths: impl Iterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect()
}

/// Pids of the live processes in group `pgid`, from `/proc`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            proc_stat_fields(*pid)
                .and_then(|f| f.get(2).and_then(|g| g.parse::<i32>().ok()))
                .is_some_and(|g| g == pgid)
        })
        .collect()
}

/// Fields of `/proc/<pid>/stat` after the command name (field 3 onwards); zombies excluded.
pub(crate) fn proc_stat_fields(pid: i32) -> Option<Vec<String>> {
    proc_stat_fields_of(&pid.to_string())
}

/// [`proc_stat_fields`] of `/proc/<name>` (a pid, or `self`).
pub(crate) fn proc_stat_fields_of(name: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<String> = rest.split_whitespace().map(str::to_owned).collect();
    (fields.first().map(String::as_str) != Some("Z")).then_some(fields)
}

/// The process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
fn start_ticks(pid: i32) -> Option<u64> {
    proc_stat_fields(pid)?.get(19)?.parse().ok()
}

/// This boot's id, read once: it cannot change while the service runs.
fn boot_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    })
    .clone()
}

/// Opens the logs for appending, with where each ends now.
fn open_logs(paths: &[PathBuf; 2]) -> std::io::Result<[(tokio::fs::File, u64); 2]> {
    let open = |path: &PathBuf| -> std::io::Result<(tokio::fs::File, u64)> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let len = file.metadata()?.len();
        Ok((tokio::fs::File::from_std(file), len))
    };
    Ok([open(&paths[0])?, open(&paths[1])?])
}

type Pipe = Box<dyn AsyncRead + Send + Unpin>;

/// How much of a stream is kept, and what passing it does.
struct Limit {
    max: u64,
    /// Fired (and the copy stopped, so the writer gets a broken pipe) when the stream passes
    /// `max`; without it, the rest is read and dropped.
    overflow: Option<CancellationToken>,
}

/// Set when a log cannot be written: the turn is stopped rather than left blocked on a pipe
/// nobody reads.
#[derive(Debug, Clone, Default)]
struct Unwritable {
    fired: CancellationToken,
    /// The write failed for want of space (`ENOSPC`, `EDQUOT`).
    disk_full: Arc<std::sync::atomic::AtomicBool>,
}

impl Unwritable {
    fn fire(&self, e: &std::io::Error) {
        if is_disk_full(e) {
            self.disk_full
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.fired.cancel();
    }
}

/// Whether `e` says the file system has no room left.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Appends everything `from` yields to `to`, up to the `limit`; each piece is in the file
/// (flushed) before `on_output` announces it. A failed write fires `unwritable`.
async fn copy_to_log(
    from: Pipe,
    to: tokio::fs::File,
    on_output: Option<OnOutput>,
    limit: Option<Limit>,
    unwritable: Unwritable,
    secrets: redact::Secrets,
) -> std::io::Result<()> {
    let masker = redact::Masker::new(secrets);
    let copied = copy_bounded(from, to, on_output, limit, masker).await;
    if let Err(e) = &copied {
        unwritable.fire(e);
    }
    copied
}

async fn copy_bounded(
    mut from: Pipe,
    mut to: tokio::fs::File,
    on_output: Option<OnOutput>,
    limit: Option<Limit>,
    mut masker: redact::Masker,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    let mut dropping = false;
    loop {
        let n = from.read(&mut buf).await?;
        let piece = match n {
            0 => masker.finish(),
            n => masker.push(&buf[..n]),
        };
        let keep = limit.as_ref().map_or(piece.len(), |l| {
            piece.len().min(l.max.saturating_sub(written) as usize)
        });
        if keep > 0 {
            written += keep as u64;
            to.write_all(&piece[..keep]).await?;
            to.flush().await?;
            if let Some(hook) = &on_output {
                (hook.0)();
            }
        }
        if keep < piece.len()
            && let Some(limit) = &limit
        {
            if let Some(overflow) = &limit.overflow {
                overflow.cancel();
                return Ok(());
            }
            if !dropping {
                dropping = true;
                to.write_all(b"\n[skill-runner] output past the log limit is not kept\n")
                    .await?;
                to.flush().await?;
            }
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// The last `max` bytes `path` gained after offset `from`, decoded (invalid UTF-8 replaced).
/// Only the turn appends to its logs, so once it is gone their ends are where its output ends.
fn tail(path: &Path, from: u64, max: u64) -> String {
    use std::io::{Read as _, Seek as _};
    let read = || {
        let mut file = std::fs::File::open(path)?;
        let end = file.metadata()?.len();
        let start = from.max(end.saturating_sub(max));
        let mut buf = Vec::new();
        if start < end {
            file.seek(SeekFrom::Start(start))?;
            file.take(end - start).read_to_end(&mut buf)?;
        }
        Ok::<_, std::io::Error>(buf)
    };
    match read() {
        Ok(buf) => String::from_utf8_lossy(&buf).into_owned(),
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "cannot read process output");
            String::new()
        }
    }
}

async fn drain(reader: JoinHandle<std::io::Result<()>>) {
    let abort = reader.abort_handle();
    match tokio::time::timeout(DRAIN_LIMIT, reader).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "copying engine output to its log failed"),
        Ok(Err(_)) => {}
        Err(_) => abort.abort(),
    }
}
