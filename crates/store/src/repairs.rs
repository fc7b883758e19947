//! Repair rounds of a turn whose answer broke the output contract: each is another process of
//! the turn, told in the same session what was wrong. They are kept so a run's conversation,
//! events and timeline place each round where it began.

use super::Sqlite;
use skill_runner_types::clock::Timestamp;

/// One repair round of a turn.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RepairRound {
    #[sqlx(try_from = "i64")]
    pub turn: u32,
    /// 1, 2, ... within the turn.
    #[sqlx(try_from = "i64")]
    pub round: u32,
    /// Rounds the turn may take at most.
    #[sqlx(try_from = "i64")]
    pub rounds: u32,
    /// Where the unfit answer's output ended in `logs/stdout.txt`.
    #[sqlx(try_from = "i64")]
    pub stdout_offset: u64,
    /// What was wrong with the answer.
    #[sqlx(json)]
    pub problems: Vec<String>,
    pub started_at: Timestamp,
}

macro_rules! repair_columns {
    () => {
        "turn, round, rounds, stdout_offset, problems, started_at"
    };
}
pub(crate) use repair_columns;

/// The repair rounds of runs.
#[async_trait::async_trait]
pub trait RepairStore: Send + Sync {
    /// Keeps a round as it begins; a round kept already is left as it is (a turn run again
    /// after a restart numbers its rounds from 1 again, over the same log).
    async fn record_repair(&self, run_id: &str, round: &RepairRound) -> anyhow::Result<()>;

    /// Every repair round of a run, in the order they began.
    async fn repair_rounds(&self, run_id: &str) -> anyhow::Result<Vec<RepairRound>>;
}

#[async_trait::async_trait]
impl RepairStore for Sqlite {
    async fn record_repair(&self, run_id: &str, round: &RepairRound) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query(
            "INSERT INTO repair_rounds
                 (run_id, turn, round, rounds, stdout_offset, problems, started_at)
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(run_id)
        .bind(i64::from(round.turn))
        .bind(i64::from(round.round))
        .bind(i64::from(round.rounds))
        .bind(i64::try_from(round.stdout_offset)?)
        .bind(serde_json::to_string(&round.problems)?)
        .bind(round.started_at)
        .execute(writing.pool())
        .await?;
        Ok(())
    }

    async fn repair_rounds(&self, run_id: &str) -> anyhow::Result<Vec<RepairRound>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            repair_columns!(),
            " FROM repair_rounds WHERE run_id = ? ORDER BY turn, round"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
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

    async fn rounds_are_kept_in_order_once_and_go_with_their_run(store: Store) {
        store
            .create_request(&new_request("q1"), Some(&Binding::Run(new_run("r1"))))
            .await
            .unwrap();
        crate::tests::start(&store, "r1", "off").await.unwrap();
        let round = |round| RepairRound {
            turn: 1,
            round,
            rounds: 3,
            stdout_offset: u64::from(round) * 100,
            problems: vec![format!("problem {round}")],
            started_at: Timestamp::now(),
        };
        store.record_repair("r1", &round(2)).await.unwrap();
        store.record_repair("r1", &round(1)).await.unwrap();
        let mut again = round(1);
        again.stdout_offset = 7;
        store.record_repair("r1", &again).await.unwrap();
        let kept = store.repair_rounds("r1").await.unwrap();
        assert_eq!(kept.iter().map(|r| r.round).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(kept[0].stdout_offset, 100, "the first record stands");
        assert_eq!(kept[1].problems, ["problem 2"]);
        store
            .finish_run("r1", Move::End, None, &ending(RunStatus::Failed))
            .await
            .unwrap();
        let later = Timestamp::after(Duration::from_secs(60));
        store.delete_finished(later, later).await.unwrap();
        assert!(store.repair_rounds("r1").await.unwrap().is_empty());
    }

    on_both_backends!(rounds_are_kept_in_order_once_and_go_with_their_run);
}
