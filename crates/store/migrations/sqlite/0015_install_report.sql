-- A package may hold several skills (a repository's archive): `skills` keeps the report of
-- each (JSON). A standard skill installed again unchanged is `action = 'unchanged'`. SQLite
-- cannot alter a CHECK, so the table is rebuilt.
CREATE TABLE install_requests_new (
    request_id TEXT PRIMARY KEY NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    -- How far a running install got; 'swapping' tells start-up recovery to roll the swap forward.
    phase      TEXT NOT NULL DEFAULT 'received' CHECK (phase IN ('received', 'validating', 'swapping', 'done')),
    skill_id   TEXT,
    version    TEXT,
    action     TEXT CHECK (action IN ('install', 'update', 'unchanged')),
    error      TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    skills     TEXT
);

INSERT INTO install_requests_new
    (request_id, status, phase, skill_id, version, action, error, created_at, updated_at)
SELECT request_id, status, phase, skill_id, version, action, error, created_at, updated_at
FROM install_requests;

DROP TABLE install_requests;

ALTER TABLE install_requests_new RENAME TO install_requests;

CREATE INDEX install_requests_unfinished ON install_requests (status)
    WHERE status IN ('queued', 'running');
