-- Canaries tied to the pull request that brought their revision, found in the
-- cluster and on GitHub (GATEBOT_KUBERNETES_LOOKUP). One row per canary
-- (`namespace/name`) and Flagger checksum; repo and number NULL: no PR brought
-- the commit. Pruned after GATEBOT_RETENTION_HISTORY (a revision still live is
-- looked up again at its next check).
CREATE TABLE canary_ties (
    canary     TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    repo       TEXT,
    number     BIGINT,
    found_at   BIGINT NOT NULL,
    PRIMARY KEY (canary, checksum)
);
CREATE INDEX canary_ties_found ON canary_ties (found_at);
