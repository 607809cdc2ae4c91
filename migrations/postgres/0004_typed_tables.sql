-- Typed tables replace the key/value table `kv`, one per concern. The rows kv
-- held are copied over, so an upgrade keeps what it knew; then kv is dropped.
-- migrations/sqlite/0004_typed_tables.sql is the same in SQLite's words.

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
-- Rows whose key does not parse were never written by gatebot and are left behind.
-- JSON is only read in the SELECT lists, after the keys were filtered.
INSERT INTO pr_authors (repo, number, login, learned_at)
SELECT split_part(substr(k, 11), '#', 1), split_part(k, '#', 2)::bigint, v, updated_at
FROM kv WHERE k ~ '^pr-author:[^#]+#[0-9]{1,18}$'
ON CONFLICT DO NOTHING;

INSERT INTO pr_pushes (repo, number, pushed_at, recorded_at)
SELECT split_part(substr(k, 11), '#', 1), split_part(k, '#', 2)::bigint, v::bigint, updated_at
FROM kv WHERE k ~ '^pr-pushed:[^#]+#[0-9]{1,18}$' AND v ~ '^[0-9]{1,18}$'
ON CONFLICT DO NOTHING;

INSERT INTO status_comments (repo, number, comment_id, digest, updated_at)
SELECT split_part(substr(c.k, 23), '#', 1), split_part(c.k, '#', 2)::bigint, c.v::bigint, h.v,
       c.updated_at
FROM kv c LEFT JOIN kv h ON h.k = 'github-status-hash:' || substr(c.k, 23)
WHERE c.k ~ '^github-status-comment:[^#]+#[0-9]{1,18}$' AND c.v ~ '^[0-9]{1,18}$'
ON CONFLICT DO NOTHING;

INSERT INTO slack_messages (wait_id, gate, canary, checksum, phase, metadata, since, channel, ts, posted_at)
SELECT substr(k, 11)::bigint, j -> 'info' ->> 'gate', j -> 'info' ->> 'canary',
       j -> 'info' ->> 'checksum', j -> 'info' ->> 'phase',
       COALESCE((j -> 'info' -> 'metadata')::text, '{}'), (j -> 'info' ->> 'since')::bigint,
       j ->> 'channel', j ->> 'ts', updated_at
FROM (SELECT k, v::json AS j, updated_at FROM kv WHERE k ~ '^slack-msg:[0-9]{1,18}$') m
ON CONFLICT DO NOTHING;

INSERT INTO slack_decisions (wait_id, verdict, user_id, name, via, decided_at, reason, rollback_gate)
SELECT substr(k, 16)::bigint,
       CASE WHEN (j ->> 'approved')::boolean THEN 'approved' ELSE 'rejected' END,
       j ->> 'user_id', j ->> 'name', j ->> 'via', (j ->> 'at')::bigint, j ->> 'reason',
       j ->> 'rollback_gate'
FROM (SELECT k, v::json AS j FROM kv WHERE k ~ '^slack-decision:[0-9]{1,18}$'
      AND v <> 'null') d   -- `null`: a decision withdrawn
ON CONFLICT DO NOTHING;

INSERT INTO slack_endings (wait_id, outcome, ended_at)
SELECT substr(k, 13)::bigint, j ->> 'outcome', (j ->> 'at')::bigint
FROM (SELECT k, v::json AS j FROM kv WHERE k ~ '^slack-ended:[0-9]{1,18}$') e
ON CONFLICT DO NOTHING;

INSERT INTO slack_finals (wait_id, kind, message, final_at)
SELECT substr(k, 13)::bigint, j ->> 'kind', j ->> 'message', (j ->> 'at')::bigint
FROM (SELECT k, v::json AS j FROM kv WHERE k ~ '^slack-final:[0-9]{1,18}$') f
ON CONFLICT DO NOTHING;

-- `slack-canary:` and `slack-gate:` were indexes of the messages: slack_messages answers them now.
DROP TABLE kv;
