-- Repair rounds: a turn whose answer broke the output contract is told so, in its session,
-- by another process of the same turn. Each round is kept so the run's conversation, events
-- and timeline show it where it happened.
CREATE TABLE repair_rounds (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    turn          BIGINT NOT NULL,
    round         BIGINT NOT NULL,
    rounds        BIGINT NOT NULL,
    stdout_offset BIGINT NOT NULL,
    problems      JSON NOT NULL,
    started_at    TEXT NOT NULL,
    PRIMARY KEY (run_id, turn, round)
);
