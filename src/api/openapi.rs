//! The OpenAPI document as served: a one-line summary per operation (its doc comment's first
//! sentence, at most [`SUMMARY_MAX`] characters) with the whole comment as its description,
//! and every error answer typed as [`ErrorBody`]. Also the request bodies that are only
//! described here (multipart forms, free-form inputs).

use serde_json::{Map, Value, json};

/// The longest summary, in characters.
pub const SUMMARY_MAX: usize = 60;

/// Every error on `/v1`: `detail` is a string, an object with a `code` and `message`, or (a
/// field refused, the shape FastAPI clients parse) a list of `{loc, msg, type}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the body in the OpenAPI document")]
pub struct ErrorBody {
    #[schema(value_type = Object)]
    detail: Value,
    /// What the request named that was ignored (`UNKNOWN_FIELD: …`), on a refused create.
    warnings: Option<Vec<String>>,
    /// On a 405: the methods the route takes.
    allowed_methods: Option<Vec<String>>,
}

/// `runtime_options` of a create (see the API reference for each).
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the body in the OpenAPI document")]
pub struct RuntimeOptionsBody {
    /// `auto` (default) or `interactive`.
    execution_mode: Option<String>,
    /// Skip the cache lookup.
    no_cache: Option<bool>,
    /// The wait for a reply, seconds (default 1200); also `interactive_reply_timeout_sec`.
    session_timeout_sec: Option<u64>,
    interactive_reply_timeout_sec: Option<u64>,
    interactive_require_user_reply: Option<bool>,
    interactive_auto_reply: Option<bool>,
    /// A shorter hard timeout for the run's turns, seconds.
    hard_timeout_seconds: Option<u64>,
    /// 0 to 5: how often an unfit answer is sent back to be mended.
    output_repair_rounds: Option<u32>,
    /// A JSON Schema the answer of a standard Agent Skills skill must match.
    #[schema(value_type = Option<Object>)]
    output_schema: Option<Value>,
    /// `{NAME: "value"}` for every turn's environment, masked in logs.
    env: Option<std::collections::BTreeMap<String, String>>,
    /// Up to 8,000 characters of context for an agent's first prompt.
    preamble_prompt: Option<String>,
    /// `{mode: "reuse", request_id, file_bindings?}`.
    #[schema(value_type = Option<Object>)]
    workspace: Option<Value>,
    debug: Option<bool>,
    debug_keep_temp: Option<bool>,
    /// Accepted and without effect.
    verbose: Option<u64>,
    collect_skill_run_feedback: Option<bool>,
    /// As the top-level `retry`.
    #[schema(value_type = Option<Object>)]
    retry: Option<Value>,
}

/// `{"input": {...}}` of an invoke or a tool call.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the body in the OpenAPI document")]
pub struct InputBody {
    /// The skill's or tool's input, as its input schema describes it.
    #[schema(value_type = Object)]
    input: Value,
}

/// A schedule as created or changed (a change names only what it changes).
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the body in the OpenAPI document")]
pub struct ScheduleBody {
    skill_id: Option<String>,
    engine: Option<String>,
    #[schema(value_type = Option<Object>)]
    input: Option<Value>,
    #[schema(value_type = Option<Object>)]
    parameter: Option<Value>,
    runtime_options: Option<RuntimeOptionsBody>,
    model: Option<String>,
    skills: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    retry: Option<Value>,
    priority: Option<u8>,
    /// Five or six fields (seconds first, optional).
    cron: Option<String>,
    /// An IANA zone (default `UTC`).
    timezone: Option<String>,
    /// `skip` (default), `queue` or `cancel_previous`.
    overlap: Option<String>,
    catch_up_seconds: Option<u64>,
    paused: Option<bool>,
}

/// The files of an engine login imported from a machine where it was made.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the form in the OpenAPI document")]
pub struct AuthImportForm {
    /// The login's files, each named as the engine keeps it.
    #[schema(value_type = Vec<String>, format = Binary)]
    files: Vec<Vec<u8>>,
    provider_id: Option<String>,
}

