//! Which skills can be invoked, and how: the built-ins, manifests, the CLI dir and installed
//! packages that ship an `entrypoint.script`.
//!
//! When two sources define the same id, the more explicit one wins: a manifest over a
//! `{id}.py` in the CLI dir, over an installed package, over a built-in (so a manifest can
//! replace `calculator` with the user's own script). Shadowed definitions and files that do not
//! load are listed as problems by `GET /skills`; neither stops the others from loading.
//!
//! A manifest (`*.yaml`, `*.yml` or `*.json` in `OPENSKILL_MANIFEST_DIR`) has `id`, `type`,
//! `runtime`, `entry`, `timeout_ms`, `allowed_root`, `version`, `description`, `input_schema`
//! and `output_schema`; `type:runtime` picks the runner (`cli:python`, `cli:exec`, `http`,
//! `inproc`). Relative `entry` and `allowed_root` paths are read from the working directory,
//! as in the user's documents (`./skills_cli/calculator.py`). An `allowed_root` must lie inside
//! `OPENSKILL_ALLOWED_ROOT`; one that does not is replaced by it, with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::builtin::Builtin;
use crate::config::InvokeConfig;
use crate::skill::manifest::{ID_RULE, is_valid_id};
use crate::skill::registry::Snapshot;
use crate::skill::schema::Schema;
use crate::skill::{ExecutionMode, Registry, SkillFormat, SkillManifest, standard};

/// How a skill runs.
#[derive(Debug, Clone)]
pub enum Runner {
    Builtin(Builtin),
    /// A program fed `{"input": ...}` on stdin that prints its answer as JSON; `python` runs
    /// `entry` with `python3`, otherwise `entry` is executed itself.
    Cli {
        python: bool,
        entry: PathBuf,
    },
    /// An installed skill package: one auto turn of one of its engines, through the same
    /// runner core as a job (`engine` in the body, default as for jobs).
    Package(Arc<SkillManifest>),
    /// POST `{"input": ...}` to `url`.
    Http {
        url: String,
    },
    /// A `type:runtime` this server has no runner for; calls fail with `INTERNAL`.
    Unsupported(String),
}

impl Runner {
    /// `meta.runner_type`.
    pub fn runner_type(&self) -> String {
        match self {
            Runner::Builtin(_) => "inproc".into(),
            Runner::Cli { python: true, .. } => "cli:python".into(),
            Runner::Cli { python: false, .. } => "cli:exec".into(),
            Runner::Package(m) => format!("engine:{}", m.default_engine()),
            Runner::Http { .. } => "http".into(),
            Runner::Unsupported(key) => key.clone(),
        }
    }
}

/// Where a skill was defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Builtin,
    Manifest(PathBuf),
    CliDir(PathBuf),
    Package(PathBuf),
}

impl Source {
    fn to_json(&self) -> Value {
        match self {
            Source::Builtin => json!({"kind": "builtin"}),
            Source::Manifest(p) => json!({"kind": "manifest", "path": p}),
            Source::CliDir(p) => json!({"kind": "cli_dir", "path": p}),
            Source::Package(p) => json!({"kind": "package", "path": p}),
        }
    }
}

/// One invocable skill.
#[derive(Debug, Clone)]
pub struct InvocableSkill {
    pub id: String,
    pub runner: Runner,
    pub version: Option<String>,
    pub description: Option<String>,
    pub input_schema: Option<Schema>,
    pub output_schema: Option<Schema>,
    pub timeout: Duration,
    /// Canonical; inside `OPENSKILL_ALLOWED_ROOT`.
    pub allowed_root: PathBuf,
    pub source: Source,
}

impl InvocableSkill {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "runner_type": self.runner.runner_type(),
            "version": self.version,
            "description": self.description,
            "input_schema": self.input_schema.as_ref().map(|s| &s.doc),
            "output_schema": self.output_schema.as_ref().map(|s| &s.doc),
            "timeout_ms": self.timeout.as_millis() as u64,
            "source": self.source.to_json(),
        })
    }
}

/// A definition that did not load, or was shadowed.
#[derive(Debug, Clone)]
pub struct Problem {
    pub source: String,
    pub message: String,
}

