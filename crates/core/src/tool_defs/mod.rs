//! Skills as tool definitions (the format of the user's document `004_*`), disclosed in three
//! levels: the list (name, description, category; or a text catalog by category), one
//! definition (JSON, or Markdown in the document's section order), and the call.
//!
//! Every invocable skill is a tool: the built-ins with the definitions they ship
//! ([`builtin`]), every other skill with one made from its id, description and input schema.
//! Tool names are snake_case, so a skill id's hyphens become underscores. A name is looked up
//! as given, then as an alias (`Browser-Navigate`, `browserNavigate` and `browser navigate` all
//! mean `browser_navigate`); a miss suggests up to three close names.

pub mod builtin;
pub mod validate;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::invoke::catalog::{Catalog, InvocableSkill, Runner, Source};

/// One tool: its definition and the skill a call runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEntry {
    pub name: String,
    pub skill_id: String,
    pub definition: Value,
}

impl ToolEntry {
    pub fn description(&self) -> &str {
        self.definition["description"].as_str().unwrap_or_default()
    }

    pub fn category(&self) -> &str {
        self.definition["category"].as_str().unwrap_or("Skills")
    }
}

/// The tools of the invocable skills, by tool name.
pub fn tools(catalog: &Catalog) -> BTreeMap<String, ToolEntry> {
    catalog
        .skills
        .values()
        .map(|skill| {
            let definition = match (&skill.runner, &skill.source) {
                (Runner::Builtin(builtin), Source::Builtin) => builtin::definition(*builtin),
                _ => generated(skill),
            };
            let name = definition["name"].as_str().unwrap_or_default().to_owned();
            (
                name.clone(),
                ToolEntry {
                    name,
                    skill_id: skill.id.clone(),
                    definition,
                },
            )
        })
        .collect()
}

/// The tool name of a skill id: snake_case, starting with a letter.
pub fn tool_name(skill_id: &str) -> String {
    let name = skill_id.to_ascii_lowercase().replace('-', "_");
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name
    } else {
        format!("skill_{name}")
    }
}

/// The longest description of a generated definition (the `strict` limit).
const MAX_DESCRIPTION: usize = 200;

fn generated(skill: &InvocableSkill) -> Value {
    let description = skill
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| format!("Runs the skill '{}'.", skill.id));
    let short: String = if description.chars().count() > MAX_DESCRIPTION {
        let cut: String = description.chars().take(MAX_DESCRIPTION - 1).collect();
        format!("{cut}…")
    } else {
        description.clone()
    };
    let category = match skill.source {
        Source::Package(_) => "Skill Packages",
        _ => "Skills",
    };
    let mut def = json!({
        "name": tool_name(&skill.id),
        "category": category,
        "description": short,
        "input_schema": skill
            .input_schema
            .as_ref()
            .map_or_else(|| json!({"type": "object", "properties": {}}), |s| s.doc.clone()),
    });
    if short != description {
        def["detail"] = json!(description);
    }
    def
}

/// A name as the alias rules read it: camelCase split, lower case, `-` and spaces as `_`.
pub fn alias(name: &str) -> String {
    let mut out = String::new();
    let mut previous: Option<char> = None;
    for c in name.trim().chars() {
        if c.is_uppercase() && previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit()) {
            out.push('_');
        }
        let c = if c == '-' || c.is_whitespace() {
            '_'
        } else {
            c
        };
        if !(c == '_' && out.ends_with('_')) {
            out.extend(c.to_lowercase());
        }
        previous = Some(c);
    }
    out
}

/// What a lookup found: the tool (and the name it was asked by, when that was an alias), or
/// up to three close names.
pub fn resolve<'a>(
    tools: &'a BTreeMap<String, ToolEntry>,
    asked: &str,
) -> Result<(&'a ToolEntry, Option<String>), Vec<String>> {
    if let Some(entry) = tools.get(asked) {
        return Ok((entry, None));
    }
    let wanted = alias(asked);
    if let Some(entry) = tools.get(&wanted) {
        return Ok((entry, Some(asked.to_owned())));
    }
    let mut close: Vec<(f64, &String)> = tools
        .keys()
        .map(|name| (strsim::normalized_levenshtein(&wanted, name), name))
        .filter(|(score, _)| *score >= 0.5)
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    Err(close.into_iter().take(3).map(|(_, n)| n.clone()).collect())
}

/// Level 1 as text: the tools grouped by category, each with the first line of its description.
pub fn text_catalog(tools: &BTreeMap<String, ToolEntry>) -> String {
    let mut groups: BTreeMap<&str, Vec<&ToolEntry>> = BTreeMap::new();
    for entry in tools.values() {
        groups.entry(entry.category()).or_default().push(entry);
    }
    let mut text = String::new();
    for (category, entries) in groups {
        text.push_str(&format!("## {category}\n"));
        for entry in entries {
            let first = entry.description().lines().next().unwrap_or_default();
            text.push_str(&format!("- **{}**: {first}\n", entry.name));
        }
        text.push('\n');
    }
    text
}

