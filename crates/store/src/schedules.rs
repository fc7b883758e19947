//! Schedules: a job made at each tick of a cron expression (see `core::schedules`).
//!
//! The store keeps each schedule's next tick; the node that handled a tick moves it on with a
//! compare-and-set on that tick, so among nodes each tick is handled once (the run it makes has
//! an id derived from the schedule and the tick, so a node that died between making the run
//! and moving the tick on leaves nothing to make twice).

use serde_json::Value;
use skill_runner_types::clock::Timestamp;

use super::Sqlite;

/// A schedule, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Schedule {
    pub schedule_id: String,
    pub tenant_id: String,
    /// The job each tick makes, as `POST /v1/jobs` takes it.
    #[sqlx(json)]
    pub job: Value,
    pub cron: String,
    pub timezone: String,
    pub overlap: String,
    #[sqlx(try_from = "i64")]
    pub catch_up_seconds: u64,
    pub paused: bool,
    pub next_tick_at: Option<Timestamp>,
    pub last_tick_at: Option<Timestamp>,
    pub last_outcome: Option<String>,
    pub last_request_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

macro_rules! schedule_columns {
    () => {
        "schedule_id, tenant_id, job, cron, timezone, overlap, catch_up_seconds, paused, \
         next_tick_at, last_tick_at, last_outcome, last_request_id, created_at, updated_at"
    };
}
pub(crate) use schedule_columns;

/// What a tick came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticked {
    pub tick_at: Timestamp,
    /// `run`, `skipped_overlap`, `skipped_late` or `failed: <why>`.
    pub outcome: String,
    pub request_id: Option<String>,
}

/// The schedules.
#[async_trait::async_trait]
pub trait ScheduleStore: Send + Sync {
    async fn create_schedule(&self, schedule: &Schedule) -> anyhow::Result<()>;

    /// The tenant's schedules (every tenant's for `None`), oldest first.
    async fn schedules(&self, tenant_id: Option<&str>) -> anyhow::Result<Vec<Schedule>>;

    async fn schedule(
        &self,
        tenant_id: &str,
        schedule_id: &str,
    ) -> anyhow::Result<Option<Schedule>>;

    /// Replaces a schedule's settings (job, cron, time zone, overlap, catch-up, paused, next
    /// tick); false when the tenant has no such schedule.
    async fn update_schedule(&self, schedule: &Schedule) -> anyhow::Result<bool>;

    async fn delete_schedule(&self, tenant_id: &str, schedule_id: &str) -> anyhow::Result<bool>;

    /// The schedules not paused whose next tick is due at `now`.
    async fn due_schedules(&self, now: Timestamp) -> anyhow::Result<Vec<Schedule>>;

    /// Moves a schedule's next tick from `ticked.tick_at` to `next`, recording what the tick
    /// came to; false when another node moved it first.
    async fn advance_schedule(
        &self,
        schedule_id: &str,
        ticked: &Ticked,
        next: Option<Timestamp>,
    ) -> anyhow::Result<bool>;

    /// When the earliest next tick of a schedule not paused is due.
    async fn next_tick_at(&self) -> anyhow::Result<Option<Timestamp>>;

    /// The runs a schedule made that have not ended.
    async fn active_runs_of_schedule(&self, schedule_id: &str) -> anyhow::Result<Vec<String>>;
}

/// The runs of schedule `?1`/`$1` not ended.
macro_rules! active_runs {
    ($p:literal) => {
        concat!(
            "SELECT run_id FROM runs WHERE schedule_id = ",
            $p,
            " AND status IN ('queued', 'running', 'waiting_user', 'waiting_auth')"
        )
    };
}
pub(crate) use active_runs;

