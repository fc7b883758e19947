//! An OpenAI account, signed in the way `codex login` does it: an authorization-code flow with
//! PKCE (`callback`: the browser comes back to the service's callback route, or the user pastes
//! the address it ended on) and OpenAI's device-code flow (`auth_code_or_url`: a code the user
//! enters at the issuer's device page). The tokens become codex's `.codex/auth.json`, or the
//! `openai` entry of opencode's and kilo's `auth.json`.
//!
//! The issuer is `SKILL_RUNNER_OPENAI_AUTH_ISSUER` (tests point it at a fake on loopback).

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use skill_runner_types::engine::Engine;

use super::{Pkce, Tokens, write_private};
use crate::clock::Timestamp;

/// The client id of the CLIs' own login.
pub const CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
const SCOPE: &str = "openid profile email offline_access";
/// Where the issuer sends the browser back when the service has no public callback URL: the
/// CLIs' own listener address, which the user's browser fails to reach; the user pastes the
/// address it shows instead.
pub const LOCAL_REDIRECT: &str = "http://localhost:1455/auth/callback";

/// A device code the user is to enter at [`Issuer::device_page`].
#[derive(Debug, Clone)]
pub struct DeviceCode {
    pub device_auth_id: String,
    pub user_code: String,
    /// Seconds between polls.
    pub interval: u64,
}

/// The OpenAI authorization server.
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

    /// Where the browser goes to sign in; it comes back to `redirect_uri` with `code` and
    /// `state`.
    pub fn authorize_url(
        &self,
        redirect_uri: &str,
        state: &str,
        pkce: &Pkce,
        originator: &str,
    ) -> String {
        let mut url = url::Url::parse(&format!("{}/oauth/authorize", self.base))
            .expect("the issuer is a URL");
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", CLIENT_ID)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", SCOPE)
            .append_pair("code_challenge", &pkce.challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("id_token_add_organizations", "true")
            .append_pair("codex_cli_simplified_flow", "true")
            .append_pair("state", state)
            .append_pair("originator", originator);
        url.into()
    }

    /// The page where the user enters a device code.
    pub fn device_page(&self) -> String {
        format!("{}/codex/device", self.base)
    }

    /// Trades an authorization code for tokens.
    pub async fn exchange(
        &self,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<Tokens, String> {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("client_id", CLIENT_ID)
            .append_pair("code_verifier", verifier)
            .finish();
        let response = self
            .http
            .post(format!("{}/oauth/token", self.base))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .map_err(|e| format!("the token endpoint did not answer: {e}"))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(format!(
                "the token endpoint refused the code (HTTP {}): {}",
                status.as_u16(),
                body.get("error_description")
                    .or_else(|| body.get("error"))
                    .map_or_else(|| body.to_string(), Value::to_string)
            ));
        }
        let text = |name: &str| {
            body.get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("the token endpoint's answer lacks {name}"))
        };
        Ok(Tokens {
            id_token: Some(text("id_token")?),
            access_token: text("access_token")?,
            refresh_token: text("refresh_token")?,
            expires_in: body.get("expires_in").and_then(Value::as_u64),
        })
    }

    /// Asks for a device code.
    pub async fn device_code(&self) -> Result<DeviceCode, String> {
        let response = self
            .http
            .post(format!("{}/api/accounts/deviceauth/usercode", self.base))
            .json(&json!({"client_id": CLIENT_ID}))
            .send()
            .await
            .map_err(|e| format!("the device-code endpoint did not answer: {e}"))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let id = body.get("device_auth_id").and_then(Value::as_str);
        let code = body
            .get("user_code")
            .or_else(|| body.get("usercode"))
            .and_then(Value::as_str);
        match (status.is_success(), id, code) {
            (true, Some(id), Some(code)) => Ok(DeviceCode {
                device_auth_id: id.to_owned(),
                user_code: code.to_owned(),
                interval: body
                    .get("interval")
                    .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
                    .unwrap_or(5)
                    .clamp(1, 60),
            }),
            _ => Err(format!(
                "the device-code request failed (HTTP {}); retry, or use the callback method",
                status.as_u16()
            )),
        }
    }

    /// Polls for the user's approval of `device`: tokens once approved, `None` while pending.
    pub async fn poll_device(&self, device: &DeviceCode) -> Result<Option<Tokens>, String> {
        let response = self
            .http
            .post(format!("{}/api/accounts/deviceauth/token", self.base))
            .json(&json!({"device_auth_id": device.device_auth_id,
                          "user_code": device.user_code}))
            .send()
            .await
            .map_err(|e| format!("the device-token endpoint did not answer: {e}"))?;
        let status = response.status().as_u16();
        if matches!(status, 403 | 404) {
            return Ok(None);
        }
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let text = |name: &str| body.get(name).and_then(Value::as_str);
        match (status, text("authorization_code"), text("code_verifier")) {
            (200, Some(code), Some(verifier)) => {
                let redirect = format!("{}/deviceauth/callback", self.base);
                self.exchange(code, &redirect, verifier).await.map(Some)
            }
            _ => Err(format!(
                "the device authorization failed (HTTP {status}); start the login again"
            )),
        }
    }
}

