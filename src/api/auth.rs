//! Who may call the API, and as whom.
//!
//! Every request is made by a [`Caller`]: a tenant, a role and the key presented. API keys
//! (`Authorization: Bearer sr_…`, made through `/v1/management/tenants/{id}/keys` or
//! `skill-runner keys create`) stand for their tenant and role; a `SKILL_RUNNER_API_TOKENS`
//! token, the console's Basic Auth (`UI_BASIC_AUTH_ENABLED`) and a read another node forwarded
//! (it carries the nodes' shared secret, [`NODE_HEADER`]: the client's credentials were
//! checked by the node it asked) stand for the default tenant's admin. With no token
//! configured and no key in force the service is open, and every caller is that admin, as
//! before tenants existed; otherwise a request without a credential gets 401 (but the probes,
//! `/v1/system/ping`, `/healthz` and `/readyz`), and so does a key revoked or expired.
//!
//! [`authenticate`] decides the caller and refuses (403) what its role does not allow:
//! [`needed_role`] is the one table of what each route needs. Basic Auth, when on, still
//! closes the administrative routes ([`Admin`]) to callers without it, a token or an operator
//! key.
//!
//! A browser cannot send a bearer token: with credentials required, a console page or `/docs`
//! opened without one is sent to `/ui/login`, where a token or key is exchanged for a cookie
//! ([`SESSION_COOKIE`]: `HttpOnly`, `SameSite=Strict`, `Secure` over HTTPS and on loopback)
//! that stands for it from then on. The login page and the static files it uses need nothing.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_extra::headers::authorization::{Basic, Bearer};
use axum_extra::headers::{Authorization, HeaderMapExt as _};

use skill_runner_core::jobs::relay::NODE_HEADER;
use skill_runner_core::tenants::access::Presented;
use skill_runner_core::tenants::{Caller, Role};
use subtle::ConstantTimeEq as _;

use crate::api::error::ApiError;
use crate::config::BasicAuth;
use crate::state::AppState;

/// What the credentials of a request turned out to be.
enum Identified {
    Caller(Caller),
    /// A key that opens nothing (unknown, revoked or expired).
    Refused,
    /// No credential this service knows.
    Nobody,
}

/// A middleware over the whole router: decides the request's [`Caller`] (put in its
/// extensions for the handlers) and refuses what the caller may not do.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    // A sign-in's callback is admitted by its one-time state: a browser redirect carries no
    // credential.
    let exempt = skill_runner_web::PROBES.contains(&path)
        || path == LOGIN_PATH
        || path.starts_with("/static/")
        || super::oauth_proxy::CALLBACK_PATHS.contains(&path);
    // The probes answer without the store: they say whether it answers.
    if exempt {
        return next.run(request).await;
    }
    let identified = match identify(&state, request.headers()).await {
        Ok(identified) => identified,
        Err(e) => return ApiError::Internal(e).into_response(),
    };
    let credentialed = matches!(identified, Identified::Caller(_));
    let caller = match identified {
        Identified::Caller(caller) => caller,
        Identified::Refused => return refuse(&request, Refusal::KeyRefused),
        Identified::Nobody => match open(&state).await {
            Ok(true) => Caller::operator(),
            Ok(false) => return refuse(&request, Refusal::NoCredential),
            Err(e) => return ApiError::Internal(e).into_response(),
        },
    };
    let needed = needed_role(request.method(), path);
    if !caller.may(needed) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "This key's role ({}) does not allow {} {path}: it needs {} {} key or wider",
                caller.role.as_str(),
                request.method(),
                if needed == Role::Operator || needed == Role::Admin {
                    "an"
                } else {
                    "a"
                },
                needed.as_str()
            ),
        )
        .into_response();
    }
    let keyed = caller.key_id.is_some().then(|| caller.tenant_id.clone());
    request.extensions_mut().insert(caller);
    if credentialed {
        request.extensions_mut().insert(Credentialed);
    }
    let mut response = next.run(request).await;
    if let Some(tenant) = keyed {
        rate_headers(&state, &tenant, response.headers_mut()).await;
    }
    response
}

