-- Secrets a tenant binds to hosts: a turn gets a placeholder, the egress puts the value in on
-- requests to the hosts. The value is never read back by a listing (last4 is kept beside it).
CREATE TABLE secrets (
    tenant_id  TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,
    last4      TEXT NOT NULL,
    -- JSON: the host patterns (`host[:port]`, `*.domain[:port]`).
    hosts      TEXT NOT NULL,
    header     TEXT NOT NULL,
    prefix     TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
