//! Repair rounds in PostgreSQL (see `crate::repairs`).

use sqlx::types::Json;

use super::Postgres;
use crate::repairs::{RepairRound, RepairStore, repair_columns};

#[async_trait::async_trait]
impl RepairStore for Postgres {
    async fn record_repair(&self, run_id: &str, round: &RepairRound) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO repair_rounds
                 (run_id, turn, round, rounds, stdout_offset, problems, started_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .bind(run_id)
        .bind(i64::from(round.turn))
        .bind(i64::from(round.round))
        .bind(i64::from(round.rounds))
        .bind(i64::try_from(round.stdout_offset)?)
        .bind(Json(&round.problems))
        .bind(round.started_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn repair_rounds(&self, run_id: &str) -> anyhow::Result<Vec<RepairRound>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            repair_columns!(),
            " FROM repair_rounds WHERE run_id = $1 ORDER BY turn, round"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}
