//! The PostgreSQL backend (`SKILL_RUNNER_DATABASE_URL=postgres://…`): every part of the store
//! in PostgreSQL's SQL, with migrations of its own (`migrations/postgres`).
//!
//! Unlike SQLite there is no writer's turn (PostgreSQL's row locks order concurrent writers)
//! and no read cache: every read asks the database.
//!
//! One node serves a database at a time: at start-up a node settles every run it finds
//! running as interrupted, which would fail the turns of another node still running them. So
//! a node holds an advisory lock for its life (on a connection of its own), and a second one
//! is refused at start with a clear error rather than allowed to break the first one's runs.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::Backend;

mod engines;
mod installs;
mod interactions;
mod jobs;

/// The schema this build expects in PostgreSQL.
static MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections a node keeps to PostgreSQL at most: enough for a status poll beside every write
/// of a busy node; a fleet of N nodes needs N times this below the server's `max_connections`.
const MAX_CONNECTIONS: u32 = 10;

/// The advisory lock key held by the node serving a database (`skill-runner` in ASCII).
const NODE_LOCK: i64 = 0x736b_696c_6c2d_7275;

/// Tries for the node lock, 200 ms apart.
const LOCK_ATTEMPTS: u32 = 10;

/// The PostgreSQL backend: a connection pool, and the session holding the node's lock.
#[derive(Debug)]
pub struct Postgres {
    pub(crate) pool: PgPool,
    node_lock: tokio::sync::Mutex<Option<PgConnection>>,
}

impl Postgres {
    /// Connects to `url` and applies pending migrations (nodes starting together take turns:
    /// sqlx holds an advisory lock while it migrates).
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        // The URL may carry a password: errors name the host and database, never the URL.
        let options = PgConnectOptions::from_str(url)
            .context("SKILL_RUNNER_DATABASE_URL is not a valid postgres:// URL")?;
        let place = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or_default()
        );
        let mut lock = PgConnection::connect_with(&options)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {place}"))?;
        // A node that was just killed holds the lock until PostgreSQL sees its connection
        // close, a moment after: its restart waits that long.
        let mut locked = false;
        for attempt in 0..LOCK_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (locked,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
                .bind(NODE_LOCK)
                .fetch_one(&mut lock)
                .await
                .context("taking the node lock")?;
            if locked {
                break;
            }
        }
        anyhow::ensure!(
            locked,
            "another skill-runner node serves the database at {place}: one node per database \
             (stop the other one, or give this one a database of its own)"
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
        Ok(Self {
            pool,
            node_lock: tokio::sync::Mutex::new(Some(lock)),
        })
    }
}

#[async_trait::async_trait]
impl Backend for Postgres {
    async fn close(&self) {
        self.pool.close().await;
        if let Some(lock) = self.node_lock.lock().await.take() {
            lock.close().await.ok();
        }
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
