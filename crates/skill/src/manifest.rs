//! Reading and validating one skill folder: `SKILL.md`, `assets/runner.json` and its schemas.
//!
//! The same validator serves package installs, temporary skill runs and the registry scan; only
//! the [`Rules`] differ. Every error names the rule that was broken and the offending value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::docs;
use crate::docs::document::Profile;
use crate::schema::Checker;
use skill_runner_types::RelPath;
use skill_runner_types::engine::Engine;
pub use skill_runner_types::run_options::ExecutionMode;

/// Why a skill folder is not a valid skill. The message names the broken rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSkill(pub String);

fn invalid<T>(message: impl Into<String>) -> Result<T, InvalidSkill> {
    Err(InvalidSkill(message.into()))
}

/// The problems found so far, so that one pass reports them all.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, problem: String) {
        self.0.push(problem);
    }

    /// The value of a check that passed; a failed one's message is kept.
    fn keep<T>(&mut self, checked: Result<T, InvalidSkill>) -> Option<T> {
        checked.map_err(|e| self.add(e.0)).ok()
    }

    /// Every problem, one per line.
    fn into_result(self) -> Result<(), InvalidSkill> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(InvalidSkill(self.0.join("\n")))
        }
    }
}

/// Which optional fields a context insists on.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub missing_version: MissingVersion,
    pub require_execution_modes: bool,
}

/// What a `runner.json` without `version` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingVersion {
    /// The skill is refused (a package to install: updates compare versions).
    Refused,
    /// [`DEFAULT_VERSION`], with a warning (a folder placed by hand; the reference's own example
    /// skills ship without one).
    Defaulted,
    /// No version (a temporary run).
    Allowed,
}

/// The version of a hand-placed skill whose `runner.json` has none.
pub const DEFAULT_VERSION: &str = "1.0.0";

impl Rules {
    /// A package uploaded for installation.
    pub const INSTALL: Rules = Rules {
        missing_version: MissingVersion::Refused,
        require_execution_modes: true,
    };
    /// A skill already in the skills dir: a missing `execution_modes` means `["auto"]`.
    pub const REGISTERED: Rules = Rules {
        missing_version: MissingVersion::Defaulted,
        require_execution_modes: false,
    };
    /// A package uploaded for one temporary run.
    pub const TEMPORARY: Rules = Rules {
        missing_version: MissingVersion::Allowed,
        require_execution_modes: false,
    };
}

/// Where the three schemas live, relative to the skill folder: each as `runner.json` declares
/// it, else `assets/<role>.schema.json` when that file exists (as the reference). A skill
/// without an input or parameter schema takes any (`null` here); the output schema is
/// required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SchemaPaths {
    pub input: Option<String>,
    pub parameter: Option<String>,
    pub output: String,
}

/// A file the run is expected to leave under `artifacts/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ArtifactSpec {
    pub role: String,
    pub pattern: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    pub required: bool,
}

/// How a skill folder is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SkillFormat {
    /// The Python Skill-Runner's format: `SKILL.md`, `assets/runner.json` and three schemas.
    RunnerJson,
    /// The Agent Skills standard (agentskills.io): a `SKILL.md` alone, run under the contract
    /// of [`crate::standard`].
    AgentSkill,
}

/// A validated skill, as served by `GET /v1/skills`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SkillManifest {
    pub format: SkillFormat,
    pub id: String,
    /// Absolute path of the skill folder.
    #[schema(value_type = String)]
    pub path: PathBuf,
    pub version: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// The `SKILL.md` frontmatter's `license`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// The `SKILL.md` frontmatter's `compatibility` (what the skill needs to run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<String>,
    /// The `SKILL.md` frontmatter's `allowed-tools`, passed to the CLIs that honour it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// The `SKILL.md` frontmatter's `metadata`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The skill's files, relative to its folder, sorted (the first
    /// [`crate::standard::LISTED_FILES`]).
    pub files: Vec<String>,
    /// The size of all its files, bytes.
    pub size_bytes: u64,
    /// Engines the skill declares (empty when it does not restrict them).
    pub engines: Vec<Engine>,
    pub unsupport_engine: Vec<Engine>,
    /// `(engines or all) - unsupport_engine`; `script` only with `entrypoint.script`.
    pub effective_engines: Vec<Engine>,
    /// The engine a job that names none runs on: `script` for a skill with
    /// `entrypoint.script`, else `codex`.
    pub default_engine: Engine,
    pub execution_modes: Vec<ExecutionMode>,
    /// `runner.json` `max_attempt`: the most turns an interactive run may take; a turn at or
    /// past it that asks again instead of finishing fails the run.
    pub max_attempt: Option<u32>,
    /// `runner.json` `retry.safe`: a turn of the skill may run again after one that may have
    /// done work failed (the skill is idempotent), when the request asks for retries.
    pub retry_safe: bool,
    /// `runner.json` `mcp.required_servers`: the `declared` servers of the operator's MCP
    /// registry its runs need (each id once).
    pub mcp_required_servers: Vec<String>,
    /// The `runner.json` schema files; `null` for a standard skill, whose contract is
    /// [`crate::standard::INPUT_SCHEMA`] and [`crate::standard::OUTPUT_SCHEMA`].
    pub schemas: Option<SchemaPaths>,
    /// Declared artifacts, or those inferred from the output schema.
    pub artifacts: Vec<ArtifactSpec>,
    /// `runner.json.entrypoint` as written (script argv, prompt overrides, extra keys).
    #[schema(value_type = Object)]
    pub entrypoint: Value,
    #[schema(value_type = Object)]
    pub runtime: Value,
    /// Engine default configuration files present under `assets/`, by engine.
    pub engine_configs: BTreeMap<String, String>,
    /// What is odd but tolerated about the skill (e.g. a defaulted version).
    pub warnings: Vec<String>,
    /// The script argv when the skill runs with the `script` engine.
    #[serde(skip)]
    pub script: Option<Vec<String>>,
    /// `runner.json` `network.allow`: the `host:port`s the skill's turns ask to reach (granted
    /// only where `SKILL_RUNNER_EGRESS_ALLOW` permits them).
    #[serde(skip)]
    pub network_allow: Vec<skill_runner_process::egress::Target>,
    /// `runner.json` `secrets`: the names of the tenant's secrets the skill's turns get, each as
    /// a variable holding a placeholder the egress swaps for the value on requests to the
    /// secret's hosts.
    #[serde(skip)]
    pub secrets: Vec<String>,
    /// `runner.json` `limits`: what the skill's turns ask for below the operator's caps.
    #[serde(skip)]
    pub limits: skill_runner_process::limits::Requested,
    /// The parsed input, parameter and output schemas.
    #[serde(skip)]
    pub schema_docs: SchemaDocs,
}

