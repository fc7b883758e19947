//! `runtime_options`: the allow-list of the reference, with types checked.
//!
//! Parsed once, when a request is created: the request stores the parsed struct (its canonical
//! JSON), and every later reader gets the struct back through serde.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock::Timestamp;
use crate::retry::RetryPolicy;

/// Default wait for a user's reply in interactive runs.
pub const DEFAULT_SESSION_TIMEOUT_SEC: u64 = 1200;

/// `auto` runs straight through; `interactive` may stop to ask its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum ExecutionMode {
    Auto,
    Interactive,
}

impl ExecutionMode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Parsed runtime options; they never change what a run computes, so the cache ignores them
/// (a run given secrets skips the cache, see [`RuntimeOptions::has_secrets`]).
/// Deserializing runs [`RuntimeOptions::parse`]: unknown keys are refused and every error
/// names its key. The stored and shown form holds no secret: `env` as `{NAME: {"redacted":
/// true}}`, `preamble_prompt` as `{"redacted": true, "sha256", "length"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct RuntimeOptions {
    /// A verbosity count (the reference's tools send `0`, `1`, `2`; `true` is 1). Accepted for
    /// compatibility: the logs already hold everything a turn printed, so it changes nothing.
    pub verbose: u64,
    pub no_cache: bool,
    pub debug: bool,
    pub debug_keep_temp: bool,
    pub execution_mode: ExecutionMode,
    /// `false` (the reference's later `interactive_auto_reply: true`): a question nobody
    /// answers within the timeout is decided by the runner.
    pub interactive_require_user_reply: bool,
    /// The wait for a reply (the later `interactive_reply_timeout_sec`).
    pub session_timeout_sec: u64,
    /// A turn's own hard timeout, at most the operator's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hard_timeout_seconds: Option<u64>,
    /// The names of `env`, whose values are [`RunSecrets`].
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "redacted_env")]
    pub env: Vec<String>,
    /// Whether a `preamble_prompt` came (the text is a [`RunSecrets`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preamble_prompt: Option<Preamble>,
    /// Accepted for the reference's clients, which send it for a feedback form of their own;
    /// it changes nothing here.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub collect_skill_run_feedback: bool,
    /// The run starts from a copy of an earlier run's workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceReuse>,
    /// A JSON Schema (an object) the answer of a standard Agent Skills skill must match: the
    /// result's `data` is then that JSON instead of `{"text": ...}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// How many times an agent's answer that is no JSON or breaks the output schema is sent
    /// back to it to mend (0: never); the service's default when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_repair_rounds: Option<u32>,
    /// The other skills the request named with its top-level `skills` (kept here with the
    /// request; a client sends them there, not in `runtime_options`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// How a failure that may pass is tried again (the top-level `retry`, or this key).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "retry_value"
    )]
    pub retry: Option<RetryPolicy>,
    /// The run's priority, 1 (first) to 4 (the top-level `priority`; 2 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The run starts no earlier (the top-level `run_after` or `delay_seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_after: Option<Timestamp>,
    /// Where the run's end is sent, signed with its tenant's webhook secret (the top-level
    /// `callback_url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// The schedule whose tick made the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<String>,
    /// That tick's time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_tick_at: Option<Timestamp>,
}

fn retry_value<S: serde::Serializer>(retry: &Option<RetryPolicy>, s: S) -> Result<S::Ok, S::Error> {
    retry.map(RetryPolicy::to_value).serialize(s)
}

/// `workspace: {mode: "reuse", request_id, file_bindings}`: the run's workspace starts as a
/// copy of the workspace of request `request_id`'s run (which is left as it is), and each
/// binding makes a file of an earlier run one of this run's file inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceReuse {
    pub mode: WorkspaceMode,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_bindings: Vec<FileBinding>,
}

/// The only workspace mode besides a fresh workspace (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    Reuse,
}

