//! How runs arrive beyond their create: the attempts of a run tried again after a failure
//! that may pass, and the answers of creates sent with an `Idempotency-Key`.

use super::Sqlite;
use crate::jobs::{Run, RunRow, run_columns};
use skill_runner_types::clock::Timestamp;

/// An attempt of a run that failed and was tried again.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RetriedAttempt {
    /// 1 for the first attempt.
    #[sqlx(try_from = "i64")]
    pub attempt: u32,
    /// The run's turn counter when it failed.
    #[sqlx(try_from = "i64")]
    pub turn: u32,
    pub error_code: Option<String>,
    pub error_message: String,
    pub failed_at: Timestamp,
    pub next_attempt_at: Timestamp,
}

/// What the first create with an `Idempotency-Key` left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remembered {
    /// The key is new: it is now held for this create, which must [`ArrivalStore::keep_answer`] or
    /// [`ArrivalStore::forget_key`] it.
    Fresh,
    /// Another create holds the key and has not answered yet.
    Pending,
    /// The key came with another body.
    OtherBody,
    /// The first create's answer (JSON text).
    Answered(String),
}

macro_rules! retried_columns {
    () => {
        "attempt, turn, error_code, error_message, failed_at, next_attempt_at"
    };
}
pub(crate) use retried_columns;

/// The retries of runs and the idempotent creates.
#[async_trait::async_trait]
pub trait ArrivalStore: Send + Sync {
    /// Puts a running run back in the queue for its next attempt, no earlier than
    /// `failed.next_attempt_at`, keeping why its attempt failed; `None` when the run was no
    /// longer running (a cancel won).
    async fn retry_run(&self, run_id: &str, failed: &RetriedAttempt)
    -> anyhow::Result<Option<Run>>;

    /// The failed attempts of a run that were tried again, in order.
    async fn retried_attempts(&self, run_id: &str) -> anyhow::Result<Vec<RetriedAttempt>>;

    /// Holds `key` of `tenant_id` for a create with a body hashing to `body_hash`, or says
    /// what holds it; keys older than `since` are forgotten first.
    async fn remember(
        &self,
        tenant_id: &str,
        key: &str,
        body_hash: &str,
        since: Timestamp,
    ) -> anyhow::Result<Remembered>;

    /// Keeps the answer of the create holding `key`.
    async fn keep_answer(&self, tenant_id: &str, key: &str, answer: &str) -> anyhow::Result<()>;

    /// Lets go of `key` after its create failed: the next create with it starts afresh.
    async fn forget_key(&self, tenant_id: &str, key: &str) -> anyhow::Result<()>;
}

