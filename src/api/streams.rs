//! Server-Sent Events responses, each opened in a place of the stream caps
//! ([`skill_runner_web::stream_caps`]): per run or session, per client address, per tenant.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderValue;
use axum::http::request::Parts;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use skill_runner_web::stream_caps::StreamSlot;

use crate::api::error::{ApiError, ApiResult};
use crate::jobs::live::EventData;
use crate::state::AppState;

/// Who opens a stream, as the caps count it: the client's address and the caller's tenant.
pub struct Opener {
    address: Option<IpAddr>,
    tenant: std::sync::Arc<str>,
}

impl<S: Send + Sync> FromRequestParts<S> for Opener {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let caller = crate::api::auth::caller_of(parts)?;
        Ok(Self {
            address: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0.ip()),
            tenant: caller.tenant_id,
        })
    }
}

impl Opener {
    /// A place for a stream of `run` (a request's or a session's id); 429 past a cap.
    pub fn open(&self, state: &AppState, run: &str) -> ApiResult<StreamSlot> {
        state
            .streams
            .open(run, self.address, &self.tenant)
            .map_err(|full| ApiError::Throttled {
                detail: full.to_string().into(),
                retry_after_secs: 1,
            })
    }
}

/// An SSE response of `stream`, each item given as its event name, id and data; `slot` is
/// held until the stream ends or its client goes.
pub fn sse<T: Send + 'static>(
    slot: StreamSlot,
    stream: impl futures_util::Stream<Item = T> + Send + 'static,
    parts: fn(T) -> (&'static str, String, EventData),
) -> Response {
    let events = stream.map(move |item| {
        let _held = &slot;
        let (name, id, data) = parts(item);
        let event = Event::default().event(name).id(id);
        Ok::<_, Infallible>(match data {
            EventData::Json(value) => event.data(value.to_string()),
            // Serialized once for all the run's streams.
            EventData::Text(text) => event.data(&*text),
        })
    });
    let mut response = Sse::new(events).into_response();
    // Reverse proxies must pass events through as they come.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The MCP endpoint's event streams (`GET /mcp`, a session's notifications) take a place of
/// the caps like the others, keyed by their session; the place frees when the stream's body
/// is dropped. Its other answers are JSON and take none.
pub async fn capped_mcp_stream(
    axum::extract::State(state): axum::extract::State<AppState>,
    opener: Opener,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.method() != axum::http::Method::GET {
        return next.run(request).await;
    }
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default();
    let slot = match opener.open(&state, &format!("mcp:{session}")) {
        Ok(slot) => slot,
        Err(refused) => return refused.into_response(),
    };
    next.run(request).await.map(|body| {
        axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &slot;
            chunk
        }))
    })
}
