//! Interactive runs: a turn that asks its user a question parks the run in `waiting_user`
//! (its slot is free for other runs), the reply queues the next turn, and a timer ends the wait
//! after `session_timeout_sec`: with `interactive_require_user_reply = false` the runner
//! answers by itself (the reference's auto-decision payload), otherwise the run fails with
//! `INTERACTION_WAIT_TIMEOUT`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skill_runner_types::engine::Engine;
use skill_runner_types::run_options::RuntimeOptions;
use skill_runner_types::run_state::Move;

use super::executor::codes;
use super::{Jobs, Scope};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::runner::{Envelope, list_artifacts};
use crate::skill::ExecutionMode;
use crate::store::{Answer, AnswerOutcome, Interaction, Request, Resolution, Run, RunStatus};

/// A client's reply to the pending question.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The id of the pending question.
    pub interaction_id: u64,
    pub response: Value,
    /// The same key with the same response is answered like the first call; with a
    /// different response it is refused.
    pub idempotency_key: Option<String>,
}

/// The question a run waits on, if any.
#[derive(Debug, Clone)]
pub struct Pending {
    pub status: RunStatus,
    pub question: Option<Value>,
    /// When the wait times out; `None` unless waiting.
    pub wait_deadline: Option<Timestamp>,
}

/// Delay before a reply timeout that failed is handled again.
const RETRY_EXPIRY: Duration = Duration::from_secs(5);

/// The reply the runner gives in the user's place when the wait times out.
fn auto_decision(question: &Value) -> Value {
    json!({
        "source": "auto_decide_timeout",
        "interaction_id": question["interaction_id"],
        "reason": "user_no_reply",
        "policy": question["default_decision_policy"].as_str().unwrap_or("engine_judgement"),
        "instruction": "User did not respond in time. Continue with your best judgement based on the current context.",
    })
}

/// The question `run` waits on, if it waits.
pub(super) fn pending_question(run: &Run, interactions: &[Interaction]) -> Option<Value> {
    if run.status != RunStatus::WaitingUser {
        return None;
    }
    interactions
        .iter()
        .find(|i| i.seq == run.interaction_count && i.response.is_none())
        .map(|i| i.question.clone())
}

impl Jobs {
    /// The request and run of an interaction route: 404 when unknown, 400 when the request is
    /// not interactive.
    async fn interactive_run(&self, scope: &Scope, request_id: &str) -> Result<(Request, Run)> {
        let (request, run) = self.request_and_run(scope, request_id).await?;
        if request.runtime_options.execution_mode != ExecutionMode::Interactive {
            return Err(Error::invalid(
                "Interaction endpoints require runtime_options.execution_mode=interactive",
            ));
        }
        Ok((request, run))
    }

    /// The question the run waits on; with `wait`, a run still under way is waited for until
    /// it asks (or ends, or waits for a login).
    pub async fn pending(
        &self,
        scope: &Scope,
        request_id: &str,
        wait: std::time::Duration,
    ) -> Result<Pending> {
        let (_, run) = self.interactive_run(scope, request_id).await?;
        let run = self
            .settled(run, wait, |run| {
                run.status.is_terminal()
                    || matches!(run.status, RunStatus::WaitingUser | RunStatus::WaitingAuth)
            })
            .await?;
        let interactions = self.store.interactions(&run.run_id).await?;
        let question = pending_question(&run, &interactions);
        Ok(Pending {
            status: run.status,
            wait_deadline: question.as_ref().and(run.wait_deadline),
            question,
        })
    }

    /// Answers the pending question and queues the next turn (the run is then `queued`).
    pub async fn reply(&self, scope: &Scope, request_id: &str, body: Reply) -> Result<()> {
        let (_, run) = self.interactive_run(scope, request_id).await?;
        // A reply the next turn could not run with is not taken: the run keeps waiting.
        self.has_room()?;
        let key = body.idempotency_key.as_deref();
        if self.replayed(&run, key, &body).await? {
            return Ok(());
        }
        waits_on(&run, body.interaction_id)?;
        let Some(admission) = self.place().await? else {
            // A full queue only matters to a reply that could still be accepted.
            if let Some(fresh) = self.store.run(&run.run_id).await? {
                if self.replayed(&fresh, key, &body).await? {
                    return Ok(());
                }
                waits_on(&fresh, body.interaction_id)?;
                if fresh.interaction_count != run.interaction_count {
                    return Err(Error::conflict(
                        "stale interaction: it was answered meanwhile",
                    ));
                }
            }
            return Err(Error::QueueFull);
        };
        let answer = Answer {
            seq: run.interaction_count,
            response: &body.response,
            idempotency_key: key,
            resolution: Resolution::UserReply,
        };
        match self.store.answer(&run.run_id, answer).await? {
            AnswerOutcome::Accepted => {
                self.moved_to(&run.request_id, &run.run_id, run.engine, RunStatus::Queued);
                self.enqueue(admission, (&run).into()).await;
                Ok(())
            }
            // A concurrent call with the same key won: this one is its retry.
            AnswerOutcome::Stale if self.replayed(&run, key, &body).await? => Ok(()),
            AnswerOutcome::Stale => Err(Error::conflict(
                "stale interaction: it was answered, canceled or timed out meanwhile",
            )),
            AnswerOutcome::KeyTaken => Err(key_conflict()),
        }
    }

    /// Whether `key` already answered this run with the same reply; 409 when it answered
    /// with a different one.
    async fn replayed(&self, run: &Run, key: Option<&str>, body: &Reply) -> Result<bool> {
        let Some(key) = key else { return Ok(false) };
        match self.store.answered_with_key(&run.run_id, key).await? {
            None => Ok(false),
            Some(first)
                if first.interaction_id == body.interaction_id
                    && first.response.as_ref() == Some(&body.response) =>
            {
                Ok(true)
            }
            Some(_) => Err(key_conflict()),
        }
    }

