//! What a node gives back while nobody calls it: the pages of its own code.
//!
//! Serving a request, running the upkeep timers or starting up touches code the kernel then
//! keeps mapped (in 64 KiB around each page), and most of it is not used again soon: after
//! start-up 22 MiB of an idle node's 29 were the executable's own pages. A node that answered
//! no request for [`QUIET`] drops them (`process::release_startup_code`); the next request
//! maps back what it uses from the page cache, a few hundred minor faults once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long without a request makes a node idle.
pub const QUIET: Duration = Duration::from_secs(10);

/// How often the node looks whether it fell quiet.
const LOOK: Duration = Duration::from_secs(5);

/// When the last request was answered, in milliseconds after [`epoch`].
static LAST_ANSWERED: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

/// Notes a request answered.
pub fn answered() {
    LAST_ANSWERED.store(now_ms(), Ordering::Relaxed);
}

/// Releases the code pages now, after start-up, and again each time the node falls quiet
/// after having served: [`QUIET`] to [`QUIET`] + [`LOOK`] after its last request.
pub fn start() {
    release("start-up");
    let mut released_at = now_ms();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(LOOK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let last = LAST_ANSWERED.load(Ordering::Relaxed);
            let now = now_ms();
            if last >= released_at && now.saturating_sub(last) >= QUIET.as_millis() as u64 {
                release("idle");
                released_at = now;
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
