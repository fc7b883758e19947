//! Checks on a create request, in the reference's order, each with its status and `detail`.

use serde_json::{Map, Value, json};
use skill_runner_types::run_options::RuntimeOptions;

use crate::engines::models::{self, ModelList};
use crate::engines::{Engine, Engines};
use crate::error::{Error, Result};
use crate::providers::Provider;
use crate::skill::{InputSource, SkillFormat, SkillManifest, manifest, standard};

/// The engine to run with ([`SkillManifest::default_engine`] when omitted): one the skill
/// runs on and the service takes new runs of. Whether it can run now is [`engine_ready`].
pub fn engine(skill: &SkillManifest, requested: Option<&str>, engines: &Engines) -> Result<Engine> {
    let requested = requested.map(str::trim).filter(|e| !e.is_empty());
    let chosen = match requested {
        Some(name) => Engine::parse(name),
        None => Some(skill.default_engine()),
    };
    let name = requested.unwrap_or_else(|| chosen.map_or("", Engine::as_str));
    if chosen.is_none() {
        // A name no engine has is the caller's slip, not a limit of the skill.
        let known: Vec<&str> = Engine::ALL.iter().map(|e| e.as_str()).collect();
        return Err(Error::invalid(json!({
            "code": "ENGINE_UNKNOWN",
            "message": format!(
                "There is no engine '{name}': the engines are {}; skill '{}' runs on {}",
                known.join(", "),
                skill.id,
                skill.effective_engines.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", ")
            ),
            "known_engines": known,
            "declared_engines": skill.engines,
            "effective_engines": skill.effective_engines,
            "requested_engine": name,
        })));
    }
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
    Ok(engine)
}

/// Whether a run of `engine` can start: its CLI is there, and it is logged in (unless the run
/// goes to a provider, which has its own key, or `waits_for_login`: the run then waits in
/// `waiting_auth`). Checked after the request's own fields, as the reference.
pub fn engine_ready(
    engine: Engine,
    engines: &Engines,
    waits_for_login: bool,
    to_provider: bool,
) -> Result<()> {
    let name = engine.as_str();
    if let Err(missing) = engines.locate(engine) {
        return Err(Error::invalid(json!({
            "code": "ENGINE_CLI_MISSING",
            "message": missing,
            "requested_engine": name,
        })));
    }
    if !waits_for_login && !to_provider && engines.needs_login(engine) {
        return Err(Error::conflict(json!({
            "code": "ENGINE_NOT_LOGGED_IN",
            "message": not_logged_in(engines, engine),
            "requested_engine": name,
        })));
    }
    Ok(())
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

/// What a request asks of its engine's model, as the client sent it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelAsk<'a> {
    /// A model name, `<model>@<effort>`, or `<provider_id>/<model>[@<effort>]`.
    pub model: Option<&'a str>,
    /// Beats a provider named in `model`.
    pub provider_id: Option<&'a str>,
    /// Beats an effort named in `model`; `default` asks for none.
    pub effort: Option<&'a str>,
}

/// The provider ids an engine has without custom providers: those its model list names
/// (`openai/gpt-5.5`), or the vendor whose API its CLI calls.
fn builtin_providers(engine: Engine, list: Option<&ModelList>) -> Vec<String> {
    let mut ids: Vec<String> = match engine {
        Engine::Codex => vec!["openai".into()],
        Engine::Claude => vec!["anthropic".into()],
        Engine::Gemini => vec!["google".into()],
        _ => Vec::new(),
    };
    for model in list.map_or(&[][..], |l| &l.models) {
        if let Some((provider, _)) = model.id.split_once('/')
            && !ids.iter().any(|i| i == provider)
        {
            ids.push(provider.to_owned());
        }
    }
    ids
}

fn model_error(problem: String) -> Error {
    Error::invalid(format!("Model validation failed: {problem}"))
}

