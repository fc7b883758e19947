//! Schedules: a job made at each tick of a cron expression, in a time zone.
//!
//! A cron expression has five fields (minute to weekday) or six (seconds first), parsed by
//! `croner`, which also places ticks across daylight-saving changes: a fixed time that falls
//! in a skipped hour runs just after it, once; an hour that repeats runs a fixed time once.
//! Each tick's time is the one the previous tick computed (never "now"), so a late pass keeps
//! the cadence.
//!
//! Every node looks for due ticks; a tick is handled once among nodes: the job it makes has a
//! request id derived from the schedule and the tick (a second create of it is refused by the
//! store), and the tick is moved on with a compare-and-set. A tick found later than its
//! schedule's `catch_up_seconds` after its time (every node was down, or busy) is skipped and
//! the next one after now is taken, so an outage makes at most one late run per schedule.
//! While the previous run of the schedule is still queued, running or waiting, `overlap` says
//! what a tick does: `skip` it, `queue` its run anyway, or `cancel_previous` first. A paused
//! schedule has no next tick; resumed, it starts from the next tick after now.

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use skill_runner_types::clock::Timestamp;
use uuid::Uuid;

use super::Jobs;
use super::create::{Arrival, NewJob};
use crate::error::{Error, Result};
use crate::store::{Schedule, Ticked};
use crate::tenants::Caller;

/// What a tick does while the schedule's previous run has not ended.
pub const OVERLAPS: [&str; 3] = ["skip", "queue", "cancel_previous"];
/// A tick may be this late by default and still run.
pub const CATCH_UP: u64 = 60;
/// How many next ticks a schedule shows.
const SHOWN: usize = 5;
/// The longest a node waits before it looks for due ticks again.
const LOOK: Duration = Duration::from_secs(1);

/// When a schedule ticks: its cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct Cadence {
    cron: croner::Cron,
    zone: chrono_tz::Tz,
}

impl Cadence {
    /// Parses `cron` (five fields, or six with seconds first) and the IANA time zone `zone`;
    /// the error names the field.
    pub fn parse(cron: &str, zone: &str) -> std::result::Result<Self, String> {
        let parsed = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(cron)
            .map_err(|e| {
                format!(
                    "cron: '{cron}' is not a cron expression ({e}); five fields (minute hour \
                     day month weekday) or six with seconds first, e.g. \"0 */15 * * * *\""
                )
            })?;
        let zone = chrono_tz::Tz::from_str(zone).map_err(|_| {
            format!("timezone: '{zone}' is not an IANA time zone like \"Europe/Berlin\" or \"UTC\"")
        })?;
        Ok(Self { cron: parsed, zone })
    }

    /// The first tick after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let local = DateTime::<Utc>::from(after).with_timezone(&self.zone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| Timestamp::from(t.with_timezone(&Utc)))
    }

    /// The next `n` ticks after `after`.
    pub fn next_ticks(&self, after: Timestamp, n: usize) -> Vec<Timestamp> {
        std::iter::successors(self.next_after(after), |t| self.next_after(*t))
            .take(n)
            .collect()
    }
}

/// A schedule to make, or the fields a change sets.
#[derive(Debug, Clone, Default)]
pub struct ScheduleInput {
    /// `skill_id`, `engine`, `input`, `parameter`, `runtime_options`, … as `POST /v1/jobs`
    /// takes them.
    pub job: Option<Map<String, Value>>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub overlap: Option<String>,
    pub catch_up_seconds: Option<u64>,
    pub paused: Option<bool>,
}

/// A schedule as shown: its settings and next ticks.
#[derive(Debug, Clone)]
pub struct Shown {
    pub schedule: Schedule,
    pub next_runs: Vec<Timestamp>,
}

/// The job keys a schedule takes.
const JOB_KEYS: [&str; 9] = [
    "skill_id",
    "engine",
    "input",
    "parameter",
    "runtime_options",
    "model",
    "skills",
    "retry",
    "priority",
];