/// Level 2 as Markdown, in the document's section order: title, category, detail (else the
/// description), warnings, when to use, prerequisites, parameters, examples, related tools.
pub fn markdown(def: &Value) -> String {
    let strings = |key: &str| -> Vec<String> {
        def[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("condition").and_then(Value::as_str).map(|c| {
                    let check = o.get("check_tool").and_then(Value::as_str);
                    let action = o.get("action_if_not_met").and_then(Value::as_str);
                    let mut line = c.to_owned();
                    if let Some(check) = check {
                        line.push_str(&format!(" (check with `{check}`)"));
                    }
                    if let Some(action) = action {
                        line.push_str(&format!("; otherwise: {action}"));
                    }
                    line
                }),
                _ => None,
            })
            .collect()
    };
    let mut md = format!("# Tool: {}\n\n", def["name"].as_str().unwrap_or_default());
    if let Some(category) = def["category"].as_str() {
        md.push_str(&format!("**Category**: {category}\n\n"));
    }
    let about = def["detail"]
        .as_str()
        .or_else(|| def["description"].as_str())
        .unwrap_or_default();
    md.push_str(&format!("{about}\n\n"));
    for (title, key) in [
        ("Warnings", "warnings"),
        ("When to Use", "triggers"),
        ("Prerequisites", "prerequisites"),
    ] {
        let items = strings(key);
        if !items.is_empty() {
            md.push_str(&format!("## {title}\n\n"));
            for item in items {
                md.push_str(&format!("- {item}\n"));
            }
            md.push('\n');
        }
    }
    let schema = &def["input_schema"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(properties) = schema["properties"].as_object().filter(|p| !p.is_empty()) {
        md.push_str("## Parameters\n\n");
        for (name, property) in properties {
            let kind = match &property["type"] {
                Value::String(t) => t.clone(),
                Value::Null => "any".into(),
                other => other.to_string(),
            };
            let mut line = format!("- `{name}` ({kind}");
            if required.contains(&name.as_str()) {
                line.push_str(", required");
            }
            line.push(')');
            if let Some(description) = property["description"].as_str() {
                line.push_str(&format!(": {description}"));
            }
            if let Some(default) = property.get("default") {
                line.push_str(&format!(" Default: `{default}`."));
            }
            if let Some(options) = property["enum"].as_array() {
                let options: Vec<String> = options.iter().map(Value::to_string).collect();
                line.push_str(&format!(" [options: {}]", options.join(", ")));
            }
            md.push_str(&format!("{line}\n"));
        }
        md.push('\n');
    }
    if let Some(examples) = def["examples"].as_array().filter(|e| !e.is_empty()) {
        md.push_str("## Examples\n\n");
        for example in examples {
            md.push_str(&format!(
                "- {}: `{}`",
                example["scenario"].as_str().unwrap_or_default(),
                example["params"]
            ));
            if let Some(expected) = example["expected"].as_str() {
                md.push_str(&format!(" → {expected}"));
            }
            md.push('\n');
        }
        md.push('\n');
    }
    if let Some(related) = def["related_tools"].as_array().filter(|r| !r.is_empty()) {
        md.push_str("## Related Tools\n\n");
        for tool in related {
            md.push_str(&format!(
                "- `{}`",
                tool["name"].as_str().unwrap_or_default()
            ));
            if let Some(relation) = tool["relation"].as_str() {
                md.push_str(&format!(": {relation}"));
            }
            md.push('\n');
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> (String, ToolEntry) {
        (
            name.to_owned(),
            ToolEntry {
                name: name.to_owned(),
                skill_id: name.to_owned(),
                definition: json!({"name": name, "description": "d"}),
            },
        )
    }

    #[test]
    fn aliases_resolve_and_misses_suggest_close_names() {
        let tools: BTreeMap<String, ToolEntry> = [
            "browser_navigate",
            "browser_click",
            "file_search",
            "calculator",
        ]
        .into_iter()
        .map(entry)
        .collect();
        for asked in [
            "Browser-Navigate",
            "browserNavigate",
            "browser navigate",
            "BROWSER_NAVIGATE",
        ] {
            let (found, from) = resolve(&tools, asked).unwrap();
            assert_eq!(found.name, "browser_navigate", "{asked}");
            assert_eq!(from.as_deref(), Some(asked));
        }
        assert_eq!(resolve(&tools, "calculator").unwrap().1, None);
        assert_eq!(
            resolve(&tools, "browser_navigat").unwrap_err(),
            ["browser_navigate", "browser_click"],
            "closest first"
        );
        assert_eq!(resolve(&tools, "file-serch").unwrap_err(), ["file_search"]);
        assert!(resolve(&tools, "zzz").unwrap_err().is_empty());
        assert_eq!(tool_name("text-stats"), "text_stats");
        assert_eq!(tool_name("3d"), "skill_3d");
    }

    #[test]
    fn markdown_follows_the_documents_section_order() {
        let md = markdown(&builtin::definition(
            crate::invoke::builtin::Builtin::FileSearch,
        ));
        let order = [
            "# Tool: file_search",
            "**Category**: File System",
            "Searches the files",
            "## When to Use",
            "## Parameters",
            "- `limit` (integer): Most matches returned (default 20). Default: `20`.",
            "- `query` (string, required): Literal text to find",
            "## Examples",
            "## Related Tools",
        ];
        let mut at = 0;
        for part in order {
            let found = md[at..]
                .find(part)
                .unwrap_or_else(|| panic!("{part} in\n{md}"));
            at += found;
        }
    }
}