/// The invocable skills as of one scan.
#[derive(Debug)]
pub struct Catalog {
    pub skills: BTreeMap<String, Arc<InvocableSkill>>,
    pub problems: Vec<Problem>,
    /// `GET /skills` body.
    pub list_json: Bytes,
}

impl Catalog {
    fn build(defined: Vec<InvocableSkill>, mut problems: Vec<Problem>) -> Self {
        let mut skills: BTreeMap<String, Arc<InvocableSkill>> = BTreeMap::new();
        // `defined` comes in precedence order, strongest first.
        for skill in defined {
            match skills.get(&skill.id) {
                Some(winner) => problems.push(Problem {
                    source: describe(&skill.source),
                    message: format!(
                        "skill '{}' is shadowed by {}",
                        skill.id,
                        describe(&winner.source)
                    ),
                }),
                None => {
                    skills.insert(skill.id.clone(), Arc::new(skill));
                }
            }
        }
        let body = json!({
            "skills": skills.values().map(|s| s.to_json()).collect::<Vec<_>>(),
            "problems": problems
                .iter()
                .map(|p| json!({"source": p.source, "message": p.message}))
                .collect::<Vec<_>>(),
        });
        Self {
            skills,
            problems,
            list_json: Bytes::from(serde_json::to_vec(&body).expect("catalog serialises")),
        }
    }
}

fn describe(source: &Source) -> String {
    match source {
        Source::Builtin => "the built-in skill".into(),
        Source::Manifest(p) => format!("manifest {}", p.display()),
        Source::CliDir(p) => format!("CLI script {}", p.display()),
        Source::Package(p) => format!("installed package {}", p.display()),
    }
}

/// What the catalog was built from; a change triggers a rebuild.
#[derive(Debug, PartialEq)]
struct Fingerprint {
    files: Vec<(PathBuf, Option<SystemTime>, u64)>,
    packages: usize,
}

/// Keeps the catalog current: rebuilt when its sources changed, checked at most every
/// [`Catalogs::MAX_AGE`].
#[derive(Debug)]
pub struct Catalogs {
    config: InvokeConfig,
    registry: Arc<Registry>,
    /// The catalog, when its sources were last checked, and the installed skills it holds.
    current: RwLock<(Arc<Catalog>, Instant, Arc<Snapshot>)>,
    fingerprint: tokio::sync::Mutex<Option<Fingerprint>>,
}

impl Catalogs {
    pub const MAX_AGE: Duration = Duration::from_secs(2);

    /// `config.allowed_root` must be canonical.
    pub async fn open(config: InvokeConfig, registry: Arc<Registry>) -> Self {
        let installed = registry.snapshot().await;
        let catalogs = Self {
            config,
            registry,
            current: RwLock::new((
                Arc::new(Catalog::build(Vec::new(), Vec::new())),
                Instant::now(),
                installed,
            )),
            fingerprint: tokio::sync::Mutex::new(None),
        };
        catalogs.refresh().await;
        catalogs
    }

    /// A catalog no older than [`Self::MAX_AGE`] for its files, and holding the installed
    /// skills as they are now: an install or update is invocable at once.
    pub async fn current(&self) -> Arc<Catalog> {
        let installed = self.registry.snapshot().await;
        {
            let (catalog, checked, from) = &*self.current.read().expect("catalog lock");
            if checked.elapsed() < Self::MAX_AGE && Arc::ptr_eq(from, &installed) {
                return catalog.clone();
            }
        }
        self.refresh().await
    }

