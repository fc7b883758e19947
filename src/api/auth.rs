//! Who may call the API.
//!
//! Bearer tokens (`SKILL_RUNNER_API_TOKENS`, when set) close every route but the probes,
//! `/v1/system/ping`, `/healthz` and `/readyz` ([`require_token`]); Basic Auth
//! (`UI_BASIC_AUTH_ENABLED`) closes the administrative routes (package installs, engine
//! upgrades, model snapshots, auth status: [`Admin`]) and is the console's own login. Either
//! credential opens what the other does: a valid token passes the administrative routes, the
//! console's user and password pass the token check, because both already allow running code
//! through the service. Among nodes sharing a database, a read one node forwards to another
//! carries the nodes' shared secret ([`NODE_HEADER`]), which passes both checks: the client's
//! own credentials were checked by the node it asked.
//!
//! A browser cannot send a bearer token: with tokens configured, a console page or `/docs`
//! opened without one is sent to `/ui/login`, where the token is exchanged for a cookie
//! ([`SESSION_COOKIE`]: `HttpOnly`, `SameSite=Strict`, `Secure` over HTTPS and on loopback)
//! that stands for it from then on. The login page and the static files it uses need nothing.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_extra::headers::authorization::{Basic, Bearer};
use axum_extra::headers::{Authorization, HeaderMapExt as _};

use skill_runner_core::jobs::relay::NODE_HEADER;
use subtle::ConstantTimeEq as _;

use crate::api::error::ApiError;
use crate::config::BasicAuth;
use crate::state::AppState;

/// A middleware over the whole router: with tokens configured, a request needs one (or the
/// console's Basic Auth); otherwise 401 with `WWW-Authenticate: Bearer`.
pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let config = &state.config;
    let path = request.uri().path();
    if config.api_tokens.is_none()
        || skill_runner_web::PROBES.contains(&path)
        || path == LOGIN_PATH
        || path.starts_with("/static/")
        || carries_credentials(&state, request.headers())
    {
        return next.run(request).await;
    }
    // A browser opening a page: to the login, coming back here after it.
    let page = path == "/ui" || path.starts_with("/ui/") || path == "/docs";
    let browser = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if page && browser && request.method() == axum::http::Method::GET {
        let here = request.uri().path_and_query().map_or(path, |p| p.as_str());
        let login = format!("{LOGIN_PATH}?next={}", url_encode(here));
        return axum::response::Redirect::to(&login).into_response();
    }
    unauthorized(
        "Bearer realm=\"skill-runner\"",
        "Authentication required: send Authorization: Bearer <token>",
    )
}

/// The console's login page.
pub const LOGIN_PATH: &str = "/ui/login";

/// The cookie a console login sets: the token itself, sent back by the browser only.
pub const SESSION_COOKIE: &str = "skill_runner_token";

/// Whether `token` is one of the configured API tokens.
pub fn token_accepted(state: &AppState, token: &str) -> bool {
    state
        .config
        .api_tokens
        .as_ref()
        .is_some_and(|tokens| tokens.accepts(token))
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A handler argument: the request carries the configured user and password (or Basic Auth
/// is off). Otherwise the answer is 401 with `WWW-Authenticate: Basic`.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        if state.config.admin_auth.is_none() || carries_credentials(state, &parts.headers) {
            return Ok(Admin);
        }
        Err(unauthorized(
            "Basic realm=\"skill-runner\", charset=\"UTF-8\"",
            "Authentication required",
        ))
    }
}

/// Whether the request's `Authorization` is a configured bearer token or the configured Basic
/// Auth pair, or the request is a read another node of the cluster forwarded (it carries the
/// nodes' shared secret: the client's credentials were checked there).
fn carries_credentials(state: &AppState, headers: &HeaderMap) -> bool {
    let config = &state.config;
    config
        .api_tokens
        .as_ref()
        .zip(headers.typed_get::<Authorization<Bearer>>())
        .is_some_and(|(tokens, given)| tokens.accepts(given.token()))
        || session_cookie(headers).is_some_and(|given| token_accepted(state, &given))
        || carries_pair(config.admin_auth.as_ref(), headers)
        || state
            .store
            .cluster()
            .zip(headers.get(NODE_HEADER))
            .is_some_and(|(cluster, given)| {
                bool::from(given.as_bytes().ct_eq(cluster.secret().as_bytes()))
            })
}

/// The token of a console login, if the request carries its cookie.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse_encoded)
        .flatten()
        .find(|c| c.name() == SESSION_COOKIE)
        .map(|c| c.value().to_owned())
}

/// Whether the request's `Authorization` is Basic Auth with `pair`.
fn carries_pair(pair: Option<&BasicAuth>, headers: &HeaderMap) -> bool {
    pair.zip(headers.typed_get::<Authorization<Basic>>())
        .is_some_and(|(pair, given)| pair.accepts(given.username(), given.password()))
}

fn unauthorized(challenge: &'static str, detail: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn only_the_configured_pair_passes() {
        let pair = BasicAuth::new("admin".into(), "pa:ss".into());
        let passes = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            carries_pair(Some(&pair), &headers)
        };
        let basic = |text: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(text)
            )
        };
        assert!(passes(&basic("admin:pa:ss")));
        assert!(passes(&basic("admin:pa:ss").replace("Basic", "basic")));
        assert!(!passes(&basic("admin:pa:s")));
        assert!(!passes(&basic("admin:pa:ss ")));
        assert!(!passes(&basic("other:pa:ss")));
        assert!(!passes("Bearer abcdefghijklmnopqrstuvwxyz"));
        assert!(!passes("Basic !!!"));
        assert!(!passes("Basic"));
    }
}
