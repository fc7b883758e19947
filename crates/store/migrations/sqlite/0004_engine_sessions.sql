-- The agent engine's session (Codex thread id, Gemini/Claude/Qwen/opencode session id) that a
-- resumed turn continues; NULL until the engine reported or was given one.
ALTER TABLE runs ADD COLUMN engine_session TEXT;
