//! JSON Schema checks shared by job runs and invoke calls: one way to compile a schema and to
//! say where an instance breaks it.

use std::sync::Arc;

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

/// A compiled JSON Schema with the document it came from.
#[derive(Debug, Clone)]
pub struct Schema {
    pub doc: Value,
    validator: Arc<jsonschema::Validator>,
}

/// One way an instance breaks a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `/`-separated path of the offending value; for a missing property, its would-be path.
    pub field: String,
    pub reason: String,
    /// What the schema asks for there, as its keyword and value (`type: "number"`), or
    /// `present (required)`; the reason when the schema document is not at hand.
    pub expected: String,
    /// The offending value as JSON (cut at 200 characters), or `missing`.
    pub got: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{} (Path: {})", self.reason, self.field)
        }
    }
}

/// Problems reported at most, per check.
const MAX_PROBLEMS: usize = 20;

impl Schema {
    /// Checks `doc` against the meta-schema and compiles it.
    pub fn compile(doc: Value) -> Result<Self, String> {
        jsonschema::meta::validate(&doc).map_err(|e| format!("not a valid JSON Schema: {e}"))?;
        let validator =
            jsonschema::validator_for(&doc).map_err(|e| format!("cannot be compiled: {e}"))?;
        Ok(Self {
            doc,
            validator: Arc::new(validator),
        })
    }

    /// Whether both were compiled from the same document.
    pub fn same_as(&self, other: &Schema) -> bool {
        Arc::ptr_eq(&self.validator, &other.validator)
    }

    /// Where `instance` breaks the schema (empty when it is valid).
    pub fn problems(&self, instance: &Value) -> Vec<Problem> {
        self.validator
            .iter_errors(instance)
            .take(MAX_PROBLEMS)
            .map(|e| {
                let mut field = e
                    .instance_path()
                    .to_string()
                    .trim_start_matches('/')
                    .to_owned();
                let (expected, got) = if let ValidationErrorKind::Required { property } = e.kind() {
                    let name = property
                        .as_str()
                        .map_or_else(|| property.to_string(), str::to_owned);
                    field = if field.is_empty() {
                        name
                    } else {
                        format!("{field}/{name}")
                    };
                    ("present (required)".to_owned(), "missing".to_owned())
                } else {
                    let path = e.schema_path().as_str();
                    let keyword = path.rsplit('/').next().unwrap_or_default();
                    let expected = match self.doc.pointer(path) {
                        Some(value) if !keyword.is_empty() => format!("{keyword}: {value}"),
                        _ => e.to_string(),
                    };
                    let got: String = e.instance().to_string().chars().take(200).collect();
                    (expected, got)
                };
                Problem {
                    field,
                    reason: e.to_string(),
                    expected,
                    got,
                }
            })
            .collect()
    }
}

/// A schema compiled once for many checks; one that does not compile reports that as the
/// problem of every instance.
#[derive(Debug)]
pub struct Checker(Result<Schema, Problem>);

impl Checker {
    pub fn new(schema: &Value) -> Self {
        Self(match jsonschema::validator_for(schema) {
            Ok(validator) => Ok(Schema {
                doc: Value::Null,
                validator: Arc::new(validator),
            }),
            Err(e) => Err(Problem {
                field: String::new(),
                reason: format!("the schema itself is invalid: {e}"),
                expected: String::new(),
                got: String::new(),
            }),
        })
    }

    /// Where `instance` breaks the schema (empty when it is valid).
    pub fn problems(&self, instance: &Value) -> Vec<Problem> {
        match &self.0 {
            Ok(schema) => schema.problems(instance),
            Err(problem) => vec![problem.clone()],
        }
    }

    /// The problems as `message (Path: a/b)`.
    pub fn messages(&self, instance: &Value) -> Vec<String> {
        self.problems(instance)
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
