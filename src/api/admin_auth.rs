//! Basic Auth for the administrative routes (package installs, engine upgrades, model
//! snapshots, auth status), on when `UI_BASIC_AUTH_ENABLED` is set.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::config::BasicAuth;
use crate::error::ApiError;
use crate::state::AppState;

/// A handler argument: the request carries the configured user and password (or Basic Auth
/// is off). Otherwise the answer is 401 with `WWW-Authenticate: Basic`.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Some(expected) = &state.config.admin_auth else {
            return Ok(Admin);
        };
        let given = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if given.is_some_and(|value| accepts(expected, value)) {
            return Ok(Admin);
        }
        let mut response =
            ApiError::new(StatusCode::UNAUTHORIZED, "Authentication required").into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"skill-runner\", charset=\"UTF-8\""),
        );
        Err(response)
    }
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
