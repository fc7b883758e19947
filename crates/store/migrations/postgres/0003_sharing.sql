-- What the nodes share beyond the queue: where each one answers, the credential they present
-- to each other, and which run folders have a copy in shared storage.

-- The node's base URL (`SKILL_RUNNER_NODE_URL`, else its listener's address): a node asked
-- for a run whose folder another node holds forwards the read there.
ALTER TABLE nodes ADD COLUMN url TEXT NOT NULL DEFAULT '';

-- One row, written by the first node to start: nodes that share the database share it.
CREATE TABLE cluster_secret (
    one    BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    secret TEXT NOT NULL
);

-- The run's folder, as its last turn left it, is in shared storage (`SKILL_RUNNER_STORAGE_URL`):
-- when its node is lost, another node may take the run over. Reset when a turn starts.
ALTER TABLE runs ADD COLUMN stored BOOLEAN NOT NULL DEFAULT FALSE;
