-- `waiting_auth`: a run whose engine is not logged in waits for a login.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('queued', 'running', 'waiting_user', 'waiting_auth', 'succeeded', 'failed', 'canceled'));
DROP INDEX runs_active;
CREATE INDEX runs_active ON runs (status)
    WHERE status IN ('queued', 'running', 'waiting_user', 'waiting_auth');
