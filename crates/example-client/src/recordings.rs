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

/// A recording as the list shows it.
pub struct Listed {
    pub request_id: String,
    pub skill_id: String,
    pub recorded_at: String,
}

/// Every recording, newest first.
pub fn list(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let mut listed = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Ok(start) = std::fs::read(&path).map(|b| serde_json::from_slice::<Value>(&b)) else {
            continue;
        };
        let Ok(start) = start else { continue };
        let text = |key: &str| start[key].as_str().unwrap_or_default().to_owned();
        listed.push(Listed {
            request_id: text("request_id"),
            skill_id: text("skill_id"),
            recorded_at: text("recorded_at"),
        });
    }
    listed.sort_by(|a, b| b.recorded_at.cmp(&a.recorded_at));
    Ok(listed)
}

/// The whole recording of a run: what [`start`] kept, plus `log`, every appended entry in
/// order; `None` when there is none.
pub fn read(dir: &Path, request_id: &str) -> std::io::Result<Option<Value>> {
    let Some(path) = path(dir, request_id) else {
        return Ok(None);
    };
    let start = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut recording: Value = serde_json::from_slice(&start).map_err(std::io::Error::other)?;
    let log = match std::fs::read_to_string(path.with_extension("jsonl")) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    // A line cut short by a crash mid-append is left out.
    let entries: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    recording["log"] = Value::Array(entries);
    Ok(Some(recording))
}
