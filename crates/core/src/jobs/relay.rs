//! A run's event stream read from the node running its turn. Among nodes, a client may watch a
//! run through any of them: the node it asked relays the holder's own events, so the bytes,
//! the event ids and `Last-Event-ID` resumption are the same wherever it connects.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::{Stream, StreamExt as _, TryStreamExt as _};

use super::events::Offsets;
use super::live::{EventData, StreamEvent};
use super::{Family, Scope};
use crate::store::NodeAddress;

/// The header a node sends with a read it forwards to another, carrying the nodes' shared
/// secret; the API admits it as it admits a token.
pub const NODE_HEADER: &str = "x-skill-runner-node";

/// The event names a run's stream sends; a relayed event keeps its own.
const NAMES: [&str; 7] = [
    "snapshot",
    "stdout",
    "stderr",
    "status",
    "chat_event",
    "heartbeat",
    "end",
];

/// The HTTP client for reading other nodes' streams, made when first needed.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    client: OnceLock<reqwest::Client>,
}

impl Relay {
    fn client(&self, heartbeat: Duration) -> anyhow::Result<reqwest::Client> {
        if let Some(client) = self.client.get() {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // The holder says something at least every heartbeat; silence past two of them
            // means it stopped (or froze), and the relay gives up to read the run again.
            .read_timeout(heartbeat * 2 + Duration::from_secs(5))
            .build()
            .context("building the client for other nodes")?;
        Ok(self.client.get_or_init(|| client).clone())
    }

    /// `node`'s events of the request's run from `from` on, without its opening snapshot (the
    /// relaying stream sent its own). The stream ends with the holder's, or with an error when
    /// the connection breaks.
    pub(crate) async fn events(
        &self,
        node: &NodeAddress,
        secret: &str,
        heartbeat: Duration,
        (scope, request_id): (&Scope, &str),
        from: Offsets,
    ) -> anyhow::Result<impl Stream<Item = anyhow::Result<StreamEvent>> + Send + use<>> {
        let url = format!("{}{}", node.url, stream_path(scope, request_id));
        let response = self
            .client(heartbeat)?
            .get(&url)
            .header(NODE_HEADER, secret)
            .header("last-event-id", from.event_id())
            .header("accept", "text/event-stream")
            .send()
            .await
            .with_context(|| format!("opening node {}'s event stream", node.id))?;
        anyhow::ensure!(
            response.status().is_success(),
            "node {} answered {} for its event stream",
            node.id,
            response.status()
        );
        let events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream())
            .map_err(anyhow::Error::from)
            .try_filter_map(|sse| async move { Ok(relayed(sse)) });
        Ok(events.skip_while(|event| {
            let opening = matches!(event, Ok(e) if e.name == "snapshot");
            async move { opening }
        }))
    }
}

/// The route of a request's event stream as a client of `scope` reads it.
fn stream_path(scope: &Scope, request_id: &str) -> String {
    match scope.family {
        Family::Jobs => format!("/v1/jobs/{request_id}/events"),
        Family::Temp => format!("/v1/temp-skill-runs/{request_id}/events"),
        Family::Management => format!("/v1/management/runs/{request_id}/events"),
    }
}

/// An event of the holder's stream as this node sends it; `None` for what is not one of a
/// run's events (comments, unknown names).
fn relayed(sse: sse_stream::Sse) -> Option<StreamEvent> {
    let name = NAMES
        .into_iter()
        .find(|n| Some(*n) == sse.event.as_deref())?;
    Some(StreamEvent {
        name,
        id: sse.id.unwrap_or_default(),
        data: EventData::Text(sse.data.unwrap_or_default().into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_event_keeps_its_name_id_and_data_and_strangers_are_dropped() {
        let sse = sse_stream::Sse::default()
            .event("stdout")
            .id("12:0")
            .data(r#"{"from":0,"to":12,"chunk":"hello world\n"}"#);
        let event = relayed(sse).unwrap();
        assert_eq!(event.name, "stdout");
        assert_eq!(event.id, "12:0");
        assert_eq!(
            event.data,
            EventData::Text(r#"{"from":0,"to":12,"chunk":"hello world\n"}"#.into())
        );
        assert_eq!(relayed(sse_stream::Sse::default().event("surprise")), None);
        assert_eq!(relayed(sse_stream::Sse::default().data("no name")), None);
        assert_eq!(
            stream_path(
                &Scope {
                    family: Family::Temp,
                    tenant: None,
                },
                "r-1"
            ),
            "/v1/temp-skill-runs/r-1/events"
        );
    }
}
