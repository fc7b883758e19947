//! Plain values every layer of skill-runner shares; nothing here does I/O.

pub mod clock;
pub mod engine;
pub mod rel_path;
pub mod secrets;

pub use rel_path::RelPath;
