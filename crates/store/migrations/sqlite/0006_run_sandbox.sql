-- How the run's turns were confined (`landlock`, `unavailable`, `off`), recorded when a turn
-- starts: the service that ran it decided, not the one that shows it later.
ALTER TABLE runs ADD COLUMN sandbox TEXT CHECK (sandbox IN ('landlock', 'unavailable', 'off'));
