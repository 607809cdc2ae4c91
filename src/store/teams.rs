//! What gatebot keeps for Microsoft Teams: the conversations the bot was
//! added to (where it may post unprompted), and the card posted for each
//! wait with what it shows beside the gate's own state.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::TeamsRows;
use super::{Result, WriteTx};
use crate::gate::Millis;

/// A conversation reference: enough to post there later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamsConversation {
    pub conversation_id: String,
    pub service_url: String,
    pub tenant_id: String,
    /// `channel`, `groupChat` or `personal`.
    pub kind: String,
    pub name: String,
}

/// The card posted for a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamsCard {
    pub wait_id: i64,
    pub gate: String,
    pub canary: String,
    pub conversation_id: String,
    pub service_url: String,
    pub activity_id: String,
    /// Who decided from the card: (verb, name, when).
    pub decided: Option<(String, String, Millis)>,
    /// How the wait ended.
    pub outcome: Option<String>,
    /// How the rollout ended: (kind, message).
    pub final_state: Option<(String, String)>,
}

fn conversation_from_row(r: &AnyRow) -> Result<TeamsConversation> {
    Ok(TeamsConversation {
        conversation_id: r.try_get("conversation_id")?,
        service_url: r.try_get("service_url")?,
        tenant_id: r.try_get("tenant_id")?,
        kind: r.try_get("kind")?,
        name: r.try_get("name")?,
    })
}

fn card_from_row(r: &AnyRow) -> Result<TeamsCard> {
    let verdict: Option<String> = r.try_get("verdict")?;
    let by: Option<String> = r.try_get("decided_by")?;
    let at: Option<Millis> = r.try_get("decided_at")?;
    let kind: Option<String> = r.try_get("final_kind")?;
    let message: Option<String> = r.try_get("final_message")?;
    Ok(TeamsCard {
        wait_id: r.try_get("wait_id")?,
        gate: r.try_get("gate")?,
        canary: r.try_get("canary")?,
        conversation_id: r.try_get("conversation_id")?,
        service_url: r.try_get("service_url")?,
        activity_id: r.try_get("activity_id")?,
        decided: verdict.zip(by).zip(at).map(|((v, b), a)| (v, b, a)),
        outcome: r.try_get("outcome")?,
        final_state: kind.map(|k| (k, message.unwrap_or_default())),
    })
}

impl<'s> TeamsRows<'s> {
    // ---- conversations ----