/// The engine options a request's model, provider and effort select (`model`,
/// `model_reasoning_effort`, and `provider_id` for a custom provider), checked against the
/// engine's model list (`list`, the snapshot for its CLI) or the provider's models. Anything
/// that does not fit is refused naming what would: no model, provider or effort is dropped.
/// `script` runs no model, so it takes none.
pub fn model(
    engine: Engine,
    ask: ModelAsk<'_>,
    list: Option<&ModelList>,
    providers: &[Provider],
) -> Result<Value> {
    let given = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let (mut model, mut effort) = (given(ask.model), None);
    if let Some((name, suffix)) = model.clone().as_deref().and_then(|m| m.split_once('@')) {
        model = Some(name.to_owned());
        effort = Some(suffix.to_ascii_lowercase());
    }
    if let Some(asked) = given(ask.effort) {
        effort = Some(asked.to_ascii_lowercase());
    }
    effort = effort.filter(|e| e != "default");
    let mut provider = given(ask.provider_id).map(|p| p.to_ascii_lowercase());
    match (&model, &provider) {
        // A provider named twice: the field wins, the model's prefix goes.
        (Some(m), Some(p)) => {
            if let Some(rest) = m.strip_prefix(&format!("{p}/")) {
                model = Some(rest.to_owned());
            }
        }
        // `<provider>/<model>` names a custom provider (model ids of some engines hold a '/').
        (Some(m), None) => {
            if let Some((p, rest)) = m.split_once('/')
                && providers.iter().any(|x| x.id == p.to_ascii_lowercase())
            {
                provider = Some(p.to_ascii_lowercase());
                model = Some(rest.to_owned());
            }
        }
        _ => {}
    }
    if engine == Engine::Script {
        return match (&model, &provider, &effort) {
            (None, None, None) => Ok(json!({})),
            _ => Err(model_error(
                "engine 'script' runs the skill's own entrypoint and takes no model, provider or \
                 effort"
                    .into(),
            )),
        };
    }
    if let Some(p) = &provider
        && let Some(custom) = providers.iter().find(|x| &x.id == p)
    {
        let name = model.unwrap_or_else(|| custom.default_model.clone());
        let Some(listed) = custom.models.iter().find(|m| m.id == name) else {
            return Err(model_error(format!(
                "model '{name}' is not a model of provider '{p}' of engine '{engine}': {}",
                custom
                    .models
                    .iter()
                    .map(|m| m.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let mut options = json!({"model": name, "provider_id": p});
        if let Some(effort) = effort {
            check_effort(&name, &effort, listed.supported_effort.as_deref())?;
            options["model_reasoning_effort"] = json!(effort);
        }
        return Ok(options);
    }
    if let Some(p) = &provider {
        let builtin = builtin_providers(engine, list);
        if !builtin.contains(p) {
            let mut allowed = builtin;
            allowed.extend(providers.iter().map(|x| x.id.clone()));
            return Err(Error::invalid(json!({
                "code": "ENGINE_PROVIDER_INVALID",
                "message": format!(
                    "provider_id '{p}' is not a provider of engine '{engine}'; allowed: {}{}",
                    if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") },
                    if crate::providers::supported(engine) {
                        format!(" (add one with PUT /v1/management/engines/{engine}/custom-providers/{p})")
                    } else {
                        String::new()
                    }
                ),
                "engine": engine,
                "field": "provider_id",
                "allowed_values": allowed,
            })));
        }
        // A provider whose models the list names with their provider (`openai/gpt-5.5`).
        if let Some(m) = &model
            && list.is_some_and(|l| l.models.iter().any(|x| x.id == format!("{p}/{m}")))
        {
            model = Some(format!("{p}/{m}"));
        }
    }
    let Some(name) = model else {
        return match effort {
            None => Ok(json!({})),
            Some(effort) => Err(model_error(format!(
                "effort '{effort}' needs a model: name one of engine '{engine}''s models that \
                 takes efforts (GET /v1/engines/{engine}/models lists each model's \
                 supported_effort)"
            ))),
        };
    };
    let Some(list) = list else {
        return Err(model_error(format!(
            "engine '{engine}' has no model list (got '{name}')"
        )));
    };
    let requested = match &effort {
        Some(effort) => format!("{name}@{effort}"),
        None => name,
    };
    models::select(list, &requested).map_err(model_error)
}

/// `effort` against the efforts model `name` takes.
fn check_effort(name: &str, effort: &str, supported: Option<&[String]>) -> Result<()> {
    match supported {
        Some(efforts) if efforts.iter().any(|e| e == effort) => Ok(()),
        Some(efforts) => Err(model_error(format!(
            "model '{name}' does not support reasoning effort '{effort}' (supported: {})",
            efforts.join(", ")
        ))),
        None => Err(model_error(format!(
            "model '{name}' takes no reasoning effort (its provider lists none for it)"
        ))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::config::Endpoint;
    use crate::engines::models::Model;
    use crate::providers::ProviderModel;

    fn list(engine: &str, ids: &[(&str, Option<&[&str]>)]) -> ModelList {
        ModelList {
            engine: engine.into(),
            cli_version_detected: None,
            snapshot_version_used: "1.0.0".into(),
            source: "pinned_snapshot".into(),
            fallback_reason: None,
            models: ids
                .iter()
                .map(|(id, efforts)| Model {
                    id: (*id).into(),
                    display_name: (*id).into(),
                    deprecated: false,
                    notes: String::new(),
                    supported_effort: efforts.map(|e| e.iter().map(|x| (*x).into()).collect()),
                    provider_id: None,
                })
                .collect(),
        }
    }

    fn gateway() -> Provider {
        Provider {
            id: "gw".into(),
            endpoint: Endpoint {
                base_url: Some("http://127.0.0.1:9/v1".into()),
                api_key: Some("k".to_owned().into()),
            },
            models: vec![
                ProviderModel {
                    id: "small".into(),
                    supported_effort: None,
                },
                ProviderModel {
                    id: "big".into(),
                    supported_effort: Some(vec!["low".into(), "high".into()]),
                },
            ],
            default_model: "small".into(),
        }
    }

    fn ask<'a>(
        model: Option<&'a str>,
        provider_id: Option<&'a str>,
        effort: Option<&'a str>,
    ) -> ModelAsk<'a> {
        ModelAsk {
            model,
            provider_id,
            effort,
        }
    }

    fn refusal(result: Result<Value>) -> String {
        match result {
            Err(Error::Invalid(detail)) => detail.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_custom_provider_is_named_by_field_or_prefix_and_its_models_and_efforts_checked() {
        let codex = list("codex", &[("gpt-5.5", Some(&["low", "high"]))]);
        let providers = [gateway()];
        let run = |a| model(Engine::Codex, a, Some(&codex), &providers);
        assert_eq!(
            run(ask(None, Some("GW"), None)).unwrap(),
            json!({"model": "small", "provider_id": "gw"}),
            "the provider's default model"
        );
        assert_eq!(
            run(ask(Some("gw/big@low"), None, Some("high"))).unwrap(),
            json!({"model": "big", "provider_id": "gw", "model_reasoning_effort": "high"}),
            "the prefix names the provider; the effort field beats the suffix"
        );
        assert_eq!(
            run(ask(Some("gw/big"), Some("gw"), Some("default"))).unwrap(),
            json!({"model": "big", "provider_id": "gw"}),
            "`default` asks for no effort"
        );
        assert!(refusal(run(ask(Some("huge"), Some("gw"), None))).contains("small, big"));
        assert!(
            refusal(run(ask(Some("small"), Some("gw"), Some("low"))))
                .contains("takes no reasoning effort")
        );
        assert!(refusal(run(ask(Some("big"), Some("gw"), Some("max")))).contains("low, high"));
        let unknown = refusal(run(ask(None, Some("other"), None)));
        assert!(
            unknown.contains("ENGINE_PROVIDER_INVALID") && unknown.contains("[\"openai\",\"gw\"]"),
            "{unknown}"
        );
        // The engine's own provider and models, as before.
        assert_eq!(
            run(ask(Some("gpt-5.5"), Some("openai"), Some("high"))).unwrap(),
            json!({"model": "gpt-5.5", "model_reasoning_effort": "high"})
        );
        assert!(refusal(run(ask(None, None, Some("high")))).contains("needs a model"));
    }

    #[test]
    fn a_provider_of_the_model_list_names_its_models() {
        let opencode = list(
            "opencode",
            &[("openai/gpt-5.5", None), ("anthropic/claude", None)],
        );
        let run = |a| model(Engine::Opencode, a, Some(&opencode), &[]);
        assert_eq!(
            run(ask(Some("gpt-5.5"), Some("openai"), None)).unwrap(),
            json!({"model": "openai/gpt-5.5"})
        );
        assert_eq!(
            run(ask(Some("openai/gpt-5.5"), None, None)).unwrap(),
            json!({"model": "openai/gpt-5.5"})
        );
        let unknown = refusal(run(ask(Some("x"), Some("google"), None)));
        assert!(unknown.contains("openai, anthropic"), "{unknown}");
        assert!(
            refusal(model(
                Engine::Script,
                ask(None, Some("gw"), None),
                None,
                &[]
            ))
            .contains("takes no model")
        );
    }
}
