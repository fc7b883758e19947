//! Engines: the real agent CLIs against the fake model, the recorded stand-ins of iflow and codebuddy, engine administration, and the agent chat.
//! One test binary per resource group (each links the whole server once); a module per file.

mod agent_chat;
mod agents;
mod codebuddy;
mod engines_admin;
mod iflow;
mod retries;
mod stand_in;
