//! Masking secrets in a turn's output before it reaches its logs.
//!
//! A client's `runtime_options.env` values are passed to the turn and must not come back out of
//! it: every occurrence in what the turn prints is replaced by as many `*` as it has bytes, so
//! the logs keep their length and every byte offset (event ids, `raw_ref`, log ranges) stays
//! true. Output arrives in pieces, so a piece's tail that may begin a secret is held back until
//! the next piece shows whether it does; at the end of the output nothing held can be a secret.

use std::sync::Arc;

/// Values shorter than this are not masked: masking every `1` or `on` would garble the output
/// (and such a value is no secret).
pub const MIN_MASKED_BYTES: usize = 4;

/// The secrets to mask, shared by a turn's streams.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Arc<[Vec<u8>]>);

impl Secrets {
    /// Each value is masked as it is, and as it reads inside JSON text (escaped as
    /// `serde_json` writes it, and with every non-ASCII character as `\uXXXX`, as Python's
    /// `json.dumps` does by default).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut kept: Vec<Vec<u8>> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_MASKED_BYTES)
            .flat_map(|v| {
                let json = serde_json::to_string(v).unwrap_or_default();
                let json = json[1..json.len() - 1].to_owned();
                let ascii = ascii_escaped(&json);
                [v.to_owned(), json, ascii]
            })
            .map(String::into_bytes)
            .collect();
        // Longest first, so a secret inside a longer one is masked as part of it.
        kept.sort_by_key(|v| std::cmp::Reverse(v.len()));
        kept.dedup();
        Self(kept.into())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Masks every whole occurrence in `text`.
    pub fn mask(&self, text: &mut [u8]) {
        self.mask_starting_before(text, text.len());
    }

    /// Masks the whole occurrences in `text` that start before `end`.
    fn mask_starting_before(&self, text: &mut [u8], end: usize) {
        for secret in self.0.iter() {
            let mut from = 0;
            while let Some(at) = find(&text[from..], secret) {
                let start = from + at;
                if start >= end {
                    break;
                }
                text[start..start + secret.len()].fill(b'*');
                from = start + secret.len();
            }
        }
    }

    /// [`Self::mask`] for text.
    pub fn mask_str(&self, text: &str) -> String {
        let mut bytes = text.as_bytes().to_vec();
        self.mask(&mut bytes);
        // `*` replaces whole secrets, which are whole UTF-8 sequences.
        String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }

    /// How many bytes at the end of `text` may begin a secret.
    fn partial_tail(&self, text: &[u8]) -> usize {
        self.0
            .iter()
            .filter_map(|secret| {
                let window = text.len().min(secret.len() - 1);
                (text.len() - window..text.len())
                    .find(|&p| secret.starts_with(&text[p..]))
                    .map(|p| text.len() - p)
            })
            .max()
            .unwrap_or(0)
    }

    /// Masks every string in `value` (an answer read from the turn's output).
    pub fn mask_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::String(text) => *text = self.mask_str(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.mask_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.mask_value(v)),
            _ => {}
        }
    }
}

/// `text` with every non-ASCII character as `\uXXXX` (UTF-16 units, lower-case hex).
fn ascii_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Masks one stream as it arrives.
#[derive(Debug)]
pub struct Masker {
    secrets: Secrets,
    held: Vec<u8>,
}

impl Masker {
    pub fn new(secrets: Secrets) -> Self {
        Self {
            secrets,
            held: Vec::new(),
        }
    }

    /// Takes the next piece; returns what may be written now, masked.
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.held);
        out.extend_from_slice(piece);
        if self.secrets.is_empty() {
            return out;
        }
        // What may begin a secret waits for the next piece; an occurrence starting before it
        // is whole (a longer secret around it would have begun in the held tail, or be whole).
        let keep = self.secrets.partial_tail(&out);
        let sent = out.len() - keep;
        self.secrets.mask_starting_before(&mut out, sent);
        self.held = out.split_off(sent);
        out
    }

    /// What is held at the end of the stream, masked.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.held);
        self.secrets.mask(&mut rest);
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeding `text` cut at every point masks the same as feeding it whole, and keeps its
    /// length.
    #[test]
    fn a_secret_cut_anywhere_is_masked_and_the_length_kept() {
        let secrets = Secrets::new(["s3cr3t-välue", "s3cr", "ok"]);
        let text = "a s3cr3t-välue and s3cr3t-väl and s3cr at the end s3cr3t-välue";
        let whole = secrets.mask_str(text);
        assert_eq!(
            whole,
            "a ************* and ****3t-väl and **** at the end *************"
        );
        assert_eq!(whole.len(), text.len());
        for cut in 0..=text.len() {
            let mut masker = Masker::new(secrets.clone());
            let mut out = masker.push(&text.as_bytes()[..cut]);
            out.extend(masker.push(&text.as_bytes()[cut..]));
            out.extend(masker.finish());
            assert_eq!(String::from_utf8(out).unwrap(), whole, "cut at {cut}");
        }
    }

    #[test]
    fn a_secret_escaped_in_json_is_masked_too() {
        let secrets = Secrets::new(["wärme \"quoted\" 😀"]);
        let python = r#"{"a": "w\u00e4rme \"quoted\" \ud83d\ude00"}"#;
        let rust = serde_json::json!({"a": "wärme \"quoted\" 😀"}).to_string();
        for text in [python, rust.as_str()] {
            let masked = secrets.mask_str(text);
            assert!(
                masked.starts_with(r#"{"a": ""#) || masked.starts_with(r#"{"a":""#),
                "{masked}"
            );
            assert!(!masked.contains("rme"), "{masked}");
            assert_eq!(masked.len(), text.len());
        }
        let mut answer = serde_json::json!({"list": ["x wärme \"quoted\" 😀 y"]});
        secrets.mask_value(&mut answer);
        assert!(!answer.to_string().contains("rme"), "{answer}");
    }

    #[test]
    fn nothing_is_held_when_the_tail_cannot_begin_a_secret() {
        let mut masker = Masker::new(Secrets::new(["token-123"]));
        assert_eq!(masker.push(b"line one\n"), b"line one\n");
        assert_eq!(masker.push(b"and tok"), b"and ");
        assert_eq!(masker.push(b"yo\n"), b"tokyo\n");
        assert!(masker.finish().is_empty());
    }
}
