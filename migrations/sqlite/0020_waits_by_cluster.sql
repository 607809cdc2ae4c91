-- The waiting page filtered by environment or cluster: each cluster's open
-- waits, newest first, read as one indexed range per cluster.
CREATE INDEX waits_open_by_cluster ON waits (cluster, id) WHERE ended_at IS NULL;
