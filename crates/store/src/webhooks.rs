//! A tenant's webhooks and the outbox of their deliveries.
//!
//! A delivery is written in the same transaction as the move of the run it tells of (`tell`,
//! called by the writes that end a run or make it wait), so a move is told once and never
//! lost to a crash between the two. Any node sends it: a node claims a due delivery for a
//! while (`claimed_until`), and a delivery whose claim ran out (its node died before it was
//! sent) is claimed again by another. A run's messages to one endpoint go in order: one is
//! claimed only when no earlier one of the same run and endpoint is still pending.

use serde::Serialize;
use skill_runner_types::clock::Timestamp;

use super::Sqlite;

/// The events a webhook may ask for.
pub const EVENTS: [&str; 5] = [
    "run.succeeded",
    "run.failed",
    "run.canceled",
    "run.waiting_user",
    "run.waiting_auth",
];

/// A webhook as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Webhook {
    pub webhook_id: String,
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    /// Since when every delivery failed; `null` after a success.
    pub failing_since: Option<Timestamp>,
    /// When the service stopped sending to it (the endpoint answered 410, or failed for five
    /// days), and why.
    pub disabled_at: Option<Timestamp>,
    pub disabled_reason: Option<String>,
    /// Until when the secret before the last rotation still signs beside the new one.
    pub previous_secret_until: Option<Timestamp>,
    pub created_at: Timestamp,
}

#[derive(sqlx::FromRow)]
pub(crate) struct WebhookRow {
    webhook_id: String,
    tenant_id: String,
    url: String,
    events: String,
    failing_since: Option<Timestamp>,
    disabled_at: Option<Timestamp>,
    disabled_reason: Option<String>,
    previous_until: Option<Timestamp>,
    created_at: Timestamp,
}

impl TryFrom<WebhookRow> for Webhook {
    type Error = anyhow::Error;
    fn try_from(r: WebhookRow) -> anyhow::Result<Self> {
        Ok(Self {
            events: serde_json::from_str(&r.events)?,
            webhook_id: r.webhook_id,
            tenant_id: r.tenant_id,
            url: r.url,
            failing_since: r.failing_since,
            disabled_at: r.disabled_at,
            disabled_reason: r.disabled_reason,
            previous_secret_until: r.previous_until,
            created_at: r.created_at,
        })
    }
}

macro_rules! webhook_columns {
    () => {
        "webhook_id, tenant_id, url, events, failing_since, disabled_at, disabled_reason, \
         previous_until, created_at"
    };
}
pub(crate) use webhook_columns;

/// A webhook to record.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub webhook_id: String,
    pub tenant_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub secret: String,
}

/// A delivery a node claimed: where it goes, what it says, and the secrets that sign it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub delivery_id: String,
    pub webhook_id: Option<String>,
    pub url: String,
    pub payload: String,
    /// Tries made before this one.
    pub attempts: u32,
    pub created_at: Timestamp,
    /// Every secret that signs it (a rotation's two; a callback's, each of its tenant's
    /// enabled webhooks).
    pub secrets: Vec<String>,
    /// Since when its webhook's deliveries all failed.
    pub failing_since: Option<Timestamp>,
}

/// What one try of a delivery came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub at: Timestamp,
    /// `None` when no answer came.
    pub status_code: Option<u16>,
    pub latency_ms: u64,
    /// The first KiB of the answer.
    pub response: Option<String>,
    pub error: Option<String>,
}

/// What follows a try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// It was delivered (a 2xx).
    Delivered,
    /// Try again at this time.
    RetryAt(Timestamp),
    /// No more tries: the schedule is used up.
    GiveUp,
    /// The webhook is disabled (why): this and its other pending deliveries stop.
    Disable(String),
}

/// A delivery as its log shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    /// The `webhook-id` header of every try.
    pub delivery_id: String,
    pub run_id: String,
    pub event: String,
    /// `pending`, `delivered`, `failed` (its tries used up) or `disabled` (its webhook was).
    pub state: String,
    pub attempts: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub delivered_at: Option<Timestamp>,
    pub tries: Vec<TryRecord>,
}

