-- Each time a run waited for its engine's login: its conversation and events show where the
-- wait began and whether a login ended it.
CREATE TABLE auth_waits (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- 1, 2, ... in the order they began.
    seq           INTEGER NOT NULL,
    -- Turns the run had started when it began to wait (the next one waits).
    turn          INTEGER NOT NULL,
    -- How long the run's `logs/stdout.txt` was then (bytes).
    stdout_offset INTEGER NOT NULL,
    started_at    TEXT NOT NULL,
    -- When a login queued the run again; NULL while it waits, or when it never came.
    ended_at      TEXT,
    PRIMARY KEY (run_id, seq)
);
