//! An echo server, over TLS or plain HTTP: it records every request (the SNI, method, path,
//! headers and body) and answers it with that record, so a test sees exactly what a proxy or
//! client in between sent upstream, e.g. whether a secret was injected or leaked.

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::ServerThread;
use crate::tls::TestCa;

type Records = Arc<Mutex<Vec<Value>>>;

/// The echo server on a free loopback port, served by a thread of its own; stopped when
/// dropped.
///
/// Each request is recorded as `{"sni", "method", "path", "headers", "body"}` (the path with
/// its query, header names in lower case with repeated values joined by `", "`, the body as
/// lossy UTF-8) and answered 200 with that record as JSON, except `/redirect?to=<url>`,
/// answered `302 Found` with `Location: <url>` (recorded too), to test how redirects are
/// followed.
pub struct EchoServer {
    server: ServerThread,
    scheme: &'static str,
    records: Records,
}

impl EchoServer {
    /// Over HTTPS, with a leaf of `ca` valid for `names`.
    pub fn start_tls(ca: &TestCa, names: &[&str]) -> Self {
        let config = ca.server_config(names);
        let records = Records::default();
        let kept = records.clone();
        let server = ServerThread::start(move |listener| {
            crate::serve_tls(listener, config, move |sni| router(kept.clone(), sni))
        });
        Self {
            server,
            scheme: "https",
            records,
        }
    }

    /// Over plain HTTP (no SNI in the records).
    pub fn start_plain() -> Self {
        let records = Records::default();
        let kept = records.clone();
        let server = ServerThread::start(move |listener| async move {
            let _ = axum::serve(listener, router(kept, None)).await;
        });
        Self {
            server,
            scheme: "http",
            records,
        }
    }

    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    /// `https://127.0.0.1:<port>` or `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("{}://{}", self.scheme, self.server.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.records.lock().unwrap().clone()
    }
}

/// The routes of one connection, which knows the SNI its client sent.
fn router(records: Records, sni: Option<String>) -> axum::Router {
    axum::Router::new()
        .fallback(echo)
        .with_state(Echo { records, sni })
}

#[derive(Clone)]
struct Echo {
    records: Records,
    sni: Option<String>,
}

async fn echo(State(echo): State<Echo>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let mut headers = Map::new();
    for name in parts.headers.keys() {
        let values: Vec<_> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        headers.insert(name.as_str().to_owned(), Value::String(values.join(", ")));
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let record = json!({
        "sni": echo.sni,
        "method": parts.method.as_str(),
        "path": path,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    echo.records.lock().unwrap().push(record.clone());
    if parts.uri.path() == "/redirect" {
        let to = form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .find(|(name, _)| name == "to")
            .map(|(_, value)| value.into_owned());
        return match to.and_then(|to| HeaderValue::from_str(&to).ok()) {
            Some(location) => (StatusCode::FOUND, [(header::LOCATION, location)]).into_response(),
            None => (StatusCode::BAD_REQUEST, "/redirect needs ?to=<url>").into_response(),
        };
    }
    axum::Json(record).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get_echo(client: &reqwest::Client, url: &str) -> Value {
        let response = client
            .get(url)
            .header("Authorization", "Bearer abc")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        response.json().await.unwrap()
    }

    #[tokio::test]
    async fn tls_echo_records_sni_path_and_headers() {
        let ca = TestCa::new();
        let echo = EchoServer::start_tls(&ca, &["localhost", "127.0.0.1"]);
        assert_eq!(echo.base(), format!("https://127.0.0.1:{}", echo.port()));
        let client = ca.client();

        let url = format!("https://localhost:{}/x?y=1", echo.port());
        let answer = get_echo(&client, &url).await;
        assert_eq!(answer["sni"], "localhost");
        assert_eq!(answer["method"], "GET");
        assert_eq!(answer["path"], "/x?y=1");
        assert_eq!(answer["headers"]["authorization"], "Bearer abc");
        assert_eq!(
            answer["headers"]["host"],
            format!("localhost:{}", echo.port())
        );
        assert_eq!(answer["body"], "");

        // By IP address (the leaf's IP SAN); clients send no SNI for an address.
        let answer = get_echo(&client, &format!("{}/by-ip", echo.base())).await;
        assert_eq!(answer["sni"], Value::Null);
        assert_eq!(answer["path"], "/by-ip");
        assert_eq!(answer["headers"]["authorization"], "Bearer abc");

        let records = echo.requests();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0]["path"], "/x?y=1");
        assert_eq!(records[1]["path"], "/by-ip");
    }

    #[tokio::test]
    async fn a_client_that_does_not_trust_the_ca_fails() {
        let ca = TestCa::new();
        let echo = EchoServer::start_tls(&ca, &["localhost", "127.0.0.1"]);
        let other = TestCa::new().client();
        let url = format!("https://localhost:{}/x", echo.port());
        let error = other.get(&url).send().await.unwrap_err();
        assert!(error.is_connect(), "{error:?}");
        assert!(
            format!("{error:?}").contains("InvalidCertificate(UnknownIssuer)"),
            "the certificate was refused: {error:?}"
        );
        assert!(echo.requests().is_empty());
    }

    #[tokio::test]
    async fn a_leaf_is_valid_only_for_its_names() {
        let ca = TestCa::new();
        let echo = EchoServer::start_tls(&ca, &["localhost"]);
        let error = ca.client().get(echo.base()).send().await.unwrap_err();
        assert!(
            format!("{error:?}").contains("NotValidForName"),
            "127.0.0.1 is not in the leaf: {error:?}"
        );
    }

    #[tokio::test]
    async fn plain_echo_records_bodies_and_repeated_headers() {
        let echo = EchoServer::start_plain();
        assert_eq!(echo.base(), format!("http://127.0.0.1:{}", echo.port()));
        let response = crate::client()
            .post(format!("{}/in?a=b", echo.base()))
            .header("x-twice", "one")
            .header("x-twice", "two")
            .body("héllo")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["sni"], Value::Null);
        assert_eq!(answer["method"], "POST");
        assert_eq!(answer["path"], "/in?a=b");
        assert_eq!(answer["headers"]["x-twice"], "one, two");
        assert_eq!(answer["body"], "héllo");
        assert_eq!(echo.requests(), vec![answer]);
    }

    #[tokio::test]
    async fn redirect_answers_302_with_the_decoded_location() {
        let echo = EchoServer::start_plain();
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let response = client
            .get(format!(
                "{}/redirect?to=http%3A%2F%2Fexample.invalid%2F",
                echo.base()
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 302);
        assert_eq!(
            response.headers()[header::LOCATION],
            "http://example.invalid/"
        );
        let records = echo.requests();
        assert_eq!(records.len(), 1);
        assert_eq!(
            records[0]["path"],
            "/redirect?to=http%3A%2F%2Fexample.invalid%2F"
        );
    }

    #[tokio::test]
    async fn stops_when_dropped() {
        let echo = EchoServer::start_plain();
        let base = echo.base();
        drop(echo);
        let error = crate::client().get(base).send().await.unwrap_err();
        assert!(error.is_connect(), "{error:?}");
    }
}
