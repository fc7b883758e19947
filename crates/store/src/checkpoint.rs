//! The SQLite WAL's checkpoints, moved off the writers.
//!
//! By default SQLite checkpoints when a commit leaves 1,000 pages in the WAL, on the committing
//! connection: that write copies the pages into the database file and syncs both files while
//! every other write waits for its turn. Under a flood of creates on a virtual disk that was
//! about fifteen checkpoints a second, and a create's p99 jumped with their syncs (18.9–31.6 ms
//! from one run to the next with the queue filling; 17.8–20.3 ms without them). Here the pool's
//! connections never checkpoint (`wal_autocheckpoint=0`); a connection of the store's own does
//! it a moment after writes, beside them (a passive checkpoint takes no lock a writer needs).
//! Durability does not change: a checkpoint still syncs the WAL before it copies and the
//! database file before the WAL is reused, as before; only who waits for it changes.
//!
//! A passive checkpoint beside busy writers never quite catches up, and SQLite starts the WAL
//! over only when a write begins on a WAL that is wholly copied. So when the WAL has grown past
//! [`Tuning::catch_up_frames`], the checkpointer takes the writers' turn for one more passive
//! checkpoint, of the few pages the first one left: the next write starts the WAL over.

use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::oneshot;

use super::RecentRows;
use super::background::Background;
use super::watch::Watch;

/// When and how the checkpointer works.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    /// How long after a write the checkpointer looks (at most).
    pub every: Duration,
    /// The WAL's length (pages since it started over) past which a checkpoint takes the
    /// writers' turn to let it start over.
    pub catch_up_frames: i64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            every: Duration::from_millis(100),
            // 64 MiB of 4 KiB pages: under a flood of creates a few seconds of writes. Each
            // catch-up holds every write for its two syncs (8-30 ms on a virtual disk), so it
            // should come seldom; with 16 MiB it came about twice a second and set the create
            // p99 (25 against 21.7 ms, random ids).
            catch_up_frames: 16384,
        }
    }
}

/// What a checkpoint found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// Pages in the WAL.
    pub frames: i64,
    /// Of those, pages now in the database file.
    pub copied: i64,
    /// Whether it held the writers' turn for the rest.
    pub caught_up: bool,
}

/// The checkpointer's connection and what it watches.
pub(crate) struct Checkpointer {
    conn: SqliteConnection,
    recent: Arc<RecentRows>,
    /// Told whether each checkpoint could write the database.
    watch: Arc<Watch>,
    tuning: Tuning,
}

