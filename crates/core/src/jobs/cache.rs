//! Cache keys: what makes two requests the same computation.
//!
//! The key hashes the canonical JSON (sorted keys) of the skill id, the engine, the skill's
//! fingerprint (every file of its folder, so a changed script is a miss too), the parameters,
//! the engine options, the inline input and the uploaded files' hashes. Runtime options are
//! left out: they do not change results.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use skill_runner_skill::walk::{content_hash, entries_under, files_under};

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    hex::encode(digest)
}

/// Skill folders hashed before, by path: every create needs its skill's fingerprint, and
/// hashing reads every file.
///
/// A folder is put under inotify watches (it and each of its subfolders) before it is hashed,
/// and keeps its hash until a change is reported under it. The kernel queues a change's event
/// before the change's system call returns, and each lookup first reads what is queued (one
/// system call when nothing is), so a change made before a create began is always seen: the
/// answer is as exact as checking every file, without touching them. Reading a file is no
/// change (no event is asked for it). Where no watch can be set (no inotify, its limits
/// reached), a kept hash holds while every file's path, size, inode and times are as they were
/// (a few system calls per file); such a folder with a file changed in the last `SETTLE` (2 s)
/// is not kept at all, because file times are coarse (a write in the same tick as the hash
/// would leave them equal).
#[derive(Debug)]
pub struct Fingerprints {
    known: Mutex<Known>,
    settle: std::time::Duration,
}

impl Default for Fingerprints {
    fn default() -> Self {
        Self {
            known: Mutex::new(Known::watching(true)),
            settle: Self::SETTLE,
        }
    }
}

/// The kept hashes and the watches that keep them true.
#[derive(Debug)]
struct Known {
    folders: HashMap<PathBuf, Kept>,
    inotify: Watches,
    /// Watched folders, each with the changes reported under it so far: a hash is kept as
    /// watched only when no change came while it was made.
    watched: HashMap<PathBuf, u64>,
    /// The folder each watch is on (a skill folder or one of its subfolders).
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

/// The inotify instance, made at the first watch.
#[derive(Debug)]
enum Watches {
    NotYet,
    On(Inotify),
    /// None could be had, or watching is off.
    Off,
}

/// A folder's hash and how it is known to hold.
#[derive(Debug)]
struct Kept {
    hash: String,
    /// Empty when the folder is watched.
    stamps: Vec<Stamp>,
    watched: bool,
}

/// What a file looks like without reading it.
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    rel: String,
    len: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Every change to a folder's files and subfolders, to the folder itself, and nothing else.
const CHANGES: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR)
    .union(AddWatchFlags::IN_DONT_FOLLOW);

impl Known {
    fn watching(watch: bool) -> Self {
        Self {
            folders: HashMap::new(),
            inotify: if watch { Watches::NotYet } else { Watches::Off },
            watched: HashMap::new(),
            dirs: HashMap::new(),
        }
    }

