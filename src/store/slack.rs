//! What gatebot keeps about each Slack message announcing a wait, one table per
//! fact and keyed by the wait, so that the inbox (clicks) and the outbox
//! (notices), which run concurrently, never overwrite each other's facts.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::SlackRows;
use super::{Result, StoreError, WriteTx};
use crate::gate::Millis;

/// The posted message and the wait it announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackMessage {
    pub wait_id: i64,
    pub gate: String,
    pub canary: String,
    pub checksum: String,
    pub phase: String,
    /// JSON object of the canary's webhook metadata.
    pub metadata: String,
    pub since: Millis,
    pub channel: String,
    pub ts: String,
}

/// Who decided the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackDecision {
    pub approved: bool,
    /// Slack user id when decided in Slack.
    pub user_id: Option<String>,
    pub name: String,
    pub via: String,
    pub at: Millis,
    pub reason: Option<String>,
    /// The rollback gate a Reject opened.
    pub rollback_gate: Option<String>,
}

/// The wait ended without a decision from its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackEnding {
    pub outcome: String,
    pub at: Millis,
}

/// The canary's rollout ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackFinal {
    pub kind: String,
    pub message: String,
    pub at: Millis,
}

fn message_from_row(r: &AnyRow) -> Result<SlackMessage> {
    Ok(SlackMessage {
        wait_id: r.try_get("wait_id")?,
        gate: r.try_get("gate")?,
        canary: r.try_get("canary")?,
        checksum: r.try_get("checksum")?,
        phase: r.try_get("phase")?,
        metadata: r.try_get("metadata")?,
        since: r.try_get("since")?,
        channel: r.try_get("channel")?,
        ts: r.try_get("ts")?,
    })
}

fn decision_from_row(r: &AnyRow) -> Result<SlackDecision> {
    let verdict: String = r.try_get("verdict")?;
    Ok(SlackDecision {
        approved: match verdict.as_str() {
            "approved" => true,
            "rejected" => false,
            other => return Err(StoreError::Corrupt(format!("Slack verdict {other:?}"))),
        },
        user_id: r.try_get("user_id")?,
        name: r.try_get("name")?,
        via: r.try_get("via")?,
        at: r.try_get("decided_at")?,
        reason: r.try_get("reason")?,
        rollback_gate: r.try_get("rollback_gate")?,
    })
}

impl<'s> SlackRows<'s> {
    // ---- messages ----

    pub async fn slack_message(self, wait_id: i64) -> Result<Option<SlackMessage>> {
        let row = sqlx::query("SELECT * FROM slack_messages WHERE wait_id = $1")
            .bind(wait_id)
            .fetch_optional(&self.store.pool)
            .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    /// Remembers a posted message; posting it again replaces it.
    pub async fn put_slack_message(
        tx: &mut WriteTx<'_>,
        m: &SlackMessage,
        now: Millis,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO slack_messages (wait_id, gate, canary, checksum, phase, metadata, since, channel, ts, posted_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (wait_id) DO UPDATE SET \
             gate = excluded.gate, canary = excluded.canary, checksum = excluded.checksum, \
             phase = excluded.phase, metadata = excluded.metadata, since = excluded.since, \
             channel = excluded.channel, ts = excluded.ts, posted_at = excluded.posted_at",
        )
        .bind(m.wait_id)
        .bind(m.gate.clone())
        .bind(m.canary.clone())
        .bind(m.checksum.clone())
        .bind(m.phase.clone())
        .bind(m.metadata.clone())
        .bind(m.since)
        .bind(m.channel.clone())
        .bind(m.ts.clone())
        .bind(now)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// `put_slack_message` in a transaction of its own.
    pub async fn remember_slack_message(self, m: &SlackMessage, now: Millis) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_slack_message(&mut tx, m, now).await?;
        tx.commit().await
    }

    /// The waits of the latest `limit` messages posted for a gate, oldest first.
    pub async fn slack_messages_of_gate(self, gate: &str, limit: i64) -> Result<Vec<i64>> {
        self.store
            .waits()
            .waits_posted_for_gate("slack_messages", gate, limit)
            .await
    }

    /// The wait of the message posted last for a canary: where its progress is threaded.
    pub async fn latest_slack_message_of_canary(self, canary: &str) -> Result<Option<i64>> {
        let query = sqlx::query(
            "SELECT wait_id FROM slack_messages WHERE canary = $1 \
             ORDER BY posted_at DESC, wait_id DESC LIMIT 1",
        )
        .bind(canary.to_string());
        self.store.first_value(query).await
    }

    // ---- decisions ----

    pub async fn slack_decision(self, wait_id: i64) -> Result<Option<SlackDecision>> {
        let row = sqlx::query("SELECT * FROM slack_decisions WHERE wait_id = $1")
            .bind(wait_id)
            .fetch_optional(&self.store.pool)
            .await?;
        row.as_ref().map(decision_from_row).transpose()
    }

    /// Who decided a message's wait, unless someone decided it first.
    /// False when the message was decided already: the first decision stands.
    pub async fn put_slack_decision(
        tx: &mut WriteTx<'_>,
        wait_id: i64,
        d: &SlackDecision,
    ) -> Result<bool> {
        let written = sqlx::query(
            "INSERT INTO slack_decisions (wait_id, verdict, user_id, name, via, decided_at, reason, rollback_gate) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (wait_id) DO NOTHING",
        )
        .bind(wait_id)
        .bind(if d.approved { "approved" } else { "rejected" })
        .bind(d.user_id.clone())
        .bind(d.name.clone())
        .bind(d.via.clone())
        .bind(d.at)
        .bind(d.reason.clone())
        .bind(d.rollback_gate.clone())
        .execute(tx.conn())
        .await?
        .rows_affected();
        Ok(written > 0)
    }

    /// `put_slack_decision` in a transaction of its own.
    pub async fn remember_slack_decision(self, wait_id: i64, d: &SlackDecision) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_slack_decision(&mut tx, wait_id, d).await?;
        tx.commit().await
    }

