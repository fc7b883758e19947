//! What identifies a turn's processes across a crash of the service.

/// Identifies an engine's process group across a crash: the group id plus what tells a reused
/// id apart (the boot and the leader's start time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessMark {
    pub pgid: i32,
    pub boot_id: String,
    pub start_ticks: u64,
}
