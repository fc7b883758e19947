//! Safe extraction of an uploaded skill package.
//!
//! Never `ZipArchive::extract`: every entry is checked before a byte is written. A package
//! holds one skill folder (its single top-level folder, or a standard skill's files at its
//! root) or several (a repository's archive: see [`Layout`]); entries that are absolute, escape with `..`, are
//! symlinks or anything but regular files and folders are rejected; entry count, uncompressed
//! size and compression ratio are capped, and the caps are enforced on the bytes actually
//! inflated, not only on the sizes the archive claims. `.git` components are dropped and
//! `__MACOSX` metadata is ignored. A file's executable bits are kept (a skill's scripts).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use skill_runner_types::rel_path::{RelPath, RelPathError};

/// Default upper bound for an uploaded package (compressed bytes).
pub const DEFAULT_PACKAGE_MAX_BYTES: u64 = 50 * 1024 * 1024;

/// Caps applied to every uploaded skill package before anything is written to the skills dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackageLimits {
    /// Size of the zip file as uploaded.
    pub max_compressed_bytes: u64,
    /// Sum of the entries' uncompressed sizes.
    pub max_uncompressed_bytes: u64,
    /// Number of entries in the zip's central directory.
    pub max_entries: usize,
    /// Largest accepted uncompressed/compressed ratio, per large entry and for the whole archive.
    pub max_compression_ratio: u64,
}

impl Default for PackageLimits {
    fn default() -> Self {
        Self {
            max_compressed_bytes: DEFAULT_PACKAGE_MAX_BYTES,
            max_uncompressed_bytes: 512 * 1024 * 1024,
            max_entries: 10_000,
            max_compression_ratio: 100,
        }
    }
}

/// Why a package was refused. The message names the rule.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0}")]
    Rejected(String),
    #[error("cannot extract the package: {0}")]
    Io(#[from] std::io::Error),
}

fn reject<T>(message: impl Into<String>) -> Result<T, ArchiveError> {
    Err(ArchiveError::Rejected(message.into()))
}

/// Entries above this size must not exceed the compression ratio cap.
const RATIO_CHECK_MIN_BYTES: u64 = 1024 * 1024;

const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

/// One entry that passed the checks, with its path relative to `dest`.
struct Planned {
    index: usize,
    path: PathBuf,
    is_dir: bool,
    size: u64,
    executable: bool,
}

/// Where the skills of an extracted package lie, under the folder it was extracted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One skill: the package's single top-level folder, relative.
    Folder(PathBuf),
    /// One standard skill whose files (`SKILL.md` first) lie at the package's root.
    Root,
    /// Several skills: each folder holding a `SKILL.md` at most [`COLLECTION_DEPTH`] levels
    /// down (a repository's `skills/*/`, `skills/.curated/*/`, or `*/`), the outermost ones
    /// only, relative and sorted. At the root of a package without a single top-level folder,
    /// only standard skills count (no `assets/runner.json`).
    Collection(Vec<PathBuf>),
}

/// How deep below a collection's base a skill folder may lie.
pub const COLLECTION_DEPTH: usize = 4;

/// Extracts the package `zip_path` into `dest` (which must not exist yet) and says where its
/// skills lie.
pub fn extract_skills(
    zip_path: &Path,
    dest: &Path,
    limits: &PackageLimits,
) -> Result<Layout, ArchiveError> {
    let (layout, _) = extract(zip_path, dest, limits, "package", package_layout)?;
    Ok(layout)
}

/// Packs the skill folder `dir` as a package of its own: a zip at `dest` whose one top-level
/// folder is `dir`'s name, executable bits kept.
pub fn zip_folder(dir: &Path, dest: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let top = dir.file_name().unwrap_or_default().to_string_lossy();
    let mut zip = zip::ZipWriter::new(File::create(dest)?);
    for (rel, path) in crate::walk::files_under(dir)? {
        let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
        let options = zip::write::SimpleFileOptions::default().unix_permissions(mode);
        zip.start_file(format!("{top}/{rel}"), options)
            .map_err(std::io::Error::other)?;
        std::io::copy(&mut File::open(&path)?, &mut zip)?;
    }
    zip.finish().map_err(std::io::Error::other)?;
    Ok(())
}

