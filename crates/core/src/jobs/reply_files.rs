//! Files as the answer to a question (`POST .../interaction/reply/files`, the reference's
//! `skillrunner.interaction-files.v1`).
//!
//! A question of kind `upload_files` names the files it wants in `ui_hints.files`
//! (`[{name, required, hint, accept}]`); the client sends them with `bindings` that give each
//! file a slot. The files go to the run's workspace, under
//! `uploads/.interaction-replies/<interaction_id>/<fingerprint>/<slot>`, and the reply the next
//! turn reads is `{kind: "interaction_files", message, files: [{slot, name, path, size_bytes,
//! sha256}]}` (`path` relative to the workspace; `name` is the client's file name, shown, never
//! used as a path). The folder is named by a fingerprint of the files and bindings, so a retry
//! with the same `idempotency_key` and the same files is the same reply, and with other files
//! a conflict that leaves the accepted ones alone. The run's folder must be on this node.

use std::path::PathBuf;

use serde_json::{Value, json};
use sha2::Digest as _;

use super::cache::{hash_copy, hex_digest};
use super::interaction::Reply;
use super::{Jobs, Scope};
use crate::error::{Error, Result};

/// What a client may send in one file reply (advertised by the handshake).
#[derive(Debug, Clone, Copy)]
pub struct FileReplyLimits {
    pub max_files: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

/// The limits of `skillrunner.interaction-files.v1`, as the reference sets them.
pub const FILE_REPLY_LIMITS: FileReplyLimits = FileReplyLimits {
    max_files: 8,
    max_file_bytes: 32 << 20,
    max_total_bytes: 64 << 20,
};

/// A file a client sent, saved by the HTTP layer.
#[derive(Debug, Clone)]
pub struct ReceivedFile {
    /// The client's file name, as text.
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
}

/// `metadata` of a file reply.
#[derive(Debug, Clone)]
pub struct FileReply {
    pub interaction_id: u64,
    pub idempotency_key: String,
    pub message: Option<String>,
    /// `(slot, file_index)` pairs.
    pub bindings: Vec<(String, usize)>,
}

impl Jobs {
    /// Answers the pending `upload_files` question with `files`, then queues the next turn
    /// like [`Jobs::reply`]. The received files are moved or removed either way.
    pub async fn reply_with_files(
        &self,
        scope: &Scope,
        request_id: &str,
        reply: FileReply,
        files: Vec<ReceivedFile>,
    ) -> Result<()> {
        let outcome = self
            .answer_with_files(scope, request_id, &reply, &files)
            .await;
        for file in &files {
            let _ = tokio::fs::remove_file(&file.path).await;
        }
        outcome
    }

