//! `runtime_options`: the allow-list of the reference, with types checked.
//!
//! Parsed once, when a request is created: the request stores the parsed struct (its canonical
//! JSON), and every later reader gets the struct back through serde.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// Parsed runtime options; they never change what a run computes, so the cache ignores them.
/// Deserializing runs [`RuntimeOptions::parse`]: unknown keys are refused and every error
/// names its key.
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
    pub interactive_require_user_reply: bool,
    pub session_timeout_sec: u64,
}

/// Flags: `true`/`false`, or `1`/`0` as older clients send them.
const BOOLEANS: [&str; 4] = [
    "no_cache",
    "debug",
    "debug_keep_temp",
    "interactive_require_user_reply",
];

impl RuntimeOptions {
    /// Parses `runtime_options`; the error names the offending key.
    pub fn parse(raw: Option<&Value>) -> Result<Self, String> {
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
                    && *k != "verbose"
                    && *k != "execution_mode"
                    && *k != "session_timeout_sec"
                    && !is_legacy_timeout(k)
            })
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "Unknown runtime_options: {}; allowed: verbose, {}, execution_mode, session_timeout_sec",
                unknown.join(", "),
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
        let timeout = |key: &str| match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                format!("runtime_options.{key} must be a positive integer, got {v}")
            }),
        };
        let mut session_timeout_sec = timeout("session_timeout_sec")?;
        for key in map.keys().filter(|k| is_legacy_timeout(k)) {
            let legacy = timeout(key)?;
            session_timeout_sec = session_timeout_sec.or(legacy);
        }
        Ok(Self {
            verbose,
            no_cache: flag("no_cache")?.unwrap_or(false),
            debug: flag("debug")?.unwrap_or(false),
            debug_keep_temp: flag("debug_keep_temp")?.unwrap_or(false),
            execution_mode,
            interactive_require_user_reply: flag("interactive_require_user_reply")?.unwrap_or(true),
            session_timeout_sec: session_timeout_sec.unwrap_or(DEFAULT_SESSION_TIMEOUT_SEC),
        })
    }
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
    fn the_stored_form_reads_back_the_same() {
        let o = RuntimeOptions::parse(Some(&json!({"verbose": 2, "no_cache": 1}))).unwrap();
        let stored = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<RuntimeOptions>(&stored).unwrap(), o);
        let e = serde_json::from_str::<RuntimeOptions>(r#"{"debug": "x"}"#).unwrap_err();
        assert!(e.to_string().contains("runtime_options.debug"), "{e}");
    }
}
