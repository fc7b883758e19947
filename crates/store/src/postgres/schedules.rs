//! Schedules in PostgreSQL (see `crate::schedules`).

use skill_runner_types::clock::Timestamp;

use super::Postgres;
use crate::schedules::{Schedule, ScheduleStore, Ticked, active_runs, schedule_columns};

#[async_trait::async_trait]
impl ScheduleStore for Postgres {
    async fn create_schedule(&self, s: &Schedule) -> anyhow::Result<()> {
        sqlx::query(concat!(
            "INSERT INTO schedules (",
            schedule_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(&s.schedule_id)
        .bind(&s.tenant_id)
        .bind(sqlx::types::Json(&s.job))
        .bind(&s.cron)
        .bind(&s.timezone)
        .bind(&s.overlap)
        .bind(i64::try_from(s.catch_up_seconds)?)
        .bind(s.paused)
        .bind(s.next_tick_at)
        .bind(s.last_tick_at)
        .bind(&s.last_outcome)
        .bind(&s.last_request_id)
        .bind(s.created_at)
        .bind(s.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn schedules(&self, tenant_id: Option<&str>) -> anyhow::Result<Vec<Schedule>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE $1::text IS NULL OR tenant_id = $2 ORDER BY created_at, schedule_id"
        ))
        .bind(tenant_id)
        .bind(tenant_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn schedule(
        &self,
        tenant_id: &str,
        schedule_id: &str,
    ) -> anyhow::Result<Option<Schedule>> {
        let row = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE tenant_id = $1 AND schedule_id = $2"
        ))
        .bind(tenant_id)
        .bind(schedule_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn update_schedule(&self, s: &Schedule) -> anyhow::Result<bool> {
        let done = sqlx::query(
            "UPDATE schedules SET job = $1, cron = $2, timezone = $3, overlap = $4,
                 catch_up_seconds = $5, paused = $6, next_tick_at = $7, updated_at = $8
             WHERE tenant_id = $9 AND schedule_id = $10",
        )
        .bind(sqlx::types::Json(&s.job))
        .bind(&s.cron)
        .bind(&s.timezone)
        .bind(&s.overlap)
        .bind(i64::try_from(s.catch_up_seconds)?)
        .bind(s.paused)
        .bind(s.next_tick_at)
        .bind(s.updated_at)
        .bind(&s.tenant_id)
        .bind(&s.schedule_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_schedule(&self, tenant_id: &str, schedule_id: &str) -> anyhow::Result<bool> {
        let done = sqlx::query("DELETE FROM schedules WHERE tenant_id = $1 AND schedule_id = $2")
            .bind(tenant_id)
            .bind(schedule_id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn due_schedules(&self, now: Timestamp) -> anyhow::Result<Vec<Schedule>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE NOT paused AND next_tick_at <= $1 ORDER BY next_tick_at"
        ))
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn advance_schedule(
        &self,
        schedule_id: &str,
        ticked: &Ticked,
        next: Option<Timestamp>,
    ) -> anyhow::Result<bool> {
        let done = sqlx::query(
            "UPDATE schedules SET next_tick_at = $1, last_tick_at = $2, last_outcome = $3,
                 last_request_id = COALESCE($4, last_request_id)
             WHERE schedule_id = $5 AND next_tick_at = $6",
        )
        .bind(next)
        .bind(ticked.tick_at)
        .bind(&ticked.outcome)
        .bind(&ticked.request_id)
        .bind(schedule_id)
        .bind(ticked.tick_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn next_tick_at(&self) -> anyhow::Result<Option<Timestamp>> {
        let (at,): (Option<Timestamp>,) =
            sqlx::query_as("SELECT MIN(next_tick_at) FROM schedules WHERE NOT paused")
                .fetch_one(&self.pool)
                .await?;
        Ok(at)
    }

    async fn active_runs_of_schedule(&self, schedule_id: &str) -> anyhow::Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as(active_runs!("$1"))
            .bind(schedule_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}
