//! skill-runner: runs skills through agent CLIs or scripts behind a REST API.
//!
//! `main` parses the command line and configuration, binds the listener and calls [`serve`];
//! tests call the same function or start the binary.

pub mod agent;
pub mod api;
pub mod browse;
pub use skill_runner_types::clock;
pub mod config;
pub mod disk_space;
pub use skill_runner_process::egress;
pub mod engines;
pub mod error;
pub mod invoke;
pub mod jobs;
pub mod mcp;
pub mod packages;
pub use skill_runner_process as process;
pub mod run_folder;
pub mod runner;
pub mod server;
pub use skill_runner_skill as skill;
pub mod state;
pub use skill_runner_store as store;
pub mod telemetry;
pub mod tool_defs;
pub mod validate;

pub use server::serve;
pub use skill_runner_web::connections::shutdown_signal;
