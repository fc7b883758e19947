-- See ../sqlite/0019_arrivals.sql.
ALTER TABLE runs ADD COLUMN priority BIGINT NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4);
ALTER TABLE runs ADD COLUMN not_before TEXT;
ALTER TABLE runs ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN schedule_id TEXT;

CREATE INDEX runs_schedule ON runs (schedule_id, created_at) WHERE schedule_id IS NOT NULL;

CREATE TABLE idempotent_creates (
    tenant_id  TEXT NOT NULL,
    key        TEXT NOT NULL,
    body_hash  TEXT NOT NULL,
    answer     TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

CREATE INDEX idempotent_creates_age ON idempotent_creates (created_at);

CREATE TABLE run_retries (
    run_id          TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    attempt         BIGINT NOT NULL,
    turn            BIGINT NOT NULL,
    error_code      TEXT,
    error_message   TEXT NOT NULL,
    failed_at       TEXT NOT NULL,
    next_attempt_at TEXT NOT NULL,
    PRIMARY KEY (run_id, attempt)
);