    /// Reads the changes queued since the last look: every watched folder holding one forgets
    /// its hash.
    fn catch_up(&mut self) {
        let Watches::On(inotify) = &self.inotify else {
            return;
        };
        let mut changed = Vec::new();
        let mut lost = false;
        loop {
            match inotify.read_events() {
                Ok(events) => changed.extend(events),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the skill folders' changes: every kept fingerprint is dropped");
                    lost = true;
                    break;
                }
            }
        }
        for event in changed {
            if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                lost = true;
                continue;
            }
            let Some(dir) = self.dirs.get(&event.wd).cloned() else {
                continue;
            };
            if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&event.wd);
            }
            for (root, changes) in &mut self.watched {
                if dir.starts_with(root) {
                    *changes += 1;
                    self.folders.remove(root);
                }
            }
        }
        if lost {
            // Events were lost: nothing watched is trusted.
            for (root, changes) in &mut self.watched {
                *changes += 1;
                self.folders.remove(root);
            }
        }
    }

    /// The inotify instance, made the first time; `None` when there is none.
    fn inotify(&mut self) -> Option<&Inotify> {
        if let Watches::NotYet = self.inotify {
            self.inotify = match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
                Ok(inotify) => Watches::On(inotify),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch skill folders: each create checks its skill's file stamps");
                    Watches::Off
                }
            };
        }
        match &self.inotify {
            Watches::On(inotify) => Some(inotify),
            _ => None,
        }
    }

    /// Watches `dirs` (a folder and its subfolders) for `root`; its changes so far, or `None`
    /// when they cannot all be watched.
    fn watch(&mut self, root: &Path, dirs: &[PathBuf]) -> Option<u64> {
        self.inotify()?;
        let Watches::On(inotify) = &self.inotify else {
            return None;
        };
        for dir in dirs {
            match inotify.add_watch(dir.as_path(), CHANGES) {
                Ok(wd) => {
                    self.dirs.insert(wd, dir.clone());
                }
                Err(e) => {
                    tracing::debug!(folder = %dir.display(), error = %e, "skill folder not watched: its files' stamps are checked instead");
                    return None;
                }
            }
        }
        Some(*self.watched.entry(root.to_path_buf()).or_insert(0))
    }

    /// Forgets every hash and watch.
    fn clear(&mut self) {
        if let Watches::On(inotify) = &self.inotify {
            for wd in self.dirs.keys() {
                // A folder removed since is no longer watched anyway.
                let _ = inotify.rm_watch(*wd);
            }
        }
        self.folders.clear();
        self.watched.clear();
        self.dirs.clear();
    }
}

