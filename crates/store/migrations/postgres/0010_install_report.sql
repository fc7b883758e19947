-- As SQLite's 0015: the per-skill report of a package holding several skills, and
-- `action = 'unchanged'`.
ALTER TABLE install_requests DROP CONSTRAINT install_requests_action_check;
ALTER TABLE install_requests
    ADD CONSTRAINT install_requests_action_check
    CHECK (action IN ('install', 'update', 'unchanged'));
ALTER TABLE install_requests ADD COLUMN skills TEXT;
