//! A stand-in for the OpenAI and Anthropic authorization servers the CLIs sign accounts in at: the
//! authorization page (which signs in at once and sends the browser back with a code), the
//! token endpoint (which checks the PKCE verifier and the redirect address), and the device-code
//! endpoints, whose code a test approves with `POST /__oauth/approve {"user_code"}` as a user
//! would on the device page.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A code the token endpoint takes once.
#[derive(Debug, Clone)]
struct Grant {
    challenge: String,
    /// `None`: a device sign-in's code, redeemed at the issuer's own device callback.
    redirect_uri: Option<String>,
}

/// A device code and whether the user approved it.
#[derive(Debug, Clone)]
struct Device {
    user_code: String,
    approved: bool,
}

/// What the fake issuer remembers.
#[derive(Debug, Default)]
pub struct Issuer {
    grants: Mutex<HashMap<String, Grant>>,
    devices: Mutex<HashMap<String, Device>>,
}

fn token(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn error(status: StatusCode, code: &str) -> Response {
    (status, axum::Json(json!({"error": code}))).into_response()
}

fn challenge_of(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// An id token as the real issuer's reads: `header.claims.signature`.
fn id_token() -> String {
    let part = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.fake-signature",
        part(json!({"alg": "RS256", "typ": "JWT"})),
        part(
            json!({"email": "user@example.com", "exp": 4_102_444_800_u64, "iat": 1_764_000_000_u64,
                    "https://api.openai.com/auth": {"chatgpt_account_id": "acct-fake",
                        "chatgpt_plan_type": "plus", "chatgpt_user_id": "user-fake"}})
        ),
    )
}

impl Issuer {
    /// The answer to an issuer route, or `None` for a path it does not serve.
    pub fn answer(
        &self,
        method: &Method,
        path: &str,
        query: &str,
        body: &[u8],
    ) -> Option<Response> {
        let form: HashMap<String, String> = match method {
            &Method::GET => url::form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
            _ => match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(map)) => map
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, v.as_str()?.to_owned())))
                    .collect(),
                _ => url::form_urlencoded::parse(body).into_owned().collect(),
            },
        };
        let get = |name: &str| form.get(name).cloned().unwrap_or_default();
        Some(match (method, path) {
            (&Method::GET, "/oauth/authorize") => {
                if get("response_type") != "code" || get("code_challenge_method") != "S256" {
                    return Some(error(StatusCode::BAD_REQUEST, "invalid_request"));
                }
                let code = token("code");
                self.grants.lock().expect("grants lock").insert(
                    code.clone(),
                    Grant {
                        challenge: get("code_challenge"),
                        redirect_uri: Some(get("redirect_uri")),
                    },
                );
                let mut back = match url::Url::parse(&get("redirect_uri")) {
                    Ok(url) => url,
                    Err(_) => return Some(error(StatusCode::BAD_REQUEST, "invalid_redirect_uri")),
                };
                back.query_pairs_mut()
                    .append_pair("code", &code)
                    .append_pair("state", &get("state"));
                (StatusCode::FOUND, [(header::LOCATION, back.to_string())]).into_response()
            }
            // The API key codex asks for with its id token.
            (&Method::POST, "/oauth/token")
                if get("grant_type") == "urn:ietf:params:oauth:grant-type:token-exchange" =>
            {
                axum::Json(json!({"access_token": token("sk-fake-api-key"),
                                  "issued_token_type": "openai-api-key", "token_type": "Bearer"}))
                .into_response()
            }
            // OpenAI's, and Anthropic's (a JSON body).
            (&Method::POST, "/oauth/token" | "/v1/oauth/token") => {
                let grant = self
                    .grants
                    .lock()
                    .expect("grants lock")
                    .remove(&get("code"));
                let Some(grant) = grant else {
                    return Some(error(StatusCode::BAD_REQUEST, "invalid_grant"));
                };
                let redirect_ok = grant.redirect_uri.is_none_or(|r| r == get("redirect_uri"));
                if !redirect_ok || challenge_of(&get("code_verifier")) != grant.challenge {
                    return Some(error(StatusCode::BAD_REQUEST, "invalid_grant"));
                }
                axum::Json(
                    json!({"id_token": id_token(), "access_token": token("fake-access"),
                                  "refresh_token": token("fake-refresh"), "expires_in": 3600,
                                  "token_type": "Bearer"}),
                )
                .into_response()
            }
            (&Method::POST, "/api/accounts/deviceauth/usercode") => {
                let id = token("device");
                let user_code = format!("FAKE-{}", &uuid::Uuid::new_v4().simple().to_string()[..6])
                    .to_ascii_uppercase();
                self.devices.lock().expect("devices lock").insert(
                    id.clone(),
                    Device {
                        user_code: user_code.clone(),
                        approved: false,
                    },
                );
                axum::Json(json!({"device_auth_id": id, "user_code": user_code, "interval": "1"}))
                    .into_response()
            }
            (&Method::POST, "/api/accounts/deviceauth/token") => {
                let device = self
                    .devices
                    .lock()
                    .expect("devices lock")
                    .get(&get("device_auth_id"))
                    .cloned();
                match device {
                    Some(d) if d.user_code == get("user_code") && d.approved => {
                        self.devices
                            .lock()
                            .expect("devices lock")
                            .remove(&get("device_auth_id"));
                        let verifier = token("verifier");
                        let code = token("code");
                        self.grants.lock().expect("grants lock").insert(
                            code.clone(),
                            Grant {
                                challenge: challenge_of(&verifier),
                                redirect_uri: None,
                            },
                        );
                        axum::Json(json!({"authorization_code": code,
                                          "code_challenge": challenge_of(&verifier),
                                          "code_verifier": verifier}))
                        .into_response()
                    }
                    Some(_) => error(StatusCode::FORBIDDEN, "authorization_pending"),
                    None => error(StatusCode::NOT_FOUND, "unknown_device"),
                }
            }
            (&Method::POST, "/__oauth/approve") => {
                let mut devices = self.devices.lock().expect("devices lock");
                match devices
                    .values_mut()
                    .find(|d| d.user_code == get("user_code"))
                {
                    Some(device) => {
                        device.approved = true;
                        StatusCode::NO_CONTENT.into_response()
                    }
                    None => error(StatusCode::NOT_FOUND, "unknown_user_code"),
                }
            }
            _ => return None,
        })
    }
}
