//! A run's timeline on its page: the wait in the queue, each turn, each repair round of an
//! answer that broke the output contract, each wait for a reply, each pause before an attempt
//! tried again after a failure that may pass, and the end, with when each began (after the
//! run's creation) and how long it took.
//!
//! It is made from what the store keeps of a run: its creation, its first start, the moments
//! each question was asked and answered, and its end. The store does not keep when a resumed
//! turn left the queue, so a turn after a reply is counted from the reply, and one after a
//! retry from the time it was due.

use super::Lang;
use crate::clock::Timestamp;
use crate::store::{Interaction, RepairRound, Resolution, RetriedAttempt, Run};

/// What a step of the timeline was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a slot (before the first turn, or a resumed one not yet begun).
    Queued,
    /// Turn `n` (1 for the first).
    Turn(u32),
    /// A repair round of a turn: its number and the most the turn may take.
    Repair(u32, u32),
    /// Waiting for the answer to a question; `None` while none came.
    Waiting(Option<Resolution>),
    /// Attempt `n` failed in a way that may pass: the pause before the next.
    Retry(u32),
    /// The run ended in this state.
    Ended(&'static str),
}

/// One step: its phase, when it began, how long it lasted (`ongoing`: so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub phase: Phase,
    pub at: Timestamp,
    /// From the run's creation to this step, in milliseconds.
    pub offset_ms: u64,
    /// `None` for the end, which has no length.
    pub duration_ms: Option<u64>,
    pub ongoing: bool,
}

impl Step {
    /// The step's name in the page's language.
    pub fn label(&self, l: Lang) -> String {
        match self.phase {
            Phase::Queued => l.tr("timeline.queued").to_owned(),
            Phase::Turn(n) => l.tr("timeline.turn").replace("{n}", &n.to_string()),
            Phase::Repair(n, of) => l
                .tr("timeline.repair")
                .replace("{n}", &n.to_string())
                .replace("{of}", &of.to_string()),
            Phase::Waiting(None) => l.tr("timeline.waiting").to_owned(),
            Phase::Waiting(Some(Resolution::UserReply)) => {
                format!(
                    "{} ({})",
                    l.tr("timeline.waiting"),
                    l.tr("timeline.answered")
                )
            }
            Phase::Waiting(Some(Resolution::AutoDecideTimeout)) => {
                format!("{} ({})", l.tr("timeline.waiting"), l.tr("timeline.auto"))
            }
            Phase::Retry(n) => l.tr("timeline.retry").replace("{n}", &n.to_string()),
            Phase::Ended(status) => l.tr(status).to_owned(),
        }
    }

    /// `queued`, `turn`, `repair`, `waiting`, `retry` or `ended`, for styling and tests.
    pub fn kind(&self) -> &'static str {
        match self.phase {
            Phase::Queued => "queued",
            Phase::Turn(_) => "turn",
            Phase::Repair(..) => "repair",
            Phase::Waiting(_) => "waiting",
            Phase::Retry(_) => "retry",
            Phase::Ended(_) => "ended",
        }
    }
}

