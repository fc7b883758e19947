//! Engine administration: CLI upgrade requests and operator-added model snapshots.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use super::{Sqlite, TaskStatus};
use skill_runner_types::clock::Timestamp;

/// What became of one engine in an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpgradeResult {
    pub status: TaskStatus,
    pub stdout: String,
    pub stderr: String,
    pub error: Option<String>,
    /// What went right but may still stop the CLI (npm's `EBADENGINE`: a newer Node.js
    /// wanted).
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl UpgradeResult {
    pub fn queued() -> Self {
        Self {
            status: TaskStatus::Queued,
            stdout: String::new(),
            stderr: String::new(),
            error: None,
            warnings: Vec::new(),
        }
    }
}

/// An upgrade request as stored and as `GET /v1/engines/upgrades/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Upgrade {
    pub request_id: String,
    /// `single` or `all`.
    pub mode: String,
    pub requested_engine: Option<String>,
    /// `succeeded` when every engine did.
    pub status: TaskStatus,
    /// By engine.
    #[sqlx(json)]
    pub results: BTreeMap<String, UpgradeResult>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Columns read into an [`Upgrade`], as a literal so queries stay static strings.
macro_rules! upgrade_columns {
    () => {
        "request_id, mode, requested_engine, status, results, created_at, updated_at"
    };
}
pub(crate) use upgrade_columns;

/// A model snapshot an operator added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub engine: String,
    pub cli_version: String,
    /// JSON array of models.
    pub models: String,
    pub created_at: Timestamp,
}

impl From<(String, String, String, Timestamp)> for StoredSnapshot {
    fn from(
        (engine, cli_version, models, created_at): (String, String, String, Timestamp),
    ) -> Self {
        Self {
            engine,
            cli_version,
            models,
            created_at,
        }
    }
}

/// Engine upgrades and added model snapshots.
#[async_trait::async_trait]
pub trait EngineStore: Send + Sync {
    /// Records a queued upgrade; false (nothing recorded) while another one is queued or
    /// running.
    async fn insert_upgrade(&self, upgrade: &Upgrade) -> anyhow::Result<bool>;

    async fn upgrade(&self, request_id: &str) -> anyhow::Result<Option<Upgrade>>;

    /// The latest upgrade whose results name `engine`.
    async fn latest_upgrade_of(&self, engine: &str) -> anyhow::Result<Option<Upgrade>>;

    /// Saves an upgrade's overall status and results as they stand.
    async fn save_upgrade(
        &self,
        request_id: &str,
        status: TaskStatus,
        results: &BTreeMap<String, UpgradeResult>,
    ) -> anyhow::Result<()>;

    /// Upgrades that were queued or running when the service last stopped.
    async fn unfinished_upgrades(&self) -> anyhow::Result<Vec<Upgrade>>;

    /// Adds a snapshot; its creation time, or `None` (nothing changed) when one exists for
    /// that engine and version.
    async fn insert_model_snapshot(
        &self,
        engine: &str,
        cli_version: &str,
        models: &str,
    ) -> anyhow::Result<Option<Timestamp>>;

    async fn model_snapshots(&self) -> anyhow::Result<Vec<StoredSnapshot>>;

    /// The MCP server registry: each server's definition and secret values (JSON texts), by
    /// id.
    async fn mcp_servers(&self) -> anyhow::Result<Vec<StoredMcpServer>>;

    /// Creates or replaces the server `id`; true when it was created.
    async fn put_mcp_server(&self, server: &StoredMcpServer) -> anyhow::Result<bool>;

    /// Removes the server `id`; whether it was there.
    async fn delete_mcp_server(&self, id: &str) -> anyhow::Result<bool>;

    /// The model providers of `engine`, by id.
    async fn providers(&self, engine: &str) -> anyhow::Result<Vec<StoredProvider>>;

    /// Creates or replaces a provider; true when it was created.
    async fn put_provider(&self, provider: &StoredProvider) -> anyhow::Result<bool>;

    /// Removes provider `id` of `engine`; whether it was there.
    async fn delete_provider(&self, engine: &str, id: &str) -> anyhow::Result<bool>;
}

/// A model provider of an engine as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredProvider {
    pub engine: String,
    pub provider_id: String,
    /// Base URL, models and default model (JSON), without the key.
    pub definition: String,
    /// Never shown.
    pub api_key: String,
    pub updated_at: Timestamp,
}

/// A server of the MCP registry as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredMcpServer {
    pub server_id: String,
    /// The definition without secret values (JSON).
    pub definition: String,
    /// The secret values by slot (JSON object); never shown.
    pub secrets: String,
    pub updated_at: Timestamp,
}

