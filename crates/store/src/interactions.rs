//! Questions a run asks its user and the replies it gets.
//!
//! Asking moves the run `running -> waiting_user` and records the question in one transaction;
//! a reply (or an automatic decision) moves it `waiting_user -> queued` and records the answer
//! in one transaction guarded by the question's number, so of two concurrent replies exactly
//! one is accepted and a reply to an older question changes nothing.

use serde_json::Value;

use super::Sqlite;
use skill_runner_types::clock::Timestamp;
use skill_runner_types::run_state::{Move, RunStatus};

/// Who answered a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "TEXT", rename_all = "snake_case")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Resolution {
    UserReply,
    /// The wait timed out and the runner decided (`interactive_require_user_reply = false`).
    AutoDecideTimeout,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One question of a run, with its answer once given.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Interaction {
    /// 1, 2, ... in the order asked.
    #[sqlx(try_from = "i64")]
    pub seq: u32,
    /// The engine's id for the question.
    #[sqlx(try_from = "i64")]
    pub interaction_id: u64,
    #[sqlx(try_from = "i64")]
    pub turn: u32,
    #[sqlx(json)]
    pub question: Value,
    pub asked_at: Timestamp,
    #[sqlx(json(nullable))]
    pub response: Option<Value>,
    #[sqlx(rename = "resolution_mode")]
    pub resolution: Option<Resolution>,
    pub idempotency_key: Option<String>,
    pub replied_at: Option<Timestamp>,
    /// Where the asking turn's output ended in `logs/stdout.txt`.
    #[sqlx(try_from = "StoredOffset")]
    pub stdout_offset: Option<u64>,
}

/// A byte offset as a column holds it: signed (PostgreSQL has no unsigned integers), maybe
/// missing.
pub(crate) struct StoredOffset(Option<i64>);

impl<DB: sqlx::Database> sqlx::Type<DB> for StoredOffset
where
    i64: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for StoredOffset
where
    Option<i64>: sqlx::Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        Ok(Self(<Option<i64> as sqlx::Decode<'r, DB>>::decode(value)?))
    }
}

impl TryFrom<StoredOffset> for Option<u64> {
    type Error = std::num::TryFromIntError;

    fn try_from(offset: StoredOffset) -> Result<Self, Self::Error> {
        offset.0.map(u64::try_from).transpose()
    }
}

/// An answer to record.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The question answered (its `seq`).
    pub seq: u32,
    pub response: &'a Value,
    pub idempotency_key: Option<&'a str>,
    pub resolution: Resolution,
}

/// What became of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// Recorded; the run is queued for its next turn.
    Accepted,
    /// The run no longer waits on that question (answered, canceled or timed out meanwhile).
    Stale,
    /// The idempotency key was already used for another answer of this run.
    KeyTaken,
}

macro_rules! interaction_columns {
    () => {
        "seq, interaction_id, turn, question, asked_at, response, resolution_mode, \
         idempotency_key, replied_at, stdout_offset"
    };
}
pub(crate) use interaction_columns;

/// The questions a run asks and their answers.
#[async_trait::async_trait]
pub trait InteractionStore: Send + Sync {
    /// [`Move::Ask`], with `question` (asked by a turn whose output ended at `stdout_offset`)
    /// pending until `deadline`; returns the question's `seq`, or `None` when the run was no
    /// longer running (canceled meanwhile).
    async fn ask_user(
        &self,
        run_id: &str,
        interaction_id: u64,
        question: &Value,
        stdout_offset: u64,
        deadline: Timestamp,
    ) -> anyhow::Result<Option<u32>>;

    /// Every question of a run, in the order asked.
    async fn interactions(&self, run_id: &str) -> anyhow::Result<Vec<Interaction>>;

    /// The question of `run_id` answered with `idempotency_key`, if any.
    async fn answered_with_key(
        &self,
        run_id: &str,
        idempotency_key: &str,
    ) -> anyhow::Result<Option<Interaction>>;

