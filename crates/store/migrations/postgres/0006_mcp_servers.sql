-- The operator's registry of MCP servers given to the agent CLIs' turns.
CREATE TABLE mcp_servers (
    server_id  TEXT PRIMARY KEY NOT NULL,
    -- The definition without secret values (JSON).
    definition TEXT NOT NULL,
    -- The secret values by slot, `{"env:NAME": "...", "header:Name": "..."}`; never shown.
    secrets    TEXT NOT NULL DEFAULT '{}',
    updated_at TEXT NOT NULL
);
