//! Logging an agent CLI in without a terminal: login files imported into the agent home (what
//! `codex login` or `opencode auth login` would have left there) and API keys imported for an
//! engine. Both live in the agent home (`SKILL_RUNNER_AGENT_HOME`), readable by the service's
//! user only, so they outlive a restart; a turn gets copies ([`crate::cli::Login`]) or the key
//! in its environment, never the originals.
//!
//! The browser and device-code flows of the vendors' CLIs are not offered: they need the
//! vendors' login servers, which a turn's network confinement (and this machine) does not
//! reach. A login done that way elsewhere is imported as its file.

use std::path::{Path, PathBuf};

use secrecy::SecretString;

use crate::Cli;
use crate::config::EngineConfig;
use skill_runner_types::engine::Engine;

/// A login file is a few KiB; anything larger is not one.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// An API key is at most this long.
const MAX_KEY_CHARS: usize = 4096;

/// Where imported API keys are kept in the agent home.
const KEYS_DIR: &str = ".skill-runner/api-keys";

/// A login file an engine's CLI reads, as the import dialog shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ImportFile {
    /// The name the uploaded file must have.
    pub name: String,
    /// Where it goes, relative to the agent home.
    pub target_relpath: String,
    pub required: bool,
    /// Where the CLI keeps it on a machine where it was logged in.
    pub hint: String,
    /// File name suffix the picker offers.
    pub accept: String,
}

/// The login files of `cli`, each required (the CLI is logged in when all are there).
pub fn import_spec(cli: Cli) -> Vec<ImportFile> {
    cli.credentials
        .iter()
        .map(|rel| {
            let name = file_name(rel);
            let accept = Path::new(rel)
                .extension()
                .map_or_else(String::new, |e| format!(".{}", e.to_string_lossy()));
            ImportFile {
                target_relpath: (*rel).to_owned(),
                required: true,
                hint: format!("$HOME/{rel}"),
                accept,
                name,
            }
        })
        .collect()
}

fn file_name(rel: &str) -> String {
    Path::new(rel)
        .file_name()
        .map_or_else(|| rel.to_owned(), |n| n.to_string_lossy().into_owned())
}

/// Why an import was refused: what is wrong and what to send instead.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The upload does not match the engine's login files.
    #[error("{0}")]
    Invalid(String),
    /// The agent home could not be written.
    #[error("cannot write to the agent home: {0}")]
    Io(#[from] std::io::Error),
}

/// A login file written into the agent home.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Imported {
    /// The uploaded file's name.
    pub source: String,
    pub target_relpath: String,
    pub target_path: String,
}

/// Checks `files` (name, bytes) against `cli`'s login files and writes them into the agent
/// home, each replacing the one there (owner-only, written aside then renamed into place).
/// Nothing is written unless every file passes: each name is one of the login files, given
/// once, none missing, none empty or above [`MAX_FILE_BYTES`], and a `.json` one is a JSON
/// object.
pub fn import_files(
    config: &EngineConfig,
    cli: Cli,
    files: &[(String, Vec<u8>)],
) -> Result<Vec<Imported>, ImportError> {
    let spec = import_spec(cli);
    let expected = || {
        spec.iter()
            .map(|f| format!("'{}'", f.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if spec.is_empty() {
        return Err(ImportError::Invalid(format!(
            "'{}' has no login file to import: log it in with an API key instead",
            cli.program
        )));
    }
    if files.is_empty() {
        return Err(ImportError::Invalid(format!(
            "files: no file was sent; send the login files of '{}' ({}) as repeated 'files' \
             parts",
            cli.program,
            expected()
        )));
    }
    let mut chosen: Vec<(&ImportFile, &[u8], &str)> = Vec::new();
    for (name, bytes) in files {
        // A client's path is never trusted: only the last component names the file.
        let base = file_name(name);
        let Some(target) = spec.iter().find(|f| f.name == base) else {
            return Err(ImportError::Invalid(format!(
                "files: '{name}' is not a login file of '{}'; expected {}",
                cli.program,
                expected()
            )));
        };
        if chosen.iter().any(|(t, _, _)| t.name == target.name) {
            return Err(ImportError::Invalid(format!(
                "files: '{}' was sent twice; send each login file once",
                target.name
            )));
        }
        check_content(&target.name, bytes)?;
        chosen.push((target, bytes, name));
    }
    if let Some(missing) = spec
        .iter()
        .find(|f| f.required && !chosen.iter().any(|(t, _, _)| t.name == f.name))
    {
        return Err(ImportError::Invalid(format!(
            "files: '{}' is missing; '{}' needs all of {}",
            missing.name,
            cli.program,
            expected()
        )));
    }
    let mut imported = Vec::new();
    for (target, bytes, source) in chosen {
        let path = config.agent_home.join(&target.target_relpath);
        write_private(&path, bytes)?;
        imported.push(Imported {
            source: source.to_owned(),
            target_relpath: target.target_relpath.clone(),
            target_path: path.to_string_lossy().into_owned(),
        });
    }
    Ok(imported)
}

fn check_content(name: &str, bytes: &[u8]) -> Result<(), ImportError> {
    if bytes.is_empty() {
        return Err(ImportError::Invalid(format!("files: '{name}' is empty")));
    }
    if bytes.len() > MAX_FILE_BYTES {
        return Err(ImportError::Invalid(format!(
            "files: '{name}' is {} bytes; a login file is at most {MAX_FILE_BYTES}",
            bytes.len()
        )));
    }
    if name.ends_with(".json") {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v) if v.is_object() => {}
            Ok(_) => {
                return Err(ImportError::Invalid(format!(
                    "files: '{name}' must hold a JSON object"
                )));
            }
            Err(e) => {
                return Err(ImportError::Invalid(format!(
                    "files: '{name}' is not valid JSON ({e})"
                )));
            }
        }
    }
    Ok(())
}

/// Stores `key` as `engine`'s API key (used when `SKILL_RUNNER_<ENGINE>_API_KEY` is not set).
pub fn import_api_key(
    config: &EngineConfig,
    engine: Engine,
    key: &str,
) -> Result<PathBuf, ImportError> {
    let key = key.trim();
    if key.is_empty() {
        return Err(ImportError::Invalid("value: the API key is empty".into()));
    }
    if key.chars().count() > MAX_KEY_CHARS
        || key.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ImportError::Invalid(format!(
            "value: an API key is one word of at most {MAX_KEY_CHARS} printable characters"
        )));
    }
    let path = key_path(config, engine);
    write_private(&path, key.as_bytes())?;
    Ok(path)
}

