//! Checking a tool definition (the format of the user's document `004_*`) under a profile:
//! `strict` (the document's rules: description ≤ 200 characters) or `compat` (OpenAkita's code:
//! ≤ 500). The definition is judged as JSON, so a missing or mistyped field is a finding, not a
//! parse failure.
//!
//! Errors: a missing `name`, `description` or `input_schema`; a name not `^[a-z][a-z0-9_]*$` or
//! over 64 characters; a description over the profile's limit; a detail over 2,000 characters;
//! an input schema that is not an object schema or does not compile; a parameter without `type`
//! or `description`; `required` naming a parameter that does not exist; an example whose
//! `params` the full schema refuses; a field of the wrong shape. Warnings: an optional parameter
//! without `default`, a description without "When", an unknown category, a related or workflow
//! tool that is not registered, a detail over 500 characters, an unknown field.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Map, Value};

pub use crate::skill::finding::Finding;
use crate::skill::schema::Schema;

/// How strictly a definition is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Strict,
    Compat,
}

impl Profile {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "strict" => Some(Self::Strict),
            "compat" => Some(Self::Compat),
            _ => None,
        }
    }

    fn max_description(self) -> usize {
        match self {
            Profile::Strict => 200,
            Profile::Compat => 500,
        }
    }
}

/// What a profile found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub valid: bool,
    pub errors: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

impl Report {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        self.errors.push(Finding::new(field, message));
    }

    fn warn(&mut self, field: &str, message: impl Into<String>) {
        self.warnings.push(Finding::new(field, message));
    }
}

/// The categories of the document's table, and those of this service's skills.
pub const CATEGORIES: [&str; 13] = [
    "File System",
    "Browser",
    "Desktop",
    "Memory",
    "Skills",
    "Scheduled",
    "IM Channel",
    "Profile",
    "System",
    "MCP",
    "Text",
    "Math",
    "Skill Packages",
];

const FIELDS: [&str; 11] = [
    "name",
    "description",
    "input_schema",
    "detail",
    "triggers",
    "prerequisites",
    "examples",
    "category",
    "warnings",
    "related_tools",
    "workflow",
];

const MAX_NAME: usize = 64;
const MAX_DETAIL: usize = 2_000;
const ADVISED_DETAIL: usize = 500;

/// Judges `definition`; `registered` are the tool names related and workflow tools may name.
pub fn validate(definition: &Value, profile: Profile, registered: &BTreeSet<String>) -> Report {
    let mut report = Report::default();
    let Value::Object(def) = definition else {
        report.error("", "a tool definition must be a JSON object");
        return report;
    };
    for key in def.keys() {
        if !FIELDS.contains(&key.as_str()) {
            report.warn(key, "is not a field of the tool definition format");
        }
    }
    match text(def, "name", &mut report) {
        Some(name) if !valid_name(name) => report.error(
            "name",
            format!(
                "'{name}' must be snake_case: ^[a-z][a-z0-9_]*$, at most {MAX_NAME} characters"
            ),
        ),
        _ => {}
    }
    if let Some(description) = text(def, "description", &mut report) {
        let chars = description.chars().count();
        if chars > profile.max_description() {
            report.error(
                "description",
                format!(
                    "has {chars} characters; at most {} under this profile",
                    profile.max_description()
                ),
            );
        }
        if !description.to_lowercase().contains("when") {
            report.warn(
                "description",
                "says what the tool does but not when to use it (\"When you need to: ...\")",
            );
        }
    }
    match def.get("detail") {
        None | Some(Value::Null) => {}
        Some(Value::String(detail)) => {
            let chars = detail.chars().count();
            if chars > MAX_DETAIL {
                report.error(
                    "detail",
                    format!("has {chars} characters; at most {MAX_DETAIL}"),
                );
            } else if chars > ADVISED_DETAIL {
                report.warn(
                    "detail",
                    format!("has {chars} characters; keep it under {ADVISED_DETAIL}"),
                );
            }
        }
        Some(_) => report.error("detail", "must be a string"),
    }
    let schema = match def.get("input_schema") {
        None => {
            report.error("input_schema", "is required");
            None
        }
        Some(schema) => check_schema(schema, &mut report),
    };
    list_of_strings(def, "triggers", &mut report);
    list_of_strings(def, "warnings", &mut report);
    check_prerequisites(def, &mut report);
    check_examples(def, schema.as_ref(), &mut report);
    match def.get("category") {
        None | Some(Value::Null) => {}
        Some(Value::String(category)) if CATEGORIES.contains(&category.as_str()) => {}
        Some(Value::String(category)) => report.warn(
            "category",
            format!(
                "'{category}' is not a known category ({})",
                CATEGORIES.join(", ")
            ),
        ),
        Some(_) => report.error("category", "must be a string"),
    }
    check_related(def, registered, &mut report);
    check_workflow(def, registered, &mut report);
    report.valid = report.errors.is_empty();
    report
}

