-- Change freezes, kept after they are lifted: the table is their audit log.
CREATE TABLE freezes (
    id         BIGSERIAL PRIMARY KEY,
    scope      TEXT NOT NULL,            -- all | owner/repo | ns/<namespace>
    reason     TEXT NOT NULL,
    actor      TEXT NOT NULL,
    source     TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    until      BIGINT,                   -- ends by itself then; NULL: until lifted
    lifted_at  BIGINT,
    lifted_by  TEXT,
    delivery   TEXT                      -- the command that froze: applied once
);
CREATE UNIQUE INDEX freezes_delivery ON freezes (delivery) WHERE delivery IS NOT NULL;
CREATE INDEX freezes_active ON freezes (lifted_at);
