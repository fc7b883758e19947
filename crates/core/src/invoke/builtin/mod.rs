//! The four built-in skills, run in-process (`inproc`): `echo`, `calculator`, `file_search`
//! and `log_transform`, with the inputs and outputs of the user's documents.
//!
//! The host validates an input against the skill's [`Builtin::input_schema`] before calling
//! [`Builtin::run`]; the checks a schema cannot express (blank text, unknown operations,
//! paths) are the skill's own.

mod calculator;
mod echo;
mod file_search;
mod log_transform;

use std::sync::LazyLock;

use serde_json::Value;

use super::paths::AllowedRoot;
use super::result::{ErrorCode, Output, SkillError};
use crate::skill::schema::Schema;

/// What a built-in may use while it runs.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub root: &'a AllowedRoot,
    /// Long scans stop here; the host has answered `TIMEOUT` by then.
    pub deadline: std::time::Instant,
}

impl<'a> Ctx<'a> {
    /// A context for unit tests: the root and ten seconds.
    #[cfg(test)]
    fn for_test(root: &'a AllowedRoot) -> Self {
        Self {
            root,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(10),
        }
    }

    /// `TIMEOUT` once the deadline has passed.
    fn check_time(&self) -> Result<(), SkillError> {
        if std::time::Instant::now() >= self.deadline {
            return Err(SkillError::new(
                ErrorCode::Timeout,
                "the call ran out of time",
            ));
        }
        Ok(())
    }
}

/// A skill implemented in this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    Echo,
    Calculator,
    FileSearch,
    LogTransform,
}

impl Builtin {
    pub const ALL: [Builtin; 4] = [
        Builtin::Echo,
        Builtin::Calculator,
        Builtin::FileSearch,
        Builtin::LogTransform,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Builtin::Echo => "echo",
            Builtin::Calculator => "calculator",
            Builtin::FileSearch => "file_search",
            Builtin::LogTransform => "log_transform",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Builtin::Echo => "Returns its text unchanged; checks the call path and trace ids.",
            Builtin::Calculator => {
                "Statistics over numbers (mean, median, min, max, sum) and a comparison of named values."
            }
            Builtin::FileSearch => {
                "Finds a literal text in the files under the allowed root; returns path, line and snippet."
            }
            Builtin::LogTransform => {
                "Turns a text or JSONL log under the allowed root into records with timestamp, level and message."
            }
        }
    }

    /// The JSON Schema the host checks inputs against.
    pub fn input_schema(self) -> Value {
        match self {
            Builtin::Echo => echo::schema(),
            Builtin::Calculator => calculator::schema(),
            Builtin::FileSearch => file_search::schema(),
            Builtin::LogTransform => log_transform::schema(),
        }
    }

    /// [`Self::input_schema`], compiled once.
    pub fn schema(self) -> &'static Schema {
        static SCHEMAS: LazyLock<Vec<Schema>> = LazyLock::new(|| {
            Builtin::ALL
                .iter()
                .map(|b| Schema::compile(b.input_schema()).expect("built-in schemas compile"))
                .collect()
        });
        &SCHEMAS[self as usize]
    }

    /// Whether it touches the file system (and so runs on a blocking thread).
    pub fn blocking(self) -> bool {
        matches!(self, Builtin::FileSearch | Builtin::LogTransform)
    }

    /// Runs it on a schema-valid `input`.
    pub fn run(self, input: &Value, ctx: &Ctx<'_>) -> Result<Output, SkillError> {
        match self {
            Builtin::Echo => echo::run(input),
            Builtin::Calculator => calculator::run(input),
            Builtin::FileSearch => file_search::run(input, ctx),
            Builtin::LogTransform => log_transform::run(input, ctx),
        }
    }
}

/// An optional integer input within `range`, else `default`.
fn limit(input: &Value, field: &str, default: u64, max: u64) -> Result<usize, SkillError> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(default as usize),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=max).contains(&n) => Ok(n as usize),
            _ => Err(SkillError::invalid(
                field,
                format!("must be an integer from 1 to {max}"),
            )),
        },
    }
}
