//! The last check of every canary at every gate (`gate_observations`).

use super::*;

impl<'s> Observations<'s> {
    // ---- observations and waits ----

    pub async fn load_observations(self) -> Result<Vec<ObservationRow>> {
        let rows = sqlx::query(
            "SELECT o.*, (SELECT w.id FROM waits w WHERE w.gate_key = o.gate_key AND w.canary = o.canary \
             AND w.ended_at IS NULL) AS wait_id FROM observations o ORDER BY o.gate_key, o.canary",
        )
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(rows::observation_from_row).collect()
    }

    pub async fn observations_for(self, key: &GateKey) -> Result<Vec<ObservationRow>> {
        let rows = sqlx::query(
            "SELECT o.*, (SELECT w.id FROM waits w WHERE w.gate_key = o.gate_key AND w.canary = o.canary \
             AND w.ended_at IS NULL) AS wait_id FROM observations o WHERE o.gate_key = $1 ORDER BY o.canary",
        )
        .bind(key.to_string())
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(rows::observation_from_row).collect()
    }

    /// Records a check and the answer it got.
    pub async fn observe(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        check: &Check<'_>,
        answer: Answer,
        reason: &str,
        metadata: &str,
        at: Millis,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO observations (gate_key, canary, checksum, phase, answer, reason, metadata, first_seen, last_seen) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) \
             ON CONFLICT (gate_key, canary) DO UPDATE SET checksum = excluded.checksum, phase = excluded.phase, \
             answer = excluded.answer, reason = excluded.reason, metadata = excluded.metadata, last_seen = excluded.last_seen",
        )
        .bind(key.to_string())
        .bind(check.canary.to_string())
        .bind(check.checksum.to_string())
        .bind(check.phase.to_string())
        .bind(answer.as_str())
        .bind(reason.to_string())
        .bind(metadata.to_string())
        .bind(at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// Last-seen times are kept in memory and written in batches: a poll that
    /// repeats the last one must not cost a write each.
    pub async fn touch_observations(self, seen: &[(String, String, Millis)]) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut tx = self.store.begin().await?;
        for (key, canary, at) in seen {
            sqlx::query(
                "UPDATE observations SET last_seen = $3 WHERE gate_key = $1 AND canary = $2 AND last_seen < $3",
            )
            .bind(key.clone())
            .bind(canary.clone())
            .bind(*at)
            .execute(tx.conn())
            .await?;
        }
        tx.commit().await
    }
}