/// The steps of `run`, whose questions are `interactions` (in the order asked), whose
/// answers took `repairs` and whose failed attempts were `retried`, as of `now`.
pub fn of(
    run: &Run,
    interactions: &[Interaction],
    repairs: &[RepairRound],
    retried: &[RetriedAttempt],
    now: Timestamp,
) -> Vec<Step> {
    let end = run.finished_at;
    let millis = |from: Timestamp, to: Timestamp| {
        u64::try_from(to.duration_since(from).as_millis()).unwrap_or(u64::MAX)
    };
    let mut steps = Vec::new();
    let mut push = |phase, at: Timestamp, until: Option<Timestamp>| {
        steps.push(Step {
            phase,
            at,
            offset_ms: millis(run.created_at, at),
            duration_ms: Some(millis(at, until.or(end).unwrap_or(now))),
            ongoing: until.or(end).is_none(),
        });
    };
    // A turn, then each of its repair rounds, until `until`.
    let turn_steps = |push: &mut dyn FnMut(Phase, Timestamp, Option<Timestamp>),
                      turn: u32,
                      from: Timestamp,
                      until: Option<Timestamp>| {
        let (mut phase, mut at) = (Phase::Turn(turn), from);
        for round in repairs.iter().filter(|r| r.turn == turn) {
            push(phase, at, Some(round.started_at));
            (phase, at) = (Phase::Repair(round.round, round.rounds), round.started_at);
        }
        push(phase, at, until);
    };
    push(Phase::Queued, run.created_at, run.started_at);
    if let Some(first) = run.started_at {
        // What ends a turn short of the run's end: a question, or a failed attempt tried again.
        let mut pauses: Vec<(Timestamp, Phase, Option<Timestamp>)> = interactions
            .iter()
            .map(|asked| {
                (
                    asked.asked_at,
                    Phase::Waiting(asked.resolution),
                    asked.replied_at,
                )
            })
            .chain(retried.iter().map(|failed| {
                (
                    failed.failed_at,
                    Phase::Retry(failed.attempt),
                    Some(failed.next_attempt_at),
                )
            }))
            .collect();
        pauses.sort_by_key(|(at, _, _)| *at);
        let (mut turn, mut from, mut waiting) = (1, first, false);
        for (at, phase, until) in pauses {
            turn_steps(&mut push, turn, from, Some(at));
            push(phase, at, until);
            match until {
                Some(until) => (turn, from) = (turn + 1, until),
                None => {
                    waiting = true;
                    break;
                }
            }
        }
        if !waiting {
            // A reply sent the run back to the queue; a turn it has not begun is a wait (until
            // the end, for a run canceled there).
            match turn > run.turn {
                true => push(Phase::Queued, from, None),
                false => turn_steps(&mut push, turn, from, None),
            }
        }
    }
    if let Some(end) = end {
        steps.push(Step {
            phase: Phase::Ended(run.status.as_str()),
            at: end,
            offset_ms: millis(run.created_at, end),
            duration_ms: None,
            ongoing: false,
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RunStatus;
    use serde_json::json;
    use skill_runner_types::engine::Engine;

    /// A moment `s` seconds after the run's creation.
    fn at(s: u64) -> Timestamp {
        Timestamp::parse(&format!("2026-11-27T10:00:{s:02}Z")).unwrap()
    }

    fn run(status: RunStatus, turn: u32, started: Option<u64>, finished: Option<u64>) -> Run {
        Run {
            run_id: "r".into(),
            request_id: "q".into(),
            skill_id: "s".into(),
            engine: Engine::Codex,
            skill_dir: "d".into(),
            status,
            error_code: None,
            error_message: None,
            warnings: vec![],
            result: None,
            cache_key: None,
            process: None,
            recovery_state: "none".into(),
            recovered_at: None,
            recovery_reason: None,
            turn,
            interaction_count: 0,
            pending_interaction_id: None,
            wait_deadline: None,
            auto_decision_count: 0,
            last_auto_decision_at: None,
            engine_session: None,
            created_at: at(0),
            updated_at: at(0),
            started_at: started.map(at),
            finished_at: finished.map(at),
            sandbox: None,
            tenant_id: "default".into(),
            priority: 2,
            not_before: None,
            retries: 0,
            schedule_id: None,
        }
    }

    fn asked(seq: u32, asked: u64, replied: Option<(u64, Resolution)>) -> Interaction {
        Interaction {
            seq,
            interaction_id: u64::from(seq),
            turn: seq,
            question: json!({"prompt": "?"}),
            asked_at: at(asked),
            response: replied.map(|_| json!({"text": "yes"})),
            resolution: replied.map(|(_, r)| r),
            idempotency_key: None,
            replied_at: replied.map(|(t, _)| at(t)),
            stdout_offset: None,
        }
    }

    fn shape(steps: &[Step]) -> Vec<(Phase, u64, Option<u64>, bool)> {
        steps
            .iter()
            .map(|s| {
                (
                    s.phase,
                    s.offset_ms / 1000,
                    s.duration_ms.map(|d| d / 1000),
                    s.ongoing,
                )
            })
            .collect()
    }

    #[test]
    fn a_run_with_two_questions_reads_as_turns_and_waits() {
        let steps = of(
            &run(RunStatus::Succeeded, 3, Some(2), Some(40)),
            &[
                asked(1, 10, Some((15, Resolution::UserReply))),
                asked(2, 20, Some((30, Resolution::AutoDecideTimeout))),
            ],
            &[],
            &[],
            at(50),
        );
        assert_eq!(
            shape(&steps),
            [
                (Phase::Queued, 0, Some(2), false),
                (Phase::Turn(1), 2, Some(8), false),
                (
                    Phase::Waiting(Some(Resolution::UserReply)),
                    10,
                    Some(5),
                    false
                ),
                (Phase::Turn(2), 15, Some(5), false),
                (
                    Phase::Waiting(Some(Resolution::AutoDecideTimeout)),
                    20,
                    Some(10),
                    false
                ),
                (Phase::Turn(3), 30, Some(10), false),
                (Phase::Ended("succeeded"), 40, None, false),
            ]
        );
        assert_eq!(steps[2].label(Lang::En), "Waiting for a reply (answered)");
        assert_eq!(steps[5].label(Lang::Zh), "第 3 轮");
    }

    #[test]
    fn repair_rounds_split_their_turn() {
        let round = |round, started| RepairRound {
            turn: 1,
            round,
            rounds: 3,
            stdout_offset: 0,
            problems: vec![],
            started_at: at(started),
        };
        let steps = of(
            &run(RunStatus::Succeeded, 1, Some(2), Some(20)),
            &[],
            &[round(1, 8), round(2, 12)],
            &[],
            at(30),
        );
        assert_eq!(
            shape(&steps),
            [
                (Phase::Queued, 0, Some(2), false),
                (Phase::Turn(1), 2, Some(6), false),
                (Phase::Repair(1, 3), 8, Some(4), false),
                (Phase::Repair(2, 3), 12, Some(8), false),
                (Phase::Ended("succeeded"), 20, None, false),
            ]
        );
        assert_eq!(steps[3].label(Lang::En), "Repair round 2 of 3");
        assert_eq!(steps[3].kind(), "repair");
    }

    #[test]
    fn a_failed_attempt_tried_again_ends_its_turn_with_a_pause() {
        let failed = RetriedAttempt {
            attempt: 1,
            turn: 1,
            error_code: Some("MODEL_ENDPOINT_ERROR".into()),
            error_message: "502".into(),
            failed_at: at(5),
            next_attempt_at: at(7),
        };
        let steps = of(
            &run(RunStatus::Succeeded, 2, Some(1), Some(12)),
            &[],
            &[],
            &[failed],
            at(20),
        );
        assert_eq!(
            shape(&steps),
            [
                (Phase::Queued, 0, Some(1), false),
                (Phase::Turn(1), 1, Some(4), false),
                (Phase::Retry(1), 5, Some(2), false),
                (Phase::Turn(2), 7, Some(5), false),
                (Phase::Ended("succeeded"), 12, None, false),
            ]
        );
    }

    #[test]
    fn what_is_under_way_is_counted_so_far() {
        // Still in the queue.
        let steps = of(&run(RunStatus::Queued, 0, None, None), &[], &[], &[], at(7));
        assert_eq!(shape(&steps), [(Phase::Queued, 0, Some(7), true)]);
        // Waiting for the answer to its first question.
        let waiting = run(RunStatus::WaitingUser, 1, Some(1), None);
        let steps = of(&waiting, &[asked(1, 5, None)], &[], &[], at(9));
        assert_eq!(
            shape(&steps),
            [
                (Phase::Queued, 0, Some(1), false),
                (Phase::Turn(1), 1, Some(4), false),
                (Phase::Waiting(None), 5, Some(4), true),
            ]
        );
        // Answered, back in the queue: the next turn has not begun.
        let replied = [asked(1, 5, Some((6, Resolution::UserReply)))];
        let steps = of(
            &run(RunStatus::Queued, 1, Some(1), None),
            &replied,
            &[],
            &[],
            at(9),
        );
        assert_eq!(steps.last().unwrap().phase, Phase::Queued);
        assert!(steps.last().unwrap().ongoing);
        // Canceled back in the queue after a reply: no second turn began.
        let steps = of(
            &run(RunStatus::Canceled, 1, Some(1), Some(8)),
            &replied,
            &[],
            &[],
            at(9),
        );
        assert_eq!(
            shape(&steps)[3..],
            [
                (Phase::Queued, 6, Some(2), false),
                (Phase::Ended("canceled"), 8, None, false),
            ]
        );
        // Canceled while waiting: the wait ends with the run.
        let steps = of(
            &run(RunStatus::Canceled, 1, Some(1), Some(8)),
            &[asked(1, 5, None)],
            &[],
            &[],
            at(9),
        );
        assert_eq!(
            shape(&steps)[2..],
            [
                (Phase::Waiting(None), 5, Some(3), false),
                (Phase::Ended("canceled"), 8, None, false),
            ]
        );
        // Canceled before it ever started.
        let steps = of(
            &run(RunStatus::Canceled, 0, None, Some(3)),
            &[],
            &[],
            &[],
            at(9),
        );
        assert_eq!(
            shape(&steps),
            [
                (Phase::Queued, 0, Some(3), false),
                (Phase::Ended("canceled"), 3, None, false),
            ]
        );
    }
}
