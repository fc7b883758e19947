//! Read-only browsing of a folder (a skill, a run) for the management API: its file tree and
//! previews of single files. Paths from clients are relative to the folder; absolute paths,
//! `..` and anything that resolves outside the folder (through a symlink) are refused.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use skill_runner_types::RelPath;

use crate::error::{Error, Result};

/// Files larger than this are not previewed.
pub const PREVIEW_MAX_BYTES: u64 = 256 * 1024;
/// Bytes examined to tell text from binary.
const SNIFF_BYTES: usize = 4096;
/// Entries listed at most, so a folder with a huge tree cannot flood a response.
const TREE_MAX_ENTRIES: usize = 20_000;

/// One entry of a folder tree, listed depth-first: a folder comes right before its contents,
/// folders before files, names ordered case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TreeEntry {
    /// Path from the folder's root, `/`-separated.
    pub rel_path: String,
    pub name: String,
    /// Symlinks to folders are listed as files and not followed.
    pub is_dir: bool,
    /// 0 for entries directly in the root.
    pub depth: usize,
}

/// What a file looks like, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// `text`, `binary` or `too_large`.
    pub mode: &'static str,
    /// The text (invalid UTF-8 replaced); `null` unless `mode` is `text`.
    pub content: Option<String>,
    pub size: u64,
    /// A short description, e.g. `"120 bytes, utf-8"`.
    pub meta: String,
}

/// The tree under `root` (see [`TreeEntry`]), without the entries at the paths in `hidden`
/// (folders whose contents clients must not see) and what lies under them.
pub fn tree(root: &Path, hidden: &[&str]) -> std::io::Result<Vec<TreeEntry>> {
    let mut entries = Vec::new();
    walk(root, "", 0, &mut entries)?;
    entries.retain(|e| !is_hidden(&e.rel_path, hidden));
    Ok(entries)
}

