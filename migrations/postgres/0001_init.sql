-- Gates: one row per gate that has ever been opened, closed or held.
CREATE TABLE gates (
    key         TEXT PRIMARY KEY,
    status      TEXT NOT NULL,            -- open | closed | held
    approval_id TEXT,                     -- the current approval while open
    actor       TEXT,
    source      TEXT,
    reason      TEXT,
    changed_at  BIGINT NOT NULL,
    expires_at  BIGINT
);
CREATE INDEX gates_expiring ON gates (expires_at) WHERE status = 'open';

-- The revision each canary first used an approval for.
CREATE TABLE pins (
    approval_id TEXT NOT NULL,
    canary      TEXT NOT NULL,            -- namespace/name
    gate_key    TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    pinned_at   BIGINT NOT NULL,
    PRIMARY KEY (approval_id, canary)
);

-- The last thing each canary asked each gate, written when it changes.
CREATE TABLE observations (
    gate_key   TEXT NOT NULL,
    canary     TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    phase      TEXT NOT NULL,
    answer     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}',
    first_seen BIGINT NOT NULL,
    last_seen  BIGINT NOT NULL,
    PRIMARY KEY (gate_key, canary)
);

CREATE TABLE waits (
    id         BIGSERIAL PRIMARY KEY,
    gate_key   TEXT NOT NULL,
    canary     TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    phase      TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}',
    started_at BIGINT NOT NULL,
    ended_at   BIGINT,
    outcome    TEXT
);
-- At most one open wait per canary and gate, whichever replica saw it first.
CREATE UNIQUE INDEX waits_one_open ON waits (gate_key, canary) WHERE ended_at IS NULL;

-- Append-only.
CREATE TABLE audit (
    id       BIGSERIAL PRIMARY KEY,
    at       BIGINT NOT NULL,
    gate_key TEXT NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT NOT NULL,
    source   TEXT NOT NULL,
    reason   TEXT,
    revision TEXT,
    canary   TEXT,
    delivery TEXT
);
CREATE INDEX audit_by_gate ON audit (gate_key, id);

-- The canary timeline from Flagger's event hook.
CREATE TABLE events (
    id          BIGSERIAL PRIMARY KEY,
    received_at BIGINT NOT NULL,
    canary      TEXT NOT NULL,
    phase       TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    message     TEXT NOT NULL,
    flagger_at  BIGINT,
    metadata    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_canary ON events (canary, id);

-- Notification jobs (the outbox).
CREATE TABLE outbox (
    id              TEXT PRIMARY KEY,
    sink            TEXT NOT NULL,
    topic           TEXT NOT NULL,
    payload         TEXT NOT NULL,
    dedupe_key      TEXT,
    once_key        TEXT UNIQUE,             -- a job that must never be queued twice
    created_at      BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_until     BIGINT,
    lease_owner     TEXT,
    last_error      TEXT,
    done_at         BIGINT,
    state           TEXT NOT NULL DEFAULT 'pending'  -- pending | done | failed
);
CREATE INDEX outbox_due ON outbox (state, next_attempt_at);
-- A job that renders current state at send time needs to be queued only once.
CREATE UNIQUE INDEX outbox_pending_dedupe ON outbox (dedupe_key) WHERE state = 'pending';

-- Webhook deliveries, stored before they are acknowledged (the inbox).
CREATE TABLE inbox (
    id          TEXT PRIMARY KEY,          -- source:delivery id
    source      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    attempts    BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_until BIGINT,
    lease_owner TEXT,
    state       TEXT NOT NULL DEFAULT 'pending',  -- pending | done | failed
    last_error  TEXT,
    done_at     BIGINT
);
CREATE INDEX inbox_due ON inbox (state, next_attempt_at);

-- Small key/value facts for integrations (status comment ids, Slack message ts).
CREATE TABLE kv (
    k          TEXT PRIMARY KEY,
    v          TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
