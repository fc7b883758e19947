//! Databases for tests of the PostgreSQL backend, in the throw-away cluster `scripts/test.sh`
//! starts (`scripts/postgres.sh`) and names in `SKILL_RUNNER_TEST_DATABASE_URL`.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::Connection;

/// The variable naming the test cluster.
pub const CLUSTER: &str = "SKILL_RUNNER_TEST_DATABASE_URL";

/// The URL of a new, empty database of its own in the test cluster. The databases are left
/// there: the cluster is thrown away with them.
pub async fn fresh_database() -> String {
    static MADE: AtomicU32 = AtomicU32::new(0);
    let cluster = std::env::var(CLUSTER).unwrap_or_else(|_| {
        panic!(
            "{CLUSTER} is not set: these tests need a PostgreSQL cluster. `bash scripts/test.sh` \
             starts one; by hand: `d=$(mktemp -d) && chmod 0711 $d && export {CLUSTER}=$(bash \
             scripts/postgres.sh start $d/pg)`"
        )
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!(
        "t_{}_{}_{nanos}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(&cluster)
        .await
        .unwrap_or_else(|e| panic!("connecting to the test cluster {cluster}: {e}"));
    // The name is ours (digits and underscores), not input.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
    admin.close().await.ok();
    let (url, options) = cluster.split_once('?').unwrap_or((&cluster, ""));
    let (server, _) = url
        .rsplit_once('/')
        .expect("the cluster URL names a database");
    match options {
        "" => format!("{server}/{name}"),
        options => format!("{server}/{name}?{options}"),
    }
}

/// Which store a test's server keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// The data dir's SQLite file (the default).
    Sqlite,
    /// A fresh database of the test cluster.
    Postgres,
}

impl Store {
    /// The server's environment for this store, `extra` after it.
    pub async fn env(self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if self == Self::Postgres {
            env.push(("SKILL_RUNNER_DATABASE_URL".into(), fresh_database().await));
            // A stable id, as a deployment gives each node: restarted, the node takes up what
            // it held.
            env.push(("SKILL_RUNNER_NODE_ID".into(), "node-1".into()));
        }
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }
}

/// `env` as [`crate::TestServer::start_with`] takes it.
pub fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A PostgreSQL cluster of a test's own (`scripts/postgres.sh`), for a test that stops it;
/// stopped and removed when dropped.
pub struct OwnCluster {
    dir: tempfile::TempDir,
    /// Its `postgres` database.
    pub url: String,
}

impl OwnCluster {
    pub fn start() -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        // The cluster belongs to the `postgres` user when the tests run as root.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let url = Self::script("start", &dir);
        Self { dir, url }
    }

    /// Stops the server (`fast`: its sessions cut off, what it committed kept).
    pub fn stop(&self) {
        Self::script("stop", &self.dir);
    }

    /// Starts it again, on the same port.
    pub fn resume(&self) {
        Self::script("resume", &self.dir);
    }

    fn script(command: &str, dir: &tempfile::TempDir) -> String {
        let out = std::process::Command::new("bash")
            .arg(crate::repo_root().join("scripts/postgres.sh"))
            .arg(command)
            .arg(dir.path().join("cluster"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "postgres.sh {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        Self::script("stop", &self.dir);
    }
}

/// A PostgreSQL program (`pg_dump`, …) of the newest installed release, as
/// `scripts/postgres.sh` picks it.
pub fn tool(name: &str) -> std::path::PathBuf {
    let mut bins: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (scripts/test.sh installs it)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join(name).exists())
        .collect();
    bins.sort_by_key(|bin| {
        bin.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    bins.pop()
        .unwrap_or_else(|| panic!("no {name} under /usr/lib/postgresql"))
        .join(name)
}
