//! A request's retry policy (`retry` on `POST /v1/jobs`, or `runtime_options.retry`), and the
//! pause before each next attempt.
//!
//! Only failures that may pass on a later try are retried (the executor decides which); this
//! module only says how many attempts a run gets and how long it waits in between: the pause
//! doubles from `initial_delay_seconds` up to `max_delay_seconds`, and with `jitter` (the
//! default) each pause is drawn from its upper half, so pauses still grow from one attempt to
//! the next while runs that failed together do not all come back together.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most attempts a run may be given.
pub const MAX_ATTEMPTS: u32 = 20;
/// The longest pause between attempts a request may ask for.
pub const MAX_DELAY: u64 = 24 * 60 * 60;

/// How often, and after what pauses, a run that failed in a way that may pass is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (1: no retry).
    pub max_attempts: u32,
    pub initial_delay_seconds: u64,
    pub max_delay_seconds: u64,
    /// Pauses are drawn from the upper half of their doubling (true), or exact.
    pub jitter: bool,
    /// A turn that overran its hard timeout is retried too.
    pub timeouts: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            initial_delay_seconds: 2,
            max_delay_seconds: 300,
            jitter: true,
            timeouts: false,
        }
    }
}

const KEYS: [&str; 5] = [
    "max_attempts",
    "initial_delay_seconds",
    "max_delay_seconds",
    "jitter",
    "timeouts",
];

impl RetryPolicy {
    /// Reads `retry` of a request (`at` names where it came from in errors).
    pub fn read(raw: &Value, at: &str) -> Result<Self, String> {
        let Value::Object(map) = raw else {
            return Err(format!(
                "{at} must be an object like {{\"max_attempts\": 3, \"initial_delay_seconds\": 2, \
                 \"max_delay_seconds\": 300}}, got {raw}"
            ));
        };
        if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "Unknown key {at}.{unknown}; allowed: {}",
                KEYS.join(", ")
            ));
        }
        let default = Self::default();
        let number = |key: &str, min: u64, max: u64, default: u64| -> Result<u64, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| {
                        format!("{at}.{key} must be an integer from {min} to {max}, got {v}")
                    }),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool, String> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(Value::Bool(b)) => Ok(*b),
                Some(v) => Err(format!("{at}.{key} must be true or false, got {v}")),
            }
        };
        let max_attempts = number(
            "max_attempts",
            1,
            u64::from(MAX_ATTEMPTS),
            u64::from(default.max_attempts),
        )?;
        let initial = number(
            "initial_delay_seconds",
            0,
            MAX_DELAY,
            default.initial_delay_seconds,
        )?;
        let max = number(
            "max_delay_seconds",
            0,
            MAX_DELAY,
            default.max_delay_seconds.max(initial),
        )?;
        if max < initial {
            return Err(format!(
                "{at}.max_delay_seconds ({max}) is less than initial_delay_seconds ({initial})"
            ));
        }
        Ok(Self {
            max_attempts: max_attempts as u32,
            initial_delay_seconds: initial,
            max_delay_seconds: max,
            jitter: flag("jitter", default.jitter)?,
            timeouts: flag("timeouts", default.timeouts)?,
        })
    }

    /// The policy as a request shows it.
    pub fn to_value(self) -> Value {
        let mut map = Map::new();
        map.insert("max_attempts".into(), self.max_attempts.into());
        map.insert(
            "initial_delay_seconds".into(),
            self.initial_delay_seconds.into(),
        );
        map.insert("max_delay_seconds".into(), self.max_delay_seconds.into());
        map.insert("jitter".into(), self.jitter.into());
        map.insert("timeouts".into(), self.timeouts.into());
        Value::Object(map)
    }

    /// The pause after failed attempt `attempt` (1 for the first), given `unit`, a number
    /// drawn uniformly from [0, 1) (the caller's randomness: this crate does no I/O).
    pub fn pause_after(&self, attempt: u32, unit: f64) -> Duration {
        let doubling = 2f64.powi(attempt.saturating_sub(1).min(62) as i32);
        let full =
            (self.initial_delay_seconds as f64 * doubling).min(self.max_delay_seconds as f64);
        let secs = match self.jitter {
            true => full / 2.0 + full / 2.0 * unit.clamp(0.0, 1.0),
            false => full,
        };
        Duration::from_secs_f64(secs)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_defaults_and_names_the_bad_key() {
        let p = RetryPolicy::read(&json!({"max_attempts": 3}), "retry").unwrap();
        assert_eq!(p.max_attempts, 3);
        assert_eq!((p.initial_delay_seconds, p.max_delay_seconds), (2, 300));
        for (raw, says) in [
            (
                json!({"max_attempts": 0}),
                "retry.max_attempts must be an integer from 1",
            ),
            (json!({"max_attempts": 21}), "from 1 to 20"),
            (json!({"tries": 2}), "Unknown key retry.tries"),
            (
                json!({"initial_delay_seconds": 10, "max_delay_seconds": 5}),
                "less than initial_delay_seconds",
            ),
            (
                json!({"jitter": "yes"}),
                "retry.jitter must be true or false",
            ),
            (json!(3), "retry must be an object"),
        ] {
            let e = RetryPolicy::read(&raw, "retry").unwrap_err();
            assert!(e.contains(says), "{raw}: {e}");
        }
        let back = RetryPolicy::read(&p.to_value(), "retry").unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn pauses_double_up_to_the_bound_and_jitter_keeps_them_growing() {
        let p = RetryPolicy::read(
            &json!({"max_attempts": 6, "initial_delay_seconds": 1, "max_delay_seconds": 5,
                    "jitter": false}),
            "retry",
        )
        .unwrap();
        let secs: Vec<u64> = (1..=5).map(|a| p.pause_after(a, 0.7).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 5, 5]);
        let p = RetryPolicy { jitter: true, ..p };
        // The longest pause of one attempt is no longer than the shortest of the next.
        for attempt in 1..3 {
            assert!(p.pause_after(attempt, 0.999) <= p.pause_after(attempt + 1, 0.0));
        }
        assert_eq!(p.pause_after(1, 0.0), Duration::from_millis(500));
    }
}
