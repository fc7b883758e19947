//! Package install requests in PostgreSQL (see `crate::installs`).

use super::Postgres;
use crate::TaskStatus;
use crate::installs::{InstallPhase, InstallRequest, InstallStore, install_columns};
use skill_runner_types::clock::Timestamp;

#[async_trait::async_trait]
impl InstallStore for Postgres {
    async fn insert_install_request(&self, request_id: &str) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO install_requests (request_id, status, phase, created_at, updated_at)
             VALUES ($1, 'queued', 'received', $2, $2)",
        )
        .bind(request_id)
        .bind(Timestamp::now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn install_request(&self, request_id: &str) -> anyhow::Result<Option<InstallRequest>> {
        let row: Option<InstallRequest> = sqlx::query_as(concat!(
            "SELECT ",
            install_columns!(),
            " FROM install_requests WHERE request_id = $1"
        ))
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn unfinished_install_requests(&self) -> anyhow::Result<Vec<InstallRequest>> {
        let rows: Vec<InstallRequest> = sqlx::query_as(concat!(
            "SELECT ",
            install_columns!(),
            " FROM install_requests WHERE status IN ('queued', 'running')",
            " ORDER BY created_at, request_id"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn start_install(&self, request_id: &str) -> anyhow::Result<bool> {
        let done = sqlx::query(
            "UPDATE install_requests SET status = 'running', phase = 'validating',
                 updated_at = $1
             WHERE request_id = $2 AND status = 'queued'",
        )
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn set_install_progress(
        &self,
        request_id: &str,
        phase: InstallPhase,
        skill_id: &str,
        version: &str,
        action: Option<&str>,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE install_requests
             SET phase = $1, skill_id = $2, version = $3, action = COALESCE($4, action),
                 updated_at = $5
             WHERE request_id = $6 AND status = 'running'",
        )
        .bind(phase)
        .bind(skill_id)
        .bind(version)
        .bind(action)
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn finish_install(
        &self,
        request_id: &str,
        status: TaskStatus,
        error: Option<&str>,
    ) -> anyhow::Result<bool> {
        debug_assert!(matches!(status, TaskStatus::Succeeded | TaskStatus::Failed));
        let done = sqlx::query(
            "UPDATE install_requests SET status = $1, phase = 'done', error = $2, updated_at = $3
             WHERE request_id = $4 AND status IN ('queued', 'running')",
        )
        .bind(status)
        .bind(error)
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}
