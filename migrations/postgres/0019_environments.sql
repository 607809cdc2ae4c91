-- With [[environments]]: when a cluster's promote gate first opened for a
-- commit. A later environment's gates wait until every cluster of the one
-- before has a row for the same commit, the last a soak ago.
CREATE TABLE passages (
    gate_key   TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    cluster    TEXT NOT NULL,
    passed_at  BIGINT NOT NULL,
    PRIMARY KEY (gate_key, commit_sha, cluster)
);
CREATE INDEX passages_passed_at ON passages (passed_at);

-- The cluster whose Flagger told an event, so that a PR's messages say
-- which cluster's rollout it is about.
ALTER TABLE events ADD COLUMN cluster TEXT;
