//! `/ui/login`: a browser exchanges an API token for the console's session cookie (see
//! [`crate::api::auth`]), and `/ui/logout` forgets it.

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{ConsoleError, Lang, render};
use crate::api::auth::{LOGIN_PATH, SESSION_COOKIE, login_caller, open};
use crate::api::error::ApiError;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    l: Lang,
    section: &'static str,
    /// Where to go once logged in.
    next: String,
    error: Option<String>,
}

/// Where the login was asked from.
#[derive(Debug, Deserialize)]
pub struct Next {
    next: Option<String>,
}

/// The page a login may return to: a console page or `/docs` of this service, else `/ui`.
fn back_to(next: Option<&str>) -> String {
    next.filter(|n| {
        (n.starts_with("/ui") || n.starts_with("/docs"))
            && !n.starts_with("//")
            && !n.contains('\\')
            && !n.starts_with(LOGIN_PATH)
    })
    .unwrap_or("/ui")
    .to_owned()
}

/// `GET /ui/login`.
pub async fn page(l: Lang, Query(query): Query<Next>) -> Result<Html<String>, ConsoleError> {
    render(&LoginPage {
        l,
        section: "",
        next: back_to(query.next.as_deref()),
        error: None,
    })
}

/// The login form.
#[derive(Debug, Deserialize)]
pub struct Login {
    token: String,
    next: Option<String>,
}

/// `POST /ui/login`: a configured token sets the session cookie and goes back where the login
/// was asked from; another answers the page again, 401, saying so.
pub async fn submit(
    l: Lang,
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<Login>,
) -> Result<Response, ConsoleError> {
    let next = back_to(form.next.as_deref());
    let token = form.token.trim();
    let caller = login_caller(&state, token)
        .await
        .map_err(|e| ConsoleError(ApiError::Internal(e)))?;
    if caller.is_none()
        && open(&state)
            .await
            .map_err(|e| ConsoleError(ApiError::Internal(e)))?
    {
        return Ok(Redirect::to(&next).into_response());
    }
    if caller.is_none() {
        let page = render(&LoginPage {
            error: Some(l.tr("login.refused").to_owned()),
            l,
            section: "",
            next,
        })?;
        return Ok((StatusCode::UNAUTHORIZED, page).into_response());
    }
    let cookie = cookie::Cookie::build((SESSION_COOKIE, token.to_owned()))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .secure(secure_context(&headers))
        .build();
    let mut response = Redirect::to(&next).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        cookie
            .encoded()
            .to_string()
            .parse()
            .map_err(|e| ConsoleError(ApiError::Internal(anyhow::anyhow!("cookie: {e}"))))?,
    );
    Ok(response)
}

/// `POST /ui/logout`: forgets the session cookie.
pub async fn logout() -> Response {
    let gone = cookie::Cookie::build((SESSION_COOKIE, ""))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .max_age(cookie::time::Duration::ZERO)
        .build();
    let mut response = Redirect::to(LOGIN_PATH).into_response();
    if let Ok(value) = gone.encoded().to_string().parse() {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Whether the browser sees this origin as secure (HTTPS, said by a proxy in front, or
/// loopback): only then may the cookie be `Secure`, else the browser would drop it.
fn secure_context(headers: &HeaderMap) -> bool {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let name = host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            name
        } else {
            host
        }
    });
    https || matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_login_returns_only_to_this_service_s_pages() {
        assert_eq!(super::back_to(Some("/ui/runs?x=1")), "/ui/runs?x=1");
        assert_eq!(super::back_to(Some("/docs")), "/docs");
        for away in [
            "https://evil.example/ui",
            "//evil.example/ui",
            "/v1/jobs",
            "/ui/login",
        ] {
            assert_eq!(super::back_to(Some(away)), "/ui", "{away}");
        }
        assert_eq!(super::back_to(None), "/ui");
    }
}