/// Whether `name` is a tool name: `^[a-z][a-z0-9_]*$`, 1–64 characters.
pub fn valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A required, non-empty string field.
fn text<'a>(def: &'a Map<String, Value>, key: &str, report: &mut Report) -> Option<&'a str> {
    match def.get(key) {
        None | Some(Value::Null) => {
            report.error(key, "is required");
            None
        }
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
        Some(Value::String(_)) => {
            report.error(key, "must not be blank");
            None
        }
        Some(_) => {
            report.error(key, "must be a string");
            None
        }
    }
}

fn list_of_strings(def: &Map<String, Value>, key: &str, report: &mut Report) {
    match def.get(key) {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
        Some(_) => report.error(key, "must be a list of strings"),
    }
}

/// The compiled schema when it is an object schema that compiles; findings about its
/// parameters either way.
fn check_schema(schema: &Value, report: &mut Report) -> Option<Schema> {
    let Value::Object(doc) = schema else {
        report.error("input_schema", "must be a JSON Schema object");
        return None;
    };
    if doc.get("type") != Some(&Value::String("object".into())) {
        report.error(
            "input_schema",
            "must be an object schema (\"type\": \"object\")",
        );
    }
    let properties = match doc.get("properties") {
        None => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => {
            report.error("input_schema.properties", "must be an object");
            Map::new()
        }
    };
    let required: Vec<&str> = match doc.get("required") {
        None => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(Value::as_str).collect()
        }
        Some(_) => {
            report.error("input_schema.required", "must be a list of parameter names");
            Vec::new()
        }
    };
    for name in &required {
        if !properties.contains_key(*name) {
            report.error(
                "input_schema.required",
                format!("names '{name}', which is not among the properties"),
            );
        }
    }
    for (name, property) in &properties {
        let field = format!("input_schema.properties.{name}");
        if property.get("type").is_none() {
            report.error(&field, "has no type");
        }
        if property
            .get("description")
            .and_then(Value::as_str)
            .is_none_or(|d| d.trim().is_empty())
        {
            report.error(&field, "has no description");
        }
        if !required.contains(&name.as_str()) && property.get("default").is_none() {
            report.warn(&field, "is optional but has no default");
        }
    }
    match Schema::compile(schema.clone()) {
        Ok(compiled) => Some(compiled),
        Err(e) => {
            report.error("input_schema", e);
            None
        }
    }
}

fn check_prerequisites(def: &Map<String, Value>, report: &mut Report) {
    let Some(value) = def.get("prerequisites").filter(|v| !v.is_null()) else {
        return;
    };
    let Value::Array(items) = value else {
        report.error("prerequisites", "must be a list");
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let ok = match item {
            Value::String(_) => true,
            Value::Object(o) => o.get("condition").is_some_and(Value::is_string),
            _ => false,
        };
        if !ok {
            report.error(
                &format!("prerequisites[{i}]"),
                "must be a string or {condition, check_tool?, action_if_not_met?}",
            );
        }
    }
}