/// A file of request `source_request_id`'s workspace (`source_path`) given to this run as its
/// file input `input_key` (`target_path`, relative to `uploads/`, as the reference names it;
/// here a file input is always `uploads/<input_key>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileBinding {
    pub input_key: String,
    pub source_request_id: String,
    pub source_path: String,
    pub target_path: String,
}

impl WorkspaceReuse {
    fn read(raw: &Value) -> Result<Option<Self>, String> {
        let Value::Object(map) = raw else {
            return Err("runtime_options.workspace must be an object".into());
        };
        match map.get("mode") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(mode)) if mode == "reuse" => {}
            Some(other) => {
                return Err(format!(
                    "runtime_options.workspace.mode must be \"reuse\" (or left out for a fresh \
                     workspace), got {other}"
                ));
            }
        }
        let text = |value: Option<&Value>, field: &str| match value {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            _ => Err(format!(
                "runtime_options.workspace.{field} must be a non-empty string"
            )),
        };
        let request_id = text(map.get("request_id"), "request_id")?;
        let bindings = match map.get("file_bindings") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => {
                return Err("runtime_options.workspace.file_bindings must be an array".into());
            }
        };
        let mut file_bindings = Vec::new();
        for (i, item) in bindings.iter().enumerate() {
            let field = |name: &str| text(item.get(name), &format!("file_bindings[{i}].{name}"));
            let binding = FileBinding {
                input_key: field("input_key")?,
                source_request_id: field("source_request_id")?,
                source_path: field("source_path")?,
                target_path: field("target_path")?,
            };
            for (name, path) in [
                ("source_path", &binding.source_path),
                ("target_path", &binding.target_path),
            ] {
                if !is_relative_file_path(path) {
                    return Err(format!(
                        "runtime_options.workspace.file_bindings[{i}].{name} '{path}' must be a \
                         relative path of a file, without '.', '..' or a leading '/'"
                    ));
                }
            }
            if file_bindings
                .iter()
                .any(|b: &FileBinding| b.input_key == binding.input_key)
            {
                return Err(format!(
                    "runtime_options.workspace.file_bindings binds input '{}' twice",
                    binding.input_key
                ));
            }
            file_bindings.push(binding);
        }
        Ok(Some(Self {
            mode: WorkspaceMode::Reuse,
            request_id,
            file_bindings,
        }))
    }
}

/// A path of `/`-separated names, none empty, `.` or `..`, not ending in `/`.
fn is_relative_file_path(path: &str) -> bool {
    !path.starts_with('/')
        && !path.contains('\\')
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// What is kept of a preamble with the request: that there was one, its digest and length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preamble {
    pub redacted: bool,
    pub sha256: String,
    pub length: usize,
}

/// What `runtime_options` carries that is never kept with the request, written to a log or
/// returned: the values of `env` and the text of `preamble_prompt`. The service keeps them
/// apart (readable by itself only) until the run ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSecrets {
    pub env: std::collections::BTreeMap<String, String>,
    pub preamble_prompt: Option<String>,
}

impl RunSecrets {
    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.preamble_prompt.is_none()
    }
}

fn redacted_env<S: serde::Serializer>(names: &[String], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(names.len()))?;
    for name in names {
        map.serialize_entry(name, &serde_json::json!({"redacted": true}))?;
    }
    map.end()
}

/// At most this many `env` variables.
pub const MAX_ENV_VARS: usize = 64;
/// At most this many characters in an `env` value.
pub const MAX_ENV_VALUE_CHARS: usize = 8192;
/// At most this many characters in a `preamble_prompt`.
pub const MAX_PREAMBLE_CHARS: usize = 8000;

/// Variables a client may not set: the turn's own places, and the service's settings.
const PROTECTED_ENV: [&str; 15] = [
    "PATH",
    "HOME",
    "SHELL",
    "PWD",
    "OLDPWD",
    "USER",
    "USERNAME",
    "LOGNAME",
    "TMPDIR",
    "TEMP",
    "TMP",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
];

/// Flags: `true`/`false`, or `1`/`0` as older clients send them.
const BOOLEANS: [&str; 6] = [
    "no_cache",
    "debug",
    "debug_keep_temp",
    "interactive_require_user_reply",
    "interactive_auto_reply",
    "collect_skill_run_feedback",
];

