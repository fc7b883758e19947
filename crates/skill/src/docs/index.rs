//! The skill index: every folder holding a `SKILL.md` under the configured roots, read under the
//! `lenient` profile. Roots are given strongest first; a name found again under a weaker root
//! (or later in the same root) is reported as shadowed. A file that cannot be read or fails the
//! profile is reported and never hides the others. The scan is bounded: at most
//! [`Limits::max_depth`] folders deep and [`Limits::max_folders`] folders per root (then it
//! stops and says so); `.git`, `node_modules` and hidden folders are skipped, a skill's own
//! folder is not searched further, and a folder reached twice (a symlink loop) is read once.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quick_xml::escape::escape;
use serde::Serialize;

use super::document::{Checked, Profile, check};

/// How far a scan goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Folders below a root searched (a root's own entries are depth 1).
    pub max_depth: usize,
    /// Folders read per root.
    pub max_folders: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_depth: 6,
            max_folders: 2_000,
        }
    }
}

/// The largest `SKILL.md` read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// One indexed skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub name: String,
    pub description: String,
    /// The `SKILL.md` file.
    pub location: PathBuf,
    /// Its folder.
    pub base_dir: PathBuf,
    /// The root it was found under.
    pub root: PathBuf,
    #[serde(skip)]
    pub checked: Checked,
}

/// A file that was not indexed, a shadowed duplicate, or a scan cut short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub location: String,
    pub message: String,
}

/// The skills of one scan.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct Index {
    pub skills: BTreeMap<String, Arc<Entry>>,
    pub problems: Vec<Problem>,
    /// A root had more folders than the scan reads.
    pub truncated: bool,
}

impl Index {
    /// Scans `roots`, strongest first; a missing root is skipped.
    pub fn scan(roots: &[PathBuf], limits: Limits) -> Self {
        let mut index = Index::default();
        for root in roots {
            index.scan_root(root, limits);
        }
        index
    }

    fn scan_root(&mut self, root: &Path, limits: Limits) {
        let Ok(real) = std::fs::canonicalize(root) else {
            return;
        };
        let mut visited = HashSet::from([real]);
        let mut stack = vec![(root.to_path_buf(), 0usize)];
        let mut folders = 0;
        while let Some((dir, depth)) = stack.pop() {
            folders += 1;
            if folders > limits.max_folders {
                self.truncated = true;
                self.problems.push(Problem {
                    location: root.display().to_string(),
                    message: format!(
                        "the scan stopped after {} folders; skills further in were not indexed",
                        limits.max_folders
                    ),
                });
                return;
            }
            let skill_md = dir.join("SKILL.md");
            if skill_md.is_file() {
                self.add(root, &dir, &skill_md);
                continue;
            }
            if depth >= limits.max_depth {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut children: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    !name.starts_with('.') && name != "node_modules"
                })
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            // Depth-first in name order: pushed in reverse so the first name is read first.
            children.sort();
            for child in children.into_iter().rev() {
                // A folder reached before (through a link) is read once.
                if std::fs::canonicalize(&child).is_ok_and(|real| visited.insert(real)) {
                    stack.push((child, depth + 1));
                }
            }
        }
    }

    fn add(&mut self, root: &Path, dir: &Path, skill_md: &Path) {
        let location = skill_md.display().to_string();
        let text = match read_capped(skill_md) {
            Ok(text) => text,
            Err(message) => {
                self.problems.push(Problem { location, message });
                return;
            }
        };
        let dir_name = dir.file_name().and_then(|n| n.to_str());
        let checked = check(&text, dir_name, Profile::Lenient);
        if !checked.valid() {
            let findings: Vec<String> = checked.errors.iter().map(ToString::to_string).collect();
            self.problems.push(Problem {
                location,
                message: format!("not indexed: {}", findings.join("; ")),
            });
            return;
        }
        let name = checked.document.name.clone();
        if let Some(winner) = self.skills.get(&name) {
            self.problems.push(Problem {
                location,
                message: format!(
                    "skill '{name}' is shadowed by {}",
                    winner.location.display()
                ),
            });
            return;
        }
        let entry = Entry {
            name: name.clone(),
            description: checked.document.description.clone(),
            location: skill_md.to_path_buf(),
            base_dir: dir.to_path_buf(),
            root: root.to_path_buf(),
            checked,
        };
        self.skills.insert(name, Arc::new(entry));
    }

    /// The `<available_skills>` block models are given (names, descriptions and locations,
    /// XML-escaped); empty when there are no skills.
    pub fn catalog(&self) -> String {
        if self.skills.is_empty() {
            return String::new();
        }
        let mut xml = String::from("<available_skills>\n");
        for entry in self.skills.values() {
            xml.push_str(&format!(
                "  <skill>\n    <name>{}</name>\n    <description>{}</description>\n    \
                 <location>{}</location>\n  </skill>\n",
                escape(&entry.name),
                escape(&entry.description),
                escape(entry.location.display().to_string()),
            ));
        }
        xml.push_str("</available_skills>\n");
        xml
    }
}

fn read_capped(path: &Path) -> Result<String, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read: {e}"))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())
}

/// The most resource paths listed for one skill.
pub const MAX_RESOURCES: usize = 200;