impl Fingerprints {
    const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);
    /// Folders remembered before the map starts over (skill updates leave old paths behind).
    const CAPACITY: usize = 1024;
    /// Files an unwatched folder may hold for [`Fingerprints::kept`] to check it: a few
    /// system calls each, which an async task may make in place (a few microseconds each on
    /// a local disk) where a hop to the blocking pool and back would cost more under load.
    pub const CHECKED_IN_PLACE: usize = 32;

    /// The fingerprint of every regular file under `dir` (paths and contents); blocking.
    pub fn of(&self, dir: &Path) -> std::io::Result<String> {
        // Unwatched, the stamps below are compared once, whatever the folder's size.
        if let Ok(hash) = self.look_up(dir) {
            return Ok(hash);
        }
        {
            let mut known = self.lock();
            if known.folders.len() >= Self::CAPACITY {
                known.clear();
            }
        }
        let changes = self.watch(dir)?;
        let (files, stamps, settled) = self.stamps(dir)?;
        if changes.is_none()
            && let Some(hash) = self.matching(dir, &stamps)
        {
            return Ok(hash);
        }
        let hash = content_hash(&files)?;
        let mut known = self.lock();
        known.catch_up();
        let watched = changes.is_some() && known.watched.get(dir) == changes.as_ref();
        if watched || settled {
            let kept = Kept {
                hash: hash.clone(),
                stamps: if watched { Vec::new() } else { stamps },
                watched,
            };
            known.folders.insert(dir.to_path_buf(), kept);
        }
        Ok(hash)
    }

    /// Puts `dir` and every folder under it under watches; its changes so far, or `None` when
    /// it cannot be watched. A folder made while they were being set may have come too late
    /// for its parent's watch to report it, so the folders are listed again until a listing
    /// finds none unwatched: from then on, each new folder's making is reported.
    fn watch(&self, dir: &Path) -> std::io::Result<Option<u64>> {
        if self.lock().inotify().is_none() {
            return Ok(None);
        }
        let mut watching: HashSet<PathBuf> = HashSet::new();
        let mut changes = None;
        loop {
            let new: Vec<PathBuf> = folders_under(dir)?
                .into_iter()
                .filter(|folder| !watching.contains(folder))
                .collect();
            if new.is_empty() {
                return Ok(changes);
            }
            changes = self.lock().watch(dir, &new);
            if changes.is_none() {
                return Ok(None);
            }
            watching.extend(new);
        }
    }

    /// The kept fingerprint of `dir` when no change was reported under it since it was
    /// hashed or, unwatched, when its files still look as they did, checked without reading
    /// them; `None` when the folder must be hashed (with [`Fingerprints::of`]), or is
    /// unwatched and holds more than [`Fingerprints::CHECKED_IN_PLACE`] files.
    pub fn kept(&self, dir: &Path) -> Option<String> {
        match self.look_up(dir) {
            Ok(hash) => Some(hash),
            Err(Some(files)) if files <= Self::CHECKED_IN_PLACE => {
                let (_, stamps, _) = self.stamps(dir).ok()?;
                self.matching(dir, &stamps)
            }
            Err(_) => None,
        }
    }

    /// After reading the queued changes: the hash of `dir` when it is watched and kept, else
    /// how many files its kept stamps hold (`None`: nothing kept).
    fn look_up(&self, dir: &Path) -> Result<String, Option<usize>> {
        let mut known = self.lock();
        known.catch_up();
        match known.folders.get(dir) {
            Some(Kept {
                hash,
                watched: true,
                ..
            }) => Ok(hash.clone()),
            Some(Kept { stamps, .. }) => Err(Some(stamps.len())),
            None => Err(None),
        }
    }

    /// The files under `dir`, their stamps, and whether none changed within `settle`.
    #[allow(clippy::type_complexity)]
    fn stamps(&self, dir: &Path) -> std::io::Result<(Vec<(String, PathBuf)>, Vec<Stamp>, bool)> {
        let files = files_under(dir)?;
        let nanos = |(secs, nsec): (i64, i64)| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
        let settled_before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128)
            - self.settle.as_nanos() as i128;
        let mut settled = true;
        let mut stamps = Vec::with_capacity(files.len());
        for (rel, path) in &files {
            let meta = std::fs::symlink_metadata(path)?;
            let stamp = Stamp {
                rel: rel.clone(),
                len: meta.len(),
                ino: meta.ino(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                ctime: (meta.ctime(), meta.ctime_nsec()),
            };
            settled &= nanos(stamp.mtime).max(nanos(stamp.ctime)) < settled_before;
            stamps.push(stamp);
        }
        Ok((files, stamps, settled))
    }

    /// The kept hash of unwatched `dir` if it was kept with exactly `stamps`.
    fn matching(&self, dir: &Path, stamps: &[Stamp]) -> Option<String> {
        let known = self.lock();
        let kept = known.folders.get(dir)?;
        (!kept.watched && kept.stamps == stamps).then(|| kept.hash.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `dir` and every folder under it (see [`entries_under`]).
fn folders_under(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    entries_under(dir)
        .filter(|entry| entry.as_ref().map_or(true, |e| e.file_type().is_dir()))
        .map(|entry| entry.map(walkdir::DirEntry::into_path))
        .collect()
}

/// `{path, sha256, size}` of each uploaded file, sorted by path.
pub fn file_manifest(dir: &Path) -> std::io::Result<Vec<Value>> {
    files_under(dir)?
        .into_iter()
        .map(|(rel, path)| {
            let mut hasher = Sha256::new();
            let size = hash_copy(&mut hasher, std::fs::File::open(&path)?, std::io::sink())?;
            Ok(json!({"path": rel, "sha256": hex_digest(hasher), "size": size}))
        })
        .collect()
}

/// Copies `from` into `to` in chunks while hashing it, so a file of any size takes constant
/// memory; returns the bytes copied.
pub fn hash_copy(
    hasher: &mut Sha256,
    mut from: impl std::io::Read,
    mut to: impl std::io::Write,
) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// A finished hash as lower-case hex.
pub fn hex_digest(hasher: Sha256) -> String {
    hex(&hasher.finalize())
}

/// What goes into a cache key.
#[derive(Debug)]
pub struct KeyParts<'a> {
    /// Results are shared within a tenant only.
    pub tenant_id: &'a str,
    pub skill_id: &'a str,
    pub engine: &'a str,
    pub skill_fingerprint: &'a str,
    pub parameter: &'a Value,
    pub engine_options: &'a Value,
    pub input: &'a Value,
    /// The uploaded files' [`file_manifest`], empty without an upload.
    pub files: &'a [Value],
}

pub fn key(parts: &KeyParts<'_>) -> String {
    let inline = match parts.input {
        Value::Null => String::new(),
        Value::Object(m) if m.is_empty() => String::new(),
        v => sha256_hex(v.to_string().as_bytes()),
    };
    let mut canonical = json!({
        "cache_key_version": 1,
        "skill_id": parts.skill_id,
        "engine": parts.engine,
        "skill_fingerprint": parts.skill_fingerprint,
        "parameter": parts.parameter,
        "engine_options": parts.engine_options,
        "input_manifest_hash": sha256_hex(json!({"files": parts.files}).to_string().as_bytes()),
        "inline_input_hash": inline,
    });
    // The default tenant's keys stay those of a service without tenants, so its cache
    // survives the upgrade.
    if parts.tenant_id != crate::tenants::DEFAULT_TENANT {
        canonical["tenant_id"] = json!(parts.tenant_id);
    }
    sha256_hex(canonical.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unwatched() -> Fingerprints {
        Fingerprints {
            known: Mutex::new(Known::watching(false)),
            ..Fingerprints::default()
        }
    }

    #[test]
    fn a_watched_folder_is_answered_from_memory_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("skill");
        std::fs::create_dir_all(skill.join("a")).unwrap();
        // More files than an unwatched folder is checked in place for.
        for i in 0..=Fingerprints::CHECKED_IN_PLACE {
            std::fs::write(skill.join(format!("a/{i}.txt")), i.to_string()).unwrap();
        }
        let fingerprints = Fingerprints::default();
        let first = fingerprints.of(&skill).unwrap();
        assert_eq!(
            unwatched().of(&skill).unwrap(),
            first,
            "the same hash either way"
        );
        assert_eq!(
            fingerprints.kept(&skill),
            Some(first.clone()),
            "kept at once (watched before it was hashed), with no stamps to check"
        );
        // Reading the files (as every run's copy does) is no change.
        unwatched().of(&skill).unwrap();
        assert_eq!(fingerprints.kept(&skill), Some(first.clone()), "reads");

        // Each change is seen by the very next look: its event was queued before the change
        // returned.
        std::fs::write(skill.join("a/0.txt"), "edited").unwrap();
        assert_eq!(fingerprints.kept(&skill), None, "an edit");
        let edited = fingerprints.of(&skill).unwrap();
        assert_ne!(edited, first);

        std::fs::create_dir_all(skill.join("a/new/deeper")).unwrap();
        assert_eq!(fingerprints.kept(&skill), None, "a new folder");
        std::fs::write(skill.join("a/new/deeper/n.txt"), "n").unwrap();
        let added = fingerprints.of(&skill).unwrap();
        assert_ne!(added, edited, "a new file");
        std::fs::write(skill.join("a/new/deeper/n.txt"), "m").unwrap();
        assert_eq!(
            fingerprints.kept(&skill),
            None,
            "an edit in a folder made after the first watches"
        );
        let deeper = fingerprints.of(&skill).unwrap();
        assert_ne!(deeper, added);

        std::fs::rename(skill.join("a/1.txt"), skill.join("a/renamed.txt")).unwrap();
        assert_eq!(fingerprints.kept(&skill), None, "a rename");
        let renamed = fingerprints.of(&skill).unwrap();
        assert_ne!(renamed, deeper);
        std::fs::remove_file(skill.join("a/2.txt")).unwrap();
        assert_eq!(fingerprints.kept(&skill), None, "a removal");
        assert_eq!(
            fingerprints.of(&skill).unwrap(),
            unwatched().of(&skill).unwrap(),
            "the kept answer is the hash of the folder as it is"
        );
        std::fs::remove_dir_all(&skill).unwrap();
        assert_eq!(fingerprints.kept(&skill), None, "a removed folder");
        let gone = fingerprints.of(&skill).unwrap();
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(skill.join("back.txt"), "b").unwrap();
        assert_ne!(
            fingerprints.of(&skill).unwrap(),
            gone,
            "a folder made again where one was removed"
        );
    }

    #[test]
    fn an_unwatched_fingerprint_follows_every_change_by_the_stamps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/run.sh"), "echo 1").unwrap();
        let fresh = unwatched();
        let first = fresh.of(dir.path()).unwrap();
        assert!(
            fresh.lock().folders.is_empty(),
            "files written just now are not trusted to their times"
        );

        let kept = Fingerprints {
            settle: std::time::Duration::ZERO,
            ..unwatched()
        };
        assert_eq!(kept.of(dir.path()).unwrap(), first);
        assert_eq!(kept.lock().folders.len(), 1);
        assert_eq!(
            kept.of(dir.path()).unwrap(),
            first,
            "answered from the stamps"
        );
        assert_eq!(
            kept.kept(dir.path()),
            Some(first.clone()),
            "checked in place"
        );
        assert_eq!(fresh.kept(dir.path()), None, "nothing kept to check");
        std::fs::write(dir.path().join("a/run.sh"), "echo 22").unwrap();
        assert_eq!(kept.kept(dir.path()), None, "an edit is seen in place too");
        let edited = kept.of(dir.path()).unwrap();
        assert_ne!(edited, first, "an edited file");
        std::fs::write(dir.path().join("b.txt"), "").unwrap();
        let added = kept.of(dir.path()).unwrap();
        assert_ne!(added, edited, "a new file");
        std::fs::remove_file(dir.path().join("b.txt")).unwrap();
        std::fs::rename(dir.path().join("a/run.sh"), dir.path().join("a/other.sh")).unwrap();
        assert_ne!(kept.of(dir.path()).unwrap(), edited, "a renamed file");
        assert_eq!(
            kept.of(dir.path()).unwrap(),
            unwatched().of(dir.path()).unwrap(),
            "the kept answer is the hash of the folder as it is"
        );
    }

    #[test]
    fn keys_change_with_every_part() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/x.txt"), "x").unwrap();
        std::fs::write(dir.path().join("y.txt"), "y").unwrap();
        let fp = Fingerprints::default().of(dir.path()).unwrap();
        let files = file_manifest(dir.path()).unwrap();
        assert_eq!(files[0]["path"], "a/b/x.txt");
        assert_eq!(files[1]["size"], 1);
        let p = json!({"n": 1});
        let e = json!({});
        let i = json!({"text": "hi"});
        let base = KeyParts {
            tenant_id: crate::tenants::DEFAULT_TENANT,
            skill_id: "s",
            engine: "script",
            skill_fingerprint: &fp,
            parameter: &p,
            engine_options: &e,
            input: &i,
            files: &files,
        };
        let k = key(&base);
        assert_eq!(k, key(&base), "deterministic");
        let p2 = json!({"n": 2});
        assert_ne!(
            k,
            key(&KeyParts {
                parameter: &p2,
                ..base
            })
        );
        let i2 = json!({"text": "ho"});
        assert_ne!(k, key(&KeyParts { input: &i2, ..base }));
        assert_ne!(
            k,
            key(&KeyParts {
                tenant_id: "t-1",
                ..base
            }),
            "tenants share no results"
        );
        assert_ne!(
            k,
            key(&KeyParts {
                files: &files[..1],
                ..base
            })
        );
        std::fs::write(dir.path().join("y.txt"), "z").unwrap();
        let fp2 = Fingerprints::default().of(dir.path()).unwrap();
        assert_ne!(fp, fp2);
        assert_ne!(
            k,
            key(&KeyParts {
                skill_fingerprint: &fp2,
                ..base
            })
        );
    }
}