    async fn answer_with_files(
        &self,
        scope: &Scope,
        request_id: &str,
        reply: &FileReply,
        files: &[ReceivedFile],
    ) -> Result<()> {
        if files.is_empty() {
            return Err(unprocessable("at least one file is required"));
        }
        if let Some(empty) = files.iter().find(|f| f.size == 0) {
            return Err(unprocessable(format!("file '{}' is empty", empty.name)));
        }
        let pending = self
            .pending(scope, request_id, std::time::Duration::ZERO)
            .await?;
        self.has_room()?;
        // Not waiting on it: only a retry of an accepted reply is answered (by `reply`).
        let answering = pending
            .question
            .as_ref()
            .filter(|q| q["interaction_id"] == reply.interaction_id);
        let slots = match answering {
            Some(question) => wanted_slots(question)?,
            None => Vec::new(),
        };
        let bound = bind(reply, files, &slots, answering.is_some())?;
        let hashes = hash_files(files).await?;
        let fingerprint = {
            let mut digest = sha2::Sha256::new();
            digest.update(reply.interaction_id.to_be_bytes());
            digest.update(reply.message.as_deref().unwrap_or("").as_bytes());
            for (slot, index) in &bound {
                digest.update(slot.as_bytes());
                digest.update([0]);
                digest.update(hashes[*index].as_bytes());
            }
            hex_digest(digest)[..16].to_owned()
        };
        let rel = format!(
            "uploads/.interaction-replies/{}/{fingerprint}",
            reply.interaction_id
        );
        let response = json!({
            "kind": "interaction_files",
            "message": reply.message,
            "files": bound.iter().map(|(slot, index)| json!({
                "slot": slot,
                "name": files[*index].name,
                "path": format!("{rel}/{slot}"),
                "size_bytes": files[*index].size,
                "sha256": hashes[*index],
            })).collect::<Vec<_>>(),
        });
        let (_, run) = self.request_and_run(scope, request_id).await?;
        let folder = self.folder(&run.run_id);
        let dir = folder.workspace().join(&rel);
        let placed = if answering.is_some() {
            if !folder.is_here().await {
                return Err(Error::conflict(
                    "This run's folder is on another node: send the files to the node that ran \
                     its turn",
                ));
            }
            place(folder.workspace(), rel.clone(), &bound, files).await?
        } else {
            false
        };
        let answered = self
            .reply(
                scope,
                request_id,
                Reply {
                    interaction_id: reply.interaction_id,
                    response,
                    idempotency_key: Some(reply.idempotency_key.clone()),
                },
            )
            .await;
        if answered.is_err() && placed {
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
        answered
    }
}

/// A slot the question wants: its name and whether it must be given.
struct Slot {
    name: String,
    required: bool,
}

/// The slots of an `upload_files` question; 409 for another kind.
fn wanted_slots(question: &Value) -> Result<Vec<Slot>> {
    if question["kind"] != "upload_files" {
        return Err(Error::conflict(format!(
            "The pending question is of kind '{}': answer it with POST .../interaction/reply",
            question["kind"].as_str().unwrap_or("open_text")
        )));
    }
    let slots: Vec<Slot> = question["ui_hints"]["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|f| {
                    Some(Slot {
                        name: f["name"].as_str()?.to_owned(),
                        required: f["required"].as_bool().unwrap_or(true),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if slots.is_empty() {
        return Err(Error::conflict(
            "The pending question names no files (ui_hints.files): it cannot be answered with files",
        ));
    }
    Ok(slots)
}

/// The `(slot, file index)` pairs of `reply`, checked: every file bound once, to a slot the
/// question has (when it is pending), every required slot given, slot names usable as file
/// names.
fn bind(
    reply: &FileReply,
    files: &[ReceivedFile],
    slots: &[Slot],
    pending: bool,
) -> Result<Vec<(String, usize)>> {
    let mut used = vec![false; files.len()];
    let mut bound: Vec<(String, usize)> = Vec::new();
    for (slot, index) in &reply.bindings {
        if *index >= files.len() {
            return Err(unprocessable(format!(
                "binding of slot '{slot}': file_index {index} is past the {} file(s) sent",
                files.len()
            )));
        }
        if std::mem::replace(&mut used[*index], true) {
            return Err(unprocessable(format!(
                "file {index} is bound more than once"
            )));
        }
        if bound.iter().any(|(s, _)| s == slot) {
            return Err(unprocessable(format!(
                "slot '{slot}' is bound more than once"
            )));
        }
        let usable = !slot.is_empty()
            && slot.len() <= 128
            && slot != "."
            && slot != ".."
            && slot
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !usable {
            return Err(unprocessable(format!(
                "slot '{slot}' cannot name a file (letters, digits, '.', '_', '-')"
            )));
        }
        if pending && !slots.iter().any(|s| s.name == *slot) {
            return Err(unprocessable(format!(
                "slot '{slot}' is not one the question asks for ({})",
                slots
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        bound.push((slot.clone(), *index));
    }
    if let Some(index) = used.iter().position(|u| !u) {
        return Err(unprocessable(format!("file {index} is bound to no slot")));
    }
    if let Some(missing) = slots
        .iter()
        .find(|s| s.required && !bound.iter().any(|(b, _)| *b == s.name))
    {
        return Err(unprocessable(format!(
            "required slot '{}' has no file",
            missing.name
        )));
    }
    bound.sort();
    Ok(bound)
}

async fn hash_files(files: &[ReceivedFile]) -> Result<Vec<String>> {
    let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    tokio::task::spawn_blocking(move || {
        paths
            .iter()
            .map(|path| {
                let mut digest = sha2::Sha256::new();
                hash_copy(&mut digest, std::fs::File::open(path)?, std::io::sink())?;
                Ok(hex_digest(digest))
            })
            .collect::<std::io::Result<Vec<_>>>()
    })
    .await
    .map_err(|e| Error::Internal(e.into()))?
    .map_err(|e| Error::Internal(e.into()))
}

/// Moves the bound files into `workspace/rel`, each named by its slot; says whether it did
/// (`false`: that folder is there already, from an earlier call with the same files). The turn
/// could have planted links anywhere in its workspace: every folder on the way is checked
/// without following a link, and made (`0700`) where missing.
async fn place(
    workspace: PathBuf,
    rel: String,
    bound: &[(String, usize)],
    files: &[ReceivedFile],
) -> Result<bool> {
    use std::os::unix::fs::DirBuilderExt as _;
    let sources: Vec<(PathBuf, String)> = bound
        .iter()
        .map(|(slot, index)| (files[*index].path.clone(), slot.clone()))
        .collect();
    tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
        let mut dir = workspace;
        let names: Vec<&str> = rel.split('/').collect();
        for (i, name) in names.iter().enumerate() {
            dir.push(name);
            match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() && i + 1 == names.len() => return Ok(false),
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!(
                            "the run's workspace has something else than a folder at {}",
                            dir.display()
                        ),
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
                }
                Err(e) => return Err(e),
            }
        }
        for (from, slot) in sources {
            let to = dir.join(slot);
            if std::fs::rename(&from, &to).is_err() {
                // Another file system: copy into a new file.
                std::io::copy(
                    &mut std::fs::File::open(&from)?,
                    &mut std::fs::File::create_new(&to)?,
                )?;
            }
        }
        Ok(true)
    })
    .await
    .map_err(|e| Error::Internal(e.into()))?
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => Error::conflict(e.to_string()),
        _ => Error::Internal(e.into()),
    })
}

fn unprocessable(message: impl Into<String>) -> Error {
    Error::Unprocessable(Value::String(message.into()))
}
