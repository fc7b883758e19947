-- Nodes sharing this database, and which of them holds each run.

-- A node's row lives from its start to its stop; one whose heartbeat is older than the
-- cluster's timeout is lost, and the leader ends its turns (`NODE_LOST`) and removes the row.
CREATE TABLE nodes (
    node_id      TEXT PRIMARY KEY NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The node whose data dir holds the run's folder (its uploads, a previous turn's workspace):
-- set when files arrive or the first turn starts, and only that node runs the run's turns.
-- NULL: the run may run anywhere.
ALTER TABLE runs ADD COLUMN node TEXT;
-- The node that claimed the run's next or current turn (its lease, renewed by its heartbeat);
-- NULL while no node holds it. Every write about a turn checks it (fencing).
ALTER TABLE runs ADD COLUMN lease_node TEXT;

CREATE INDEX runs_claimable ON runs (seq) WHERE status = 'queued' AND lease_node IS NULL;
CREATE INDEX runs_leased ON runs (lease_node) WHERE lease_node IS NOT NULL;

-- The node receiving a request's upload (its files land in that node's data dir): a crash of
-- that node reopens the upload, and only its own.
ALTER TABLE requests ADD COLUMN upload_node TEXT;
