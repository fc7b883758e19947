//! Signing a vendor account in for an engine, with the service as the OAuth client (the
//! reference's `oauth_proxy`): the parts every vendor's flow shares (PKCE, what a user pastes,
//! the login file written whole), and each vendor's own ([`openai`], [`anthropic`]). The
//! tokens become the CLI's own login file, so the CLI uses them as if it had logged in itself.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub mod anthropic;
pub mod openai;

/// The client a vendor's authorization server is asked with.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap_or_default()
}

/// `len` random bytes as URL-safe base64 (a state, a PKCE verifier).
pub fn random_token(len: usize) -> String {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A PKCE pair (S256).
#[derive(Debug, Clone)]
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

impl Pkce {
    pub fn new() -> Self {
        let verifier = random_token(64);
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Self {
            verifier,
            challenge,
        }
    }
}

impl Default for Pkce {
    fn default() -> Self {
        Self::new()
    }
}

/// What the token endpoint gave.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// OpenAI's (its claims name the account); Anthropic gives none.
    pub id_token: Option<String>,
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in: Option<u64>,
}

/// The code (and state, when there is one) of what a user pasted: the whole address the
/// browser ended on, the code a vendor's page shows (`code#state`), or the code alone.
pub fn code_of(input: &str) -> Option<(String, Option<String>)> {
    let input = input.trim();
    if input.is_empty() {
        return None;
    }
    match url::Url::parse(input) {
        Ok(url) => {
            let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            let get = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            Some((get("code")?, get("state")))
        }
        Err(_) if input.contains(char::is_whitespace) => None,
        Err(_) => match input.split_once('#') {
            Some((code, state)) if !code.is_empty() => Some((
                code.to_owned(),
                Some(state.to_owned()).filter(|s| !s.is_empty()),
            )),
            Some(_) => None,
            None => Some((input.to_owned(), None)),
        },
    }
}

/// Writes `value` to `agent_home/relpath` readable by the service's user only, replacing the
/// file whole (a reader never sees half of it).
pub(crate) fn write_private(
    agent_home: &Path,
    relpath: &str,
    value: &Value,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = agent_home.join(relpath);
    let dir = path.parent().expect("a login file is in a folder");
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(".{}.tmp", random_token(6)));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(serde_json::to_string_pretty(value)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temp, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pasted_address_or_code_gives_the_code() {
        assert_eq!(
            code_of("http://localhost:1455/auth/callback?code=abc&state=xyz"),
            Some(("abc".into(), Some("xyz".into())))
        );
        assert_eq!(code_of(" abc "), Some(("abc".into(), None)));
        assert_eq!(
            code_of("http://localhost:1455/auth/callback?state=xyz"),
            None
        );
        assert_eq!(code_of("two words"), None);
        assert_eq!(code_of("abc#xyz"), Some(("abc".into(), Some("xyz".into()))));
    }

    #[test]
    fn the_challenge_is_the_verifiers_sha256() {
        let pkce = Pkce::new();
        let digest = Sha256::digest(pkce.verifier.as_bytes());
        assert_eq!(
            URL_SAFE_NO_PAD.decode(&pkce.challenge).unwrap(),
            digest.to_vec()
        );
        assert!(pkce.verifier.len() >= 43);
    }
}