impl Jobs {
    /// Makes a schedule of the caller's tenant.
    pub async fn create_schedule(&self, caller: &Caller, input: ScheduleInput) -> Result<Shown> {
        let now = Timestamp::now();
        let mut schedule = Schedule {
            schedule_id: format!("sch_{}", Uuid::new_v4().simple()),
            tenant_id: caller.tenant_id.to_string(),
            job: Value::Null,
            cron: String::new(),
            timezone: "UTC".into(),
            overlap: "skip".into(),
            catch_up_seconds: CATCH_UP,
            paused: false,
            next_tick_at: None,
            last_tick_at: None,
            last_outcome: None,
            last_request_id: None,
            created_at: now,
            updated_at: now,
        };
        if input.cron.is_none() {
            return Err(Error::invalid("cron is required, e.g. \"0 9 * * 1-5\""));
        }
        if input
            .job
            .as_ref()
            .is_none_or(|j| !j.contains_key("skill_id"))
        {
            return Err(Error::invalid(
                "skill_id is required: the skill each tick runs",
            ));
        }
        self.apply(&mut schedule, input).await?;
        self.store.create_schedule(&schedule).await?;
        self.schedule_ticked();
        Ok(shown(schedule))
    }

    /// The caller's tenant's schedules.
    pub async fn schedules(&self, caller: &Caller) -> Result<Vec<Shown>> {
        let all = self.store.schedules(Some(&caller.tenant_id)).await?;
        Ok(all.into_iter().map(shown).collect())
    }

    /// A schedule of the caller's tenant.
    pub async fn schedule(&self, caller: &Caller, schedule_id: &str) -> Result<Shown> {
        self.own_schedule(caller, schedule_id).await.map(shown)
    }

    /// Changes the fields `input` sets.
    pub async fn update_schedule(
        &self,
        caller: &Caller,
        schedule_id: &str,
        input: ScheduleInput,
    ) -> Result<Shown> {
        let mut schedule = self.own_schedule(caller, schedule_id).await?;
        self.apply(&mut schedule, input).await?;
        schedule.updated_at = Timestamp::now();
        if !self.store.update_schedule(&schedule).await? {
            return Err(not_found(schedule_id));
        }
        self.schedule_ticked();
        Ok(shown(schedule))
    }

    pub async fn delete_schedule(&self, caller: &Caller, schedule_id: &str) -> Result<()> {
        match self
            .store
            .delete_schedule(&caller.tenant_id, schedule_id)
            .await?
        {
            true => Ok(()),
            false => Err(not_found(schedule_id)),
        }
    }

    /// Makes the schedule's job now, outside its cadence; returns its request id.
    pub async fn trigger_schedule(
        self: &Arc<Self>,
        caller: &Caller,
        schedule_id: &str,
    ) -> Result<String> {
        let schedule = self.own_schedule(caller, schedule_id).await?;
        let job = scheduled_job(&schedule, None)?;
        let admitted = self.create_job(job).await?;
        Ok(admitted.request_id)
    }

    async fn own_schedule(&self, caller: &Caller, schedule_id: &str) -> Result<Schedule> {
        self.store
            .schedule(&caller.tenant_id, schedule_id)
            .await?
            .ok_or_else(|| not_found(schedule_id))
    }

    /// Checks and sets the fields `input` gives; the next tick follows the cadence.
    async fn apply(&self, schedule: &mut Schedule, input: ScheduleInput) -> Result<()> {
        if let Some(mut job) = input.job {
            // A changed job keeps the schedule's skill unless it names another.
            if let (false, Some(skill)) =
                (job.contains_key("skill_id"), schedule.job.get("skill_id"))
            {
                job.insert("skill_id".into(), skill.clone());
            }
            if let Some(unknown) = job.keys().find(|k| !JOB_KEYS.contains(&k.as_str())) {
                return Err(Error::invalid(format!(
                    "'{unknown}' is not a field a schedule's job takes; it takes {}",
                    JOB_KEYS.join(", ")
                )));
            }
            let skill_id = job.get("skill_id").and_then(Value::as_str).unwrap_or("");
            if self.installer.skill(skill_id).await.is_none() {
                return Err(Error::not_found(format!("Skill not found: '{skill_id}'")));
            }
            schedule.job = Value::Object(job);
        }
        if let Some(cron) = input.cron {
            schedule.cron = cron;
        }
        if let Some(zone) = input.timezone {
            schedule.timezone = zone;
        }
        if let Some(overlap) = input.overlap {
            if !OVERLAPS.contains(&overlap.as_str()) {
                return Err(Error::invalid(format!(
                    "overlap must be one of {}, got '{overlap}'",
                    OVERLAPS.join(", ")
                )));
            }
            schedule.overlap = overlap;
        }
        if let Some(secs) = input.catch_up_seconds {
            schedule.catch_up_seconds = secs;
        }
        if let Some(paused) = input.paused {
            schedule.paused = paused;
        }
        let cadence = Cadence::parse(&schedule.cron, &schedule.timezone).map_err(Error::invalid)?;
        schedule.next_tick_at = match schedule.paused {
            true => None,
            false => cadence.next_after(Timestamp::now()),
        };
        Ok(())
    }

