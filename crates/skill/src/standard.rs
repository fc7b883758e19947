//! Agent Skills standard folders (agentskills.io): a `SKILL.md` whose frontmatter says `name`
//! and `description`, with optional `scripts/`, `references/` and `assets/`, and no
//! `assets/runner.json`. Such a folder is judged by the standard's rules (every problem listed
//! at once) and runs under one contract instead of schemas of its own: the input is a
//! `prompt` and the names of the uploaded `files`, the output the agent's final message as
//! `text` (or what a caller's runtime `output_schema` asks for), the artifacts whatever it
//! writes under `artifacts/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::docs::document::{self, Profile};
use crate::manifest::{
    InvalidSkill, MissingVersion, Rules, SchemaDocs, SkillFormat, SkillManifest, is_valid_id,
};
use crate::walk;
use skill_runner_types::engine::Engine;
use skill_runner_types::run_options::ExecutionMode;

/// The engines whose CLIs load skills from folders on their own, so a standard skill reaches
/// them as the standard means (read its name and description, open it when needed). Gemini
/// stays behind the legacy gate like any run on it; iFlow has no such loader.
pub const ENGINES: [Engine; 7] = [
    Engine::Codex,
    Engine::Gemini,
    Engine::Claude,
    Engine::Opencode,
    Engine::Qwen,
    Engine::Kilo,
    Engine::Codebuddy,
];

/// The input every standard skill takes: the task, and the paths (inside the upload zip) of
/// the files that come with it.
pub static INPUT_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "The task, in the user's words.",
                "x-input-source": "inline"
            },
            "files": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "maxItems": 1000,
                "description": "Paths inside the upload zip of the files the task works on; \
                                the run waits for the upload when any is named.",
                "x-input-source": "inline"
            }
        },
        "additionalProperties": false
    })
});

/// The input of a standard skill called as a tool (`:invoke`, MCP): the task alone.
pub static TOOL_INPUT_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let mut schema = INPUT_SCHEMA.clone();
    schema["properties"]
        .as_object_mut()
        .expect("properties")
        .remove("files");
    schema
});

/// The output of a standard skill without a runtime `output_schema`.
pub static OUTPUT_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": {"type": "string", "description": "The agent's final message."}
        }
    })
});

/// True when `dir` holds a standard skill: a `SKILL.md` and no `assets/runner.json` (not even
/// a link by that name).
pub fn is_standard(dir: &Path) -> bool {
    dir.join("SKILL.md").is_file() && dir.join("assets/runner.json").symlink_metadata().is_err()
}

/// Reads the standard skill in `dir` (named `folder`) from its `SKILL.md` text. A skill
/// without `metadata.version` is versioned by its contents (`sha256-` and 16 hex digits of
/// [`walk::content_hash`]) unless `rules` allow no version.
pub(crate) fn load(
    dir: &Path,
    folder: &str,
    text: &str,
    rules: Rules,
    known: Option<&KnownVersions>,
) -> Result<SkillManifest, InvalidSkill> {
    let checked = document::check(text, Some(folder), Profile::Strict);
    let problems: Vec<String> = checked
        .errors
        .iter()
        .map(|f| format!("SKILL.md: {f}"))
        .collect();
    // The standard's names (ASCII lower-case letters, digits, inner hyphens) are all ids here.
    debug_assert!(!problems.is_empty() || is_valid_id(folder));
    if !problems.is_empty() {
        return Err(InvalidSkill(problems.join("\n")));
    }
    let doc = checked.document;
    let files = walk::files_under(dir)
        .map_err(|e| InvalidSkill(format!("cannot list the skill's files: {e}")))?;
    let version = match doc.metadata.get("version") {
        Some(declared) => Some(declared.clone()),
        None if rules.missing_version == MissingVersion::Allowed => None,
        None => Some(match known {
            Some(known) => known.version(dir, &files)?,
            None => content_version(&files)?,
        }),
    };
    Ok(SkillManifest {
        format: SkillFormat::AgentSkill,
        id: folder.to_owned(),
        path: dir.to_path_buf(),
        version,
        name: Some(doc.name),
        description: Some(doc.description),
        license: doc.license,
        compatibility: doc.compatibility,
        allowed_tools: doc.allowed_tools,
        metadata: doc.metadata,
        files: listed(&files),
        size_bytes: size(&files),
        engines: ENGINES.to_vec(),
        unsupport_engine: Vec::new(),
        effective_engines: {
            let mut engines = ENGINES.to_vec();
            engines.sort();
            engines
        },
        default_engine: Engine::Codex,
        execution_modes: vec![ExecutionMode::Auto],
        max_attempt: None,
        retry_safe: false,
        mcp_required_servers: Vec::new(),
        schemas: None,
        artifacts: Vec::new(),
        entrypoint: json!({}),
        runtime: json!({}),
        engine_configs: Default::default(),
        warnings: checked
            .warnings
            .iter()
            .map(|f| format!("SKILL.md: {f}"))
            .chain(unlisted(&files))
            .collect(),
        script: None,
        network_allow: Vec::new(),
        secrets: Vec::new(),
        limits: Default::default(),
        schema_docs: SchemaDocs::new(
            INPUT_SCHEMA.clone(),
            json!({"type": "object", "additionalProperties": false}),
            OUTPUT_SCHEMA.clone(),
        ),
    })
}