/// The other keys.
const OTHERS: [&str; 11] = [
    "verbose",
    "execution_mode",
    "session_timeout_sec",
    "interactive_reply_timeout_sec",
    "hard_timeout_seconds",
    "env",
    "preamble_prompt",
    "workspace",
    "output_schema",
    "output_repair_rounds",
    "retry",
];

/// The most repair rounds a request may ask for.
pub const MAX_REPAIR_ROUNDS: u32 = 5;

/// Keys of the stored form only (set by the service from other fields of the request).
const STORED: [&str; 6] = [
    "skills",
    "priority",
    "run_after",
    "callback_url",
    "schedule_id",
    "schedule_tick_at",
];

impl RuntimeOptions {
    /// Every option a request may send (besides the legacy `*_wait_timeout_sec`).
    pub fn names() -> impl Iterator<Item = &'static str> {
        OTHERS.into_iter().chain(BOOLEANS)
    }

    /// Parses `runtime_options` as stored or shown (secrets redacted); the error names the
    /// offending key.
    pub fn parse(raw: Option<&Value>) -> Result<Self, String> {
        Self::read(raw, false).map(|(options, _)| options)
    }

    /// Parses the `runtime_options` of a new request: the secrets must come with it, and are
    /// returned apart.
    pub fn parse_request(raw: Option<&Value>) -> Result<(Self, RunSecrets), String> {
        Self::read(raw, true)
    }

    /// The file inputs a reused workspace's bindings fill (they need no upload).
    pub fn bound_inputs(&self) -> Vec<String> {
        self.workspace
            .iter()
            .flat_map(|w| w.file_bindings.iter().map(|b| b.input_key.clone()))
            .collect()
    }

    /// Whether the run needs its [`RunSecrets`]. Such a run skips the result cache both ways:
    /// its result may depend on them, and must not be handed to a request without them.
    pub fn has_secrets(&self) -> bool {
        !self.env.is_empty() || self.preamble_prompt.is_some()
    }

    fn read(raw: Option<&Value>, fresh: bool) -> Result<(Self, RunSecrets), String> {
        let empty = Map::new();
        let map = match raw {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(_) => return Err("runtime_options must be an object".into()),
        };
        let unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| {
                !BOOLEANS.contains(k)
                    && !OTHERS.contains(k)
                    && !is_legacy_timeout(k)
                    && (fresh || !STORED.contains(k))
            })
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "Unknown runtime_options: {}; allowed: {}, {}",
                unknown.join(", "),
                OTHERS.join(", "),
                BOOLEANS.join(", ")
            ));
        }
        let flag = |key: &str| match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(Some(false)),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(Some(true)),
            Some(other) => Err(format!(
                "runtime_options.{key} must be a boolean (or 0/1), got {other}"
            )),
        };
        let verbose = match map.get("verbose") {
            None | Some(Value::Null) => 0,
            Some(Value::Bool(b)) => u64::from(*b),
            Some(v) => v.as_u64().ok_or_else(|| {
                format!(
                    "runtime_options.verbose must be a boolean or a count (0, 1, 2, …), got {v}"
                )
            })?,
        };
        let execution_mode = match map.get("execution_mode") {
            None | Some(Value::Null) => ExecutionMode::Auto,
            Some(Value::String(s)) if s == "auto" => ExecutionMode::Auto,
            Some(Value::String(s)) if s == "interactive" => ExecutionMode::Interactive,
            Some(other) => {
                return Err(format!(
                    "runtime_options.execution_mode must be \"auto\" or \"interactive\", got {other}"
                ));
            }
        };
        let positive = |key: &str| match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                format!("runtime_options.{key} must be a positive integer, got {v}")
            }),
        };
        let mut session_timeout_sec = positive("session_timeout_sec")?;
        for key in map
            .keys()
            .filter(|k| is_legacy_timeout(k) || *k == "interactive_reply_timeout_sec")
        {
            let other = positive(key)?;
            session_timeout_sec = session_timeout_sec.or(other);
        }
        let require_reply = flag("interactive_require_user_reply")?;
        let auto_reply = flag("interactive_auto_reply")?;
        if let (Some(require), Some(auto)) = (require_reply, auto_reply)
            && require == auto
        {
            return Err(format!(
                "runtime_options.interactive_auto_reply ({auto}) contradicts \
                 interactive_require_user_reply ({require}): send one of them"
            ));
        }
        let mut secrets = RunSecrets::default();
        let env = match map.get("env") {
            None | Some(Value::Null) => Vec::new(),
            Some(env) => {
                secrets.env = read_env(env, fresh)?;
                match env {
                    Value::Object(m) => m.keys().cloned().collect(),
                    _ => Vec::new(),
                }
            }
        };
        let preamble_prompt = match map.get("preamble_prompt") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => {
                let text = read_preamble(text)?;
                let digest = Preamble {
                    redacted: true,
                    sha256: sha256_hex(&text),
                    length: text.chars().count(),
                };
                secrets.preamble_prompt = Some(text);
                Some(digest)
            }
            Some(stored) if !fresh => Some(
                serde_json::from_value::<Preamble>(stored.clone())
                    .ok()
                    .filter(|p| p.redacted)
                    .ok_or("runtime_options.preamble_prompt must be a string")?,
            ),
            Some(_) => return Err("runtime_options.preamble_prompt must be a string".into()),
        };
        let options = Self {
            verbose,
            no_cache: flag("no_cache")?.unwrap_or(false),
            debug: flag("debug")?.unwrap_or(false),
            debug_keep_temp: flag("debug_keep_temp")?.unwrap_or(false),
            execution_mode,
            interactive_require_user_reply: require_reply
                .or(auto_reply.map(|auto| !auto))
                .unwrap_or(true),
            session_timeout_sec: session_timeout_sec.unwrap_or(DEFAULT_SESSION_TIMEOUT_SEC),
            hard_timeout_seconds: positive("hard_timeout_seconds")?,
            env,
            preamble_prompt,
            collect_skill_run_feedback: flag("collect_skill_run_feedback")?.unwrap_or(false),
            workspace: match map.get("workspace") {
                None | Some(Value::Null) => None,
                Some(raw) => WorkspaceReuse::read(raw)?,
            },
            output_schema: match map.get("output_schema") {
                None | Some(Value::Null) => None,
                Some(schema @ Value::Object(_)) => Some(schema.clone()),
                Some(other) => {
                    return Err(format!(
                        "runtime_options.output_schema must be a JSON Schema object like \
                         {{\"type\": \"object\", \"properties\": {{...}}}}, got {other}"
                    ));
                }
            },
            output_repair_rounds: match map.get("output_repair_rounds") {
                None | Some(Value::Null) => None,
                Some(v) => Some(
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| *n <= MAX_REPAIR_ROUNDS)
                        .ok_or_else(|| {
                            format!(
                                "runtime_options.output_repair_rounds must be an integer from 0 \
                                 (no repair) to {MAX_REPAIR_ROUNDS}, got {v}"
                            )
                        })?,
                ),
            },
            skills: stored(map, "skills")?.unwrap_or_default(),
            retry: match map.get("retry") {
                None | Some(Value::Null) => None,
                Some(raw) => Some(RetryPolicy::read(raw, "runtime_options.retry")?),
            },
            priority: stored(map, "priority")?,
            run_after: stored(map, "run_after")?,
            callback_url: stored(map, "callback_url")?,
            schedule_id: stored(map, "schedule_id")?,
            schedule_tick_at: stored(map, "schedule_tick_at")?,
        };
        Ok((options, secrets))
    }
}