/// The engine store, one body for both backends: its statements use `$n` placeholders, which
/// SQLite takes too, but for `$latest`, the tail of [`EngineStore::latest_upgrade_of`]'s query
/// (each database reads a JSON object's key its own way). `$turn` is what the backend holds
/// while it writes (SQLite's writer's turn; nothing for PostgreSQL), computed from `$this`.
macro_rules! engine_store {
    ($backend:ty, |$this:ident| $turn:expr, $latest:literal) => {
        #[async_trait::async_trait]
        impl EngineStore for $backend {
            async fn insert_upgrade(&self, upgrade: &Upgrade) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
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
                    $latest
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
                let $this = self;
                let _turn = $turn;
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
                let $this = self;
                let _turn = $turn;
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

            async fn mcp_servers(&self) -> anyhow::Result<Vec<StoredMcpServer>> {
                let rows: Vec<StoredMcpServer> = sqlx::query_as(
                    "SELECT server_id, definition, secrets, updated_at FROM mcp_servers
                     ORDER BY server_id",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows)
            }

            async fn put_mcp_server(&self, server: &StoredMcpServer) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let existed: Option<(String,)> =
                    sqlx::query_as("SELECT server_id FROM mcp_servers WHERE server_id = $1")
                        .bind(&server.server_id)
                        .fetch_optional(&self.pool)
                        .await?;
                sqlx::query(
                    "INSERT INTO mcp_servers (server_id, definition, secrets, updated_at)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (server_id) DO UPDATE SET definition = excluded.definition,
                         secrets = excluded.secrets, updated_at = excluded.updated_at",
                )
                .bind(&server.server_id)
                .bind(&server.definition)
                .bind(&server.secrets)
                .bind(server.updated_at)
                .execute(&self.pool)
                .await?;
                Ok(existed.is_none())
            }

            async fn delete_mcp_server(&self, id: &str) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let deleted = sqlx::query("DELETE FROM mcp_servers WHERE server_id = $1")
                    .bind(id)
                    .execute(&self.pool)
                    .await?;
                Ok(deleted.rows_affected() == 1)
            }

            async fn providers(&self, engine: &str) -> anyhow::Result<Vec<StoredProvider>> {
                let rows: Vec<StoredProvider> = sqlx::query_as(
                    "SELECT engine, provider_id, definition, api_key, updated_at
                     FROM engine_providers WHERE engine = $1 ORDER BY provider_id",
                )
                .bind(engine)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows)
            }

            async fn put_provider(&self, provider: &StoredProvider) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let existed: Option<(String,)> = sqlx::query_as(
                    "SELECT provider_id FROM engine_providers
                     WHERE engine = $1 AND provider_id = $2",
                )
                .bind(&provider.engine)
                .bind(&provider.provider_id)
                .fetch_optional(&self.pool)
                .await?;
                sqlx::query(
                    "INSERT INTO engine_providers
                         (engine, provider_id, definition, api_key, updated_at)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (engine, provider_id) DO UPDATE SET
                         definition = excluded.definition, api_key = excluded.api_key,
                         updated_at = excluded.updated_at",
                )
                .bind(&provider.engine)
                .bind(&provider.provider_id)
                .bind(&provider.definition)
                .bind(&provider.api_key)
                .bind(provider.updated_at)
                .execute(&self.pool)
                .await?;
                Ok(existed.is_none())
            }

            async fn delete_provider(&self, engine: &str, id: &str) -> anyhow::Result<bool> {
                let $this = self;
                let _turn = $turn;
                let deleted = sqlx::query(
                    "DELETE FROM engine_providers WHERE engine = $1 AND provider_id = $2",
                )
                .bind(engine)
                .bind(id)
                .execute(&self.pool)
                .await?;
                Ok(deleted.rows_affected() == 1)
            }
        }
    };
}
pub(crate) use engine_store;

