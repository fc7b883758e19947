-- See ../sqlite/0021_schedules.sql.
CREATE TABLE schedules (
    schedule_id      TEXT PRIMARY KEY NOT NULL,
    tenant_id        TEXT NOT NULL,
    job              JSON NOT NULL,
    cron             TEXT NOT NULL,
    timezone         TEXT NOT NULL,
    overlap          TEXT NOT NULL,
    catch_up_seconds BIGINT NOT NULL,
    paused           BOOLEAN NOT NULL DEFAULT FALSE,
    next_tick_at     TEXT,
    last_tick_at     TEXT,
    last_outcome     TEXT,
    last_request_id  TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);

CREATE INDEX schedules_due ON schedules (next_tick_at) WHERE NOT paused;
CREATE INDEX schedules_tenant ON schedules (tenant_id, created_at);
