-- Engine CLI upgrades (npm installs into the managed prefix): one row per request.
CREATE TABLE engine_upgrades (
    request_id       TEXT PRIMARY KEY NOT NULL,
    mode             TEXT NOT NULL CHECK (mode IN ('single', 'all')),
    requested_engine TEXT,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    -- JSON object: engine -> {status, stdout, stderr, error}.
    results          TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);

-- At most one upgrade under way: a second one is refused (409) while this index holds a row.
CREATE UNIQUE INDEX engine_upgrades_one_active ON engine_upgrades ((1))
    WHERE status IN ('queued', 'running');

-- Model snapshots added by operators (add-only), next to the ones shipped with the service.
CREATE TABLE model_snapshots (
    engine      TEXT NOT NULL,
    cli_version TEXT NOT NULL,
    -- JSON array of models.
    models      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (engine, cli_version)
);
