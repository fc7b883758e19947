//! What an engine turn answered: finding the JSON answer in its text and classifying it.
//!
//! Extraction tries, in order: the whole text as one JSON object; the last fenced ```` ```json ````
//! block holding an object; the last balanced `{...}` that parses as an object. Anything but the
//! first sets `repair_level` to `deterministic_generic`. Classification follows the reference:
//! `{outcome: "final"}`, the `ask_user` shapes, `{outcome: "error"}`, the Normalized Skill Result
//! (`{success, data | error}`), and otherwise the object itself as final data. Unlike the
//! reference, an error turn is never validated as data: it fails the run.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// How much the answer had to be dug out of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairLevel {
    /// The text was exactly one JSON object.
    None,
    /// The object came from a fence or from surrounding prose.
    DeterministicGeneric,
}

/// Only the tail of very large outputs is searched for the answer, which comes last.
const SEARCH_TAIL_BYTES: usize = 4 * 1024 * 1024;
/// Upper bound on bytes examined while matching braces: adversarial text (thousands of unclosed
/// braces) would otherwise cost quadratic time; past the budget the search ends with what it has.
const SCAN_BUDGET: usize = 64 * 1024 * 1024;

/// The JSON object a turn answered with, if any.
pub fn extract(text: &str) -> Option<(Map<String, Value>, RepairLevel)> {
    if let Ok(Value::Object(o)) = serde_json::from_str(text.trim()) {
        return Some((o, RepairLevel::None));
    }
    let mut start = text.len().saturating_sub(SEARCH_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = &text[start..];
    last_fenced_object(tail)
        .or_else(|| last_balanced_object(tail))
        .map(|o| (o, RepairLevel::DeterministicGeneric))
}

/// The last JSON object in `text`: the whole text, else the last balanced `{...}` that parses
/// (the rule of the invoke host's programs, whose stdout may carry noise before the answer).
pub fn last_object(text: &str) -> Option<Map<String, Value>> {
    if let Ok(Value::Object(o)) = serde_json::from_str(text.trim()) {
        return Some(o);
    }
    let mut start = text.len().saturating_sub(SEARCH_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    last_balanced_object(&text[start..])
}

fn last_fenced_object(text: &str) -> Option<Map<String, Value>> {
    let mut found = None;
    let mut rest = text;
    while let Some(open) = rest.find("```json") {
        let body = &rest[open + "```json".len()..];
        let Some(close) = body.find("```") else { break };
        if let Ok(Value::Object(o)) = serde_json::from_str(body[..close].trim()) {
            found = Some(o);
        }
        rest = &body[close + 3..];
    }
    found
}

fn last_balanced_object(text: &str) -> Option<Map<String, Value>> {
    let bytes = text.as_bytes();
    let mut budget = SCAN_BUDGET;
    let mut found = None;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            if let Some(end) = matching_brace(bytes, i, &mut budget)
                && let Ok(Value::Object(o)) = serde_json::from_str(&text[i..=end])
            {
                found = Some(o);
                i = end + 1;
                continue;
            }
            if budget == 0 {
                break;
            }
        }
        i += 1;
    }
    found
}

/// Index of the `}` closing the `{` at `open`, skipping braces inside JSON strings.
fn matching_brace(bytes: &[u8], open: usize, budget: &mut usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (offset, &b) in bytes[open..].iter().enumerate() {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + offset);
                }
            }
            _ => {}
        }
    }
    None
}

/// Kinds of question an agent may ask (`upload_files` names the files it wants in
/// `ui_hints.files`, answered through `.../interaction/reply/files`).
const ASK_KINDS: [&str; 6] = [
    "choose_one",
    "confirm",
    "fill_fields",
    "open_text",
    "risk_ack",
    "upload_files",
];

/// What a turn's answer means for the run.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    /// The output data, to be validated against the output schema.
    Final(Value),
    /// A question for the user, normalised to the stored shape.
    AskUser(Value),
    /// The agent reported failure.
    Error(Reported),
}

/// A failure the engine or script reported itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// The `code` of an error object, when it had a string one.
    pub code: Option<String>,
    pub message: String,
    /// The `details` of an error object.
    pub details: Option<Value>,
}

