//! The nodes sharing one PostgreSQL database: membership with heartbeats, claims of queued
//! runs (`FOR UPDATE SKIP LOCKED`, River's way), the leader's settling of lost nodes, and the
//! signals nodes send each other (`LISTEN`/`NOTIFY`).

use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::PgListener;

use super::Postgres;
use crate::jobs::{Run, RunRow, run_columns};
use crate::{Claimed, Cluster, NodeAddress};
use skill_runner_types::clock::Timestamp;
use skill_runner_types::engine::Engine;
use skill_runner_types::run_state::RunStatus;

/// Channels: a run became claimable; a node is asked to stop a run's turn (payload: run id);
/// a node changed the shared skills dir.
const QUEUED: &str = "skill_runner_queued";
const CANCEL: &str = "skill_runner_cancel";
const INSTALLED: &str = "skill_runner_installed";

/// The advisory lock key of the leader's pass (`sk-lead` in ASCII): one node settles lost
/// nodes at a time.
pub(crate) const LEADER: i64 = 0x0073_6b2d_6c65_6164;

/// The advisory lock key of claims of engines with a bound of their own (`sk-engn`).
const ENGINE_PLACES: i64 = 0x0073_6b2d_656e_676e;

/// The advisory lock key the nodes' installs take turns on (`sk-inst`).
const INSTALLS: i64 = 0x0073_6b2d_696e_7374;

/// The first key of the advisory locks a tenant's admissions take turns on (`sk-tnnt`); the
/// second is a hash of the tenant's id.
const TENANTS: i32 = 0x736b_746e;

/// An advisory lock held for the whole cluster: while this node changes the shared skills
/// dir (no other node's install swaps a skill meanwhile), or admits a tenant's run (no other
/// node counts the tenant's runs meanwhile). The session lock lives on a connection of its
/// own, closed on drop (which releases the lock whatever happened).
pub struct ClusterLock(Option<sqlx::pool::PoolConnection<sqlx::Postgres>>);

impl std::fmt::Debug for ClusterLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterLock")
    }
}

impl Drop for ClusterLock {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            // Not given back to the pool with the lock held: closed instead.
            drop(connection.detach());
        }
    }
}

/// What another node asked of this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A run became claimable.
    Queued,
    /// Stop the turn of this run, if it runs here.
    Cancel(String),
    /// A skill was installed into the shared skills dir: read it again.
    Installed,
}

/// A node's subscription to the signals of the others.
pub struct Signals(PgListener);

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signals")
    }
}

impl Signals {
    /// The next signal; an error when the connection broke (a new subscription is needed).
    pub async fn next(&mut self) -> anyhow::Result<Signal> {
        loop {
            let note = self.0.recv().await?;
            match note.channel() {
                QUEUED => return Ok(Signal::Queued),
                CANCEL => return Ok(Signal::Cancel(note.payload().to_owned())),
                INSTALLED => return Ok(Signal::Installed),
                _ => continue,
            }
        }
    }
}

/// The secret the nodes sharing `pool`'s database present to each other; the first node to
/// ask makes it (256 random bits).
pub(super) async fn shared_secret(pool: &sqlx::PgPool) -> anyhow::Result<String> {
    let fresh = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    sqlx::query("INSERT INTO cluster_secret (secret) VALUES ($1) ON CONFLICT (one) DO NOTHING")
        .bind(&fresh)
        .execute(pool)
        .await?;
    let (secret,): (String,) = sqlx::query_as("SELECT secret FROM cluster_secret")
        .fetch_one(pool)
        .await?;
    Ok(secret)
}

