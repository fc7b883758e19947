-- The operator's model providers per engine (`/v1/management/engines/{engine}/custom-providers`):
-- a job that names one is pointed at its endpoint with its key.
CREATE TABLE engine_providers (
    engine      TEXT NOT NULL,
    provider_id TEXT NOT NULL,
    definition  TEXT NOT NULL,
    api_key     TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (engine, provider_id)
);
