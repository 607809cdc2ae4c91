-- Web sessions ended by signing out, kept until they would have expired, so
-- that a copy of the cookie is refused by every replica; and OAuth `state`s
-- already used (by their SHA-256), kept until they would have expired, so
-- that a sign-in is taken once. Both are pruned as rows are added.
CREATE TABLE revoked_sessions (
    id         TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE INDEX revoked_sessions_expiry ON revoked_sessions (expires_at);
CREATE TABLE used_oauth_states (
    state_hash TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE INDEX used_oauth_states_expiry ON used_oauth_states (expires_at);
