//! Browsers may not change anything here on behalf of another site.
//!
//! A page on any site can make the operator's browser send a form POST (a "simple" request,
//! no preflight) or open a WebSocket to `http://127.0.0.1:8000`: that would install a package,
//! answer a question, upgrade an engine or type into the engine terminal, with whatever
//! credentials the browser holds — or none, when the service needs none. So a request that
//! changes state (any method but GET, HEAD and OPTIONS) or opens a WebSocket is refused when the
//! browser says it comes from another site or origin (`Sec-Fetch-Site`, else `Origin` compared
//! with `Host`). Clients that are not browsers send neither header and are not affected.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

/// The middleware.
pub async fn guard(request: Request, next: Next) -> Response {
    let changes_state = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let opens_socket = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    // HTTP/2 carries the host in the URI's authority, not in a `Host` header.
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .map(str::to_owned);
    if (changes_state || opens_socket) && from_elsewhere(request.headers(), host.as_deref()) {
        return crate::detail(
            StatusCode::FORBIDDEN,
            "Cross-site request refused: this service only takes changes from its own pages \
             or from clients that are not browsers",
        );
    }
    next.run(request).await
}

/// Whether a browser marked the request as coming from another origin.
fn from_elsewhere(headers: &HeaderMap, host: Option<&str>) -> bool {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        // `none`: typed by the user or opened from a bookmark.
        return !matches!(site, "same-origin" | "none");
    }
    match (text("origin"), host) {
        (Some(origin), Some(host)) => {
            let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            !authority.eq_ignore_ascii_case(host)
        }
        // `Origin: null` (a sandboxed frame, a file) or an origin without a host to compare.
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a request with these headers is refused.
    fn refused(pairs: &[(&'static str, &'static str)]) -> bool {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        let host = pairs.iter().find(|(k, _)| *k == "host").map(|(_, v)| *v);
        from_elsewhere(&map, host)
    }

    #[test]
    fn only_same_origin_browsers_and_other_clients_pass() {
        assert!(!refused(&[]));
        assert!(!refused(&[("sec-fetch-site", "same-origin")]));
        assert!(!refused(&[("sec-fetch-site", "none")]));
        assert!(refused(&[("sec-fetch-site", "cross-site")]));
        assert!(refused(&[("sec-fetch-site", "same-site")]));
        assert!(!refused(&[
            ("origin", "http://127.0.0.1:8000"),
            ("host", "127.0.0.1:8000")
        ]));
        assert!(refused(&[
            ("origin", "http://127.0.0.1:8011"),
            ("host", "127.0.0.1:8000")
        ]));
        assert!(refused(&[("origin", "null"), ("host", "127.0.0.1:8000")]));
        assert!(
            refused(&[("origin", "http://127.0.0.1:8000")]),
            "no host to compare"
        );
    }
}
