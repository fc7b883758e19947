//! A run's priority: 1 (first) to 4, 2 unless the request says otherwise.
//!
//! Among a tenant's runs ready to start, the one of the highest priority goes first (the
//! oldest among equals); the fair share between tenants comes before it. So that a stream of
//! urgent runs cannot hold a low one back for ever, waiting raises a run's priority one step
//! per [`AGE_STEP`] it has been ready: a run of priority 4 competes as a 1 after three minutes,
//! and then only older runs go before it.

use std::time::Duration;

/// The priority of a run whose request names none.
pub const DEFAULT: u8 = 2;
/// The highest priority (first).
pub const HIGHEST: u8 = 1;
/// The lowest priority.
pub const LOWEST: u8 = 4;
/// Waiting this long raises a ready run's priority by one.
pub const AGE_STEP: Duration = Duration::from_secs(60);

/// The priority a run of `priority` competes with after being ready for `waited`.
pub fn effective(priority: u8, waited: Duration) -> u8 {
    let steps = (waited.as_secs() / AGE_STEP.as_secs()).min(u64::from(LOWEST)) as u8;
    priority.saturating_sub(steps).max(HIGHEST)
}

/// Checks a requested priority; the error says the range.
pub fn check(priority: u64) -> Result<u8, String> {
    u8::try_from(priority)
        .ok()
        .filter(|p| (HIGHEST..=LOWEST).contains(p))
        .ok_or_else(|| {
            format!(
                "priority must be an integer from {HIGHEST} (first) to {LOWEST}, got {priority}"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_raises_a_priority_one_step_a_minute_up_to_the_highest() {
        assert_eq!(effective(4, Duration::from_secs(59)), 4);
        assert_eq!(effective(4, Duration::from_secs(60)), 3);
        assert_eq!(effective(4, Duration::from_secs(185)), 1);
        assert_eq!(effective(2, Duration::from_secs(3600)), 1);
        assert_eq!(check(1), Ok(1));
        assert!(check(0).unwrap_err().contains("from 1 (first) to 4"));
        assert!(check(5).is_err());
    }
}
