-- Each time a run waited for its engine's login: its conversation and events show where the
-- wait began and whether a login ended it.
CREATE TABLE auth_waits (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    turn          BIGINT NOT NULL,
    stdout_offset BIGINT NOT NULL,
    started_at    TEXT NOT NULL,
    ended_at      TEXT,
    PRIMARY KEY (run_id, seq)
);