/// Where an input field's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputSource {
    /// The request body's `input`.
    Inline,
    /// A file of the upload zip named after the key.
    File,
}

impl SkillManifest {
    /// The engine when a request names none: `codex`, as in the reference, except for skills
    /// that ship their own `entrypoint.script`, which run it.
    pub fn default_engine(&self) -> Engine {
        self.default_engine
    }

    /// Each input property with its source (`x-input-source`, default `file`).
    pub fn input_sources(&self) -> Vec<(String, InputSource)> {
        self.schema_docs
            .input
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(key, prop)| {
                        let source = match prop.get("x-input-source").and_then(Value::as_str) {
                            Some("inline") => InputSource::Inline,
                            _ => InputSource::File,
                        };
                        (key.clone(), source)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Engine default configuration files a skill may ship.
const ENGINE_CONFIG_FILES: [(&str, &str); 3] = [
    ("codex", "assets/codex_config.toml"),
    ("gemini", "assets/gemini_settings.json"),
    ("iflow", "assets/iflow_settings.json"),
];

/// Reads and validates the skill in `dir`; the folder name is the expected skill id.
pub fn load(dir: &Path, rules: Rules) -> Result<SkillManifest, InvalidSkill> {
    load_with(dir, rules, None)
}

/// [`load`], taking a standard skill's content version from `known` when its files are as
/// they were.
pub fn load_with(
    dir: &Path,
    rules: Rules,
    known: Option<&crate::standard::KnownVersions>,
) -> Result<SkillManifest, InvalidSkill> {
    let folder = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| InvalidSkill(format!("folder name of '{}' is not UTF-8", dir.display())))?
        .to_owned();

    let skill_md = read_required(dir, "SKILL.md")?;
    if crate::standard::is_standard(dir) {
        return crate::standard::load(dir, &folder, &skill_md, rules, known);
    }
    let (frontmatter_name, doc, doc_findings) = skill_document(&skill_md, &folder)?;

    let runner_text = read_required(dir, "assets/runner.json")?;
    let runner: Value = serde_json::from_str(&runner_text)
        .map_err(|e| InvalidSkill(format!("assets/runner.json is not valid JSON: {e}")))?;
    let Value::Object(runner) = runner else {
        return invalid("assets/runner.json must hold a JSON object");
    };

    // Every problem of runner.json and its schemas is found in one pass: each check that fails
    // adds its message, and those depending on it are skipped.
    let mut problems = Problems::default();
    let id = problems.keep(match runner.get("id") {
        Some(Value::String(id)) if !id.trim().is_empty() => Ok(id.clone()),
        Some(_) => invalid("runner.json: 'id' must be a non-empty string"),
        None => invalid("runner.json: 'id' is required"),
    });
    if let Some(id) = &id {
        if !is_valid_id(id) {
            problems.add(format!(
                "runner.json: id '{id}' is not a valid skill id ({ID_RULE})"
            ));
        } else if folder != frontmatter_name || &folder != id {
            problems.add(format!(
                "identity mismatch: folder '{folder}', SKILL.md name '{frontmatter_name}' and \
                 runner.json id '{id}' must be identical"
            ));
        }
    }

    let mut warnings = doc_findings;
    let version = problems.keep(match runner.get("version") {
        None | Some(Value::Null) => match rules.missing_version {
            MissingVersion::Refused => invalid("runner.json: 'version' is required"),
            MissingVersion::Defaulted => {
                warnings.push(format!(
                    "runner.json has no 'version'; the skill is treated as {DEFAULT_VERSION}"
                ));
                Ok(Some(DEFAULT_VERSION.to_owned()))
            }
            MissingVersion::Allowed => Ok(None),
        },
        Some(Value::String(v)) => parse_version(v).map(|_| Some(v.clone())),
        Some(other) => invalid(format!(
            "runner.json: 'version' must be a string, got {other}"
        )),
    });

    let name = problems.keep(optional_string(&runner, "name"));
    let description = problems.keep(optional_string(&runner, "description"));

    let entrypoint = problems.keep(match runner.get("entrypoint") {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => invalid("runner.json: 'entrypoint' must be an object"),
    });
    let script = entrypoint
        .as_ref()
        .and_then(|e| problems.keep(entrypoint_script(e)));
    if let Some(Some(argv)) = &script {
        problems.keep(script_files_exist(dir, argv));
    }

    let declared = problems.keep(engine_list(&runner, "engines"));
    let unsupported = problems.keep(engine_list(&runner, "unsupport_engine"));
    let effective = match (&declared, &unsupported, &script) {
        (Some(declared), Some(unsupported), Some(script)) => problems.keep(effective_engines(
            declared.as_deref(),
            unsupported.as_deref().unwrap_or_default(),
            script.is_some(),
        )),
        _ => None,
    };

    let execution_modes = problems.keep(execution_modes(&runner, rules));
    let max_attempt = problems.keep(match runner.get("max_attempt") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                InvalidSkill(format!(
                    "runner.json: 'max_attempt' must be a positive integer, got {v}"
                ))
            }),
    });
    let retry_safe = problems.keep(retry_safe(&runner));
    let mcp_required_servers = problems.keep(mcp_required_servers(&runner));
    let schemas = problems.keep(schema_paths(dir, &runner, &mut warnings));
    let schema_docs = schemas
        .as_ref()
        .and_then(|schemas| problems.keep(SchemaDocs::load(dir, schemas)));

    let artifacts = match runner.get("artifacts") {
        None | Some(Value::Null) => schema_docs.as_ref().map(|d| infer_artifacts(&d.output)),
        Some(v) => problems.keep(declared_artifacts(v)),
    };

    let runtime = problems.keep(match runner.get("runtime") {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => invalid("runner.json: 'runtime' must be an object"),
    });

    let network_allow = problems.keep(network_allow(&runner));
    let secrets = problems.keep(secret_names(&runner));
    let limits = problems.keep(
        skill_runner_process::limits::Requested::parse(runner.get("limits"))
            .map_err(|why| InvalidSkill(format!("runner.json: {why}"))),
    );
    problems.into_result()?;
    // No problem: every value is there.
    let (
        Some(id),
        Some(version),
        Some(name),
        Some(description),
        Some(entrypoint),
        Some(script),
        Some(declared),
        Some(unsupported),
        Some(effective),
        Some(execution_modes),
        Some(max_attempt),
        Some(retry_safe),
        Some(mcp_required_servers),
        Some(schemas),
        Some(schema_docs),
        Some(artifacts),
        Some(runtime),
        Some(network_allow),
        Some(secrets),
        Some(limits),
    ) = (
        id,
        version,
        name,
        description,
        entrypoint,
        script,
        declared,
        unsupported,
        effective,
        execution_modes,
        max_attempt,
        retry_safe,
        mcp_required_servers,
        schemas,
        schema_docs,
        artifacts,
        runtime,
        network_allow,
        secrets,
        limits,
    )
    else {
        unreachable!("a check without a value recorded a problem");
    };
    let unsupported = unsupported.unwrap_or_default();

    let files = crate::walk::files_under(dir)
        .map_err(|e| InvalidSkill(format!("cannot list the skill's files: {e}")))?;
    warnings.extend(crate::standard::unlisted(&files));
    let engine_configs = ENGINE_CONFIG_FILES
        .iter()
        .filter(|(_, rel)| dir.join(rel).is_file())
        .map(|(engine, rel)| ((*engine).to_owned(), (*rel).to_owned()))
        .collect();

    Ok(SkillManifest {
        format: SkillFormat::RunnerJson,
        id,
        path: dir.to_path_buf(),
        version,
        name,
        description,
        license: doc.license,
        compatibility: doc.compatibility,
        allowed_tools: doc.allowed_tools,
        metadata: doc.metadata,
        files: crate::standard::listed(&files),
        size_bytes: crate::standard::size(&files),
        engines: declared.unwrap_or_default(),
        unsupport_engine: unsupported,
        effective_engines: effective,
        default_engine: if script.is_some() {
            Engine::Script
        } else {
            Engine::Codex
        },
        execution_modes,
        max_attempt,
        retry_safe,
        mcp_required_servers,
        schemas: Some(schemas),
        artifacts,
        entrypoint,
        runtime,
        engine_configs,
        warnings,
        script,
        network_allow,
        secrets,
        limits,
        schema_docs,
    })
}

