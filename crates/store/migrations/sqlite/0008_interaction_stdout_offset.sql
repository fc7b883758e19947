-- Where the asking turn's output ended in the run's `logs/stdout.txt` (bytes): the run's
-- conversation places the question there. NULL for questions asked before this was kept.
ALTER TABLE interactions ADD COLUMN stdout_offset INTEGER;
