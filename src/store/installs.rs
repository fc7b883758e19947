//! Package install requests.

use serde::Serialize;

use super::Store;
use crate::clock;

/// Lifecycle of a package install request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstallStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
}

impl InstallStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            other => anyhow::bail!("unknown install status '{other}' in the database"),
        })
    }
}

/// How far a running install got, recorded before each irreversible step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallPhase {
    Received,
    Validating,
    /// The staged folder is complete and valid and the swap into `skills/` has begun.
    Swapping,
    Done,
}

impl InstallPhase {
    fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::Validating => "validating",
            Self::Swapping => "swapping",
            Self::Done => "done",
        }
    }

    fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "received" => Self::Received,
            "validating" => Self::Validating,
            "swapping" => Self::Swapping,
            "done" => Self::Done,
            other => anyhow::bail!("unknown install phase '{other}' in the database"),
        })
    }
}

/// One package install request, as stored and as `GET /v1/skill-packages/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InstallRequest {
    pub request_id: String,
    pub status: InstallStatus,
    /// Internal progress marker for start-up recovery; not shown to clients.
    #[serde(skip)]
    #[schema(ignore)]
    pub phase: InstallPhase,
    pub skill_id: Option<String>,
    pub version: Option<String>,
    /// `install` or `update`, once known.
    pub action: Option<String>,
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

type InstallRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    String,
);

/// Columns read into an [`InstallRow`], as a literal so queries stay static strings.
macro_rules! install_columns {
    () => {
        "request_id, status, phase, skill_id, version, action, error, created_at, updated_at"
    };
}

fn install_from_row(row: InstallRow) -> anyhow::Result<InstallRequest> {
    let (request_id, status, phase, skill_id, version, action, error, created_at, updated_at) = row;
    Ok(InstallRequest {
        request_id,
        status: InstallStatus::parse(&status)?,
        phase: InstallPhase::parse(&phase)?,
        skill_id,
        version,
        action,
        error,
        created_at,
        updated_at,
    })
}

impl Store {
    /// Records a new install request as `queued`.
    pub async fn insert_install_request(&self, request_id: &str) -> anyhow::Result<()> {
        let now = clock::now();
        sqlx::query(
            "INSERT INTO install_requests (request_id, status, phase, created_at, updated_at)
             VALUES (?, 'queued', 'received', ?, ?)",
        )
        .bind(request_id)
        .bind(&now)
        .bind(&now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn install_request(
        &self,
        request_id: &str,
    ) -> anyhow::Result<Option<InstallRequest>> {
        let row: Option<InstallRow> = sqlx::query_as(concat!(
            "SELECT ",
            install_columns!(),
            " FROM install_requests WHERE request_id = ?"
        ))
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(install_from_row).transpose()
    }

    /// Requests that were queued or running when the service last stopped, oldest first.
    pub async fn unfinished_install_requests(&self) -> anyhow::Result<Vec<InstallRequest>> {
        let rows: Vec<InstallRow> = sqlx::query_as(concat!(
            "SELECT ",
            install_columns!(),
            " FROM install_requests WHERE status IN ('queued', 'running')",
            " ORDER BY created_at, request_id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(install_from_row).collect()
    }

    /// Moves a queued request to `running`; false when it was not queued.
    pub async fn start_install(&self, request_id: &str) -> anyhow::Result<bool> {
        let done = sqlx::query(
            "UPDATE install_requests SET status = 'running', phase = 'validating', updated_at = ?
             WHERE request_id = ? AND status = 'queued'",
        )
        .bind(clock::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records what a running request installs and how far it got.
    pub async fn set_install_progress(
        &self,
        request_id: &str,
        phase: InstallPhase,
        skill_id: &str,
        version: &str,
        action: Option<&str>,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE install_requests
             SET phase = ?, skill_id = ?, version = ?, action = COALESCE(?, action), updated_at = ?
             WHERE request_id = ? AND status = 'running'",
        )
        .bind(phase.as_str())
        .bind(skill_id)
        .bind(version)
        .bind(action)
        .bind(clock::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Ends an unfinished request; false when it had already ended.
    pub async fn finish_install(
        &self,
        request_id: &str,
        status: InstallStatus,
        error: Option<&str>,
    ) -> anyhow::Result<bool> {
        debug_assert!(matches!(
            status,
            InstallStatus::Succeeded | InstallStatus::Failed
        ));
        let done = sqlx::query(
            "UPDATE install_requests SET status = ?, phase = 'done', error = ?, updated_at = ?
             WHERE request_id = ? AND status IN ('queued', 'running')",
        )
        .bind(status.as_str())
        .bind(error)
        .bind(clock::now())
        .bind(request_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::store;

    #[tokio::test]
    async fn install_request_lifecycle_is_guarded() {
        let (_dir, store) = store().await;
        store.insert_install_request("r1").await.unwrap();
        let r = store.install_request("r1").await.unwrap().unwrap();
        assert_eq!(r.status, InstallStatus::Queued);
        assert_eq!(r.phase, InstallPhase::Received);
        assert!(r.created_at.ends_with('Z'));

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
                .finish_install("r1", InstallStatus::Succeeded, None)
                .await
                .unwrap()
        );
        assert!(
            !store
                .finish_install("r1", InstallStatus::Failed, Some("late"))
                .await
                .unwrap(),
            "a finished request never changes again"
        );
        let r = store.install_request("r1").await.unwrap().unwrap();
        assert_eq!(r.status, InstallStatus::Succeeded);
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
}
