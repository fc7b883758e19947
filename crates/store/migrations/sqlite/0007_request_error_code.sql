-- The code of a request that failed before it had a run (a refused temporary package), kept
-- apart from its human message in `error`.
ALTER TABLE requests ADD COLUMN error_code TEXT;
