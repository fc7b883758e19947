-- The run list of one skill pages newest first without sorting (`requests_recent` serves the
-- whole list).
CREATE INDEX requests_listed_by_skill ON requests (skill_id, created_at DESC, seq DESC)
    WHERE run_id IS NOT NULL;
