//! Model lists: pinned snapshots per engine and CLI version, kept in the repo
//! (`crates/engines/src/models/<engine>-<version>.json`), and the list that applies to the CLI found.
//!
//! The snapshot used is the highest whose version is at most the detected CLI version; when
//! there is none (or the version is unknown or not semver) it is the highest, with a
//! `fallback_reason` (`no_match`, `cli_version_unknown`, `no_semver_match`).

use crate::clock::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One model an engine offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub id: String,
    #[serde(default)]
    pub display_name: String,
    #[serde(default)]
    pub deprecated: bool,
    #[serde(default)]
    pub notes: String,
    /// Reasoning efforts (`codex` takes `id@effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_effort: Option<Vec<String>>,
    /// The operator's provider that serves it (its `id` is `<provider_id>/<model>`); absent
    /// for the engine's own models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
}

/// The models of one engine as of one CLI version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub engine: String,
    pub cli_version: String,
    pub models: Vec<Model>,
    /// When an operator added it (`POST /v1/engines/{engine}/models/snapshots`); `None` for the
    /// snapshots shipped with the service.
    #[serde(default, skip_serializing)]
    pub added_at: Option<Timestamp>,
}

/// The snapshots shipped with the service.
const BUNDLED: [&str; 8] = [
    include_str!("models/codex-0.169.0.json"),
    include_str!("models/gemini-0.61.0.json"),
    include_str!("models/claude-2.1.329.json"),
    include_str!("models/opencode-1.18.33.json"),
    include_str!("models/qwen-0.24.4.json"),
    include_str!("models/iflow-0.3.0.json"),
    include_str!("models/kilo-7.7.7.json"),
    include_str!("models/codebuddy-2.118.2.json"),
];

pub fn bundled() -> Vec<Snapshot> {
    BUNDLED
        .iter()
        .map(|text| serde_json::from_str(text).expect("bundled model snapshots parse"))
        .collect()
}

/// The list that applies to an engine's CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ModelList {
    pub engine: String,
    pub cli_version_detected: Option<String>,
    pub snapshot_version_used: String,
    /// Always `pinned_snapshot`.
    pub source: String,
    pub fallback_reason: Option<String>,
    pub models: Vec<Model>,
}

/// The list for `engine` given the detected CLI version; `None` when no snapshot exists.
pub fn resolve(snapshots: &[Snapshot], engine: &str, detected: Option<&str>) -> Option<ModelList> {
    let mut versions: Vec<(semver::Version, &Snapshot)> = snapshots
        .iter()
        .filter(|s| s.engine == engine)
        .filter_map(|s| Some((semver::Version::parse(&s.cli_version).ok()?, s)))
        .collect();
    versions.sort_by(|a, b| a.0.cmp(&b.0));
    let (_, highest) = versions.last()?;
    let (chosen, reason) = match detected.map(|d| semver::Version::parse(d.trim())) {
        None => (*highest, Some("cli_version_unknown")),
        Some(Err(_)) => (*highest, Some("no_semver_match")),
        Some(Ok(v)) => match versions.iter().rev().find(|(s, _)| *s <= v) {
            Some((_, snapshot)) => (*snapshot, None),
            None => (*highest, Some("no_match")),
        },
    };
    Some(ModelList {
        engine: engine.to_owned(),
        cli_version_detected: detected.map(str::to_owned),
        snapshot_version_used: chosen.cli_version.clone(),
        source: "pinned_snapshot".into(),
        fallback_reason: reason.map(str::to_owned),
        models: chosen.models.clone(),
    })
}

/// One snapshot in an engine's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ManifestEntry {
    pub version: String,
    /// The snapshot's name, `models_<version>.json`.
    pub file: String,
    /// `bundled` (shipped with the service) or `added` (by an operator).
    pub source: &'static str,
    pub created_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Manifest {
    pub engine: String,
    /// Oldest CLI version first.
    pub snapshots: Vec<ManifestEntry>,
}

/// Every snapshot of an engine and the one that applies to its CLI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ManifestView {
    pub engine: String,
    pub cli_version_detected: Option<String>,
    pub manifest: Manifest,
    pub resolved_snapshot_version: String,
    pub resolved_snapshot_file: String,
    pub fallback_reason: Option<String>,
    pub models: Vec<Model>,
}

