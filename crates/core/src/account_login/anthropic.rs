//! A Claude account, signed in the way `claude` does it without a browser on the machine: the
//! user opens the sign-in page, and the page it ends on shows a code (`code#state`) that the
//! user pastes. The tokens become claude's `.claude/.credentials.json`.
//!
//! The issuer is `SKILL_RUNNER_ANTHROPIC_AUTH_ISSUER` (tests point it at a fake on loopback).

use std::path::Path;

use serde_json::{Value, json};

use super::{Pkce, Tokens, write_private};

/// The client id of claude's own login.
pub const CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
const SCOPES: [&str; 5] = [
    "user:profile",
    "user:inference",
    "user:sessions:claude_code",
    "user:mcp_servers",
    "user:file_upload",
];
/// Where claude keeps its login, in its home.
pub const CREDENTIALS: &str = ".claude/.credentials.json";

/// The Anthropic authorization server.
#[derive(Debug, Clone)]
pub struct Issuer {
    base: String,
    http: reqwest::Client,
}

impl Issuer {
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            http: super::http(),
        }
    }

    /// Where the sign-in ends: the page that shows the code to paste.
    pub fn code_page(&self) -> String {
        format!("{}/oauth/code/callback", self.base)
    }

    /// The sign-in page.
    pub fn authorize_url(&self, state: &str, pkce: &Pkce) -> String {
        let mut url = url::Url::parse(&format!("{}/oauth/authorize", self.base))
            .expect("the issuer is a URL");
        url.query_pairs_mut()
            .append_pair("code", "true")
            .append_pair("client_id", CLIENT_ID)
            .append_pair("response_type", "code")
            .append_pair("redirect_uri", &self.code_page())
            .append_pair("scope", &SCOPES.join(" "))
            .append_pair("code_challenge", &pkce.challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", state);
        url.into()
    }

    /// Trades the pasted code for tokens.
    pub async fn exchange(
        &self,
        code: &str,
        state: &str,
        verifier: &str,
    ) -> Result<Tokens, String> {
        let response = self
            .http
            .post(format!("{}/v1/oauth/token", self.base))
            .json(&json!({"grant_type": "authorization_code", "code": code,
                          "redirect_uri": self.code_page(), "client_id": CLIENT_ID,
                          "code_verifier": verifier, "state": state}))
            .send()
            .await
            .map_err(|e| format!("the token endpoint did not answer: {e}"))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let text = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
        match (
            status.is_success(),
            text("access_token"),
            text("refresh_token"),
        ) {
            (true, Some(access_token), Some(refresh_token)) => Ok(Tokens {
                id_token: None,
                access_token,
                refresh_token,
                expires_in: body.get("expires_in").and_then(Value::as_u64),
            }),
            _ => Err(format!(
                "the token endpoint refused the code (HTTP {}): {}",
                status.as_u16(),
                body.get("error_description")
                    .or_else(|| body.get("error"))
                    .map_or_else(|| body.to_string(), Value::to_string)
            )),
        }
    }
}

/// Writes `tokens` as claude's login in `agent_home`.
pub fn write_login(agent_home: &Path, tokens: &Tokens) -> std::io::Result<()> {
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX);
    let login = json!({"claudeAiOauth": {
        "accessToken": tokens.access_token,
        "refreshToken": tokens.refresh_token,
        "expiresAt": now_ms + tokens.expires_in.unwrap_or(3600) * 1000,
        "scopes": SCOPES,
        "subscriptionType": null,
    }});
    write_private(agent_home, CREDENTIALS, &login)
}