/// The tenant's standing against its `runs_per_minute` quota, on every answer to one of its
/// keys (when it has that quota): `x-ratelimit-limit-requests`, `-remaining-requests`, and
/// `-reset-requests` (until the oldest request of the minute leaves it, as `12s`).
async fn rate_headers(state: &AppState, tenant: &str, headers: &mut HeaderMap) {
    let rate = match state.jobs.rate_state(tenant).await {
        Ok(Some(rate)) => rate,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("reading a tenant's request rate failed: {e}");
            return;
        }
    };
    let reset = format!("{}s", rate.reset.as_secs_f64().ceil() as u64);
    for (name, value) in [
        ("x-ratelimit-limit-requests", rate.limit.to_string()),
        ("x-ratelimit-remaining-requests", rate.remaining.to_string()),
        ("x-ratelimit-reset-requests", reset),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

/// Whether the service is open: no token configured and no key in force.
pub async fn open(state: &AppState) -> anyhow::Result<bool> {
    Ok(state.config.api_tokens.is_none() && !state.tenants.access().keys_in_force().await?)
}

/// Why a request opens nothing.
enum Refusal {
    /// No credential, on a closed service.
    NoCredential,
    /// A key unknown, revoked or expired (a console cookie too).
    KeyRefused,
}

/// A request that opens nothing: a browser opening a page goes to the login, coming back here
/// after it; anything else gets 401.
fn refuse(request: &Request, why: Refusal) -> Response {
    let path = request.uri().path();
    let page = path == "/ui" || path.starts_with("/ui/") || path == "/docs";
    let browser = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if page && browser && request.method() == Method::GET {
        let here = request.uri().path_and_query().map_or(path, |p| p.as_str());
        let login = format!("{LOGIN_PATH}?next={}", url_encode(here));
        return axum::response::Redirect::to(&login).into_response();
    }
    match why {
        Refusal::NoCredential => unauthorized(
            "Bearer realm=\"skill-runner\"",
            "Authentication required: send Authorization: Bearer <token>",
        ),
        Refusal::KeyRefused => unauthorized(
            "Bearer realm=\"skill-runner\", error=\"invalid_token\"",
            "The API key is unknown, revoked or expired: ask an administrator for a key",
        ),
    }
}

/// The role a route needs. Reading is `read`'s; making, answering and stopping runs
/// `submit`'s; tenants, the audit log, `/metrics` (which counts every tenant's runs) and what
/// deletes every tenant's runs (a clean-up, a data reset) the admins'; everything else that
/// changes the service (installs, engines, settings, keys, MCP servers), and what reads the
/// service's own state rather than a tenant's (engine logins, settings, logs), the
/// operators'.
pub fn needed_role(method: &Method, path: &str) -> Role {
    let run = |suffix: &str| {
        [
            "/v1/jobs/",
            "/v1/temp-skill-runs/",
            "/v1/management/runs/",
            "/ui/runs/",
        ]
        .iter()
        .any(|family| {
            path.strip_prefix(family)
                .and_then(|rest| rest.split_once('/'))
                .is_some_and(|(_, tail)| tail == suffix)
        })
    };
    // What reaches every tenant's runs at once (the metrics count them all).
    let every_tenant = path == "/v1/jobs/cleanup"
        || path == "/v1/management/system/reset-data"
        || path == "/ui/settings/reset";
    if path.starts_with("/v1/management/audit")
        || (path.starts_with("/v1/management/tenants") && !path.ends_with("/keys"))
        || (every_tenant && *method != Method::GET)
        || path == "/metrics"
        || path.starts_with("/ui/tenants")
        || path.starts_with("/ui/keys/")
    {
        return Role::Admin;
    }
    let operators = [
        "/v1/management/keys",
        "/v1/management/secrets",
        "/v1/management/tenants",
        "/v1/webhooks",
        "/v1/engines/auth-status",
        "/v1/engines/upgrades",
        "/v1/management/engines",
        "/v1/management/mcp",
        "/v1/management/system",
        "/ui/engines",
        "/ui/management/engines",
        "/ui/settings",
        "/ui/secrets",
    ];
    if operators.iter().any(|p| path.starts_with(p)) {
        return Role::Operator;
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        return Role::Read;
    }
    let reads = [
        "/v1/system/handshake",
        "/v1/skill-docs:validate",
        "/v1/tools:validate",
        "/ui/logout",
    ];
    if reads.contains(&path) {
        return Role::Read;
    }
    let submits = path == "/v1/jobs"
        || path == "/v1/temp-skill-runs"
        || path == "/v1/route"
        || path == "/agent/chat"
        || path == "/v1/agent/chat"
        || (*method == Method::DELETE && path.starts_with("/v1/sessions/"))
        || path == "/mcp"
        || path.starts_with("/v1/schedules")
        || path.starts_with("/ui/schedules/")
        || [
            "upload",
            "cancel",
            "reply",
            "interaction/reply",
            "interaction/reply/files",
            "reply/files",
            "rerun",
        ]
        .into_iter()
        .any(run)
        || path.ends_with(":invoke")
        || path.ends_with(":call")
        || (path.starts_with("/ui/skills/") && path.ends_with("/run"));
    if submits {
        Role::Submit
    } else {
        Role::Operator
    }
}

/// A handler argument: the request's caller (set by [`authenticate`]).
#[derive(Debug, Clone)]
pub struct Acting(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Acting {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        caller_of(parts).map(Acting)
    }
}

/// The caller [`authenticate`] put in the request; 401 on a route it let pass without one
/// (the probes and the login page, which need none).
pub fn caller_of(parts: &Parts) -> Result<Caller, ApiError> {
    parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Authentication required: send Authorization: Bearer <token>",
        )
    })
}

