//! Package install requests.

use serde::Serialize;

use super::{Sqlite, TaskStatus};
use skill_runner_types::clock::Timestamp;

/// How far a running install got, recorded before each irreversible step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "TEXT", rename_all = "lowercase")]
pub enum InstallPhase {
    Received,
    Validating,
    /// The staged folder is complete and valid and the swap into `skills/` has begun.
    Swapping,
    Done,
}

/// One package install request, as stored and as `GET /v1/skill-packages/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct InstallRequest {
    pub request_id: String,
    pub status: TaskStatus,
    /// Internal progress marker for start-up recovery; not shown to clients.
    #[serde(skip)]
    #[schema(ignore)]
    pub phase: InstallPhase,
    pub skill_id: Option<String>,
    pub version: Option<String>,
    /// `install`, `update` or `unchanged` (a standard skill installed again as it is), once
    /// known.
    pub action: Option<String>,
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// A package of several skills: how each went (`path` in the zip, `skill_id`, `format`,
    /// `version`, `status`, `action`, `error`, `warnings`); absent for a package of one.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "report_json"
    )]
    #[schema(value_type = Option<Vec<Object>>)]
    pub skills: Option<String>,
}

/// The stored report as the JSON it holds.
fn report_json<S: serde::Serializer>(report: &Option<String>, to: S) -> Result<S::Ok, S::Error> {
    let value: Option<serde_json::Value> = report
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(serde::ser::Error::custom)?;
    serde::Serialize::serialize(&value, to)
}

/// Columns read into an [`InstallRequest`], as a literal so queries stay static strings.
macro_rules! install_columns {
    () => {
        "request_id, status, phase, skill_id, version, action, error, created_at, updated_at, \
         skills"
    };
}
pub(crate) use install_columns;

/// Skill package install requests.
#[async_trait::async_trait]
pub trait InstallStore: Send + Sync {
    /// Records a new install request as `queued`.
    async fn insert_install_request(&self, request_id: &str) -> anyhow::Result<()>;

    async fn install_request(&self, request_id: &str) -> anyhow::Result<Option<InstallRequest>>;

    /// Requests that were queued or running when the service last stopped, oldest first.
    async fn unfinished_install_requests(&self) -> anyhow::Result<Vec<InstallRequest>>;

    /// Moves a queued request to `running`; false when it was not queued.
    async fn start_install(&self, request_id: &str) -> anyhow::Result<bool>;

    /// Records what a running request installs and how far it got.
    async fn set_install_progress(
        &self,
        request_id: &str,
        phase: InstallPhase,
        skill_id: &str,
        version: &str,
        action: Option<&str>,
    ) -> anyhow::Result<()>;

    /// Records the report of a package of several skills (a JSON array) as it stands, with
    /// no skill being swapped in: the phase goes back to `validating` and the top-level
    /// skill, version and action are cleared.
    async fn set_install_report(&self, request_id: &str, report: &str) -> anyhow::Result<()>;

    /// Ends an unfinished request; false when it had already ended.
    async fn finish_install(
        &self,
        request_id: &str,
        status: TaskStatus,
        error: Option<&str>,
    ) -> anyhow::Result<bool>;
}

