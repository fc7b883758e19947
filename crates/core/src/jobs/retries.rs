//! Trying a run again after a failure that may pass (the request's `retry` policy).
//!
//! Only these failures are retried: the model endpoint failed the turn's latest model call
//! (`MODEL_ENDPOINT_ERROR`: a 5xx, a 429 whose wait was too long for the model door to wait
//! out itself, a connection that failed), the node running the turn was lost (`NODE_LOST`),
//! and, when the policy says `timeouts`, the hard timeout (`TIMEOUT`). Input and schema errors,
//! refused egress, resource limits, cancels and refused logins never pass on a later try and
//! are never retried.
//!
//! A turn that may have done work (its model answered before the failure, it overran its
//! timeout, or its node was lost under it) is retried only when the skill says it is safe
//! (`runner.json` `"retry": {"safe": true}`). The next attempt is a further turn of the same
//! run: the run waits `queued` with `next_attempt_at`, keeps its slot in no queue meanwhile, and
//! is never run twice at once (one row, moved by guarded writes).

use skill_runner_types::clock::Timestamp;
use skill_runner_types::retry::RetryPolicy;

use super::Jobs;
use super::executor::codes;
use crate::store::{Ending, RetriedAttempt, Run, RunStatus};

/// What the failed attempt leaves to decide whether it is tried again.
pub(super) struct Failed<'a> {
    pub run: &'a Run,
    pub policy: Option<&'a RetryPolicy>,
    /// The skill's runs may run again after a turn that did work.
    pub skill_safe: bool,
    /// Model calls the endpoint answered during the attempt.
    pub answered: u32,
    /// The wait the endpoint asked for with its last failure (`Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

impl Failed<'_> {
    /// The attempt to record and the time of the next one, when `ending` is tried again.
    pub(super) fn retry(&self, ending: &Ending) -> Option<RetriedAttempt> {
        let policy = self.policy?;
        let attempt = self.run.retries + 1;
        if ending.status != RunStatus::Failed || attempt >= policy.max_attempts {
            return None;
        }
        let did_work = match ending.error_code.as_deref()? {
            codes::MODEL_ENDPOINT_ERROR => self.answered > 0,
            codes::NODE_LOST => true,
            codes::TIMEOUT if policy.timeouts => true,
            _ => return None,
        };
        if did_work && !self.skill_safe {
            return None;
        }
        let unit = f64::from(random_u32()) / f64::from(u32::MAX);
        // Never sooner than the endpoint asked.
        let pause = policy
            .pause_after(attempt, unit)
            .max(self.retry_after.unwrap_or_default());
        Some(RetriedAttempt {
            attempt,
            turn: self.run.turn,
            error_code: ending.error_code.clone(),
            error_message: ending.error_message.clone().unwrap_or_default(),
            failed_at: Timestamp::now(),
            next_attempt_at: Timestamp::after(pause),
        })
    }
}

fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    // Jitter only spreads attempts apart: without randomness it is simply none.
    let _ = getrandom::fill(&mut bytes);
    u32::from_le_bytes(bytes)
}

