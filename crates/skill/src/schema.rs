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
    /// Checks `doc` against its bounds ([`super::schema_bounds`]) and the meta-schema, and
    /// compiles it.
    pub fn compile(doc: Value) -> Result<Self, String> {
        super::schema_bounds::check(&doc)?;
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
                let mut reason = e.to_string();
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
                    let (got, shown) = shown(&field, e.instance());
                    if got != shown {
                        // The kernel of the message quotes the value too.
                        reason = reason.replace(&got, &shown);
                    }
                    (expected, shown.chars().take(200).collect())
                };
                Problem {
                    field,
                    reason,
                    expected,
                    got,
                }
            })
            .collect()
    }
}

/// The offending value as JSON, and as it may be shown: a secret-looking field's value
/// ([`skill_runner_types::secrets`]) is `"[redacted]"`, and so is every secret field inside it.
fn shown(field: &str, instance: &Value) -> (String, String) {
    let got = instance.to_string();
    let name = field.rsplit('/').next().unwrap_or_default();
    let mut shown = instance.clone();
    if skill_runner_types::secrets::is_secret_key(name) && !shown.is_null() {
        shown = Value::String("[redacted]".into());
    } else {
        skill_runner_types::secrets::redact(&mut shown);
    }
    (got, shown.to_string())
}

/// A schema compiled once for many checks; one that does not compile reports that as the
/// problem of every instance.
#[derive(Debug)]
pub struct Checker(Result<Schema, Problem>);

impl Checker {
    pub fn new(schema: &Value) -> Self {
        let compiled = super::schema_bounds::check(schema)
            .map_err(|e| e.to_string())
            .and_then(|()| jsonschema::validator_for(schema).map_err(|e| e.to_string()));
        Self(match compiled {
            Ok(validator) => Ok(Schema {
                doc: Value::Null,
                validator: Arc::new(validator),
            }),
            Err(e) => Err(Problem {
                field: String::new(),
                reason: format!("the schema itself is refused: {e}"),
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

#[cfg(test)]
mod tests {
    use super::Schema;
    use serde_json::json;

    #[test]
    fn problems_never_echo_a_secret() {
        let schema = Schema::compile(json!({"type": "object", "properties": {
            "password": {"type": "integer"},
            "db": {"type": "string"},
            "name": {"type": "integer"},
        }}))
        .unwrap();
        let problems = schema.problems(&json!({
            "password": "hunter2-secret",
            "db": {"user": "ada", "api_key": "sk-live-secret"},
            "name": "Ada",
        }));
        assert_eq!(problems.len(), 3, "{problems:?}");
        for p in &problems {
            let shown = format!("{} {} {}", p.got, p.reason, p);
            assert!(!shown.contains("secret"), "{shown}");
        }
        let by = |f: &str| problems.iter().find(|p| p.field == f).unwrap().clone();
        assert_eq!(by("password").got, r#""[redacted]""#);
        assert!(
            by("password").reason.contains("[redacted]"),
            "{:?}",
            by("password")
        );
        assert_eq!(by("db").got, r#"{"api_key":"[redacted]","user":"ada"}"#);
        // Other values are shown as they are.
        assert_eq!(by("name").got, r#""Ada""#);
    }
}
