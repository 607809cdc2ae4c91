-- Microsoft Teams (docs/teams.md). The conversations the bot was added to,
-- kept so that gatebot can post there unprompted: one row per conversation,
-- written when the bot is added (conversationUpdate, installationUpdate) and
-- deleted when it is removed.
CREATE TABLE teams_conversations (
    conversation_id TEXT PRIMARY KEY,
    service_url     TEXT NOT NULL,
    tenant_id       TEXT NOT NULL,
    kind            TEXT NOT NULL,        -- channel, groupChat or personal
    name            TEXT NOT NULL,
    added_at        BIGINT NOT NULL
);
-- The card posted for a wait (one per wait), where it is, and what it shows
-- beside the gate's own state: who decided from the card, how the wait
-- ended, how the rollout ended. Pruned after the wait, as Slack's messages.
CREATE TABLE teams_cards (
    wait_id         BIGINT PRIMARY KEY,
    gate            TEXT NOT NULL,
    canary          TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    service_url     TEXT NOT NULL,
    activity_id     TEXT NOT NULL,
    posted_at       BIGINT NOT NULL,
    verdict         TEXT,                 -- approve, reject or hold, from the card
    decided_by      TEXT,
    decided_at      BIGINT,
    outcome         TEXT,                 -- how the wait ended
    final_kind      TEXT,                 -- promotion_completed, rolling_back, canary_failed
    final_message   TEXT
);
CREATE INDEX teams_cards_gate ON teams_cards (gate, wait_id);
CREATE INDEX teams_cards_canary ON teams_cards (canary, wait_id);
