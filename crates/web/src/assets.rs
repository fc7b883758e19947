//! Front-end files embedded in the binary from `static/` — the console's stylesheet, the API
//! reference page and the vendored libraries (`scripts/vendor-frontend.sh`) — served under
//! `/static/`, so no page loads anything from outside the machine. Every HTML page carries a
//! Content-Security-Policy that holds the browser to that.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

#[derive(rust_embed::Embed)]
// The repository's `static/`, beside the server package that also serves it.
#[folder = "../../static/"]
struct Static;

/// Scripts, styles, fonts, images and requests only from this origin. Styles may be inline
/// (htmx and the API viewer set them); scripts may not.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; \
    connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'";

/// Sets [`CONTENT_SECURITY_POLICY`] on every response of the console and the example client.
pub fn policy_layer() -> tower_http::set_header::SetResponseHeaderLayer<HeaderValue> {
    tower_http::set_header::SetResponseHeaderLayer::overriding(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    )
}

/// `GET /static/{*path}`: an embedded file, revalidated by its hash.
pub async fn file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}

/// `GET /docs`: the API reference viewer over `/openapi.json`.
pub async fn docs(headers: HeaderMap) -> Response {
    serve("docs.html", &headers)
}

/// `GET /`: the console.
pub async fn home() -> Redirect {
    Redirect::to("/ui")
}

/// The file's SHA-256, in hex.
fn hash_of(file: &rust_embed::EmbeddedFile) -> String {
    file.metadata
        .sha256_hash()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some(file) = Static::get(path) else {
        return crate::detail(StatusCode::NOT_FOUND, "Not Found");
    };
    let etag = format!("\"{}\"", hash_of(&file));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mime = file.metadata.mimetype();
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        file.data.into_owned().into_response()
    };
    let h = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(mime) {
        h.insert(header::CONTENT_TYPE, value);
    }
    if let Ok(value) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, value);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if mime.starts_with("text/html") {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vendored files are byte for byte what `scripts/vendor-frontend.sh` recorded, and
    /// every one of them is embedded.
    #[test]
    fn vendored_files_match_their_manifest() {
        let manifest: serde_json::Value =
            serde_json::from_slice(&Static::get("vendor/VENDORED.json").unwrap().data).unwrap();
        let mut count = 0;
        for package in manifest.as_array().unwrap() {
            assert!(package["license"].as_str().is_some_and(|l| !l.is_empty()));
            for (path, sha) in package["files"].as_object().unwrap() {
                let file = Static::get(&format!("vendor/{path}"))
                    .unwrap_or_else(|| panic!("{path} is not embedded"));
                let hash: String = file
                    .metadata
                    .sha256_hash()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(
                    Some(hash.as_str()),
                    sha.as_str(),
                    "{path} was changed by hand"
                );
                count += 1;
            }
        }
        assert!(count >= 5);
    }
}
