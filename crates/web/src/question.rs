//! A pending question as a form, and a submitted form as the reply its kind calls for; the
//! console and the example client render and read the same form (`partials/question.html`).

use serde_json::{Value, json};

/// A pending question, as the form renders it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub interaction_id: u64,
    pub kind: String,
    pub prompt: String,
    pub options: Vec<Choice>,
    pub fields: Vec<Field>,
}

/// An option of `choose_one`: its label, and its value as JSON (sent back as the response).
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub label: String,
    pub value: String,
}

/// A field of `fill_fields`.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub label: String,
}

impl Question {
    /// From a pending question as the API gives it (`pending` of `.../interaction/pending`).
    pub fn of(q: &Value) -> Option<Self> {
        let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        let options = q["options"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| Choice {
                label: text(&o["label"]),
                value: o["value"].to_string(),
            })
            .collect();
        let fields = q["required_fields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| {
                let name = f.as_str().or_else(|| f["name"].as_str())?.to_owned();
                let label = f["label"].as_str().unwrap_or(&name).to_owned();
                Some(Field { name, label })
            })
            .collect();
        Some(Self {
            interaction_id: q["interaction_id"].as_u64()?,
            kind: q["kind"].as_str().unwrap_or("open_text").to_owned(),
            prompt: q["prompt"].as_str().unwrap_or_default().to_owned(),
            options,
            fields,
        })
    }
}

/// The question's id and the response a submitted question form stands for — `choose_one`:
/// the option's value; `confirm`: `true`/`false`; `fill_fields`: `{field: text}`; `risk_ack`:
/// `true`; `open_text`: the text. `Err` names what the form lacks.
pub fn reply_of(form: &[(String, String)]) -> Result<(u64, Value), String> {
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let missing = |name: &str| format!("The form has no '{name}'");
    let interaction_id = field("interaction_id")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| missing("interaction_id"))?;
    let response = match field("kind").unwrap_or("open_text") {
        "choose_one" => {
            let raw = field("choice").ok_or_else(|| missing("choice"))?;
            serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
        }
        "confirm" => Value::Bool(field("confirm").ok_or_else(|| missing("confirm"))? == "true"),
        "fill_fields" => Value::Object(
            form.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("field.")?.to_owned(), json!(v))))
                .collect(),
        ),
        "risk_ack" => Value::Bool(field("ack").ok_or_else(|| missing("ack"))? == "true"),
        _ => Value::String(field("text").ok_or_else(|| missing("text"))?.to_owned()),
    };
    Ok((interaction_id, response))
}
