//! The invocable skills (`GET /skills`) as the model's tools: offered with their input schemas
//! as function definitions, and each call's arguments checked before the skill runs. The call
//! itself goes through the invoke host in-process (never an HTTP call to the service itself:
//! the user's documents' deadlock warning).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::provider::{Call, ToolSpec};
use skill_runner_core::invoke::catalog::Catalog;

/// The tools of one chat.
#[derive(Debug)]
pub struct Toolbox {
    catalog: Arc<Catalog>,
    /// `allowed_tools` of the request; every skill when absent.
    allowed: Option<BTreeSet<String>>,
}

/// Why a call was not run; answered to the model as the call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// `InvalidArguments`, `ToolNotAllowed` or `UnknownTool`.
    pub error_type: &'static str,
    pub message: String,
    /// For invalid arguments: `{field, expected, got}` per problem.
    pub problems: Vec<Value>,
}

impl Refusal {
    /// Whether the model sent arguments the tool refused (these count against
    /// `max_validation_retries`).
    pub fn invalid_arguments(&self) -> bool {
        self.error_type == INVALID_ARGUMENTS
    }

    /// What the model reads as the call's result.
    pub fn output(&self) -> Value {
        let mut output = json!({"error": {"type": self.error_type, "message": self.message}});
        if !self.problems.is_empty() {
            output["error"]["problems"] = json!(self.problems);
        }
        output
    }
}

const INVALID_ARGUMENTS: &str = "InvalidArguments";

/// A tool name of `allowed_tools` that names no invocable skill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allowed_tools: '{0}' is not an invocable skill (see GET /skills)")]
pub struct UnknownAllowed(pub String);

impl Toolbox {
    pub fn new(catalog: Arc<Catalog>, allowed: Option<&[String]>) -> Result<Self, UnknownAllowed> {
        if let Some(name) = allowed
            .into_iter()
            .flatten()
            .find(|name| !catalog.skills.contains_key(name.as_str()))
        {
            return Err(UnknownAllowed(name.clone()));
        }
        Ok(Self {
            catalog,
            allowed: allowed.map(|names| names.iter().cloned().collect()),
        })
    }

    fn allows(&self, name: &str) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(name))
    }

    /// The offered tools: the allowed skills, by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.catalog
            .skills
            .values()
            .filter(|skill| self.allows(&skill.id))
            .map(|skill| ToolSpec {
                name: skill.id.clone(),
                description: skill
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("Runs the skill '{}'.", skill.id)),
                parameters: skill
                    .input_schema
                    .as_ref()
                    .map_or_else(|| json!({"type": "object"}), |s| s.doc.clone()),
            })
            .collect()
    }

    /// The call's input when it may run: a known, allowed tool and arguments its schema accepts.
    pub fn check(&self, call: &Call) -> Result<Value, Refusal> {
        let Some(skill) = self.catalog.skills.get(&call.name) else {
            return Err(Refusal {
                error_type: "UnknownTool",
                message: format!("unknown tool: {}", call.name),
                problems: Vec::new(),
            });
        };
        if !self.allows(&call.name) {
            return Err(Refusal {
                error_type: "ToolNotAllowed",
                message: format!("Tool '{}' is not allowed", call.name),
                problems: Vec::new(),
            });
        }
        let invalid = |message: String, problems: Vec<Value>| Refusal {
            error_type: INVALID_ARGUMENTS,
            message,
            problems,
        };
        let text = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            &call.arguments
        };
        let input = match serde_json::from_str::<Value>(text) {
            Ok(input @ Value::Object(_)) => input,
            Ok(mut other) => {
                skill_runner_types::secrets::redact(&mut other);
                let got: String = other.to_string().chars().take(200).collect();
                return Err(invalid(
                    "the arguments must be a JSON object".into(),
                    vec![json!({"field": "", "expected": "a JSON object", "got": got})],
                ));
            }
            Err(e) => {
                let got: String = call.arguments.chars().take(200).collect();
                return Err(invalid(
                    format!("the arguments are not JSON: {e}"),
                    vec![json!({"field": "", "expected": "a JSON object", "got": got})],
                ));
            }
        };
        if let Some(schema) = &skill.input_schema {
            let problems = schema.problems(&input);
            if let Some(first) = problems.first() {
                let listed = problems
                    .iter()
                    .map(|p| json!({"field": p.field, "expected": p.expected, "got": p.got}))
                    .collect();
                return Err(invalid(
                    format!("invalid arguments for {}: {first}", call.name),
                    listed,
                ));
            }
        }
        Ok(input)
    }
}
