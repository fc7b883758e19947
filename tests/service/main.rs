//! The service as a whole: start-up and settings, its own surface, its database under faults, packages, SKILL.md skills, tool definitions, MCP and `validate`.
//! One test binary per resource group (each links the whole server once); a module per file.

mod agent_skills;
mod api_docs;
mod db_faults;
mod dockerfile;
mod mcp;
mod observability;
mod packages;
mod server;
mod skill_docs;
mod skills_ref;
mod surface;
mod tools;
mod validate_cli;