engine_store!(
    Sqlite,
    |store| store.writing().await?,
    " FROM engine_upgrades WHERE json_type(results, '$.' || $1) IS NOT NULL
      ORDER BY created_at DESC, rowid DESC LIMIT 1"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::tests::on_both_backends;

    fn upgrade(id: &str, engines: &[&str]) -> Upgrade {
        let now = Timestamp::now();
        Upgrade {
            request_id: id.into(),
            mode: if engines.len() == 1 { "single" } else { "all" }.into(),
            requested_engine: (engines.len() == 1).then(|| engines[0].to_owned()),
            status: TaskStatus::Queued,
            results: engines
                .iter()
                .map(|e| (e.to_string(), UpgradeResult::queued()))
                .collect(),
            created_at: now,
            updated_at: now,
        }
    }

    async fn one_upgrade_at_a_time_and_snapshots_are_added_once(store: Store) {
        assert!(
            store
                .insert_upgrade(&upgrade("u1", &["codex"]))
                .await
                .unwrap()
        );
        assert!(
            !store
                .insert_upgrade(&upgrade("u2", &["gemini"]))
                .await
                .unwrap(),
            "one under way at a time"
        );
        assert_eq!(store.unfinished_upgrades().await.unwrap().len(), 1);
        let mut results = upgrade("u1", &["codex"]).results;
        results.get_mut("codex").unwrap().status = TaskStatus::Succeeded;
        results.get_mut("codex").unwrap().stdout = "added 1 package".into();
        store
            .save_upgrade("u1", TaskStatus::Succeeded, &results)
            .await
            .unwrap();
        let saved = store.upgrade("u1").await.unwrap().unwrap();
        assert_eq!(
            (saved.status, &saved.results),
            (TaskStatus::Succeeded, &results)
        );
        assert!(store.unfinished_upgrades().await.unwrap().is_empty());
        assert!(
            store
                .insert_upgrade(&upgrade("u2", &["codex", "gemini"]))
                .await
                .unwrap()
        );
        let latest = |engine: &'static str| {
            let store = store.clone();
            async move {
                let found = store.latest_upgrade_of(engine).await.unwrap();
                found.map(|u| u.request_id)
            }
        };
        assert_eq!(latest("codex").await.as_deref(), Some("u2"));
        assert_eq!(latest("gemini").await.as_deref(), Some("u2"));
        assert_eq!(latest("qwen").await, None);
        assert!(store.upgrade("u3").await.unwrap().is_none());

        let added = store
            .insert_model_snapshot("codex", "1.0.0", "[]")
            .await
            .unwrap();
        assert!(added.is_some());
        assert_eq!(
            store
                .insert_model_snapshot("codex", "1.0.0", "[1]")
                .await
                .unwrap(),
            None,
            "add-only"
        );
        store
            .insert_model_snapshot("claude", "2.0.0", "[\"m\"]")
            .await
            .unwrap();
        let snapshots = store.model_snapshots().await.unwrap();
        let listed: Vec<_> = snapshots
            .iter()
            .map(|s| (s.engine.as_str(), s.cli_version.as_str(), s.models.as_str()))
            .collect();
        assert_eq!(
            listed,
            [("claude", "2.0.0", "[\"m\"]"), ("codex", "1.0.0", "[]")]
        );
        assert_eq!(
            snapshots[1].created_at.to_string(),
            added.unwrap().to_string()
        );
    }

    async fn providers_are_put_replaced_and_deleted_per_engine(store: Store) {
        let provider = |engine: &str, id: &str, key: &str| StoredProvider {
            engine: engine.into(),
            provider_id: id.into(),
            definition: "{}".into(),
            api_key: key.into(),
            updated_at: Timestamp::now(),
        };
        assert!(
            store
                .put_provider(&provider("codex", "gw", "k1"))
                .await
                .unwrap()
        );
        assert!(
            !store
                .put_provider(&provider("codex", "gw", "k2"))
                .await
                .unwrap()
        );
        assert!(
            store
                .put_provider(&provider("claude", "gw", "k3"))
                .await
                .unwrap()
        );
        let codex = store.providers("codex").await.unwrap();
        assert_eq!(codex.len(), 1);
        assert_eq!(codex[0].api_key, "k2");
        assert!(store.delete_provider("codex", "gw").await.unwrap());
        assert!(!store.delete_provider("codex", "gw").await.unwrap());
        assert_eq!(store.providers("claude").await.unwrap().len(), 1);
    }

    async fn mcp_servers_are_put_replaced_and_deleted(store: Store) {
        let server = |definition: &str| StoredMcpServer {
            server_id: "papers".into(),
            definition: definition.into(),
            secrets: r#"{"env:TOKEN": "s"}"#.into(),
            updated_at: Timestamp::now(),
        };
        assert!(store.mcp_servers().await.unwrap().is_empty());
        assert!(store.put_mcp_server(&server("{\"v\": 1}")).await.unwrap());
        assert!(!store.put_mcp_server(&server("{\"v\": 2}")).await.unwrap());
        let all = store.mcp_servers().await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].definition, "{\"v\": 2}");
        assert_eq!(all[0].secrets, r#"{"env:TOKEN": "s"}"#);
        assert!(store.delete_mcp_server("papers").await.unwrap());
        assert!(!store.delete_mcp_server("papers").await.unwrap());
    }

    on_both_backends!(
        one_upgrade_at_a_time_and_snapshots_are_added_once,
        mcp_servers_are_put_replaced_and_deleted,
        providers_are_put_replaced_and_deleted_per_engine
    );
}
