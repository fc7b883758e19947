-- The PostgreSQL schema: the same tables and columns as the SQLite migrations (see
-- ../sqlite/ for what each column means), in one step. Timestamps are RFC 3339 UTC text of a
-- fixed width, as in SQLite, so both backends compare and return them alike; request payloads
-- are `json` (kept as sent, key order included); `seq` gives the FIFO order SQLite's rowid gives.

CREATE TABLE install_requests (
    request_id TEXT PRIMARY KEY NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    phase      TEXT NOT NULL DEFAULT 'received'
        CHECK (phase IN ('received', 'validating', 'swapping', 'done')),
    skill_id   TEXT,
    version    TEXT,
    action     TEXT CHECK (action IN ('install', 'update')),
    error      TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE INDEX install_requests_unfinished ON install_requests (status)
    WHERE status IN ('queued', 'running');

CREATE TABLE runs (
    seq                    BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    run_id                 TEXT PRIMARY KEY NOT NULL,
    request_id             TEXT NOT NULL,
    skill_id               TEXT NOT NULL,
    engine                 TEXT NOT NULL,
    skill_dir              TEXT NOT NULL,
    status                 TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'waiting_user', 'succeeded', 'failed', 'canceled')),
    error_code             TEXT,
    error_message          TEXT,
    warnings               TEXT NOT NULL DEFAULT '[]',
    result                 TEXT,
    cache_key              TEXT,
    pgid                   BIGINT,
    pg_boot_id             TEXT,
    pg_start_ticks         BIGINT,
    recovery_state         TEXT NOT NULL DEFAULT 'none'
        CHECK (recovery_state IN ('none', 'recovered_waiting', 'failed_reconciled')),
    recovered_at           TEXT,
    recovery_reason        TEXT,
    turn                   BIGINT NOT NULL DEFAULT 0,
    interaction_count      BIGINT NOT NULL DEFAULT 0,
    pending_interaction_id BIGINT,
    wait_deadline          TEXT,
    auto_decision_count    BIGINT NOT NULL DEFAULT 0,
    last_auto_decision_at  TEXT,
    engine_session         TEXT,
    sandbox                TEXT CHECK (sandbox IN ('landlock', 'unavailable', 'off')),
    created_at             TEXT NOT NULL,
    updated_at             TEXT NOT NULL,
    started_at             TEXT,
    finished_at            TEXT
);

CREATE INDEX runs_active ON runs (status) WHERE status IN ('queued', 'running', 'waiting_user');
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE requests (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    request_id      TEXT PRIMARY KEY NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('job', 'temp')),
    skill_id        TEXT,
    engine          TEXT NOT NULL,
    model           TEXT,
    engine_options  JSON NOT NULL DEFAULT '{}',
    input           JSON NOT NULL DEFAULT '{}',
    parameter       JSON NOT NULL DEFAULT '{}',
    runtime_options JSON NOT NULL DEFAULT '{}',
    upload_state    TEXT NOT NULL CHECK (upload_state IN ('none', 'awaiting', 'receiving', 'done')),
    run_id          TEXT REFERENCES runs (run_id) ON DELETE SET NULL,
    cache_hit       BOOLEAN NOT NULL DEFAULT FALSE,
    error           TEXT,
    error_code      TEXT,
    temp_dir        TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

CREATE INDEX requests_run ON requests (run_id);
CREATE INDEX requests_recent ON requests (created_at DESC, seq DESC) WHERE run_id IS NOT NULL;

CREATE TABLE cache_entries (
    cache_key  TEXT PRIMARY KEY NOT NULL,
    run_id     TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    created_at TEXT NOT NULL
);

CREATE INDEX cache_entries_run ON cache_entries (run_id);

CREATE TABLE interactions (
    run_id          TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,
    interaction_id  BIGINT NOT NULL,
    turn            BIGINT NOT NULL,
    question        JSON NOT NULL,
    asked_at        TEXT NOT NULL,
    response        JSON,
    resolution_mode TEXT CHECK (resolution_mode IN ('user_reply', 'auto_decide_timeout')),
    idempotency_key TEXT,
    replied_at      TEXT,
    stdout_offset   BIGINT,
    PRIMARY KEY (run_id, seq)
);

CREATE UNIQUE INDEX interactions_idempotency_key
    ON interactions (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE engine_upgrades (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    request_id       TEXT PRIMARY KEY NOT NULL,
    mode             TEXT NOT NULL CHECK (mode IN ('single', 'all')),
    requested_engine TEXT,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    results          JSON NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);

-- At most one upgrade under way: every row of this partial index has the same key.
CREATE UNIQUE INDEX engine_upgrades_one_active ON engine_upgrades ((status IN ('queued', 'running')))
    WHERE status IN ('queued', 'running');

CREATE TABLE model_snapshots (
    engine      TEXT NOT NULL,
    cli_version TEXT NOT NULL,
    models      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (engine, cli_version)
);