    /// Records `answer` and queues the run ([`Move::Resume`]), if it still waits on that
    /// question.
    async fn answer(&self, run_id: &str, answer: Answer<'_>) -> anyhow::Result<AnswerOutcome>;

    /// Keeps a run that was waiting when the service stopped waiting, until `deadline`.
    async fn keep_waiting(&self, run_id: &str, deadline: Timestamp) -> anyhow::Result<bool>;

    /// [`Move::AwaitAuth`]: the queued run, whose log is `stdout_offset` bytes long, waits for
    /// its engine's login until `deadline` (the wait is kept, [`AuthWait`]); false when it was
    /// no longer queued (canceled meanwhile).
    async fn await_auth(
        &self,
        run_id: &str,
        deadline: Timestamp,
        stdout_offset: u64,
    ) -> anyhow::Result<bool>;

    /// [`Move::Resume`] of a run waiting for a login: it is queued again and its wait ends;
    /// false when it was no longer waiting.
    async fn auth_arrived(&self, run_id: &str) -> anyhow::Result<bool>;

    /// Every wait of a run for its engine's login, in the order they began.
    async fn auth_waits(&self, run_id: &str) -> anyhow::Result<Vec<AuthWait>>;
}

/// A run's wait for its engine's login.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AuthWait {
    #[sqlx(try_from = "i64")]
    pub seq: u32,
    /// Turns the run had started when it began to wait.
    #[sqlx(try_from = "i64")]
    pub turn: u32,
    /// How long the run's `logs/stdout.txt` was then.
    #[sqlx(try_from = "i64")]
    pub stdout_offset: u64,
    pub started_at: Timestamp,
    /// When a login queued the run again.
    pub ended_at: Option<Timestamp>,
}

macro_rules! auth_wait_columns {
    () => {
        "seq, turn, stdout_offset, started_at, ended_at"
    };
}
pub(crate) use auth_wait_columns;

#[async_trait::async_trait]
impl InteractionStore for Sqlite {
    async fn ask_user(
        &self,
        run_id: &str,
        interaction_id: u64,
        question: &Value,
        stdout_offset: u64,
        deadline: Timestamp,
    ) -> anyhow::Result<Option<u32>> {
        let writing = self.writing().await?;
        let now = Timestamp::now();
        let mut tx = writing.pool().begin().await?;
        let asked: Option<(i64, i64)> = sqlx::query_as(
            "UPDATE runs SET status = ?, interaction_count = interaction_count + 1,
                 pending_interaction_id = ?, wait_deadline = ?,
                 pgid = NULL, pg_boot_id = NULL, pg_start_ticks = NULL, updated_at = ?
             WHERE run_id = ? AND status IN (SELECT value FROM json_each(?))
             RETURNING interaction_count, turn",
        )
        .bind(RunStatus::WaitingUser)
        .bind(i64::try_from(interaction_id)?)
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
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(run_id)
        .bind(seq)
        .bind(i64::try_from(interaction_id)?)
        .bind(turn)
        .bind(question.to_string())
        .bind(now)
        .bind(i64::try_from(stdout_offset)?)
        .execute(&mut *tx)
        .await?;
        crate::webhooks::tell(&mut tx, run_id, now).await?;
        tx.commit().await?;
        Ok(Some(u32::try_from(seq)?))
    }

