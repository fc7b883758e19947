//! Recordings: every run made through the client is kept in the recordings folder as
//! `<request_id>.json` (the create body, the uploads' names, sizes and hashes) and
//! `<request_id>.jsonl`, to which each event, reply and the result are appended as they pass
//! (`{"kind", "at", "value"}` per line), so a recording never needs rewriting.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// An uploaded file as recorded.
pub struct Upload<'a> {
    pub key: &'a str,
    pub name: &'a str,
    pub bytes: &'a [u8],
}

fn path(dir: &Path, request_id: &str) -> Option<PathBuf> {
    // Request ids come from the backend; anything but a plain name is not one.
    let plain = !request_id.is_empty()
        && request_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    plain.then(|| dir.join(format!("{request_id}.json")))
}

/// Starts the recording of a run just created.
pub fn start(
    dir: &Path,
    request_id: &str,
    skill_id: &str,
    create: &Value,
    uploads: &[Upload<'_>],
) -> std::io::Result<()> {
    let Some(path) = path(dir, request_id) else {
        return Err(std::io::Error::other(format!(
            "'{request_id}' is not a request id"
        )));
    };
    let uploads: Vec<Value> = uploads
        .iter()
        .map(|u| {
            json!({
                "key": u.key,
                "name": u.name,
                "size": u.bytes.len(),
                "sha256": Sha256::digest(u.bytes)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
            })
        })
        .collect();
    let recording = json!({
        "request_id": request_id,
        "skill_id": skill_id,
        "recorded_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "create": create,
        "uploads": uploads,
    });
    let text = serde_json::to_vec_pretty(&recording).map_err(std::io::Error::other)?;
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(partial, path)
}

/// Appends `value` (of `kind`: `event`, `reply`, `result`) to the run's recording.
pub fn append(dir: &Path, request_id: &str, kind: &str, value: &Value) -> std::io::Result<()> {
    use std::io::Write as _;
    let Some(path) = path(dir, request_id) else {
        return Err(std::io::Error::other(format!(
            "'{request_id}' is not a request id"
        )));
    };
    let line = json!({
        "kind": kind,
        "at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "value": value,
    });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path.with_extension("jsonl"))?;
    // One write per line, so concurrent appends never interleave within a line.
    file.write_all(format!("{line}\n").as_bytes())
}
