-- The run list pages newest first, optionally for one skill, without sorting the table
-- (the rowid, which breaks ties, is part of every index).
CREATE INDEX requests_listed ON requests (created_at DESC) WHERE run_id IS NOT NULL;
CREATE INDEX requests_listed_by_skill ON requests (skill_id, created_at DESC) WHERE run_id IS NOT NULL;
