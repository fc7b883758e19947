//! The one application state every handler receives.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::agent::Agent;
use crate::config::Config;
use crate::engines::upgrades::Upgrader;
use crate::invoke::Host;
use crate::jobs::Jobs;
use crate::packages::Installer;
use crate::process::terminal::Terminal;
use crate::skill::Registry;
use crate::skill::docs::index::Docs;
use crate::store::Store;

/// Shared services; cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub registry: Arc<Registry>,
    pub installer: Arc<Installer>,
    pub jobs: Arc<Jobs>,
    /// Engine logins through the API, and the runs waiting for one.
    pub logins: Arc<skill_runner_core::engine_login::EngineLogins>,
    pub invoke: Arc<Host>,
    /// The agent chat and its sessions.
    pub agent: Arc<Agent>,
    /// The `SKILL.md` skills of the configured roots.
    pub skill_docs: Arc<Docs>,
    pub upgrades: Arc<Upgrader>,
    /// Tenants, their keys as this node checks them, and the audit log.
    pub tenants: Arc<skill_runner_core::tenants::manage::Tenants>,
    /// The operator's terminal for logging engine CLIs in.
    pub terminal: Arc<Terminal>,
    /// The open event streams, by run, client address and tenant.
    pub streams: Arc<skill_runner_web::stream_caps::StreamCaps>,
    /// Set when a shutdown begins: readiness answers 503 from then on.
    pub draining: Arc<AtomicBool>,
}
