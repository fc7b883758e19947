-- Skill package install requests: one row per upload, kept after the package files are gone.
CREATE TABLE install_requests (
    request_id TEXT PRIMARY KEY NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    -- How far a running install got; 'swapping' tells start-up recovery to roll the swap forward.
    phase      TEXT NOT NULL DEFAULT 'received' CHECK (phase IN ('received', 'validating', 'swapping', 'done')),
    skill_id   TEXT,
    version    TEXT,
    action     TEXT CHECK (action IN ('install', 'update')),
    error      TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE INDEX install_requests_unfinished ON install_requests (status)
    WHERE status IN ('queued', 'running');
