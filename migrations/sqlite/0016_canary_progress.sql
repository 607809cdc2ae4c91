-- Each canary's progress at its current revision, folded from Flagger's
-- events as they are stored (src/gate/progress.rs): one row per canary.
-- `told`: the failures outside the analysis already announced for this
-- revision, comma-separated, so a retried halt is announced once.
CREATE TABLE canary_progress (
    canary        TEXT PRIMARY KEY,
    checksum      TEXT NOT NULL,
    weight        BIGINT,
    iteration     BIGINT,
    iterations    BIGINT,
    failed_checks BIGINT NOT NULL,
    threshold     BIGINT,
    last_message  TEXT NOT NULL,
    last_at       BIGINT NOT NULL,
    told          TEXT NOT NULL
);
