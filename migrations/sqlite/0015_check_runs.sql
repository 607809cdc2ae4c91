-- A pull request's head commit as GitHub last told it (`synchronize`, or one
-- API call), by GitHub's time of the push: check runs are made on it.
CREATE TABLE pr_heads (
    repo       TEXT NOT NULL,
    number     BIGINT NOT NULL,
    head_sha   TEXT NOT NULL,
    pushed_at  BIGINT NOT NULL,
    PRIMARY KEY (repo, number)
);

-- The check run of each of a pull request's gates (GATEBOT_GITHUB_CHECK_RUNS),
-- on its head commit. run_id 0: being created, `digest` naming the outbox job
-- that creates it; else the SHA-256 of what was last sent.
CREATE TABLE check_runs (
    repo       TEXT NOT NULL,
    number     BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    head_sha   TEXT NOT NULL,
    run_id     BIGINT NOT NULL,
    digest     TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (repo, number, kind)
);
