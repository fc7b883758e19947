-- no-transaction
-- `waiting_auth`: a run whose engine is not logged in waits for a login.
--
-- SQLite cannot change a CHECK constraint in place, so `runs` is rebuilt the way SQLite's
-- documentation prescribes (ALTER TABLE, "other kinds of table schema changes"): with foreign
-- keys off, so dropping the old table neither cascades to the rows that refer to it
-- (interactions, cache entries) nor clears the requests' run ids. Hence no transaction from
-- the migrator: the pragma has no effect inside one; this file opens its own.
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE runs_rebuilt (
    run_id          TEXT PRIMARY KEY NOT NULL,
    -- The request that created the run; later requests may share it through the cache.
    request_id      TEXT NOT NULL,
    skill_id        TEXT NOT NULL,
    engine          TEXT NOT NULL,
    -- Folder of the skill this run executes (installed or temporary).
    skill_dir       TEXT NOT NULL,
    status          TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'waiting_user', 'waiting_auth', 'succeeded',
                          'failed', 'canceled')),
    error_code      TEXT,
    error_message   TEXT,
    warnings        TEXT NOT NULL DEFAULT '[]',
    -- The result envelope (JSON) once the run ended; result/result.json mirrors it.
    result          TEXT,
    -- Written to cache_entries when the run succeeds; NULL when the run must not be cached.
    cache_key       TEXT,
    -- Process group of the engine turn under way, to kill it after a crash.
    pgid            INTEGER,
    pg_boot_id      TEXT,
    pg_start_ticks  INTEGER,
    recovery_state  TEXT NOT NULL DEFAULT 'none'
        CHECK (recovery_state IN ('none', 'recovered_waiting', 'failed_reconciled')),
    recovered_at    TEXT,
    recovery_reason TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    started_at      TEXT,
    finished_at     TEXT,
    turn                   INTEGER NOT NULL DEFAULT 0,
    interaction_count      INTEGER NOT NULL DEFAULT 0,
    -- The engine's id of the question waiting for a reply (NULL unless waiting_user).
    pending_interaction_id INTEGER,
    -- When the wait for a reply or a login times out (RFC 3339 UTC; NULL unless waiting).
    wait_deadline          TEXT,
    auto_decision_count    INTEGER NOT NULL DEFAULT 0,
    last_auto_decision_at  TEXT,
    engine_session         TEXT,
    sandbox                TEXT CHECK (sandbox IN ('landlock', 'unavailable', 'off'))
);
-- rowid is the FIFO order: kept.
INSERT INTO runs_rebuilt (rowid, run_id, request_id, skill_id, engine, skill_dir, status,
    error_code, error_message, warnings, result, cache_key, pgid, pg_boot_id, pg_start_ticks,
    recovery_state, recovered_at, recovery_reason, created_at, updated_at, started_at,
    finished_at, turn, interaction_count, pending_interaction_id, wait_deadline,
    auto_decision_count, last_auto_decision_at, engine_session, sandbox)
SELECT rowid, run_id, request_id, skill_id, engine, skill_dir, status,
    error_code, error_message, warnings, result, cache_key, pgid, pg_boot_id, pg_start_ticks,
    recovery_state, recovered_at, recovery_reason, created_at, updated_at, started_at,
    finished_at, turn, interaction_count, pending_interaction_id, wait_deadline,
    auto_decision_count, last_auto_decision_at, engine_session, sandbox
FROM runs;
DROP TABLE runs;
ALTER TABLE runs_rebuilt RENAME TO runs;
CREATE INDEX runs_active ON runs (status)
    WHERE status IN ('queued', 'running', 'waiting_user', 'waiting_auth');
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
COMMIT;
PRAGMA foreign_keys = ON;
