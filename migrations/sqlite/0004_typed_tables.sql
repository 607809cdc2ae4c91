-- Typed tables replace the key/value table `kv`, one per concern. The rows kv
-- held are copied over, so an upgrade keeps what it knew; then kv is dropped.
-- migrations/postgres/0004_typed_tables.sql is the same in PostgreSQL's words.

-- Who opened each pull request (four eyes across GitHub and Slack).
CREATE TABLE pr_authors (
    repo       TEXT NOT NULL,             -- owner/name, lower case
    number     BIGINT NOT NULL,
    login      TEXT NOT NULL,
    learned_at BIGINT NOT NULL,
    PRIMARY KEY (repo, number)
);
-- When each pull request last got new commits, by GitHub's clock.
CREATE TABLE pr_pushes (
    repo        TEXT NOT NULL,
    number      BIGINT NOT NULL,
    pushed_at   BIGINT NOT NULL,          -- only ever moves forward
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (repo, number)
);
-- Each pull request's status comment, and a digest of the body it shows.
CREATE TABLE status_comments (
    repo       TEXT NOT NULL,
    number     BIGINT NOT NULL,
    comment_id BIGINT NOT NULL,
    digest     TEXT,                      -- NULL: not known, edit it anyway
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (repo, number)
);
-- The Slack message announcing each wait. The latest message of a canary and
-- the messages of a gate are found through it.
CREATE TABLE slack_messages (
    wait_id   BIGINT PRIMARY KEY,
    gate      TEXT NOT NULL,
    canary    TEXT NOT NULL,
    checksum  TEXT NOT NULL,
    phase     TEXT NOT NULL,
    metadata  TEXT NOT NULL,              -- JSON object: the canary's webhook metadata
    since     BIGINT NOT NULL,
    channel   TEXT NOT NULL,
    ts        TEXT NOT NULL,
    posted_at BIGINT NOT NULL
);
CREATE INDEX slack_messages_gate ON slack_messages (gate, wait_id);
CREATE INDEX slack_messages_canary ON slack_messages (canary, posted_at);
-- Who decided a wait from its message (or opened its gate elsewhere).
CREATE TABLE slack_decisions (
    wait_id       BIGINT PRIMARY KEY,
    verdict       TEXT NOT NULL CHECK (verdict IN ('approved', 'rejected')),
    user_id       TEXT,                   -- Slack user id, when decided in Slack
    name          TEXT NOT NULL,
    via           TEXT NOT NULL,
    decided_at    BIGINT NOT NULL,
    reason        TEXT,
    rollback_gate TEXT                    -- the rollback gate a Reject opened
);
-- A wait that ended without a decision from its message.
CREATE TABLE slack_endings (
    wait_id  BIGINT PRIMARY KEY,
    outcome  TEXT NOT NULL,
    ended_at BIGINT NOT NULL
);
-- The end of the canary's rollout, as its message shows it.
CREATE TABLE slack_finals (
    wait_id  BIGINT PRIMARY KEY,
    kind     TEXT NOT NULL,
    message  TEXT NOT NULL,
    final_at BIGINT NOT NULL
);

-- kv's keys were `<namespace>:<repo>#<number>` and `<namespace>:<wait id>`.
-- Rows that do not parse were never written by gatebot and are left behind.
INSERT INTO pr_authors (repo, number, login, learned_at)
SELECT substr(k, 11, instr(k, '#') - 11), CAST(substr(k, instr(k, '#') + 1) AS BIGINT), v, updated_at
FROM kv WHERE k GLOB 'pr-author:?*#[0-9]*' AND substr(k, instr(k, '#') + 1) NOT GLOB '*[^0-9]*'
ON CONFLICT DO NOTHING;

INSERT INTO pr_pushes (repo, number, pushed_at, recorded_at)
SELECT substr(k, 11, instr(k, '#') - 11), CAST(substr(k, instr(k, '#') + 1) AS BIGINT),
       CAST(v AS BIGINT), updated_at
FROM kv WHERE k GLOB 'pr-pushed:?*#[0-9]*' AND substr(k, instr(k, '#') + 1) NOT GLOB '*[^0-9]*'
  AND v GLOB '[0-9]*' AND v NOT GLOB '*[^0-9]*'
ON CONFLICT DO NOTHING;

INSERT INTO status_comments (repo, number, comment_id, digest, updated_at)
SELECT substr(c.k, 23, instr(c.k, '#') - 23), CAST(substr(c.k, instr(c.k, '#') + 1) AS BIGINT),
       CAST(c.v AS BIGINT), h.v, c.updated_at
FROM kv c LEFT JOIN kv h ON h.k = 'github-status-hash:' || substr(c.k, 23)
WHERE c.k GLOB 'github-status-comment:?*#[0-9]*'
  AND substr(c.k, instr(c.k, '#') + 1) NOT GLOB '*[^0-9]*'
  AND c.v GLOB '[0-9]*' AND c.v NOT GLOB '*[^0-9]*'
ON CONFLICT DO NOTHING;

INSERT INTO slack_messages (wait_id, gate, canary, checksum, phase, metadata, since, channel, ts, posted_at)
SELECT CAST(substr(k, 11) AS BIGINT), json_extract(v, '$.info.gate'), json_extract(v, '$.info.canary'),
       json_extract(v, '$.info.checksum'), json_extract(v, '$.info.phase'),
       COALESCE(json_extract(v, '$.info.metadata'), '{}'), json_extract(v, '$.info.since'),
       json_extract(v, '$.channel'), json_extract(v, '$.ts'), updated_at
FROM kv WHERE k GLOB 'slack-msg:[0-9]*' AND substr(k, 11) NOT GLOB '*[^0-9]*' AND json_valid(v)
ON CONFLICT DO NOTHING;

INSERT INTO slack_decisions (wait_id, verdict, user_id, name, via, decided_at, reason, rollback_gate)
SELECT CAST(substr(k, 16) AS BIGINT),
       CASE WHEN json_extract(v, '$.approved') THEN 'approved' ELSE 'rejected' END,
       json_extract(v, '$.user_id'), json_extract(v, '$.name'), json_extract(v, '$.via'),
       json_extract(v, '$.at'), json_extract(v, '$.reason'), json_extract(v, '$.rollback_gate')
FROM kv WHERE k GLOB 'slack-decision:[0-9]*' AND substr(k, 16) NOT GLOB '*[^0-9]*'
  AND json_valid(v) AND v <> 'null'   -- `null`: a decision withdrawn
ON CONFLICT DO NOTHING;

INSERT INTO slack_endings (wait_id, outcome, ended_at)
SELECT CAST(substr(k, 13) AS BIGINT), json_extract(v, '$.outcome'), json_extract(v, '$.at')
FROM kv WHERE k GLOB 'slack-ended:[0-9]*' AND substr(k, 13) NOT GLOB '*[^0-9]*'
  AND json_valid(v)
ON CONFLICT DO NOTHING;

INSERT INTO slack_finals (wait_id, kind, message, final_at)
SELECT CAST(substr(k, 13) AS BIGINT), json_extract(v, '$.kind'), json_extract(v, '$.message'),
       json_extract(v, '$.at')
FROM kv WHERE k GLOB 'slack-final:[0-9]*' AND substr(k, 13) NOT GLOB '*[^0-9]*'
  AND json_valid(v)
ON CONFLICT DO NOTHING;

-- `slack-canary:` and `slack-gate:` were indexes of the messages: slack_messages answers them now.
DROP TABLE kv;