/// A key of the stored form only, as the service wrote it.
fn stored<T: serde::de::DeserializeOwned>(
    map: &Map<String, Value>,
    key: &str,
) -> Result<Option<T>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| format!("runtime_options.{key} is not as the service stores it: {e}")),
    }
}

/// `env`: names a turn may be given, with string values (a stored request has `{"redacted":
/// true}` in their place; a new one must not).
fn read_env(
    env: &Value,
    fresh: bool,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let Value::Object(env) = env else {
        return Err("runtime_options.env must be an object of NAME: \"value\"".into());
    };
    if env.len() > MAX_ENV_VARS {
        return Err(format!(
            "runtime_options.env has {} variables; at most {MAX_ENV_VARS} are allowed",
            env.len()
        ));
    }
    let mut values = std::collections::BTreeMap::new();
    for (name, value) in env {
        let well_formed = name.len() <= 128
            && name
                .bytes()
                .enumerate()
                .all(|(i, b)| b == b'_' || b.is_ascii_uppercase() || (i > 0 && b.is_ascii_digit()));
        if !well_formed || name.is_empty() {
            return Err(format!(
                "runtime_options.env name '{name}' is not allowed: names are upper-case letters, \
                 digits and '_', not starting with a digit, at most 128 characters"
            ));
        }
        if PROTECTED_ENV.contains(&name.as_str()) || name.starts_with("SKILL_RUNNER_") {
            return Err(format!(
                "runtime_options.env.{name} is set by the service for every turn and cannot be \
                 given"
            ));
        }
        match value {
            Value::String(text) => {
                if text.chars().count() > MAX_ENV_VALUE_CHARS {
                    return Err(format!(
                        "runtime_options.env.{name} is longer than {MAX_ENV_VALUE_CHARS} characters"
                    ));
                }
                if text.contains('\0') {
                    return Err(format!(
                        "runtime_options.env.{name} contains a NUL character, which no \
                         environment variable can hold"
                    ));
                }
                values.insert(name.clone(), text.clone());
            }
            Value::Object(m) if !fresh && m.get("redacted") == Some(&Value::Bool(true)) => {}
            _ => {
                return Err(format!("runtime_options.env.{name} must be a string"));
            }
        }
    }
    Ok(values)
}