    /// Keeps a conversation's reference (again: the service URL may move);
    /// false when `cap` conversations are known already and this is a new one.
    pub async fn remember_teams_conversation(
        self,
        c: &TeamsConversation,
        now: Millis,
        cap: i64,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        let known: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM teams_conversations WHERE conversation_id <> $1",
        )
        .bind(c.conversation_id.clone())
        .fetch_one(tx.conn())
        .await?;
        if known >= cap {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO teams_conversations (conversation_id, service_url, tenant_id, kind, name, added_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (conversation_id) DO UPDATE SET \
             service_url = excluded.service_url, tenant_id = excluded.tenant_id, \
             kind = excluded.kind, name = excluded.name",
        )
        .bind(c.conversation_id.clone())
        .bind(c.service_url.clone())
        .bind(c.tenant_id.clone())
        .bind(c.kind.clone())
        .bind(c.name.clone())
        .bind(now)
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The bot was removed: its reference goes.
    pub async fn forget_teams_conversation(self, conversation_id: &str) -> Result<()> {
        let query = sqlx::query("DELETE FROM teams_conversations WHERE conversation_id = $1")
            .bind(conversation_id.to_string());
        self.store.execute_alone(query).await
    }

    /// The first `limit` conversations known, by id.
    pub async fn teams_conversations(self, limit: i64) -> Result<Vec<TeamsConversation>> {
        let rows =
            sqlx::query("SELECT * FROM teams_conversations ORDER BY conversation_id LIMIT $1")
                .bind(limit)
                .fetch_all(&self.store.pool)
                .await?;
        rows.iter().map(conversation_from_row).collect()
    }

    pub async fn teams_conversation(self, id: &str) -> Result<Option<TeamsConversation>> {
        let row = sqlx::query("SELECT * FROM teams_conversations WHERE conversation_id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.store.pool)
            .await?;
        row.as_ref().map(conversation_from_row).transpose()
    }

    // ---- cards ----

    pub async fn teams_card(self, wait_id: i64) -> Result<Option<TeamsCard>> {
        let row = sqlx::query("SELECT * FROM teams_cards WHERE wait_id = $1")
            .bind(wait_id)
            .fetch_optional(&self.store.pool)
            .await?;
        row.as_ref().map(card_from_row).transpose()
    }

    /// Remembers a posted card; posted once per wait, so a second is ignored.
    pub async fn remember_teams_card(self, c: &TeamsCard, now: Millis) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO teams_cards (wait_id, gate, canary, conversation_id, service_url, activity_id, posted_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (wait_id) DO NOTHING",
        )
        .bind(c.wait_id)
        .bind(c.gate.clone())
        .bind(c.canary.clone())
        .bind(c.conversation_id.clone())
        .bind(c.service_url.clone())
        .bind(c.activity_id.clone())
        .bind(now);
        self.store.execute_alone(query).await
    }

    /// The waits of a gate's latest `limit` cards, oldest first.
    pub async fn teams_cards_of_gate(self, gate: &str, limit: i64) -> Result<Vec<i64>> {
        self.store
            .waits()
            .waits_posted_for_gate("teams_cards", gate, limit)
            .await
    }

    /// The wait of a canary's latest card.
    pub async fn latest_teams_card_of_canary(self, canary: &str) -> Result<Option<i64>> {
        let query = sqlx::query(
            "SELECT wait_id FROM teams_cards WHERE canary = $1 ORDER BY wait_id DESC LIMIT 1",
        )
        .bind(canary.to_string());
        self.store.first_value(query).await
    }

    /// Who decided from the card, in the transaction of the change.
    /// False when the card was decided already: the first decision stands,
    /// and a click that raced it is asked again (and then refused).
    pub async fn decide_teams_card(
        tx: &mut WriteTx<'_>,
        wait_id: i64,
        verb: &str,
        by: &str,
        at: Millis,
    ) -> Result<bool> {
        let decided = sqlx::query(
            "UPDATE teams_cards SET verdict = $2, decided_by = $3, decided_at = $4 \
             WHERE wait_id = $1 AND verdict IS NULL",
        )
        .bind(wait_id)
        .bind(verb.to_string())
        .bind(by.to_string())
        .bind(at)
        .execute(tx.conn())
        .await?
        .rows_affected();
        if decided > 0 {
            return Ok(true);
        }
        // No card kept (a Workflows post): nothing to decide, nothing raced.
        let kept = sqlx::query("SELECT 1 FROM teams_cards WHERE wait_id = $1")
            .bind(wait_id)
            .fetch_optional(tx.conn())
            .await?;
        Ok(kept.is_none())
    }

    /// How the wait ended (kept once: the first ending is the one).
    pub async fn end_teams_card(self, wait_id: i64, outcome: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE teams_cards SET outcome = $2 WHERE wait_id = $1 AND outcome IS NULL",
        )
        .bind(wait_id)
        .bind(outcome.to_string());
        self.store.execute_alone(query).await
    }

    /// How the rollout ended.
    pub async fn finish_teams_card(self, wait_id: i64, kind: &str, message: &str) -> Result<()> {
        let query = sqlx::query(
            "UPDATE teams_cards SET final_kind = $2, final_message = $3 WHERE wait_id = $1",
        )
        .bind(wait_id)
        .bind(kind.to_string())
        .bind(message.to_string());
        self.store.execute_alone(query).await
    }

    /// What a delivery did, from the audit: (action, reason) of each entry.
    pub async fn audit_of_delivery(self, delivery: &str) -> Result<Vec<(String, Option<String>)>> {
        let rows = sqlx::query("SELECT action, reason FROM audit WHERE delivery = $1 ORDER BY id")
            .bind(delivery.to_string())
            .fetch_all(&self.store.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("action")?, r.try_get("reason")?)))
            .collect()
    }
}