fn check_examples(def: &Map<String, Value>, schema: Option<&Schema>, report: &mut Report) {
    let Some(value) = def.get("examples").filter(|v| !v.is_null()) else {
        return;
    };
    let Value::Array(items) = value else {
        report.error("examples", "must be a list");
        return;
    };
    for (i, example) in items.iter().enumerate() {
        let field = format!("examples[{i}]");
        let Some(params) = example.get("params") else {
            report.error(&field, "must have params");
            continue;
        };
        if !example.get("scenario").is_some_and(Value::is_string) {
            report.error(&field, "must have a scenario");
        }
        if let Some(schema) = schema {
            for problem in schema.problems(params) {
                report.error(&format!("{field}.params"), problem.to_string());
            }
        }
    }
}

fn check_related(def: &Map<String, Value>, registered: &BTreeSet<String>, report: &mut Report) {
    let Some(value) = def.get("related_tools").filter(|v| !v.is_null()) else {
        return;
    };
    let Value::Array(items) = value else {
        report.error("related_tools", "must be a list");
        return;
    };
    for (i, item) in items.iter().enumerate() {
        match item.get("name").and_then(Value::as_str) {
            Some(name) if !registered.contains(name) => report.warn(
                &format!("related_tools[{i}]"),
                format!("'{name}' is not a registered tool"),
            ),
            Some(_) => {}
            None => report.error(&format!("related_tools[{i}]"), "must have a name"),
        }
    }
}