/// The files of a skill's folder besides its `SKILL.md`, relative and sorted (links and
/// hidden entries left out; at most [`MAX_RESOURCES`], four folders deep).
pub fn resources(base_dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![(base_dir.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && depth < 4 {
                stack.push((path, depth + 1));
            } else if kind.is_file()
                && let Ok(rel) = path.strip_prefix(base_dir)
                && rel != Path::new("SKILL.md")
            {
                found.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found.truncate(MAX_RESOURCES);
    found
}

/// The index, scanned again when older than [`Docs::MAX_AGE`].
#[derive(Debug)]
pub struct Docs {
    roots: Vec<PathBuf>,
    limits: Limits,
    current: Mutex<Option<(Instant, Arc<Index>)>>,
}

impl Docs {
    pub const MAX_AGE: Duration = Duration::from_secs(2);

    pub fn new(roots: Vec<PathBuf>, limits: Limits) -> Self {
        Self {
            roots,
            limits,
            current: Mutex::new(None),
        }
    }

    /// The roots, strongest first.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The index as of at most [`Self::MAX_AGE`] ago.
    pub async fn index(self: &Arc<Self>) -> Arc<Index> {
        if let Some((at, index)) = &*self.current.lock().expect("skill docs lock")
            && at.elapsed() < Self::MAX_AGE
        {
            return index.clone();
        }
        let docs = self.clone();
        let index =
            tokio::task::spawn_blocking(move || Arc::new(Index::scan(&docs.roots, docs.limits)))
                .await
                .unwrap_or_default();
        *self.current.lock().expect("skill docs lock") = Some((Instant::now(), index.clone()));
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(root: &Path, rel: &str, name: &str, description: &str) {
        let dir = root.join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n\nBody.\n"),
        )
        .unwrap();
    }

    #[test]
    fn stronger_roots_win_and_broken_files_hide_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, user, installed) = (
            tmp.path().join("project"),
            tmp.path().join("user"),
            tmp.path().join("installed"),
        );
        skill(&project, "pdf", "pdf", "project pdf");
        skill(&user, "pdf", "pdf", "user pdf");
        skill(&user, "group/notes", "notes", "user notes");
        skill(&installed, "notes", "notes", "installed notes");
        skill(&installed, "sheets", "sheets", "installed <sheets> & more");
        // Broken: no description, not UTF-8, a folder of its own under .git.
        skill(&installed, "broken", "broken", "");
        std::fs::create_dir_all(installed.join("binary")).unwrap();
        std::fs::write(installed.join("binary/SKILL.md"), [0xff, 0xfe]).unwrap();
        skill(&installed, ".git/hidden", "hidden", "never");
        skill(&installed, "node_modules/dep", "dep", "never");
        let index = Index::scan(
            &[project.clone(), user, installed, tmp.path().join("missing")],
            Limits::default(),
        );
        let names: Vec<&str> = index.skills.keys().map(String::as_str).collect();
        assert_eq!(names, ["notes", "pdf", "sheets"]);
        assert_eq!(index.skills["pdf"].description, "project pdf");
        assert_eq!(index.skills["notes"].description, "user notes");
        assert_eq!(index.skills["pdf"].base_dir, project.join("pdf"));
        let messages: Vec<&str> = index.problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            messages.iter().filter(|m| m.contains("shadowed")).count(),
            2
        );
        assert!(
            messages
                .iter()
                .any(|m| m.contains("description: is required"))
        );
        assert!(messages.iter().any(|m| m.contains("not UTF-8")));
        assert!(!index.truncated);
        let catalog = index.catalog();
        assert!(catalog.starts_with("<available_skills>\n  <skill>\n    <name>notes</name>"));
        assert!(catalog.contains("<description>installed &lt;sheets&gt; &amp; more</description>"));
        assert_eq!(Index::default().catalog(), "");
    }

    #[test]
    fn links_loops_and_big_trees_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        skill(&root, "a/b/c/d/e/f/deep", "deep", "too deep");
        skill(&root, "a/ok", "ok", "found");
        std::os::unix::fs::symlink(&root, root.join("a/loop")).unwrap();
        let index = Index::scan(std::slice::from_ref(&root), Limits::default());
        assert_eq!(index.skills.keys().collect::<Vec<_>>(), ["ok"]);

        let wide = tmp.path().join("wide");
        for n in 0..5_000 {
            std::fs::create_dir_all(wide.join(format!("d{n:04}"))).unwrap();
        }
        skill(&wide, "d0001", "early", "read");
        let started = Instant::now();
        let index = Index::scan(&[wide], Limits::default());
        assert!(index.truncated);
        assert!(index.skills.contains_key("early"));
        assert!(
            index.problems[0]
                .message
                .contains("stopped after 2000 folders")
        );
        eprintln!("5,000 folders: {:?}", started.elapsed());
    }

    #[test]
    fn resources_list_the_skill_files() {
        let tmp = tempfile::tempdir().unwrap();
        skill(tmp.path(), "s", "s", "d");
        let dir = tmp.path().join("s");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(dir.join("scripts/run.py"), "print(1)").unwrap();
        std::fs::write(dir.join("reference.md"), "ref").unwrap();
        std::fs::write(dir.join(".hidden"), "no").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        assert_eq!(resources(&dir), ["reference.md", "scripts/run.py"]);
    }
}
