//! The registry: an in-memory snapshot of the skills dir, rebuilt by scanning it.
//!
//! Readers get an immutable [`Snapshot`] (with the `GET /v1/skills` body pre-serialised), so a
//! listing costs no I/O. The snapshot is rebuilt after every install and whenever it is older
//! than [`Registry::MAX_AGE`], which picks up folders that operators copy in or edit by hand.
//! Installs move folders only while holding [`Registry::swap_guard`] for writing and scans hold
//! it for reading, so a scan never reads a folder halfway through a swap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use super::manifest::{self, Rules, SkillManifest};
use super::standard::KnownVersions;

/// One folder of the skills dir: a valid skill, or a broken one with the reason.
#[derive(Debug, Clone)]
pub enum SkillEntry {
    Healthy(Arc<SkillManifest>),
    Degraded {
        id: String,
        path: PathBuf,
        error: String,
    },
}

impl SkillEntry {
    /// The served form: the manifest plus `health` and `health_error`.
    pub fn to_json(&self) -> Value {
        match self {
            SkillEntry::Healthy(m) => {
                let mut v = serde_json::to_value(m.as_ref()).expect("manifest serialises");
                v["health"] = json!("healthy");
                v["health_error"] = Value::Null;
                v
            }
            SkillEntry::Degraded { id, path, error } => json!({
                "id": id,
                "path": path,
                "health": "degraded",
                "health_error": error,
            }),
        }
    }

    pub fn manifest(&self) -> Option<&Arc<SkillManifest>> {
        match self {
            SkillEntry::Healthy(m) => Some(m),
            SkillEntry::Degraded { .. } => None,
        }
    }
}

/// The skills dir as of one scan.
#[derive(Debug)]
pub struct Snapshot {
    pub skills: BTreeMap<String, SkillEntry>,
    /// `GET /v1/skills` body.
    pub list_json: Bytes,
    scanned_at: Instant,
}

impl Snapshot {
    fn build(skills: BTreeMap<String, SkillEntry>) -> Self {
        let list: Vec<Value> = skills.values().map(SkillEntry::to_json).collect();
        Self {
            list_json: Bytes::from(serde_json::to_vec(&list).expect("list serialises")),
            skills,
            scanned_at: Instant::now(),
        }
    }
}

/// Shared view of the installed skills.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    current: RwLock<Arc<Snapshot>>,
    scan_lock: tokio::sync::Mutex<()>,
    swap_lock: tokio::sync::RwLock<()>,
    versions: Arc<KnownVersions>,
}

impl Registry {
    /// How stale a snapshot may get before a reader triggers a rescan.
    pub const MAX_AGE: Duration = Duration::from_secs(2);

    /// Scans `dir` once and returns the registry.
    pub async fn open(dir: PathBuf) -> anyhow::Result<Self> {
        let versions = Arc::new(KnownVersions::default());
        let skills = scan_dir(dir.clone(), versions.clone()).await?;
        Ok(Self {
            dir,
            current: RwLock::new(Arc::new(Snapshot::build(skills))),
            scan_lock: tokio::sync::Mutex::new(()),
            swap_lock: tokio::sync::RwLock::new(()),
            versions,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The latest snapshot; when it is older than [`Self::MAX_AGE`], this call rescans first,
    /// unless another call is already rescanning: then it goes on with the snapshot it has
    /// rather than wait (a scan reads every skill folder, and every create of a busy service
    /// used to queue behind it once per `MAX_AGE`).
    pub async fn snapshot(&self) -> Arc<Snapshot> {
        let current = self.latest();
        if current.scanned_at.elapsed() < Self::MAX_AGE {
            return current;
        }
        let Ok(_scan) = self.scan_lock.try_lock() else {
            return current;
        };
        let current = self.latest();
        if current.scanned_at.elapsed() < Self::MAX_AGE {
            return current;
        }
        match self.scan().await {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "rescanning the skills dir failed");
                current
            }
        }
    }

    /// Rescans now (after an install), regardless of age.
    pub async fn rescan(&self) -> anyhow::Result<Arc<Snapshot>> {
        let _scan = self.scan_lock.lock().await;
        self.scan().await
    }

    /// Held for writing while an install moves folders in or out of the skills dir.
    pub async fn swap_guard(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.swap_lock.write().await
    }

    fn latest(&self) -> Arc<Snapshot> {
        self.current.read().expect("registry lock").clone()
    }

    async fn scan(&self) -> anyhow::Result<Arc<Snapshot>> {
        let skills = {
            let _no_swap = self.swap_lock.read().await;
            scan_dir(self.dir.clone(), self.versions.clone()).await?
        };
        let fresh = Arc::new(Snapshot::build(skills));
        *self.current.write().expect("registry lock") = fresh.clone();
        Ok(fresh)
    }
}

async fn scan_dir(
    dir: PathBuf,
    versions: Arc<KnownVersions>,
) -> anyhow::Result<BTreeMap<String, SkillEntry>> {
    tokio::task::spawn_blocking(move || {
        let skills = scan_dir_blocking(&dir, &versions)?;
        versions.retain(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|name| skills.contains_key(name))
        });
        Ok(skills)
    })
    .await?
}

fn scan_dir_blocking(
    dir: &Path,
    versions: &KnownVersions,
) -> anyhow::Result<BTreeMap<String, SkillEntry>> {
    let mut skills = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // `.archive`, `.staging`, `.invalid` and other hidden folders are not skills.
        if name.starts_with('.') || !entry.path().is_dir() {
            continue;
        }
        let path = entry.path();
        let skill = match manifest::load_with(&path, Rules::REGISTERED, Some(versions)) {
            Ok(m) => SkillEntry::Healthy(Arc::new(m)),
            Err(e) => SkillEntry::Degraded {
                id: name.clone(),
                path,
                error: e.0,
            },
        };
        skills.insert(name, skill);
    }
    Ok(skills)
}
