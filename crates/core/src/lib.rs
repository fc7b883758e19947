//! The job core: what the service does with a request, free of HTTP and of any one database.
//!
//! - [`jobs`]: create, queue, run, wait for answers, cancel, recover and expire runs; their
//!   events, conversation and result cache.
//! - [`runner`]: one turn of a skill, the same for jobs and `:invoke`.
//! - [`invoke`]: the synchronous `:invoke` host and its built-in skills.
//! - [`packages`]: installing skill packages; [`validate`]: checking one before it is installed.
//! - [`mcp_registry`]: the operator's MCP servers, and those a job's turn gets.
//! - [`tool_defs`]: skills as tool definitions; [`browse`]: reading a run's files.
//! - [`engine_login`]: logging engines in through the API; runs waiting for a login.
//! - [`hints`]: what to do about each failure code.
//! - [`tenants`]: who calls, what each key may do, the audit log.
//! - [`disk_space`]: the reserve that lets runs be recorded on a full volume.
//!
//! Operations answer with [`error::Error`], a domain error the server maps to HTTP.

pub mod account_login;
pub mod browse;
pub mod config;
pub mod disk_space;
pub mod engine_login;
pub mod error;
pub mod hints;
pub mod invoke;
pub mod jobs;
pub mod mcp_registry;
pub mod packages;
pub mod providers;
pub mod runner;
pub mod secrets;
pub mod storage;
pub mod tenants;
pub mod tool_defs;
pub mod validate;
pub mod webhooks;

use skill_runner_engines as engines;
use skill_runner_process as process;
use skill_runner_process::{egress, run_folder};
use skill_runner_skill as skill;
use skill_runner_store as store;
use skill_runner_types::clock;
