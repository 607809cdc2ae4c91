-- Gates a pipeline created by name (POST /api/v1/gates): what it said, so that
-- creating the same gate again can be told from a conflicting one.
CREATE TABLE named_gates (
    gate_key      TEXT PRIMARY KEY,          -- /gates/<kind>/named/<name>
    title         TEXT,
    links         TEXT NOT NULL,             -- JSON array of {"text", "url"}
    slack_channel TEXT,
    pr_repo       TEXT,                      -- owner/name, with pr_number
    pr_number     BIGINT,
    created_at    BIGINT NOT NULL,
    created_by    TEXT NOT NULL,
    retired_at    BIGINT
);

-- A PR's status comment lists the pipeline gates that name it.
CREATE INDEX named_gates_of_pr ON named_gates (pr_repo, pr_number);