fn package_layout(plan: &[Planned]) -> Result<Layout, ArchiveError> {
    let has_file = |path: &Path| plan.iter().any(|e| !e.is_dir && e.path == path);
    let skill_dirs = |base: &Path, standard_only: bool| -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = plan
            .iter()
            .filter(|e| !e.is_dir && e.path.file_name().is_some_and(|n| n == "SKILL.md"))
            .filter_map(|e| e.path.parent().map(Path::to_path_buf))
            .filter(|dir| {
                dir.strip_prefix(base)
                    .is_ok_and(|rel| (1..=COLLECTION_DEPTH).contains(&rel.components().count()))
            })
            .filter(|dir| !standard_only || !has_file(&dir.join("assets/runner.json")))
            .collect();
        dirs.sort();
        // The outermost only: a skill's own subfolders are its files.
        let mut outermost: Vec<PathBuf> = Vec::new();
        for dir in dirs {
            if !outermost.iter().any(|o| dir.starts_with(o)) {
                outermost.push(dir);
            }
        }
        outermost
    };
    match single_top_level(plan) {
        Ok(top) => {
            let top = PathBuf::from(top);
            if has_file(&top.join("SKILL.md")) {
                return Ok(Layout::Folder(top));
            }
            let found = skill_dirs(&top, false);
            Ok(if found.is_empty() {
                // Loading it says what is missing.
                Layout::Folder(top)
            } else {
                Layout::Collection(found)
            })
        }
        Err(not_one) => {
            if has_file(Path::new("SKILL.md")) {
                return Ok(Layout::Root);
            }
            let found = skill_dirs(Path::new(""), true);
            if found.is_empty() {
                Err(not_one)
            } else {
                Ok(Layout::Collection(found))
            }
        }
    }
}

/// Extracts `zip_path` into `dest` (which must not exist yet) and returns the path of the single
/// top-level folder inside it.
pub fn extract_package(
    zip_path: &Path,
    dest: &Path,
    limits: &PackageLimits,
) -> Result<PathBuf, ArchiveError> {
    let (top, _) = extract(zip_path, dest, limits, "package", single_top_level)?;
    Ok(dest.join(top))
}

/// Extracts an input upload into `dest` (which must not exist yet), with the same entry checks
/// as packages but any layout; returns the extracted files' `/`-separated paths.
pub fn extract_upload(
    zip_path: &Path,
    dest: &Path,
    limits: &PackageLimits,
) -> Result<Vec<String>, ArchiveError> {
    let ((), files) = extract(zip_path, dest, limits, "upload", |_| Ok(()))?;
    Ok(files)
}

