-- A deadline's rollback opens its gate for the one canary whose wait ran out.
ALTER TABLE gates ADD COLUMN exclusive BIGINT NOT NULL DEFAULT 0;  -- 1: for its pinned canaries only
-- When each open wait's deadline falls and its next reminder is due, fixed when
-- it starts (and again at start-up, by the policy then in force), so that
-- housekeeping reads only the waits that are due, however many others wait.
-- NULL: none. The Flagger cluster whose token the check that started it carried.
ALTER TABLE waits ADD COLUMN due_at BIGINT;
ALTER TABLE waits ADD COLUMN remind_at BIGINT;
ALTER TABLE waits ADD COLUMN cluster TEXT;
CREATE INDEX waits_due ON waits (due_at) WHERE ended_at IS NULL AND deadline_at IS NULL AND due_at IS NOT NULL;
CREATE INDEX waits_remind ON waits (remind_at) WHERE ended_at IS NULL AND deadline_at IS NULL AND remind_at IS NOT NULL;
