-- Interactive runs: a run that asks its user a question waits in `waiting_user`, and each
-- reply (or automatic decision) queues its next turn.

-- Turns started so far (1 for the first); the script engine passes it as `turn`.
ALTER TABLE runs ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
-- Questions asked so far; the pending one is interactions.seq = interaction_count.
ALTER TABLE runs ADD COLUMN interaction_count INTEGER NOT NULL DEFAULT 0;
-- The engine's id of the question waiting for a reply (NULL unless waiting_user).
ALTER TABLE runs ADD COLUMN pending_interaction_id INTEGER;
-- When the wait for a reply times out (RFC 3339 UTC; NULL unless waiting_user).
ALTER TABLE runs ADD COLUMN wait_deadline TEXT;
ALTER TABLE runs ADD COLUMN auto_decision_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN last_auto_decision_at TEXT;

-- Every question a run asked, with its reply once it has one: the history a resumed turn sees.
CREATE TABLE interactions (
    run_id          TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- 1, 2, ... in the order asked.
    seq             INTEGER NOT NULL,
    -- Chosen by the engine; echoed by the client's reply.
    interaction_id  INTEGER NOT NULL,
    -- The turn that asked.
    turn            INTEGER NOT NULL,
    -- The normalised question (JSON).
    question        TEXT NOT NULL,
    asked_at        TEXT NOT NULL,
    -- The reply (JSON), once given.
    response        TEXT,
    resolution_mode TEXT CHECK (resolution_mode IN ('user_reply', 'auto_decide_timeout')),
    idempotency_key TEXT,
    replied_at      TEXT,
    PRIMARY KEY (run_id, seq)
);

CREATE UNIQUE INDEX interactions_idempotency_key
    ON interactions (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
