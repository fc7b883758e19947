//! The service as the example client sees it: JSON over HTTP at the configured base URL, with
//! Basic Auth when configured. Nothing of the service's own modules is used.

use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

/// Why a backend call did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// No HTTP answer: the service is down, the URL is wrong, the connection broke.
    #[error("the service at {base} cannot be reached: {reason}")]
    Unreachable { base: String, reason: String },
    /// The service answered with an error status; `detail` is its `detail` (or the body).
    #[error("the service answered {status}: {detail}")]
    Refused { status: StatusCode, detail: String },
}

/// The service's API.
#[derive(Debug, Clone)]
pub struct Backend {
    http: reqwest::Client,
    base: Url,
    auth: Option<(String, String)>,
}

impl Backend {
    pub fn new(base: Url, auth: Option<(String, String)>) -> anyhow::Result<Self> {
        // rustls needs a process-wide crypto provider (for an https backend); a second install
        // is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            http: reqwest::Client::builder().build()?,
            base,
            auth,
        })
    }

    /// The base URL, as configured.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// A request to `path` (absolute, e.g. `/v1/jobs`).
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut url = self.base.clone();
        let prefix = url.path().trim_end_matches('/').to_owned();
        match path.split_once('?') {
            Some((path, query)) => {
                url.set_path(&format!("{prefix}{path}"));
                url.set_query(Some(query));
            }
            None => url.set_path(&format!("{prefix}{path}")),
        }
        let request = self.http.request(method, url);
        match &self.auth {
            Some((user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        }
    }

    /// Sends `request` and reads a JSON answer.
    pub async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value, BackendError> {
        let response = self.send(request).await?;
        response.json().await.map_err(|e| self.unreachable(e))
    }

    /// Sends `request`; an error status becomes [`BackendError::Refused`].
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, BackendError> {
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        let detail = match serde_json::from_str::<Value>(&body) {
            Ok(Value::Object(map)) => match map.get("detail") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => body,
            },
            _ => body,
        };
        Err(BackendError::Refused { status, detail })
    }

    /// `GET path` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, BackendError> {
        self.json(self.request(Method::GET, path)).await
    }

    fn unreachable(&self, e: reqwest::Error) -> BackendError {
        // The error's own chain says why (refused, reset, timed out, not JSON).
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            reason = format!("{reason}: {cause}");
            source = cause.source();
        }
        BackendError::Unreachable {
            base: self.base.to_string(),
            reason,
        }
    }
}
