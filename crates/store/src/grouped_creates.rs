//! New requests and their runs, written in groups (SQLite).
//!
//! Every write takes the one writer's turn, and a turn costs about the same for one row as for
//! many: the trip to the connection's thread and back, and the commit. Under a burst of creates
//! they waited for each other's turns one by one, and that queue, not the work, made a create's
//! latency. Here creates go to one task instead: it takes the writer's turn for the creates that
//! are waiting, gathers those that arrived while it waited, and writes them all in one
//! transaction. A lone create is a group of one, written as soon as the turn is free.
//!
//! The task, not the caller, does the write: a caller that goes away (its client disconnected)
//! cannot cut a group's transaction short for the others in it. When a group fails (one of its
//! rows is refused, or the disk is full), each of its creates is written again alone, so each
//! gets its own answer and a bad row fails only its own create.

use std::sync::Arc;

use anyhow::anyhow;
use skill_runner_types::clock::Timestamp;
use skill_runner_types::engine::Engine;
use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::RecentRows;
use super::jobs::{Batch, Binding, NewRequest, NewRun, RequestKind, Statement, UploadState};
use super::watch::Watch;

/// Creates in one transaction at most (each binds 25 values; SQLite takes 32,766).
const GROUP_MAX: usize = 64;

/// Where creates are sent to be written.
#[derive(Debug)]
pub(crate) struct GroupedCreates {
    send: mpsc::UnboundedSender<Pending>,
}

/// A create waiting for its group, and where its answer goes.
struct Pending {
    rows: Rows,
    written: oneshot::Sender<anyhow::Result<()>>,
}

/// A request's row, and its run's when its binding makes one: owned, its JSON already text.
struct Rows {
    request_id: String,
    kind: RequestKind,
    skill_id: Option<String>,
    engine: &'static str,
    model: Option<String>,
    engine_options: String,
    input: String,
    parameter: String,
    runtime_options: String,
    client_address: Option<String>,
    tenant_id: String,
    key_id: Option<String>,
    binding: Option<Binding>,
    at: Timestamp,
}

impl GroupedCreates {
    /// Starts the task writing the creates; it ends when this is dropped, after writing
    /// those already sent.
    pub(crate) fn start(pool: SqlitePool, recent: Arc<RecentRows>, watch: Arc<Watch>) -> Self {
        let (send, receive) = mpsc::unbounded_channel();
        tokio::spawn(write_groups(pool, recent, watch, receive));
        Self { send }
    }

    /// Records the request (and its run, if `binding` makes one) with the next group.
    pub(crate) async fn create(
        &self,
        request: &NewRequest,
        binding: Option<&Binding>,
    ) -> anyhow::Result<()> {
        let rows = Rows::new(request, binding)?;
        let (written, answer) = oneshot::channel();
        self.send
            .send(Pending { rows, written })
            .map_err(|_| anyhow!("the store is closed"))?;
        answer
            .await
            .map_err(|_| anyhow!("the store closed before the request was written"))?
    }
}

impl Rows {
    fn new(request: &NewRequest, binding: Option<&Binding>) -> anyhow::Result<Self> {
        Ok(Self {
            request_id: request.request_id.clone(),
            kind: request.kind,
            skill_id: request.skill_id.clone(),
            engine: request.engine.map_or("", Engine::as_str),
            model: request.model.clone(),
            engine_options: request.engine_options.to_string(),
            input: request.input.to_string(),
            parameter: request.parameter.to_string(),
            runtime_options: serde_json::to_string(&request.runtime_options)?,
            client_address: request.client_address.clone(),
            tenant_id: request.tenant_id.clone(),
            key_id: request.key_id.clone(),
            binding: binding.cloned(),
            at: Timestamp::now(),
        })
    }

    /// The fresh run the request is bound to, if any.
    fn run(&self) -> Option<&NewRun> {
        match &self.binding {
            Some(Binding::Run(run)) => Some(run),
            _ => None,
        }
    }

    /// The request's `INSERT` arguments, after those of `query`.
    fn bind_request<'q>(&'q self, query: Statement<'q>) -> Statement<'q> {
        let (run_id, cache_hit, upload_state) = match &self.binding {
            Some(Binding::Run(run)) => (Some(&run.run_id), false, UploadState::None),
            Some(Binding::CacheHit(run_id)) => (Some(run_id), true, UploadState::None),
            None => (None, false, UploadState::Awaiting),
        };
        query
            .bind(&self.request_id)
            .bind(self.kind)
            .bind(&self.skill_id)
            .bind(self.engine)
            .bind(&self.model)
            .bind(&self.engine_options)
            .bind(&self.input)
            .bind(&self.parameter)
            .bind(&self.runtime_options)
            .bind(upload_state)
            .bind(run_id)
            .bind(cache_hit)
            .bind(&self.client_address)
            .bind(&self.tenant_id)
            .bind(&self.key_id)
            .bind(self.at)
            .bind(self.at)
    }
}

