//! The path policy of the file skills: every path input must name something inside the
//! allowed root (`OPENSKILL_ALLOWED_ROOT`), after symlinks are resolved.
//!
//! Inputs are read relative to the root (`docs`, `logs/app.log`). For the spelling of the
//! user's documents, a path that starts with `./`, or whose first component is the first
//! component of the root as seen from the working directory (`data` for `./data/files`), is
//! read from the working directory instead (`.` alone is the root) and must land inside the root (`./data/files/docs`).
//! Absolute paths, drive (`C:\`) and UNC (`\\server`) forms, NUL bytes and any `..` component
//! are refused before the file system is touched; the canonical result must lie inside the
//! canonical root component by component, so a sibling like `files2` is outside.

use std::path::{Component, Path, PathBuf};

use skill_runner_types::rel_path::{RelPath, RelPathError};

use super::result::{ErrorCode, SkillError};

/// Largest file a file skill reads.
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;

/// The root the file skills are confined to.
#[derive(Debug, Clone)]
pub struct AllowedRoot {
    /// Canonical.
    root: PathBuf,
    /// Canonical working directory, the base of `./` paths.
    cwd: PathBuf,
    /// First component of the root relative to the working directory, if it lies inside it.
    cwd_prefix: Option<String>,
}

impl AllowedRoot {
    /// `root` must be canonical (see `Config::prepare_dirs`).
    pub fn new(root: PathBuf) -> Self {
        let cwd = std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .unwrap_or_else(|_| PathBuf::from("/"));
        let cwd_prefix = root
            .strip_prefix(&cwd)
            .ok()
            .and_then(|rel| rel.components().next())
            .and_then(|c| c.as_os_str().to_str().map(str::to_owned));
        Self {
            root,
            cwd,
            cwd_prefix,
        }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The canonical path `raw` names, which exists and lies inside the root. `field` names
    /// the input in errors.
    pub fn resolve(&self, field: &str, raw: &str) -> Result<PathBuf, SkillError> {
        let forbidden = |reason| Err(SkillError::forbidden(field, raw, reason));
        if raw.is_empty() {
            return Err(SkillError::invalid(field, "must not be empty"));
        }
        // `.` (and `./`) is the folder itself.
        let path = match RelPath::parse(raw) {
            Ok(path) => Some(path),
            Err(RelPathError::Empty) => None,
            Err(RelPathError::Nul) => return forbidden("contains a NUL byte"),
            Err(RelPathError::Absolute) => {
                return forbidden("absolute and UNC paths are not allowed");
            }
            Err(RelPathError::Drive) => return forbidden("drive paths are not allowed"),
            Err(RelPathError::Parent) => return forbidden("'..' components are not allowed"),
        };
        let parts: Vec<&str> = path.iter().flat_map(RelPath::names).collect();
        let from_cwd = raw.starts_with("./")
            || (self.cwd_prefix.is_some() && parts.first().copied() == self.cwd_prefix.as_deref());
        let base = if from_cwd { &self.cwd } else { &self.root };
        let lexical = parts.iter().fold(base.clone(), |p, c| p.join(c));
        if !lexical.starts_with(&self.root) {
            return forbidden("outside the allowed root");
        }
        let real = match std::fs::canonicalize(&lexical) {
            Ok(real) => real,
            Err(e) => {
                // Whatever the error, a name under a symlink that leaves the root is outside;
                // the answer must not tell what exists (or is a file) out there.
                let outside = lexical
                    .ancestors()
                    .find_map(|a| std::fs::canonicalize(a).ok())
                    .is_some_and(|real| !real.starts_with(&self.root));
                if outside {
                    return forbidden("resolves (through a symlink) outside the allowed root");
                }
                return Err(match e.kind() {
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => {
                        SkillError::new(
                            ErrorCode::NotFound,
                            format!("{field} '{raw}' does not exist"),
                        )
                        .with_details(serde_json::json!({"field": field, "path": raw}))
                    }
                    _ => SkillError::forbidden(field, raw, "cannot be resolved"),
                });
            }
        };
        if !real.starts_with(&self.root) {
            return forbidden("resolves (through a symlink) outside the allowed root");
        }
        Ok(real)
    }

    /// `<root>/<dir>`, created if missing, when it still lies inside the root.
    pub fn output_dir(&self, dir: &str) -> Result<PathBuf, SkillError> {
        let path = self.root.join(dir);
        let real = std::fs::create_dir_all(&path)
            .and_then(|()| std::fs::canonicalize(&path))
            .map_err(|e| {
                tracing::warn!(path = %path.display(), error = %e, "cannot create an output folder");
                SkillError::internal(format!("the output folder '{dir}' cannot be created"))
            })?;
        if !real.starts_with(&self.root) {
            return Err(SkillError::forbidden(
                "output",
                dir,
                "resolves (through a symlink) outside the allowed root",
            ));
        }
        Ok(real)
    }

    /// `path` (inside the root) as the root-relative form inputs accept, `/`-separated.
    pub fn relative(&self, path: &Path) -> String {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        let parts: Vec<_> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy()),
                _ => None,
            })
            .collect();
        if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root at `<tmp>/data` seen from `<tmp>` (the spelling of the vectors), with a few files.
    fn fixture() -> (tempfile::TempDir, AllowedRoot) {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        for dir in ["data/logs", "data/docs", "datax", "secret"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        for file in ["data/logs/app.log", "data/a..b.log", "datax/f", "secret/s"] {
            std::fs::write(base.join(file), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc", base.join("data/link")).unwrap();
        std::os::unix::fs::symlink(base.join("secret/s"), base.join("data/s")).unwrap();
        let root = AllowedRoot {
            root: base.join("data"),
            cwd: base.clone(),
            cwd_prefix: Some("data".into()),
        };
        (tmp, root)
    }

    #[test]
    fn vectors_of_the_path_policy() {
        let (_tmp, root) = fixture();
        for ok in [
            "./data/logs/app.log",
            "data/docs",
            "./data",
            "./data/a..b.log",
            "logs/app.log",
            "docs",
            "logs//app.log",
            ".",
        ] {
            let path = root
                .resolve("root_dir", ok)
                .unwrap_or_else(|e| panic!("{ok}: {e:?}"));
            assert!(path.starts_with(root.path()), "{ok}");
        }
        for bad in [
            "/etc/passwd",
            "../etc/passwd",
            "./data/../secret",
            "data/../../x",
            "./data/logs/../../README.md",
            "C:\\Windows",
            "c:/x",
            "\\\\server\\share",
            "data/a\u{0}b",
            "./datax/f",
            "./secret/s",
            "data/link/x",
            "data/link",
            "s",
            "logs\\..\\..\\x",
        ] {
            let e = root.resolve("root_dir", bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::ForbiddenPath, "{bad}: {e:?}");
        }
        let e = root.resolve("root_dir", "./data/%2e%2e/x").unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        let e = root.resolve("root_dir", "").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn a_root_outside_the_working_directory() {
        let (tmp, _) = fixture();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(base.join("data/out")).unwrap();
        // `new` reads the real working directory, which does not hold this root.
        let root = AllowedRoot::new(base.join("data"));
        assert_eq!(root.cwd_prefix, None);
        for ok in [".", "docs", "logs/app.log", "data"] {
            let r = root.resolve("root_dir", ok);
            assert!(r.is_ok() || ok == "data", "{ok}: {r:?}");
        }
        assert_eq!(
            root.resolve("root_dir", "data").unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(
            root.resolve("root_dir", "./docs").unwrap_err().code,
            ErrorCode::ForbiddenPath
        );
    }

    #[test]
    fn errors_do_not_tell_what_exists_outside() {
        let (tmp, root) = fixture();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), base.join("data/olink")).unwrap();
        // `secret/s` exists (a file), `secret/g` does not: both answers are the same.
        for probe in ["olink/s/x", "olink/g/x", "olink/s", "olink/g"] {
            let e = root.resolve("root_dir", probe).unwrap_err();
            assert_eq!(e.code, ErrorCode::ForbiddenPath, "{probe}: {e:?}");
        }
        let e = root.resolve("root_dir", "logs/app.log/x").unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound, "{e:?}");
        std::os::unix::fs::symlink(base.join("data/loop"), base.join("data/loop")).unwrap();
        assert_eq!(
            root.resolve("root_dir", "loop").unwrap_err().code,
            ErrorCode::ForbiddenPath
        );
        // An output folder that is a symlink out of the root is refused.
        std::os::unix::fs::symlink(base.join("secret"), base.join("data/out")).unwrap();
        assert_eq!(
            root.output_dir("out").unwrap_err().code,
            ErrorCode::ForbiddenPath
        );
    }

    #[test]
    fn relative_forms_are_root_relative() {
        let (_tmp, root) = fixture();
        let p = root.resolve("input_path", "./data/logs/app.log").unwrap();
        assert_eq!(root.relative(&p), "logs/app.log");
        assert_eq!(root.relative(root.path()), ".");
        let out = root.output_dir("out").unwrap();
        assert_eq!(root.relative(&out), "out");
    }
}
