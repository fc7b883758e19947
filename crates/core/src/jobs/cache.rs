//! Cache keys: what makes two requests the same computation.
//!
//! The key hashes the canonical JSON (sorted keys) of the skill id, the engine, the skill's
//! fingerprint (every file of its folder, so a changed script is a miss too), the parameters,
//! the engine options, the inline input and the uploaded files' hashes. Runtime options are
//! left out: they do not change results.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::browse::files_under;

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    hex::encode(digest)
}

/// Hash of every regular file listed (paths and contents), in the order given.
fn fingerprint(files: &[(String, PathBuf)]) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    for (rel, path) in files {
        let file = std::fs::File::open(path)?;
        hasher.update(rel.as_bytes());
        hasher.update([0]);
        hasher.update(file.metadata()?.len().to_le_bytes());
        hash_copy(&mut hasher, file, std::io::sink())?;
    }
    Ok(hex_digest(hasher))
}

/// Skill folders hashed before, by path: every create needs its skill's fingerprint, and
/// stating the files is much cheaper than reading them. A folder is hashed again as soon as
/// any file's path, size, inode or times differ; a folder with a file changed in the last
/// `SETTLE` (2 s) is not kept at all, because file times are coarse (a write in
/// the same tick as the hash would leave them equal).
#[derive(Debug)]
pub struct Fingerprints {
    known: Mutex<HashMap<PathBuf, (Vec<Stamp>, String)>>,
    settle: std::time::Duration,
}

impl Default for Fingerprints {
    fn default() -> Self {
        Self {
            known: Mutex::default(),
            settle: Self::SETTLE,
        }
    }
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

impl Fingerprints {
    const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);
    /// Folders remembered before the map starts over (skill updates leave old paths behind).
    const CAPACITY: usize = 1024;
    /// Files a folder may hold for [`Fingerprints::kept`] to check it: a few system calls
    /// each, which an async task may make in place (a few microseconds each on a local
    /// disk) where a hop to the blocking pool and back would cost more under load.
    pub const CHECKED_IN_PLACE: usize = 32;

    /// The fingerprint of every regular file under `dir` (paths and contents); blocking.
    pub fn of(&self, dir: &Path) -> std::io::Result<String> {
        let (files, stamps, settled) = self.stamps(dir)?;
        if let Some(hash) = self.matching(dir, &stamps) {
            return Ok(hash);
        }
        let hash = fingerprint(&files)?;
        if settled {
            let mut known = self.lock();
            if known.len() >= Self::CAPACITY {
                known.clear();
            }
            known.insert(dir.to_path_buf(), (stamps, hash.clone()));
        }
        Ok(hash)
    }

    /// The kept fingerprint of `dir` when its files still look as they did when it was
    /// hashed, checked without reading them; `None` when the folder must be hashed (with
    /// [`Fingerprints::of`]), or holds more than [`Fingerprints::CHECKED_IN_PLACE`] files.
    pub fn kept(&self, dir: &Path) -> Option<String> {
        let small = self
            .lock()
            .get(dir)
            .is_some_and(|(stamps, _)| stamps.len() <= Self::CHECKED_IN_PLACE);
        if !small {
            return None;
        }
        let (_, stamps, _) = self.stamps(dir).ok()?;
        self.matching(dir, &stamps)
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

    /// The kept hash of `dir` if it was kept with exactly `stamps`.
    fn matching(&self, dir: &Path, stamps: &[Stamp]) -> Option<String> {
        let known = self.lock();
        let (kept, hash) = known.get(dir)?;
        (kept.as_slice() == stamps).then(|| hash.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (Vec<Stamp>, String)>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    let canonical = json!({
        "cache_key_version": 1,
        "skill_id": parts.skill_id,
        "engine": parts.engine,
        "skill_fingerprint": parts.skill_fingerprint,
        "parameter": parts.parameter,
        "engine_options": parts.engine_options,
        "input_manifest_hash": sha256_hex(json!({"files": parts.files}).to_string().as_bytes()),
        "inline_input_hash": inline,
    });
    sha256_hex(canonical.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_fingerprint_follows_every_change() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/run.sh"), "echo 1").unwrap();
        let fresh = Fingerprints::default();
        let first = fresh.of(dir.path()).unwrap();
        assert!(
            fresh.lock().is_empty(),
            "files written just now are not trusted to their times"
        );

        let kept = Fingerprints {
            settle: std::time::Duration::ZERO,
            ..Fingerprints::default()
        };
        assert_eq!(kept.of(dir.path()).unwrap(), first);
        assert_eq!(kept.lock().len(), 1);
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
            Fingerprints::default().of(dir.path()).unwrap(),
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
