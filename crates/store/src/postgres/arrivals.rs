//! Retries and idempotent creates in PostgreSQL (see `crate::arrivals`).

use super::Postgres;
use crate::arrivals::{ArrivalStore, Remembered, RetriedAttempt, remembered, retried_columns};
use crate::jobs::{Run, RunRow, run_columns};
use skill_runner_types::clock::Timestamp;

#[async_trait::async_trait]
impl ArrivalStore for Postgres {
    async fn retry_run(
        &self,
        run_id: &str,
        failed: &RetriedAttempt,
    ) -> anyhow::Result<Option<Run>> {
        let mut tx = self.pool.begin().await?;
        // The claim goes: the node holding the run's files takes its next attempt, or any
        // node once that one is gone (a lost node's turn: its files went with it).
        let row: Option<RunRow> = sqlx::query_as(concat!(
            "UPDATE runs SET status = 'queued', retries = retries + 1, not_before = $1,
                 pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL, lease_node = NULL,
                 node = CASE WHEN EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = runs.node)
                             THEN node END,
                 updated_at = $2
             WHERE run_id = $3 AND status = 'running'
             RETURNING ",
            run_columns!()
        ))
        .bind(failed.next_attempt_at)
        .bind(failed.failed_at)
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        if row.is_some() {
            sqlx::query(
                "INSERT INTO run_retries (run_id, attempt, turn, error_code, error_message,
                                          failed_at, next_attempt_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            )
            .bind(run_id)
            .bind(i64::from(failed.attempt))
            .bind(i64::from(failed.turn))
            .bind(&failed.error_code)
            .bind(&failed.error_message)
            .bind(failed.failed_at)
            .bind(failed.next_attempt_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        row.map(Run::try_from).transpose()
    }

    async fn retried_attempts(&self, run_id: &str) -> anyhow::Result<Vec<RetriedAttempt>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            retried_columns!(),
            " FROM run_retries WHERE run_id = $1 ORDER BY attempt"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn remember(
        &self,
        tenant_id: &str,
        key: &str,
        body_hash: &str,
        since: Timestamp,
    ) -> anyhow::Result<Remembered> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM idempotent_creates WHERE created_at < $1")
            .bind(since)
            .execute(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotent_creates (tenant_id, key, body_hash, created_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(tenant_id)
        .bind(key)
        .bind(body_hash)
        .bind(Timestamp::now())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let held: (String, Option<String>) = sqlx::query_as(
            "SELECT body_hash, answer FROM idempotent_creates WHERE tenant_id = $1 AND key = $2",
        )
        .bind(tenant_id)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(remembered(inserted == 1, held, body_hash))
    }

    async fn keep_answer(&self, tenant_id: &str, key: &str, answer: &str) -> anyhow::Result<()> {
        sqlx::query("UPDATE idempotent_creates SET answer = $1 WHERE tenant_id = $2 AND key = $3")
            .bind(answer)
            .bind(tenant_id)
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn forget_key(&self, tenant_id: &str, key: &str) -> anyhow::Result<()> {
        sqlx::query(
            "DELETE FROM idempotent_creates WHERE tenant_id = $1 AND key = $2 AND answer IS NULL",
        )
        .bind(tenant_id)
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