/// `runner.json` `secrets`: a list of secret names (the variables the turn gets).
fn secret_names(runner: &Map<String, Value>) -> Result<Vec<String>, InvalidSkill> {
    let entries = match runner.get("secrets") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(_) => {
            return invalid(
                "runner.json: 'secrets' must be a list of names like [\"GITHUB_TOKEN\"]",
            );
        }
    };
    let mut names: Vec<String> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let name = entry
            .as_str()
            .ok_or_else(|| InvalidSkill(format!("runner.json: 'secrets[{i}]' must be a name")))?;
        skill_runner_process::egress::secrets::check_name(name)
            .map_err(|why| InvalidSkill(format!("runner.json: 'secrets[{i}]': {why}")))?;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// `runner.json` `network`: an object whose only key, `allow`, lists `host:port` strings.
fn network_allow(
    runner: &Map<String, Value>,
) -> Result<Vec<skill_runner_process::egress::Target>, InvalidSkill> {
    let network = match runner.get("network") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(network)) => network,
        Some(_) => {
            return invalid(
                "runner.json: 'network' must be an object like {\"allow\": [\"api.github.com:443\"]}",
            );
        }
    };
    if let Some(other) = network.keys().find(|k| *k != "allow") {
        return invalid(format!(
            "runner.json: 'network.{other}' is not a setting (only 'network.allow')"
        ));
    }
    let entries = match network.get("allow") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(_) => {
            return invalid("runner.json: 'network.allow' must be a list of \"host:port\" strings");
        }
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let text = entry.as_str().ok_or_else(|| {
                InvalidSkill(format!(
                    "runner.json: 'network.allow[{i}]' must be a \"host:port\" string"
                ))
            })?;
            skill_runner_process::egress::Target::parse(text)
                .map_err(|why| InvalidSkill(format!("runner.json: 'network.allow[{i}]': {why}")))
        })
        .collect()
}

/// The one skill-id rule of the service (jobs, packages and `:invoke` alike, as the invoke
/// documents give it): 1-64 of `a-z`, `0-9`, `_` and `-`, starting with a letter or digit.
/// Ids name folders, so they cannot collide with the hidden `.archive`, `.staging` and
/// `.invalid` folders.
pub fn is_valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// How [`is_valid_id`] is said in an error.
pub const ID_RULE: &str = "1-64 of a-z, 0-9, '_' and '-', starting with a letter or digit";

/// Parses a skill version (semantic versioning, `MAJOR.MINOR.PATCH[-pre][+build]`).
pub fn parse_version(raw: &str) -> Result<semver::Version, InvalidSkill> {
    semver::Version::parse(raw).map_err(|e| {
        InvalidSkill(format!(
            "runner.json: version '{raw}' is not a valid semantic version (MAJOR.MINOR.PATCH): {e}"
        ))
    })
}

/// The version the skill in `dir` says it is, without judging the rest (an archived folder is
/// named after its version, not its id): its `runner.json` `version`, else its `SKILL.md`
/// `metadata.version`, else its contents' hash.
pub fn version_in(dir: &Path) -> Option<String> {
    if !crate::standard::is_standard(dir) {
        let runner: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("assets/runner.json")).ok()?)
                .ok()?;
        return runner.get("version")?.as_str().map(str::to_owned);
    }
    let text = std::fs::read_to_string(dir.join("SKILL.md")).ok()?;
    let checked = docs::document::check(&text, None, Profile::Lenient);
    match checked.document.metadata.get("version") {
        Some(version) => Some(version.clone()),
        None => crate::standard::content_version(&crate::walk::files_under(dir).ok()?).ok(),
    }
}

fn read_required(dir: &Path, rel: &str) -> Result<String, InvalidSkill> {
    let path = dir.join(rel);
    if !path.is_file() {
        return invalid(format!("missing required file {rel}"));
    }
    std::fs::read_to_string(&path).map_err(|e| InvalidSkill(format!("cannot read {rel}: {e}")))
}