fn check_workflow(def: &Map<String, Value>, registered: &BTreeSet<String>, report: &mut Report) {
    let Some(workflow) = def.get("workflow").filter(|v| !v.is_null()) else {
        return;
    };
    let Some(steps) = workflow.get("steps").and_then(Value::as_array) else {
        report.error("workflow", "must have a list of steps");
        return;
    };
    for (i, step) in steps.iter().enumerate() {
        let field = format!("workflow.steps[{i}]");
        if !step.get("action").is_some_and(Value::is_string) {
            report.error(&field, "must have an action");
        }
        let tools = step.get("tool").and_then(Value::as_str).into_iter().chain(
            step.get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str),
        );
        for tool in tools {
            if !registered.contains(tool) {
                report.warn(&field, format!("'{tool}' is not a registered tool"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The full example of the user's document `004_*`.
    fn document_example() -> Value {
        json!({
            "name": "browser_navigate",
            "category": "Browser",
            "description": "Navigate browser to specified URL to open a webpage. When you need to: (1) Open a webpage, (2) Start web interaction. PREREQUISITE: Must call before browser_click/type. Auto-starts browser if not running.",
            "detail": "导航到指定 URL。\n\n**适用场景**：\n- 打开网页开始交互\n- Web 自动化任务的第一步\n\n**参数说明**：\n- url: 完整的 URL（包含协议）\n\n**注意事项**：\n- 必须在 browser_click/browser_type 之前调用\n- 如果浏览器未启动会自动启动",
            "triggers": ["When user asks to open a webpage", "When starting web automation task",
                         "Before any browser interaction (click/type)"],
            "prerequisites": ["None - auto-starts browser if needed"],
            "warnings": ["Must call before browser_click/type operations"],
            "examples": [
                {"scenario": "打开搜索引擎", "params": {"url": "https://www.google.com"},
                 "expected": "Browser opens Google homepage"},
                {"scenario": "打开项目文档", "params": {"url": "https://docs.example.com/api"},
                 "expected": "Browser navigates to API documentation"}
            ],
            "related_tools": [
                {"name": "browser_status", "relation": "check before for reliability"},
                {"name": "browser_click", "relation": "commonly used after"},
                {"name": "browser_type", "relation": "commonly used after"}
            ],
            "input_schema": {
                "type": "object",
                "properties": {"url": {"type": "string", "description": "要访问的 URL（必须包含协议，如 https://）"}},
                "required": ["url"]
            }
        })
    }

    fn registered() -> BTreeSet<String> {
        ["browser_status", "browser_click"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_documents_own_example_fails_strict_and_passes_compat() {
        let example = document_example();
        assert_eq!(
            example["description"].as_str().unwrap().chars().count(),
            204
        );
        let strict = validate(&example, Profile::Strict, &registered());
        assert!(!strict.valid);
        assert_eq!(
            strict.errors,
            [Finding {
                field: "description".into(),
                message: "has 204 characters; at most 200 under this profile".into()
            }]
        );
        let compat = validate(&example, Profile::Compat, &registered());
        assert!(compat.valid, "{:?}", compat.errors);
        assert_eq!(
            compat.warnings,
            [Finding {
                field: "related_tools[2]".into(),
                message: "'browser_type' is not a registered tool".into()
            }]
        );
    }

    #[test]
    fn each_mistake_is_named() {
        let base = || {
            json!({
                "name": "echo_text", "description": "Echoes text. When you need to: (1) test.",
                "input_schema": {"type": "object", "properties": {
                    "text": {"type": "string", "description": "The text."}}, "required": ["text"]}
            })
        };
        assert!(validate(&base(), Profile::Strict, &BTreeSet::new()).valid);
        type Change = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Change, &str, &str)> = vec![
            (
                Box::new(|d| d["name"] = json!("EchoText")),
                "name",
                "snake_case",
            ),
            (
                Box::new(|d| d["name"] = json!("1echo")),
                "name",
                "snake_case",
            ),
            (
                Box::new(|d| d["name"] = json!("e".repeat(65))),
                "name",
                "at most 64",
            ),
            (
                Box::new(|d| {
                    d.as_object_mut().unwrap().remove("description");
                }),
                "description",
                "is required",
            ),
            (
                Box::new(|d| d["input_schema"] = json!({"type": "string"})),
                "input_schema",
                "object schema",
            ),
            (
                Box::new(|d| d["input_schema"] = json!([1])),
                "input_schema",
                "JSON Schema object",
            ),
            (
                Box::new(|d| {
                    d["input_schema"]["properties"]["n"] = json!({"type": "integer", "default": 1})
                }),
                "input_schema.properties.n",
                "no description",
            ),
            (
                Box::new(|d| d["input_schema"]["required"] = json!(["text", "ghost"])),
                "input_schema.required",
                "'ghost'",
            ),
            (
                Box::new(|d| d["input_schema"]["properties"]["text"]["type"] = json!("strin")),
                "input_schema",
                "not a valid JSON Schema",
            ),
            (
                Box::new(|d| d["examples"] = json!([{"scenario": "s", "params": {"text": 5}}])),
                "examples[0].params",
                "is not of type",
            ),
            (
                Box::new(|d| d["examples"] = json!([{"scenario": "s", "params": {}}])),
                "examples[0].params",
                "required",
            ),
            (
                Box::new(|d| d["detail"] = json!("d".repeat(2001))),
                "detail",
                "at most 2000",
            ),
            (
                Box::new(|d| d["triggers"] = json!("when")),
                "triggers",
                "list of strings",
            ),
        ];
        for (change, field, words) in cases {
            let mut def = base();
            change(&mut def);
            let report = validate(&def, Profile::Strict, &BTreeSet::new());
            assert!(
                report
                    .errors
                    .iter()
                    .any(|f| f.field == field && f.message.contains(words)),
                "{field} / {words}: {:?}",
                report.errors
            );
        }
        let mut def = base();
        def["input_schema"]["properties"]["n"] = json!({"type": "integer", "description": "n"});
        def["description"] = json!("Echoes text.");
        def["category"] = json!("Toys");
        def["workflow"] = json!({"steps": [{"step": 1, "action": "a", "tool": "ghost"}]});
        def["colour"] = json!("blue");
        let report = validate(&def, Profile::Strict, &BTreeSet::new());
        assert!(report.valid, "{:?}", report.errors);
        let fields: Vec<&str> = report.warnings.iter().map(|w| w.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "colour",
                "description",
                "input_schema.properties.n",
                "category",
                "workflow.steps[0]"
            ]
        );
    }
}
