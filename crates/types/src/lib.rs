//! Plain values every layer of skill-runner shares; nothing here does I/O.

pub mod clock;
pub mod engine;
pub mod secrets;
