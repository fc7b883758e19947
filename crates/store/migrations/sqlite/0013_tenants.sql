-- Tenants: who calls the service. Every request belongs to one; the `default` tenant holds the
-- requests of deployments without keys and of the `SKILL_RUNNER_API_TOKENS` tokens.
CREATE TABLE tenants (
    tenant_id  TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL UNIQUE,
    -- JSON: max_running, max_queued, runs_per_minute, upload_bytes (each absent: the operator's
    -- default).
    quotas     TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

INSERT INTO tenants (tenant_id, name, quotas, created_at, updated_at)
VALUES ('default', 'default', '{}', '1970-01-01T00:00:00.000000Z', '1970-01-01T00:00:00.000000Z');

-- API keys: shown once, kept as the SHA-256 of the whole key; revoked by marking.
CREATE TABLE api_keys (
    key_id       TEXT PRIMARY KEY NOT NULL,
    -- No foreign key: a revoked key outlives its tenant, as a record.
    tenant_id    TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'submit', 'read')),
    name         TEXT NOT NULL,
    -- The visible part (`sr_<prefix>_…`), to tell keys apart in lists and logs.
    prefix       TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    expires_at   TEXT,
    last_used_at TEXT,
    -- The key that made this one (NULL: the CLI, an environment token or an open service).
    created_by   TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    revoked_at   TEXT
);

CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- What was done with administrative power, and by which key.
CREATE TABLE audit (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    at        TEXT NOT NULL,
    key_id    TEXT,
    tenant_id TEXT,
    action    TEXT NOT NULL,
    target    TEXT,
    detail    TEXT NOT NULL DEFAULT '{}'
);

ALTER TABLE requests ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
-- The run's tenant: its request's (a cached result is shared only within a tenant).
ALTER TABLE runs ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
-- The key that created the request (NULL without one).
ALTER TABLE requests ADD COLUMN key_id TEXT;

-- A tenant's run list pages newest first without sorting.
CREATE INDEX requests_listed_by_tenant ON requests (tenant_id, created_at DESC)
    WHERE run_id IS NOT NULL;

-- A tenant's queued runs are counted (its max_queued quota) without reading the others'.
CREATE INDEX runs_queued_by_tenant ON runs (tenant_id) WHERE status = 'queued';

-- Each tenant's requests of the current minute (its runs_per_minute quota): one row, counted
-- up in one statement, so the count holds exactly whichever node admits.
CREATE TABLE tenant_minutes (
    tenant_id TEXT PRIMARY KEY NOT NULL,
    -- The minute counted, `YYYY-MM-DDTHH:MM` (UTC).
    minute    TEXT NOT NULL,
    created   BIGINT NOT NULL
);