/// One try of a delivery.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TryRecord {
    #[sqlx(try_from = "i64")]
    pub attempt: u32,
    pub at: Timestamp,
    pub status_code: Option<i64>,
    #[sqlx(try_from = "i64")]
    pub latency_ms: u64,
    pub response: Option<String>,
    pub error: Option<String>,
}

#[derive(sqlx::FromRow)]
pub(crate) struct DeliveryRow {
    pub delivery_id: String,
    pub run_id: String,
    pub event: String,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_at: Timestamp,
    pub created_at: Timestamp,
    pub delivered_at: Option<Timestamp>,
}

impl DeliveryRow {
    pub(crate) fn with(self, tries: Vec<TryRecord>) -> anyhow::Result<Delivery> {
        Ok(Delivery {
            next_attempt_at: (self.state == "pending").then_some(self.next_attempt_at),
            delivery_id: self.delivery_id,
            run_id: self.run_id,
            event: self.event,
            state: self.state,
            attempts: u32::try_from(self.attempts)?,
            created_at: self.created_at,
            delivered_at: self.delivered_at,
            tries,
        })
    }
}

/// The webhooks and their outbox.
#[async_trait::async_trait]
pub trait WebhookStore: Send + Sync {
    async fn create_webhook(&self, new: &NewWebhook) -> anyhow::Result<Webhook>;

    /// The tenant's webhooks, oldest first.
    async fn webhooks(&self, tenant_id: &str) -> anyhow::Result<Vec<Webhook>>;

    async fn webhook(&self, tenant_id: &str, webhook_id: &str) -> anyhow::Result<Option<Webhook>>;

    /// Deletes the webhook and its deliveries; false when the tenant has no such webhook.
    async fn delete_webhook(&self, tenant_id: &str, webhook_id: &str) -> anyhow::Result<bool>;

    /// Makes `secret` the webhook's; the one before signs beside it until `until`. `None`
    /// when the tenant has no such webhook.
    async fn rotate_secret(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        secret: &str,
        until: Timestamp,
    ) -> anyhow::Result<Option<Webhook>>;

    /// Claims the next due delivery for `node` until `until`: one no other node holds, after
    /// every earlier pending one of its run and endpoint.
    async fn claim_delivery(&self, node: &str, until: Timestamp)
    -> anyhow::Result<Option<Claimed>>;

    /// Keeps what try `attempt` of a claimed delivery came to, and what follows.
    async fn record_try(
        &self,
        delivery_id: &str,
        attempt: u32,
        outcome: &Attempt,
        next: &Next,
    ) -> anyhow::Result<()>;

    /// When the next pending delivery is due, if one is.
    async fn next_delivery_at(&self) -> anyhow::Result<Option<Timestamp>>;

    /// The webhook's latest `limit` deliveries with their tries, newest first.
    async fn deliveries(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        limit: u32,
    ) -> anyhow::Result<Vec<Delivery>>;

    /// Sends a delivery of the webhook again, under the same id; false when the tenant's
    /// webhook has no such delivery.
    async fn redeliver(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        delivery_id: &str,
    ) -> anyhow::Result<bool>;
}

/// The run's moves a webhook is told of.
macro_rules! told {
    () => {
        "('succeeded', 'failed', 'canceled', 'waiting_user', 'waiting_auth')"
    };
}
pub(crate) use told;
pub(crate) const TOLD: &str = told!();