    async fn interactions(&self, run_id: &str) -> anyhow::Result<Vec<Interaction>> {
        let rows: Vec<Interaction> = sqlx::query_as(concat!(
            "SELECT ",
            interaction_columns!(),
            " FROM interactions WHERE run_id = ? ORDER BY seq"
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
            " FROM interactions WHERE run_id = ? AND idempotency_key = ?"
        ))
        .bind(run_id)
        .bind(idempotency_key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn answer(&self, run_id: &str, answer: Answer<'_>) -> anyhow::Result<AnswerOutcome> {
        let writing = self.writing().await?;
        let now = Timestamp::now();
        let auto = answer.resolution == Resolution::AutoDecideTimeout;
        let mut tx = writing.pool().begin().await?;
        let moved = sqlx::query(
            "UPDATE runs SET status = ?, pending_interaction_id = NULL,
                 wait_deadline = NULL, updated_at = ?,
                 auto_decision_count = auto_decision_count + ?,
                 last_auto_decision_at = CASE WHEN ? THEN ? ELSE last_auto_decision_at END
             WHERE run_id = ? AND status IN (SELECT value FROM json_each(?))
               AND interaction_count = ?",
        )
        .bind(RunStatus::Queued)
        .bind(now)
        .bind(i64::from(auto))
        .bind(auto)
        .bind(now)
        .bind(run_id)
        .bind(Move::Resume.from_json())
        .bind(answer.seq)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            return Ok(AnswerOutcome::Stale);
        }
        let recorded = sqlx::query(
            "UPDATE interactions SET response = ?, resolution_mode = ?, idempotency_key = ?,
                 replied_at = ?
             WHERE run_id = ? AND seq = ? AND response IS NULL",
        )
        .bind(answer.response.to_string())
        .bind(answer.resolution)
        .bind(answer.idempotency_key)
        .bind(now)
        .bind(run_id)
        .bind(answer.seq)
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
        let writing = self.writing().await?;
        let now = Timestamp::now();
        let done = sqlx::query(
            "UPDATE runs SET recovery_state = 'recovered_waiting', recovered_at = ?,
                 recovery_reason = 'resumable_waiting_preserved', wait_deadline = ?, updated_at = ?
             WHERE run_id = ? AND status = 'waiting_user'",
        )
        .bind(now)
        .bind(deadline)
        .bind(now)
        .bind(run_id)
        .execute(writing.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn await_auth(
        &self,
        run_id: &str,
        deadline: Timestamp,
        stdout_offset: u64,
    ) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let now = Timestamp::now();
        let mut tx = writing.pool().begin().await?;
        let done = sqlx::query(
            "UPDATE runs SET status = 'waiting_auth', wait_deadline = ?, updated_at = ?
             WHERE run_id = ? AND status = 'queued'",
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
             SELECT ?, COALESCE((SELECT MAX(seq) FROM auth_waits WHERE run_id = ?), 0) + 1,
                    turn, ?, ? FROM runs WHERE run_id = ?",
        )
        .bind(run_id)
        .bind(run_id)
        .bind(i64::try_from(stdout_offset)?)
        .bind(now)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        crate::webhooks::tell(&mut tx, run_id, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn auth_arrived(&self, run_id: &str) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let now = Timestamp::now();
        let mut tx = writing.pool().begin().await?;
        let done = sqlx::query(
            "UPDATE runs SET status = 'queued', wait_deadline = NULL, updated_at = ?
             WHERE run_id = ? AND status = 'waiting_auth'",
        )
        .bind(now)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        sqlx::query("UPDATE auth_waits SET ended_at = ? WHERE run_id = ? AND ended_at IS NULL")
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
            " FROM auth_waits WHERE run_id = ? ORDER BY seq"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tests::on_both_backends;
    use crate::{Binding, NewRequest, NewRun, RequestKind, RunStatus, Store};
    use skill_runner_types::engine::Engine;

    fn far_future() -> Timestamp {
        Timestamp::parse("2100-01-01T00:00:00Z").unwrap()
    }

    async fn waiting_run(store: &Store) -> u32 {
        let request = NewRequest {
            request_id: "q1".into(),
            kind: RequestKind::Job,
            skill_id: Some("demo".into()),
            engine: Some(Engine::Script),
            model: None,
            engine_options: json!({}),
            input: json!({}),
            parameter: json!({}),
            runtime_options: serde_json::from_value(json!({"execution_mode": "interactive"}))
                .unwrap(),
            client_address: None,
            tenant_id: crate::DEFAULT_TENANT.into(),
            key_id: None,
        };
        let run = NewRun {
            run_id: "r1".into(),
            tenant_id: crate::DEFAULT_TENANT.into(),
            skill_id: "demo".into(),
            skill_dir: "/skills/demo".into(),
            engine: Engine::Script,
            cache_key: None,
            priority: 2,
            not_before: None,
            schedule_id: None,
            callback_url: None,
        };
        store
            .create_request(&request, Some(&Binding::Run(run)))
            .await
            .unwrap();
        assert!(
            crate::tests::start(store, "r1", "off")
                .await
                .unwrap()
                .is_some()
        );
        store
            .ask_user("r1", 7, &json!({"prompt": "?"}), 12, far_future())
            .await
            .unwrap()
            .unwrap()
    }

    async fn one_answer_per_question_and_keys_are_unique_per_run(store: Store) {
        let seq = waiting_run(&store).await;
        assert_eq!(seq, 1);
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::WaitingUser);
        assert_eq!(
            (run.turn, run.interaction_count, run.pending_interaction_id),
            (1, 1, Some(7))
        );
        assert_eq!(
            store
                .ask_user("r1", 8, &json!({}), 0, far_future())
                .await
                .unwrap(),
            None,
            "only a running run can ask"
        );

        let yes = json!("yes");
        let answer = Answer {
            seq,
            response: &yes,
            idempotency_key: Some("k1"),
            resolution: Resolution::UserReply,
        };
        assert_eq!(
            store.answer("r1", answer).await.unwrap(),
            AnswerOutcome::Accepted
        );
        assert_eq!(
            store.answer("r1", answer).await.unwrap(),
            AnswerOutcome::Stale
        );
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        assert_eq!(run.pending_interaction_id, None);
        let found = store.answered_with_key("r1", "k1").await.unwrap().unwrap();
        assert_eq!(found.response, Some(yes.clone()));
        assert_eq!(found.resolution, Some(Resolution::UserReply));

        assert!(
            crate::tests::start(&store, "r1", "off")
                .await
                .unwrap()
                .is_some()
        );
        let seq = store
            .ask_user("r1", 9, &json!({"prompt": "again?"}), 30, far_future())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seq, 2);
        let reused = Answer {
            seq,
            idempotency_key: Some("k1"),
            ..answer
        };
        assert_eq!(
            store.answer("r1", reused).await.unwrap(),
            AnswerOutcome::KeyTaken
        );
        assert_eq!(
            store.run("r1").await.unwrap().unwrap().status,
            RunStatus::WaitingUser,
            "a refused answer changes nothing"
        );
        let auto = Answer {
            seq,
            response: &json!({"source": "auto_decide_timeout"}),
            idempotency_key: None,
            resolution: Resolution::AutoDecideTimeout,
        };
        assert_eq!(
            store.answer("r1", auto).await.unwrap(),
            AnswerOutcome::Accepted
        );
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!(run.auto_decision_count, 1);
        assert!(run.last_auto_decision_at.is_some());
        let history = store.interactions("r1").await.unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].turn, 2);
        assert_eq!(history[1].interaction_id, 9);
    }

