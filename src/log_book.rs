//! The service's latest log records, kept in memory for the operator's log query
//! (`GET /v1/management/system/logs/query`).
//!
//! The service writes its logs to stderr (a container's log, a terminal); this node also keeps
//! the last [`CAPACITY`] records it logged, each with the fields of the spans it was logged in
//! (a turn's `run_id`, a request's `request_id`), so a query finds a run's records by its id.
//! Records logged before the service serves are the `bootstrap` source, the others `system`,
//! as the reference names its two log files. What the log filter leaves out is not kept either.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::clock::Timestamp;

/// Records kept; older ones make room.
pub const CAPACITY: usize = 10_000;
/// The most characters of a record's message (and of each field) kept.
const TEXT_CHARS: usize = 4096;

/// One log record.
#[derive(Debug, Clone)]
pub struct Record {
    /// 1, 2, ... in the order logged.
    pub seq: u64,
    pub ts: Timestamp,
    pub level: tracing::Level,
    pub target: String,
    pub message: String,
    /// The event's fields and those of the spans it was logged in (the event's win).
    pub fields: BTreeMap<String, String>,
    /// Logged before the service served.
    pub bootstrap: bool,
}

impl Record {
    /// The record as one line of text.
    pub fn raw(&self) -> String {
        let mut line = format!(
            "{} {} {}: {}",
            self.ts, self.level, self.target, self.message
        );
        for (key, value) in &self.fields {
            let _ = write!(line, " {key}={value}");
        }
        line
    }
}

/// What a query asks for.
#[derive(Debug, Default)]
pub struct Query {
    pub bootstrap: bool,
    pub level: Option<tracing::Level>,
    /// Matched case-insensitively against the whole line.
    pub text: Option<String>,
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
    /// Field values a record must have (`run_id`, `request_id`).
    pub fields: Vec<(&'static str, String)>,
}

/// The kept records.
#[derive(Debug, Default)]
pub struct LogBook {
    records: Mutex<VecDeque<Record>>,
    next: AtomicU64,
    serving: AtomicBool,
}

static BOOK: LazyLock<LogBook> = LazyLock::new(LogBook::default);

/// This process's log book.
pub fn book() -> &'static LogBook {
    &BOOK
}

impl LogBook {
    /// From now on, records are the `system` source.
    pub fn mark_serving(&self) {
        self.serving.store(true, Ordering::Relaxed);
    }

    fn push(&self, mut record: Record) {
        record.seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        record.bootstrap = !self.serving.load(Ordering::Relaxed);
        let mut records = self.records.lock().expect("log book lock");
        if records.len() == CAPACITY {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// The records matching `query`, oldest first: `limit` of them from the `cursor`-th match,
    /// and how many match in all.
    pub fn query(&self, query: &Query, cursor: usize, limit: usize) -> (Vec<Record>, usize) {
        let records = self.records.lock().expect("log book lock");
        let text = query.text.as_deref().map(str::to_lowercase);
        let matching = records.iter().filter(|r| {
            r.bootstrap == query.bootstrap
                && query.level.is_none_or(|level| r.level == level)
                && query.from.is_none_or(|from| r.ts >= from)
                && query.to.is_none_or(|to| r.ts <= to)
                && query
                    .fields
                    .iter()
                    .all(|(key, value)| r.fields.get(*key) == Some(value))
                && text
                    .as_deref()
                    .is_none_or(|t| r.raw().to_lowercase().contains(t))
        });
        let mut total = 0;
        let mut page = Vec::new();
        for record in matching {
            if total >= cursor && page.len() < limit {
                page.push(record.clone());
            }
            total += 1;
        }
        (page, total)
    }

    /// How many records are kept.
    pub fn count(&self) -> usize {
        self.records.lock().expect("log book lock").len()
    }

    /// Forgets every record; returns how many there were.
    pub fn clear(&self) -> usize {
        let mut records = self.records.lock().expect("log book lock");
        let n = records.len();
        records.clear();
        n
    }
}

/// The layer that writes every record into [`book`].
pub struct BookLayer;

/// The fields a span was created with, kept in its extensions.
struct SpanFields(BTreeMap<String, String>);

impl<S> tracing_subscriber::Layer<S> for BookLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.values));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<SpanFields>() {
            Some(kept) => kept.0.extend(fields.values),
            None => extensions.insert(SpanFields(fields.values)),
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut all = BTreeMap::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(kept) = span.extensions().get::<SpanFields>() {
                    all.extend(kept.0.clone());
                }
            }
        }
        all.extend(fields.values);
        book().push(Record {
            seq: 0,
            ts: Timestamp::now(),
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message: fields.message,
            fields: all,
            bootstrap: false,
        });
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    values: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.keep(field, format!("{value:?}"));
    }
}

impl Fields {
    fn keep(&mut self, field: &Field, mut value: String) {
        if let Some((cut, _)) = value.char_indices().nth(TEXT_CHARS) {
            value.truncate(cut);
        }
        if field.name() == "message" {
            self.message = value;
        } else {
            self.values.insert(field.name().to_owned(), value);
        }
    }
}
