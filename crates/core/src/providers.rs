//! The operator's model providers (`/v1/management/engines/{engine}/custom-providers`): an
//! engine may reach several endpoints beside the one its settings or login give it, each with
//! its own key, models and default model. A job names one with `provider_id` (or a model
//! `<provider_id>/<model>`), and its turns are pointed at that endpoint with that key.
//!
//! The reference keeps such providers for `claude` only, in a file, and shows their keys; here
//! every engine whose CLI takes a base URL has them, they are kept in the store (every node
//! sees them), and a key is write-only: a view says whether one is set, an upsert without one
//! keeps the stored key.

use serde::{Deserialize, Serialize};
use serde_json::json;
use skill_runner_types::engine::Engine;

use crate::clock::Timestamp;
use crate::engines::config::Endpoint;
use crate::error::{Error, Result};
use crate::store::{Store, StoredProvider};

/// The engines whose CLI can be pointed at a provider's endpoint.
pub const ENGINES: [Engine; 5] = [
    Engine::Codex,
    Engine::Claude,
    Engine::Opencode,
    Engine::Qwen,
    Engine::Kilo,
];

/// Longest provider id.
const MAX_ID: usize = 64;
/// Most models one provider lists.
const MAX_MODELS: usize = 200;

/// A model as a provider lists it: a name, or a name and the reasoning efforts it takes.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ModelInput {
    Name(String),
    Model {
        id: String,
        #[serde(default)]
        supported_effort: Option<Vec<String>>,
    },
}

/// A provider as a client writes it (`PUT .../custom-providers/{provider_id}`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderInput {
    pub provider_id: String,
    /// Write-only; left out of an update, the stored key is kept.
    #[serde(default)]
    pub api_key: Option<String>,
    pub base_url: String,
    pub models: Vec<ModelInput>,
    /// The model a job gets when it names the provider and no model (default: the first).
    #[serde(default)]
    pub default_model: Option<String>,
}

/// One model of a provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderModel {
    pub id: String,
    /// The reasoning efforts a job may ask of it; none when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_effort: Option<Vec<String>>,
}

/// What is stored of a provider beside its key.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Definition {
    base_url: String,
    models: Vec<ProviderModel>,
    default_model: String,
}

/// A provider as the API shows it: the reference's fields (`provider_id`, `base_url`,
/// `models` as names) without the key, and ours beside them.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProviderView {
    pub provider_id: String,
    pub base_url: String,
    pub models: Vec<String>,
    /// Each model's reasoning efforts, for those that take any.
    pub supported_effort: std::collections::BTreeMap<String, Vec<String>>,
    pub default_model: String,
    /// Whether a key is stored (never shown).
    pub api_key_configured: bool,
    pub updated_at: Timestamp,
}

/// A provider a turn is pointed at.
#[derive(Debug, Clone)]
pub struct Provider {
    pub id: String,
    pub endpoint: Endpoint,
    pub models: Vec<ProviderModel>,
    pub default_model: String,
}

impl Provider {
    fn of(stored: StoredProvider) -> Result<Self> {
        let definition: Definition = serde_json::from_str(&stored.definition)
            .map_err(|e| Error::Internal(anyhow::anyhow!("provider definition: {e}")))?;
        Ok(Self {
            id: stored.provider_id,
            endpoint: Endpoint {
                base_url: Some(definition.base_url),
                api_key: Some(stored.api_key.into()),
            },
            models: definition.models,
            default_model: definition.default_model,
        })
    }
}

/// Whether `engine` takes providers.
pub fn supported(engine: Engine) -> bool {
    ENGINES.contains(&engine)
}

fn unsupported(engine: &str) -> Error {
    Error::Unprocessable(json!(format!(
        "Engine '{engine}' does not support custom providers (supported: {})",
        ENGINES.map(Engine::as_str).join(", ")
    )))
}

/// A provider id as stored: trimmed and lower-cased, as the reference.
fn normalized_id(id: &str) -> String {
    id.trim().to_ascii_lowercase()
}

fn view(stored: StoredProvider) -> Result<ProviderView> {
    let updated_at = stored.updated_at;
    let provider = Provider::of(stored)?;
    Ok(ProviderView {
        provider_id: provider.id,
        base_url: provider.endpoint.base_url.unwrap_or_default(),
        supported_effort: provider
            .models
            .iter()
            .filter_map(|m| Some((m.id.clone(), m.supported_effort.clone()?)))
            .collect(),
        models: provider.models.into_iter().map(|m| m.id).collect(),
        default_model: provider.default_model,
        api_key_configured: true,
        updated_at,
    })
}

/// The providers of `engine` (none for an engine that takes none).
pub async fn list(store: &Store, engine: Engine) -> Result<Vec<ProviderView>> {
    if !supported(engine) {
        return Ok(Vec::new());
    }
    store
        .providers(engine.as_str())
        .await?
        .into_iter()
        .map(view)
        .collect()
}