/// The `name` of the YAML frontmatter, which must open the file as `---\n...\n---`, and what
/// the Agent Skills specification's `strict` profile finds wrong with the document (warnings
/// here: the Skill Runner rules decide what installs).
fn skill_document(
    text: &str,
    folder: &str,
) -> Result<(String, docs::document::Document, Vec<String>), InvalidSkill> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.starts_with("---\r\n") {
        return invalid("SKILL.md frontmatter must use LF line endings");
    }
    if !text.starts_with("---\n") {
        return invalid("SKILL.md must start with a '---' frontmatter block");
    }
    let checked = docs::document::check(text, Some(folder), Profile::Strict);
    if !checked.has_frontmatter {
        return invalid("SKILL.md frontmatter is not closed by a '---' line");
    }
    if let Some(problem) = &checked.yaml_error {
        return invalid(format!("SKILL.md frontmatter is not valid YAML: {problem}"));
    }
    let Some(name) = checked.frontmatter_name.clone() else {
        return invalid("SKILL.md frontmatter has no non-empty 'name'");
    };
    let findings = checked
        .errors
        .iter()
        .chain(&checked.warnings)
        // The folder, SKILL.md and runner.json must agree anyway (checked below).
        .filter(|f| !f.message.contains("must equal the folder name"))
        .map(|f| format!("SKILL.md (Agent Skills specification): {f}"))
        .collect();
    Ok((name, checked.document, findings))
}

fn optional_string(runner: &Map<String, Value>, key: &str) -> Result<Option<String>, InvalidSkill> {
    match runner.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => invalid(format!("runner.json: '{key}' must be a string")),
    }
}

fn entrypoint_script(entrypoint: &Value) -> Result<Option<Vec<String>>, InvalidSkill> {
    match entrypoint.get("script") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                _ => invalid("runner.json: 'entrypoint.script' items must be non-empty strings"),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => invalid(
            "runner.json: 'entrypoint.script' must be a non-empty argv array, \
             e.g. [\"python3\", \"scripts/main.py\"]",
        ),
    }
}

/// The files an entrypoint names must be in the skill: a relative program path
/// (`scripts/run.sh`), and each later argument that names a script by its extension
/// (`scripts/main.py`). Flags, inline code and programs on `PATH` are left alone.
fn script_files_exist(dir: &Path, argv: &[String]) -> Result<(), InvalidSkill> {
    const SCRIPTS: [&str; 9] = ["py", "sh", "bash", "js", "mjs", "cjs", "ts", "rb", "pl"];
    for (i, arg) in argv.iter().enumerate() {
        let path = Path::new(arg);
        let names_a_file = if i == 0 {
            arg.contains('/')
        } else {
            !arg.starts_with('-')
                && !arg.contains(char::is_whitespace)
                && path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| SCRIPTS.contains(&e))
        };
        if names_a_file && path.is_relative() && !dir.join(path).is_file() {
            return invalid(format!(
                "runner.json: 'entrypoint.script' names '{arg}', which the skill does not \
                 contain (paths are relative to the skill's folder)"
            ));
        }
    }
    Ok(())
}

fn engine_list(
    runner: &Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<Engine>>, InvalidSkill> {
    let items = match runner.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return invalid(format!(
                "runner.json: '{key}' must be an array of engine names"
            ));
        }
    };
    if items.is_empty() {
        return invalid(format!(
            "runner.json: '{key}' must not be empty when present"
        ));
    }
    let mut engines = Vec::with_capacity(items.len());
    for item in items {
        let engine = item.as_str().and_then(Engine::parse).ok_or_else(|| {
            let known: Vec<_> = Engine::ALL.iter().map(|e| e.as_str()).collect();
            InvalidSkill(format!(
                "runner.json: '{key}' lists unknown engine {item} (known: {})",
                known.join(", ")
            ))
        })?;
        if engines.contains(&engine) {
            return invalid(format!(
                "runner.json: '{key}' lists '{engine}' more than once"
            ));
        }
        engines.push(engine);
    }
    Ok(Some(engines))
}

fn effective_engines(
    declared: Option<&[Engine]>,
    unsupported: &[Engine],
    has_script: bool,
) -> Result<Vec<Engine>, InvalidSkill> {
    let overlap: Vec<&str> = declared
        .unwrap_or_default()
        .iter()
        .filter(|e| unsupported.contains(e))
        .map(|e| e.as_str())
        .collect();
    if !overlap.is_empty() {
        return invalid(format!(
            "runner.json: 'engines' and 'unsupport_engine' overlap: {}",
            overlap.join(", ")
        ));
    }
    if !has_script && declared.is_some_and(|d| d.contains(&Engine::Script)) {
        return invalid(
            "runner.json: 'engines' lists 'script' but 'entrypoint.script' is not declared",
        );
    }
    let base: Vec<Engine> = match declared {
        Some(d) => d.to_vec(),
        None => Engine::ALL
            .into_iter()
            .filter(|e| *e != Engine::Script || has_script)
            .collect(),
    };
    let mut effective: Vec<Engine> = base
        .into_iter()
        .filter(|e| !unsupported.contains(e))
        .collect();
    effective.sort();
    if effective.is_empty() {
        return invalid(
            "runner.json: effective engines are empty ('engines' minus 'unsupport_engine' \
             leaves no engine to run the skill)",
        );
    }
    Ok(effective)
}

/// `runner.json` `retry: {"safe": true|false}`.
fn retry_safe(runner: &Map<String, Value>) -> Result<bool, InvalidSkill> {
    match runner.get("retry") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Object(retry)) => {
            if let Some(other) = retry.keys().find(|k| *k != "safe") {
                return invalid(format!(
                    "runner.json: 'retry' takes only 'safe' (true when the skill may run again \
                     after a failed turn that may have done work), not '{other}'"
                ));
            }
            match retry.get("safe") {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(safe)) => Ok(*safe),
                Some(v) => invalid(format!(
                    "runner.json: 'retry.safe' must be true or false, got {v}"
                )),
            }
        }
        Some(v) => invalid(format!(
            "runner.json: 'retry' must be an object like {{\"safe\": true}}, got {v}"
        )),
    }
}

/// `runner.json` `mcp`: `{required_servers: [id, ...]}` (no other key), each id a non-empty
/// string given once.
fn mcp_required_servers(runner: &Map<String, Value>) -> Result<Vec<String>, InvalidSkill> {
    let mcp = match runner.get("mcp") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return invalid("runner.json: 'mcp' must be an object"),
    };
    if let Some(other) = mcp.keys().find(|k| *k != "required_servers") {
        return invalid(format!(
            "runner.json: 'mcp.{other}' is not a setting; MCP servers are defined in the \
             service's registry and a skill names the ones it needs in 'mcp.required_servers'"
        ));
    }
    let Some(list) = mcp.get("required_servers") else {
        return Ok(Vec::new());
    };
    let Some(items) = list.as_array() else {
        return invalid("runner.json: 'mcp.required_servers' must be an array of server ids");
    };
    let mut ids: Vec<String> = Vec::new();
    for item in items {
        match item.as_str().map(str::trim) {
            Some(id) if !id.is_empty() && !ids.iter().any(|i| i == id) => ids.push(id.to_owned()),
            Some(id) if !id.is_empty() => {
                return invalid(format!(
                    "runner.json: 'mcp.required_servers' names '{id}' twice"
                ));
            }
            _ => {
                return invalid(format!(
                    "runner.json: 'mcp.required_servers' holds {item}, not a server id"
                ));
            }
        }
    }
    Ok(ids)
}

