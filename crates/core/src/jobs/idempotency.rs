//! `Idempotency-Key` on `POST /v1/jobs`: a client that sends a create again (a timeout, a
//! retry of its own) gets the first create's answer, the same `request_id`, for a day.
//!
//! The key is the tenant's own. It is held from the first create's start: a second create
//! with it while the first is under way is answered 409 (send it again shortly); the same key
//! with another body is answered 422. A create that fails keeps no answer: the key is free
//! for the next try, which is a create of its own.

use std::time::Duration;

use serde_json::Value;
use sha2::Digest as _;
use skill_runner_types::clock::Timestamp;

use super::Jobs;
use crate::error::{Error, Result};
use crate::store::Remembered;

/// How long a key answers with its first create's answer.
pub const KEPT: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest key taken.
const LONGEST_KEY: usize = 255;

/// What a create with a key is to do.
#[derive(Debug)]
pub enum Idempotent {
    /// Create, then [`Jobs::keep_answer`] (or [`Jobs::forget_key`] when it failed).
    Create,
    /// Answer this, the first create's answer.
    Answered(Value),
}

impl Jobs {
    /// Holds `key` of `tenant_id` for a create of `body`, or says what answers it.
    pub async fn idempotent(&self, tenant_id: &str, key: &str, body: &Value) -> Result<Idempotent> {
        if key.is_empty() || key.len() > LONGEST_KEY || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid(format!(
                "The Idempotency-Key header must be 1 to {LONGEST_KEY} visible ASCII characters \
                 (a UUID is a good key)"
            )));
        }
        let hash = body_hash(body);
        match self
            .store
            .remember(tenant_id, key, &hash, Timestamp::before(KEPT))
            .await?
        {
            Remembered::Fresh => Ok(Idempotent::Create),
            Remembered::Pending => Err(Error::Conflict(Value::from(format!(
                "A create with Idempotency-Key '{key}' is still under way: send it again shortly \
                 for its answer"
            )))),
            Remembered::OtherBody => Err(Error::Unprocessable(Value::from(format!(
                "Idempotency-Key '{key}' was first sent with another body: a key names one \
                 create (use a new key for a new job)"
            )))),
            Remembered::Answered(text) => Ok(Idempotent::Answered(
                serde_json::from_str(&text).map_err(|e| Error::Internal(e.into()))?,
            )),
        }
    }

    /// Keeps the answer of the create holding `key`.
    pub async fn keep_answer(&self, tenant_id: &str, key: &str, answer: &Value) -> Result<()> {
        Ok(self
            .store
            .keep_answer(tenant_id, key, &answer.to_string())
            .await?)
    }

    /// Frees `key` after its create failed.
    pub async fn forget_key(&self, tenant_id: &str, key: &str) {
        if let Err(e) = self.store.forget_key(tenant_id, key).await {
            tracing::warn!(error = format!("{e:#}"), "freeing an idempotency key");
        }
    }
}

/// The body's fingerprint: its JSON as parsed (so spacing does not count).
fn body_hash(body: &Value) -> String {
    sha2::Sha256::digest(body.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