#[async_trait::async_trait]
impl ScheduleStore for Sqlite {
    async fn create_schedule(&self, s: &Schedule) -> anyhow::Result<()> {
        let writing = self.writing().await?;
        sqlx::query(concat!(
            "INSERT INTO schedules (",
            schedule_columns!(),
            ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .bind(&s.schedule_id)
        .bind(&s.tenant_id)
        .bind(s.job.to_string())
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
        .execute(writing.pool())
        .await?;
        Ok(())
    }

    async fn schedules(&self, tenant_id: Option<&str>) -> anyhow::Result<Vec<Schedule>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE ? IS NULL OR tenant_id = ? ORDER BY created_at, schedule_id"
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
            " FROM schedules WHERE tenant_id = ? AND schedule_id = ?"
        ))
        .bind(tenant_id)
        .bind(schedule_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn update_schedule(&self, s: &Schedule) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let done = sqlx::query(
            "UPDATE schedules SET job = ?, cron = ?, timezone = ?, overlap = ?,
                 catch_up_seconds = ?, paused = ?, next_tick_at = ?, updated_at = ?
             WHERE tenant_id = ? AND schedule_id = ?",
        )
        .bind(s.job.to_string())
        .bind(&s.cron)
        .bind(&s.timezone)
        .bind(&s.overlap)
        .bind(i64::try_from(s.catch_up_seconds)?)
        .bind(s.paused)
        .bind(s.next_tick_at)
        .bind(s.updated_at)
        .bind(&s.tenant_id)
        .bind(&s.schedule_id)
        .execute(writing.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_schedule(&self, tenant_id: &str, schedule_id: &str) -> anyhow::Result<bool> {
        let writing = self.writing().await?;
        let done = sqlx::query("DELETE FROM schedules WHERE tenant_id = ? AND schedule_id = ?")
            .bind(tenant_id)
            .bind(schedule_id)
            .execute(writing.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn due_schedules(&self, now: Timestamp) -> anyhow::Result<Vec<Schedule>> {
        let rows = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE paused = 0 AND next_tick_at <= ? ORDER BY next_tick_at"
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
        let writing = self.writing().await?;
        let done = sqlx::query(
            "UPDATE schedules SET next_tick_at = ?, last_tick_at = ?, last_outcome = ?,
                 last_request_id = COALESCE(?, last_request_id)
             WHERE schedule_id = ? AND next_tick_at = ?",
        )
        .bind(next)
        .bind(ticked.tick_at)
        .bind(&ticked.outcome)
        .bind(&ticked.request_id)
        .bind(schedule_id)
        .bind(ticked.tick_at)
        .execute(writing.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn next_tick_at(&self) -> anyhow::Result<Option<Timestamp>> {
        let (at,): (Option<Timestamp>,) =
            sqlx::query_as("SELECT MIN(next_tick_at) FROM schedules WHERE paused = 0")
                .fetch_one(&self.pool)
                .await?;
        Ok(at)
    }

    async fn active_runs_of_schedule(&self, schedule_id: &str) -> anyhow::Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as(active_runs!("?"))
            .bind(schedule_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::Store;
    use crate::tests::on_both_backends;

    async fn a_tick_is_moved_on_once_and_schedules_are_the_tenants_own(store: Store) {
        let now = Timestamp::now();
        let schedule = Schedule {
            schedule_id: "s1".into(),
            tenant_id: "t1".into(),
            job: json!({"skill_id": "demo"}),
            cron: "* * * * * *".into(),
            timezone: "UTC".into(),
            overlap: "skip".into(),
            catch_up_seconds: 60,
            paused: false,
            next_tick_at: Some(now),
            last_tick_at: None,
            last_outcome: None,
            last_request_id: None,
            created_at: now,
            updated_at: now,
        };
        store.create_schedule(&schedule).await.unwrap();
        assert!(store.schedule("t2", "s1").await.unwrap().is_none());
        assert_eq!(store.schedules(Some("t1")).await.unwrap().len(), 1);
        let due = store.due_schedules(Timestamp::now()).await.unwrap();
        assert_eq!(due.len(), 1);
        let tick = due[0].next_tick_at.unwrap();
        let ticked = Ticked {
            tick_at: tick,
            outcome: "run".into(),
            request_id: Some("q1".into()),
        };
        let next = Timestamp::after(Duration::from_secs(1));
        assert!(
            store
                .advance_schedule("s1", &ticked, Some(next))
                .await
                .unwrap()
        );
        assert!(
            !store
                .advance_schedule("s1", &ticked, Some(next))
                .await
                .unwrap(),
            "the second node finds the tick moved on"
        );
        let kept = store.schedule("t1", "s1").await.unwrap().unwrap();
        assert_eq!(kept.last_request_id.as_deref(), Some("q1"));
        assert!(
            store
                .due_schedules(Timestamp::now())
                .await
                .unwrap()
                .is_empty()
        );
        let mut paused = kept.clone();
        paused.paused = true;
        assert!(store.update_schedule(&paused).await.unwrap());
        assert_eq!(store.next_tick_at().await.unwrap(), None);
        assert!(!store.delete_schedule("t2", "s1").await.unwrap());
        assert!(store.delete_schedule("t1", "s1").await.unwrap());
    }

    on_both_backends!(a_tick_is_moved_on_once_and_schedules_are_the_tenants_own);
}
