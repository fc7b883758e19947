-- Repair rounds: a turn whose answer broke the output contract is told so, in its session,
-- by another process of the same turn. Each round is kept so the run's conversation, events
-- and timeline show it where it happened.
CREATE TABLE repair_rounds (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    turn          INTEGER NOT NULL,
    -- 1, 2, ... within the turn.
    round         INTEGER NOT NULL,
    -- Rounds the turn may take at most.
    rounds        INTEGER NOT NULL,
    -- Where the unfit answer's output ended in the run's `logs/stdout.txt` (bytes).
    stdout_offset INTEGER NOT NULL,
    -- What was wrong with the answer (JSON array of strings).
    problems      TEXT NOT NULL,
    started_at    TEXT NOT NULL,
    PRIMARY KEY (run_id, turn, round)
);
