//! The tool definitions the four built-in skills ship with (they pass the `strict` profile);
//! each takes its input schema from the skill itself, so the two cannot drift apart.

use serde_json::{Value, json};

use crate::invoke::builtin::Builtin;

/// The definition of `builtin`.
pub fn definition(builtin: Builtin) -> Value {
    let mut def = match builtin {
        Builtin::Echo => json!({
            "name": "echo",
            "category": "Text",
            "description": "Returns the given text unchanged. When you need to: (1) check that tool calls reach the server, (2) follow a trace id through a call.",
            "detail": "Sends its `text` back as `echoed`, untrimmed.\n\n**Notes**:\n- Blank text is refused (INVALID_ARGUMENT on `text`).",
            "triggers": ["When testing that tools work", "When a trace id must be followed through a call"],
            "examples": [{"scenario": "Echo a greeting", "params": {"text": "hello"},
                          "expected": "{\"echoed\": \"hello\"}"}],
        }),
        Builtin::Calculator => json!({
            "name": "calculator",
            "category": "Math",
            "description": "Computes mean, median, min, max and sum of numbers exactly. When you need to: (1) summarise a list of numbers, (2) compare named values.",
            "detail": "Computes the `ops` over `numbers` (JSON numbers only; sums are exact, so [0.1, 0.2, 0.3] has mean 0.2).\n\n**Notes**:\n- Unknown ops are refused, listed in `details.invalid_ops`.\n- `compare` with two or more named values adds their max, min and difference.",
            "triggers": ["When asked for an average, median, minimum, maximum or total", "When two or more figures must be compared"],
            "warnings": ["Numbers given as strings are refused; send JSON numbers"],
            "examples": [
                {"scenario": "Mean and median", "params": {"numbers": [1, 2, 3, 10], "ops": ["mean", "median"]},
                 "expected": "{\"results\": {\"mean\": 4.0, \"median\": 2.5}}"},
                {"scenario": "Compare two quarters", "params": {"numbers": [10, 12], "ops": ["sum"], "compare": {"q1": 10, "q2": 12}},
                 "expected": "results.sum 22 and comparison.max q2"}
            ],
        }),
        Builtin::FileSearch => json!({
            "name": "file_search",
            "category": "File System",
            "description": "Finds a literal text in the files under the allowed root. When you need to: (1) locate where a word or TODO appears, (2) find which files mention something.",
            "detail": "Searches the files under `root_dir` that match `glob` for `query` (case-sensitive, literal) and answers each match's path, line number and snippet, in path order.\n\n**Notes**:\n- Paths are relative to the allowed root; absolute paths and `..` are refused.\n- Files over 5 MiB or not UTF-8 are skipped and counted.\n- Past `limit`, `meta.truncated` is set.",
            "triggers": ["When asked where something is written", "When looking for TODOs or error messages in files"],
            "examples": [{"scenario": "Find TODOs", "params": {"query": "TODO", "glob": "**/*.py", "limit": 50},
                          "expected": "matches with path, line_no and snippet"}],
            "related_tools": [{"name": "log_transform", "relation": "reads a log found by the search"}],
        }),
        Builtin::LogTransform => json!({
            "name": "log_transform",
            "category": "File System",
            "description": "Turns a text or JSONL log into records of timestamp, level and message. When you need to: (1) read a log's errors, (2) convert a log to JSONL.",
            "detail": "Reads `input_path` (relative to the allowed root) as `text` (an ISO-8601 timestamp, a level, the message) or `jsonl`, and answers the records with stats, or writes them as JSONL under `out/` with `output: file`.\n\n**Notes**:\n- `rules.level_map` renames levels after extraction.\n- Unreadable JSONL lines are dropped and counted.",
            "triggers": ["When asked what a log says", "When a log must become structured records"],
            "warnings": ["With output: file it writes a file under out/ in the allowed root"],
            "examples": [{"scenario": "Read an application log", "params": {"input_path": "logs/app.log", "limit": 100},
                          "expected": "records and stats{lines_total, records, dropped, truncated}"}],
            "related_tools": [{"name": "file_search", "relation": "finds the log to read"}],
        }),
    };
    def["input_schema"] = builtin.input_schema();
    def
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_defs::validate::{Profile, validate};

    #[test]
    fn every_builtin_definition_passes_strict() {
        let names = Builtin::ALL
            .iter()
            .map(|b| definition(*b)["name"].as_str().unwrap().to_owned())
            .collect();
        for builtin in Builtin::ALL {
            let def = definition(builtin);
            let report = validate(&def, Profile::Strict, &names);
            assert!(
                report.valid && report.warnings.is_empty(),
                "{}: {:?} {:?}",
                def["name"],
                report.errors,
                report.warnings
            );
        }
    }
}
