-- Pull requests GitHub answered 404 for: their notifications are dropped,
-- without calling GitHub, until the mark is a day old.
CREATE TABLE missing_prs (
    repo      TEXT NOT NULL,              -- owner/name
    number    BIGINT NOT NULL,
    marked_at BIGINT NOT NULL,            -- when GitHub last said it does not exist
    PRIMARY KEY (repo, number)
);

-- The waits of one minute, for the digest of waits not announced one by one.
CREATE INDEX waits_started ON waits (started_at);
