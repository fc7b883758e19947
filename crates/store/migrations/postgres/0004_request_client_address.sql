-- The address the request came from, as the service saw its connection. NULL for requests
-- recorded before this was kept.
ALTER TABLE requests ADD COLUMN client_address TEXT;
