//! The folders of one run (or one invoke call): what the service keeps, and the workspace its
//! turns may write.
//!
//! A turn runs code nobody reviewed, so it must never be able to replace what the service later
//! reads and serves. The service's own files (`input.json`, `logs/`, `result/`, `bundle/`) sit
//! beside the workspace, never inside it; a confined turn can write only the workspace
//! (`workspace/`: its working directory, `artifacts/`, `uploads/`, its home and `TMPDIR`).
//! Whatever the service reads back from the workspace (artifacts, debug bundles, previews) it
//! opens without following links.

use std::path::{Path, PathBuf};

use crate::{Confinement, ProcessSpec};

/// The workspace of a run, relative to the run folder.
pub const WORKSPACE: &str = "workspace";
/// The home of a run's processes inside the workspace. It may hold lent logins while a turn
/// runs, so the management file routes and bundles never show it.
pub const HOME: &str = ".agent-home";
/// [`HOME`] as a path from the run folder.
pub const HOME_IN_FOLDER: &str = "workspace/.agent-home";

/// One run folder (`<data>/runs/<run_id>`, or an invoke call's scratch folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFolder {
    root: PathBuf,
}

impl RunFolder {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this node's data dir holds the folder (among nodes, another node's may; an
    /// unreadable data dir counts as not holding it).
    pub async fn is_here(&self) -> bool {
        tokio::fs::try_exists(&self.root).await.unwrap_or(false)
    }

    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn stdout_log(&self) -> PathBuf {
        self.root.join("logs/stdout.txt")
    }

    pub fn stderr_log(&self) -> PathBuf {
        self.root.join("logs/stderr.txt")
    }

    /// Every connection the run's turns opened (or were refused), one JSON line each.
    pub fn egress_log(&self) -> PathBuf {
        self.root.join("logs/egress.jsonl")
    }

    /// Every turn's prompt, appended.
    pub fn prompt_log(&self) -> PathBuf {
        self.root.join("logs/prompt.txt")
    }