impl Reported {
    /// `code: message`, the failure message of a run.
    pub fn text(&self) -> String {
        match &self.code {
            Some(code) => format!("{code}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

/// Classifies an extracted answer; malformed `ask_user` payloads are errors.
pub fn classify(answer: Map<String, Value>) -> TurnOutcome {
    let field = |k: &str| answer.get(k).and_then(Value::as_str);
    if field("outcome") == Some("final") {
        return TurnOutcome::Final(answer.get("final_data").cloned().unwrap_or(Value::Null));
    }
    if field("outcome") == Some("error") {
        return TurnOutcome::Error(reported(answer.get("error").or(answer.get("message"))));
    }
    let question = if field("outcome") == Some("ask_user") {
        Some(answer.get("interaction").or(answer.get("ask_user")))
    } else if field("action") == Some("ask_user") || field("type") == Some("ask_user") {
        Some(answer.get("interaction"))
    } else if answer.len() == 1 && answer.contains_key("ask_user") {
        Some(answer.get("ask_user"))
    } else {
        None
    };
    if let Some(question) = question {
        return match question.and_then(Value::as_object).and_then(normalise_question) {
            Some(q) => TurnOutcome::AskUser(q),
            None => TurnOutcome::Error(Reported {
                code: None,
                message: "Invalid ask_user payload: needs an integer interaction_id > 0 and a non-empty prompt"
                    .to_owned(),
                details: None,
            }),
        };
    }
    if let Some(Value::Bool(success)) = answer.get("success")
        && (answer.contains_key("data") || answer.contains_key("error"))
    {
        return if *success {
            TurnOutcome::Final(answer.get("data").cloned().unwrap_or(Value::Null))
        } else {
            TurnOutcome::Error(reported(answer.get("error")))
        };
    }
    TurnOutcome::Final(Value::Object(answer))
}

/// The failure an `error` value (a string or `{code?, message?, details?}`) describes.
pub fn reported(error: Option<&Value>) -> Reported {
    let text = |message: String| Reported {
        code: None,
        message,
        details: None,
    };
    const NO_MESSAGE: &str = "The engine reported an error without a message";
    match error {
        Some(Value::String(s)) if !s.is_empty() => text(s.clone()),
        Some(Value::Object(e)) => {
            let code = e.get("code").and_then(Value::as_str).map(str::to_owned);
            let message = e.get("message").and_then(Value::as_str);
            match (code, message) {
                (None, None) => text(Value::Object(e.clone()).to_string()),
                (code, message) => Reported {
                    code,
                    message: message.unwrap_or(NO_MESSAGE).to_owned(),
                    details: e.get("details").cloned(),
                },
            }
        }
        _ => text(NO_MESSAGE.to_owned()),
    }
}

fn normalise_question(q: &Map<String, Value>) -> Option<Value> {
    let id = q
        .get("interaction_id")
        .and_then(Value::as_u64)
        .filter(|id| *id > 0)?;
    let prompt = q
        .get("prompt")
        .or(q.get("question"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())?;
    let kind = match q.get("kind").and_then(Value::as_str).unwrap_or("open_text") {
        "decision" => "choose_one",
        "confirmation" => "confirm",
        k if ASK_KINDS.contains(&k) => k,
        _ => "open_text",
    };
    let options: Vec<Value> = q
        .get("options")
        .and_then(Value::as_array)
        .map(|opts| {
            opts.iter()
                .filter_map(|o| match o {
                    Value::String(s) => Some(json!({"label": s, "value": s})),
                    Value::Object(m) => {
                        let label = m.get("label").or(m.get("value"))?.clone();
                        let value = m.get("value").unwrap_or(&label).clone();
                        Some(json!({"label": label, "value": value}))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(json!({
        "interaction_id": id,
        "kind": kind,
        "prompt": prompt,
        "options": options,
        "ui_hints": q.get("ui_hints").cloned().unwrap_or_else(|| json!({})),
        "default_decision_policy": q.get("default_decision_policy").and_then(Value::as_str).unwrap_or("engine_judgement"),
        "required_fields": q.get("required_fields").cloned().unwrap_or_else(|| json!([])),
        "context": q.get("context").cloned().unwrap_or(Value::Null),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn extraction_order_and_repair_level() {
        assert_eq!(
            extract(" {\"a\": 1}\n"),
            Some((obj(json!({"a": 1})), RepairLevel::None))
        );
        let fenced = "Here you go:\n```json\n{\"a\": 1}\n```\nand later\n```json\n{\"a\": 2}\n```\n{\"b\": 3}";
        assert_eq!(
            extract(fenced),
            Some((obj(json!({"a": 2})), RepairLevel::DeterministicGeneric))
        );
        let prose = "step {not json} done {\"x\": {\"y\": \"}\\\"{\"}} trailing";
        assert_eq!(
            extract(prose),
            Some((
                obj(json!({"x": {"y": "}\"{"}})),
                RepairLevel::DeterministicGeneric
            ))
        );
        let last = "{\"a\":1}\nlog line\n{\"b\":2}";
        assert_eq!(extract(last).unwrap().0, obj(json!({"b": 2})));
        assert_eq!(
            extract("{unclosed {\"a\": [1, 2]}").unwrap().0,
            obj(json!({"a": [1, 2]}))
        );
        assert_eq!(extract("[1, 2]"), None, "only objects count");
        assert_eq!(extract("no json here"), None);
        assert_eq!(extract(""), None);
        assert_eq!(
            extract("ünïcødé {\"k\": \"värde\"} ✓").unwrap().0,
            obj(json!({"k": "värde"}))
        );
    }

    #[test]
    fn pathological_text_stays_bounded() {
        // Quadratic without the scan budget; with it, the search gives up and finds no answer.
        let text = "{".repeat(200_000) + "{\"ok\": true}";
        assert_eq!(extract(&text), None);
        let many = "{\"a\":1} ".repeat(50_000);
        assert_eq!(extract(&many).unwrap().0, obj(json!({"a": 1})));
    }

    #[test]
    fn classification() {
        assert_eq!(
            classify(obj(json!({"summary": "s"}))),
            TurnOutcome::Final(json!({"summary": "s"}))
        );
        assert_eq!(
            classify(obj(json!({"outcome": "final", "final_data": {"a": 1}}))),
            TurnOutcome::Final(json!({"a": 1}))
        );
        assert_eq!(
            classify(obj(json!({"success": true, "data": {"a": 1}}))),
            TurnOutcome::Final(json!({"a": 1}))
        );
        assert_eq!(
            classify(obj(
                json!({"success": false, "error": {"code": "INVALID_INPUT", "message": "no text"}})
            )),
            TurnOutcome::Error(Reported {
                code: Some("INVALID_INPUT".into()),
                message: "no text".into(),
                details: None
            })
        );
        assert_eq!(
            classify(obj(json!({"outcome": "error", "error": "model refused"}))),
            TurnOutcome::Error(Reported {
                code: None,
                message: "model refused".into(),
                details: None
            })
        );
    }

    #[test]
    fn ask_user_shapes_normalise_to_one_form() {
        let question = json!({"interaction_id": 3, "kind": "decision", "question": "Pick one",
                              "options": ["a", {"label": "B", "value": "b"}]});
        let expected = json!({
            "interaction_id": 3, "kind": "choose_one", "prompt": "Pick one",
            "options": [{"label": "a", "value": "a"}, {"label": "B", "value": "b"}],
            "ui_hints": {}, "default_decision_policy": "engine_judgement",
            "required_fields": [], "context": null,
        });
        for shape in [
            json!({"outcome": "ask_user", "interaction": question}),
            json!({"outcome": "ask_user", "ask_user": question}),
            json!({"ask_user": question}),
            json!({"action": "ask_user", "interaction": question}),
            json!({"type": "ask_user", "interaction": question}),
        ] {
            assert_eq!(
                classify(obj(shape.clone())),
                TurnOutcome::AskUser(expected.clone()),
                "{shape}"
            );
        }
        let confirm = classify(obj(
            json!({"ask_user": {"interaction_id": 1, "kind": "confirmation", "prompt": "ok?"}}),
        ));
        assert!(matches!(confirm, TurnOutcome::AskUser(q) if q["kind"] == "confirm"));
        let unknown = classify(obj(
            json!({"ask_user": {"interaction_id": 1, "kind": "poll", "prompt": "?"}}),
        ));
        assert!(matches!(unknown, TurnOutcome::AskUser(q) if q["kind"] == "open_text"));
        for bad in [
            json!({"ask_user": {"interaction_id": 0, "prompt": "x"}}),
            json!({"ask_user": {"interaction_id": "1", "prompt": "x"}}),
            json!({"ask_user": {"interaction_id": 1, "prompt": "  "}}),
            json!({"outcome": "ask_user"}),
        ] {
            assert!(
                matches!(classify(obj(bad.clone())), TurnOutcome::Error(r) if r.message.starts_with("Invalid ask_user payload")),
                "{bad}"
            );
        }
    }
}
