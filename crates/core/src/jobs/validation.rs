//! Checks on a create request, in the reference's order, each with its status and `detail`.

use serde_json::{Map, Value, json};
use skill_runner_types::run_options::RuntimeOptions;

use crate::engines::models::{self, ModelList};
use crate::engines::{Engine, Engines};
use crate::error::{Error, Result};
use crate::skill::{InputSource, SkillFormat, SkillManifest, manifest, standard};

/// The engine to run with ([`SkillManifest::default_engine`] when omitted). An engine whose CLI
/// is not logged in is refused unless `waits_for_login` (the run then waits in `waiting_auth`).
pub fn engine(
    skill: &SkillManifest,
    requested: Option<&str>,
    engines: &Engines,
    waits_for_login: bool,
) -> Result<Engine> {
    let requested = requested.map(str::trim).filter(|e| !e.is_empty());
    let chosen = match requested {
        Some(name) => Engine::parse(name),
        None => Some(skill.default_engine()),
    };
    let name = requested.unwrap_or_else(|| chosen.map_or("", Engine::as_str));
    let Some(engine) = chosen.filter(|e| skill.effective_engines.contains(e)) else {
        return Err(Error::invalid(json!({
            "code": "SKILL_ENGINE_UNSUPPORTED",
            "message": format!("Skill '{}' does not support engine '{name}'", skill.id),
            "declared_engines": skill.engines,
            "unsupport_engine": skill.unsupport_engine,
            "effective_engines": skill.effective_engines,
            "requested_engine": name,
        })));
    };
    if !engines.active(engine) {
        return Err(Error::invalid(json!({
            "code": "ENGINE_LEGACY",
            "message": format!(
                "Engine '{engine}' is legacy (as in the reference's v0.7) and takes no new run: \
                 choose another of the skill's engines ({}), or set \
                 SKILL_RUNNER_LEGACY_ENGINES={engine} to allow it; its earlier runs stay readable",
                skill
                    .effective_engines
                    .iter()
                    .filter(|e| engines.active(**e))
                    .map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "requested_engine": name,
        })));
    }
    if let Err(missing) = engines.locate(engine) {
        return Err(Error::invalid(json!({
            "code": "ENGINE_CLI_MISSING",
            "message": missing,
            "requested_engine": name,
        })));
    }
    if !waits_for_login && engines.needs_login(engine) {
        return Err(Error::conflict(json!({
            "code": "ENGINE_NOT_LOGGED_IN",
            "message": not_logged_in(engines, engine),
            "requested_engine": name,
        })));
    }
    Ok(engine)
}

/// Why a run of `engine` cannot start now, and the ways to log it in.
pub fn not_logged_in(engines: &Engines, engine: Engine) -> String {
    let files = engines
        .cli(engine)
        .map(|cli| {
            crate::engines::login::import_spec(cli)
                .iter()
                .map(|f| format!("'{}'", f.name))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let import = if files.is_empty() {
        String::new()
    } else {
        format!(
            "import its login files ({files}) with POST \
             /v1/management/engines/{engine}/auth/import, or "
        )
    };
    format!(
        "Engine '{engine}' is not logged in: {import}import an API key with POST \
         /v1/management/engines/{engine}/auth/sessions {{\"auth_method\": \"api_key\"}}, or set \
         SKILL_RUNNER_{}_API_KEY",
        engine.as_str().to_ascii_uppercase()
    )
}

pub fn execution_mode(skill: &SkillManifest, options: &RuntimeOptions) -> Result<()> {
    if skill.execution_modes.contains(&options.execution_mode) {
        return Ok(());
    }
    Err(Error::invalid(json!({
        "code": "SKILL_EXECUTION_MODE_UNSUPPORTED",
        "message": format!(
            "Skill '{}' does not support execution_mode '{}'",
            skill.id,
            options.execution_mode.as_str()
        ),
        "declared_execution_modes": skill.execution_modes,
        "requested_execution_mode": options.execution_mode,
    })))
}

/// The engine options the model selects, checked against the engine's model list (`list`,
/// the snapshot for its CLI). `script` runs no model, so it takes none.
pub fn model(engine: Engine, model: Option<&str>, list: Option<&ModelList>) -> Result<Value> {
    match (engine, model.map(str::trim).filter(|m| !m.is_empty()), list) {
        (_, None, _) => Ok(json!({})),
        (Engine::Script, Some(m), _) => Err(Error::invalid(format!(
            "Model validation failed: engine 'script' runs the skill's own entrypoint and takes no model (got '{m}')"
        ))),
        (e, Some(m), None) => Err(Error::invalid(format!(
            "Model validation failed: engine '{e}' has no model list (got '{m}')"
        ))),
        (_, Some(m), Some(list)) => models::select(list, m)
            .map_err(|e| Error::invalid(format!("Model validation failed: {e}"))),
    }
}

/// Inline inputs: only keys the schema declares `inline`, valid against their properties, and
/// every required inline key present.
pub fn inline_input(skill: &SkillManifest, input: &Value, bound: &[String]) -> Result<()> {
    let empty = Map::new();
    let given = match input {
        Value::Null => &empty,
        Value::Object(m) => m,
        _ => return Err(input_error(vec!["input must be an object".into()])),
    };
    if skill.schemas.as_ref().is_some_and(|p| p.input.is_none()) {
        // A skill without an input schema takes any input, as the reference.
        return Ok(());
    }
    let sources = skill.input_sources();
    let mut problems = Vec::new();
    // A bound file input's value is its binding's target path, checked with the binding.
    let given: Map<String, Value> = given
        .iter()
        .filter(|(k, _)| !bound.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, value) in &given {
        match sources.iter().find(|(k, _)| k == key) {
            Some((_, InputSource::Inline)) => {}
            // The reference's v0.7 way: the file's path in the upload zip.
            Some((_, InputSource::File)) if upload_path(value).is_some() => {}
            Some((_, InputSource::File)) => problems.push(format!(
                "'{key}' is a file input: its value is the file's path in the upload zip \
                 (relative, e.g. \"papers/a.pdf\"), or leave it out and name the zip entry \
                 '{key}'"
            )),
            None => problems.push(format!("'{key}' is not an input of this skill")),
        }
    }
    if problems.is_empty() {
        let inline: Map<String, Value> = given
            .into_iter()
            .filter(|(k, _)| {
                sources
                    .iter()
                    .any(|(s, source)| s == k && *source == InputSource::Inline)
            })
            .collect();
        problems = skill
            .schema_docs
            .inline_input_checker(|| inline_schema(skill, &sources))
            .messages(&Value::Object(inline));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(input_error(problems))
    }
}

/// A file input's value as a path under `uploads/`: relative, plain names only.
fn upload_path(value: &Value) -> Option<&str> {
    let text = value.as_str()?;
    let path = std::path::Path::new(text);
    (!text.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_))))
    .then_some(text)
}

