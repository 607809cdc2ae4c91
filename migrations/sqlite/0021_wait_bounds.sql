-- Open waits are bounded (src/core/bounds.rs): 1 when the check that started
-- the wait carried its cluster's Flagger token, so a flood of made-up waits
-- ends the oldest made-up ones first and never one a token vouched for.
ALTER TABLE waits ADD COLUMN vouched BIGINT NOT NULL DEFAULT 0;
-- The made-up open waits, oldest first: the ones a new wait past the bound ends.
CREATE INDEX waits_open_unvouched ON waits (started_at, id) WHERE ended_at IS NULL AND vouched = 0 AND canary <> '';