/// Every provider of `engine`, as a job names them.
pub async fn all(store: &Store, engine: Engine) -> Result<Vec<Provider>> {
    store
        .providers(engine.as_str())
        .await?
        .into_iter()
        .map(Provider::of)
        .collect()
}

/// The provider `id` of `engine`, as a turn uses it.
pub async fn get(store: &Store, engine: Engine, id: &str) -> Result<Option<Provider>> {
    let id = normalized_id(id);
    let found = store
        .providers(engine.as_str())
        .await?
        .into_iter()
        .find(|p| p.provider_id == id);
    found.map(Provider::of).transpose()
}

/// Creates or replaces provider `path_id` of `engine`; the view, and whether it was created.
pub async fn put(
    store: &Store,
    engine: &str,
    path_id: &str,
    input: ProviderInput,
) -> Result<(ProviderView, bool)> {
    let id = normalized_id(path_id);
    if normalized_id(&input.provider_id) != id {
        return Err(Error::invalid("provider_id path and body must match"));
    }
    let engine = Engine::parse(engine)
        .filter(|e| supported(*e))
        .ok_or_else(|| unsupported(engine))?;
    let problem = |m: String| Error::Unprocessable(json!(m));
    if id.is_empty()
        || id.len() > MAX_ID
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(problem(format!(
            "provider_id must be 1 to {MAX_ID} letters, digits, '-', '_' or '.' (no '/'), got '{}'",
            input.provider_id
        )));
    }
    let base_url = input.base_url.trim().trim_end_matches('/').to_owned();
    let parsed = url::Url::parse(&base_url).ok();
    if !parsed.is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some()) {
        return Err(problem(format!(
            "base_url must be an http:// or https:// URL with a host, got '{}'",
            input.base_url
        )));
    }
    let models = models(input.models).map_err(problem)?;
    let default_model = match input.default_model.map(|m| m.trim().to_owned()) {
        None => models[0].id.clone(),
        Some(m) if models.iter().any(|x| x.id == m) => m,
        Some(m) => {
            return Err(problem(format!(
                "default_model '{m}' is not one of models: {}",
                names(&models)
            )));
        }
    };
    let stored_key = store
        .providers(engine.as_str())
        .await?
        .into_iter()
        .find(|p| p.provider_id == id)
        .map(|p| p.api_key);
    let api_key = match input.api_key.map(|k| k.trim().to_owned()) {
        Some(key) if !key.is_empty() && !key.chars().any(char::is_whitespace) => key,
        Some(_) => return Err(problem("api_key must be one word without spaces".into())),
        None => stored_key
            .ok_or_else(|| problem(format!("api_key is required for the new provider '{id}'")))?,
    };
    let definition = Definition {
        base_url,
        models,
        default_model,
    };
    let stored = StoredProvider {
        engine: engine.as_str().to_owned(),
        provider_id: id,
        definition: serde_json::to_string(&definition).map_err(anyhow::Error::from)?,
        api_key,
        updated_at: Timestamp::now(),
    };
    let created = store.put_provider(&stored).await?;
    Ok((view(stored)?, created))
}

/// Removes provider `id` of `engine`; whether it was there.
pub async fn delete(store: &Store, engine: &str, id: &str) -> Result<(String, bool)> {
    let engine = Engine::parse(engine)
        .filter(|e| supported(*e))
        .ok_or_else(|| unsupported(engine))?;
    let id = normalized_id(id);
    let deleted = store.delete_provider(engine.as_str(), &id).await?;
    Ok((id, deleted))
}

fn names(models: &[ProviderModel]) -> String {
    models
        .iter()
        .map(|m| m.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The models of an upsert, checked: at least one, unique names without '/' or '@', efforts
/// non-empty names.
fn models(input: Vec<ModelInput>) -> std::result::Result<Vec<ProviderModel>, String> {
    if input.is_empty() || input.len() > MAX_MODELS {
        return Err(format!("models must list 1 to {MAX_MODELS} models"));
    }
    let mut models: Vec<ProviderModel> = Vec::new();
    for (i, model) in input.into_iter().enumerate() {
        let (id, supported_effort) = match model {
            ModelInput::Name(id) => (id, None),
            ModelInput::Model {
                id,
                supported_effort,
            } => (id, supported_effort),
        };
        let id = id.trim().to_owned();
        if id.is_empty() || id.contains(['/', '@']) || id.chars().any(char::is_whitespace) {
            return Err(format!(
                "models[{i}]: a model name is one word without '/' or '@', got '{id}'"
            ));
        }
        if models.iter().any(|m| m.id == id) {
            return Err(format!("models[{i}]: '{id}' is listed twice"));
        }
        if supported_effort
            .as_ref()
            .is_some_and(|e| e.is_empty() || e.iter().any(|e| !effort_name(e)))
        {
            return Err(format!(
                "models[{i}].supported_effort: list one or more effort names (e.g. low, medium, high)"
            ));
        }
        models.push(ProviderModel {
            id,
            supported_effort,
        });
    }
    Ok(models)
}

fn effort_name(effort: &str) -> bool {
    !effort.is_empty()
        && effort
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