/// A reply with files: the binding of each file to a slot of the question.
#[derive(utoipa::ToSchema)]
#[allow(dead_code, reason = "only describes the form in the OpenAPI document")]
pub struct ReplyFilesForm {
    /// JSON `{interaction_id, idempotency_key, message?, bindings: [{slot, file_index}]}`.
    metadata: String,
    /// The files, numbered from 0 in the order sent.
    #[schema(value_type = Vec<String>, format = Binary)]
    files: Vec<Vec<u8>>,
}

/// The served document of `doc`.
pub fn finish(doc: utoipa::openapi::OpenApi) -> Value {
    let mut doc = serde_json::to_value(doc).expect("the OpenAPI document serialises");
    if let Some(paths) = doc["paths"].as_object_mut() {
        for item in paths.values_mut().filter_map(Value::as_object_mut) {
            for operation in item.values_mut().filter_map(Value::as_object_mut) {
                if operation.contains_key("responses") {
                    summarise(operation);
                    type_errors(operation);
                }
            }
        }
    }
    doc
}

/// The summary one line of at most [`SUMMARY_MAX`] characters, the whole comment its
/// description.
fn summarise(operation: &mut Map<String, Value>) {
    let said: Vec<&str> = ["summary", "description"]
        .iter()
        .filter_map(|k| operation.get(*k).and_then(Value::as_str))
        .filter(|t| !t.trim().is_empty())
        .collect();
    if said.is_empty() {
        return;
    }
    let whole = said.join("\n\n");
    let summary = summary_of(&whole);
    operation.insert("summary".into(), summary.into());
    operation.insert("description".into(), whole.into());
}

/// The first sentence of `text` on one line (up to its first `. ` or `: ` outside code and
/// brackets), cut
/// at a word to [`SUMMARY_MAX`] characters, never inside code.
pub fn summary_of(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (mut in_code, mut depth) = (false, 0usize);
    let mut end = flat.len();
    for (i, c) in flat.char_indices() {
        match c {
            '`' => in_code = !in_code,
            '(' if !in_code => depth += 1,
            ')' if !in_code => depth = depth.saturating_sub(1),
            '.' | ':' if !in_code && depth == 0 && flat[i + 1..].starts_with(' ') => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let sentence = flat[..end].trim_end_matches('.');
    if sentence.chars().count() <= SUMMARY_MAX {
        return sentence.to_owned();
    }
    let mut words: Vec<&str> = Vec::new();
    for word in sentence.split(' ') {
        let len: usize = words.iter().map(|w| w.chars().count() + 1).sum();
        if len + word.chars().count() + 1 > SUMMARY_MAX {
            break;
        }
        words.push(word);
    }
    // Code or brackets cut in two read as nonsense: the words go back to before they opened.
    let count = |words: &[&str], c: char| words.iter().map(|w| w.matches(c).count()).sum::<usize>();
    while count(&words, '`') % 2 == 1 || count(&words, '(') != count(&words, ')') {
        words.pop();
    }
    let mut cut = words.join(" ");
    cut = cut.trim_end_matches([',', ';', '(']).to_owned();
    cut.push('…');
    cut
}

/// Each 4xx and 5xx answer without a body of its own gets [`ErrorBody`].
fn type_errors(operation: &mut Map<String, Value>) {
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (code, response) in responses.iter_mut() {
        if (code.starts_with('4') || code.starts_with('5')) && response.get("content").is_none() {
            response["content"] = json!({"application/json": {
                "schema": {"$ref": "#/components/schemas/ErrorBody"}}});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_is_the_first_sentence_on_one_line_cut_at_a_word() {
        assert_eq!(
            summary_of("Creates a job. Without file inputs…"),
            "Creates a job"
        );
        assert_eq!(
            summary_of("The question the run waits on: `{request_id}`"),
            "The question the run waits on"
        );
        let long = summary_of(
            "Uploads the inputs (and for temporary runs the package) and starts the run",
        );
        assert!(
            long.chars().count() <= SUMMARY_MAX && long.ends_with('…'),
            "{long}"
        );
        assert_eq!(
            long,
            "Uploads the inputs (and for temporary runs the package) and…"
        );
        assert_eq!(
            summary_of("Imports `engine`'s login files (`multipart/form-data`: `files` parts)"),
            "Imports `engine`'s login files…"
        );
        let coded = summary_of(
            "The providers of an engine, by id (`supported: [...], custom: [...]`) and their names",
        );
        assert_eq!(coded, "The providers of an engine, by id…");
    }
}