    /// The answered questions of a run, oldest first, as a resumed turn sees them.
    pub(super) async fn history(&self, run_id: &str) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .store
            .interactions(run_id)
            .await?
            .into_iter()
            .filter_map(|i| {
                Some(json!({
                    "interaction_id": i.interaction_id,
                    "question": i.question,
                    "response": i.response?,
                    "resolution_mode": i.resolution?.as_str(),
                    "replied_at": i.replied_at,
                }))
            })
            .collect())
    }

    /// Parks a run whose turn asked `question`, and arms the reply timeout.
    pub(super) async fn wait_for_user(
        self: &Arc<Self>,
        request_id: &str,
        run_id: &str,
        engine: Engine,
        question: Value,
        options: &RuntimeOptions,
    ) {
        let timeout = Duration::from_secs(options.session_timeout_sec);
        let interaction_id = question["interaction_id"].as_u64().unwrap_or_default();
        // The turn is over and the next has not started: the log ends where this turn's
        // output ends, which is where the conversation places the question.
        let stdout_offset = tokio::fs::metadata(self.folder(run_id).stdout_log())
            .await
            .map_or(0, |m| m.len());
        let asked = self
            .store
            .ask_user(
                run_id,
                interaction_id,
                &question,
                stdout_offset,
                Timestamp::after(timeout),
            )
            .await;
        match asked {
            Ok(Some(seq)) => {
                self.moved_to(request_id, run_id, engine, RunStatus::WaitingUser);
                self.arm_wait_timer(run_id, seq, timeout);
                self.share_settled(run_id, true);
            }
            // A cancel ended the run meanwhile.
            Ok(None) => {}
            Err(e) => {
                tracing::error!(run_id, error = format!("{e:#}"), "cannot park the run");
                let ending = Envelope::default().failed(
                    None,
                    "Internal error while waiting for the user".into(),
                    None,
                );
                self.finish(run_id, Move::End, None, ending).await;
            }
        }
    }

    /// Ends the wait on question `seq` of `run_id` after `after`, unless it was answered.
    pub(super) fn arm_wait_timer(self: &Arc<Self>, run_id: &str, seq: u32, after: Duration) {
        let jobs = self.clone();
        let run_id = run_id.to_owned();
        self.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(after) => {
                    if let Err(e) = jobs.wait_expired(&run_id, seq).await {
                        // A run must not wait forever because the store hiccuped: try again.
                        tracing::error!(run_id, error = format!("{e:#}"), "reply timeout failed; retrying");
                        jobs.arm_wait_timer(&run_id, seq, RETRY_EXPIRY);
                    }
                }
                // Waiting runs keep waiting; the next start re-arms their timers.
                () = jobs.shutdown.cancelled() => {}
            }
        });
    }

    async fn wait_expired(&self, run_id: &str, seq: u32) -> anyhow::Result<()> {
        let Some(run) = self.store.run(run_id).await? else {
            return Ok(());
        };
        if run.status != RunStatus::WaitingUser || run.interaction_count != seq {
            return Ok(());
        }
        let Some(request) = self.store.request(&run.request_id).await? else {
            return Ok(());
        };
        let options = &request.runtime_options;
        if options.interactive_require_user_reply {
            let ending = Envelope {
                artifacts: list_artifacts(&self.folder(run_id))
                    .await
                    .unwrap_or_default(),
                ..Envelope::default()
            }
            .failed(
                Some(codes::INTERACTION_WAIT_TIMEOUT),
                format!(
                    "No reply to interaction {} within session_timeout_sec ({} s)",
                    run.pending_interaction_id.unwrap_or_default(),
                    options.session_timeout_sec
                ),
                None,
            );
            self.finish(run_id, Move::Expire, Some(seq), ending).await;
            return Ok(());
        }
        let interactions = self.store.interactions(run_id).await?;
        let Some(question) = pending_question(&run, &interactions) else {
            return Ok(());
        };
        let answer = Answer {
            seq,
            response: &auto_decision(&question),
            idempotency_key: None,
            resolution: Resolution::AutoDecideTimeout,
        };
        if self.store.answer(run_id, answer).await? == AnswerOutcome::Accepted {
            tracing::info!(run_id, seq, "no reply in time: the runner decided");
            self.moved_to(&run.request_id, run_id, run.engine, RunStatus::Queued);
            self.requeue((&run).into()).await;
        }
        Ok(())
    }
}

/// 409 unless `run` waits on question `interaction_id`.
fn waits_on(run: &Run, interaction_id: u64) -> Result<()> {
    if run.status != RunStatus::WaitingUser {
        return Err(Error::conflict(format!(
            "Run is not waiting for user interaction (status: {})",
            run.status.as_str()
        )));
    }
    match run.pending_interaction_id {
        None => Err(Error::conflict("No pending interaction")),
        Some(pending) if pending != interaction_id => Err(Error::conflict(format!(
            "stale interaction: the pending interaction is {pending}, not {interaction_id}"
        ))),
        Some(_) => Ok(()),
    }
}

fn key_conflict() -> Error {
    Error::conflict("idempotency_key already used with a different response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_decision_follows_the_question_policy() {
        let q = json!({"interaction_id": 4, "default_decision_policy": "safe_default"});
        let reply = auto_decision(&q);
        assert_eq!(reply["source"], "auto_decide_timeout");
        assert_eq!(reply["interaction_id"], 4);
        assert_eq!(reply["reason"], "user_no_reply");
        assert_eq!(reply["policy"], "safe_default");
        assert_eq!(
            auto_decision(&json!({"interaction_id": 1}))["policy"],
            "engine_judgement"
        );
    }
}