/// The manifest of `engine`, `None` when it has no snapshot.
pub fn manifest(
    snapshots: &[Snapshot],
    engine: &str,
    detected: Option<&str>,
) -> Option<ManifestView> {
    let list = resolve(snapshots, engine, detected)?;
    let mut entries: Vec<(Option<semver::Version>, ManifestEntry)> = snapshots
        .iter()
        .filter(|s| s.engine == engine)
        .map(|s| {
            let entry = ManifestEntry {
                version: s.cli_version.clone(),
                file: file_name(&s.cli_version),
                source: if s.added_at.is_some() {
                    "added"
                } else {
                    "bundled"
                },
                created_at: s.added_at,
            };
            (semver::Version::parse(&s.cli_version).ok(), entry)
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Some(ManifestView {
        engine: engine.to_owned(),
        cli_version_detected: list.cli_version_detected,
        manifest: Manifest {
            engine: engine.to_owned(),
            snapshots: entries.into_iter().map(|(_, e)| e).collect(),
        },
        resolved_snapshot_file: file_name(&list.snapshot_version_used),
        resolved_snapshot_version: list.snapshot_version_used,
        fallback_reason: list.fallback_reason,
        models: list.models,
    })
}

fn file_name(version: &str) -> String {
    format!("models_{version}.json")
}

/// Checks the models of a snapshot an operator adds: at least one, ids present and unique,
/// a display name (the id when left out), efforts named. Returns the models to store.
pub fn check_new_models(models: Vec<Model>) -> Result<Vec<Model>, String> {
    if models.is_empty() {
        return Err("models: at least one model is required".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    models
        .into_iter()
        .enumerate()
        .map(|(i, mut model)| {
            let id = model.id.as_str();
            if id.is_empty() || id.len() > 200 || id.chars().any(char::is_whitespace) {
                return Err(format!(
                    "models[{i}].id: '{}' is not a model id (1-200 characters, no spaces)",
                    model.id
                ));
            }
            if !seen.insert(id.to_owned()) {
                return Err(format!("models[{i}].id: '{id}' is listed twice"));
            }
            if model.provider_id.is_some() {
                return Err(format!(
                    "models[{i}].provider_id: a provider's models come from the provider \
                     (PUT /v1/management/engines/{{engine}}/custom-providers/{{provider_id}})"
                ));
            }
            if model.display_name.trim().is_empty() {
                model.display_name = id.to_owned();
            }
            if let Some(efforts) = &model.supported_effort
                && efforts
                    .iter()
                    .any(|e| e.trim().is_empty() || e.contains('@'))
            {
                return Err(format!(
                    "models[{i}].supported_effort: efforts are non-empty names without '@'"
                ));
            }
            Ok(model)
        })
        .collect()
}

/// The engine options a model string selects, or why it is refused. `name@effort` names a
/// reasoning effort the model supports.
pub fn select(list: &ModelList, requested: &str) -> Result<Value, String> {
    let (name, effort) = match requested.split_once('@') {
        Some((name, effort)) => (name, Some(effort)),
        None => (requested, None),
    };
    let Some(model) = list.models.iter().find(|m| m.id == name) else {
        let known: Vec<&str> = list.models.iter().map(|m| m.id.as_str()).collect();
        return Err(format!(
            "model '{name}' is not in the model list of engine '{}' (snapshot {}): {}",
            list.engine,
            list.snapshot_version_used,
            known.join(", ")
        ));
    };
    match (effort, &model.supported_effort) {
        (None, _) => Ok(json!({"model": name})),
        (Some(effort), Some(efforts)) if efforts.iter().any(|e| e == effort) => {
            Ok(json!({"model": name, "model_reasoning_effort": effort}))
        }
        (Some(effort), Some(efforts)) => Err(format!(
            "model '{name}' does not support reasoning effort '{effort}' (supported: {})",
            efforts.join(", ")
        )),
        (Some(_), None) => Err(format!(
            "model '{name}' of engine '{}' takes no reasoning effort ('@...')",
            list.engine
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(engine: &str, version: &str, ids: &[&str]) -> Snapshot {
        Snapshot {
            engine: engine.into(),
            cli_version: version.into(),
            models: ids
                .iter()
                .map(|id| Model {
                    id: (*id).into(),
                    display_name: (*id).into(),
                    deprecated: false,
                    notes: String::new(),
                    supported_effort: Some(vec!["low".into(), "high".into()]),
                    provider_id: None,
                })
                .collect(),
            added_at: None,
        }
    }

    #[test]
    fn the_highest_snapshot_not_above_the_cli_applies() {
        let all = [
            snapshot("codex", "0.100.0", &["old"]),
            snapshot("codex", "0.169.0", &["new"]),
            snapshot("gemini", "1.0.0", &["g"]),
        ];
        let pick = |v: Option<&str>| resolve(&all, "codex", v).unwrap();
        assert_eq!(pick(Some("0.150.0")).snapshot_version_used, "0.100.0");
        assert_eq!(pick(Some("0.169.0")).models[0].id, "new");
        assert_eq!(pick(Some("0.200.1")).fallback_reason, None);
        let low = pick(Some("0.1.0"));
        assert_eq!(
            (
                low.snapshot_version_used.as_str(),
                low.fallback_reason.as_deref()
            ),
            ("0.169.0", Some("no_match"))
        );
        assert_eq!(
            pick(None).fallback_reason.as_deref(),
            Some("cli_version_unknown")
        );
        assert_eq!(
            pick(Some("dev-build")).fallback_reason.as_deref(),
            Some("no_semver_match")
        );
        assert!(resolve(&all, "qwen", None).is_none());
    }

    #[test]
    fn models_and_efforts_are_checked() {
        let list = resolve(
            &[snapshot("codex", "1.0.0", &["m"])],
            "codex",
            Some("1.0.0"),
        )
        .unwrap();
        assert_eq!(select(&list, "m").unwrap(), json!({"model": "m"}));
        assert_eq!(
            select(&list, "m@high").unwrap(),
            json!({"model": "m", "model_reasoning_effort": "high"})
        );
        assert!(
            select(&list, "m@ultra")
                .unwrap_err()
                .contains("does not support")
        );
        assert!(
            select(&list, "x")
                .unwrap_err()
                .contains("not in the model list")
        );
    }

    #[test]
    fn bundled_snapshots_cover_every_agent_engine() {
        let all = bundled();
        for engine in crate::Engine::ALL
            .iter()
            .filter(|e| **e != crate::Engine::Script)
        {
            assert!(resolve(&all, engine.as_str(), None).is_some(), "{engine}");
        }
    }
}