#[async_trait::async_trait]
impl ArrivalStore for Sqlite {
    async fn retry_run(
        &self,
        run_id: &str,
        failed: &RetriedAttempt,
    ) -> anyhow::Result<Option<Run>> {
        let writing = self.writing().await?;
        let mut tx = writing.pool().begin().await?;
        let row: Option<RunRow> = sqlx::query_as(concat!(
            "UPDATE runs SET status = 'queued', retries = retries + 1, not_before = ?,
                 pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL, updated_at = ?
             WHERE run_id = ? AND status = 'running'
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
                 VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
            " FROM run_retries WHERE run_id = ? ORDER BY attempt"
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
        let writing = self.writing().await?;
        let mut tx = writing.pool().begin().await?;
        sqlx::query("DELETE FROM idempotent_creates WHERE created_at < ?")
            .bind(since)
            .execute(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotent_creates (tenant_id, key, body_hash, created_at)
             VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(tenant_id)
        .bind(key)
        .bind(body_hash)
        .bind(Timestamp::now())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let held: (String, Option<String>) = sqlx::query_as(
            "SELECT body_hash, answer FROM idempotent_creates WHERE tenant_id = ? AND key = ?",
        )
        .bind(tenant_id)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(remembered(inserted == 1, held, body_hash))
    }

    async fn keep_answer(&self, tenant_id: &str, key: &str, answer: &str) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query("UPDATE idempotent_creates SET answer = ? WHERE tenant_id = ? AND key = ?")
            .bind(answer)
            .bind(tenant_id)
            .bind(key)
            .execute(writing.pool())
            .await?;
        Ok(())
    }

    async fn forget_key(&self, tenant_id: &str, key: &str) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query(
            "DELETE FROM idempotent_creates WHERE tenant_id = ? AND key = ? AND answer IS NULL",
        )
        .bind(tenant_id)
        .bind(key)
        .execute(writing.pool())
        .await?;
        Ok(())
    }
}

/// What a key's row says to a create with `body_hash`.
pub(crate) fn remembered(
    fresh: bool,
    (held_hash, answer): (String, Option<String>),
    body_hash: &str,
) -> Remembered {
    match (fresh, answer) {
        (true, _) => Remembered::Fresh,
        _ if held_hash != body_hash => Remembered::OtherBody,
        (false, Some(answer)) => Remembered::Answered(answer),
        (false, None) => Remembered::Pending,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::jobs::tests::{new_request, new_run};
    use crate::tests::on_both_backends;
    use crate::{Binding, Store};
    use skill_runner_types::run_state::RunStatus;

    async fn a_retried_run_waits_queued_and_keeps_its_failed_attempt(store: Store) {
        store
            .create_request(&new_request("q1"), Some(&Binding::Run(new_run("r1"))))
            .await
            .unwrap();
        let failed = |attempt| RetriedAttempt {
            attempt,
            turn: attempt,
            error_code: Some("MODEL_ENDPOINT_ERROR".into()),
            error_message: format!("attempt {attempt} failed"),
            failed_at: Timestamp::now(),
            // Due at once: the next start claims it (among nodes, a run is claimed only when due).
            next_attempt_at: Timestamp::now(),
        };
        assert!(
            store.retry_run("r1", &failed(1)).await.unwrap().is_none(),
            "a queued run is not running: nothing to retry"
        );
        crate::tests::start(&store, "r1", "off").await.unwrap();
        let first = failed(1);
        let run = store.retry_run("r1", &first).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        assert_eq!(run.retries, 1);
        assert_eq!(
            run.not_before.map(|t| t.to_string()),
            Some(first.next_attempt_at.to_string())
        );
        crate::tests::start(&store, "r1", "off").await.unwrap();
        store.retry_run("r1", &failed(2)).await.unwrap().unwrap();
        let kept = store.retried_attempts("r1").await.unwrap();
        assert_eq!(kept.iter().map(|a| a.attempt).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(kept[1].error_message, "attempt 2 failed");
        assert_eq!(store.run("r1").await.unwrap().unwrap().turn, 2);
    }

    async fn a_key_answers_the_same_body_once_and_refuses_another(store: Store) {
        let old = Timestamp::before(Duration::from_secs(86_400));
        let remember = |hash: &'static str| {
            let store = store.clone();
            async move { store.remember("t1", "k1", hash, old).await.unwrap() }
        };
        assert_eq!(remember("h1").await, Remembered::Fresh);
        assert_eq!(remember("h1").await, Remembered::Pending);
        assert_eq!(remember("h2").await, Remembered::OtherBody);
        store.forget_key("t1", "k1").await.unwrap();
        assert_eq!(
            remember("h1").await,
            Remembered::Fresh,
            "a failed create lets go"
        );
        store
            .keep_answer("t1", "k1", r#"{"request_id":"q1"}"#)
            .await
            .unwrap();
        assert_eq!(
            remember("h1").await,
            Remembered::Answered(r#"{"request_id":"q1"}"#.into())
        );
        store.forget_key("t1", "k1").await.unwrap();
        assert!(
            matches!(remember("h1").await, Remembered::Answered(_)),
            "an answer stays"
        );
        assert_eq!(
            store.remember("t2", "k1", "h9", old).await.unwrap(),
            Remembered::Fresh,
            "keys are the tenant's own"
        );
        let later = Timestamp::after(Duration::from_secs(1));
        assert_eq!(
            store.remember("t1", "k1", "h2", later).await.unwrap(),
            Remembered::Fresh,
            "a key older than its day is forgotten"
        );
    }

    on_both_backends!(
        a_retried_run_waits_queued_and_keeps_its_failed_attempt,
        a_key_answers_the_same_body_once_and_refuses_another
    );
}