/// Who the request's credentials say it is: a key (bearer or console cookie), a configured
/// token, the console's Basic Auth, or another node.
async fn identify(state: &AppState, headers: &HeaderMap) -> anyhow::Result<Identified> {
    let bearer = headers
        .typed_get::<Authorization<Bearer>>()
        .map(|given| given.token().to_owned());
    for credential in bearer.into_iter().chain(session_cookie(headers)) {
        match identify_credential(state, &credential).await? {
            Identified::Nobody => {}
            known => return Ok(known),
        }
    }
    if from_node(state, headers) || carries_pair(state.config.admin_auth.as_ref(), headers) {
        return Ok(Identified::Caller(Caller::operator()));
    }
    Ok(Identified::Nobody)
}

/// Whether the request is a read another node forwarded: it carries the nodes' shared secret.
fn from_node(state: &AppState, headers: &HeaderMap) -> bool {
    state
        .store
        .cluster()
        .zip(headers.get(NODE_HEADER))
        .is_some_and(|(cluster, given)| {
            bool::from(given.as_bytes().ct_eq(cluster.secret().as_bytes()))
        })
}

/// What one bearer token or console cookie stands for.
async fn identify_credential(state: &AppState, credential: &str) -> anyhow::Result<Identified> {
    Ok(match state.tenants.access().check(credential).await? {
        Presented::Key(caller) => Identified::Caller(caller),
        Presented::Refused => Identified::Refused,
        Presented::NotAKey if token_accepted(state, credential) => {
            Identified::Caller(Caller::operator())
        }
        Presented::NotAKey => Identified::Nobody,
    })
}

/// The caller a console login's token or key stands for, if it stands for one.
pub async fn login_caller(state: &AppState, credential: &str) -> anyhow::Result<Option<Caller>> {
    Ok(match identify_credential(state, credential).await? {
        Identified::Caller(caller) => Some(caller),
        Identified::Refused | Identified::Nobody => None,
    })
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

/// Set by [`authenticate`] on a request whose caller a credential named (a key, a token,
/// Basic Auth, another node), not an open service.
#[derive(Debug, Clone, Copy)]
struct Credentialed;

/// A handler argument: Basic Auth is off, or the request carries the configured user and
/// password, a configured token or an operator's key (a credential [`authenticate`] took, of
/// an operator or wider). Otherwise the answer is 401 with `WWW-Authenticate: Basic`.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let credentialed_operator = parts.extensions.get::<Credentialed>().is_some()
            && parts
                .extensions
                .get::<Caller>()
                .is_some_and(|c| c.may(Role::Operator));
        if state.config.admin_auth.is_none() || credentialed_operator {
            return Ok(Admin);
        }
        Err(unauthorized(
            "Basic realm=\"skill-runner\", charset=\"UTF-8\"",
            "Authentication required",
        ))
    }
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
