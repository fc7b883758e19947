//! The SQLite file under the service: still the one the store opened, and writable.
//!
//! Deleted or replaced while open (`rm`, a restore moved over it), the database goes on being
//! written through the descriptors SQLite holds, to a file no one will open again: everything
//! accepted from then on would be gone after a restart. So the store notes the device and inode
//! of the database and its WAL at open and compares them with those at the paths every second
//! and before every write; from the first difference it refuses writes until it is restarted,
//! with one loud error. Files that cannot be written (made immutable, a volume remounted
//! read-only after I/O errors) refuse writes too, while that lasts; so does a checkpoint that
//! failed to write the database file, until one succeeds.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::Unavailable;
use crate::background::Background;

/// How often the files are looked at beside the writes.
const EVERY: Duration = Duration::from_secs(1);

/// The database's files as opened, and what was found wrong with them.
#[derive(Debug)]
pub(crate) struct Watch {
    /// The database and its WAL, with their device and inode at open.
    files: [(PathBuf, (u64, u64)); 2],
    /// Latched at the first file found gone or replaced.
    moved: AtomicBool,
    /// Whether the last look found a file unwritable (to log the change once).
    unwritable: AtomicBool,
    /// Why the last checkpoint could not write the database file, until one succeeds.
    checkpoint: Mutex<Option<String>>,
}

/// A file's device and inode.
fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

impl Watch {
    /// Notes the files of the database at `path`, open (with its WAL) by the store.
    pub(crate) fn new(path: &Path) -> std::io::Result<Self> {
        let wal = crate::Sqlite::wal(path);
        Ok(Self {
            files: [
                (path.to_owned(), identity(path)?),
                (wal.clone(), identity(&wal)?),
            ],
            moved: AtomicBool::new(false),
            unwritable: AtomicBool::new(false),
            checkpoint: Mutex::new(None),
        })
    }

    /// `Ok` while a write would be kept: the files are those opened and can be written, and
    /// the checkpoints succeed.
    pub(crate) fn writable(&self) -> Result<(), Unavailable> {
        self.in_place()?;
        for (path, _) in &self.files {
            if let Err(e) = nix::unistd::access(path, nix::unistd::AccessFlags::W_OK) {
                if !self.unwritable.swap(true, Ordering::SeqCst) {
                    tracing::error!(error = %e, path = %path.display(),
                        "the database cannot be written: writes are refused (503) until it can");
                }
                return Err(Unavailable(format!(
                    "{} cannot be written: {e}",
                    path.display()
                )));
            }
        }
        if self.unwritable.swap(false, Ordering::SeqCst) {
            tracing::info!("the database can be written again: writes are taken");
        }
        match &*self.checkpoint.lock().unwrap() {
            Some(cause) => Err(Unavailable(format!("the last checkpoint failed: {cause}"))),
            None => Ok(()),
        }
    }

    /// `Ok` while the paths name the files opened; from the first time they do not, never.
    pub(crate) fn in_place(&self) -> Result<(), Unavailable> {
        if self.moved.load(Ordering::SeqCst) {
            return Err(self.moved_error());
        }
        for (path, opened) in &self.files {
            let found = identity(path);
            if found.as_ref().ok() == Some(opened) {
                continue;
            }
            if !self.moved.swap(true, Ordering::SeqCst) {
                let found = match found {
                    Ok(_) => "replaced by another file".to_owned(),
                    Err(e) => format!("gone ({e})"),
                };
                tracing::error!(
                    path = %path.display(),
                    "the database file was {found} while the service had it open: every write \
                     is refused (503) from now on, since a restart would not find it. Copy the \
                     open file out of /proc/{}/fd if it is needed, then restart the service",
                    std::process::id()
                );
            }
            return Err(self.moved_error());
        }
        Ok(())
    }

    fn moved_error(&self) -> Unavailable {
        Unavailable(format!(
            "{} was deleted or replaced while open",
            self.files[0].0.display()
        ))
    }

    /// Records a checkpoint's outcome; a failure to write is logged once, as is its end.
    pub(crate) fn checkpointed(&self, outcome: Result<(), String>) {
        let mut failing = self.checkpoint.lock().unwrap();
        match (&*failing, outcome) {
            (None, Err(cause)) => {
                tracing::error!(error = %cause,
                    "a checkpoint could not write the database: writes are refused (503) until \
                     one succeeds");
                *failing = Some(cause);
            }
            (Some(_), Ok(())) => {
                tracing::info!("a checkpoint wrote the database again: writes are taken");
                *failing = None;
            }
            _ => {}
        }
    }

    /// Whether the last checkpoint failed to write (the next one should not wait for a write).
    pub(crate) fn checkpoint_failing(&self) -> bool {
        self.checkpoint.lock().unwrap().is_some()
    }

    /// Looks at the files every second until the handle is stopped or dropped, so a file
    /// deleted or made unwritable is logged, and readiness fails, without waiting for a write.
    pub(crate) fn spawn(self: Arc<Self>) -> Background {
        Background::spawn(|mut stopped| async move {
            let mut every = tokio::time::interval(EVERY);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = every.tick() => {}
                }
                let _ = self.writable();
            }
        })
    }
}
