-- A tenant's webhooks, and the outbox of their deliveries.
CREATE TABLE webhooks (
    webhook_id      TEXT PRIMARY KEY NOT NULL,
    tenant_id       TEXT NOT NULL,
    url             TEXT NOT NULL,
    -- JSON list of event types (`run.succeeded`, ...).
    events          TEXT NOT NULL,
    -- `whsec_...`; the previous one also signs until `previous_until` (a rotation).
    secret          TEXT NOT NULL,
    previous_secret TEXT,
    previous_until  TEXT,
    -- Since when every delivery failed (NULL after a success).
    failing_since   TEXT,
    disabled_at     TEXT,
    disabled_reason TEXT,
    created_at      TEXT NOT NULL
);

CREATE INDEX webhooks_tenant ON webhooks (tenant_id);

-- Each message to send: written in the same transaction as the run's move it tells of, so no
-- move is told twice or never. `seq` orders a run's messages.
CREATE TABLE webhook_deliveries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The `webhook-id` of every try.
    delivery_id     TEXT NOT NULL UNIQUE,
    tenant_id       TEXT NOT NULL,
    -- NULL for a job's `callback_url`.
    webhook_id      TEXT REFERENCES webhooks (webhook_id) ON DELETE CASCADE,
    url             TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    event           TEXT NOT NULL,
    payload         TEXT NOT NULL,
    -- pending, delivered, failed (gave up), disabled (its webhook was disabled).
    state           TEXT NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    -- The node sending it now, until `claimed_until`.
    claimed_by      TEXT,
    claimed_until   TEXT,
    created_at      TEXT NOT NULL,
    delivered_at    TEXT
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_run ON webhook_deliveries (run_id, seq);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, seq);

-- Each try of a delivery: what the endpoint answered.
CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (delivery_id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    at          TEXT NOT NULL,
    -- NULL when no answer came (the error says why).
    status_code INTEGER,
    latency_ms  INTEGER NOT NULL,
    -- The first KiB of the answer's body.
    response    TEXT,
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
);

ALTER TABLE runs ADD COLUMN callback_url TEXT;