/// Whether `rel` is, or lies under, a path in `hidden`.
pub fn is_hidden(rel: &str, hidden: &[&str]) -> bool {
    hidden.iter().any(|h| {
        rel == *h
            || rel
                .strip_prefix(h)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

fn walk(dir: &Path, prefix: &str, depth: usize, out: &mut Vec<TreeEntry>) -> std::io::Result<()> {
    let mut children: Vec<(bool, String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // file_type() does not follow symlinks: a link to a folder counts as a file. An entry
        // deleted meanwhile (a live run's folder changes) is left out.
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        children.push((file_type.is_dir(), name, entry.path()));
    }
    children.sort_by(|(a_dir, a, _), (b_dir, b, _)| {
        b_dir
            .cmp(a_dir)
            .then_with(|| a.to_lowercase().cmp(&b.to_lowercase()))
            .then_with(|| a.cmp(b))
    });
    for (is_dir, name, path) in children {
        if out.len() >= TREE_MAX_ENTRIES {
            return Ok(());
        }
        let rel_path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        out.push(TreeEntry {
            rel_path: rel_path.clone(),
            name,
            is_dir,
            depth,
        });
        if is_dir {
            match walk(&path, &rel_path, depth + 1, out) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
    }
    Ok(())
}

/// A client's relative path, normalised (`./a//b` -> `a/b`); 400 for blank, absolute or `..`
/// paths.
pub fn relative_path(path: &str) -> Result<RelPath> {
    if path.trim().is_empty() {
        return Err(Error::invalid("path is required"));
    }
    RelPath::parse(path).map_err(|why| Error::invalid(format!("invalid path '{path}': {why}")))
}

/// The preview of `rel` (already normalised by [`relative_path`]) under `root`; a file under a
/// `hidden` top-level entry (also when reached through a symlink) is not found.
pub fn preview(root: &Path, rel: &RelPath, hidden: &[&str]) -> Result<Preview> {
    let (root, inside) = resolve(root, rel, hidden)?;
    // Opened again without following links: the folder may change under a running turn.
    let file = crate::run_folder::open_beneath(&root, &inside).map_err(|_| not_found())?;
    let size = file.metadata()?.len();
    if size > PREVIEW_MAX_BYTES {
        return Ok(Preview {
            mode: "too_large",
            content: None,
            size,
            meta: format!("{size} bytes, larger than the {PREVIEW_MAX_BYTES}-byte preview limit"),
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(PREVIEW_MAX_BYTES).read_to_end(&mut bytes)?;
    if looks_binary(&bytes[..bytes.len().min(SNIFF_BYTES)]) {
        return Ok(Preview {
            mode: "binary",
            content: None,
            size,
            meta: format!("{size} bytes, binary"),
        });
    }
    let (content, encoding) = match String::from_utf8(bytes) {
        Ok(text) => (text, "utf-8"),
        Err(e) => (
            String::from_utf8_lossy(e.as_bytes()).into_owned(),
            "utf-8-replace",
        ),
    };
    Ok(Preview {
        mode: "text",
        content: Some(content),
        size,
        meta: format!("{size} bytes, {encoding}"),
    })
}

/// The file `rel` under `root`, symlinks resolved, as the canonical root and the path inside it;
/// 400 when it resolves outside `root`, 404 when it is missing or a folder.
fn resolve(root: &Path, rel: &RelPath, hidden: &[&str]) -> Result<(PathBuf, PathBuf)> {
    let root = root.canonicalize().map_err(|_| not_found())?;
    let target = root.join(rel).canonicalize().map_err(|_| not_found())?;
    let Ok(inside) = target.strip_prefix(&root) else {
        return Err(Error::invalid(format!(
            "invalid path '{rel}': it resolves outside the folder"
        )));
    };
    if is_hidden(rel.as_str(), hidden) || is_hidden(&inside.to_string_lossy(), hidden) {
        return Err(not_found());
    }
    let inside = inside.to_path_buf();
    Ok((root, inside))
}

fn not_found() -> Error {
    Error::not_found("file not found")
}

/// A NUL byte, or more than 30 % control characters other than tab, newline and CR.
fn looks_binary(sample: &[u8]) -> bool {
    if sample.contains(&0) {
        return true;
    }
    let control = sample
        .iter()
        .filter(|&&b| b < 32 && !matches!(b, b'\t' | b'\n' | b'\r') || b == 127)
        .count();
    control * 10 > sample.len() * 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_order_and_depth() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/inner")).unwrap();
        std::fs::create_dir_all(root.join("A")).unwrap();
        std::fs::write(root.join("z.txt"), "z").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("b/inner/x"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("b"), root.join("link")).unwrap();
        let listed: Vec<(String, bool, usize)> = tree(root, &[])
            .unwrap()
            .into_iter()
            .map(|e| (e.rel_path, e.is_dir, e.depth))
            .collect();
        let expected = [
            ("A", true, 0),
            ("b", true, 0),
            ("b/inner", true, 1),
            ("b/inner/x", false, 2),
            ("a.txt", false, 0),
            ("link", false, 0),
            ("z.txt", false, 0),
        ];
        let expected: Vec<(String, bool, usize)> = expected
            .iter()
            .map(|(p, d, n)| (p.to_string(), *d, *n))
            .collect();
        assert_eq!(listed, expected);
    }

    #[test]
    fn previews_and_path_rules() {
        let rel = |path: &str| relative_path(path).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("run");
        std::fs::create_dir_all(root.join("logs")).unwrap();
        std::fs::write(root.join("logs/out.txt"), "héllo\n").unwrap();
        std::fs::write(root.join("bin"), [0u8, 1, 2, 3]).unwrap();
        std::fs::write(root.join("big"), vec![b'a'; PREVIEW_MAX_BYTES as usize + 1]).unwrap();
        std::fs::write(root.join("latin1"), b"caf\xe9").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("escape")).unwrap();

        let text = preview(&root, &rel("./logs//out.txt"), &[]).unwrap();
        assert_eq!(text.mode, "text");
        assert_eq!(text.content.as_deref(), Some("héllo\n"));
        assert_eq!((text.size, text.meta.as_str()), (7, "7 bytes, utf-8"));
        assert_eq!(preview(&root, &rel("bin"), &[]).unwrap().mode, "binary");
        let big = preview(&root, &rel("big"), &[]).unwrap();
        assert_eq!((big.mode, big.content), ("too_large", None));
        let latin = preview(&root, &rel("latin1"), &[]).unwrap();
        assert_eq!(latin.content.as_deref(), Some("caf\u{fffd}"));
        assert!(latin.meta.ends_with("utf-8-replace"));

        let kind = |r: Result<Preview>| match r.unwrap_err() {
            Error::Invalid(_) => "invalid",
            Error::NotFound(_) => "not found",
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(kind(preview(&root, &rel("escape"), &[])), "invalid");
        assert_eq!(kind(preview(&root, &rel("missing"), &[])), "not found");
        assert_eq!(kind(preview(&root, &rel("logs"), &[])), "not found");
        // A hidden folder is not found, directly or through a symlink, and not listed.
        std::fs::create_dir_all(root.join(".home")).unwrap();
        std::fs::write(root.join(".home/token"), "t").unwrap();
        std::os::unix::fs::symlink(root.join(".home/token"), root.join("logs/t")).unwrap();
        let hidden = [".home"];
        assert_eq!(
            kind(preview(&root, &rel(".home/token"), &hidden)),
            "not found"
        );
        assert_eq!(kind(preview(&root, &rel("logs/t"), &hidden)), "not found");
        assert_eq!(
            preview(&root, &rel("logs/t"), &[])
                .unwrap()
                .content
                .as_deref(),
            Some("t")
        );
        assert!(
            tree(&root, &hidden)
                .unwrap()
                .iter()
                .all(|e| !e.rel_path.starts_with(".home"))
        );
        for bad in [
            "",
            "  ",
            "/etc/passwd",
            "../secret",
            "logs/../../secret",
            "a\\..\\..\\b",
            "./",
        ] {
            assert!(
                matches!(relative_path(bad), Err(Error::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
