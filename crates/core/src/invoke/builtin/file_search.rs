//! `file_search`: a literal, case-sensitive text search over the files under the allowed root.
//!
//! Files are taken in path order (symlinks are not followed); each matching line gives one
//! match with its 1-based line number and a snippet of at most 200 characters around the hit.
//! Files over 5 MiB or not UTF-8 are skipped and counted. More matches than `limit` set
//! `meta.truncated`.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Ctx, limit};
use crate::invoke::paths::MAX_FILE_BYTES;
use crate::invoke::result::{Output, SkillError};

const SNIPPET_CHARS: usize = 200;
/// Characters of context kept before the hit when a line is longer than a snippet.
const SNIPPET_LEAD: usize = 60;
/// Files looked at in one call, at most; past it the answer is truncated.
const MAX_FILES: usize = 100_000;

pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Literal text to find (case-sensitive)."},
            "root_dir": {"type": "string", "description": "Folder to search, relative to the allowed root (default: the root).", "default": "."},
            "glob": {"type": "string", "description": "Which files, relative to root_dir (default **/*).", "default": "**/*"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Most matches returned (default 20).", "default": 20}
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

pub fn run(input: &Value, ctx: &Ctx<'_>) -> Result<Output, SkillError> {
    let query = input["query"].as_str().unwrap_or_default();
    if query.trim().is_empty() {
        return Err(SkillError::invalid("query", "must not be blank"));
    }
    let limit = limit(input, "limit", 20, 200)?;
    let dir = match input.get("root_dir").and_then(Value::as_str) {
        Some(raw) => ctx.root.resolve("root_dir", raw)?,
        None => ctx.root.path().to_path_buf(),
    };
    if !dir.is_dir() {
        return Err(SkillError::invalid("root_dir", "is not a folder"));
    }
    let pattern = input.get("glob").and_then(Value::as_str).unwrap_or("**/*");
    let glob = glob::Pattern::new(pattern)
        .map_err(|e| SkillError::invalid("glob", format!("is not a glob pattern: {e}")))?;

    let mut files = Vec::new();
    let mut truncated = walk(&dir, &glob, &mut files, ctx)?;
    files.sort();
    let (mut matches, mut too_large, mut not_utf8, mut scanned) = (Vec::new(), 0, 0, 0);
    'files: for path in &files {
        ctx.check_time()?;
        // A program may leave a FIFO or a device in the root: never waited on.
        let Ok(file) = crate::run_folder::open_plain(path) else {
            continue;
        };
        let Ok(meta) = file.metadata() else {
            continue;
        };
        if meta.len() > MAX_FILE_BYTES {
            too_large += 1;
            continue;
        }
        let mut bytes = Vec::new();
        if file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).is_err() {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            not_utf8 += 1;
            continue;
        };
        scanned += 1;
        for (i, line) in text.lines().enumerate() {
            let Some(at) = line.find(query) else {
                continue;
            };
            if matches.len() == limit {
                truncated = true;
                break 'files;
            }
            matches.push(json!({
                "path": ctx.root.relative(path),
                "line_no": i + 1,
                "snippet": snippet(line, at),
            }));
        }
    }
    Ok(Output {
        data: json!({
            "matches": matches,
            "files_scanned": scanned,
            "skipped": {"too_large": too_large, "not_utf8": not_utf8},
        }),
        truncated: Some(truncated),
    })
}

/// Collects the regular files under `dir` whose path relative to it matches `glob`, without
/// following links; true when it stopped at [`MAX_FILES`].
fn walk(
    dir: &Path,
    glob: &glob::Pattern,
    out: &mut Vec<PathBuf>,
    ctx: &Ctx<'_>,
) -> Result<bool, SkillError> {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    // Unreadable entries are passed over, as a search of what it may read.
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        let kind = entry.file_type();
        if kind.is_dir() {
            ctx.check_time()?;
        } else if kind.is_file() {
            let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
            if glob.matches_path_with(rel, options) {
                if out.len() == MAX_FILES {
                    return Ok(true);
                }
                out.push(entry.into_path());
            }
        }
    }
    Ok(false)
}

/// At most [`SNIPPET_CHARS`] characters of `line`, including the hit at byte `at`.
fn snippet(line: &str, at: usize) -> String {
    let line = line.trim_end_matches('\r');
    if line.chars().count() <= SNIPPET_CHARS {
        return line.to_owned();
    }
    let hit = line[..at].chars().count();
    line.chars()
        .skip(hit.saturating_sub(SNIPPET_LEAD))
        .take(SNIPPET_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::paths::AllowedRoot;

    fn search(root: &AllowedRoot, input: Value) -> Result<Output, SkillError> {
        run(&input, &Ctx::for_test(root))
    }

    #[test]
    fn finds_in_path_order_with_limits() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(base.join("docs/sub")).unwrap();
        std::fs::write(base.join("docs/b.md"), "x\nTODO two\nTODO three\n").unwrap();
        std::fs::write(base.join("docs/a.md"), "TODO one\n").unwrap();
        std::fs::write(base.join("docs/sub/c.txt"), "todo lower\nTODO four\n").unwrap();
        std::fs::write(base.join("bin.dat"), b"TODO \xff\xfe").unwrap();
        std::fs::write(base.join("big.md"), "TODO ".repeat(1_100_000)).unwrap();
        let long = format!("{}TODO{}", "a".repeat(300), "b".repeat(300));
        std::fs::write(base.join("docs/long.md"), &long).unwrap();
        let root = AllowedRoot::new(base.clone());

        let out = search(&root, json!({"query": "TODO"})).unwrap();
        let paths: Vec<(String, u64)> = out.data["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["path"].as_str().unwrap().to_owned(),
                    m["line_no"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            paths,
            [
                ("docs/a.md", 1),
                ("docs/b.md", 2),
                ("docs/b.md", 3),
                ("docs/long.md", 1),
                ("docs/sub/c.txt", 2)
            ]
            .map(|(p, n)| (p.to_owned(), n))
        );
        assert_eq!(out.truncated, Some(false));
        assert_eq!(out.data["skipped"], json!({"too_large": 1, "not_utf8": 1}));
        let snippet = out.data["matches"][3]["snippet"].as_str().unwrap();
        assert_eq!(snippet.chars().count(), 200);
        assert!(snippet.contains("TODO"));

        let out = search(
            &root,
            json!({"query": "TODO", "glob": "*.md", "root_dir": "docs", "limit": 2}),
        )
        .unwrap();
        assert_eq!(out.data["matches"].as_array().unwrap().len(), 2);
        assert_eq!(out.truncated, Some(true));
        let out = search(
            &root,
            json!({"query": "TODO", "glob": "sub/*.txt", "root_dir": "docs"}),
        )
        .unwrap();
        assert_eq!(out.data["matches"][0]["path"], "docs/sub/c.txt");

        for bad in [
            json!({"query": "  "}),
            json!({"query": "x", "glob": "[a"}),
            json!({"query": "x", "root_dir": "docs/a.md"}),
        ] {
            assert_eq!(
                search(&root, bad.clone()).unwrap_err().code,
                crate::invoke::result::ErrorCode::InvalidArgument,
                "{bad}"
            );
        }
    }
}