/// The install store, one body for both backends: its statements use `$n` placeholders,
/// which SQLite takes too. `$turn` is what the backend holds while it writes (SQLite's
/// writer's turn; nothing for PostgreSQL), computed from the backend `$this`.
macro_rules! install_store {
    ($backend:ty, |$this:ident| $turn:expr) => {
        #[async_trait::async_trait]
        impl $crate::installs::InstallStore for $backend {
            async fn insert_install_request(&self, request_id: &str) -> anyhow::Result<()> {
                let $this = self;
                let _turn = $turn;
                sqlx::query(
                    "INSERT INTO install_requests
                         (request_id, status, phase, created_at, updated_at)
                     VALUES ($1, 'queued', 'received', $2, $2)",
                )
                .bind(request_id)
                .bind(Timestamp::now())
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn install_request(
                &self,
                request_id: &str,
            ) -> anyhow::Result<Option<InstallRequest>> {
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
                let $this = self;
                let _turn = $turn;
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
                let $this = self;
                let _turn = $turn;
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

            async fn set_install_report(
                &self,
                request_id: &str,
                report: &str,
            ) -> anyhow::Result<()> {
                let $this = self;
                let _turn = $turn;
                sqlx::query(
                    "UPDATE install_requests
                     SET skills = $1, phase = 'validating', skill_id = NULL, version = NULL,
                         action = NULL, updated_at = $2
                     WHERE request_id = $3 AND status = 'running'",
                )
                .bind(report)
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
                let $this = self;
                let _turn = $turn;
                debug_assert!(matches!(status, TaskStatus::Succeeded | TaskStatus::Failed));
                let done = sqlx::query(
                    "UPDATE install_requests SET status = $1, phase = 'done', error = $2,
                         updated_at = $3
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
    };
}
pub(crate) use install_store;

install_store!(Sqlite, |store| store.writing().await?);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::tests::on_both_backends;

    async fn install_request_lifecycle_is_guarded(store: Store) {
        store.insert_install_request("r1").await.unwrap();
        let r = store.install_request("r1").await.unwrap().unwrap();
        assert_eq!(r.status, TaskStatus::Queued);
        assert_eq!(r.phase, InstallPhase::Received);
        assert!(r.created_at.to_string().ends_with('Z'));

        assert!(store.start_install("r1").await.unwrap());
        assert!(
            !store.start_install("r1").await.unwrap(),
            "second start must not win"
        );
        store
            .set_install_progress(
                "r1",
                InstallPhase::Swapping,
                "demo",
                "1.0.0",
                Some("install"),
            )
            .await
            .unwrap();
        assert_eq!(store.unfinished_install_requests().await.unwrap().len(), 1);

        assert!(
            store
                .finish_install("r1", TaskStatus::Succeeded, None)
                .await
                .unwrap()
        );
        assert!(
            !store
                .finish_install("r1", TaskStatus::Failed, Some("late"))
                .await
                .unwrap(),
            "a finished request never changes again"
        );
        let r = store.install_request("r1").await.unwrap().unwrap();
        assert_eq!(r.status, TaskStatus::Succeeded);
        assert_eq!(r.phase, InstallPhase::Done);
        assert_eq!(r.skill_id.as_deref(), Some("demo"));
        assert_eq!(r.action.as_deref(), Some("install"));
        assert_eq!(r.error, None);
        assert!(
            store
                .unfinished_install_requests()
                .await
                .unwrap()
                .is_empty()
        );
        assert!(store.install_request("nope").await.unwrap().is_none());
    }

    on_both_backends!(install_request_lifecycle_is_guarded);

    async fn a_report_of_several_skills_is_kept(store: Store) {
        store.insert_install_request("r2").await.unwrap();
        assert!(store.start_install("r2").await.unwrap());
        store
            .set_install_progress(
                "r2",
                InstallPhase::Swapping,
                "a",
                "sha256-0011223344556677",
                Some("unchanged"),
            )
            .await
            .unwrap();
        let report = r#"[{"path":"skills/a","skill_id":"a","status":"succeeded"}]"#;
        store.set_install_report("r2", report).await.unwrap();
        let r = store.install_request("r2").await.unwrap().unwrap();
        assert_eq!(r.phase, InstallPhase::Validating);
        assert_eq!((r.skill_id, r.action), (None, None));
        let shown = serde_json::to_value(store.install_request("r2").await.unwrap()).unwrap();
        assert_eq!(shown["skills"][0]["skill_id"], "a");
        store.insert_install_request("r3").await.unwrap();
        let one = serde_json::to_value(store.install_request("r3").await.unwrap()).unwrap();
        assert!(one.get("skills").is_none(), "{one}");
    }

    on_both_backends!(a_report_of_several_skills_is_kept);
}