/// A preamble's text, line ends made `\n` and trimmed; refused when empty, too long, or
/// holding control characters besides newlines and tabs.
fn read_preamble(text: &str) -> Result<String, String> {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let text = text.trim();
    if text.is_empty() {
        return Err("runtime_options.preamble_prompt is empty".into());
    }
    if text.chars().count() > MAX_PREAMBLE_CHARS {
        return Err(format!(
            "runtime_options.preamble_prompt is longer than {MAX_PREAMBLE_CHARS} characters"
        ));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(
            "runtime_options.preamble_prompt holds control characters (only newlines and tabs \
             may appear)"
                .into(),
        );
    }
    Ok(text.to_owned())
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self::parse(None).expect("no options are valid options")
    }
}

impl TryFrom<Value> for RuntimeOptions {
    type Error = String;
    fn try_from(raw: Value) -> Result<Self, String> {
        Self::parse(Some(&raw))
    }
}

/// Older clients send `<something>_wait_timeout_sec`; it folds into `session_timeout_sec`.
fn is_legacy_timeout(key: &str) -> bool {
    key.ends_with("_wait_timeout_sec")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_and_types() {
        let o = RuntimeOptions::parse(None).unwrap();
        assert_eq!(o.execution_mode, ExecutionMode::Auto);
        assert!(o.interactive_require_user_reply);
        assert_eq!(o.session_timeout_sec, 1200);
        let o = RuntimeOptions::parse(Some(&json!({
            "no_cache": true, "debug": true, "execution_mode": "interactive",
            "interactive_wait_timeout_sec": 30
        })))
        .unwrap();
        assert!(o.no_cache && o.debug);
        assert_eq!(o.execution_mode, ExecutionMode::Interactive);
        assert_eq!(o.session_timeout_sec, 30);
    }

    #[test]
    fn verbose_is_a_count_and_flags_take_zero_or_one() {
        let o =
            RuntimeOptions::parse(Some(&json!({"verbose": 2, "no_cache": 1, "debug": 0}))).unwrap();
        assert_eq!(o.verbose, 2);
        assert!(o.no_cache && !o.debug);
        let o = RuntimeOptions::parse(Some(&json!({"verbose": true}))).unwrap();
        assert_eq!(o.verbose, 1);
        for bad in [
            json!({"verbose": -1}),
            json!({"verbose": "2"}),
            json!({"verbose": 1.5}),
        ] {
            let e = RuntimeOptions::parse(Some(&bad)).unwrap_err();
            assert!(e.contains("runtime_options.verbose"), "{e}");
        }
        let e = RuntimeOptions::parse(Some(&json!({"debug": 2}))).unwrap_err();
        assert!(
            e.contains("runtime_options.debug must be a boolean (or 0/1)"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = RuntimeOptions::parse(Some(&json!({"nope": 1, "debug": true}))).unwrap_err();
        assert!(e.starts_with("Unknown runtime_options: nope"), "{e}");
        let e = RuntimeOptions::parse(Some(&json!({"no_cache": "yes"}))).unwrap_err();
        assert!(
            e.contains("runtime_options.no_cache must be a boolean"),
            "{e}"
        );
        let e = RuntimeOptions::parse(Some(&json!({"execution_mode": "batch"}))).unwrap_err();
        assert!(e.contains("execution_mode"), "{e}");
        let e = RuntimeOptions::parse(Some(&json!({"session_timeout_sec": 0}))).unwrap_err();
        assert!(e.contains("session_timeout_sec"), "{e}");
        assert!(RuntimeOptions::parse(Some(&json!([]))).is_err());
    }

    #[test]
    fn an_output_schema_is_an_object_and_skills_are_the_services_to_set() {
        let schema = json!({"type": "object", "required": ["n"]});
        let (o, _) =
            RuntimeOptions::parse_request(Some(&json!({"output_schema": schema}))).unwrap();
        assert_eq!(o.output_schema.as_ref(), Some(&schema));
        let stored = serde_json::to_value(&o).unwrap();
        assert_eq!(RuntimeOptions::parse(Some(&stored)).unwrap(), o);
        let e = RuntimeOptions::parse_request(Some(&json!({"output_schema": "x"}))).unwrap_err();
        assert!(
            e.contains("runtime_options.output_schema must be a JSON Schema object"),
            "{e}"
        );
        let e = RuntimeOptions::parse_request(Some(&json!({"skills": ["a"]}))).unwrap_err();
        assert!(e.starts_with("Unknown runtime_options: skills"), "{e}");
        let o = RuntimeOptions::parse(Some(&json!({"skills": ["a", "b"]}))).unwrap();
        assert_eq!(o.skills, ["a", "b"]);
    }

    #[test]
    fn secrets_come_apart_and_the_stored_form_hides_them() {
        let raw = json!({"env": {"API_TOKEN": "s3cret-value", "MODE": "x"},
                         "preamble_prompt": "  Be brief.\r\nAlways.  ",
                         "interactive_auto_reply": true, "interactive_reply_timeout_sec": 30,
                         "hard_timeout_seconds": 60});
        let (o, secrets) = RuntimeOptions::parse_request(Some(&raw)).unwrap();
        assert_eq!(secrets.env["API_TOKEN"], "s3cret-value");
        assert_eq!(
            secrets.preamble_prompt.as_deref(),
            Some("Be brief.\nAlways.")
        );
        assert!(!o.interactive_require_user_reply);
        assert_eq!(o.session_timeout_sec, 30);
        assert_eq!(o.hard_timeout_seconds, Some(60));
        assert!(o.has_secrets());
        let stored = serde_json::to_value(&o).unwrap();
        assert_eq!(
            stored["env"],
            json!({"API_TOKEN": {"redacted": true}, "MODE": {"redacted": true}})
        );
        assert_eq!(stored["preamble_prompt"]["length"], 17);
        assert!(!stored.to_string().contains("s3cret") && !stored.to_string().contains("brief"));
        assert_eq!(
            serde_json::from_value::<RuntimeOptions>(stored.clone()).unwrap(),
            o
        );
        // A new request must bring the values themselves.
        let e = RuntimeOptions::parse_request(Some(&stored)).unwrap_err();
        assert!(
            e.contains("runtime_options.env.API_TOKEN must be a string"),
            "{e}"
        );
    }

    #[test]
    fn env_names_values_and_counts_are_checked() {
        for (env, says) in [
            (json!({"lower": "x"}), "name 'lower' is not allowed"),
            (json!({"1ABC": "x"}), "name '1ABC' is not allowed"),
            (json!({"PATH": "/x"}), "env.PATH is set by the service"),
            (
                json!({"SKILL_RUNNER_DATA_DIR": "/x"}),
                "env.SKILL_RUNNER_DATA_DIR is set by the service",
            ),
            (json!({"A": 1}), "env.A must be a string"),
            (json!({"A": "a\u{0}b"}), "env.A contains a NUL"),
            (json!(["A"]), "env must be an object"),
        ] {
            let e = RuntimeOptions::parse_request(Some(&json!({"env": env}))).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        let many: Map<String, Value> = (0..65).map(|i| (format!("V{i}"), json!("x"))).collect();
        let e = RuntimeOptions::parse_request(Some(&json!({"env": many}))).unwrap_err();
        assert!(e.contains("at most 64"), "{e}");
        let e = RuntimeOptions::parse_request(Some(&json!({"preamble_prompt": " "}))).unwrap_err();
        assert!(e.contains("preamble_prompt is empty"), "{e}");
        let e = RuntimeOptions::parse_request(Some(&json!({
            "interactive_auto_reply": true, "interactive_require_user_reply": true
        })))
        .unwrap_err();
        assert!(e.contains("contradicts"), "{e}");
    }

    #[test]
    fn a_reused_workspace_names_its_source_and_safe_paths() {
        let raw = json!({"workspace": {"mode": "reuse", "request_id": "r1", "file_bindings": [
            {"input_key": "doc", "source_request_id": "r0", "source_path": "artifacts/a.md",
             "target_path": "doc"}]}});
        let o = RuntimeOptions::parse(Some(&raw)).unwrap();
        let reuse = o.workspace.clone().unwrap();
        assert_eq!(reuse.request_id, "r1");
        assert_eq!(reuse.file_bindings[0].source_path, "artifacts/a.md");
        let stored = serde_json::to_value(&o).unwrap();
        assert_eq!(stored["workspace"], raw["workspace"]);
        assert_eq!(serde_json::from_value::<RuntimeOptions>(stored).unwrap(), o);
        assert_eq!(
            RuntimeOptions::parse(Some(&json!({"workspace": {}})))
                .unwrap()
                .workspace,
            None
        );
        for (workspace, says) in [
            (
                json!({"mode": "share", "request_id": "r"}),
                "mode must be \"reuse\"",
            ),
            (
                json!({"mode": "reuse"}),
                "workspace.request_id must be a non-empty string",
            ),
            (
                json!({"mode": "reuse", "request_id": "r", "file_bindings": [{"input_key": "a",
                "source_request_id": "r", "source_path": "../x", "target_path": "a"}]}),
                "source_path '../x' must be a relative path",
            ),
            (
                json!({"mode": "reuse", "request_id": "r", "file_bindings": [{"input_key": "a"}]}),
                "file_bindings[0].source_request_id must be a non-empty string",
            ),
        ] {
            let e = RuntimeOptions::parse(Some(&json!({"workspace": workspace}))).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn the_stored_form_reads_back_the_same() {
        let o = RuntimeOptions::parse(Some(&json!({"verbose": 2, "no_cache": 1}))).unwrap();
        let stored = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<RuntimeOptions>(&stored).unwrap(), o);
        let e = serde_json::from_str::<RuntimeOptions>(r#"{"debug": "x"}"#).unwrap_err();
        assert!(e.to_string().contains("runtime_options.debug"), "{e}");
    }
}
