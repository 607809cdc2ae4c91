-- When a wait's deadline passed and the policy acted on it: once, whichever
-- replica got there first. The wait itself goes on while Flagger asks.
ALTER TABLE waits ADD COLUMN deadline_at BIGINT;
