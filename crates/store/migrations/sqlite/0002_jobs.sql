-- Runs: one execution of a skill; the unit the queue schedules and the folder under data/runs/.
-- FIFO order is the implicit rowid.
CREATE TABLE runs (
    run_id          TEXT PRIMARY KEY NOT NULL,
    -- The request that created the run; later requests may share it through the cache.
    request_id      TEXT NOT NULL,
    skill_id        TEXT NOT NULL,
    engine          TEXT NOT NULL,
    -- Folder of the skill this run executes (installed or temporary).
    skill_dir       TEXT NOT NULL,
    status          TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'waiting_user', 'succeeded', 'failed', 'canceled')),
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
    finished_at     TEXT
);

CREATE INDEX runs_active ON runs (status) WHERE status IN ('queued', 'running', 'waiting_user');
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- Requests: the client's handle. A request is bound to a run when its inputs are complete
-- (at create, or at upload when the skill takes files), or to an earlier run on a cache hit.
CREATE TABLE requests (
    request_id      TEXT PRIMARY KEY NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('job', 'temp')),
    -- NULL for a temporary run until its package arrives.
    skill_id        TEXT,
    engine          TEXT NOT NULL,
    model           TEXT,
    engine_options  TEXT NOT NULL DEFAULT '{}',
    input           TEXT NOT NULL DEFAULT '{}',
    parameter       TEXT NOT NULL DEFAULT '{}',
    runtime_options TEXT NOT NULL DEFAULT '{}',
    -- none: needs no upload; awaiting: waits for one; receiving: one is being processed;
    -- done: the upload created (or hit) a run.
    upload_state    TEXT NOT NULL CHECK (upload_state IN ('none', 'awaiting', 'receiving', 'done')),
    run_id          TEXT REFERENCES runs (run_id) ON DELETE SET NULL,
    cache_hit       INTEGER NOT NULL DEFAULT 0,
    -- A failure before any run existed (a temporary package that did not validate).
    error           TEXT,
    -- Folder holding a temporary skill package and its extraction.
    temp_dir        TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

CREATE INDEX requests_run ON requests (run_id);

CREATE TABLE cache_entries (
    cache_key  TEXT PRIMARY KEY NOT NULL,
    run_id     TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    created_at TEXT NOT NULL
);

CREATE INDEX cache_entries_run ON cache_entries (run_id);
