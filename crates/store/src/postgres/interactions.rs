//! Questions and replies in PostgreSQL: the moves of `crate::interactions`, each in one
//! transaction guarded by the question's number.

use serde_json::Value;
use sqlx::types::Json;

use super::Postgres;
use crate::interactions::{
    Answer, AnswerOutcome, AuthWait, Interaction, InteractionStore, Resolution, auth_wait_columns,
    interaction_columns,
};
use skill_runner_types::clock::Timestamp;
use skill_runner_types::run_state::{Move, RunStatus};

#[async_trait::async_trait]
impl InteractionStore for Postgres {
    async fn ask_user(
        &self,
        run_id: &str,
        interaction_id: u64,
        question: &Value,
        stdout_offset: u64,
        deadline: Timestamp,
    ) -> anyhow::Result<Option<u32>> {
        let now = Timestamp::now();
        let interaction_id = i64::try_from(interaction_id)?;
        let mut tx = self.pool.begin().await?;
        let asked: Option<(i64, i64)> = sqlx::query_as(
            "UPDATE runs SET status = $1, interaction_count = interaction_count + 1,
                 pending_interaction_id = $2, wait_deadline = $3,
                 pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL, updated_at = $4,
                 lease_node = NULL
             WHERE run_id = $5 AND status IN (SELECT json_array_elements_text($6::json))
             RETURNING interaction_count, turn",
        )
        .bind(RunStatus::WaitingUser)
        .bind(interaction_id)
        .bind(deadline)
        .bind(now)
        .bind(run_id)
        .bind(Move::Ask.from_json())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((seq, turn)) = asked else {
            return Ok(None);
        };
        sqlx::query(
            "INSERT INTO interactions
                 (run_id, seq, interaction_id, turn, question, asked_at, stdout_offset)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(run_id)
        .bind(seq)
        .bind(interaction_id)
        .bind(turn)
        .bind(Json(question))
        .bind(now)
        .bind(i64::try_from(stdout_offset)?)
        .execute(&mut *tx)
        .await?;
        super::webhooks::tell(&mut tx, run_id, now).await?;
        tx.commit().await?;
        Ok(Some(u32::try_from(seq)?))
    }

    async fn interactions(&self, run_id: &str) -> anyhow::Result<Vec<Interaction>> {
        let rows: Vec<Interaction> = sqlx::query_as(concat!(
            "SELECT ",
            interaction_columns!(),
            " FROM interactions WHERE run_id = $1 ORDER BY seq"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn answered_with_key(
        &self,
        run_id: &str,
        idempotency_key: &str,
    ) -> anyhow::Result<Option<Interaction>> {
        let row: Option<Interaction> = sqlx::query_as(concat!(
            "SELECT ",
            interaction_columns!(),
            " FROM interactions WHERE run_id = $1 AND idempotency_key = $2"
        ))
        .bind(run_id)
        .bind(idempotency_key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn answer(&self, run_id: &str, answer: Answer<'_>) -> anyhow::Result<AnswerOutcome> {
        let now = Timestamp::now();
        let auto = answer.resolution == Resolution::AutoDecideTimeout;
        let mut tx = self.pool.begin().await?;
        // A reply queues the run's next turn within the bound; the runner's own decision at a
        // timeout cannot be refused.
        if !auto {
            self.make_room(&mut tx).await?;
        }
        let moved = sqlx::query(
            "UPDATE runs SET status = $1, pending_interaction_id = NULL,
                 wait_deadline = NULL, updated_at = $2,
                 auto_decision_count = auto_decision_count + $3,
                 last_auto_decision_at = CASE WHEN $4 THEN $2 ELSE last_auto_decision_at END
             WHERE run_id = $5 AND status IN (SELECT json_array_elements_text($6::json))
               AND interaction_count = $7",
        )
        .bind(RunStatus::Queued)
        .bind(now)
        .bind(i64::from(auto))
        .bind(auto)
        .bind(run_id)
        .bind(Move::Resume.from_json())
        .bind(i64::from(answer.seq))
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            return Ok(AnswerOutcome::Stale);
        }
        let recorded = sqlx::query(
            "UPDATE interactions SET response = $1, resolution_mode = $2, idempotency_key = $3,
                 replied_at = $4
             WHERE run_id = $5 AND seq = $6 AND response IS NULL",
        )
        .bind(Json(answer.response))
        .bind(answer.resolution)
        .bind(answer.idempotency_key)
        .bind(now)
        .bind(run_id)
        .bind(i64::from(answer.seq))
        .execute(&mut *tx)
        .await;
        match recorded {
            Ok(done) => anyhow::ensure!(
                done.rows_affected() == 1,
                "run {run_id} waits on question {} but it is not recorded",
                answer.seq
            ),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Ok(AnswerOutcome::KeyTaken);
            }
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        Ok(AnswerOutcome::Accepted)
    }

    async fn keep_waiting(&self, run_id: &str, deadline: Timestamp) -> anyhow::Result<bool> {
        let done = sqlx::query(
            "UPDATE runs SET recovery_state = 'recovered_waiting', recovered_at = $1,
                 recovery_reason = 'resumable_waiting_preserved', wait_deadline = $2,
                 updated_at = $1
             WHERE run_id = $3 AND status = 'waiting_user'",
        )
        .bind(Timestamp::now())
        .bind(deadline)
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn await_auth(
        &self,
        run_id: &str,
        deadline: Timestamp,
        stdout_offset: u64,
    ) -> anyhow::Result<bool> {
        let now = Timestamp::now();
        let mut tx = self.pool.begin().await?;
        // No node's claim: whichever node sees the login first queues it again.
        let done = sqlx::query(
            "UPDATE runs SET status = 'waiting_auth', wait_deadline = $1, updated_at = $2,
                 lease_node = NULL
             WHERE run_id = $3 AND status = 'queued'",
        )
        .bind(deadline)
        .bind(now)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO auth_waits (run_id, seq, turn, stdout_offset, started_at)
             SELECT $1, COALESCE((SELECT MAX(seq) FROM auth_waits WHERE run_id = $1), 0) + 1,
                    turn, $2, $3 FROM runs WHERE run_id = $1",
        )
        .bind(run_id)
        .bind(i64::try_from(stdout_offset)?)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        super::webhooks::tell(&mut tx, run_id, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn auth_arrived(&self, run_id: &str) -> anyhow::Result<bool> {
        let now = Timestamp::now();
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE runs SET status = 'queued', wait_deadline = NULL, updated_at = $1
             WHERE run_id = $2 AND status = 'waiting_auth'",
        )
        .bind(now)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        sqlx::query("UPDATE auth_waits SET ended_at = $1 WHERE run_id = $2 AND ended_at IS NULL")
            .bind(now)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn auth_waits(&self, run_id: &str) -> anyhow::Result<Vec<AuthWait>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            auth_wait_columns!(),
            " FROM auth_waits WHERE run_id = $1 ORDER BY seq"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}
