-- Schedules: a job made at each tick of a cron expression.
CREATE TABLE schedules (
    schedule_id      TEXT PRIMARY KEY NOT NULL,
    tenant_id        TEXT NOT NULL,
    -- The job each tick makes (JSON as `POST /v1/jobs` takes it).
    job              TEXT NOT NULL,
    cron             TEXT NOT NULL,
    timezone         TEXT NOT NULL,
    -- skip, queue or cancel_previous: what a tick does while the previous run still runs.
    overlap          TEXT NOT NULL,
    -- A tick found later than this after its time is skipped (a node down, paused time).
    catch_up_seconds INTEGER NOT NULL,
    paused           INTEGER NOT NULL DEFAULT 0,
    -- The next tick due (UTC); moved on by whichever node handled the one before.
    next_tick_at     TEXT,
    -- What the latest tick came to.
    last_tick_at     TEXT,
    last_outcome     TEXT,
    last_request_id  TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);

CREATE INDEX schedules_due ON schedules (next_tick_at) WHERE paused = 0;
CREATE INDEX schedules_tenant ON schedules (tenant_id, created_at);
