-- Where each node answers, and the credential nodes present to each other: a node asked for a
-- run whose folder another node holds forwards the read there.

-- The node's base URL (`SKILL_RUNNER_NODE_URL`, else its listener's address).
ALTER TABLE nodes ADD COLUMN url TEXT NOT NULL DEFAULT '';

-- One row, written by the first node to start: nodes that share the database share it.
CREATE TABLE cluster_secret (
    one    BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    secret TEXT NOT NULL
);
