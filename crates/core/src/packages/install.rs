//! Installing and updating skill packages: staged, validated, then swapped in atomically.
//!
//! A request's zip is saved under `<data>/skill_installs/requests/<rid>/` and its row written
//! before the client hears `queued`. The worker extracts into `<skills>/.staging/<rid>/`,
//! validates, and then, holding the registry's swap guard, either renames the staged folder into
//! place (fresh install) or atomically exchanges it with the live folder (update) and moves the
//! old version to `.archive/<id>/<old>/`. The `swapping` phase is recorded before the first
//! irreversible move, so start-up recovery can tell a swap that never began (the live skill is
//! untouched; the request fails) from one that did (it is rolled forward; the request succeeds).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::clock;
use crate::config::{DataDir, PackageLimits};
use crate::skill::archive::{self, ArchiveError};
use crate::skill::{Registry, Rules, docs, manifest, walk};
use crate::store::{InstallPhase, InstallRequest, Store, TaskStatus};

/// Installs running at once; more requests wait in `queued`.
const INSTALL_WORKERS: usize = 4;

/// How often a node looks for packages other nodes installed, besides their signals.
const SYNC_INTERVAL: Duration = Duration::from_secs(60);

/// Runs package installs in the background and recovers them after a restart.
#[derive(Debug)]
pub struct Installer {
    store: Store,
    registry: Arc<Registry>,
    requests_dir: PathBuf,
    limits: PackageLimits,
    workers: Semaphore,
    tracker: TaskTracker,
    /// Among nodes: where installed packages are kept for the others.
    storage: Option<crate::storage::Storage>,
    /// Ends the sync loop at shutdown.
    closing: tokio_util::sync::CancellationToken,
    /// Held while this node looks for what other nodes installed; when that look last began.
    looked: tokio::sync::Mutex<Option<std::time::Instant>>,
}

/// The swap guard and the nodes' install lock, held together.
struct SwapTurn<'a> {
    _guard: tokio::sync::RwLockWriteGuard<'a, ()>,
    _among_nodes: Option<crate::store::ClusterLock>,
}

/// One skill found in a package: staged under `<staging>/<id>` and valid, or why not.
pub(crate) struct Found {
    /// Its folder inside the zip (empty: the zip's root).
    pub path: String,
    pub outcome: Result<(PathBuf, Arc<manifest::SkillManifest>), String>,
}

/// How one skill of a package of several went, as `GET /v1/skill-packages/{id}` lists it.
#[derive(Debug, serde::Serialize)]
struct SkillReport {
    path: String,
    skill_id: Option<String>,
    format: Option<manifest::SkillFormat>,
    version: Option<String>,
    /// `pending` until its swap ends, then `succeeded` or `failed`.
    status: &'static str,
    action: Option<&'static str>,
    error: Option<String>,
    warnings: Vec<String>,
}

impl SkillReport {
    fn of(found: &Found) -> Self {
        let (manifest, error) = match &found.outcome {
            Ok((_, manifest)) => (Some(manifest), None),
            Err(e) => (None, Some(e.clone())),
        };
        Self {
            path: found.path.clone(),
            skill_id: manifest.map(|m| m.id.clone()),
            format: manifest.map(|m| m.format),
            version: manifest.and_then(|m| m.version.clone()),
            status: if error.is_some() { "failed" } else { "pending" },
            action: None,
            error,
            warnings: manifest.map(|m| m.warnings.clone()).unwrap_or_default(),
        }
    }

    fn installed(&mut self, action: &'static str) {
        (self.status, self.action) = ("succeeded", Some(action));
    }

    fn failed(&mut self, error: String) {
        (self.status, self.error) = ("failed", Some(error));
    }
}

/// Extracts the package `zip` under `staging` and validates each skill it holds, moving each
/// valid one to `<staging>/<id>`; whether the package is a collection, and what was found.
pub(crate) fn stage(
    zip: &Path,
    staging: &Path,
    limits: &PackageLimits,
) -> Result<(bool, Vec<Found>), String> {
    let unpacked = staging.join(".package");
    let layout = archive::extract_skills(zip, &unpacked, limits).map_err(|e| match e {
        ArchiveError::Rejected(m) => m,
        ArchiveError::Io(e) if crate::process::is_disk_full(&e) => format!(
            "the skills folder's volume is full: no room to extract the package ({e}); free \
             space there and install it again"
        ),
        ArchiveError::Io(e) => format!("cannot extract the package: {e}"),
    })?;
    let mut found = Vec::new();
    let collection = match layout {
        archive::Layout::Folder(top) => {
            found.push(validate(staging, &unpacked.join(&top), rel(&top)));
            false
        }
        archive::Layout::Root => {
            // Named by its SKILL.md, which must then be right about everything else too.
            let text = std::fs::read_to_string(unpacked.join("SKILL.md"))
                .map_err(|e| format!("cannot read SKILL.md: {e}"))?;
            let checked = docs::document::check(&text, None, docs::document::Profile::Strict);
            let name = match checked.frontmatter_name {
                Some(name) if checked.valid() => name,
                _ => {
                    return Err(checked
                        .errors
                        .iter()
                        .map(|f| format!("SKILL.md: {f}"))
                        .collect::<Vec<_>>()
                        .join("\n"));
                }
            };
            let named = staging.join(".root").join(&name);
            std::fs::create_dir_all(named.parent().expect("under staging"))
                .and_then(|()| std::fs::rename(&unpacked, &named))
                .map_err(|e| format!("cannot stage the skill: {e}"))?;
            found.push(validate(staging, &named, String::new()));
            false
        }
        archive::Layout::Collection(dirs) => {
            for dir in &dirs {
                found.push(validate(staging, &unpacked.join(dir), rel(dir)));
            }
            true
        }
    };
    Ok((collection, found))
}

