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
        let pause = policy.pause_after(attempt, unit);
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
        self.moved(run_id, retried.engine, RunStatus::Queued);
        self.requeue((&retried).into()).await;
        Ok(())
    }
}
