//! skill-runner: runs skills through agent CLIs or scripts behind a REST API.
//!
//! `main` parses the command line and configuration, binds the listener and calls [`serve`];
//! tests call the same function or start the binary. This crate is the HTTP side (routes, API
//! types, console, MCP) and the service's configuration; what it serves is the job core's
//! (`skill_runner_core`) and the agent's (`skill_runner_agent`), re-exported here under the
//! names the routes use.

pub mod api;
pub mod config;
pub mod health_check;
pub mod idle;
pub mod keys_cli;
pub mod log_book;
pub mod mcp;
pub mod metrics;
pub mod server;
pub mod state;
pub mod telemetry;

pub use skill_runner_agent as agent;
pub use skill_runner_core::{
    browse, disk_space, error, hints, invoke, jobs, packages, runner, storage, tool_defs, validate,
    webhooks,
};
pub use skill_runner_engines as engines;
pub use skill_runner_process::{self as process, egress, run_folder};
pub use skill_runner_skill as skill;
pub use skill_runner_store as store;
pub use skill_runner_types::clock;

pub use server::serve;
pub use skill_runner_web::connections::shutdown_signal;