/// The most skills one run gets: its own and the others its request names.
pub const MAX_RUN_SKILLS: usize = 8;

/// The skills of one run (the main one first): few enough, runnable on `engine`, and within
/// `max_bytes` together.
pub fn run_skills(
    skills: &[std::sync::Arc<SkillManifest>],
    engine: Engine,
    max_bytes: u64,
) -> Result<()> {
    if skills.len() > MAX_RUN_SKILLS {
        return Err(Error::invalid(json!({
            "code": "RUN_SKILLS_TOO_MANY",
            "message": format!(
                "skills names {} other skills; a run gets at most {MAX_RUN_SKILLS} skills in all \
                 (skill_id and {} more)",
                skills.len() - 1,
                MAX_RUN_SKILLS - 1
            ),
        })));
    }
    if let Some(other) = skills
        .iter()
        .find(|s| !s.effective_engines.contains(&engine))
    {
        return Err(Error::invalid(json!({
            "code": "SKILL_ENGINE_UNSUPPORTED",
            "message": format!(
                "Skill '{}' (named in skills) does not run on engine '{engine}'; it runs on: {}",
                other.id,
                other.effective_engines.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", ")
            ),
        })));
    }
    let total: u64 = skills.iter().map(|s| s.size_bytes).sum();
    if total > max_bytes {
        return Err(Error::invalid(json!({
            "code": "RUN_SKILLS_TOO_LARGE",
            "message": format!(
                "the run's skills hold {total} bytes together; at most {max_bytes} are allowed \
                 (SKILL_RUNNER_RUN_SKILLS_MAX_BYTES): name fewer skills"
            ),
        })));
    }
    Ok(())
}

/// The most bytes of a runtime `output_schema`, as JSON.
pub const MAX_OUTPUT_SCHEMA_BYTES: usize = 64 * 1024;

