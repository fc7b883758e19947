//! What a node gives back while nobody calls it: the pages of its own code.
//!
//! Serving a request, running the upkeep timers or starting up touches code the kernel then
//! keeps mapped (in 64 KiB around each page), and most of it is not used again soon: after
//! start-up 22 MiB of an idle node's 29 were the executable's own pages. A node that answered
//! no request for [`QUIET`] drops them (`process::release_startup_code`); the next request
//! maps back what it uses from the page cache, a few hundred minor faults once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long without a request makes a node idle.
pub const QUIET: Duration = Duration::from_secs(10);

/// Requests answered since start (only compared, never shown).
static ANSWERED: AtomicU64 = AtomicU64::new(0);

/// Counts a request answered.
pub fn answered() {
    ANSWERED.fetch_add(1, Ordering::Relaxed);
}

/// Releases the code pages now, after start-up, and again each time the node falls quiet
/// after having served.
pub fn start() {
    release("start-up");
    tokio::spawn(async {
        let mut every = tokio::time::interval(QUIET);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut seen, mut released) = (ANSWERED.load(Ordering::Relaxed), true);
        loop {
            every.tick().await;
            let now = ANSWERED.load(Ordering::Relaxed);
            if now != seen {
                (seen, released) = (now, false);
            } else if !released {
                release("idle");
                released = true;
            }
        }
    });
}

fn release(when: &'static str) {
    match crate::process::release_startup_code() {
        Ok(bytes) => tracing::debug!(bytes, when, "code pages released from memory"),
        Err(e) => tracing::debug!(error = %e, when, "code pages stay in memory"),
    }
}
