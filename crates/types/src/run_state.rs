//! Where a run stands, and the one table of the moves between its states.
//!
//! Every writer of a run's status (the store's guarded `UPDATE`s, called by the executor, the
//! interaction flow, cancel and both reconcilers) names a [`Move`]; the move says which states
//! the run may be in for the write to apply and which states it may enter. A late or repeated
//! writer (a turn that ends after its run was canceled) finds the run elsewhere and changes
//! nothing.

use serde::{Deserialize, Serialize};

/// The status of a run, stored as its snake_case name.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(
    feature = "sqlx",
    derive(sqlx::Type),
    sqlx(type_name = "TEXT", rename_all = "snake_case")
)]
#[strum(serialize_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    WaitingUser,
    /// The engine is not logged in: the run waits for a login (an imported API key or login
    /// file) and is queued again when one arrives.
    WaitingAuth,
    Succeeded,
    Failed,
    Canceled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        Self::Queued,
        Self::Running,
        Self::WaitingUser,
        Self::WaitingAuth,
        Self::Succeeded,
        Self::Failed,
        Self::Canceled,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }
}

/// A change of a run's status, named by why it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// A queued run's next turn starts.
    Start,
    /// A queued run's turn could not start (the store failed to record it).
    Abort,
    /// The running turn asked its user a question.
    Ask,
    /// A queued run's engine is not logged in: the run waits for a login.
    AwaitAuth,
    /// A reply (the user's, or the automatic one), or the engine's login, queues the next turn.
    Resume,
    /// The running turn ended: its outcome, a timeout, or an internal failure.
    End,
    /// The running turn failed in a way that may pass: the run waits for its next attempt.
    Retry,
    /// Nobody replied (or logged the engine in) in time.
    Expire,
    /// A client canceled the run.
    Cancel,
    /// A run no turn of this process owns: found at start-up or by the periodic reconciler.
    Reconcile,
}

use RunStatus::{Canceled, Failed, Queued, Running, Succeeded, WaitingAuth, WaitingUser};

/// Each move: the states it leaves, the states it may enter.
const TABLE: [(Move, &[RunStatus], &[RunStatus]); 10] = [
    (Move::Start, &[Queued], &[Running]),
    (Move::Abort, &[Queued], &[Failed]),
    (Move::Ask, &[Running], &[WaitingUser]),
    (Move::AwaitAuth, &[Queued], &[WaitingAuth]),
    (Move::Resume, &[WaitingUser, WaitingAuth], &[Queued]),
    (Move::End, &[Running], &[Succeeded, Failed, Canceled]),
    (Move::Retry, &[Running], &[Queued]),
    (Move::Expire, &[WaitingUser, WaitingAuth], &[Failed]),
    (
        Move::Cancel,
        &[Queued, Running, WaitingUser, WaitingAuth],
        &[Canceled],
    ),
    (Move::Reconcile, &[Running, WaitingUser], &[Failed]),
];

impl Move {
    fn row(self) -> (&'static [RunStatus], &'static [RunStatus]) {
        let (_, from, to) = TABLE
            .iter()
            .find(|(m, _, _)| *m == self)
            .expect("every move has a row");
        (from, to)
    }

    /// The states a run may be in for this move to apply.
    pub fn from(self) -> &'static [RunStatus] {
        self.row().0
    }

    /// Whether this move may leave `from` for `to`.
    pub fn allows(self, from: RunStatus, to: RunStatus) -> bool {
        let (sources, targets) = self.row();
        sources.contains(&from) && targets.contains(&to)
    }

    /// `from` as the JSON array a guarded `UPDATE … WHERE status IN (SELECT value FROM
    /// json_each(?))` binds.
    pub fn from_json(self) -> String {
        let names: Vec<&str> = self.from().iter().map(|s| s.as_str()).collect();
        serde_json::to_string(&names).expect("names serialize")
    }

    /// Refuses an ending this move may not record (a programming error, not a client's).
    pub fn check_target(self, to: RunStatus) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.row().1.contains(&to),
            "a {self:?} move cannot end a run '{}'",
            to.as_str()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are derived twice (serde for JSON, strum for `as_str`): they must agree, here and
    /// for the other named enums of this crate (the store's and the invoke host's check theirs).
    #[test]
    fn names_are_the_same_in_json_and_as_str() {
        let json = |v: serde_json::Value| v.as_str().unwrap().to_owned();
        for s in RunStatus::ALL {
            assert_eq!(json(serde_json::to_value(s).unwrap()), s.as_str());
        }
        for e in crate::engine::Engine::ALL {
            assert_eq!(json(serde_json::to_value(e).unwrap()), e.as_str());
        }
        use crate::run_options::ExecutionMode;
        for m in [ExecutionMode::Auto, ExecutionMode::Interactive] {
            assert_eq!(json(serde_json::to_value(m).unwrap()), m.as_str());
        }
        assert_eq!(RunStatus::WaitingUser.as_str(), "waiting_user");
    }

    #[test]
    fn terminal_states_are_never_left() {
        for (m, from, _) in TABLE {
            assert!(from.iter().all(|s| !s.is_terminal()), "{m:?}");
        }
    }

    #[test]
    fn moves_follow_the_table() {
        assert!(Move::Start.allows(Queued, Running));
        assert!(!Move::Start.allows(WaitingUser, Running));
        assert!(Move::Cancel.allows(WaitingUser, Canceled));
        assert!(!Move::Cancel.allows(Succeeded, Canceled));
        assert!(!Move::Resume.allows(Running, Queued));
        assert!(Move::Resume.allows(WaitingAuth, Queued));
        assert!(!Move::AwaitAuth.allows(Running, WaitingAuth));
        assert!(!Move::Abort.allows(Queued, Succeeded));
        assert!(Move::End.check_target(Succeeded).is_ok());
        assert!(Move::Expire.check_target(Succeeded).is_err());
        assert_eq!(
            Move::Cancel.from_json(),
            r#"["queued","running","waiting_user","waiting_auth"]"#
        );
        // Every state but a terminal one can be left, and every state can be reached.
        for s in RunStatus::ALL {
            let leaves = TABLE.iter().any(|(_, f, _)| f.contains(&s));
            let enters = TABLE.iter().any(|(_, _, t)| t.contains(&s)) || s == Queued;
            assert_eq!(leaves, !s.is_terminal(), "{s:?}");
            assert!(enters, "{s:?}");
        }
    }
}
