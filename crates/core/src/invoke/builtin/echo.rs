//! `echo`: `{text}` → `{echoed}`, the text exactly as sent.

use serde_json::{Value, json};

use crate::invoke::result::{Output, SkillError};

pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "Text to send back; not blank."}
        },
        "required": ["text"],
        "additionalProperties": false
    })
}

pub fn run(input: &Value) -> Result<Output, SkillError> {
    let text = input["text"].as_str().unwrap_or_default();
    if text.trim().is_empty() {
        return Err(SkillError::invalid("text", "must not be blank"));
    }
    Ok(json!({"echoed": text}).into())
}
