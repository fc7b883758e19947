//! Sign-ins the CLI does itself (the reference's `cli_delegate`): the service starts the CLI's
//! own login in its terminal with `HOME` at the agent home, reads the page and the code it
//! prints, and the session ends with the CLI: logged in when it exits 0 and its login file is
//! there. Codex's device login (`codex login --device-auth`) is the one offered: it needs no
//! browser on the machine and no input.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::json;
use skill_runner_types::engine::Engine;

use super::{AuthSession, EngineLogins};
use crate::error::{Error, Result};

/// The arguments of `engine`'s own device login, `issuer` when it is not the vendor's
/// (`None`: the engine has none here).
pub fn login_args(engine: Engine, method: &str, issuer: Option<&str>) -> Result<Vec<String>> {
    match (engine, method) {
        (Engine::Codex, "auth_code_or_url") => {
            let mut args = vec!["login".to_owned(), "--device-auth".to_owned()];
            if let Some(issuer) = issuer {
                args.extend(["--experimental_issuer".to_owned(), issuer.to_owned()]);
            }
            Ok(args)
        }
        (Engine::Codex, _) => Err(Error::Unprocessable(json!(
            "auth_method: codex's own login is delegated with 'auth_code_or_url' (its device \
             code); its browser login listens on the machine's localhost, which a remote \
             browser does not reach: use transport 'oauth_proxy' for 'callback'"
        ))),
        (other, _) => Err(Error::Unprocessable(json!(format!(
            "transport 'cli_delegate' runs codex's own device login; sign '{other}' in with \
             transport 'oauth_proxy', an API key, or its imported login files"
        )))),
    }
}

/// A terminal's colour and cursor codes.
static ESCAPES: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").expect("a valid pattern"));
static PAGE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"https?://[^\s\x1b]+").expect("a valid pattern"));
static CODE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Z0-9]{4,}(?:-[A-Z0-9]{4,})+\b").expect("a valid pattern"));

/// The page and the code in what the CLI printed so far (colours stripped).
pub fn page_and_code(printed: &str) -> (Option<String>, Option<String>) {
    let plain = ESCAPES.replace_all(printed, "");
    let url = PAGE
        .find_iter(&plain)
        .map(|m| m.as_str().to_owned())
        .find(|u| !u.contains("://localhost") && !u.contains("://127.0.0.1:1455"));
    let code = CODE.find(&plain).map(|m| m.as_str().to_owned());
    (url, code)
}

impl EngineLogins {
    /// A session for the CLI's own login of `engine`, started in the terminal.
    pub fn start_delegated(&self, engine: Engine, method: &str) -> Result<AuthSession> {
        let mut session = self.new_session(engine, method, Some("cli_delegate"));
        session.status = "waiting_user".into();
        session.input_kind = None;
        self.keep(session)
    }

    /// What the CLI of session `id` printed so far: the page and code it names are shown.
    pub fn delegate_printed(&self, id: &str, printed: &str) {
        let (url, code) = page_and_code(printed);
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(session) = sessions.get_mut(id).filter(|s| s.waiting()) {
            if session.auth_url.is_none() && url.is_some() {
                session.auth_url = url;
                session.updated_at = crate::clock::Timestamp::now();
            }
            if session.user_code.is_none() && code.is_some() {
                session.user_code = code;
                session.updated_at = crate::clock::Timestamp::now();
            }
        }
    }

    /// The CLI of session `id` exited with `code`, its last lines `tail`: logged in when it
    /// exited 0 and the engine has its login now (its waiting runs are queued).
    pub async fn delegate_exited(&self, id: &str, code: Option<i32>, tail: &str) -> Result<()> {
        let session = self.session(id, None)?;
        if !session.waiting() {
            return Ok(());
        }
        let engine = session.engine;
        if code == Some(0) && !self.jobs.engines().needs_login(engine) {
            let resumed = self.jobs.login_arrived(engine).await?;
            self.complete_sessions(engine, resumed);
            return Ok(());
        }
        let plain = ESCAPES.replace_all(tail, "");
        let why = match code {
            Some(code) => format!("{engine} login exited with code {code}"),
            None => format!("{engine} login was stopped"),
        };
        let last: Vec<&str> = plain.trim().lines().rev().take(3).collect();
        let detail = last.into_iter().rev().collect::<Vec<_>>().join(" / ");
        self.fail(id, format!("{why}: {detail}"));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_code_are_read_from_the_coloured_output() {
        let printed = "Follow these steps:\n1. Open this link\n   \x1b[94mhttp://127.0.0.1:4000/codex/device\x1b[0m\n2. Enter this one-time code \x1b[90m(expires in 15 minutes)\x1b[0m\n   \x1b[94mFAKE-70DD72\x1b[0m\n";
        assert_eq!(
            page_and_code(printed),
            (
                Some("http://127.0.0.1:4000/codex/device".into()),
                Some("FAKE-70DD72".into())
            )
        );
        assert!(login_args(Engine::Claude, "auth_code_or_url", None).is_err());
        assert_eq!(
            login_args(Engine::Codex, "auth_code_or_url", Some("http://x")).unwrap(),
            [
                "login",
                "--device-auth",
                "--experimental_issuer",
                "http://x"
            ]
        );
    }
}