impl Jobs {
    /// Puts the run back in the queue for its next attempt. A run no longer running (a cancel
    /// won) is left as it is; an error leaves the caller to end the run instead.
    pub(super) async fn retry(&self, run_id: &str, failed: &RetriedAttempt) -> anyhow::Result<()> {
        let Some(retried) = self.store.retry_run(run_id, failed).await? else {
            return Ok(());
        };
        tracing::info!(
            run_id,
            attempt = failed.attempt,
            code = failed.error_code.as_deref().unwrap_or(""),
            next_attempt_at = %failed.next_attempt_at,
            "the attempt failed in a way that may pass: trying again"
        );
        metrics::counter!(super::telemetry::RETRIES, "engine" => retried.engine.as_str())
            .increment(1);
        self.moved_to(
            &retried.request_id,
            run_id,
            retried.engine,
            RunStatus::Queued,
        );
        self.requeue((&retried).into()).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::RunStatus;
    use skill_runner_types::engine::Engine;

    fn run(retries: u32) -> Run {
        let now = Timestamp::now();
        Run {
            run_id: "r".into(),
            request_id: "q".into(),
            skill_id: "s".into(),
            engine: Engine::Codex,
            skill_dir: "d".into(),
            status: RunStatus::Running,
            error_code: None,
            error_message: None,
            warnings: vec![],
            result: None,
            cache_key: None,
            process: None,
            recovery_state: "none".into(),
            recovered_at: None,
            recovery_reason: None,
            turn: retries + 1,
            interaction_count: 0,
            pending_interaction_id: None,
            wait_deadline: None,
            auto_decision_count: 0,
            last_auto_decision_at: None,
            engine_session: None,
            created_at: now,
            updated_at: now,
            started_at: Some(now),
            finished_at: None,
            sandbox: None,
            tenant_id: "default".into(),
            priority: 2,
            not_before: None,
            retries,
            schedule_id: None,
        }
    }

    fn failed(code: &str) -> Ending {
        Ending {
            status: RunStatus::Failed,
            error_code: Some(code.into()),
            error_message: Some("it failed".into()),
            warnings: vec![],
            result: None,
        }
    }

    #[test]
    fn only_failures_that_may_pass_are_tried_again_and_work_done_needs_a_safe_skill() {
        let policy = RetryPolicy {
            max_attempts: 3,
            initial_delay_seconds: 1,
            max_delay_seconds: 10,
            jitter: false,
            timeouts: false,
        };
        let first = run(0);
        let attempt = |run: &Run, answered: u32, safe: bool, code: &str| {
            Failed {
                run,
                policy: Some(&policy),
                skill_safe: safe,
                answered,
                retry_after: None,
            }
            .retry(&failed(code))
        };
        let tried = attempt(&first, 0, false, "MODEL_ENDPOINT_ERROR").unwrap();
        assert_eq!(tried.attempt, 1);
        for code in [
            "TIMEOUT",
            "EGRESS_NOT_PERMITTED",
            "RESOURCE_MEMORY",
            "AUTH_REQUIRED",
        ] {
            assert!(attempt(&first, 0, true, code).is_none(), "{code}");
        }
        assert!(
            attempt(&first, 2, false, "MODEL_ENDPOINT_ERROR").is_none(),
            "the model answered before: the turn may have done work"
        );
        assert!(attempt(&first, 2, true, "MODEL_ENDPOINT_ERROR").is_some());
        assert!(attempt(&first, 0, false, "NODE_LOST").is_none());
        assert!(attempt(&first, 0, true, "NODE_LOST").is_some());
        assert!(
            attempt(&run(2), 0, true, "MODEL_ENDPOINT_ERROR").is_none(),
            "the third attempt was the last"
        );
        let canceled = Ending {
            status: RunStatus::Canceled,
            ..failed("MODEL_ENDPOINT_ERROR")
        };
        assert!(
            Failed {
                run: &first,
                policy: Some(&policy),
                skill_safe: true,
                answered: 0,
                retry_after: None,
            }
            .retry(&canceled)
            .is_none()
        );
        // A long Retry-After the door would not wait out: the next attempt waits for it.
        let waited = Failed {
            run: &first,
            policy: Some(&policy),
            skill_safe: false,
            answered: 0,
            retry_after: Some(Duration::from_secs(120)),
        }
        .retry(&failed("MODEL_ENDPOINT_ERROR"))
        .unwrap();
        assert!(
            waited.next_attempt_at.duration_since(waited.failed_at) >= Duration::from_secs(119)
        );
        let timeouts = RetryPolicy {
            timeouts: true,
            ..policy
        };
        assert!(
            Failed {
                run: &first,
                policy: Some(&timeouts),
                skill_safe: true,
                answered: 0,
                retry_after: None,
            }
            .retry(&failed("TIMEOUT"))
            .is_some()
        );
    }
}
