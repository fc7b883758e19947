//! Plain values every layer of skill-runner shares; nothing here does I/O.

pub mod clock;
pub mod engine;
pub mod faults;
pub mod priority;
pub mod process_mark;
pub mod rel_path;
pub mod retry;
pub mod run_options;
pub mod run_state;
pub mod secrets;

pub use process_mark::ProcessMark;
pub use rel_path::RelPath;
