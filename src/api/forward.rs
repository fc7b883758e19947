//! Reads of a run's files sent on to the node that holds them.
//!
//! Among nodes sharing one database, a run's folder stays in the data dir of the node that ran
//! it. Any node answers a run's status and result from the database; a read of its files
//! (logs, artifacts, bundle, file tree) asked of another node is forwarded there, answer
//! unchanged, with the nodes' shared secret in place of the client's credentials. Event
//! streams are relayed by the job core instead (`skill_runner_core::jobs::relay`), since a
//! run can move to another node while its stream is open.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use skill_runner_core::jobs::relay::NODE_HEADER;
use skill_runner_store::NodeAddress;

use crate::api::error::ApiError;
use crate::state::AppState;

/// The request headers a forwarded read keeps: what shapes the answer, never credentials.
const KEPT: [HeaderName; 6] = [
    header::ACCEPT,
    header::ACCEPT_LANGUAGE,
    header::RANGE,
    header::IF_RANGE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
];

/// A middleware over the API: among nodes, a `GET` answered "held by another node" is asked
/// of that node. A read that is itself forwarded is never forwarded again.
pub async fn to_holder(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(cluster) = state.store.cluster() else {
        return next.run(request).await;
    };
    if request.method() != Method::GET || request.headers().contains_key(NODE_HEADER) {
        return next.run(request).await;
    }
    let uri = request.uri().clone();
    let kept: Vec<_> = KEPT
        .iter()
        .filter_map(|name| Some((name.clone(), request.headers().get(name)?.clone())))
        .collect();
    let response = next.run(request).await;
    let Some(node) = response.extensions().get::<NodeAddress>().cloned() else {
        return response;
    };
    match forward(&node, cluster.secret(), &uri, kept).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(
                node = node.id,
                error = format!("{e:#}"),
                "forwarding a read"
            );
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "Node {} holds the run's files and did not answer; retry in a moment",
                    node.id
                ),
            )
            .into_response()
        }
    }
}

fn client() -> anyhow::Result<&'static reqwest::Client> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(60))
        // The holder's own redirects are the client's to follow, not ours.
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    Ok(CLIENT.get_or_init(|| client))
}

/// `node`'s answer to the same read, streamed through.
async fn forward(
    node: &NodeAddress,
    secret: &str,
    uri: &Uri,
    kept: Vec<(HeaderName, HeaderValue)>,
) -> anyhow::Result<Response> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = client()?
        .get(format!("{}{path}", node.url))
        .header(NODE_HEADER, secret);
    for (name, value) in kept {
        request = request.header(name, value);
    }
    let answer = request.send().await?;
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if !is_hop_by_hop(name.as_str()) {
            response = response.header(name.as_str(), value.as_bytes());
        }
    }
    Ok(response.body(Body::from_stream(answer.bytes_stream()))?)
}

/// Headers about one connection, not the answer (RFC 9110, section 7.6.1).
fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    )
}
