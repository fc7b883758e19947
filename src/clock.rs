//! Timestamps as the API shows them: UTC, RFC 3339, microseconds, always with `Z`.

use chrono::{SecondsFormat, Utc};

/// Now, e.g. `2026-02-10T08:30:00.123456Z`.
pub fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Now in the compact form used in folder names, e.g. `20260210T083000Z`.
pub fn now_compact() -> String {
    Utc::now().format("%Y%m%dT%H%M%SZ").to_string()
}

/// `after` from now, in the form of [`now`].
pub fn after(after: std::time::Duration) -> String {
    let after = chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
    Utc::now()
        .checked_add_signed(after)
        .unwrap_or(chrono::DateTime::<Utc>::MAX_UTC)
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// `ago` before now, in the form of [`now`].
pub fn before(ago: std::time::Duration) -> String {
    chrono::Duration::from_std(ago)
        .ok()
        .and_then(|ago| Utc::now().checked_sub_signed(ago))
        .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC)
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// `time` in the form of [`now`].
pub fn format(time: std::time::SystemTime) -> String {
    chrono::DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