    // ---- endings ----

    pub async fn slack_ending(self, wait_id: i64) -> Result<Option<SlackEnding>> {
        let row = sqlx::query("SELECT outcome, ended_at FROM slack_endings WHERE wait_id = $1")
            .bind(wait_id)
            .fetch_optional(&self.store.pool)
            .await?;
        row.map(|r| {
            Ok(SlackEnding {
                outcome: r.try_get("outcome")?,
                at: r.try_get("ended_at")?,
            })
        })
        .transpose()
    }

    pub async fn put_slack_ending(
        tx: &mut WriteTx<'_>,
        wait_id: i64,
        e: &SlackEnding,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO slack_endings (wait_id, outcome, ended_at) VALUES ($1, $2, $3) \
             ON CONFLICT (wait_id) DO UPDATE SET outcome = excluded.outcome, ended_at = excluded.ended_at",
        )
        .bind(wait_id)
        .bind(e.outcome.clone())
        .bind(e.at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// `put_slack_ending` in a transaction of its own.
    pub async fn remember_slack_ending(self, wait_id: i64, e: &SlackEnding) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_slack_ending(&mut tx, wait_id, e).await?;
        tx.commit().await
    }

    // ---- the rollout's end ----

    pub async fn slack_final(self, wait_id: i64) -> Result<Option<SlackFinal>> {
        let row =
            sqlx::query("SELECT kind, message, final_at FROM slack_finals WHERE wait_id = $1")
                .bind(wait_id)
                .fetch_optional(&self.store.pool)
                .await?;
        row.map(|r| {
            Ok(SlackFinal {
                kind: r.try_get("kind")?,
                message: r.try_get("message")?,
                at: r.try_get("final_at")?,
            })
        })
        .transpose()
    }

    pub async fn put_slack_final(tx: &mut WriteTx<'_>, wait_id: i64, f: &SlackFinal) -> Result<()> {
        sqlx::query(
            "INSERT INTO slack_finals (wait_id, kind, message, final_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (wait_id) DO UPDATE SET kind = excluded.kind, message = excluded.message, \
             final_at = excluded.final_at",
        )
        .bind(wait_id)
        .bind(f.kind.clone())
        .bind(f.message.clone())
        .bind(f.at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// `put_slack_final` in a transaction of its own.
    pub async fn remember_slack_final(self, wait_id: i64, f: &SlackFinal) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_slack_final(&mut tx, wait_id, f).await?;
        tx.commit().await
    }
}