impl Checkpointer {
    /// Opens the checkpointer's own connection to the database `options` name.
    pub(crate) async fn connect(
        options: &SqliteConnectOptions,
        recent: Arc<RecentRows>,
        watch: Arc<Watch>,
        tuning: Tuning,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            conn: options.connect().await?,
            recent,
            watch,
            tuning,
        })
    }

    /// One checkpoint beside the writers, and the catch-up under their turn when the WAL has
    /// grown too long.
    pub(crate) async fn step(&mut self) -> anyhow::Result<Checkpoint> {
        let (mut frames, mut copied) = self.passive().await?;
        let caught_up = frames >= self.tuning.catch_up_frames;
        if caught_up {
            let recent = self.recent.clone();
            let _turn = recent.writer.lock().await;
            (frames, copied) = self.passive().await?;
        }
        Ok(Checkpoint {
            frames,
            copied,
            caught_up,
        })
    }

    async fn passive(&mut self) -> anyhow::Result<(i64, i64)> {
        let (_busy, frames, copied): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&mut self.conn)
                .await?;
        Ok((frames, copied))
    }

    /// Checkpoints after writes (and, while the last one failed to write, every tick) until
    /// `stop` fires or its sender is dropped, then closes the connection.
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut every = tokio::time::interval(self.tuning.every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen = self.recent.generation.current();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = every.tick() => {}
            }
            let now = self.recent.generation.current();
            if now == seen && !self.watch.checkpoint_failing() {
                continue;
            }
            seen = now;
            match self.step().await {
                Ok(_) => self.watch.checkpointed(Ok(())),
                // The database cannot be written: writes stop until a checkpoint succeeds.
                Err(e) if e.chain().any(crate::is_unavailable) => {
                    self.watch.checkpointed(Err(format!("{e:#}")));
                }
                // The next write's tick tries again; a WAL left long is slower, not wrong.
                Err(e) => tracing::warn!(error = %e, "checkpoint of the database's WAL failed"),
            }
        }
        let _ = self.conn.close().await;
    }

    /// Runs in the background until the handle is stopped or dropped.
    pub(crate) fn spawn(self) -> Background {
        Background::spawn(|stopped| self.run(stopped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, InstallStore, Sqlite};

    async fn wal_frames(path: &std::path::Path) -> i64 {
        let mut conn = Sqlite::options(path).unwrap().connect().await.unwrap();
        // A passive checkpoint says how long the WAL is (what it copies changes nothing here).
        let (_, frames, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        frames
    }

    async fn write(store: &Sqlite, from: usize, count: usize) {
        for i in from..from + count {
            store
                .insert_install_request(&format!("request-{i:06}"))
                .await
                .unwrap();
        }
    }

    /// Writes leave the WAL to the checkpointer: past SQLite's own 1,000 pages it grows, and
    /// a step that finds it past the catch-up length copies it all under the writers' turn,
    /// so the next write starts it over.
    #[tokio::test]
    async fn writers_never_checkpoint_and_a_long_wal_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let idle = Tuning {
            every: Duration::from_secs(3600),
            catch_up_frames: 1500,
        };
        let store = Sqlite::open_tuned(&path, idle).await.unwrap();
        let mut written = 0;
        while std::fs::metadata(path.with_extension("sqlite-wal"))
            .map(|m| m.len())
            .unwrap_or(0)
            < 1600 * 4096
        {
            write(&store, written, 200).await;
            written += 200;
            assert!(
                written < 10_000,
                "the WAL does not grow: writers checkpoint"
            );
        }
        let mut checkpointer = Checkpointer::connect(
            &Sqlite::options(&path).unwrap(),
            store.recent.clone(),
            store.watch.clone(),
            idle,
        )
        .await
        .unwrap();
        // The catch-up waits for the writers' turn.
        let turn = store.recent.writer.lock().await;
        let waiting = tokio::time::timeout(Duration::from_millis(300), checkpointer.step()).await;
        assert!(waiting.is_err(), "the catch-up did not wait for the turn");
        drop(turn);
        let done = checkpointer.step().await.unwrap();
        assert!(done.caught_up, "{done:?}");
        assert_eq!(done.copied, done.frames, "{done:?}");
        assert!(done.frames >= 1500, "{done:?}");
        write(&store, written, 1).await;
        let frames = wal_frames(&path).await;
        assert!(frames < 50, "the WAL did not start over: {frames} pages");

        // A short WAL is copied beside the writers, without their turn.
        write(&store, written + 1, 20).await;
        let turn = store.recent.writer.lock().await;
        let done = checkpointer.step().await.unwrap();
        drop(turn);
        assert!(!done.caught_up && done.frames > 0, "{done:?}");
        assert_eq!(done.copied, done.frames, "{done:?}");
        store.close().await;
    }

    /// The store's own checkpointer copies what was written into the database file soon after.
    #[tokio::test]
    async fn the_store_checkpoints_soon_after_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let tuning = Tuning {
            every: Duration::from_millis(20),
            ..Tuning::default()
        };
        let store = Sqlite::open_tuned(&path, tuning).await.unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        write(&store, 0, 2000).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(&path).unwrap().len() <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file did not grow: nothing was checkpointed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        store.close().await;
        let store = Sqlite::open(&path).await.unwrap();
        assert!(
            store
                .install_request("request-001999")
                .await
                .unwrap()
                .is_some()
        );
        store.close().await;
    }
}
