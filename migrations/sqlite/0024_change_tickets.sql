-- The change requests gatebot opened for waiting canaries (`[change] mode =
-- "create"`): one per gate, canary and revision. `state` is creating (claimed,
-- not yet answered), open (waiting for its approval), opened (the gate opened
-- by it), rejected (the gate held by it), closing (Flagger is done: to be
-- moved to its end state, `successful` or not: successful only when the
-- change itself opened the gate) or closed.
CREATE TABLE change_tickets (
    gate_key TEXT NOT NULL,
    canary TEXT NOT NULL,
    checksum TEXT NOT NULL,
    -- The cluster whose Flagger token vouched for the wait: only its own
    -- events close the change.
    cluster TEXT NOT NULL DEFAULT '',
    number TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    successful BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    changed_at BIGINT NOT NULL,
    -- When its canary was last seen waiting for it: one no longer waiting
    -- for an hour is closed, unsuccessful.
    seen_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (gate_key, canary, checksum)
);
CREATE INDEX change_tickets_by_state ON change_tickets (state, changed_at);
CREATE INDEX change_tickets_by_canary ON change_tickets (canary, state);