    async fn refresh(&self) -> Arc<Catalog> {
        let mut last = self.fingerprint.lock().await;
        let snapshot = self.registry.snapshot().await;
        {
            let (catalog, checked, from) = &*self.current.read().expect("catalog lock");
            if last.is_some() && checked.elapsed() < Self::MAX_AGE && Arc::ptr_eq(from, &snapshot) {
                return catalog.clone();
            }
        }
        let packages: Vec<Arc<SkillManifest>> = snapshot
            .skills
            .values()
            .filter_map(|e| e.manifest())
            .cloned()
            .collect();
        let config = self.config.clone();
        let scanned = tokio::task::spawn_blocking(move || {
            let files = source_files(&config);
            let fingerprint = Fingerprint {
                files: files.iter().map(|f| stat(f)).collect(),
                packages: packages_key(&packages),
            };
            (files, fingerprint, packages, config)
        })
        .await;
        let Ok((files, fingerprint, packages, config)) = scanned else {
            return self.current.read().expect("catalog lock").0.clone();
        };
        let fresh = if last.as_ref() == Some(&fingerprint) {
            self.current.read().expect("catalog lock").0.clone()
        } else {
            let built = tokio::task::spawn_blocking(move || load(&config, &files, &packages))
                .await
                .expect("catalog load does not panic");
            *last = Some(fingerprint);
            Arc::new(built)
        };
        *self.current.write().expect("catalog lock") = (fresh.clone(), Instant::now(), snapshot);
        fresh
    }
}

/// A number that changes whenever the set or versions of installed packages change.
fn packages_key(packages: &[Arc<SkillManifest>]) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for m in packages {
        m.id.hash(&mut h);
        m.path.hash(&mut h);
        m.version.hash(&mut h);
        m.script.hash(&mut h);
    }
    h.finish() as usize
}

fn stat(path: &Path) -> (PathBuf, Option<SystemTime>, u64) {
    let meta = std::fs::metadata(path).ok();
    (
        path.to_path_buf(),
        meta.as_ref().and_then(|m| m.modified().ok()),
        meta.map_or(0, |m| m.len()),
    )
}

/// The manifests, then the CLI scripts, each sorted by name.
fn source_files(config: &InvokeConfig) -> Vec<PathBuf> {
    let list = |dir: &Path, exts: &[&str]| {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| exts.contains(&e))
            })
            .collect();
        files.sort();
        files
    };
    let mut files = list(&config.manifest_dir, &["yaml", "yml", "json"]);
    files.extend(list(&config.cli_dir, &["py"]));
    files
}

/// Builds the catalog from `files` (see [`source_files`]) and the installed packages.
fn load(config: &InvokeConfig, files: &[PathBuf], packages: &[Arc<SkillManifest>]) -> Catalog {
    let mut defined = Vec::new();
    let mut problems = Vec::new();
    let problem = |path: &Path, message: String| Problem {
        source: path.display().to_string(),
        message,
    };
    let base = |id: String, runner, source| InvocableSkill {
        id,
        runner,
        version: None,
        description: None,
        input_schema: None,
        output_schema: None,
        timeout: config.timeout,
        allowed_root: config.allowed_root.clone(),
        source,
    };
    for path in files {
        if path.extension().is_some_and(|e| e == "py") {
            let id = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            if !is_valid_id(id) {
                problems.push(problem(path, format!("'{id}' is not a valid skill id")));
                continue;
            }
            let runner = Runner::Cli {
                python: true,
                entry: path.clone(),
            };
            defined.push(base(id.to_owned(), runner, Source::CliDir(path.clone())));
            continue;
        }
        match manifest(config, path) {
            Ok((skill, warnings)) => {
                problems.extend(warnings.into_iter().map(|w| problem(path, w)));
                defined.push(skill);
            }
            Err(message) => problems.push(problem(path, message)),
        }
    }
    // Installed packages were loaded under the same id rule.
    for package in packages {
        if !package.execution_modes.contains(&ExecutionMode::Auto) {
            problems.push(problem(
                &package.path,
                format!(
                    "package '{}' has no auto execution mode; invoke calls run in auto mode",
                    package.id
                ),
            ));
            continue;
        }
        // A standard skill is called with its task alone: files come only with a job's upload.
        let input = match package.format {
            SkillFormat::AgentSkill => &*standard::TOOL_INPUT_SCHEMA,
            SkillFormat::RunnerJson => &package.schema_docs.input,
        };
        let compiled = [
            input,
            &package.schema_docs.parameter,
            &package.schema_docs.output,
        ]
        .map(|doc| Schema::compile(doc.clone()));
        let [Ok(input), Ok(_), Ok(output)] = compiled else {
            problems.push(problem(
                &package.path,
                format!(
                    "package '{}' has a schema that cannot be compiled",
                    package.id
                ),
            ));
            continue;
        };
        defined.push(InvocableSkill {
            version: package.version.clone(),
            description: package.description.clone(),
            input_schema: Some(input),
            output_schema: Some(output),
            ..base(
                package.id.clone(),
                Runner::Package(package.clone()),
                Source::Package(package.path.clone()),
            )
        });
    }
    for builtin in Builtin::ALL {
        defined.push(InvocableSkill {
            description: Some(builtin.description().into()),
            input_schema: Some(builtin.schema().clone()),
            ..base(
                builtin.id().into(),
                Runner::Builtin(builtin),
                Source::Builtin,
            )
        });
    }
    Catalog::build(defined, problems)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    runtime: Option<String>,
    entry: Option<String>,
    timeout_ms: Option<u64>,
    allowed_root: Option<String>,
    version: Option<Value>,
    description: Option<String>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
}