fn extract<T>(
    zip_path: &Path,
    dest: &Path,
    limits: &PackageLimits,
    what: &str,
    check_layout: impl FnOnce(&[Planned]) -> Result<T, ArchiveError>,
) -> Result<(T, Vec<String>), ArchiveError> {
    let file = File::open(zip_path)?;
    let zip_size = file.metadata()?.len();
    if zip_size > limits.max_compressed_bytes {
        return reject(format!(
            "{what} is {zip_size} bytes; the limit is {} bytes",
            limits.max_compressed_bytes
        ));
    }
    let mut archive = match zip::ZipArchive::new(file) {
        Ok(a) => a,
        // A file that cannot be read is the volume's fault, not the package's.
        Err(zip::result::ZipError::Io(e)) => return Err(e.into()),
        Err(e) => return reject(format!("{what} is not a valid zip file: {e}")),
    };
    if archive.len() > limits.max_entries {
        return reject(format!(
            "{what} has {} entries; the limit is {}",
            archive.len(),
            limits.max_entries
        ));
    }

    // The zip crate keeps one entry per name, so a second entry of the same name would
    // silently replace the first: found in the central directory itself.
    if let Some(name) = duplicate_name(&mut File::open(zip_path)?, limits.max_entries)? {
        return reject(format!(
            "entry '{}' appears twice in the {what}; each name may appear once",
            name.escape_debug()
        ));
    }
    let plan = plan_entries(&mut archive, zip_size, limits, what)?;
    let layout = check_layout(&plan)?;

    std::fs::create_dir_all(dest.parent().unwrap_or(dest))?;
    std::fs::create_dir(dest)?;
    let mut written = 0u64;
    let mut files = Vec::new();
    for entry in &plan {
        let target = dest.join(&entry.path);
        if entry.is_dir {
            std::fs::create_dir_all(&target)?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut out = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if entry.executable { 0o755 } else { 0o644 })
            .open(&target)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return reject(format!(
                    "entry '{}' appears twice in the {what}",
                    entry.path.display()
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let mut zipped = match archive.by_index(entry.index) {
            Ok(z) => z,
            Err(e) => {
                return reject(format!(
                    "entry '{}' cannot be read: {e}",
                    entry.path.display()
                ));
            }
        };
        // Read at most one byte past the claimed size, so a lying header is caught.
        let mut limited = (&mut zipped).take(entry.size + 1);
        let copied = copy_checked(&mut limited, &mut out, &entry.path)?;
        if copied != entry.size {
            return reject(format!(
                "entry '{}' inflates to more bytes than its header claims (zip bomb)",
                entry.path.display()
            ));
        }
        written += copied;
        if written > limits.max_uncompressed_bytes {
            return reject(format!(
                "{what} inflates beyond {} bytes (zip bomb)",
                limits.max_uncompressed_bytes
            ));
        }
        files.push(
            entry
                .path
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
        );
    }
    Ok((layout, files))
}

fn copy_checked(from: &mut impl Read, to: &mut File, name: &Path) -> Result<u64, ArchiveError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return reject(format!("entry '{}' is corrupt: {e}", name.display())),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
    to.flush()?;
    Ok(total)
}

fn plan_entries(
    archive: &mut zip::ZipArchive<File>,
    zip_size: u64,
    limits: &PackageLimits,
    what: &str,
) -> Result<Vec<Planned>, ArchiveError> {
    let mut plan = Vec::with_capacity(archive.len());
    let mut total = 0u64;
    for index in 0..archive.len() {
        let entry = match archive.by_index_raw(index) {
            Ok(e) => e,
            Err(e) => return reject(format!("zip entry #{index} cannot be read: {e}")),
        };
        let raw = match entry.name() {
            Ok(name) => name.into_owned(),
            Err(e) => return reject(format!("zip entry #{index} has an unreadable name: {e}")),
        };
        let Some(components) = sanitize_name(&raw, what)? else {
            continue;
        };
        if components.first().is_some_and(|c| c == "__MACOSX") {
            continue;
        }
        let is_dir = entry.is_dir();
        if let Some(mode) = entry.unix_mode() {
            match mode & S_IFMT {
                0 | S_IFREG | S_IFDIR => {}
                S_IFLNK => return reject(format!("symlink entry '{raw}' is not allowed")),
                _ => return reject(format!("entry '{raw}' is not a regular file or folder")),
            }
        }
        if entry.is_symlink() {
            return reject(format!("symlink entry '{raw}' is not allowed"));
        }
        if components.iter().any(|c| c == ".git") {
            continue;
        }
        let size = if is_dir { 0 } else { entry.size() };
        let compressed = entry.compressed_size().max(1);
        if size > RATIO_CHECK_MIN_BYTES && size / compressed > limits.max_compression_ratio {
            return reject(format!(
                "entry '{raw}' has compression ratio {}:1 above the limit {}:1 (zip bomb)",
                size / compressed,
                limits.max_compression_ratio
            ));
        }
        total = total.saturating_add(size);
        if total > limits.max_uncompressed_bytes {
            return reject(format!(
                "{what} inflates beyond {} bytes (zip bomb)",
                limits.max_uncompressed_bytes
            ));
        }
        plan.push(Planned {
            index,
            path: components.iter().collect(),
            is_dir,
            size,
            executable: entry.unix_mode().is_some_and(|mode| mode & 0o111 != 0),
        });
    }
    if total > RATIO_CHECK_MIN_BYTES && total / zip_size.max(1) > limits.max_compression_ratio {
        return reject(format!(
            "{what} has compression ratio {}:1 above the limit {}:1 (zip bomb)",
            total / zip_size.max(1),
            limits.max_compression_ratio
        ));
    }
    Ok(plan)
}

/// The first name the central directory of `file` lists twice. The zip crate has read the
/// archive already, so a directory this cannot walk (it stops at `max_entries`) is left to it.
fn duplicate_name(file: &mut File, max_entries: usize) -> std::io::Result<Option<String>> {
    use std::io::{Seek, SeekFrom};
    let le16 = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let le32 = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let le64 = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let len = file.metadata()?.len();
    // The end record (22 bytes) and a comment of at most 64 KiB; with zip64, its locator.
    let tail_len = len.min(22 + 65_535 + 20);
    let mut tail = vec![0u8; tail_len as usize];
    file.seek(SeekFrom::Start(len - tail_len))?;
    file.read_exact(&mut tail)?;
    let Some(end) = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| tail[i..i + 4] == *b"PK\x05\x06")
    else {
        return Ok(None);
    };
    let (mut count, mut size, mut offset) = (
        u64::from(le16(&tail, end + 10)),
        u64::from(le32(&tail, end + 12)),
        u64::from(le32(&tail, end + 16)),
    );
    if (count == 0xFFFF || size == 0xFFFF_FFFF || offset == 0xFFFF_FFFF)
        && end >= 20
        && tail[end - 20..end - 16] == *b"PK\x06\x07"
    {
        let mut record = [0u8; 56];
        file.seek(SeekFrom::Start(le64(&tail, end - 12)))?;
        file.read_exact(&mut record)?;
        if record[..4] != *b"PK\x06\x06" {
            return Ok(None);
        }
        (count, size, offset) = (le64(&record, 32), le64(&record, 40), le64(&record, 48));
    }
    if count > max_entries as u64 || offset.saturating_add(size) > len {
        return Ok(None);
    }
    let mut directory = vec![0u8; size as usize];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut directory)?;
    let mut seen = BTreeSet::new();
    let mut at = 0usize;
    while at + 46 <= directory.len() && directory[at..at + 4] == *b"PK\x01\x02" {
        let name_len = usize::from(le16(&directory, at + 28));
        let skip = name_len
            + usize::from(le16(&directory, at + 30))
            + usize::from(le16(&directory, at + 32));
        let Some(name) = directory.get(at + 46..at + 46 + name_len) else {
            break;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        if !seen.insert(name.clone()) {
            return Ok(Some(name));
        }
        at += 46 + skip;
    }
    Ok(None)
}

