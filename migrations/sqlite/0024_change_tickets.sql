-- The change requests gatebot opened for waiting canaries (`[change] mode =
-- "create"`): one per gate, canary and revision. `state` is creating (claimed,
-- not yet answered), open (waiting for its approval), opened (the gate opened
-- by it), rejected (the gate held by it), closing (Flagger is done: to be
-- moved to its end state, `successful` or not) or closed.
CREATE TABLE change_tickets (
    gate_key TEXT NOT NULL,
    canary TEXT NOT NULL,
    checksum TEXT NOT NULL,
    number TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    successful BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    changed_at BIGINT NOT NULL,
    PRIMARY KEY (gate_key, canary, checksum)
);
CREATE INDEX change_tickets_by_state ON change_tickets (state, changed_at);
CREATE INDEX change_tickets_by_canary ON change_tickets (canary, state);
