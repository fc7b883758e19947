//! Engines: the real agent CLIs against the fake model, iflow's recorded stand-in, engine administration, and the agent chat.
//! One test binary per resource group (each links the whole server once); a module per file.

mod agent_chat;
mod agents;
mod engines_admin;
mod iflow;