fn execution_modes(
    runner: &Map<String, Value>,
    rules: Rules,
) -> Result<Vec<ExecutionMode>, InvalidSkill> {
    const RULE: &str =
        "runner.json: 'execution_modes' must be a non-empty array of \"auto\" / \"interactive\"";
    let items = match runner.get("execution_modes") {
        None | Some(Value::Null) if rules.require_execution_modes => {
            return invalid(format!("{RULE} (it is missing)"));
        }
        None | Some(Value::Null) => return Ok(vec![ExecutionMode::Auto]),
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(other) => return invalid(format!("{RULE}, got {other}")),
    };
    let mut modes = Vec::new();
    for item in items {
        let mode = match item.as_str() {
            Some("auto") => ExecutionMode::Auto,
            Some("interactive") => ExecutionMode::Interactive,
            _ => return invalid(format!("{RULE}; {item} is not a mode")),
        };
        if modes.contains(&mode) {
            return invalid(format!("{RULE}; {item} is listed more than once"));
        }
        modes.push(mode);
    }
    Ok(modes)
}

fn schema_paths(
    dir: &Path,
    runner: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<SchemaPaths, InvalidSkill> {
    let empty = Map::new();
    let schemas = match runner.get("schemas") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(schemas)) => schemas,
        Some(_) => {
            return invalid(
                "runner.json: 'schemas' must be an object with 'input', 'parameter' and 'output' \
                 paths (or left out for assets/<role>.schema.json)",
            );
        }
    };
    let mut path = |key: &str| -> Result<Option<String>, InvalidSkill> {
        let fallback = format!("assets/{key}.schema.json");
        let declared = match schemas.get(key) {
            None | Some(Value::Null) => None,
            // The usual place: found or missing as if undeclared.
            Some(Value::String(p)) if *p == fallback => None,
            Some(Value::String(p)) => Some(p),
            Some(_) => {
                return invalid(format!(
                    "runner.json: 'schemas.{key}' must be a path string"
                ));
            }
        };
        let why = match declared {
            Some(p) if !is_safe_relative(p) => {
                Some(format!("'{p}' is not a path inside the skill"))
            }
            Some(p) if !dir.join(p).is_file() => Some(format!("'{p}' is not in the skill")),
            Some(p) => return Ok(Some(p.clone())),
            None => None,
        };
        let found = dir.join(&fallback).is_file();
        match (why, found) {
            (Some(why), true) => {
                warnings.push(format!(
                    "runner.json: schemas.{key} {why}; {fallback} is used instead"
                ));
                Ok(Some(fallback))
            }
            (None, true) => Ok(Some(fallback)),
            (Some(why), false) if key == "output" => invalid(format!(
                "runner.json: schemas.output {why}, and the skill has no {fallback} either"
            )),
            (None, false) if key == "output" => {
                invalid(format!("missing required file {fallback}"))
            }
            (Some(why), false) => {
                warnings.push(format!(
                    "runner.json: schemas.{key} {why}; the skill takes any {key}"
                ));
                Ok(None)
            }
            (None, false) => Ok(None),
        }
    };
    Ok(SchemaPaths {
        input: path("input")?,
        parameter: path("parameter")?,
        output: path("output")?.expect("an output schema or an error"),
    })
}

/// True for a path inside the skill ([`RelPath`]) written with `/` only: in `runner.json` a
/// `\` would be a glob's escape in an artifact pattern, or a Windows habit that names another
/// file here.
pub fn is_safe_relative(path: &str) -> bool {
    !path.contains('\\') && RelPath::parse(path).is_ok()
}

/// The three parsed schemas of a skill.
#[derive(Debug, Clone)]
pub struct SchemaDocs {
    pub input: Value,
    pub parameter: Value,
    pub output: Value,
    /// Checkers compiled on first use and shared by every clone: a skill's schemas are checked
    /// for each of its jobs, and compiling them each time cost more than the checks.
    checkers: Arc<Checkers>,
}

#[derive(Debug, Default)]
struct Checkers {
    input: OnceLock<Checker>,
    inline_input: OnceLock<Checker>,
    parameter: OnceLock<Checker>,
    output: OnceLock<Checker>,
}

impl SchemaDocs {
    /// Schemas given as values (a contract, not files).
    pub(crate) fn new(input: Value, parameter: Value, output: Value) -> Self {
        Self {
            input,
            parameter,
            output,
            checkers: Default::default(),
        }
    }

    pub fn input_checker(&self) -> &Checker {
        self.checkers
            .input
            .get_or_init(|| Checker::new(&self.input))
    }

    /// The input schema restricted to its inline properties (`restrict` builds it, once).
    pub fn inline_input_checker(&self, restrict: impl FnOnce() -> Value) -> &Checker {
        self.checkers
            .inline_input
            .get_or_init(|| Checker::new(&restrict()))
    }

    pub fn parameter_checker(&self) -> &Checker {
        self.checkers
            .parameter
            .get_or_init(|| Checker::new(&self.parameter))
    }

    pub fn output_checker(&self) -> &Checker {
        self.checkers
            .output
            .get_or_init(|| Checker::new(&self.output))
    }
}