    /// Appends turn `turn`'s prompt to [`RunFolder::prompt_log`] under a header naming the turn.
    pub async fn append_prompt(&self, turn: u32, prompt: &str) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt as _;
        let mut log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.prompt_log())
            .await?;
        log.write_all(format!("=== turn {turn} ===\n{prompt}\n\n").as_bytes())
            .await
    }

    pub fn input_file(&self) -> PathBuf {
        self.root.join("input.json")
    }

    pub fn result_file(&self) -> PathBuf {
        self.root.join("result/result.json")
    }

    pub fn bundle_dir(&self) -> PathBuf {
        self.root.join("bundle")
    }

    /// The turn's working directory and the only folder it may write.
    pub fn workspace(&self) -> PathBuf {
        self.root.join(WORKSPACE)
    }

    pub fn artifacts(&self) -> PathBuf {
        self.workspace().join("artifacts")
    }

    /// The note on the skill an agent writes when the request asked for one
    /// (`collect_skill_run_feedback`), as the reference names it.
    pub fn feedback_note(&self) -> PathBuf {
        self.workspace().join("_skill_run_feedback.md")
    }

    /// File inputs, one file per input key.
    pub fn uploads(&self) -> PathBuf {
        self.workspace().join("uploads")
    }

    /// `HOME` of the turn's processes.
    pub fn home(&self) -> PathBuf {
        self.workspace().join(HOME)
    }

    /// `TMPDIR` of the turn's processes.
    pub fn tmp(&self) -> PathBuf {
        self.workspace().join("tmp")
    }

    /// Creates the folders a turn needs and writes the job's `input.json` when given, parents
    /// first and in one blocking task (each `tokio::fs` call is a hop to the blocking pool, and
    /// a failed `mkdir` of a child whose parent is missing costs a second one).
    pub async fn create(&self, input: Option<Vec<u8>>) -> std::io::Result<()> {
        let dirs = [
            self.root.clone(),
            self.logs(),
            self.root.join("result"),
            self.workspace(),
            self.artifacts(),
            self.home(),
            self.tmp(),
        ];
        let input_file = self.input_file();
        tokio::task::spawn_blocking(move || {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            dirs.iter().try_for_each(|dir| builder.create(dir))?;
            match input {
                Some(input) => write_atomic_blocking(&input_file, &input),
                None => Ok(()),
            }
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// Writes through a temporary file and a rename, so readers never see half a file.
pub fn write_atomic_blocking(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

impl RunFolder {
    /// A process of this run: `argv` in the workspace with `HOME` and `TMPDIR` there, `env`
    /// added, logs in `logs/`, confined to the workspace plus `readable` (read and execute).
    pub fn process(
        &self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        readable: Vec<PathBuf>,
    ) -> ProcessSpec {
        let text = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut all = vec![
            ("HOME".to_owned(), text(self.home())),
            ("TMPDIR".to_owned(), text(self.tmp())),
        ];
        all.extend(env);
        ProcessSpec {
            argv,
            cwd: self.workspace(),
            env: all,
            stdin: None,
            stdout_log: self.stdout_log(),
            stderr_log: self.stderr_log(),
            output_limit: None,
            confine: Some(Confinement {
                writable: vec![self.workspace()],
                readable,
                allow: Vec::new(),
                egress_log: self.egress_log(),
                limits: Default::default(),
                own_folder: Some(self.root.clone()),
                ..Default::default()
            }),
            secrets: Default::default(),
        }
    }
}

/// Opens the regular file `rel` under `root` for reading without following any link on the way
/// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), and only if it has one link: a
/// turn may plant a symlink, or a hard link to a file outside its workspace, where the service
/// later reads. `NotFound` for a missing file, `InvalidInput` for anything refused.
pub fn open_beneath(root: &Path, rel: &Path) -> std::io::Result<std::fs::File> {
    open_beneath_with(root, rel, READ_ONLY)
}

/// [`open_beneath`] for reading and writing: a file of the run's the service rewrites (an
/// artifact with a secret's value masked).
pub fn open_beneath_for_update(root: &Path, rel: &Path) -> std::io::Result<std::fs::File> {
    let read_write = READ_ONLY
        .difference(nix::fcntl::OFlag::O_RDONLY)
        .union(nix::fcntl::OFlag::O_RDWR);
    open_beneath_with(root, rel, read_write)
}

fn open_beneath_with(
    root: &Path,
    rel: &Path,
    flags: nix::fcntl::OFlag,
) -> std::io::Result<std::fs::File> {
    use nix::fcntl::{OpenHow, ResolveFlag, openat2};
    let dir = std::fs::File::open(root)?;
    let how = OpenHow::new().flags(flags).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    );
    let fd = openat2(&dir, rel, how).map_err(|e| match e {
        nix::errno::Errno::ELOOP | nix::errno::Errno::EXDEV => refused("a link on the way"),
        other => open_error(other),
    })?;
    plain(std::fs::File::from(fd))
}

/// Creates `path` (which must not exist) readable by its owner only, with `bytes` on disk: a
/// login lent to a turn, the egress CA's key.
pub fn write_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Opens `path` for reading only if it is a regular file with one link, without following a
/// link in its last part: for files a turn could have written outside a run folder (the invoke
/// host's allowed root, a lent login's copy). Errors as [`open_beneath`].
pub fn open_plain(path: &Path) -> std::io::Result<std::fs::File> {
    let fd =
        nix::fcntl::open(path, READ_ONLY, nix::sys::stat::Mode::empty()).map_err(|e| match e {
            nix::errno::Errno::ELOOP => refused("a link"),
            other => open_error(other),
        })?;
    plain(std::fs::File::from(fd))
}

/// Read-only, never following a last link, and non-blocking: opening a FIFO for reading waits
/// for a writer, a terminal may become the controlling one, and a device may do anything, so
/// what is not a regular file is refused after the open, by `fstat`, never waited on.
const READ_ONLY: nix::fcntl::OFlag = nix::fcntl::OFlag::O_RDONLY
    .union(nix::fcntl::OFlag::O_CLOEXEC)
    .union(nix::fcntl::OFlag::O_NOFOLLOW)
    .union(nix::fcntl::OFlag::O_NONBLOCK)
    .union(nix::fcntl::OFlag::O_NOCTTY);

fn refused(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_owned())
}

fn open_error(errno: nix::errno::Errno) -> std::io::Error {
    match errno {
        nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR => {
            std::io::Error::from(std::io::ErrorKind::NotFound)
        }
        other => std::io::Error::from(other),
    }
}

/// `file` if it is a regular file with one link.
fn plain(file: std::fs::File) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("not a regular file"));
    }
    if meta.nlink() != 1 {
        return Err(refused("a file with more than one link"));
    }
    Ok(file)
}

/// Whether the file system holding `path` has (almost) no room left for an unprivileged
/// writer: less than one MiB.
pub fn volume_full(path: &Path) -> bool {
    free_bytes(path) < 1 << 20
}

/// The bytes an unprivileged writer may still write on the file system holding `path`
/// (`u64::MAX` when it cannot be asked).
pub fn free_bytes(path: &Path) -> u64 {
    nix::sys::statvfs::statvfs(path).map_or(u64::MAX, |s| {
        s.blocks_available().saturating_mul(s.fragment_size())
    })
}

/// Whether `path` is a regular file with one link, without following a link.
pub fn is_plain_file(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.nlink() == 1)
}
