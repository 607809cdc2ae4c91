//! What happened: the audit log, Flagger's events, and the changes a delivery made.

use super::*;

impl<'s> History<'s> {
    // ---- audit ----

    pub async fn audit(tx: &mut WriteTx<'_>, entry: &AuditEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO audit (at, gate_key, action, actor, source, reason, revision, canary, delivery) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(entry.at)
        .bind(entry.gate.to_string())
        .bind(entry.action.as_str())
        .bind(entry.actor.name.clone())
        .bind(entry.actor.source.as_str())
        .bind(entry.reason.clone())
        .bind(entry.revision.clone())
        .bind(entry.canary.as_ref().map(CanaryRef::to_string))
        .bind(entry.delivery.as_ref().map(|d| d.as_str().to_string()))
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    pub async fn audit_log(self, key: Option<&GateKey>, limit: i64) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query(
            "SELECT * FROM audit WHERE ($1 IS NULL OR gate_key = $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(key.map(|k| k.to_string()))
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(rows::audit_from_row).collect()
    }

    // ---- Flagger events ----

    pub async fn insert_event(tx: &mut WriteTx<'_>, e: &EventRow) -> Result<i64> {
        let row = sqlx::query(
            "INSERT INTO events (received_at, canary, phase, checksum, event_type, kind, message, flagger_at, metadata, cluster) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        )
        .bind(e.received_at)
        .bind(e.canary.to_string())
        .bind(e.phase.to_string())
        .bind(e.checksum.clone())
        .bind(e.event_type.clone())
        .bind(e.kind.clone())
        .bind(e.message.clone())
        .bind(e.flagger_at)
        .bind(e.metadata.clone())
        .bind(e.cluster.as_ref().map(|c| c.as_str().to_string()))
        .fetch_one(tx.conn())
        .await?;
        Ok(row.try_get("id")?)
    }

    pub async fn events(self, canary: Option<&str>, limit: i64) -> Result<Vec<EventRow>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE ($1 IS NULL OR canary = $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(canary.map(str::to_string))
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(rows::event_from_row).collect()
    }

    /// Whether this delivery already did this to this gate (replays change nothing).
    pub async fn applied(
        self,
        tx: &mut WriteTx<'_>,
        delivery: &DeliveryId,
        gate: &GateKey,
        action: AuditAction,
    ) -> Result<bool> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM audit WHERE delivery = $1 AND gate_key = $2 AND action = $3",
        )
        .bind(delivery.as_str().to_string())
        .bind(gate.to_string())
        .bind(action.as_str())
        .fetch_one(tx.conn())
        .await?;
        Ok(row.try_get::<i64, _>("n")? > 0)
    }
}
