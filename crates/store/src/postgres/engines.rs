//! Engine upgrades and added model snapshots in PostgreSQL: the same statements as SQLite's
//! (see `crate::engines`).

use std::collections::BTreeMap;

use sqlx::types::Json;

use super::Postgres;
use crate::TaskStatus;
use crate::engines::{
    EngineStore, StoredMcpServer, StoredProvider, StoredSnapshot, Upgrade, UpgradeResult,
    engine_store, upgrade_columns,
};
use skill_runner_types::clock::Timestamp;

engine_store!(
    Postgres,
    |_store| (),
    " FROM engine_upgrades WHERE results -> $1 IS NOT NULL
      ORDER BY created_at DESC, seq DESC LIMIT 1"
);
