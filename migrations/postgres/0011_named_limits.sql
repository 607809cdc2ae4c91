-- Named gates are bounded (README, "Limits and guarantees"): creations are
-- counted per token and hour and live gates in all, from this table, so that
-- replicas agree; a retired gate's details are pruned after
-- GATEBOT_NAMED_GATE_RETENTION, leaving its name, its state and its audit lines.
ALTER TABLE named_gates ADD COLUMN pruned_at BIGINT;  -- details pruned then
CREATE INDEX named_gates_created ON named_gates (created_by, created_at);
CREATE INDEX named_gates_live ON named_gates (created_at) WHERE retired_at IS NULL;
CREATE INDEX named_gates_unpruned ON named_gates (retired_at) WHERE pruned_at IS NULL;
-- The pruning pass finds a gate's waits by its key.
CREATE INDEX waits_by_gate ON waits (gate_key);