/// The files a standard skill's `input` names (`files`), as written: paths inside the upload.
pub fn named_files(input: &Value) -> Vec<&str> {
    input
        .get("files")
        .and_then(Value::as_array)
        .map(|files| files.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The version of a skill that declares none: its contents' hash.
pub fn content_version(files: &[(String, PathBuf)]) -> Result<String, InvalidSkill> {
    let hash = walk::content_hash(files)
        .map_err(|e| InvalidSkill(format!("cannot read the skill's files: {e}")))?;
    Ok(format!("sha256-{}", &hash[..16]))
}

/// Content versions computed before, by folder: the registry reads every skill folder every
/// few seconds, and hashing reads every file. A kept version holds while each file's path,
/// size, inode and times are as they were; one made while a file had changed in the last
/// [`KnownVersions::SETTLE`] is not kept, as file times are coarse (a write in the same tick
/// as the hash would leave them equal).
#[derive(Debug)]
pub struct KnownVersions {
    kept: Mutex<HashMap<PathBuf, (u64, String)>>,
    settle: Duration,
}

impl Default for KnownVersions {
    fn default() -> Self {
        Self {
            kept: Mutex::default(),
            settle: Self::SETTLE,
        }
    }
}

impl KnownVersions {
    pub const SETTLE: Duration = Duration::from_secs(2);

    fn version(&self, dir: &Path, files: &[(String, PathBuf)]) -> Result<String, InvalidSkill> {
        let Ok((stamp, settled)) = stamp(files, self.settle) else {
            return content_version(files);
        };
        if let Some((kept, version)) = self.lock().get(dir)
            && *kept == stamp
        {
            return Ok(version.clone());
        }
        let version = content_version(files)?;
        if settled {
            self.lock()
                .insert(dir.to_path_buf(), (stamp, version.clone()));
        }
        Ok(version)
    }

    /// Forgets the folders `keep` says are gone.
    pub fn retain(&self, keep: impl Fn(&Path) -> bool) {
        self.lock().retain(|dir, _| keep(dir));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (u64, String)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One number for the files' paths, sizes, inodes and times, and whether none changed within
/// `settle`.
fn stamp(files: &[(String, PathBuf)], settle: Duration) -> std::io::Result<(u64, bool)> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let nanos = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
    let settled_before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
        - settle.as_nanos() as i128;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut settled = true;
    for (rel, path) in files {
        let meta = std::fs::symlink_metadata(path)?;
        (rel, meta.len(), meta.ino(), meta.mtime(), meta.mtime_nsec()).hash(&mut hasher);
        (meta.ctime(), meta.ctime_nsec()).hash(&mut hasher);
        settled &= nanos(meta.mtime(), meta.mtime_nsec())
            .max(nanos(meta.ctime(), meta.ctime_nsec()))
            <= settled_before;
    }
    Ok((hasher.finish(), settled))
}

/// The most files a skill's listing names (the rest are counted in a warning).
pub const LISTED_FILES: usize = 500;

/// The warning of a skill whose listing is cut.
pub(crate) fn unlisted(files: &[(String, PathBuf)]) -> Option<String> {
    (files.len() > LISTED_FILES).then(|| {
        format!(
            "the skill holds {} files; 'files' lists the first {LISTED_FILES}",
            files.len()
        )
    })
}

/// The size of the files listed, bytes (one that vanished counts 0).
pub(crate) fn size(files: &[(String, PathBuf)]) -> u64 {
    files
        .iter()
        .filter_map(|(_, path)| std::fs::symlink_metadata(path).ok())
        .map(|meta| meta.len())
        .sum()
}

/// The files of a skill as listed to clients.
pub(crate) fn listed(files: &[(String, PathBuf)]) -> Vec<String> {
    files
        .iter()
        .take(LISTED_FILES)
        .map(|(rel, _)| rel.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::load as load_skill;

    fn write(root: &Path, folder: &str, skill_md: &str) -> PathBuf {
        let dir = root.join(folder);
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(dir.join("SKILL.md"), skill_md).unwrap();
        std::fs::write(dir.join("scripts/make.sh"), "echo made\n").unwrap();
        dir
    }

    #[test]
    fn a_folder_without_runner_json_is_an_agent_skill() {
        let root = tempfile::tempdir().unwrap();
        let dir = write(
            root.path(),
            "pdf-report",
            "---\nname: pdf-report\ndescription: Writes reports.\nlicense: MIT\n\
             allowed-tools: Read Bash\n---\n# Report\n",
        );
        let skill = load_skill(&dir, Rules::INSTALL).unwrap();
        assert_eq!(skill.format, SkillFormat::AgentSkill);
        assert_eq!(skill.id, "pdf-report");
        assert_eq!(skill.description.as_deref(), Some("Writes reports."));
        assert_eq!(skill.license.as_deref(), Some("MIT"));
        assert_eq!(skill.allowed_tools, ["Read", "Bash"]);
        assert_eq!(skill.files, ["SKILL.md", "scripts/make.sh"]);
        assert!(skill.schemas.is_none());
        assert_eq!(skill.schema_docs.input, *INPUT_SCHEMA);
        assert_eq!(skill.execution_modes, [ExecutionMode::Auto]);
        assert!(skill.effective_engines.contains(&Engine::Claude));
        assert!(!skill.effective_engines.contains(&Engine::Iflow));
        let listed = serde_json::to_value(&skill).unwrap();
        assert_eq!(listed["format"], "agent-skill");
        assert_eq!(listed["schemas"], Value::Null);
        // Versioned by content; a temporary run needs none.
        let version = skill.version.unwrap();
        assert!(
            version.starts_with("sha256-") && version.len() == 23,
            "{version}"
        );
        assert_eq!(load_skill(&dir, Rules::TEMPORARY).unwrap().version, None);
    }

    #[test]
    fn the_version_is_metadata_version_else_the_contents() {
        let root = tempfile::tempdir().unwrap();
        let declared = write(
            root.path(),
            "declared",
            "---\nname: declared\ndescription: d\nmetadata:\n  version: \"1.2\"\n---\n",
        );
        let skill = load_skill(&declared, Rules::REGISTERED).unwrap();
        assert_eq!(skill.version.as_deref(), Some("1.2"));
        let hashed = write(
            root.path(),
            "hashed",
            "---\nname: hashed\ndescription: d\n---\n",
        );
        let before = load_skill(&hashed, Rules::REGISTERED).unwrap().version;
        assert_eq!(
            load_skill(&hashed, Rules::REGISTERED).unwrap().version,
            before
        );
        std::fs::write(hashed.join("scripts/make.sh"), "echo made!\n").unwrap();
        assert_ne!(
            load_skill(&hashed, Rules::REGISTERED).unwrap().version,
            before
        );
    }

    #[test]
    fn a_kept_content_version_follows_every_change() {
        let root = tempfile::tempdir().unwrap();
        let dir = write(
            root.path(),
            "kept",
            "---\nname: kept\ndescription: d\n---\n",
        );
        let known = KnownVersions {
            settle: Duration::ZERO,
            ..KnownVersions::default()
        };
        let version = |known: &KnownVersions| {
            let files = walk::files_under(&dir).unwrap();
            let kept = known.version(&dir, &files).unwrap();
            assert_eq!(kept, content_version(&files).unwrap());
            kept
        };
        let first = version(&known);
        assert_eq!(known.lock().len(), 1);
        assert_eq!(version(&known), first);
        // The same size, other bytes: a new version all the same.
        std::fs::write(dir.join("scripts/make.sh"), "echo mad!\n").unwrap();
        assert_ne!(version(&known), first);
        std::fs::write(dir.join("scripts/more.sh"), "").unwrap();
        version(&known);
        known.retain(|_| false);
        assert!(known.lock().is_empty());
        // Files changed just now are not kept under the real settle time.
        let fresh = KnownVersions::default();
        version(&fresh);
        assert!(fresh.lock().is_empty());
    }

    #[test]
    fn every_problem_is_listed_at_once_and_crlf_is_accepted() {
        let root = tempfile::tempdir().unwrap();
        let dir = write(
            root.path(),
            "Bad-Name",
            &format!(
                "---\nname: Bad-Name\ndescription: {}\nversion: 1.0\n---\n",
                "d".repeat(1025)
            ),
        );
        let problems = load_skill(&dir, Rules::INSTALL).unwrap_err().0;
        let lines: Vec<&str> = problems.lines().collect();
        assert_eq!(lines.len(), 3, "{problems}");
        for field in ["name", "description", "version"] {
            assert!(problems.contains(field), "{field}: {problems}");
        }
        let crlf = write(
            root.path(),
            "crlf",
            "---\r\nname: crlf\r\ndescription: d\r\n---\r\n# T\r\n",
        );
        assert!(load_skill(&crlf, Rules::INSTALL).is_ok());
    }
}
