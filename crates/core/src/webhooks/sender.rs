//! Sending the outbox: each node claims due deliveries and sends them, a few at once.
//!
//! A try is a `POST` of the message with the Standard Webhooks headers, to an address of the
//! URL's host checked just before (the connection goes to that address: the name is not
//! looked up again, and a redirect is not followed). Only a 2xx answer delivers; the try gives
//! up after [`TIMEOUT`]. A failed delivery is tried again after the Standard Webhooks pauses
//! ([`PAUSES`]: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), under the same `webhook-id`, then
//! left `failed`. A `410 Gone` disables the webhook at once; so do five days in which every
//! delivery to it failed. Each try is logged with its status, latency and the first KiB of the
//! answer.

use std::sync::Arc;
use std::time::Duration;

use skill_runner_types::clock::Timestamp;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Webhooks, signing, target};
use crate::store::{AfterTry, ClaimedDelivery, WebhookAttempt};

/// How long one try may take.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// How long a node's claim of a delivery holds: a try, and a margin. A node that dies holding
/// one leaves it to another once this passed.
const CLAIM: Duration = Duration::from_secs(20);
/// Deliveries a node sends at once.
const IN_FLIGHT: usize = 8;
/// The pauses after each failed try, in seconds.
pub const PAUSES: [u64; 7] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];
/// A webhook whose deliveries all failed for this long is disabled.
const FAILING_LIMIT: Duration = Duration::from_secs(5 * 24 * 60 * 60);
/// How much of an answer a try's log keeps.
const KEPT_ANSWER: usize = 1024;
/// The longest a node waits before it looks for due deliveries again.
const LOOK: Duration = Duration::from_secs(1);

/// Deliveries tried, by outcome (`delivered`, `failed`, `refused`).
pub const TRIES: &str = "skill_runner_webhook_tries_total";
/// From a run's move to a delivery's success, seconds.
pub const DELIVERY_SECONDS: &str = "skill_runner_webhook_delivery_seconds";

/// The most clients a node keeps, one per target host and its checked addresses.
const CLIENTS: usize = 64;

/// What follows try `attempt` that the endpoint answered `status` (`None`: no answer), its
/// webhook failing since `failing_since`, at `now`.
fn after_try(
    status: Option<u16>,
    attempt: u32,
    failing_since: Option<Timestamp>,
    now: Timestamp,
) -> AfterTry {
    match status {
        Some(200..=299) => AfterTry::Delivered,
        Some(410) => AfterTry::Disable("the endpoint answered 410 Gone".into()),
        _ if failing_since.is_some_and(|since| now.duration_since(since) >= FAILING_LIMIT) => {
            AfterTry::Disable("every delivery failed for five days".into())
        }
        _ => match PAUSES.get(attempt as usize - 1) {
            Some(pause) => AfterTry::RetryAt(Timestamp::from(
                chrono::DateTime::<chrono::Utc>::from(now)
                    + chrono::Duration::seconds(*pause as i64),
            )),
            None => AfterTry::GiveUp,
        },
    }
}