/// The outbox rows of run `?1` whose write at `?2` (its `updated_at`) moved it: one per
/// enabled webhook of its tenant that asks for the event, and one for its `callback_url`.
macro_rules! tell_sqlite {
    () => {
        "INSERT INTO webhook_deliveries (delivery_id, tenant_id, webhook_id, url, run_id, event,
                                         payload, next_attempt_at, created_at)
         SELECT 'msg_' || lower(hex(randomblob(16))), r.tenant_id, w.webhook_id,
                COALESCE(w.url, r.callback_url), r.run_id, 'run.' || r.status,
                json_object('type', 'run.' || r.status, 'timestamp', r.updated_at,
                    'data', json_object('request_id', r.request_id, 'run_id', r.run_id,
                        'skill_id', r.skill_id, 'engine', r.engine, 'status', r.status,
                        'schedule_id', r.schedule_id,
                        'error', CASE WHEN r.error_message IS NULL THEN NULL
                                 ELSE json_object('code', r.error_code,
                                                  'message', r.error_message) END)),
                r.updated_at, r.updated_at
         FROM runs r
         JOIN (SELECT webhook_id, tenant_id, url, events FROM webhooks
               WHERE disabled_at IS NULL
               UNION ALL SELECT NULL, NULL, NULL, NULL) w
           ON (w.webhook_id IS NOT NULL AND w.tenant_id = r.tenant_id
               AND EXISTS (SELECT 1 FROM json_each(w.events) e WHERE e.value = 'run.' || r.status))
           OR (w.webhook_id IS NULL AND r.callback_url IS NOT NULL)
         WHERE r.run_id = ? AND r.updated_at = ? AND r.status IN "
    };
}
pub(crate) use tell_sqlite;

/// Writes the outbox rows of run `run_id`'s move at `at` (see [`tell_sqlite`]).
pub(crate) async fn tell(
    conn: &mut sqlx::SqliteConnection,
    run_id: &str,
    at: Timestamp,
) -> anyhow::Result<()> {
    sqlx::query(concat!(tell_sqlite!(), told!()))
        .bind(run_id)
        .bind(at)
        .execute(conn)
        .await?;
    Ok(())
}

#[async_trait::async_trait]
impl WebhookStore for Sqlite {
    async fn create_webhook(&self, new: &NewWebhook) -> anyhow::Result<Webhook> {
        let writing = self.writing().await?;
        let row: WebhookRow = sqlx::query_as(concat!(
            "INSERT INTO webhooks (webhook_id, tenant_id, url, events, secret, created_at)
             VALUES (?, ?, ?, ?, ?, ?) RETURNING ",
            webhook_columns!()
        ))
        .bind(&new.webhook_id)
        .bind(&new.tenant_id)
        .bind(&new.url)
        .bind(serde_json::to_string(&new.events)?)
        .bind(&new.secret)
        .bind(Timestamp::now())
        .fetch_one(writing.pool())
        .await?;
        row.try_into()
    }

