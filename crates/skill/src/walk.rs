//! Walking a folder (a skill, a run) without following links: its entries, its regular files,
//! and one hash of their paths and contents.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// `dir` and everything under it; symlinks are not followed, and an entry that vanished
/// meanwhile is passed over.
pub fn entries_under(dir: &Path) -> impl Iterator<Item = std::io::Result<walkdir::DirEntry>> {
    // A root that is a link (a turn may replace its `artifacts/` with one) is listed as the
    // link it is, never walked into.
    walkdir::WalkDir::new(dir)
        .follow_root_links(false)
        .into_iter()
        .filter_map(|entry| match entry {
            Ok(entry) => Some(Ok(entry)),
            Err(e)
                if e.io_error().map(std::io::Error::kind) == Some(std::io::ErrorKind::NotFound) =>
            {
                None
            }
            Err(e) => Some(Err(e.into())),
        })
}

/// Regular files under `dir` with their `/`-separated relative paths, sorted (see
/// [`entries_under`]).
pub fn files_under(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in entries_under(dir) {
        let entry = entry?;
        if entry.file_type().is_file() {
            let rel = entry
                .path()
                .strip_prefix(dir)
                .expect("under dir")
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, entry.into_path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Hex SHA-256 of every file listed (its relative path, size and bytes), in the order given:
/// two folders with the same files hash alike wherever they lie.
pub fn content_hash(files: &[(String, PathBuf)]) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    for (rel, path) in files {
        let mut file = std::fs::File::open(path)?;
        hasher.update(rel.as_bytes());
        hasher.update([0]);
        hasher.update(file.metadata()?.len().to_le_bytes());
        std::io::copy(&mut file, &mut Hashing(&mut hasher))?;
    }
    Ok(hex::encode(hasher.finalize()))
}

/// A hasher fed as a writer.
struct Hashing<'a>(&'a mut Sha256);

impl std::io::Write for Hashing<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