impl Webhooks {
    /// Sends due deliveries until `shutdown`.
    pub async fn send_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let mut sending: JoinSet<()> = JoinSet::new();
        loop {
            while sending.len() < IN_FLIGHT {
                match self
                    .store
                    .claim_delivery(&self.node_id, Timestamp::after(CLAIM))
                    .await
                {
                    Ok(Some(claimed)) => {
                        let me = self.clone();
                        sending.spawn(async move { me.send(claimed).await });
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = format!("{e:#}"), "claiming a webhook delivery");
                        break;
                    }
                }
            }
            let look = match self.store.next_delivery_at().await {
                Ok(Some(at)) => at.duration_since(Timestamp::now()).min(LOOK),
                _ => LOOK,
            };
            tokio::select! {
                () = self.due.notified() => {}
                () = tokio::time::sleep(look) => {}
                Some(_) = sending.join_next(), if !sending.is_empty() => {}
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// One try of a claimed delivery, and what follows it.
    async fn send(&self, claimed: ClaimedDelivery) {
        if let Err(e) = skill_runner_types::faults::check("webhook-before-send") {
            // As a node that died holding the claim: another node sends it once it runs out.
            tracing::warn!(delivery_id = claimed.delivery_id, "{e}");
            return;
        }
        let attempt = claimed.attempts + 1;
        let at = Timestamp::now();
        let started = std::time::Instant::now();
        let outcome = self.post(&claimed).await;
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (status_code, response, error) = match outcome {
            Ok((status, answer)) => (Some(status), Some(answer), None),
            Err(why) => (None, None, Some(why)),
        };
        let next = after_try(
            status_code,
            attempt,
            claimed.failing_since,
            Timestamp::now(),
        );
        let kind = match (&next, &error) {
            (AfterTry::Delivered, _) => "delivered",
            (_, Some(_)) => "refused",
            _ => "failed",
        };
        metrics::counter!(TRIES, "outcome" => kind).increment(1);
        if matches!(next, AfterTry::Delivered) {
            metrics::histogram!(DELIVERY_SECONDS).record(
                Timestamp::now()
                    .duration_since(claimed.created_at)
                    .as_secs_f64(),
            );
        }
        let tried = WebhookAttempt {
            at,
            status_code,
            latency_ms,
            response,
            error,
        };
        if let Err(e) = self
            .store
            .record_try(&claimed.delivery_id, attempt, &tried, &next)
            .await
        {
            tracing::error!(
                delivery_id = claimed.delivery_id,
                error = format!("{e:#}"),
                "cannot record a webhook try; its claim runs out and it is sent again"
            );
        }
    }

    /// A client that connects `target`'s host to its checked addresses only (no second
    /// lookup, no proxy, no redirect followed), kept for the next delivery there: its TLS
    /// set-up and open connections are reused.
    fn client_for(&self, target: &target::Target) -> Result<reqwest::Client, String> {
        let key = (target.host.clone(), target.addrs.clone());
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(TIMEOUT)
            .resolve_to_addrs(&target.host, &target.addrs)
            .build()
            .map_err(|e| format!("no HTTP client: {e}"))?;
        if clients.len() >= CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// Posts the message: the endpoint's status and the first KiB of its answer, or why
    /// there was none.
    async fn post(&self, claimed: &ClaimedDelivery) -> Result<(u16, String), String> {
        let checked = target::resolve(&claimed.url, &self.allowed).await?;
        let client = self.client_for(&checked)?;
        let timestamp = chrono::Utc::now().timestamp();
        let body = claimed.payload.as_bytes().to_vec();
        let signature =
            signing::signature(&claimed.delivery_id, timestamp, &body, &claimed.secrets);
        let mut response = client
            .post(checked.url.clone())
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("skill-runner/", env!("CARGO_PKG_VERSION")),
            )
            .header("webhook-id", &claimed.delivery_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{e}"))?;
        let status = response.status().as_u16();
        let mut kept = Vec::new();
        while kept.len() < KEPT_ANSWER {
            match tokio::time::timeout(TIMEOUT, response.chunk()).await {
                Ok(Ok(Some(chunk))) => kept.extend_from_slice(&chunk),
                _ => break,
            }
        }
        kept.truncate(KEPT_ANSWER);
        Ok((status, String::from_utf8_lossy(&kept).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tries_follow_the_standard_schedule_then_stop_and_gone_or_five_days_disable() {
        let now = Timestamp::parse("2026-11-29T00:00:00Z").unwrap();
        assert_eq!(after_try(Some(204), 1, None, now), AfterTry::Delivered);
        let pauses: Vec<u64> = (1..=7)
            .map(
                |attempt| match after_try(Some(500), attempt, Some(now), now) {
                    AfterTry::RetryAt(at) => at.duration_since(now).as_secs(),
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        assert_eq!(pauses, [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]);
        assert_eq!(after_try(None, 8, Some(now), now), AfterTry::GiveUp);
        assert!(matches!(
            after_try(Some(410), 1, None, now),
            AfterTry::Disable(_)
        ));
        let days_ago = Timestamp::parse("2026-11-24T00:00:00Z").unwrap();
        assert!(matches!(
            after_try(Some(503), 3, Some(days_ago), now),
            AfterTry::Disable(why) if why.contains("five days")
        ));
    }
}
