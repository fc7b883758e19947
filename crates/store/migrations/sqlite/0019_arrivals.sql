-- When, and in what order, a run may start; the retries it made; the schedule that made it.
-- 1 (first) to 4; among a tenant's ready runs the higher goes first (age raises it).
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4);
-- The run starts no earlier: its request's `run_after`, then the time of its next attempt.
ALTER TABLE runs ADD COLUMN not_before TEXT;
-- Attempts that failed and were tried again.
ALTER TABLE runs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN schedule_id TEXT;

CREATE INDEX runs_schedule ON runs (schedule_id, created_at) WHERE schedule_id IS NOT NULL;

-- `Idempotency-Key` of `POST /v1/jobs`: the first request's answer, for a day.
CREATE TABLE idempotent_creates (
    tenant_id  TEXT NOT NULL,
    key        TEXT NOT NULL,
    -- SHA-256 of the body the key first came with: another body is refused.
    body_hash  TEXT NOT NULL,
    -- The answer given (JSON); NULL while the first request is being handled.
    answer     TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, key)
);

CREATE INDEX idempotent_creates_age ON idempotent_creates (created_at);

-- Each attempt of a run that failed and was tried again.
CREATE TABLE run_retries (
    run_id          TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- The attempt that failed: 1, 2, ...
    attempt         INTEGER NOT NULL,
    -- The run's turn counter when it failed.
    turn            INTEGER NOT NULL,
    error_code      TEXT,
    error_message   TEXT NOT NULL,
    failed_at       TEXT NOT NULL,
    next_attempt_at TEXT NOT NULL,
    PRIMARY KEY (run_id, attempt)
);