/// `/`-separated.
fn rel(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Validates the skill in `dir` (found at `path` in the zip) and moves it to `<staging>/<id>`.
fn validate(staging: &Path, dir: &Path, path: String) -> Found {
    let outcome = manifest::load(dir, Rules::INSTALL)
        .map_err(|e| e.0)
        .and_then(|mut manifest| {
            let target = staging.join(&manifest.id);
            if target.exists() {
                return Err(format!(
                    "a skill named '{}' appears earlier in the package; each name may appear once",
                    manifest.id
                ));
            }
            std::fs::rename(dir, &target).map_err(|e| format!("cannot stage the skill: {e}"))?;
            manifest.path = target.clone();
            Ok((target, Arc::new(manifest)))
        });
    Found { path, outcome }
}

/// What the swap does with the skills dir, decided under the swap guard.
#[derive(Debug)]
enum SwapPlan {
    Fresh,
    /// The live folder is not a valid skill: it moves to `.invalid/` and the install is fresh.
    ReplaceInvalid {
        quarantine: PathBuf,
    },
    Update {
        archive: PathBuf,
    },
    /// A standard skill installed again with the same files: nothing moves.
    Unchanged,
}

impl SwapPlan {
    fn action(&self) -> &'static str {
        match self {
            SwapPlan::Fresh | SwapPlan::ReplaceInvalid { .. } => "install",
            SwapPlan::Update { .. } => "update",
            SwapPlan::Unchanged => "unchanged",
        }
    }
}

