//! Who may call the API.
//!
//! Bearer tokens (`SKILL_RUNNER_API_TOKENS`, when set) close every route but
//! `/v1/system/ping` ([`require_token`]); Basic Auth (`UI_BASIC_AUTH_ENABLED`) closes the
//! administrative routes (package installs, engine upgrades, model snapshots, auth status:
//! [`Admin`]) and is the console's own login. Either credential opens what the other does: a
//! valid token passes the administrative routes, the console's user and password pass the
//! token check, because both already allow running code through the service.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::config::{ApiTokens, BasicAuth, Config};
use crate::state::AppState;

/// The one route open without a token: load balancers and `docker` health checks probe it.
const OPEN_PATH: &str = "/v1/system/ping";

/// A middleware over the whole router: with tokens configured, a request needs one (or the
/// console's Basic Auth); otherwise 401 with `WWW-Authenticate: Bearer`.
pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let config = &state.config;
    if config.api_tokens.is_none()
        || request.uri().path() == OPEN_PATH
        || carries_credentials(config, request.headers())
    {
        return next.run(request).await;
    }
    unauthorized(
        "Bearer realm=\"skill-runner\"",
        "Authentication required: send Authorization: Bearer <token>",
    )
}

/// A handler argument: the request carries the configured user and password (or Basic Auth
/// is off). Otherwise the answer is 401 with `WWW-Authenticate: Basic`.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        if state.config.admin_auth.is_none() || carries_credentials(&state.config, &parts.headers) {
            return Ok(Admin);
        }
        Err(unauthorized(
            "Basic realm=\"skill-runner\", charset=\"UTF-8\"",
            "Authentication required",
        ))
    }
}

/// Whether the request's `Authorization` is a configured bearer token or the configured Basic
/// Auth pair.
fn carries_credentials(config: &Config, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    config
        .api_tokens
        .as_ref()
        .is_some_and(|tokens| accepts_bearer(tokens, value))
        || config
            .admin_auth
            .as_ref()
            .is_some_and(|pair| accepts(pair, value))
}

fn unauthorized(challenge: &'static str, detail: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// Whether an `Authorization` value is `Bearer` with a configured token.
fn accepts_bearer(tokens: &ApiTokens, value: &str) -> bool {
    value.trim().split_once(' ').is_some_and(|(scheme, token)| {
        scheme.eq_ignore_ascii_case("bearer") && tokens.accepts(token.trim())
    })
}

/// Whether an `Authorization` value is `Basic` with the expected user and password; compared
/// in constant time so the answer's timing says nothing about how much matched.
fn accepts(expected: &BasicAuth, value: &str) -> bool {
    let Some((scheme, encoded)) = value.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let wanted = format!("{}:{}", expected.username, expected.password);
    bool::from(decoded.as_slice().ct_eq(wanted.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_pair_passes() {
        let expected = BasicAuth {
            username: "admin".into(),
            password: "pa:ss".into(),
        };
        let basic = |text: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(text)
            )
        };
        assert!(accepts(&expected, &basic("admin:pa:ss")));
        assert!(accepts(
            &expected,
            &basic("admin:pa:ss").replace("Basic", "basic")
        ));
        assert!(!accepts(&expected, &basic("admin:pa:s")));
        assert!(!accepts(&expected, &basic("admin:pa:ss ")));
        assert!(!accepts(&expected, &basic("other:pa:ss")));
        assert!(!accepts(&expected, "Bearer abc"));
        assert!(!accepts(&expected, "Basic !!!"));
        assert!(!accepts(&expected, "Basic"));
    }
}