    async fn webhooks(&self, tenant_id: &str) -> anyhow::Result<Vec<Webhook>> {
        let rows: Vec<WebhookRow> = sqlx::query_as(concat!(
            "SELECT ",
            webhook_columns!(),
            " FROM webhooks WHERE tenant_id = ? ORDER BY created_at, webhook_id"
        ))
        .bind(tenant_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    async fn webhook(&self, tenant_id: &str, webhook_id: &str) -> anyhow::Result<Option<Webhook>> {
        let row: Option<WebhookRow> = sqlx::query_as(concat!(
            "SELECT ",
            webhook_columns!(),
            " FROM webhooks WHERE tenant_id = ? AND webhook_id = ?"
        ))
        .bind(tenant_id)
        .bind(webhook_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn delete_webhook(&self, tenant_id: &str, webhook_id: &str) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let mut tx = writing.pool().begin().await?;
        sqlx::query(
            "DELETE FROM webhook_deliveries WHERE webhook_id IN
                 (SELECT webhook_id FROM webhooks WHERE tenant_id = ? AND webhook_id = ?)",
        )
        .bind(tenant_id)
        .bind(webhook_id)
        .execute(&mut *tx)
        .await?;
        let gone = sqlx::query("DELETE FROM webhooks WHERE tenant_id = ? AND webhook_id = ?")
            .bind(tenant_id)
            .bind(webhook_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone == 1)
    }

    async fn rotate_secret(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        secret: &str,
        until: Timestamp,
    ) -> anyhow::Result<Option<Webhook>> {
        let writing = self.writing().await?;
        let row: Option<WebhookRow> = sqlx::query_as(concat!(
            "UPDATE webhooks SET previous_secret = secret, previous_until = ?, secret = ?
             WHERE tenant_id = ? AND webhook_id = ? RETURNING ",
            webhook_columns!()
        ))
        .bind(until)
        .bind(secret)
        .bind(tenant_id)
        .bind(webhook_id)
        .fetch_optional(writing.pool())
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn claim_delivery(
        &self,
        node: &str,
        until: Timestamp,
    ) -> anyhow::Result<Option<Claimed>> {
        let now = Timestamp::now();
        // Most looks find nothing due: a read says so without taking the writer's turn.
        let due: Option<(i64,)> = sqlx::query_as(
            "SELECT 1 FROM webhook_deliveries
             WHERE state = 'pending' AND next_attempt_at <= ?
               AND (claimed_until IS NULL OR claimed_until < ?) LIMIT 1",
        )
        .bind(now)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        if due.is_none() {
            return Ok(None);
        }
        let writing = self.writing().await?;
        let mut tx = writing.pool().begin().await?;
        let row: Option<ClaimRow> = sqlx::query_as(
            "UPDATE webhook_deliveries SET claimed_by = ?, claimed_until = ?
             WHERE delivery_id = (
                 SELECT d.delivery_id FROM webhook_deliveries d
                 WHERE d.state = 'pending' AND d.next_attempt_at <= ?
                   AND (d.claimed_until IS NULL OR d.claimed_until < ?)
                   AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e
                                   WHERE e.run_id = d.run_id AND e.url = d.url
                                     AND e.state = 'pending' AND e.seq < d.seq)
                 ORDER BY d.next_attempt_at, d.seq LIMIT 1)
             RETURNING delivery_id, webhook_id, tenant_id, url, payload, attempts, created_at",
        )
        .bind(node)
        .bind(until)
        .bind(now)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let secrets: Vec<SigningRow> = sqlx::query_as(
            "SELECT webhook_id, secret, previous_secret, previous_until, failing_since
             FROM webhooks
             WHERE (webhook_id = ?) OR (? IS NULL AND tenant_id = ? AND disabled_at IS NULL)
             ORDER BY created_at",
        )
        .bind(&row.webhook_id)
        .bind(&row.webhook_id)
        .bind(&row.tenant_id)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        row.claimed(secrets, now).map(Some)
    }

    async fn record_try(
        &self,
        delivery_id: &str,
        attempt: u32,
        outcome: &Attempt,
        next: &Next,
    ) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        let mut tx = writing.pool().begin().await?;
        sqlx::query(
            "INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, latency_ms,
                                           response, error)
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(delivery_id)
        .bind(i64::from(attempt))
        .bind(outcome.at)
        .bind(outcome.status_code.map(i64::from))
        .bind(i64::try_from(outcome.latency_ms)?)
        .bind(&outcome.response)
        .bind(&outcome.error)
        .execute(&mut *tx)
        .await?;
        let (state, next_at) = next.state(outcome.at);
        sqlx::query(
            "UPDATE webhook_deliveries SET attempts = ?, state = ?, next_attempt_at = ?,
                 claimed_by = NULL, claimed_until = NULL,
                 delivered_at = CASE WHEN ? = 'delivered' THEN ? END
             WHERE delivery_id = ?",
        )
        .bind(i64::from(attempt))
        .bind(state)
        .bind(next_at)
        .bind(state)
        .bind(outcome.at)
        .bind(delivery_id)
        .execute(&mut *tx)
        .await?;
        // The webhook of the delivery (`?1`), if it has one.
        let webhook = "(SELECT webhook_id FROM webhook_deliveries WHERE delivery_id = ?1)";
        let (set, values): (&str, Vec<Option<String>>) = match next {
            Next::Delivered => ("failing_since = NULL", vec![]),
            Next::Disable(why) => (
                "disabled_at = ?2, disabled_reason = ?3",
                vec![Some(outcome.at.to_string()), Some(why.clone())],
            ),
            Next::RetryAt(_) | Next::GiveUp => (
                "failing_since = COALESCE(failing_since, ?2)",
                vec![Some(outcome.at.to_string())],
            ),
        };
        let mut update = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE webhooks SET {set} WHERE webhook_id = {webhook}"
        )))
        .bind(delivery_id);
        for value in values {
            update = update.bind(value);
        }
        update.execute(&mut *tx).await?;
        if let Next::Disable(_) = next {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE webhook_deliveries SET state = 'disabled'
                 WHERE state = 'pending' AND webhook_id = {webhook}"
            )))
            .bind(delivery_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn next_delivery_at(&self) -> anyhow::Result<Option<Timestamp>> {
        let (at,): (Option<Timestamp>,) = sqlx::query_as(
            "SELECT MIN(MAX(next_attempt_at, COALESCE(claimed_until, next_attempt_at)))
             FROM webhook_deliveries WHERE state = 'pending'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(at)
    }

    async fn deliveries(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        limit: u32,
    ) -> anyhow::Result<Vec<Delivery>> {
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT delivery_id, run_id, event, state, attempts, next_attempt_at, created_at,
                    delivered_at
             FROM webhook_deliveries WHERE tenant_id = ? AND webhook_id = ?
             ORDER BY seq DESC LIMIT ?",
        )
        .bind(tenant_id)
        .bind(webhook_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let tries = sqlx::query_as(
                "SELECT attempt, at, status_code, latency_ms, response, error
                 FROM webhook_attempts WHERE delivery_id = ? ORDER BY attempt",
            )
            .bind(&row.delivery_id)
            .fetch_all(&self.pool)
            .await?;
            out.push(row.with(tries)?);
        }
        Ok(out)
    }

    async fn redeliver(
        &self,
        tenant_id: &str,
        webhook_id: &str,
        delivery_id: &str,
    ) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = ?,
                 claimed_by = NULL, claimed_until = NULL
             WHERE tenant_id = ? AND webhook_id = ? AND delivery_id = ?",
        )
        .bind(Timestamp::now())
        .bind(tenant_id)
        .bind(webhook_id)
        .bind(delivery_id)
        .execute(writing.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct ClaimRow {
    delivery_id: String,
    pub(crate) webhook_id: Option<String>,
    pub(crate) tenant_id: String,
    url: String,
    payload: String,
    attempts: i64,
    created_at: Timestamp,
}

/// A webhook's secrets, as a claim reads them.
#[derive(sqlx::FromRow)]
pub(crate) struct SigningRow {
    webhook_id: String,
    secret: String,
    previous_secret: Option<String>,
    previous_until: Option<Timestamp>,
    failing_since: Option<Timestamp>,
}

impl ClaimRow {
    /// The claim, signed by `secrets` (a rotated-out one only until its time).
    pub(crate) fn claimed(
        self,
        secrets: Vec<SigningRow>,
        now: Timestamp,
    ) -> anyhow::Result<Claimed> {
        let mut signing = Vec::new();
        let mut failing_since = None;
        for row in secrets {
            if Some(&row.webhook_id) == self.webhook_id.as_ref() {
                failing_since = row.failing_since;
            }
            signing.push(row.secret);
            if let (Some(previous), Some(until)) = (row.previous_secret, row.previous_until)
                && until > now
            {
                signing.push(previous);
            }
        }
        Ok(Claimed {
            failing_since,
            delivery_id: self.delivery_id,
            webhook_id: self.webhook_id,
            url: self.url,
            payload: self.payload,
            attempts: u32::try_from(self.attempts)?,
            created_at: self.created_at,
            secrets: signing,
        })
    }
}

impl Next {
    /// The delivery's state after it, and when it is next due.
    pub(crate) fn state(&self, at: Timestamp) -> (&'static str, Timestamp) {
        match self {
            Self::Delivered => ("delivered", at),
            Self::RetryAt(next) => ("pending", *next),
            Self::GiveUp => ("failed", at),
            Self::Disable(_) => ("disabled", at),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::jobs::tests::{ending, new_request, new_run};
    use crate::tests::on_both_backends;
    use crate::{Binding, Store};
    use skill_runner_types::run_state::{Move, RunStatus};

    async fn a_runs_end_is_told_once_claimed_by_one_node_and_logged(store: Store) {
        let made = store
            .create_webhook(&NewWebhook {
                webhook_id: "wh1".into(),
                tenant_id: crate::DEFAULT_TENANT.into(),
                url: "https://example.com/h".into(),
                events: vec!["run.failed".into()],
                secret: "whsec_a".into(),
            })
            .await
            .unwrap();
        assert_eq!(store.webhooks(crate::DEFAULT_TENANT).await.unwrap(), [made]);
        assert!(store.webhooks("other").await.unwrap().is_empty());
        for (q, r) in [("q1", "r1"), ("q2", "r2")] {
            store
                .create_request(&new_request(q), Some(&Binding::Run(new_run(r))))
                .await
                .unwrap();
            crate::tests::start(&store, r, "off").await.unwrap();
        }
        let mut ok = ending(RunStatus::Succeeded);
        ok.result = None;
        store.finish_run("r1", Move::End, None, &ok).await.unwrap();
        store
            .finish_run("r2", Move::End, None, &ending(RunStatus::Failed))
            .await
            .unwrap();
        // A late second end changes nothing, and tells nothing.
        store
            .finish_run("r2", Move::End, None, &ending(RunStatus::Failed))
            .await
            .unwrap();
        let until = Timestamp::after(Duration::from_secs(20));
        let claimed = store
            .claim_delivery("node-a", until)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claimed.secrets, ["whsec_a"]);
        let payload: serde_json::Value = serde_json::from_str(&claimed.payload).unwrap();
        assert_eq!(payload["type"], "run.failed", "{payload}");
        assert_eq!(payload["data"]["run_id"], "r2", "{payload}");
        assert_eq!(payload["data"]["request_id"], "q2", "{payload}");
        assert!(
            store
                .claim_delivery("node-b", until)
                .await
                .unwrap()
                .is_none(),
            "one delivery (the success is not asked for), claimed once"
        );
        let tried = Attempt {
            at: Timestamp::now(),
            status_code: Some(500),
            latency_ms: 12,
            response: Some("boom".into()),
            error: None,
        };
        let soon = Timestamp::after(Duration::from_millis(10));
        store
            .record_try(&claimed.delivery_id, 1, &tried, &Next::RetryAt(soon))
            .await
            .unwrap();
        assert!(store.next_delivery_at().await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let again = store
            .claim_delivery("node-b", until)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.delivery_id, claimed.delivery_id);
        assert_eq!(again.attempts, 1);
        assert!(again.failing_since.is_some());
        let delivered = Attempt {
            status_code: Some(204),
            ..tried
        };
        store
            .record_try(&claimed.delivery_id, 2, &delivered, &Next::Delivered)
            .await
            .unwrap();
        let log = store
            .deliveries(crate::DEFAULT_TENANT, "wh1", 10)
            .await
            .unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].state, "delivered");
        assert_eq!(log[0].tries.len(), 2);
        assert_eq!(log[0].tries[0].response.as_deref(), Some("boom"));
        assert!(
            store
                .deliveries("other", "wh1", 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            !store
                .redeliver("other", "wh1", &claimed.delivery_id)
                .await
                .unwrap()
        );
        assert!(
            store
                .redeliver(crate::DEFAULT_TENANT, "wh1", &claimed.delivery_id)
                .await
                .unwrap()
        );
        let later = Timestamp::after(Duration::from_secs(60));
        let rotated = store
            .rotate_secret(crate::DEFAULT_TENANT, "wh1", "whsec_b", later)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            rotated.previous_secret_until.map(|t| t.to_string()),
            Some(later.to_string())
        );
        let resent = store
            .claim_delivery("node-a", until)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resent.secrets, ["whsec_b", "whsec_a"]);
        store
            .record_try(
                &resent.delivery_id,
                3,
                &delivered,
                &Next::Disable("410".into()),
            )
            .await
            .unwrap();
        let disabled = store
            .webhook(crate::DEFAULT_TENANT, "wh1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(disabled.disabled_reason.as_deref(), Some("410"));
        assert!(!store.delete_webhook("other", "wh1").await.unwrap());
        assert!(
            store
                .delete_webhook(crate::DEFAULT_TENANT, "wh1")
                .await
                .unwrap()
        );
        assert!(
            store
                .webhooks(crate::DEFAULT_TENANT)
                .await
                .unwrap()
                .is_empty()
        );
    }

    on_both_backends!(a_runs_end_is_told_once_claimed_by_one_node_and_logged);
}
