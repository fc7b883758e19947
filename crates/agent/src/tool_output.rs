//! What a tool's output may cost the model: each string at most [`STRING_CAP`] characters and
//! the whole output, as JSON text, at most [`TOTAL_CAP`]; a cut says how much it left out, and
//! the caller records it (`tool.output_compacted`).

use serde_json::Value;

/// The most characters of one string in a tool's output.
pub const STRING_CAP: usize = 4_000;
/// The most characters of a tool's whole output as JSON text.
pub const TOTAL_CAP: usize = 8_000;

/// Room kept for the note that says how much was cut.
const NOTE_RESERVE: usize = 80;

/// How many characters `c` takes inside a JSON string.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        _ => 1,
    }
}

/// A cut output: how long it was and how long it is now, in characters of its JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub original_chars: usize,
    pub kept_chars: usize,
}

/// `output` within the caps, and the cut when one was needed.
pub fn cap(output: &Value) -> (Value, Option<Cut>) {
    let original_chars = output.to_string().chars().count();
    let mut capped = output.clone();
    let cut_strings = cap_strings(&mut capped);
    let text = capped.to_string();
    let chars = text.chars().count();
    let capped = if chars > TOTAL_CAP {
        // The cut text travels as a JSON string, so its escapes count against the cap too.
        let (mut kept, mut cost) = (String::new(), 2);
        for c in text.chars() {
            let escaped = escaped_len(c);
            if cost + escaped > TOTAL_CAP - NOTE_RESERVE {
                break;
            }
            cost += escaped;
            kept.push(c);
        }
        let shown = kept.chars().count();
        Value::String(format!(
            "{kept}… [output cut: {shown} of {original_chars} characters shown]"
        ))
    } else {
        capped
    };
    let cut = (cut_strings || chars > TOTAL_CAP).then(|| Cut {
        original_chars,
        kept_chars: capped.to_string().chars().count(),
    });
    (capped, cut)
}

/// Cuts every string of `value` to [`STRING_CAP`]; whether any was cut.
fn cap_strings(value: &mut Value) -> bool {
    match value {
        Value::String(text) => {
            let chars = text.chars().count();
            if chars <= STRING_CAP {
                return false;
            }
            let kept: String = text.chars().take(STRING_CAP).collect();
            *text = format!("{kept}… [{} more characters cut]", chars - STRING_CAP);
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |cut, v| cap_strings(v) | cut),
        Value::Object(map) => map.values_mut().fold(false, |cut, v| cap_strings(v) | cut),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_outputs_pass_unchanged() {
        let output = json!({"ok": true, "items": ["a", "b"], "n": 3});
        assert_eq!(cap(&output), (output, None));
    }

    #[test]
    fn a_long_string_is_cut_to_its_cap_and_says_so() {
        let output = json!({"text": "é".repeat(STRING_CAP + 1000), "short": "x"});
        let (capped, cut) = cap(&output);
        let text = capped["text"].as_str().unwrap();
        assert!(text.starts_with(&"é".repeat(STRING_CAP)));
        assert!(
            text.ends_with("… [1000 more characters cut]"),
            "{}",
            &text[text.len() - 40..]
        );
        assert_eq!(capped["short"], "x");
        let cut = cut.unwrap();
        assert_eq!(cut.original_chars, output.to_string().chars().count());
        assert!(cut.kept_chars < cut.original_chars);
    }

    #[test]
    fn a_long_whole_is_cut_to_the_total_cap() {
        let output = json!((0..100).map(|n| format!("{n:0>200}")).collect::<Vec<_>>());
        let (capped, cut) = cap(&output);
        let text = capped.as_str().unwrap();
        assert!(text.contains("[output cut: "), "{text}");
        let sent = capped.to_string().chars().count();
        assert!(sent <= TOTAL_CAP, "{sent}");
        assert_eq!(cut.unwrap().kept_chars, sent);
    }
}
