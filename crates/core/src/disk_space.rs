//! What the service does when its data volume fills up: it keeps room to record what it was
//! doing, refuses new work with `507` until space is back, and loses nothing.
//!
//! At start the service sets aside a *reserve*: a file of `SKILL_RUNNER_DISK_RESERVE_MB`
//! (default 16 MiB) under the data dir, with its blocks allocated. When a write fails for want of
//! space (a turn's log, a turn that failed on a full volume, a store write), the reserve is
//! removed, so the database and the run folders have room to record the runs' ends, and the
//! service stops taking new jobs, uploads, replies and installs (`507`; `/readyz` says
//! `storage: full`). A volume something else filled is found before work is taken: less than
//! a MiB free beside the reserve counts as a failed write. Each refusal tries to take the
//! reserve back; once the volume has room for it again (plus a margin), the service accepts work
//! as before.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Free space kept beyond the reserve before the service takes work again.
const MARGIN: u64 = 1 << 20;

/// The reserve and whether it had to be given up.
#[derive(Debug)]
pub struct DiskSpace {
    reserve: PathBuf,
    bytes: u64,
    full: AtomicBool,
    /// One attempt at a time to take the reserve back.
    retaking: Mutex<()>,
}

impl DiskSpace {
    /// Sets aside `bytes` as the file `reserve` (keeping a reserve already there). A volume
    /// without room for it starts in the full state.
    pub fn set_up(reserve: PathBuf, bytes: u64) -> Self {
        let space = Self {
            reserve,
            bytes,
            full: AtomicBool::new(false),
            retaking: Mutex::new(()),
        };
        if let Err(e) = space.allocate() {
            tracing::warn!(
                error = %e,
                "cannot set aside SKILL_RUNNER_DISK_RESERVE_MB on the data volume: new work is \
                 refused (507) until it has room"
            );
            space.full.store(true, Ordering::SeqCst);
        }
        space
    }

    /// Whether new work may be taken: with the reserve in place and room on the volume beside
    /// it, or the reserve taken back now. A volume filled by something else than the service
    /// (no write of its own failed yet) is found here: the reserve is given up as if a write
    /// had failed.
    pub fn accepting(&self) -> bool {
        if !self.full.load(Ordering::SeqCst) {
            if self.free() >= MARGIN {
                return true;
            }
            self.ran_out();
            return false;
        }
        let Ok(_one) = self.retaking.try_lock() else {
            return false;
        };
        if self.free() < self.bytes.saturating_add(MARGIN) || self.allocate().is_err() {
            return false;
        }
        self.full.store(false, Ordering::SeqCst);
        tracing::info!("the data volume has room again: new work is accepted");
        true
    }

    /// Free bytes on the data volume.
    fn free(&self) -> u64 {
        crate::run_folder::free_bytes(self.reserve.parent().unwrap_or(&self.reserve))
    }

    /// Whether the reserve had to be given up and could not be taken back yet.
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
    }

    /// A write found no room: gives the reserve up so runs can be recorded, and refuses new
    /// work until it can be taken back.
    pub fn ran_out(&self) {
        if self.full.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::error!(
            "the data volume is full: new work is refused (507) until an operator frees space"
        );
        if let Err(e) = std::fs::remove_file(&self.reserve)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::error!(error = %e, "cannot give up the disk reserve");
        }
    }

    /// Writes the reserve with its blocks allocated (a sparse file would hold no room).
    fn allocate(&self) -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.reserve)?;
        let len = i64::try_from(self.bytes).unwrap_or(i64::MAX);
        let allocated = nix::fcntl::posix_fallocate(&file, 0, len).map_err(std::io::Error::from);
        if allocated.is_err() {
            drop(file);
            let _ = std::fs::remove_file(&self.reserve);
        }
        allocated
    }
}

/// Whether `cause` is a write that found no room (`ENOSPC`, `EDQUOT`, SQLite's `SQLITE_FULL`).
pub fn is_storage_full(cause: &anyhow::Error) -> bool {
    cause.chain().any(|e| {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return crate::process::is_disk_full(io);
        }
        crate::store::is_storage_full(e)
    })
}
