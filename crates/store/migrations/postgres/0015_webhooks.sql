-- See ../sqlite/0020_webhooks.sql.
CREATE TABLE webhooks (
    webhook_id      TEXT PRIMARY KEY NOT NULL,
    tenant_id       TEXT NOT NULL,
    url             TEXT NOT NULL,
    events          TEXT NOT NULL,
    secret          TEXT NOT NULL,
    previous_secret TEXT,
    previous_until  TEXT,
    failing_since   TEXT,
    disabled_at     TEXT,
    disabled_reason TEXT,
    created_at      TEXT NOT NULL
);

CREATE INDEX webhooks_tenant ON webhooks (tenant_id);

CREATE TABLE webhook_deliveries (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    delivery_id     TEXT PRIMARY KEY NOT NULL,
    tenant_id       TEXT NOT NULL,
    webhook_id      TEXT REFERENCES webhooks (webhook_id) ON DELETE CASCADE,
    url             TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    event           TEXT NOT NULL,
    payload         TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending',
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    claimed_by      TEXT,
    claimed_until   TEXT,
    created_at      TEXT NOT NULL,
    delivered_at    TEXT
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_run ON webhook_deliveries (run_id, seq);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, seq);

CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (delivery_id) ON DELETE CASCADE,
    attempt     BIGINT NOT NULL,
    at          TEXT NOT NULL,
    status_code BIGINT,
    latency_ms  BIGINT NOT NULL,
    response    TEXT,
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
);

ALTER TABLE runs ADD COLUMN callback_url TEXT;