/// The API key imported for `engine`, if any.
pub fn imported_api_key(config: &EngineConfig, engine: &str) -> Option<SecretString> {
    let path = config.agent_home.join(KEYS_DIR).join(engine);
    let key = std::fs::read_to_string(path).ok()?;
    let key = key.trim();
    (!key.is_empty()).then(|| SecretString::from(key.to_owned()))
}

fn key_path(config: &EngineConfig, engine: Engine) -> PathBuf {
    config.agent_home.join(KEYS_DIR).join(engine.as_str())
}

/// Logs `engine` out: removes its imported API key and its CLI's login files from the agent
/// home. Returns what was removed (relative to the agent home).
pub fn log_out(config: &EngineConfig, engine: Engine, cli: Cli) -> std::io::Result<Vec<String>> {
    let key = format!("{KEYS_DIR}/{}", engine.as_str());
    let mut removed = Vec::new();
    for rel in std::iter::once(key.as_str()).chain(cli.credentials.iter().copied()) {
        match std::fs::remove_file(config.agent_home.join(rel)) {
            Ok(()) => removed.push(rel.to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Writes `bytes` to `path` readable by the owner only: written aside, then renamed over
/// whatever was there (a link there is replaced, never followed). Folders are created
/// owner-only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    let dir = path.parent().expect("a login file has a folder");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let staged = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4()));
    let written = crate::run_folder::write_new_private(&staged, bytes)
        .and_then(|()| std::fs::rename(&staged, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(home: &Path) -> EngineConfig {
        EngineConfig {
            agent_home: home.to_owned(),
            ..EngineConfig::for_tests()
        }
    }

    #[test]
    fn a_login_file_is_checked_then_written_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let config = config(tmp.path());
        let cli = crate::codex::CLI;
        let bad = |files: &[(&str, &[u8])]| {
            let files: Vec<_> = files
                .iter()
                .map(|(n, b)| ((*n).to_owned(), b.to_vec()))
                .collect();
            match import_files(&config, cli, &files) {
                Err(ImportError::Invalid(m)) => m,
                other => panic!("{other:?}"),
            }
        };
        assert!(bad(&[]).contains("'auth.json'"));
        assert!(bad(&[("token.txt", b"x")]).contains("not a login file"));
        assert!(bad(&[("auth.json", b"")]).contains("empty"));
        assert!(bad(&[("auth.json", b"not json")]).contains("not valid JSON"));
        assert!(bad(&[("auth.json", b"[1]")]).contains("JSON object"));
        assert!(bad(&[("auth.json", b"{}"), ("auth.json", b"{}")]).contains("twice"));
        assert!(!tmp.path().join(".codex").exists(), "nothing written");

        // A path in the name names only the file.
        let files = vec![("../../x/auth.json".to_owned(), br#"{"a": 1}"#.to_vec())];
        let imported = import_files(&config, cli, &files).unwrap();
        assert_eq!(imported[0].target_relpath, ".codex/auth.json");
        let written = tmp.path().join(".codex/auth.json");
        assert_eq!(std::fs::read(&written).unwrap(), br#"{"a": 1}"#);
        let mode = std::fs::metadata(&written).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        // Gemini needs both of its files.
        let gemini = crate::gemini::CLI;
        let one = vec![("oauth_creds.json".to_owned(), b"{}".to_vec())];
        assert!(matches!(
            import_files(&config, gemini, &one),
            Err(ImportError::Invalid(m)) if m.contains("missing")
        ));
    }

    #[test]
    fn an_api_key_is_kept_until_logged_out() {
        let tmp = tempfile::tempdir().unwrap();
        let config = config(tmp.path());
        assert!(import_api_key(&config, Engine::Qwen, "  ").is_err());
        assert!(import_api_key(&config, Engine::Qwen, "two words").is_err());
        assert!(imported_api_key(&config, "qwen").is_none());
        import_api_key(&config, Engine::Qwen, " sk-abc\n").unwrap();
        use secrecy::ExposeSecret as _;
        assert_eq!(
            imported_api_key(&config, "qwen").unwrap().expose_secret(),
            "sk-abc"
        );
        let removed = log_out(&config, Engine::Qwen, crate::qwen::CLI).unwrap();
        assert_eq!(removed, vec![".skill-runner/api-keys/qwen"]);
        assert!(imported_api_key(&config, "qwen").is_none());
    }
}