/// A caller's `runtime_options.output_schema`: for standard skills only (a `runner.json`
/// skill declares its own), held to the rules of a skill's own schemas.
pub fn output_schema(skill: &SkillManifest, options: &RuntimeOptions) -> Result<()> {
    let Some(schema) = &options.output_schema else {
        return Ok(());
    };
    if skill.format != SkillFormat::AgentSkill {
        return Err(Error::invalid(json!({
            "code": "OUTPUT_SCHEMA_UNSUPPORTED",
            "message": format!(
                "Skill '{}' declares its own output schema (runner.json); \
                 runtime_options.output_schema is for Agent Skills standard skills",
                skill.id
            ),
        })));
    }
    let size = schema.to_string().len();
    if size > MAX_OUTPUT_SCHEMA_BYTES {
        return Err(Error::invalid(format!(
            "runtime_options.output_schema is {size} bytes of JSON; at most \
             {MAX_OUTPUT_SCHEMA_BYTES} are accepted"
        )));
    }
    manifest::check_schema(schema, "runtime_options.output_schema").map_err(|e| Error::invalid(e.0))
}

/// The files a standard skill's `input.files` names must be paths inside the upload zip.
pub fn named_files(skill: &SkillManifest, input: &Value) -> Result<()> {
    if skill.format != SkillFormat::AgentSkill {
        return Ok(());
    }
    let problems: Vec<String> = standard::named_files(input)
        .into_iter()
        .filter(|name| upload_path(&Value::from(*name)).is_none())
        .map(|name| {
            format!(
                "input.files names '{name}': each entry is a file's relative path in the upload \
                 zip, e.g. \"docs/a.pdf\""
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(input_error(problems))
    }
}

/// Whether a request of `skill` with `input` takes an upload: a file input that a reused
/// workspace's binding (`bound`) does not fill, or a standard skill's named `files`.
pub fn takes_files(skill: &SkillManifest, input: &Value, bound: &[String]) -> bool {
    match skill.format {
        SkillFormat::AgentSkill => !standard::named_files(input).is_empty(),
        SkillFormat::RunnerJson => skill
            .input_sources()
            .iter()
            .any(|(key, s)| *s == InputSource::File && !bound.contains(key)),
    }
}

/// A required file input an upload lacks.
#[derive(Debug)]
pub struct MissingUpload {
    /// The request's `input` named the file's path in the zip (the reference's v0.7 way, and a
    /// standard skill's `files`): the upload itself is refused. Otherwise (a file named after
    /// its input, the older way) the upload is taken and the run fails, as in the reference.
    pub declared: bool,
    /// Names the input, the path expected and what the upload holds.
    pub problem: String,
}

/// The required file inputs of `skill` its `uploads` lack (given the request's `input`; those
/// in `bound` come from a reused workspace instead).
pub fn missing_uploads(
    skill: &SkillManifest,
    input: &Value,
    bound: &[String],
    uploads: &std::path::Path,
    held: &[String],
) -> Vec<MissingUpload> {
    let required: Vec<&str> = skill
        .schema_docs
        .input
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let held = if held.is_empty() {
        "nothing".to_owned()
    } else {
        held.join(", ")
    };
    if skill.format == SkillFormat::AgentSkill {
        return standard::named_files(input)
            .into_iter()
            .filter(|name| !crate::run_folder::is_plain_file(&uploads.join(name)))
            .map(|name| MissingUpload {
                declared: true,
                problem: format!(
                    "input.files names '{name}', and the upload has no such file (it holds: \
                     {held}): name the zip entry '{name}'"
                ),
            })
            .collect();
    }
    skill
        .input_sources()
        .into_iter()
        .filter(|(key, source)| {
            *source == InputSource::File && required.contains(&key.as_str()) && !bound.contains(key)
        })
        .filter(|(key, _)| crate::runner::uploaded_file(uploads, key, input.get(key)).is_none())
        .map(|(key, _)| {
            let declared = input.get(&key).and_then(upload_path);
            let expected = declared.unwrap_or(&key).to_owned();
            MissingUpload {
                declared: declared.is_some(),
                problem: format!(
                    "input '{key}' is a required file, and the upload has no '{expected}' (it \
                     holds: {held}): name the zip entry '{expected}'"
                ),
            }
        })
        .collect()
}

fn input_error(problems: Vec<String>) -> Error {
    Error::invalid(format!("Input validation failed: {problems:?}"))
}

/// The input schema restricted to its inline properties.
fn inline_schema(skill: &SkillManifest, sources: &[(String, InputSource)]) -> Value {
    let is_inline = |key: &str| {
        sources
            .iter()
            .any(|(k, s)| k == key && *s == InputSource::Inline)
    };
    let mut schema = skill.schema_docs.input.clone();
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.retain(|k, _| is_inline(k));
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|k| k.as_str().is_some_and(is_inline));
    }
    schema
}

pub fn parameter(skill: &SkillManifest, parameter: &Value) -> Result<()> {
    let instance = match parameter {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    };
    let problems = skill.schema_docs.parameter_checker().messages(&instance);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "Parameter validation failed: {problems:?}"
        )))
    }
}