impl Installer {
    /// `storage`, given only among nodes sharing a database, is where installed packages
    /// are kept for the other nodes.
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        data: &DataDir,
        limits: PackageLimits,
        storage: Option<crate::storage::Storage>,
    ) -> Self {
        Self {
            storage,
            store,
            registry,
            requests_dir: data.installs().join("requests"),
            limits,
            workers: Semaphore::new(INSTALL_WORKERS),
            tracker: TaskTracker::new(),
            closing: Default::default(),
            looked: Default::default(),
        }
    }

    /// The skills this node serves.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn limits(&self) -> &PackageLimits {
        &self.limits
    }

    /// Where the uploaded zip of request `rid` is kept until the install ends.
    pub fn package_path(&self, rid: &str) -> PathBuf {
        self.requests_dir.join(rid).join("package.zip")
    }

    fn staging_dir(&self, rid: &str) -> PathBuf {
        self.registry.dir().join(".staging").join(rid)
    }

    /// Records a saved upload as `queued` and starts installing it.
    pub async fn accept(self: &Arc<Self>, rid: &str) -> anyhow::Result<()> {
        self.store.insert_install_request(rid).await?;
        self.spawn(rid.to_owned());
        Ok(())
    }

    /// The stored state of request `rid`.
    pub async fn status(&self, rid: &str) -> anyhow::Result<Option<InstallRequest>> {
        self.store
            .install_request(rid)
            .await
            .context("reading install request")
    }

    /// Drops a saved upload that will never be accepted.
    pub async fn discard_upload(&self, rid: &str) {
        let _ = tokio::fs::remove_dir_all(self.requests_dir.join(rid)).await;
    }

    fn spawn(self: &Arc<Self>, rid: String) {
        let this = self.clone();
        self.tracker.spawn(async move { this.run(&rid).await });
    }

    /// Stops taking work and waits (bounded) for installs under way.
    pub async fn shutdown(&self, grace: Duration) {
        self.closing.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "installs still running at shutdown; start-up recovery will settle them"
            );
        }
    }

    async fn run(&self, rid: &str) {
        let Ok(_permit) = self.workers.acquire().await else {
            return;
        };
        match self.store.start_install(rid).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::error!(
                    request_id = rid,
                    error = format!("{e:#}"),
                    "cannot start install"
                );
                return;
            }
        }
        let outcome = self.install(rid).await;
        self.remove_leftovers(rid).await;
        let (status, error) = match &outcome {
            Ok(()) => (TaskStatus::Succeeded, None),
            Err(message) => (TaskStatus::Failed, Some(message.as_str())),
        };
        match self.store.finish_install(rid, status, error).await {
            Ok(_) => tracing::info!(
                request_id = rid,
                ?status,
                error,
                "skill package install finished"
            ),
            Err(e) => tracing::error!(
                request_id = rid,
                error = format!("{e:#}"),
                "cannot record install result"
            ),
        }
    }

    /// Validates, swaps and rescans; the error is the message the client sees.
    async fn install(&self, rid: &str) -> Result<(), String> {
        self.apply(&self.package_path(rid), &self.staging_dir(rid), Some(rid))
            .await
    }

    /// Installs the package `zip` through `staging`: each skill validated, kept in shared
    /// storage among nodes that have one (`rid`: a client's request, whose progress is
    /// recorded; `None`: a package another node installed, already kept there), swapped in,
    /// the others told. A package of several skills installs each one that is valid and
    /// reports on all; it fails only when none installs.
    async fn apply(&self, zip: &Path, staging: &Path, rid: Option<&str>) -> Result<(), String> {
        let (package, staging_dir) = (zip.to_path_buf(), staging.to_path_buf());
        let limits = self.limits;
        let (collection, found) = blocking(move || stage(&package, &staging_dir, &limits)).await?;
        if !collection {
            let skill = found.into_iter().next().expect("one skill staged");
            let (dir, manifest) = skill.outcome?;
            let version = manifest
                .version
                .clone()
                .expect("install rules give a version");
            self.progress(rid, InstallPhase::Validating, &manifest.id, &version, None)
                .await?;
            let kept = if skill.path.is_empty() {
                None
            } else {
                Some(zip)
            };
            self.keep_for_nodes(rid, &manifest, &dir, kept).await?;
            let guard = self.swap_turn().await?;
            let swapped = self.swap_in(rid, &dir, &manifest).await;
            drop(guard);
            self.installed(rid).await;
            return swapped.map(drop);
        }

        let mut report: Vec<SkillReport> = found.iter().map(SkillReport::of).collect();
        let mut ready = Vec::new();
        for (i, skill) in found.into_iter().enumerate() {
            let Ok((dir, manifest)) = skill.outcome else {
                continue;
            };
            match self.keep_for_nodes(rid, &manifest, &dir, None).await {
                Ok(()) => ready.push((i, dir, manifest)),
                Err(e) => report[i].failed(e),
            }
        }
        self.report(rid, &report).await?;
        if !ready.is_empty() {
            let guard = self.swap_turn().await?;
            for (i, dir, manifest) in ready {
                match self.swap_in(rid, &dir, &manifest).await {
                    Ok(action) => report[i].installed(action),
                    Err(e) => report[i].failed(e),
                }
                self.report(rid, &report).await?;
            }
            drop(guard);
            self.installed(rid).await;
        }
        if report.iter().any(|r| r.status == "succeeded") {
            Ok(())
        } else {
            Err(format!(
                "none of the {} skills of the package installed: {}",
                report.len(),
                report
                    .iter()
                    .map(|r| format!("{}: {}", r.path, r.error.as_deref().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        }
    }

    /// Keeps the package of one skill in the shared storage for the other nodes: the zip as
    /// uploaded when it holds that skill alone in a folder (`kept`), else one made of the
    /// staged folder.
    async fn keep_for_nodes(
        &self,
        rid: Option<&str>,
        manifest: &manifest::SkillManifest,
        dir: &Path,
        kept: Option<&Path>,
    ) -> Result<(), String> {
        let (Some(storage), Some(_)) = (&self.storage, rid) else {
            return Ok(());
        };
        let version = manifest.version.clone().unwrap_or_default();
        let zip = match kept {
            Some(zip) => zip.to_path_buf(),
            None => {
                let (dir, zip) = (dir.to_path_buf(), dir.with_extension("zip"));
                let made = zip.clone();
                blocking(move || {
                    archive::zip_folder(&dir, &made)
                        .map_err(|e| format!("cannot pack the skill for the other nodes: {e}"))
                })
                .await?;
                zip
            }
        };
        storage
            .save_package(&manifest.id, &version, &zip)
            .await
            .map_err(|e| {
                tracing::error!(
                    error = format!("{e:#}"),
                    "keeping a package in shared storage"
                );
                "cannot keep the package in shared storage (SKILL_RUNNER_STORAGE_URL) for the \
                 other nodes; retry once it answers"
                    .to_owned()
            })
    }

    /// The registry's swap guard and, among nodes sharing a skills dir, their install lock.
    async fn swap_turn(&self) -> Result<SwapTurn<'_>, String> {
        let guard = self.registry.swap_guard().await;
        let among_nodes = match self.store.cluster() {
            Some(cluster) => Some(
                cluster
                    .install_lock()
                    .await
                    .map_err(|e| format!("cannot take the nodes' install lock: {e:#}"))?,
            ),
            None => None,
        };
        Ok(SwapTurn {
            _guard: guard,
            _among_nodes: among_nodes,
        })
    }

    /// Swaps the staged skill in `dir` into place (under [`Self::swap_turn`]); the action
    /// taken.
    async fn swap_in(
        &self,
        rid: Option<&str>,
        dir: &Path,
        manifest: &Arc<manifest::SkillManifest>,
    ) -> Result<&'static str, String> {
        let skills = self.registry.dir().to_path_buf();
        let plan = {
            let (dir, manifest) = (dir.to_path_buf(), manifest.clone());
            blocking(move || plan_swap(&skills, &dir, &manifest)).await?
        };
        let version = manifest.version.clone().unwrap_or_default();
        self.progress(
            rid,
            InstallPhase::Swapping,
            &manifest.id,
            &version,
            Some(plan.action()),
        )
        .await?;
        let (staged, live) = (dir.to_path_buf(), self.registry.dir().join(&manifest.id));
        let action = plan.action();
        blocking(move || {
            execute_swap(&plan, &staged, &live)
                .map_err(|e| format!("cannot swap the skill into place: {e}"))
        })
        .await?;
        Ok(action)
    }

    /// After skills were swapped in: the registry reads them, the other nodes are told.
    async fn installed(&self, rid: Option<&str>) {
        self.rescan().await;
        if let (Some(cluster), Some(_)) = (self.store.cluster(), rid)
            && let Err(e) = cluster.announce_installed().await
        {
            // The others look again within a minute anyway.
            tracing::warn!(error = format!("{e:#}"), "telling the nodes of an install");
        }
    }

    /// Records the report of a package of several skills.
    async fn report(&self, rid: Option<&str>, report: &[SkillReport]) -> Result<(), String> {
        let Some(rid) = rid else {
            return Ok(());
        };
        let text = serde_json::to_string(report).expect("a report serialises");
        self.store
            .set_install_report(rid, &text)
            .await
            .map_err(|e| {
                tracing::error!(
                    request_id = rid,
                    error = format!("{e:#}"),
                    "cannot record an install report"
                );
                "internal error while recording the install".to_owned()
            })
    }

    /// The versions of skill `id` that updates replaced (kept under `.archive/<id>/`), newest
    /// first.
    pub fn archived_versions(&self, id: &str) -> Vec<String> {
        let dir = self.registry.dir().join(".archive").join(id);
        let mut versions: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        versions.sort_by(
            |a, b| match (semver::Version::parse(a), semver::Version::parse(b)) {
                (Ok(a), Ok(b)) => b.cmp(&a),
                _ => b.cmp(a),
            },
        );
        versions
    }

    /// Skill `id` as this node knows it. Among nodes, one asked for a skill it does not know
    /// looks at what the others installed first: the install's signal may not have reached it
    /// yet, and a client that installed on one node and runs on another must not get a 404.
    /// Misses arriving while a look is under way share it, so unknown ids cost one look at a
    /// time, never one each.
    pub async fn skill(&self, id: &str) -> Option<crate::skill::SkillEntry> {
        if let Some(entry) = self.registry.snapshot().await.skills.get(id) {
            return Some(entry.clone());
        }
        self.store.cluster()?;
        let asked = std::time::Instant::now();
        if let Err(e) = self.look_since(asked).await {
            tracing::warn!(
                error = format!("{e:#}"),
                "looking for other nodes' installs"
            );
        }
        self.registry.snapshot().await.skills.get(id).cloned()
    }

    /// Brings in what other nodes installed, unless a look that began at or after `asked`
    /// already did: with shared storage, their packages are installed here; on a shared skills
    /// dir, the dir is read again.
    async fn look_since(&self, asked: std::time::Instant) -> anyhow::Result<()> {
        let mut looked = self.looked.lock().await;
        if looked.is_some_and(|began| began >= asked) {
            return Ok(());
        }
        *looked = Some(std::time::Instant::now());
        match &self.storage {
            Some(storage) => self.install_from(storage).await,
            None => self.registry.rescan().await.map(drop),
        }
    }

    /// Installs the packages other nodes kept in shared storage that are newer than this
    /// node's skills (or that it lacks).
    async fn install_from(&self, storage: &crate::storage::Storage) -> anyhow::Result<()> {
        let snapshot = self.registry.rescan().await?;
        for (id, version) in storage.packages().await? {
            let local = snapshot
                .skills
                .get(&id)
                .and_then(|entry| entry.manifest())
                .and_then(|m| m.version.clone());
            let newer = match (
                local.as_deref().map(semver::Version::parse),
                semver::Version::parse(&version),
            ) {
                (None, _) => true,
                (Some(Ok(local)), Ok(kept)) => local < kept,
                _ => local.as_deref() != Some(version.as_str()),
            };
            if !newer {
                continue;
            }
            let rid = format!("sync-{}", uuid::Uuid::new_v4());
            let dir = self.requests_dir.join(&rid);
            tokio::fs::create_dir_all(&dir).await?;
            let zip = dir.join("package.zip");
            let applied = async {
                storage.fetch_package(&id, &version, &zip).await?;
                self.apply(&zip, &self.staging_dir(&rid), None)
                    .await
                    .map_err(anyhow::Error::msg)
            };
            let outcome = applied.await;
            self.remove_leftovers(&rid).await;
            match outcome {
                Ok(()) => {
                    tracing::info!(skill_id = id, %version, "installed a package another node installed")
                }
                Err(e) => {
                    tracing::warn!(skill_id = id, %version, error = format!("{e:#}"), "cannot install a package another node installed")
                }
            }
        }
        Ok(())
    }

    /// Among nodes with shared storage: installs what the others installed, at start, when one
    /// says so, and every minute.
    pub fn keep_in_sync(self: &Arc<Self>) {
        if self.storage.is_none() {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            let mut signals = None;
            loop {
                if let Err(e) = this.look_since(std::time::Instant::now()).await {
                    tracing::warn!(error = format!("{e:#}"), "installing other nodes' packages");
                }
                if signals.is_none()
                    && let Some(cluster) = this.store.cluster()
                {
                    signals = cluster
                        .signals()
                        .await
                        .inspect_err(|e| {
                            tracing::warn!(error = format!("{e:#}"), "listening for installs");
                        })
                        .ok();
                }
                // An install elsewhere, or the interval (a broken subscription is made again).
                let told = async {
                    let Some(listening) = signals.as_mut() else {
                        return std::future::pending().await;
                    };
                    loop {
                        match listening.next().await {
                            Ok(crate::store::Signal::Installed) => return true,
                            Ok(_) => continue,
                            Err(_) => return false,
                        }
                    }
                };
                tokio::select! {
                    heard = told => if !heard { signals = None },
                    () = tokio::time::sleep(SYNC_INTERVAL) => {}
                    () = this.closing.cancelled() => return,
                }
            }
        });
    }

    async fn progress(
        &self,
        rid: Option<&str>,
        phase: InstallPhase,
        id: &str,
        version: &str,
        action: Option<&str>,
    ) -> Result<(), String> {
        let Some(rid) = rid else {
            return Ok(());
        };
        self.store
            .set_install_progress(rid, phase, id, version, action)
            .await
            .map_err(|e| {
                tracing::error!(
                    request_id = rid,
                    error = format!("{e:#}"),
                    "cannot record install progress"
                );
                "internal error while recording the install".to_owned()
            })
    }

    async fn rescan(&self) {
        if let Err(e) = self.registry.rescan().await {
            tracing::error!(error = format!("{e:#}"), "rescanning the skills dir failed");
        }
    }

    async fn remove_leftovers(&self, rid: &str) {
        let _ = tokio::fs::remove_dir_all(self.staging_dir(rid)).await;
        let _ = tokio::fs::remove_dir_all(self.requests_dir.join(rid)).await;
    }

    /// Settles the requests a previous process left unfinished, then resumes queued ones.
    pub async fn recover(self: &Arc<Self>) -> anyhow::Result<()> {
        let unfinished = self.store.unfinished_install_requests().await?;
        let mut queued = Vec::new();
        for request in unfinished {
            if request.status == TaskStatus::Queued {
                queued.push(request.request_id);
                continue;
            }
            let (status, error) = self.recover_running(&request).await;
            self.store
                .finish_install(&request.request_id, status, error.as_deref())
                .await?;
            tracing::warn!(
                request_id = request.request_id,
                ?status,
                error,
                "install settled after restart"
            );
        }

        // Nothing may be left half-extracted, and only queued requests keep their upload.
        let staging_root = self.registry.dir().join(".staging");
        let _ = tokio::fs::remove_dir_all(&staging_root).await;
        if let Ok(mut dirs) = tokio::fs::read_dir(&self.requests_dir).await {
            while let Ok(Some(entry)) = dirs.next_entry().await {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !queued.contains(&name) {
                    let _ = tokio::fs::remove_dir_all(entry.path()).await;
                }
            }
        }
        self.rescan().await;
        for rid in queued {
            if tokio::fs::try_exists(self.package_path(&rid))
                .await
                .unwrap_or(false)
            {
                self.spawn(rid);
            } else {
                self.store
                    .finish_install(
                        &rid,
                        TaskStatus::Failed,
                        Some("the uploaded package was lost before the install started"),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    async fn recover_running(&self, request: &InstallRequest) -> (TaskStatus, Option<String>) {
        let single = self.recover_swap(request).await;
        let Some(report) = &request.skills else {
            return single;
        };
        // A package of several skills: the one being swapped is settled as above, those not
        // reached failed.
        let mut report: Vec<serde_json::Value> = serde_json::from_str(report).unwrap_or_default();
        for entry in &mut report {
            if entry["status"] != "pending" {
                continue;
            }
            let swapping = request.phase == InstallPhase::Swapping
                && entry["skill_id"].as_str() == request.skill_id.as_deref();
            if swapping && single.0 == TaskStatus::Succeeded {
                entry["status"] = "succeeded".into();
                entry["action"] = request.action.clone().into();
            } else {
                entry["status"] = "failed".into();
                entry["error"] = single
                    .1
                    .clone()
                    .unwrap_or_else(|| NOT_SWAPPED.to_owned())
                    .into();
            }
        }
        let text = serde_json::Value::from(report.clone()).to_string();
        if let Err(e) = self
            .store
            .set_install_report(&request.request_id, &text)
            .await
        {
            tracing::error!(error = format!("{e:#}"), "cannot record an install report");
        }
        if report.iter().any(|entry| entry["status"] == "succeeded") {
            (TaskStatus::Succeeded, None)
        } else {
            (
                TaskStatus::Failed,
                Some(format!(
                    "none of the skills of the package installed: {NOT_SWAPPED}"
                )),
            )
        }
    }

    /// Settles the swap of one skill that a restart interrupted.
    async fn recover_swap(&self, request: &InstallRequest) -> (TaskStatus, Option<String>) {
        let (InstallPhase::Swapping, Some(id), Some(version)) = (
            request.phase,
            request.skill_id.clone(),
            request.version.clone(),
        ) else {
            return (TaskStatus::Failed, Some(NOT_SWAPPED.to_owned()));
        };
        let skills = self.registry.dir().to_path_buf();
        let staged = self.staging_dir(&request.request_id).join(&id);
        let rolled = blocking(move || roll_forward(&skills, &staged, &id, &version)).await;
        match rolled {
            Ok(true) => (TaskStatus::Succeeded, None),
            Ok(false) => (TaskStatus::Failed, Some(NOT_SWAPPED.to_owned())),
            Err(e) => (
                TaskStatus::Failed,
                Some(format!(
                    "the interrupted install could not be completed: {e}"
                )),
            ),
        }
    }
}

/// Why a restart failed an install whose swap had not begun.
const NOT_SWAPPED: &str = "the install was interrupted by a service restart before the new version \
     was swapped in; the installed skill is unchanged; upload the package again";

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("install worker failed: {e}")))
}

/// The version of the skill in `dir`, wherever it lies (see [`manifest::version_in`]).
fn version_of(dir: &Path) -> Option<String> {
    manifest::version_in(dir)
}

/// Decides how the skill staged in `staged` replaces the live one. `runner.json` skills must
/// raise their semantic version. A standard skill with the same files is unchanged; one that
/// declares versions (`metadata.version`, read as semantic versions with missing parts 0) must
/// raise them; one versioned by its contents replaces the old, which is archived either way.
fn plan_swap(
    skills: &Path,
    staged: &Path,
    new: &manifest::SkillManifest,
) -> Result<SwapPlan, String> {
    let (id, version) = (&new.id, new.version.as_deref().unwrap_or_default());
    let live = skills.join(id);
    if !live.exists() {
        return Ok(SwapPlan::Fresh);
    }
    let installed = match manifest::load(&live, Rules::REGISTERED) {
        Ok(m) => m,
        Err(_) => {
            return Ok(SwapPlan::ReplaceInvalid {
                quarantine: quarantine_path(skills, id),
            });
        }
    };
    let old_version = installed.version.clone().unwrap_or_default();
    let both_runner_json = installed.format == manifest::SkillFormat::RunnerJson
        && new.format == manifest::SkillFormat::RunnerJson;
    if !both_runner_json && same_files(&live, staged)? {
        return Ok(SwapPlan::Unchanged);
    }
    let ordered = if both_runner_json {
        Some((
            manifest::parse_version(version).map_err(|e| e.0)?,
            manifest::parse_version(&old_version).map_err(|e| e.0)?,
        ))
    } else {
        loose_version(version).zip(loose_version(&old_version))
    };
    // Precedence, as semantic versioning defines it: build metadata (`+b2`) does not count.
    if let Some((new_version, old)) = ordered
        && new_version.cmp_precedence(&old) != std::cmp::Ordering::Greater
    {
        return Err(format!(
            "version {version} of '{id}' is not higher than the installed version {old_version}; \
             updates must strictly increase the version (build metadata does not count)"
        ));
    }
    let archive = skills.join(".archive").join(id).join(&old_version);
    if !archive.exists() {
        return Ok(SwapPlan::Update { archive });
    }
    if both_runner_json {
        return Err(format!(
            "archive path .archive/{id}/{old_version} already exists; the installed skill is unchanged"
        ));
    }
    Ok(SwapPlan::Update {
        archive: free_path(&skills.join(".archive").join(id), &old_version),
    })
}

/// A declared version read as a semantic version, `1` and `1.2` as `1.0.0` and `1.2.0`;
/// `None` for a content version or any other text.
fn loose_version(raw: &str) -> Option<semver::Version> {
    if let Ok(version) = semver::Version::parse(raw) {
        return Some(version);
    }
    let numbers: Vec<u64> = raw
        .split('.')
        .map(|part| part.parse().ok())
        .collect::<Option<_>>()?;
    match numbers[..] {
        [major] => Some(semver::Version::new(major, 0, 0)),
        [major, minor] => Some(semver::Version::new(major, minor, 0)),
        _ => None,
    }
}

/// True when both folders hold the same files with the same bytes.
fn same_files(a: &Path, b: &Path) -> Result<bool, String> {
    let hash = |dir: &Path| {
        walk::files_under(dir)
            .and_then(|files| walk::content_hash(&files))
            .map_err(|e| format!("cannot read the skill's files: {e}"))
    };
    Ok(hash(a)? == hash(b)?)
}

/// Where a folder that is not a valid skill is moved: `.invalid/<id>-<UTC timestamp>[-N]`.
fn quarantine_path(skills: &Path, id: &str) -> PathBuf {
    free_path(
        &skills.join(".invalid"),
        &format!("{id}-{}", clock::now_compact()),
    )
}

/// `base/name`, or `base/name-N` for the first N that is free.
fn free_path(base: &Path, name: &str) -> PathBuf {
    let first = base.join(name);
    if !first.exists() {
        return first;
    }
    (1..)
        .map(|n| base.join(format!("{name}-{n}")))
        .find(|p| !p.exists())
        .expect("an unused suffix exists")
}

fn execute_swap(plan: &SwapPlan, staged: &Path, live: &Path) -> std::io::Result<()> {
    match plan {
        SwapPlan::Fresh => std::fs::rename(staged, live),
        SwapPlan::ReplaceInvalid { quarantine } => {
            std::fs::create_dir_all(quarantine.parent().expect("quarantine has a parent"))?;
            std::fs::rename(live, quarantine)?;
            std::fs::rename(staged, live)
        }
        SwapPlan::Unchanged => Ok(()),
        SwapPlan::Update { archive } => {
            std::fs::create_dir_all(archive.parent().expect("archive has a parent"))?;
            if exchange(staged, live)? {
                // `staged` now holds the old version.
                std::fs::rename(staged, archive)
            } else {
                std::fs::rename(live, archive)?;
                std::fs::rename(staged, live)
            }
        }
    }
}

/// Atomically swaps two paths; false when the filesystem cannot, so the caller falls back to two
/// renames (recovery rolls that window forward).
fn exchange(a: &Path, b: &Path) -> std::io::Result<bool> {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Completes a swap that a previous process began; true when the new version ends up live.
fn roll_forward(skills: &Path, staged: &Path, id: &str, version: &str) -> Result<bool, String> {
    let live = skills.join(id);
    if !staged.exists() {
        return Ok(version_of(&live).as_deref() == Some(version));
    }
    match version_of(staged) {
        Some(v) if v == version => {
            if live.exists() {
                return Ok(false);
            }
            std::fs::rename(staged, &live).map_err(|e| e.to_string())?;
            Ok(true)
        }
        // The exchange happened: `staged` holds the old version, still to be archived.
        old => {
            let old = old.unwrap_or_else(|| "unknown".to_owned());
            let archive = skills.join(".archive").join(id).join(&old);
            let target = if archive.exists() {
                quarantine_path(skills, id)
            } else {
                archive
            };
            std::fs::create_dir_all(target.parent().expect("target has a parent"))
                .map_err(|e| e.to_string())?;
            std::fs::rename(staged, &target).map_err(|e| e.to_string())?;
            Ok(version_of(&live).as_deref() == Some(version))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid skill folder `dir` (named after its id) at `version`.
    fn write_skill(dir: &Path, version: &str) {
        let id = dir.file_name().unwrap().to_str().unwrap();
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("SKILL.md"), format!("---\nname: {id}\n---\n")).unwrap();
        let runner = serde_json::json!({
            "id": id, "version": version, "execution_modes": ["auto"],
            "schemas": {"input": "assets/s.json", "parameter": "assets/s.json", "output": "assets/s.json"}
        });
        std::fs::write(dir.join("assets/runner.json"), runner.to_string()).unwrap();
        std::fs::write(dir.join("assets/s.json"), r#"{"type":"object"}"#).unwrap();
    }

    struct Fixture {
        _root: tempfile::TempDir,
        skills: PathBuf,
        store: Store,
        installer: Arc<Installer>,
    }

    async fn fixture() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let skills = root.path().join("skills");
        std::fs::create_dir_all(&skills).unwrap();
        let store = Store::open(&root.path().join("db.sqlite")).await.unwrap();
        let registry = Arc::new(Registry::open(skills.clone()).await.unwrap());
        let installer = Arc::new(Installer::new(
            store.clone(),
            registry,
            &DataDir::new(root.path().to_owned()),
            PackageLimits::default(),
            None,
        ));
        Fixture {
            _root: root,
            skills,
            store,
            installer,
        }
    }

    /// A request left `running` in `phase` by a process that died.
    async fn interrupted(f: &Fixture, rid: &str, phase: InstallPhase, action: &str) {
        f.store.insert_install_request(rid).await.unwrap();
        assert!(f.store.start_install(rid).await.unwrap());
        f.store
            .set_install_progress(rid, phase, "demo", "2.0.0", Some(action))
            .await
            .unwrap();
    }

    async fn outcome(f: &Fixture, rid: &str) -> InstallRequest {
        f.installer.recover().await.unwrap();
        f.store.install_request(rid).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn interrupted_before_swap_fails_and_keeps_live() {
        let f = fixture().await;
        write_skill(&f.skills.join("demo"), "1.0.0");
        write_skill(&f.skills.join(".staging/r1/demo"), "2.0.0");
        interrupted(&f, "r1", InstallPhase::Validating, "update").await;
        let r = outcome(&f, "r1").await;
        assert_eq!(r.status, TaskStatus::Failed);
        assert!(r.error.unwrap().contains("service restart"));
        assert_eq!(version_of(&f.skills.join("demo")).as_deref(), Some("1.0.0"));
        assert!(!f.skills.join(".staging").exists());
    }

    #[tokio::test]
    async fn swap_begun_but_not_exchanged_fails_and_keeps_live() {
        let f = fixture().await;
        write_skill(&f.skills.join("demo"), "1.0.0");
        write_skill(&f.skills.join(".staging/r1/demo"), "2.0.0");
        interrupted(&f, "r1", InstallPhase::Swapping, "update").await;
        let r = outcome(&f, "r1").await;
        assert_eq!(r.status, TaskStatus::Failed);
        assert_eq!(version_of(&f.skills.join("demo")).as_deref(), Some("1.0.0"));
        assert!(!f.skills.join(".archive").exists());
    }

    #[tokio::test]
    async fn exchanged_but_not_archived_rolls_forward() {
        let f = fixture().await;
        write_skill(&f.skills.join("demo"), "2.0.0");
        write_skill(&f.skills.join(".staging/r1/demo"), "1.0.0");
        interrupted(&f, "r1", InstallPhase::Swapping, "update").await;
        let r = outcome(&f, "r1").await;
        assert_eq!(r.status, TaskStatus::Succeeded, "{r:?}");
        assert_eq!(version_of(&f.skills.join("demo")).as_deref(), Some("2.0.0"));
        assert_eq!(
            version_of(&f.skills.join(".archive/demo/1.0.0")).as_deref(),
            Some("1.0.0")
        );
        assert!(!f.skills.join(".staging").exists());
    }

    #[tokio::test]
    async fn old_archived_new_not_yet_live_rolls_forward() {
        // The two-rename fallback (no RENAME_EXCHANGE) died between its renames.
        let f = fixture().await;
        write_skill(&f.skills.join(".archive/demo/1.0.0"), "1.0.0");
        write_skill(&f.skills.join(".staging/r1/demo"), "2.0.0");
        interrupted(&f, "r1", InstallPhase::Swapping, "update").await;
        let r = outcome(&f, "r1").await;
        assert_eq!(r.status, TaskStatus::Succeeded);
        assert_eq!(version_of(&f.skills.join("demo")).as_deref(), Some("2.0.0"));
    }

    #[tokio::test]
    async fn swap_completed_before_the_row_was_finished_succeeds() {
        let f = fixture().await;
        write_skill(&f.skills.join("demo"), "2.0.0");
        interrupted(&f, "r1", InstallPhase::Swapping, "install").await;
        assert_eq!(outcome(&f, "r1").await.status, TaskStatus::Succeeded);
    }

    #[tokio::test]
    async fn queued_requests_run_after_restart_and_lost_uploads_fail() {
        let f = fixture().await;
        f.store.insert_install_request("lost").await.unwrap();
        f.store.insert_install_request("kept").await.unwrap();
        let zip = f.installer.package_path("kept");
        std::fs::create_dir_all(zip.parent().unwrap()).unwrap();
        {
            use std::io::Write;
            let mut w = zip::ZipWriter::new(std::fs::File::create(&zip).unwrap());
            let src = tempfile::tempdir().unwrap();
            write_skill(&src.path().join("demo"), "3.0.0");
            for rel in ["SKILL.md", "assets/runner.json", "assets/s.json"] {
                w.start_file(
                    format!("demo/{rel}"),
                    zip::write::SimpleFileOptions::default(),
                )
                .unwrap();
                w.write_all(&std::fs::read(src.path().join("demo").join(rel)).unwrap())
                    .unwrap();
            }
            w.finish().unwrap();
        }
        f.installer.recover().await.unwrap();
        f.installer.shutdown(Duration::from_secs(30)).await;
        let lost = f.store.install_request("lost").await.unwrap().unwrap();
        assert_eq!(lost.status, TaskStatus::Failed);
        assert!(lost.error.unwrap().contains("lost"));
        let kept = f.store.install_request("kept").await.unwrap().unwrap();
        assert_eq!(kept.status, TaskStatus::Succeeded, "{kept:?}");
        assert_eq!(version_of(&f.skills.join("demo")).as_deref(), Some("3.0.0"));
    }
}
