-- The GitHub Deployment of each canary revision tied to a pull request
-- (GATEBOT_GITHUB_DEPLOYMENTS), and the state of the last status posted on it.
CREATE TABLE github_deployments (
    repo          TEXT NOT NULL,
    number        BIGINT NOT NULL,
    canary        TEXT NOT NULL,
    checksum      TEXT NOT NULL,
    deployment_id BIGINT NOT NULL,
    state         TEXT NOT NULL,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (repo, number, canary, checksum)
);
