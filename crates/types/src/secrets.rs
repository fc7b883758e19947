//! What counts as a secret in JSON the service echoes back (session events, validation
//! problems): the values of fields named like `password`, `api_key`, `*_token`.

use serde_json::Value;

/// Replaces the values of secret-looking fields ([`is_secret_key`]) anywhere in `value`.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if is_secret_key(key) && !field.is_object() && !field.is_array() && !field.is_null()
                {
                    *field = Value::String("[redacted]".into());
                } else {
                    redact(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Whether a field of this name holds a secret (`input_tokens` is a count, not a token).
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('-', "_");
    const NAMES: [&str; 8] = [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "authorization",
        "cookie",
    ];
    NAMES.contains(&key.as_str())
        || ["_password", "_secret", "_token", "_api_key", "_apikey"]
            .iter()
            .any(|suffix| key.ends_with(suffix))
}