/// Splits an entry name into safe components ([`RelPath`]); `None` for names with nothing left
/// (`./`). Control characters are refused too: no file in a skill needs one in its name.
fn sanitize_name(raw: &str, what: &str) -> Result<Option<Vec<String>>, ArchiveError> {
    if let Some(c) = raw.chars().find(|c| c.is_control()) {
        let what = match c {
            '\0' => "a NUL byte".to_owned(),
            other => format!("the control character {:?}", other),
        };
        return reject(format!("entry name {raw:?} contains {what}"));
    }
    match RelPath::parse(raw) {
        Ok(path) => Ok(Some(path.names().map(str::to_owned).collect())),
        Err(RelPathError::Empty) => Ok(None),
        Err(RelPathError::Parent) => reject(format!(
            "entry '{raw}' escapes the {what} with '..' (zip-slip)"
        )),
        Err(_) => reject(format!("entry '{raw}' has an absolute path")),
    }
}

/// The one top-level folder every entry must sit in.
fn single_top_level(plan: &[Planned]) -> Result<String, ArchiveError> {
    let mut tops = BTreeSet::new();
    for entry in plan {
        let mut parts = entry.path.components();
        let first = parts
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        if let Some(first) = first {
            if parts.next().is_none() && !entry.is_dir {
                return reject(format!(
                    "package must contain exactly one top-level folder; found the file '{first}' at the top level"
                ));
            }
            tops.insert(first);
        }
    }
    match tops.len() {
        1 => Ok(tops.into_iter().next().expect("one element")),
        0 => reject("package must contain exactly one top-level folder; the zip is empty"),
        n => reject(format!(
            "package must contain exactly one top-level folder; found {n}: {}",
            tops.into_iter().collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn zip_of(entries: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut w = zip::ZipWriter::new(file.reopen().unwrap());
        for (name, data) in entries {
            if name.ends_with('/') {
                w.add_directory(*name, SimpleFileOptions::default())
                    .unwrap();
            } else {
                w.start_file(*name, SimpleFileOptions::default()).unwrap();
                w.write_all(data).unwrap();
            }
        }
        w.finish().unwrap();
        file
    }

    fn extract(
        zip: &tempfile::NamedTempFile,
        limits: &PackageLimits,
    ) -> (tempfile::TempDir, Result<PathBuf, ArchiveError>) {
        let out = tempfile::tempdir().unwrap();
        let result = extract_package(zip.path(), &out.path().join("x"), limits);
        (out, result)
    }

    fn rejection(entries: &[(&str, &[u8])]) -> String {
        let zip = zip_of(entries);
        let (_out, result) = extract(&zip, &PackageLimits::default());
        match result {
            Err(ArchiveError::Rejected(m)) => m,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn extracts_one_folder_dropping_git_and_macosx() {
        let zip = zip_of(&[
            ("demo/", b""),
            ("demo/SKILL.md", b"hi"),
            ("demo/.git/config", b"x"),
            ("demo/.gitignore", b"target"),
            ("demo/.github/ci.yml", b"on: push"),
            ("__MACOSX/demo/._SKILL.md", b"junk"),
        ]);
        let (out, result) = extract(&zip, &PackageLimits::default());
        let top = result.unwrap();
        assert_eq!(top, out.path().join("x/demo"));
        assert_eq!(std::fs::read(top.join("SKILL.md")).unwrap(), b"hi");
        assert!(!top.join(".git").exists());
        assert!(top.join(".gitignore").is_file());
        assert!(top.join(".github/ci.yml").is_file());
        assert!(!out.path().join("x/__MACOSX").exists());
    }

    /// The zip writer refuses a second entry of a name, so the second name is patched in.
    #[test]
    fn a_name_twice_or_a_control_character_is_refused_by_name() {
        let zip = zip_of(&[("demo/SKILL.md", b"good"), ("demo/SKILL.mx", b"evil")]);
        let mut bytes = std::fs::read(zip.path()).unwrap();
        let (from, to) = (b"demo/SKILL.mx", b"demo/SKILL.md");
        let mut patched = 0;
        for at in 0..bytes.len() - from.len() {
            if bytes[at..at + from.len()] == *from {
                bytes[at..at + to.len()].copy_from_slice(to);
                patched += 1;
            }
        }
        assert_eq!(patched, 2, "the local header and the central directory");
        std::fs::write(zip.path(), &bytes).unwrap();
        let (_out, result) = extract(&zip, &PackageLimits::default());
        match result {
            Err(ArchiveError::Rejected(m)) => assert!(
                m.contains("entry 'demo/SKILL.md' appears twice in the package"),
                "{m}"
            ),
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert!(rejection(&[("demo/a\nb", b"1")]).contains("the control character '\\n'"));
        assert!(rejection(&[("demo/a\u{7f}", b"1")]).contains("control character"));
        assert!(rejection(&[("demo/a\0b", b"1")]).contains("a NUL byte"));
    }

    #[test]
    fn structural_rules() {
        assert!(
            rejection(&[("a/x", b"1"), ("b/y", b"2")])
                .contains("exactly one top-level folder; found 2: a, b")
        );
        assert!(
            rejection(&[("a/x", b"1"), ("loose.txt", b"2")]).contains("found the file 'loose.txt'")
        );
        assert!(rejection(&[("a/../../x", b"1")]).contains("zip-slip"));
        assert!(rejection(&[("/etc/a/x", b"1")]).contains("absolute path"));
        assert!(rejection(&[("C:/a/x", b"1")]).contains("absolute path"));
        assert!(rejection(&[("a\\..\\x", b"1")]).contains("zip-slip"));
    }

    #[test]
    fn symlinks_are_rejected() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut w = zip::ZipWriter::new(file.reopen().unwrap());
        w.start_file("a/x", SimpleFileOptions::default()).unwrap();
        w.add_symlink("a/link", "/etc/passwd", SimpleFileOptions::default())
            .unwrap();
        w.finish().unwrap();
        let (_out, result) = extract(&file, &PackageLimits::default());
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("symlink entry 'a/link'")
        );
    }

    #[test]
    fn size_count_and_ratio_caps() {
        let zeros = vec![0u8; 8 * 1024 * 1024];
        let m = rejection(&[("a/zeros", &zeros)]);
        assert!(
            m.contains("compression ratio") && m.contains("zip bomb"),
            "{m}"
        );

        let small = PackageLimits {
            max_entries: 2,
            ..PackageLimits::default()
        };
        let zip = zip_of(&[("a/1", b"1"), ("a/2", b"2"), ("a/3", b"3")]);
        let (_o, r) = extract(&zip, &small);
        assert!(
            r.unwrap_err()
                .to_string()
                .contains("3 entries; the limit is 2")
        );

        let small = PackageLimits {
            max_uncompressed_bytes: 10,
            ..PackageLimits::default()
        };
        let zip = zip_of(&[("a/1", b"0123456789abc")]);
        let (_o, r) = extract(&zip, &small);
        assert!(
            r.unwrap_err()
                .to_string()
                .contains("inflates beyond 10 bytes")
        );

        let small = PackageLimits {
            max_compressed_bytes: 10,
            ..PackageLimits::default()
        };
        let (_o, r) = extract(&zip, &small);
        assert!(r.unwrap_err().to_string().contains("the limit is 10 bytes"));
    }

    #[test]
    fn not_a_zip() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), b"definitely not a zip").unwrap();
        let (_o, r) = extract(&file, &PackageLimits::default());
        assert!(r.unwrap_err().to_string().contains("not a valid zip file"));
    }

    fn layout(entries: &[(&str, &[u8])]) -> Result<Layout, String> {
        let zip = zip_of(entries);
        let out = tempfile::tempdir().unwrap();
        extract_skills(zip.path(), &out.path().join("x"), &PackageLimits::default())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn layouts_of_one_skill_and_of_collections() {
        let md: &[u8] = b"---\nname: a\n---\n";
        assert_eq!(
            layout(&[("a/SKILL.md", md), ("a/scripts/s.sh", b"")]),
            Ok(Layout::Folder("a".into()))
        );
        assert_eq!(
            layout(&[("SKILL.md", md), ("scripts/s.sh", b"")]),
            Ok(Layout::Root)
        );
        // A repository's archive: one top folder, skills below it, nested SKILL.md ignored.
        assert_eq!(
            layout(&[
                ("repo-main/README.md", b""),
                ("repo-main/skills/b/SKILL.md", md),
                ("repo-main/skills/b/templates/SKILL.md", md),
                ("repo-main/skills/.curated/c/SKILL.md", md),
            ]),
            Ok(Layout::Collection(vec![
                "repo-main/skills/.curated/c".into(),
                "repo-main/skills/b".into(),
            ]))
        );
        // Skills at the root of a zip: standard ones only.
        assert_eq!(
            layout(&[
                ("README.md", b""),
                ("d/SKILL.md", md),
                ("e/SKILL.md", md),
                ("e/assets/runner.json", b"{}"),
            ]),
            Ok(Layout::Collection(vec!["d".into()]))
        );
        let two = layout(&[
            ("f/SKILL.md", md),
            ("f/assets/runner.json", b"{}"),
            ("g/x", b""),
        ]);
        assert!(two.unwrap_err().contains("found 2: f, g"));
        // Deeper than a collection looks: one folder, whose SKILL.md is missing.
        assert_eq!(
            layout(&[("h/1/2/3/4/5/SKILL.md", md)]),
            Ok(Layout::Folder("h".into()))
        );
    }

    #[test]
    fn executable_bits_survive_extraction() {
        use std::os::unix::fs::PermissionsExt as _;
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut w = zip::ZipWriter::new(file.reopen().unwrap());
        for (name, mode) in [("a/run.sh", 0o755), ("a/SKILL.md", 0o644)] {
            w.start_file(name, SimpleFileOptions::default().unix_permissions(mode))
                .unwrap();
            w.write_all(b"x").unwrap();
        }
        w.finish().unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("x");
        extract_skills(file.path(), &dest, &PackageLimits::default()).unwrap();
        let mode = |rel: &str| {
            std::fs::metadata(dest.join(rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("a/run.sh") & 0o111, 0o111);
        assert_eq!(mode("a/SKILL.md") & 0o111, 0);
    }
}
