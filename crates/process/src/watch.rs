//! Measuring a running turn against its limits: its CPU time (where a cgroup counts it) and its
//! workspace's size while it runs, and, once it ended, which limit (if any) it went over.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{cgroups, limits};

/// How often a turn's CPU time and workspace are measured while it runs (less often when a walk
/// of its workspace takes long).
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// A turn's limits and what the supervisor measures against them while it runs.
#[derive(Debug, Clone)]
pub struct Watched {
    pub limits: limits::Limits,
    /// The folder whose size counts (the workspace).
    pub root: PathBuf,
    /// The turn's CPU time counter, where a cgroup keeps one.
    pub cpu: Option<cgroups::CpuCounter>,
}

impl Watched {
    /// The limit the turn is over now, measured (blocking).
    fn measure(&self) -> Option<limits::Resource> {
        use limits::Resource;
        let cpu_ns = self.cpu.as_ref().map_or(0, cgroups::CpuCounter::ns);
        if cpu_ns >= self.limits.cpu_seconds.saturating_mul(1_000_000_000) {
            return Some(Resource::Cpu);
        }
        let used = usage(&self.root);
        if used.total > self.limits.disk_mb << 20 {
            Some(Resource::Disk)
        } else if used.largest >= self.limits.file_mb << 20 {
            Some(Resource::File)
        } else {
            None
        }
    }

    fn hit(&self, resource: limits::Resource) -> limits::LimitHit {
        limits::LimitHit {
            resource,
            limit: self.limits.of(resource),
        }
    }
}

/// Resolves once the turn of `watched` is over its CPU time or workspace size (never without
/// limits). A file at its size cap is not a reason to stop: the writes past it fail.
pub async fn watch(watched: Option<Watched>) -> limits::LimitHit {
    let Some(watched) = watched else {
        return std::future::pending().await;
    };
    let mut pause = WATCH_INTERVAL;
    loop {
        tokio::time::sleep(pause).await;
        let measuring = watched.clone();
        let started = std::time::Instant::now();
        let over = tokio::task::spawn_blocking(move || measuring.measure())
            .await
            .ok()
            .flatten();
        // A workspace with many files takes long to walk: walk it at most a tenth of the time.
        pause = WATCH_INTERVAL.max(started.elapsed() * 10);
        if let Some(resource) = over.filter(|r| *r != limits::Resource::File) {
            return watched.hit(resource);
        }
    }
}

/// The size of a folder's files: their total and the largest.
#[derive(Debug, Default)]
struct Usage {
    total: u64,
    largest: u64,
}

/// Walks `root` without following links (blocking).
fn usage(root: &Path) -> Usage {
    let mut used = Usage::default();
    for entry in walkdir::WalkDir::new(root).into_iter().flatten() {
        if entry.file_type().is_file()
            && let Ok(meta) = entry.metadata()
        {
            used.total += meta.len();
            used.largest = used.largest.max(meta.len());
        }
    }
    used
}

/// The limit an ended turn went over, if any: what its cgroups saw, the signal an rlimit sends
/// (`SIGXCPU`, `SIGXFSZ`) when the command itself died of it, its CPU time, its workspace's size
/// and largest file (a program that ignores `SIGXFSZ` only sees its writes fail). Blocking.
pub fn over_limit(
    groups: Option<&cgroups::TurnGroups>,
    signal: Option<i32>,
    watched: Option<&Watched>,
) -> Option<limits::LimitHit> {
    use limits::Resource;
    let watched = watched?;
    let resource = groups
        .and_then(cgroups::TurnGroups::hit)
        .or(match signal {
            Some(s) if s == Signal::SIGXCPU as i32 => Some(Resource::Cpu),
            Some(s) if s == Signal::SIGXFSZ as i32 => Some(Resource::File),
            _ => None,
        })
        .or_else(|| watched.measure())?;
    Some(watched.hit(resource))
}
