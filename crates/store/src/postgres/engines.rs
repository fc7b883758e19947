//! Engine upgrades and added model snapshots in PostgreSQL (see `crate::engines`).

use std::collections::BTreeMap;

use sqlx::types::Json;

use super::Postgres;
use crate::TaskStatus;
use crate::engines::{EngineStore, StoredSnapshot, Upgrade, UpgradeResult, upgrade_columns};
use skill_runner_types::clock::Timestamp;

#[async_trait::async_trait]
impl EngineStore for Postgres {
    async fn insert_upgrade(&self, upgrade: &Upgrade) -> anyhow::Result<bool> {
        let inserted = sqlx::query(
            "INSERT INTO engine_upgrades
             (request_id, mode, requested_engine, status, results, created_at, updated_at)
             VALUES ($1, $2, $3, 'queued', $4, $5, $6)
             ON CONFLICT DO NOTHING",
        )
        .bind(&upgrade.request_id)
        .bind(&upgrade.mode)
        .bind(&upgrade.requested_engine)
        .bind(Json(&upgrade.results))
        .bind(upgrade.created_at)
        .bind(upgrade.updated_at)
        .execute(&self.pool)
        .await?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn upgrade(&self, request_id: &str) -> anyhow::Result<Option<Upgrade>> {
        let row: Option<Upgrade> = sqlx::query_as(concat!(
            "SELECT ",
            upgrade_columns!(),
            " FROM engine_upgrades WHERE request_id = $1"
        ))
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn latest_upgrade_of(&self, engine: &str) -> anyhow::Result<Option<Upgrade>> {
        let row: Option<Upgrade> = sqlx::query_as(concat!(
            "SELECT ",
            upgrade_columns!(),
            " FROM engine_upgrades WHERE results -> $1 IS NOT NULL",
            " ORDER BY created_at DESC, seq DESC LIMIT 1"
        ))
        .bind(engine)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn save_upgrade(
        &self,
        request_id: &str,
        status: TaskStatus,
        results: &BTreeMap<String, UpgradeResult>,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE engine_upgrades SET status = $1, results = $2, updated_at = $3
             WHERE request_id = $4 AND status IN ('queued', 'running')",
        )
        .bind(status)
        .bind(Json(results))
        .bind(Timestamp::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn unfinished_upgrades(&self) -> anyhow::Result<Vec<Upgrade>> {
        let rows: Vec<Upgrade> = sqlx::query_as(concat!(
            "SELECT ",
            upgrade_columns!(),
            " FROM engine_upgrades WHERE status IN ('queued', 'running')"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn insert_model_snapshot(
        &self,
        engine: &str,
        cli_version: &str,
        models: &str,
    ) -> anyhow::Result<Option<Timestamp>> {
        let now = Timestamp::now();
        let inserted = sqlx::query(
            "INSERT INTO model_snapshots (engine, cli_version, models, created_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(engine)
        .bind(cli_version)
        .bind(models)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok((inserted.rows_affected() == 1).then_some(now))
    }

    async fn model_snapshots(&self) -> anyhow::Result<Vec<StoredSnapshot>> {
        let rows: Vec<(String, String, String, Timestamp)> = sqlx::query_as(
            "SELECT engine, cli_version, models, created_at FROM model_snapshots
             ORDER BY engine, created_at",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(StoredSnapshot::from).collect())
    }
}