    /// Wakes the tick loop (a schedule changed).
    fn schedule_ticked(&self) {
        self.ticks.notify_one();
    }

    /// Handles due ticks until shutdown.
    pub(super) async fn schedule_loop(self: Arc<Self>) {
        loop {
            match self.store.due_schedules(Timestamp::now()).await {
                Ok(due) => {
                    for schedule in due {
                        self.tick(schedule).await;
                    }
                }
                Err(e) => tracing::warn!(error = format!("{e:#}"), "reading due schedules"),
            }
            let look = match self.store.next_tick_at().await {
                Ok(Some(at)) => at.duration_since(Timestamp::now()).min(LOOK),
                _ => LOOK,
            };
            tokio::select! {
                () = self.ticks.notified() => {}
                () = tokio::time::sleep(look) => {}
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Handles the schedule's due tick and moves it on.
    async fn tick(self: &Arc<Self>, schedule: Schedule) {
        let Some(tick) = schedule.next_tick_at else {
            return;
        };
        let cadence = match Cadence::parse(&schedule.cron, &schedule.timezone) {
            Ok(cadence) => cadence,
            Err(why) => {
                tracing::error!(schedule_id = schedule.schedule_id, "{why}");
                return;
            }
        };
        let now = Timestamp::now();
        let late = now.duration_since(tick) > Duration::from_secs(schedule.catch_up_seconds);
        let (outcome, request_id, next) = if late {
            // Past its catch-up window: the cadence resumes from now.
            ("skipped_late".to_owned(), None, cadence.next_after(now))
        } else {
            let (outcome, request_id) = self.tick_run(&schedule, tick).await;
            (outcome, request_id, cadence.next_after(tick))
        };
        let ticked = Ticked {
            tick_at: tick,
            outcome,
            request_id,
        };
        if let Err(e) = self
            .store
            .advance_schedule(&schedule.schedule_id, &ticked, next)
            .await
        {
            tracing::warn!(
                schedule_id = schedule.schedule_id,
                error = format!("{e:#}"),
                "moving a schedule's tick on"
            );
        }
    }

    /// The run of tick `tick`, as the overlap rule allows: what it came to and its request.
    async fn tick_run(
        self: &Arc<Self>,
        schedule: &Schedule,
        tick: Timestamp,
    ) -> (String, Option<String>) {
        let request_id = tick_request_id(&schedule.schedule_id, tick);
        match self.store.request(&request_id).await {
            Ok(Some(_)) => return ("run".into(), Some(request_id)),
            Ok(None) => {}
            Err(e) => return (format!("failed: {e:#}"), None),
        }
        if schedule.overlap != "queue" {
            let active = match self
                .store
                .active_runs_of_schedule(&schedule.schedule_id)
                .await
            {
                Ok(active) => active,
                Err(e) => return (format!("failed: {e:#}"), None),
            };
            if !active.is_empty() {
                if schedule.overlap == "skip" {
                    return ("skipped_overlap".into(), None);
                }
                for run in active {
                    if let Err(e) = self.cancel_run(&run).await {
                        tracing::warn!(run_id = run, "canceling a schedule's previous run: {e}");
                    }
                }
            }
        }
        let job = match scheduled_job(schedule, Some(tick)) {
            Ok(job) => job,
            Err(e) => return (format!("failed: {e}"), None),
        };
        match self.create_job(job).await {
            Ok(_) => ("run".into(), Some(request_id)),
            // Another node made it first (the same request id).
            Err(_) if matches!(self.store.request(&request_id).await, Ok(Some(_))) => {
                ("run".into(), Some(request_id))
            }
            Err(e) => (format!("failed: {e}"), None),
        }
    }
}

/// The job of a schedule's tick, or of a trigger (`None`).
fn scheduled_job(schedule: &Schedule, tick: Option<Timestamp>) -> Result<NewJob> {
    let job = &schedule.job;
    let text = |key: &str| job.get(key).and_then(Value::as_str).map(str::to_owned);
    Ok(NewJob {
        skill_id: text("skill_id").unwrap_or_default(),
        engine: text("engine"),
        input: job.get("input").cloned().unwrap_or(json!({})),
        parameter: job.get("parameter").cloned().unwrap_or(json!({})),
        model: text("model"),
        provider_id: None,
        effort: None,
        runtime_options: job.get("runtime_options").cloned(),
        skills: serde_json::from_value(job.get("skills").cloned().unwrap_or(json!([])))
            .map_err(|_| Error::invalid("skills must be a list of skill ids"))?,
        arrival: Arrival {
            retry: job.get("retry").cloned(),
            priority: job.get("priority").cloned(),
            schedule_id: Some(schedule.schedule_id.clone()),
            schedule_tick_at: tick,
            ..Arrival::default()
        },
        request_id: tick.map(|tick| tick_request_id(&schedule.schedule_id, tick)),
        client_address: None,
        // Made on the schedule's behalf, within its tenant.
        caller: Caller {
            tenant_id: schedule.tenant_id.as_str().into(),
            role: crate::store::Role::Submit,
            key_id: None,
        },
    })
}

/// The request id of a schedule's tick: the same on every node (a UUID of version 8 made
/// of the SHA-256 of the schedule and the tick).
fn tick_request_id(schedule_id: &str, tick: Timestamp) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{schedule_id}@{tick}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

fn shown(schedule: Schedule) -> Shown {
    let next_runs = match (&schedule.next_tick_at, schedule.paused) {
        (Some(next), false) => Cadence::parse(&schedule.cron, &schedule.timezone)
            .map(|c| {
                std::iter::once(*next)
                    .chain(c.next_ticks(*next, SHOWN - 1))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    Shown {
        schedule,
        next_runs,
    }
}

fn not_found(schedule_id: &str) -> Error {
    Error::not_found(format!("Schedule not found: '{schedule_id}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn ticks_follow_the_cron_in_its_time_zone_across_daylight_saving() {
        let every_second = Cadence::parse("* * * * * *", "UTC").unwrap();
        assert_eq!(
            every_second.next_ticks(at("2026-03-01T00:00:00Z"), 2),
            [at("2026-03-01T00:00:01Z"), at("2026-03-01T00:00:02Z")]
        );
        // 09:00 in Berlin: 08:00 UTC in winter, 07:00 UTC in summer.
        let nine = Cadence::parse("0 9 * * *", "Europe/Berlin").unwrap();
        assert_eq!(
            nine.next_after(at("2026-03-28T12:00:00Z")),
            Some(at("2026-03-29T07:00:00Z"))
        );
        assert_eq!(
            nine.next_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T08:00:00Z"))
        );
        // 02:30 does not exist in Berlin on 2026-03-29: once, just after the gap (03:00 CEST).
        let half_two = Cadence::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let spring = half_two.next_ticks(at("2026-03-28T12:00:00Z"), 2);
        assert_eq!(spring[0], at("2026-03-29T01:00:00Z"));
        assert_eq!(spring[1], at("2026-03-30T00:30:00Z"));
        // 02:30 happens twice on 2026-10-25: the schedule runs once.
        let autumn = half_two.next_ticks(at("2026-10-24T12:00:00Z"), 2);
        assert_eq!(
            autumn[1].duration_since(autumn[0]),
            Duration::from_secs(24 * 3600 + 3600)
        );
        // New York's hour: 14:00 local is 19:00 UTC in winter, 18:00 in summer.
        let ny = Cadence::parse("0 14 * * *", "America/New_York").unwrap();
        assert_eq!(
            ny.next_after(at("2026-03-07T20:00:00Z")),
            Some(at("2026-03-08T18:00:00Z"))
        );
        for (cron, zone, says) in [
            ("61 * * * *", "UTC", "cron: '61 * * * *' is not a cron"),
            ("* * *", "UTC", "is not a cron"),
            ("* * * * *", "Mars/Olympus", "timezone: 'Mars/Olympus'"),
        ] {
            let e = Cadence::parse(cron, zone).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_tick_has_one_request_id_on_every_node() {
        let tick = at("2026-03-01T00:00:01Z");
        assert_eq!(tick_request_id("s1", tick), tick_request_id("s1", tick));
        assert_ne!(tick_request_id("s1", tick), tick_request_id("s2", tick));
    }
}
