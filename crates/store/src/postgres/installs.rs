//! Package install requests in PostgreSQL: the same statements as SQLite's (see
//! `crate::installs`).

use super::Postgres;
use crate::TaskStatus;
use crate::installs::{InstallPhase, InstallRequest, install_columns, install_store};
use skill_runner_types::clock::Timestamp;

install_store!(Postgres, |_store| ());