impl Postgres {
    async fn notify(&self, channel: &str) -> anyhow::Result<()> {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(channel)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Enters this node in `nodes` (a node restarting under the same id takes its row over).
    pub(super) async fn join(&self) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO nodes (node_id, url) VALUES ($1, $2)
             ON CONFLICT (node_id)
             DO UPDATE SET url = $2, started_at = now(), heartbeat_at = now()",
        )
        .bind(&self.node.id)
        .bind(&self.node.url)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Gives back the claims of runs not started and leaves `nodes` (a stop, not a loss). A
    /// stop between the two leaves a row the leader removes once it is silent.
    pub(super) async fn leave(&self) -> anyhow::Result<()> {
        if self.release_claims().await? > 0 {
            self.announce().await?;
        }
        sqlx::query("DELETE FROM nodes WHERE node_id = $1")
            .bind(&self.node.id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Cluster for Postgres {
    fn node_id(&self) -> &str {
        &self.node.id
    }

    fn secret(&self) -> &str {
        &self.secret
    }

    async fn holder(&self, run_id: &str) -> anyhow::Result<Option<NodeAddress>> {
        let holder = sqlx::query_as(
            "SELECT n.node_id, n.url FROM runs r JOIN nodes n ON n.node_id = r.node
             WHERE r.run_id = $1",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(holder.map(|(id, url)| NodeAddress { id, url }))
    }

    async fn heartbeat(&self) -> anyhow::Result<bool> {
        let beat = sqlx::query("UPDATE nodes SET heartbeat_at = now() WHERE node_id = $1")
            .bind(&self.node.id)
            .execute(&self.pool)
            .await?;
        if beat.rows_affected() == 1 {
            return Ok(true);
        }
        self.join().await?;
        Ok(false)
    }

    async fn claim(
        &self,
        agents: bool,
        limits: &[(Engine, usize)],
        max_running: Option<u32>,
    ) -> anyhow::Result<Option<Claimed>> {
        let mut tx = self.pool.begin().await?;
        // Counted and claimed under one lock where a bound applies (an engine's, or a
        // tenant's max_running), so two nodes never both take the last place.
        sqlx::query(
            "SELECT pg_advisory_xact_lock($1)
             WHERE $2 OR EXISTS (SELECT 1 FROM tenants WHERE quotas LIKE '%\"max_running\"%')",
        )
        .bind(ENGINE_PLACES)
        .bind(!limits.is_empty() || max_running.is_some())
        .execute(&mut *tx)
        .await?;
        let (engines, caps): (Vec<&str>, Vec<i64>) = limits
            .iter()
            .map(|(engine, cap)| (engine.as_str(), i64::try_from(*cap).unwrap_or(i64::MAX)))
            .unzip();
        // Of the runs whose time has come: the tenant holding the fewest places (its runs
        // claimed or running) whose bound leaves it one, then the tenant of the oldest run,
        // then that tenant's run of the highest priority as aged (see
        // `skill_runner_types::priority`), the oldest among equals.
        let now = Timestamp::now();
        let claimed = sqlx::query_as(
            "WITH claimable AS (
                 SELECT run_id, tenant_id, seq FROM runs
                 WHERE status = 'queued' AND lease_node IS NULL
                   AND (not_before IS NULL OR not_before <= $6)
                   AND (node IS NULL OR node = $1) AND ($2 OR engine = 'script')
                   AND NOT EXISTS (
                       SELECT 1 FROM unnest($3::text[], $4::bigint[]) AS l(engine, cap)
                       WHERE l.engine = runs.engine
                         AND (SELECT COUNT(*) FROM runs busy
                              WHERE busy.engine = l.engine AND busy.lease_node IS NOT NULL)
                             >= l.cap)),
             held AS (
                 SELECT tenant_id, COUNT(*) AS n FROM runs
                 WHERE lease_node IS NOT NULL AND status IN ('queued', 'running')
                 GROUP BY tenant_id),
             next_tenant AS (
                 SELECT c.tenant_id FROM claimable c
                 LEFT JOIN held h ON h.tenant_id = c.tenant_id
                 LEFT JOIN tenants t ON t.tenant_id = c.tenant_id
                 WHERE COALESCE((t.quotas::json ->> 'max_running')::bigint, $5) IS NULL
                    OR COALESCE(h.n, 0)
                       < COALESCE((t.quotas::json ->> 'max_running')::bigint, $5)
                 GROUP BY c.tenant_id, h.n
                 ORDER BY COALESCE(h.n, 0), MIN(c.seq)
                 LIMIT 1)
             UPDATE runs SET lease_node = $1
             WHERE run_id = (
                 SELECT run_id FROM runs
                 WHERE run_id IN (SELECT run_id FROM claimable)
                   AND tenant_id = (SELECT tenant_id FROM next_tenant)
                 ORDER BY GREATEST(1, priority - LEAST(4, FLOOR(EXTRACT(EPOCH FROM
                              ($6::text::timestamptz - COALESCE(not_before, created_at)::timestamptz))
                              / $7))), seq
                 FOR UPDATE SKIP LOCKED
                 LIMIT 1)
             RETURNING run_id, engine, tenant_id, priority",
        )
        .bind(&self.node.id)
        .bind(agents)
        .bind(&engines)
        .bind(&caps)
        .bind(max_running.map(i64::from))
        .bind(now)
        .bind(skill_runner_types::priority::AGE_STEP.as_secs_f64())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(claimed)
    }

    async fn queued(&self) -> anyhow::Result<u64> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs WHERE status = 'queued'")
            .fetch_one(&self.pool)
            .await?;
        Ok(n.max(0) as u64)
    }

    async fn next_ready_at(&self) -> anyhow::Result<Option<Timestamp>> {
        let (at,): (Option<Timestamp>,) = sqlx::query_as(
            "SELECT MIN(not_before) FROM runs
             WHERE status = 'queued' AND lease_node IS NULL AND not_before > $1",
        )
        .bind(Timestamp::now())
        .fetch_one(&self.pool)
        .await?;
        Ok(at)
    }

    async fn announce(&self) -> anyhow::Result<()> {
        self.notify(QUEUED).await
    }

    async fn announce_installed(&self) -> anyhow::Result<()> {
        self.notify(INSTALLED).await
    }

    async fn request_cancel(&self, run_id: &str) -> anyhow::Result<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CANCEL)
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn signals(&self) -> anyhow::Result<Signals> {
        let mut listener = PgListener::connect_with(&self.pool)
            .await
            .context("opening the signal connection")?;
        listener.listen_all([QUEUED, CANCEL, INSTALLED]).await?;
        Ok(Signals(listener))
    }

    async fn held(&self, status: RunStatus) -> anyhow::Result<Vec<Run>> {
        // A waiting run is nobody's lease; it belongs to the node holding its folder.
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status = $1
               AND (CASE WHEN status = 'waiting_user' THEN node ELSE lease_node END) = $2
             ORDER BY seq"
        ))
        .bind(status)
        .bind(&self.node.id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Run::try_from).collect()
    }

    async fn release_claims(&self) -> anyhow::Result<u64> {
        let released = sqlx::query(
            "UPDATE runs SET lease_node = NULL WHERE lease_node = $1 AND status = 'queued'",
        )
        .bind(&self.node.id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(released)
    }

    async fn install_lock(&self) -> anyhow::Result<ClusterLock> {
        let mut connection = self.pool.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(INSTALLS)
            .execute(&mut *connection)
            .await?;
        Ok(ClusterLock(Some(connection)))
    }

    async fn tenant_lock(&self, tenant_id: &str) -> anyhow::Result<ClusterLock> {
        let mut connection = self.pool.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock($1, hashtext($2))")
            .bind(TENANTS)
            .bind(tenant_id)
            .execute(&mut *connection)
            .await?;
        Ok(ClusterLock(Some(connection)))
    }

    async fn mark_stored(&self, run_id: &str) -> anyhow::Result<()> {
        sqlx::query("UPDATE runs SET stored = TRUE WHERE run_id = $1 AND status <> 'running'")
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn adopt_stored(&self) -> anyhow::Result<Vec<Run>> {
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "UPDATE runs SET node = CASE WHEN status = 'waiting_user' THEN $1 END
             WHERE stored AND node IS NOT NULL AND lease_node IS NULL
               AND status IN ('waiting_user', 'queued')
               AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = runs.node)
             RETURNING ",
            run_columns!()
        ))
        .bind(&self.node.id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Run::try_from).collect()
    }

    async fn settle_lost(&self, silent: Duration) -> anyhow::Result<Option<Vec<Run>>> {
        let mut tx = self.pool.begin().await?;
        let (leader,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_xact_lock($1)")
            .bind(LEADER)
            .fetch_one(&mut *tx)
            .await?;
        if !leader {
            return Ok(None);
        }
        sqlx::query("DELETE FROM nodes WHERE heartbeat_at < now() - make_interval(secs => $1)")
            .bind(silent.as_secs_f64())
            .execute(&mut *tx)
            .await?;
        // Whatever a node no longer in `nodes` held: claims of runs not started go back to
        // the queue, turns under way are returned to be ended.
        let freed = sqlx::query(
            "UPDATE runs SET lease_node = NULL
             WHERE status = 'queued' AND lease_node IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = runs.lease_node)",
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // Uploads they were receiving were never acknowledged: the clients may send them again.
        sqlx::query(
            "UPDATE requests SET upload_state = 'awaiting', upload_node = NULL
             WHERE upload_state = 'receiving' AND upload_node IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = requests.upload_node)",
        )
        .execute(&mut *tx)
        .await?;
        let orphaned: Vec<RunRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status = 'running' AND lease_node IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = runs.lease_node)
             ORDER BY seq"
        ))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        if freed > 0 {
            self.announce().await?;
        }
        orphaned
            .into_iter()
            .map(Run::try_from)
            .collect::<anyhow::Result<_>>()
            .map(Some)
    }
}
