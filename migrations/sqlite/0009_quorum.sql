-- N-of-M approvals and break glass. A gate that needs several people is
-- `approving` until enough of them approved; `votes` holds, in order, the
-- approvals of the gate as it stands: those counted so far, or those that
-- opened it. Every change of the gate rewrites its votes.
ALTER TABLE gates ADD COLUMN required BIGINT NOT NULL DEFAULT 1;
ALTER TABLE gates ADD COLUMN forced BIGINT NOT NULL DEFAULT 0;  -- 1: opened by break glass
CREATE TABLE votes (
    gate_key TEXT NOT NULL,
    position BIGINT NOT NULL,
    person   TEXT NOT NULL,      -- one person across channels
    actor    TEXT NOT NULL,
    source   TEXT NOT NULL,
    reason   TEXT,
    voted_at BIGINT NOT NULL,
    canary   TEXT,               -- the revision approved; NULL: whatever waits next
    checksum TEXT,
    PRIMARY KEY (gate_key, position)
);