/// The claims of an id token (its middle part), if it reads as one.
fn claims(id_token: &str) -> Value {
    id_token
        .split('.')
        .nth(1)
        .and_then(|part| URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null)
}

/// Writes `tokens` as `engine`'s login in `agent_home`, where its CLI reads its own; returns
/// the file written (relative to the agent home). Engines without an OpenAI login get `None`.
pub fn write_login(
    agent_home: &Path,
    engine: Engine,
    tokens: &Tokens,
) -> std::io::Result<Option<String>> {
    let (relpath, value) = match engine {
        Engine::Codex => (
            ".codex/auth.json",
            json!({
                "OPENAI_API_KEY": null,
                "tokens": {"id_token": tokens.id_token.as_deref().unwrap_or_default(),
                           "access_token": tokens.access_token,
                           "refresh_token": tokens.refresh_token, "account_id": null},
                "last_refresh": Timestamp::now(),
            }),
        ),
        Engine::Opencode | Engine::Kilo => {
            let app = if engine == Engine::Kilo {
                "kilo"
            } else {
                "opencode"
            };
            let relpath = format!(".local/share/{app}/auth.json");
            let mut stored: Value = std::fs::read(agent_home.join(&relpath))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            let auth = &claims(tokens.id_token.as_deref().unwrap_or_default())["https://api.openai.com/auth"];
            let expires = u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis(),
            )
            .unwrap_or(u64::MAX)
                + tokens.expires_in.unwrap_or(3600) * 1000;
            let mut entry = json!({"type": "oauth", "refresh": tokens.refresh_token,
                                   "access": tokens.access_token, "expires": expires});
            if let Some(account) = auth["chatgpt_account_id"].as_str() {
                entry["accountId"] = json!(account);
            }
            stored["openai"] = entry;
            return write_private(agent_home, &relpath, &stored).map(|()| Some(relpath));
        }
        _ => return Ok(None),
    };
    write_private(agent_home, relpath, &value)?;
    Ok(Some(relpath.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_keeps_its_other_logins() {
        let home = tempfile::tempdir().unwrap();
        let file = home.path().join(".local/share/opencode/auth.json");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, r#"{"anthropic": {"type": "api", "key": "k"}}"#).unwrap();
        let payload = URL_SAFE_NO_PAD.encode(
            json!({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-1"}}).to_string(),
        );
        let tokens = Tokens {
            id_token: Some(format!("h.{payload}.s")),
            access_token: "a".into(),
            refresh_token: "r".into(),
            expires_in: Some(60),
        };
        write_login(home.path(), Engine::Opencode, &tokens).unwrap();
        let stored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(stored["anthropic"]["key"], "k");
        assert_eq!(stored["openai"]["access"], "a");
        assert_eq!(stored["openai"]["accountId"], "acct-1");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