async fn write_groups(
    pool: SqlitePool,
    recent: Arc<RecentRows>,
    watch: Arc<Watch>,
    mut receive: mpsc::UnboundedReceiver<Pending>,
) {
    let mut group = Vec::with_capacity(GROUP_MAX);
    while receive.recv_many(&mut group, GROUP_MAX).await > 0 {
        let _writing = recent.writing(&pool).await;
        // Those that came while the turn was taken go with them.
        while group.len() < GROUP_MAX
            && let Ok(pending) = receive.try_recv()
        {
            group.push(pending);
        }
        if let Err(refused) = watch.writable() {
            for pending in group.drain(..) {
                let _ = pending.written.send(Err(refused.clone().into()));
            }
            continue;
        }
        let written = {
            let rows: Vec<&Rows> = group.iter().map(|p| &p.rows).collect();
            write(&pool, &rows).await
        };
        match written {
            Ok(()) => {
                for pending in group.drain(..) {
                    let _ = pending.written.send(Ok(()));
                }
            }
            Err(e) if group.len() == 1 => {
                let _ = group.remove(0).written.send(Err(e));
            }
            Err(_) => {
                for pending in group.drain(..) {
                    let answer = write(&pool, &[&pending.rows]).await;
                    let _ = pending.written.send(answer);
                }
            }
        }
    }
}

/// Writes `rows` in one transaction, sent as one batch: the runs first, then the requests
/// (which refer to them), a statement for each row. One `INSERT` of many rows would need
/// SQLite's statement journal (a copy of every page it changes, to undo the rows before one
/// that fails); an `INSERT` of one row checks its constraints before it writes.
async fn write(pool: &SqlitePool, rows: &[&Rows]) -> anyhow::Result<()> {
    let runs: Vec<(&Rows, &NewRun)> = rows
        .iter()
        .filter_map(|row| Some((*row, row.run()?)))
        .collect();
    let mut sql = String::from("BEGIN IMMEDIATE; ");
    sql.push_str(&concat!(super::jobs::insert_run!(), "; ").repeat(runs.len()));
    sql.push_str(&concat!(super::jobs::insert_request!(), "; ").repeat(rows.len()));
    sql.push_str("COMMIT");
    let mut query: Statement<'_> = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (row, run) in runs {
        query = super::jobs::bind_run(query, &row.request_id, run, row.at);
    }
    for row in rows {
        query = row.bind_request(query);
    }
    let mut batch = Batch::start(pool).await?;
    let written = query.execute(batch.conn()).await;
    batch.end(written)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::checkpoint::Tuning;
    use crate::jobs::tests::{new_request, new_run};
    use crate::{JobStore as _, Sqlite};

    fn run(id: &str) -> Binding {
        Binding::Run(new_run(id))
    }

    /// Sends `ids` (request id, run id) as creates while the writer's turn is taken, then
    /// lets them through together; the answers in the same order.
    async fn together(store: &Arc<Sqlite>, ids: &[(String, String)]) -> Vec<anyhow::Result<()>> {
        let turn = store.recent.writer.lock().await;
        let creates: Vec<_> = ids
            .iter()
            .map(|(q, r)| {
                let (store, q, r) = (store.clone(), q.clone(), r.clone());
                tokio::spawn(
                    async move { store.create_request(&new_request(&q), Some(&run(&r))).await },
                )
            })
            .collect();
        // Every create is sent and waits for the turn.
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(turn);
        let mut answers = Vec::new();
        for create in creates {
            answers.push(create.await.unwrap());
        }
        answers
    }

    /// Creates that wait for the writer's turn together are written in one transaction (the
    /// WAL grows by about one create's pages, not by twenty); one that is refused (its request
    /// id is taken) fails alone, and the others are written with their runs.
    #[tokio::test]
    async fn creates_waiting_together_are_written_together_and_a_refused_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let no_checkpoints = Tuning {
            every: Duration::from_secs(3600),
            catch_up_frames: i64::MAX,
        };
        let store = Arc::new(Sqlite::open_tuned(&path, no_checkpoints).await.unwrap());
        let wal = || std::fs::metadata(path.with_extension("sqlite-wal")).map_or(0, |m| m.len());
        let ids = |from: usize| -> Vec<(String, String)> {
            (from..from + 20)
                .map(|n| (format!("q{n}"), format!("r{n}")))
                .collect()
        };
        // Twenty creates one by one, then twenty together.
        let before = wal();
        for (q, r) in ids(0) {
            store
                .create_request(&new_request(&q), Some(&run(&r)))
                .await
                .unwrap();
        }
        let one_by_one = wal() - before;
        let before = wal();
        for answer in together(&store, &ids(20)).await {
            answer.unwrap();
        }
        let grouped = wal() - before;
        assert!(
            grouped * 4 < one_by_one,
            "one transaction: the WAL grew {grouped} bytes, against {one_by_one} one by one"
        );

        let mut with_a_taken_id = ids(40);
        with_a_taken_id[7].0 = "q3".into();
        let answers = together(&store, &with_a_taken_id).await;
        for (n, ((q, r), answer)) in with_a_taken_id.iter().zip(&answers).enumerate() {
            if n == 7 {
                assert!(
                    answer.is_err(),
                    "the create with a taken request id is refused"
                );
                assert!(
                    store.run(r).await.unwrap().is_none(),
                    "and its run is not kept"
                );
            } else {
                assert!(answer.is_ok(), "create {q}: {answer:?}");
                let kept = store.run(r).await.unwrap().expect("its run");
                assert_eq!(kept.request_id, *q);
            }
        }
        assert_eq!(store.run("r3").await.unwrap().unwrap().request_id, "q3");
    }
}