/// One manifest file → the skill and any warnings, or why it does not load.
fn manifest(config: &InvokeConfig, path: &Path) -> Result<(InvocableSkill, Vec<String>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot be read: {e}"))?;
    let file: ManifestFile = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| format!("is not a valid manifest: {e}"))?
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| format!("is not a valid manifest: {e}"))?
    };
    if !is_valid_id(&file.id) {
        return Err(format!(
            "id '{}' is not a valid skill id ({ID_RULE})",
            file.id
        ));
    }
    let entry = || {
        file.entry
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| format!("type '{}' needs an 'entry'", file.kind))
    };
    let key = match &file.runtime {
        Some(runtime) => format!("{}:{runtime}", file.kind),
        None => file.kind.clone(),
    };
    let runner = match (file.kind.as_str(), file.runtime.as_deref()) {
        ("cli", Some(rt @ ("python" | "exec"))) => Runner::Cli {
            python: rt == "python",
            entry: std::path::absolute(entry()?).map_err(|e| format!("entry: {e}"))?,
        },
        ("http", _) => {
            let url = entry()?;
            match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Runner::Http { url: url.into() },
                _ => return Err(format!("entry '{url}' is not an http(s) URL")),
            }
        }
        ("inproc", _) => {
            let name = entry()?;
            let builtin = Builtin::ALL
                .into_iter()
                .find(|b| b.id() == name)
                .ok_or_else(|| format!("entry '{name}' is not a built-in skill"))?;
            Runner::Builtin(builtin)
        }
        _ => Runner::Unsupported(key),
    };
    let timeout = match file.timeout_ms {
        None => config.timeout,
        Some(0) => return Err("timeout_ms must be positive".into()),
        Some(ms) => Duration::from_millis(ms),
    };
    let mut warnings = Vec::new();
    let allowed_root = match file.allowed_root.as_deref() {
        None => config.allowed_root.clone(),
        Some(raw) => match std::fs::canonicalize(raw) {
            Ok(real) if real.starts_with(&config.allowed_root) => real,
            _ => {
                warnings.push(format!(
                    "allowed_root '{raw}' is not an existing folder inside OPENSKILL_ALLOWED_ROOT ({}); that root applies instead",
                    config.allowed_root.display()
                ));
                config.allowed_root.clone()
            }
        },
    };
    let schema = |field: &str, doc: Option<Value>| {
        doc.map(Schema::compile)
            .transpose()
            .map_err(|e| format!("{field} is {e}"))
    };
    let mut input_schema = schema("input_schema", file.input_schema)?;
    match &runner {
        // A built-in always gets at least its own schema (the host checks it in any case).
        Runner::Builtin(builtin) if input_schema.is_none() => {
            input_schema = Some(builtin.schema().clone());
        }
        Runner::Cli { entry, .. } if !entry.is_file() => {
            warnings.push(format!("entry '{}' does not exist (yet)", entry.display()));
        }
        _ => {}
    }
    let version = match file.version {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    Ok((
        InvocableSkill {
            id: file.id,
            runner,
            version,
            description: file.description,
            input_schema,
            output_schema: schema("output_schema", file.output_schema)?,
            timeout,
            allowed_root,
            source: Source::Manifest(path.to_path_buf()),
        },
        warnings,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tmp: &Path) -> InvokeConfig {
        let root = tmp.join("files");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(tmp.join("manifests")).unwrap();
        std::fs::create_dir_all(tmp.join("cli")).unwrap();
        InvokeConfig {
            allowed_root: std::fs::canonicalize(root).unwrap(),
            cli_dir: tmp.join("cli"),
            manifest_dir: tmp.join("manifests"),
            ..InvokeConfig::default()
        }
    }

    #[test]
    fn sources_precedence_and_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let config = config(&base);
        let m = &config.manifest_dir;
        std::fs::write(
            m.join("calc.yaml"),
            format!(
                "id: calculator\ntype: cli\nruntime: python\nentry: {}/cli/calc.py\ntimeout_ms: 500\nallowed_root: {}/files/docs\nversion: 1.0\n",
                base.display(),
                base.display()
            ),
        )
        .unwrap();
        std::fs::write(
            m.join("remote.json"),
            r#"{"id": "remote", "type": "http", "entry": "http://127.0.0.1:9/x", "input_schema": {"type": "object"}}"#,
        )
        .unwrap();
        std::fs::write(
            m.join("box.yaml"),
            "id: boxed\ntype: docker\nruntime: python\nentry: x\n",
        )
        .unwrap();
        std::fs::write(m.join("bad.yaml"), "id: Bad\ntype: cli\n").unwrap();
        std::fs::write(m.join("typo.yaml"), "id: t\ntype: cli\nruntme: python\n").unwrap();
        std::fs::write(
            m.join("schema.json"),
            r#"{"id": "s", "type": "http", "entry": "http://x/", "input_schema": {"type": 5}}"#,
        )
        .unwrap();
        std::fs::write(
            m.join("wide.yaml"),
            "id: wide\ntype: cli\nruntime: exec\nentry: /bin/true\nallowed_root: /\n",
        )
        .unwrap();
        std::fs::write(config.cli_dir.join("calculator.py"), "").unwrap();
        std::fs::write(config.cli_dir.join("hello.py"), "").unwrap();
        std::fs::write(config.cli_dir.join("Nope.py"), "").unwrap();

        let files = source_files(&config);
        let catalog = load(&config, &files, &[]);
        let runner = |id: &str| catalog.skills[id].runner.runner_type();
        assert_eq!(runner("calculator"), "cli:python");
        assert!(matches!(
            catalog.skills["calculator"].source,
            Source::Manifest(_)
        ));
        assert_eq!(
            catalog.skills["calculator"].timeout,
            Duration::from_millis(500)
        );
        assert_eq!(catalog.skills["calculator"].version.as_deref(), Some("1.0"));
        assert_eq!(
            catalog.skills["calculator"].allowed_root,
            config.allowed_root.join("docs")
        );
        assert_eq!(runner("hello"), "cli:python");
        assert_eq!(runner("remote"), "http");
        assert_eq!(runner("boxed"), "docker:python");
        assert_eq!(runner("echo"), "inproc");
        assert_eq!(catalog.skills["wide"].allowed_root, config.allowed_root);
        for gone in ["Bad", "t", "s", "Nope"] {
            assert!(!catalog.skills.contains_key(gone), "{gone}");
        }
        let messages: Vec<String> = catalog
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.source, p.message))
            .collect();
        let has = |needle: &str| messages.iter().any(|m| m.contains(needle));
        assert!(has("id 'Bad' is not a valid skill id"), "{messages:?}");
        assert!(has("unknown field `runtme`"), "{messages:?}");
        assert!(
            has("input_schema is not a valid JSON Schema"),
            "{messages:?}"
        );
        assert!(has("'Nope' is not a valid skill id"), "{messages:?}");
        assert!(
            has("allowed_root '/' is not an existing folder inside"),
            "{messages:?}"
        );
        assert!(
            has("cli/calculator.py: skill 'calculator' is shadowed by manifest"),
            "{messages:?}"
        );
        assert!(
            has("the built-in skill: skill 'calculator' is shadowed by manifest"),
            "{messages:?}"
        );
        let listed: Value = serde_json::from_slice(&catalog.list_json).unwrap();
        assert_eq!(
            listed["skills"].as_array().unwrap().len(),
            catalog.skills.len()
        );
    }
}
