-- Deployments of a workflow run waiting for gatebot's approval, one per run
-- and environment (`deployment_protection_rule` `requested`, [[github.protection]]),
-- and how they were decided. Pending rows are found by their gate.
CREATE TABLE github_protection_requests (
    repo          TEXT NOT NULL,
    run_id        BIGINT NOT NULL,
    environment   TEXT NOT NULL,
    number        BIGINT NOT NULL,
    gate_key      TEXT NOT NULL,
    callback_url  TEXT NOT NULL,
    installation  BIGINT,
    requested_at  BIGINT NOT NULL,
    decided_at    BIGINT,
    state         TEXT,
    PRIMARY KEY (repo, run_id, environment)
);
CREATE INDEX github_protection_pending ON github_protection_requests (repo, number)
    WHERE decided_at IS NULL;

-- A deployment's wait for a PR's gate has a deadline although no canary made it.
CREATE INDEX waits_announcements_due ON waits (due_at)
    WHERE ended_at IS NULL AND deadline_at IS NULL AND canary = '' AND due_at IS NOT NULL;
