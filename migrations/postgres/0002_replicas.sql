-- One row per running replica, written every second on PostgreSQL: a lease whose
-- owner has not been seen for a few seconds belongs to a dead process and is free.
CREATE TABLE replicas (
    owner      TEXT PRIMARY KEY,         -- the lease owner name (hostname-uuid)
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL
);
