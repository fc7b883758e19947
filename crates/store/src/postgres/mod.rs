//! The PostgreSQL backend (`SKILL_RUNNER_DATABASE_URL=postgres://…`): every part of the store
//! in PostgreSQL's SQL, with migrations of its own (`migrations/postgres`), and the
//! coordination of the nodes sharing the database ([`Cluster`], in `cluster.rs`).
//!
//! Unlike SQLite there is no writer's turn (PostgreSQL's row locks order concurrent writers)
//! and no read cache: another node may write any row, so every read asks the database.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::Backend;

mod arrivals;
pub(crate) mod cluster;
mod engines;
mod installs;
mod interactions;
mod jobs;
mod repairs;
mod schedules;
mod secrets;
mod tenants;
pub(crate) mod webhooks;

pub use cluster::{ClusterLock, Signal, Signals};

/// The schema this build expects in PostgreSQL.
static MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections a node keeps to PostgreSQL at most: enough for a status poll beside every write
/// of a busy node; a fleet of N nodes needs N times this below the server's `max_connections`.
const MAX_CONNECTIONS: u32 = 10;

/// How long PostgreSQL lets a transaction of ours wait on the node before it ends the session.
/// Our transactions wait on nothing but the database, for milliseconds; a node frozen inside
/// one (`SIGSTOP`, a paused VM) would otherwise keep its locks, the leader's among them, so no
/// other node could settle it as lost while it stays frozen.
pub(crate) const STALLED_TRANSACTION: Duration = Duration::from_secs(5);

/// The PostgreSQL backend: a connection pool, this node's name among those sharing it, and
/// the bound on their queued runs.
#[derive(Debug)]
pub struct Postgres {
    pub(crate) pool: PgPool,
    node: crate::NodeAddress,
    /// What this node and the others present when one forwards a read to another.
    secret: String,
    queue_bound: usize,
}

impl Postgres {
    /// Connects to `url` as `node`, applies pending migrations (nodes starting together take
    /// turns: sqlx holds an advisory lock while it migrates) and joins the nodes, which together
    /// queue at most `queue_bound` runs.
    pub async fn connect(
        url: &str,
        node: &crate::NodeAddress,
        queue_bound: usize,
    ) -> anyhow::Result<Self> {
        // The URL may carry a password: errors name the host and database, never the URL.
        let options = PgConnectOptions::from_str(url)
            .context("SKILL_RUNNER_DATABASE_URL is not a valid postgres:// URL")?
            .options([(
                "idle_in_transaction_session_timeout",
                STALLED_TRANSACTION.as_millis().to_string(),
            )]);
        let place = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        );
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {place}"))?;
        MIGRATIONS
            .run(&pool)
            .await
            .with_context(|| format!("applying database migrations to PostgreSQL at {place}"))?;
        let secret = cluster::shared_secret(&pool)
            .await
            .context("reading the nodes' shared secret")?;
        let store = Self {
            pool,
            node: node.clone(),
            secret,
            queue_bound,
        };
        store.join().await.context("joining the nodes")?;
        Ok(store)
    }
}

#[async_trait::async_trait]
impl Backend for Postgres {
    async fn close(&self) {
        if let Err(e) = self.leave().await {
            tracing::warn!(error = format!("{e:#}"), "leaving the nodes");
        }
        self.pool.close().await;
    }

    fn cluster(&self) -> Option<&dyn crate::Cluster> {
        Some(self)
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn check(&self) -> anyhow::Result<()> {
        let (applied,): (Option<i64>,) = sqlx::query_as(crate::APPLIED_MIGRATION)
            .fetch_one(&self.pool)
            .await
            .context("reading the applied migrations")?;
        crate::check_migrations(&MIGRATIONS, applied)
    }
}