    async fn questions_are_listed_in_order_and_a_waiting_run_is_kept_waiting(store: Store) {
        let seq = waiting_run(&store).await;
        let no = json!("no");
        let answer = Answer {
            seq,
            response: &no,
            idempotency_key: None,
            resolution: Resolution::UserReply,
        };
        store.answer("r1", answer).await.unwrap();
        crate::tests::start(&store, "r1", "off").await.unwrap();
        store
            .ask_user("r1", 8, &json!({"prompt": "next?"}), 40, far_future())
            .await
            .unwrap();
        let asked = store.interactions("r1").await.unwrap();
        let summary: Vec<_> = asked
            .iter()
            .map(|i| {
                (
                    i.seq,
                    i.interaction_id,
                    i.turn,
                    i.stdout_offset,
                    i.response.clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [(1, 7, 1, Some(12), Some(no)), (2, 8, 2, Some(40), None)]
        );
        assert_eq!(asked[1].question, json!({"prompt": "next?"}));
        assert!(
            store
                .answered_with_key("r1", "none")
                .await
                .unwrap()
                .is_none()
        );

        let deadline = Timestamp::parse("2099-01-01T00:00:00Z").unwrap();
        assert!(store.keep_waiting("r1", deadline).await.unwrap());
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!(run.wait_deadline, Some(deadline));
        assert_eq!(run.recovery_state, "recovered_waiting");
        assert!(!store.keep_waiting("nope", deadline).await.unwrap());
    }

    async fn each_wait_for_a_login_is_kept_with_where_it_began(store: Store) {
        let request = crate::jobs::tests::new_request("q2");
        let run = crate::jobs::tests::new_run("r2");
        store
            .create_request(&request, Some(&Binding::Run(run)))
            .await
            .unwrap();
        assert!(store.await_auth("r2", far_future(), 40).await.unwrap());
        assert!(
            !store.await_auth("r2", far_future(), 41).await.unwrap(),
            "only a queued run begins to wait"
        );
        let waits = store.auth_waits("r2").await.unwrap();
        assert_eq!(waits.len(), 1);
        assert_eq!((waits[0].seq, waits[0].stdout_offset), (1, 40));
        assert_eq!(waits[0].ended_at, None);
        assert!(store.auth_arrived("r2").await.unwrap());
        assert!(!store.auth_arrived("r2").await.unwrap());
        assert!(store.await_auth("r2", far_future(), 50).await.unwrap());
        let waits = store.auth_waits("r2").await.unwrap();
        assert!(waits[0].ended_at.is_some());
        assert_eq!((waits[1].seq, waits[1].ended_at), (2, None));
        assert_eq!(
            store.run("r2").await.unwrap().unwrap().status,
            RunStatus::WaitingAuth
        );
    }

    on_both_backends!(
        one_answer_per_question_and_keys_are_unique_per_run,
        questions_are_listed_in_order_and_a_waiting_run_is_kept_waiting,
        each_wait_for_a_login_is_kept_with_where_it_began
    );
}
