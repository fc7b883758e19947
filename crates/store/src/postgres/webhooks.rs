//! Webhooks and their outbox in PostgreSQL (see `crate::webhooks`).

use skill_runner_types::clock::Timestamp;

use super::Postgres;
use crate::webhooks::{
    Attempt, ClaimRow, Claimed, Delivery, DeliveryRow, NewWebhook, Next, SigningRow, TOLD, Webhook,
    WebhookRow, WebhookStore, webhook_columns,
};

/// The outbox rows of run `$1` whose write at `$2` moved it (see `crate::webhooks::tell`).
pub(crate) async fn tell(
    conn: &mut sqlx::PgConnection,
    run_id: &str,
    at: Timestamp,
) -> anyhow::Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO webhook_deliveries (delivery_id, tenant_id, webhook_id, url, run_id, event,
                                         payload, next_attempt_at, created_at)
         SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), r.tenant_id, w.webhook_id,
                COALESCE(w.url, r.callback_url), r.run_id, 'run.' || r.status,
                json_build_object('type', 'run.' || r.status, 'timestamp', r.updated_at,
                    'data', json_build_object('request_id', r.request_id, 'run_id', r.run_id,
                        'skill_id', r.skill_id, 'engine', r.engine, 'status', r.status,
                        'schedule_id', r.schedule_id,
                        'error', CASE WHEN r.error_message IS NULL THEN NULL
                                 ELSE json_build_object('code', r.error_code,
                                                        'message', r.error_message) END))::text,
                r.updated_at, r.updated_at
         FROM runs r
         JOIN (SELECT webhook_id, tenant_id, url, events FROM webhooks
               WHERE disabled_at IS NULL
               UNION ALL SELECT NULL, NULL, NULL, NULL) w
           ON (w.webhook_id IS NOT NULL AND w.tenant_id = r.tenant_id
               AND ('run.' || r.status) IN (SELECT json_array_elements_text(w.events::json)))
           OR (w.webhook_id IS NULL AND r.callback_url IS NOT NULL)
         WHERE r.run_id = $1 AND r.updated_at = $2 AND r.status IN {TOLD}"
    )))
    .bind(run_id)
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

#[async_trait::async_trait]
impl WebhookStore for Postgres {
    async fn create_webhook(&self, new: &NewWebhook) -> anyhow::Result<Webhook> {
        let row: WebhookRow = sqlx::query_as(concat!(
            "INSERT INTO webhooks (webhook_id, tenant_id, url, events, secret, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING ",
            webhook_columns!()
        ))
        .bind(&new.webhook_id)
        .bind(&new.tenant_id)
        .bind(&new.url)
        .bind(serde_json::to_string(&new.events)?)
        .bind(&new.secret)
        .bind(Timestamp::now())
        .fetch_one(&self.pool)
        .await?;
        row.try_into()
    }

    async fn webhooks(&self, tenant_id: &str) -> anyhow::Result<Vec<Webhook>> {
        let rows: Vec<WebhookRow> = sqlx::query_as(concat!(
            "SELECT ",
            webhook_columns!(),
            " FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, webhook_id"
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
            " FROM webhooks WHERE tenant_id = $1 AND webhook_id = $2"
        ))
        .bind(tenant_id)
        .bind(webhook_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn delete_webhook(&self, tenant_id: &str, webhook_id: &str) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM webhook_deliveries WHERE webhook_id IN
                 (SELECT webhook_id FROM webhooks WHERE tenant_id = $1 AND webhook_id = $2)",
        )
        .bind(tenant_id)
        .bind(webhook_id)
        .execute(&mut *tx)
        .await?;
        let gone = sqlx::query("DELETE FROM webhooks WHERE tenant_id = $1 AND webhook_id = $2")
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
        let row: Option<WebhookRow> = sqlx::query_as(concat!(
            "UPDATE webhooks SET previous_secret = secret, previous_until = $1, secret = $2
             WHERE tenant_id = $3 AND webhook_id = $4 RETURNING ",
            webhook_columns!()
        ))
        .bind(until)
        .bind(secret)
        .bind(tenant_id)
        .bind(webhook_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    async fn claim_delivery(
        &self,
        node: &str,
        until: Timestamp,
    ) -> anyhow::Result<Option<Claimed>> {
        let now = Timestamp::now();
        let mut tx = self.pool.begin().await?;
        let row: Option<ClaimRow> = sqlx::query_as(
            "UPDATE webhook_deliveries SET claimed_by = $1, claimed_until = $2
             WHERE delivery_id = (
                 SELECT d.delivery_id FROM webhook_deliveries d
                 WHERE d.state = 'pending' AND d.next_attempt_at <= $3
                   AND (d.claimed_until IS NULL OR d.claimed_until < $4)
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
             WHERE (webhook_id = $1) OR ($2::text IS NULL AND tenant_id = $3 AND disabled_at IS NULL)
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
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, latency_ms,
                                           response, error)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
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
            "UPDATE webhook_deliveries SET attempts = $1, state = $2, next_attempt_at = $3,
                 claimed_by = NULL, claimed_until = NULL,
                 delivered_at = CASE WHEN $4::text = 'delivered' THEN $5 END
             WHERE delivery_id = $6",
        )
        .bind(i64::from(attempt))
        .bind(state)
        .bind(next_at)
        .bind(state)
        .bind(outcome.at)
        .bind(delivery_id)
        .execute(&mut *tx)
        .await?;
        // The webhook of the delivery (`$1`), if it has one.
        let webhook = "(SELECT webhook_id FROM webhook_deliveries WHERE delivery_id = $1)";
        let (set, values): (&str, Vec<Option<String>>) = match next {
            Next::Delivered => ("failing_since = NULL", vec![]),
            Next::Disable(why) => (
                "disabled_at = $2, disabled_reason = $3",
                vec![Some(outcome.at.to_string()), Some(why.clone())],
            ),
            Next::RetryAt(_) | Next::GiveUp => (
                "failing_since = COALESCE(failing_since, $2)",
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
            "SELECT MIN(GREATEST(next_attempt_at, COALESCE(claimed_until, next_attempt_at)))
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
             FROM webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2
             ORDER BY seq DESC LIMIT $3",
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
                 FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt",
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
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = $1,
                 claimed_by = NULL, claimed_until = NULL
             WHERE tenant_id = $2 AND webhook_id = $3 AND delivery_id = $4",
        )
        .bind(Timestamp::now())
        .bind(tenant_id)
        .bind(webhook_id)
        .bind(delivery_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}