impl SchemaDocs {
    fn load(dir: &Path, paths: &SchemaPaths) -> Result<Self, InvalidSkill> {
        // A role without a schema takes any object.
        let any = || json!({"type": "object"});
        let input_path = paths.input.as_deref().unwrap_or("the input schema");
        let input = match &paths.input {
            Some(rel) => read_schema(dir, "input", rel)?,
            None => any(),
        };
        check_properties(input_path, &input, |key, prop| {
            match prop.get("x-input-source") {
                None => Ok(()),
                Some(Value::String(s)) if s == "file" || s == "inline" => Ok(()),
                Some(other) => invalid(format!(
                    "{}: property '{key}' has x-input-source {other}; allowed: \"file\", \"inline\"",
                    input_path
                )),
            }
        })?;
        let parameter = match &paths.parameter {
            Some(rel) => read_schema(dir, "parameter", rel)?,
            None => any(),
        };
        check_properties(
            paths.parameter.as_deref().unwrap_or("the parameter schema"),
            &parameter,
            |_, _| Ok(()),
        )?;
        let output = read_schema(dir, "output", &paths.output)?;
        check_properties(&paths.output, &output, |key, prop| {
            match prop.get("x-type") {
                None => return Ok(()),
                Some(Value::String(s)) if s == "artifact" || s == "file" => {}
                Some(other) => {
                    return invalid(format!(
                        "{}: property '{key}' has x-type {other}; allowed: \"artifact\", \"file\"",
                        paths.output
                    ));
                }
            }
            for meta in ["x-role", "x-filename"] {
                match prop.get(meta) {
                    None => {}
                    Some(Value::String(s)) if !s.trim().is_empty() => {}
                    Some(_) => {
                        return invalid(format!(
                            "{}: property '{key}' has an empty or non-string {meta}",
                            paths.output
                        ));
                    }
                }
            }
            if let Some(Value::String(f)) = prop.get("x-filename")
                && !is_safe_relative(f)
            {
                return invalid(format!(
                    "{}: property '{key}' x-filename '{f}' must be a relative path inside artifacts/",
                    paths.output
                ));
            }
            Ok(())
        })?;
        Ok(Self::new(input, parameter, output))
    }
}

fn read_schema(dir: &Path, which: &str, rel: &str) -> Result<Value, InvalidSkill> {
    let text = read_required(dir, rel)?;
    let schema: Value = serde_json::from_str(&text)
        .map_err(|e| InvalidSkill(format!("{rel} ({which} schema) is not valid JSON: {e}")))?;
    check_schema(&schema, &format!("{rel} ({which} schema)"))?;
    Ok(schema)
}

/// The rules every schema a run is checked against meets (`what` names it in the message):
/// an object schema, within bounds, valid, and compiling without looking outside itself.
pub fn check_schema(schema: &Value, what: &str) -> Result<(), InvalidSkill> {
    if schema.get("type") != Some(&Value::String("object".into())) {
        return invalid(format!("{what} must declare \"type\": \"object\""));
    }
    if let Err(e) = super::schema_bounds::check(schema) {
        return invalid(format!("{what} is refused: {e}"));
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        return invalid(format!("{what} is not a valid JSON Schema: {e}"));
    }
    // Compiled now, so a schema every run would fail on is refused up front, not blamed on
    // a client's input later. References are resolved offline only: within the document.
    if let Err(e) = jsonschema::validator_for(schema) {
        return invalid(match outside_reference(schema) {
            Some(target) => format!(
                "{what} refers to '{target}' outside itself; schemas must be self-contained \
                 (the service resolves no remote or file references)"
            ),
            None => format!("{what} cannot be compiled: {e}"),
        });
    }
    Ok(())
}

/// The first `$ref` that does not point into the document itself (`#…`).
fn outside_reference(schema: &Value) -> Option<&str> {
    match schema {
        Value::Object(map) => map
            .get("$ref")
            .and_then(Value::as_str)
            .filter(|r| !r.starts_with('#'))
            .or_else(|| map.values().find_map(outside_reference)),
        Value::Array(items) => items.iter().find_map(outside_reference),
        _ => None,
    }
}

/// Checks that `properties` (if any) maps names to objects and applies `rule` to each.
fn check_properties(
    rel: &str,
    schema: &Value,
    rule: impl Fn(&str, &Map<String, Value>) -> Result<(), InvalidSkill>,
) -> Result<(), InvalidSkill> {
    let props = match schema.get("properties") {
        None => return Ok(()),
        Some(Value::Object(props)) => props,
        Some(_) => return invalid(format!("{rel}: 'properties' must be an object")),
    };
    for (key, prop) in props {
        let Value::Object(prop) = prop else {
            return invalid(format!("{rel}: property '{key}' must be a schema object"));
        };
        rule(key, prop)?;
    }
    Ok(())
}

fn declared_artifacts(value: &Value) -> Result<Vec<ArtifactSpec>, InvalidSkill> {
    let Value::Array(items) = value else {
        return invalid("runner.json: 'artifacts' must be an array");
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = |key: &str| item.get(key).and_then(Value::as_str).map(str::to_owned);
            let (Some(role), Some(pattern)) = (text("role"), text("pattern")) else {
                return invalid(format!(
                    "runner.json: artifacts[{i}] needs string 'role' and 'pattern'"
                ));
            };
            if role.trim().is_empty() || !is_safe_relative(&pattern) {
                return invalid(format!(
                    "runner.json: artifacts[{i}] needs a non-empty role and a relative pattern"
                ));
            }
            let required = match item.get("required") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return invalid(format!(
                        "runner.json: artifacts[{i}].required must be a boolean"
                    ));
                }
            };
            Ok(ArtifactSpec {
                role,
                pattern,
                mime: text("mime"),
                required,
            })
        })
        .collect()
}

/// Artifacts implied by output properties marked `x-type: artifact|file`.
fn infer_artifacts(output: &Value) -> Vec<ArtifactSpec> {
    let required: Vec<&str> = output
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(Value::Object(props)) = output.get("properties") else {
        return Vec::new();
    };
    props
        .iter()
        .filter(|(_, p)| {
            matches!(
                p.get("x-type").and_then(Value::as_str),
                Some("artifact" | "file")
            )
        })
        .map(|(key, p)| ArtifactSpec {
            role: p
                .get("x-role")
                .and_then(Value::as_str)
                .unwrap_or("output")
                .to_owned(),
            pattern: p
                .get("x-filename")
                .and_then(Value::as_str)
                .unwrap_or(key)
                .to_owned(),
            mime: None,
            required: required.contains(&key.as_str()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Writes a minimal valid skill named `id` under `root`, with `runner` merged over defaults.
    fn skill(root: &Path, id: &str, runner: Value) -> PathBuf {
        let dir = root.join(id);
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {id}\ndescription: test skill\n---\n# {id}\n"),
        )
        .unwrap();
        let mut base = json!({
            "id": id, "version": "1.0.0", "execution_modes": ["auto"],
            "schemas": {"input": "assets/input.schema.json", "parameter": "assets/parameter.schema.json",
                        "output": "assets/output.schema.json"}
        });
        for (k, v) in runner.as_object().unwrap() {
            base[k] = v.clone();
        }
        std::fs::write(dir.join("assets/runner.json"), base.to_string()).unwrap();
        std::fs::write(
            dir.join("assets/input.schema.json"),
            json!({"type": "object", "properties": {"doc": {"type": "string"},
                   "text": {"type": "string", "x-input-source": "inline"}}})
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.join("assets/parameter.schema.json"),
            json!({"type": "object"}).to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.join("assets/output.schema.json"),
            json!({"type": "object", "required": ["report"], "properties": {
                "report": {"type": "string", "x-type": "artifact", "x-filename": "report.md", "x-role": "report"},
                "extra": {"type": "string", "x-type": "file"},
                "summary": {"type": "string"}}})
            .to_string(),
        )
        .unwrap();
        dir
    }

    fn err(dir: &Path) -> String {
        load(dir, Rules::INSTALL).unwrap_err().0
    }

    #[test]
    fn valid_skill_gets_effective_engines_and_inferred_artifacts() {
        let root = tempfile::tempdir().unwrap();
        let m = load(&skill(root.path(), "demo", json!({})), Rules::INSTALL).unwrap();
        assert_eq!(m.id, "demo");
        assert_eq!(m.version.as_deref(), Some("1.0.0"));
        assert!(m.engines.is_empty());
        assert_eq!(
            m.effective_engines,
            vec![
                Engine::Codex,
                Engine::Gemini,
                Engine::Iflow,
                Engine::Claude,
                Engine::Opencode,
                Engine::Qwen,
                Engine::Kilo,
                Engine::Codebuddy
            ]
        );
        assert_eq!(
            m.artifacts,
            vec![
                ArtifactSpec {
                    role: "output".into(),
                    pattern: "extra".into(),
                    mime: None,
                    required: false
                },
                ArtifactSpec {
                    role: "report".into(),
                    pattern: "report.md".into(),
                    mime: None,
                    required: true
                },
            ]
        );
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        let root = tempfile::tempdir().unwrap();
        let dir = skill(
            root.path(),
            "many",
            json!({"entrypoint": {"script": ["python3", "scripts/gone.py"]},
                   "max_attempt": 0, "runtime": [], "mcp": {"required_servers": "x"}}),
        );
        let message = err(&dir);
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(lines.len(), 4, "{message}");
        for says in [
            "scripts/gone.py",
            "'max_attempt'",
            "'runtime'",
            "'mcp.required_servers'",
        ] {
            assert!(
                lines.iter().any(|l| l.contains(says)),
                "{says} in {message}"
            );
        }
    }

    #[test]
    fn script_engine_only_with_entrypoint_script() {
        let root = tempfile::tempdir().unwrap();
        let dir = skill(
            root.path(),
            "s",
            json!({"entrypoint": {"script": ["python3", "scripts/main.py"]}, "unsupport_engine": ["iflow"]}),
        );
        assert!(err(&dir).contains("names 'scripts/main.py', which the skill does not contain"));
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(dir.join("scripts/main.py"), "print('{}')").unwrap();
        let m = load(&dir, Rules::INSTALL).unwrap();
        assert!(m.effective_engines.contains(&Engine::Script));
        assert!(!m.effective_engines.contains(&Engine::Iflow));
        assert_eq!(m.script.unwrap(), vec!["python3", "scripts/main.py"]);

        let dir = skill(root.path(), "t", json!({"engines": ["script"]}));
        assert!(
            err(&dir).contains("'engines' lists 'script' but 'entrypoint.script' is not declared")
        );
    }

    #[test]
    fn each_rule_names_itself() {
        let root = tempfile::tempdir().unwrap();
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"engines": ["codex"], "unsupport_engine": ["codex"]}),
                "overlap: codex",
            ),
            (
                json!({"unsupport_engine": ["codex", "gemini", "iflow", "claude", "opencode", "qwen", "kilo", "codebuddy"]}),
                "effective engines are empty",
            ),
            (json!({"engines": ["gpt"]}), "unknown engine \"gpt\""),
            (
                json!({"mcp": {"servers": {}}}),
                "'mcp.servers' is not a setting",
            ),
            (
                json!({"mcp": {"required_servers": "papers"}}),
                "must be an array",
            ),
            (
                json!({"mcp": {"required_servers": ["a", "a"]}}),
                "names 'a' twice",
            ),
            (
                json!({"mcp": {"required_servers": [""]}}),
                "not a server id",
            ),
            (json!({"engines": []}), "'engines' must not be empty"),
            (
                json!({"execution_modes": []}),
                "'execution_modes' must be a non-empty array",
            ),
            (
                json!({"execution_modes": ["batch"]}),
                "\"batch\" is not a mode",
            ),
            (json!({"execution_modes": null}), "(it is missing)"),
            (
                json!({"version": "1.x"}),
                "version '1.x' is not a valid semantic version",
            ),
            (json!({"version": null}), "'version' is required"),
            (json!({"id": "other"}), "identity mismatch"),
            (json!({"id": ".archive"}), "is not a valid skill id"),
            (
                json!({"version": " 1.0.0"}),
                "is not a valid semantic version",
            ),
            (
                json!({"schemas": {"output": 1}}),
                "'schemas.output' must be a path string",
            ),
            (
                json!({"artifacts": {"role": "x"}}),
                "'artifacts' must be an array",
            ),
            (
                json!({"entrypoint": {"script": []}}),
                "'entrypoint.script' must be a non-empty argv array",
            ),
            (
                json!({"entrypoint": {"script": ["./run.sh"]}}),
                "names './run.sh', which the skill does not contain",
            ),
        ];
        for (i, (runner, expected)) in cases.into_iter().enumerate() {
            let id = format!("case{i}");
            let dir = skill(root.path(), &id, runner.clone());
            let message = err(&dir);
            assert!(
                message.contains(expected),
                "{runner}: got '{message}', want '{expected}'"
            );
        }
    }

    #[test]
    fn one_id_rule_for_jobs_packages_and_invoke() {
        for ok in [
            "echo",
            "file_search",
            "log_transform",
            "a",
            "0-x",
            &"a".repeat(64),
        ] {
            assert!(is_valid_id(ok), "{ok}");
        }
        for bad in [
            "",
            "Echo",
            "..x",
            ".archive",
            "-x",
            "_x",
            "a.b",
            "a/b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_hand_placed_skill_without_version_is_1_0_0_with_a_warning() {
        let root = tempfile::tempdir().unwrap();
        let dir = skill(root.path(), "plain", json!({"version": null}));
        let m = load(&dir, Rules::REGISTERED).unwrap();
        assert_eq!(m.version.as_deref(), Some("1.0.0"));
        assert_eq!(
            m.warnings,
            ["runner.json has no 'version'; the skill is treated as 1.0.0"]
        );
        assert_eq!(load(&dir, Rules::TEMPORARY).unwrap().version, None);
        assert!(err(&dir).contains("'version' is required"));
        let versioned = load(&skill(root.path(), "v", json!({})), Rules::REGISTERED).unwrap();
        assert!(versioned.warnings.is_empty());
    }

    #[test]
    fn schemas_with_outside_references_are_refused_naming_them() {
        let root = tempfile::tempdir().unwrap();
        for (i, target) in [
            "https://example.com/schemas/thing.json",
            "other.schema.json#/defs/x",
        ]
        .into_iter()
        .enumerate()
        {
            let dir = skill(root.path(), &format!("r{i}"), json!({}));
            std::fs::write(
                dir.join("assets/input.schema.json"),
                json!({"type": "object", "properties": {"t": {"$ref": target}}}).to_string(),
            )
            .unwrap();
            let message = err(&dir);
            assert!(
                message.contains(&format!("refers to '{target}' outside itself")),
                "{message}"
            );
        }
        // References within the document are fine.
        let dir = skill(root.path(), "local", json!({}));
        std::fs::write(
            dir.join("assets/input.schema.json"),
            json!({"type": "object", "$defs": {"s": {"type": "string"}},
                   "properties": {"t": {"$ref": "#/$defs/s"}}})
            .to_string(),
        )
        .unwrap();
        assert!(load(&dir, Rules::REGISTERED).is_ok());
    }

    #[test]
    fn schema_meta_rules() {
        let root = tempfile::tempdir().unwrap();
        let dir = skill(root.path(), "a", json!({}));
        std::fs::write(
            dir.join("assets/input.schema.json"),
            json!({"type": "object", "properties": {"u": {"x-input-source": "url"}}}).to_string(),
        )
        .unwrap();
        assert!(err(&dir).contains("x-input-source \"url\""));

        let dir = skill(root.path(), "b", json!({}));
        std::fs::write(
            dir.join("assets/output.schema.json"),
            json!({"type": "object", "properties": {"o": {"x-type": "blob"}}}).to_string(),
        )
        .unwrap();
        assert!(err(&dir).contains("x-type \"blob\""));

        let dir = skill(root.path(), "c", json!({}));
        std::fs::write(
            dir.join("assets/parameter.schema.json"),
            json!({"type": "array"}).to_string(),
        )
        .unwrap();
        assert!(err(&dir).contains("must declare \"type\": \"object\""));

        let dir = skill(root.path(), "d", json!({}));
        std::fs::write(
            dir.join("assets/parameter.schema.json"),
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}})
                .to_string(),
        )
        .unwrap();
        assert!(
            err(&dir).contains("is not a valid JSON Schema"),
            "{}",
            err(&dir)
        );
    }

    #[test]
    fn frontmatter_rules() {
        let name = |text: &str| skill_document(text, "x").map(|(name, ..)| name);
        assert_eq!(name("---\nname: x\n---\nbody").unwrap(), "x");
        let (found, _, findings) =
            skill_document("---\nname: x\ndescription: y\n---", "x").unwrap();
        assert_eq!((found.as_str(), findings.len()), ("x", 0));
        for (text, error) in [
            ("# no frontmatter", "must start with"),
            ("---\r\nname: x\r\n---\r\n", "LF"),
            ("---\nname: x\n", "not closed"),
            ("---\ntitle: x\n---\n", "no non-empty 'name'"),
            ("---\nname: x\ndescription: a: b\n---\n", "not valid YAML"),
        ] {
            assert!(name(text).unwrap_err().0.contains(error), "{text}");
        }
        // The specification's findings are warnings: a job skill may use `_` in its id.
        let (_, _, findings) = skill_document("---\nname: my_skill\n---\n", "my_skill").unwrap();
        assert_eq!(
            findings,
            [
                "SKILL.md (Agent Skills specification): name: must use only lower-case letters \
                 a-z, digits and hyphens",
                "SKILL.md (Agent Skills specification): description: is required",
            ]
        );
    }

    #[test]
    fn each_schema_falls_back_to_its_assets_file_and_only_output_is_required() {
        let root = tempfile::tempdir().unwrap();
        // No `schemas` at all: the assets files.
        let dir = skill(root.path(), "plain", json!({"schemas": null}));
        let loaded = load(&dir, Rules::INSTALL).unwrap();
        let paths = loaded.schemas.unwrap();
        assert_eq!(paths.input.as_deref(), Some("assets/input.schema.json"));
        assert_eq!(paths.output, "assets/output.schema.json");
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        // A declared path that is not there, or leaves the skill: the assets file, with a
        // warning.
        let dir = skill(
            root.path(),
            "moved",
            json!({"schemas": {"input": "../x.json", "parameter": "gone.json"}}),
        );
        let loaded = load(&dir, Rules::INSTALL).unwrap();
        assert_eq!(
            loaded.schemas.as_ref().unwrap().parameter.as_deref(),
            Some("assets/parameter.schema.json")
        );
        assert_eq!(loaded.warnings.len(), 2, "{:?}", loaded.warnings);
        // Without input and parameter schemas: any input, any parameter.
        std::fs::remove_file(dir.join("assets/input.schema.json")).unwrap();
        std::fs::remove_file(dir.join("assets/parameter.schema.json")).unwrap();
        let loaded = load(&dir, Rules::INSTALL).unwrap();
        let paths = loaded.schemas.as_ref().unwrap();
        assert_eq!((&paths.input, &paths.parameter), (&None, &None));
        assert!(
            loaded
                .schema_docs
                .input_checker()
                .messages(&json!({"anything": 1}))
                .is_empty()
        );
        // The output schema is required.
        std::fs::remove_file(dir.join("assets/output.schema.json")).unwrap();
        assert!(err(&dir).contains("missing required file assets/output.schema.json"));
    }

    #[test]
    fn missing_files_are_named() {
        let root = tempfile::tempdir().unwrap();
        let dir = skill(root.path(), "m", json!({}));
        std::fs::remove_file(dir.join("assets/output.schema.json")).unwrap();
        assert_eq!(err(&dir), "missing required file assets/output.schema.json");
        std::fs::remove_file(dir.join("assets/runner.json")).unwrap();
        // Without runner.json the folder is an Agent Skills standard skill.
        let standard = load(&dir, Rules::INSTALL).unwrap();
        assert_eq!(standard.format, SkillFormat::AgentSkill);
        std::fs::remove_file(dir.join("SKILL.md")).unwrap();
        assert_eq!(err(&dir), "missing required file SKILL.md");
        let root2 = tempfile::tempdir().unwrap();
        let dir = skill(root2.path(), "n", json!({"version": null}));
        let temp = load(&dir, Rules::TEMPORARY).unwrap();
        assert_eq!(temp.version, None);
    }
}
