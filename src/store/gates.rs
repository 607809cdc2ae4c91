//! Gates as stored: read, locked for a change, written (and announced to other
//! replicas), pinned to a revision, and expired approvals found.

use super::gate_events::GATES_CHANNEL;
use super::*;

impl<'s> Gates<'s> {
    // ---- gates ----

    pub async fn load_gates(self) -> Result<Vec<Gate>> {
        let rows = sqlx::query("SELECT * FROM gates ORDER BY key")
            .fetch_all(&self.store.pool)
            .await?;
        let pins = sqlx::query(
            "SELECT p.approval_id, p.canary, p.checksum FROM pins p \
             JOIN gates g ON g.approval_id = p.approval_id",
        )
        .fetch_all(&self.store.pool)
        .await?;
        let mut votes = match (rows.first(), rows.last()) {
            (Some(first), Some(last)) => {
                self.store
                    .votes()
                    .votes_between(
                        &first.try_get::<String, _>("key")?,
                        &last.try_get::<String, _>("key")?,
                    )
                    .await?
            }
            _ => Default::default(),
        };
        let mut gates = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut gate = rows::gate_from_row(row)?;
            if let Some(v) = votes.remove(&gate.key.to_string()) {
                votes::attach(&mut gate, v);
            }
            if let Some(id) = gate.status.pins_id().map(str::to_string) {
                let mine = gate
                    .status
                    .pins_mut()
                    .expect("a status with a pins id has pins");
                for pin in &pins {
                    if pin.try_get::<String, _>("approval_id")? == id {
                        mine.insert(pin.try_get("canary")?, pin.try_get("checksum")?);
                    }
                }
            }
            gates.push(gate);
        }
        Ok(gates)
    }

    pub async fn load_gate(self, key: &GateKey) -> Result<Option<Gate>> {
        let mut conn = self.store.pool.acquire().await?;
        read_gate(&mut conn, key, "").await
    }

    /// PostgreSQL: the gate as it stands, read in `tx` and locked until `tx`
    /// ends, so that a command decides on what no other replica can change
    /// before it commits. The row is locked (`FOR UPDATE`); a gate with no row
    /// yet is locked by its key, so that two first changes take turns too. A
    /// lock not had within [`LOCK_TIMEOUT`] is [`StoreError::Contended`].
    pub async fn lock_gate(tx: &mut WriteTx<'_>, key: &GateKey) -> Result<Option<Gate>> {
        if let Some(gate) = read_gate(tx.conn(), key, " FOR UPDATE").await? {
            return Ok(Some(gate));
        }
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0)) IS NULL AS locked")
            .bind(format!("gatebot gate {key}"))
            .execute(tx.conn())
            .await?;
        // Another first change may have committed while this one waited.
        read_gate(tx.conn(), key, " FOR UPDATE").await
    }

    pub async fn put_gate(tx: &mut WriteTx<'_>, gate: &Gate) -> Result<()> {
        let (change, expires_at) = match &gate.status {
            GateStatus::Open(a) => (Some(&a.change), a.expires_at),
            GateStatus::Closed { change } => (change.as_ref(), None),
            GateStatus::Held { change } => (Some(change), None),
            GateStatus::Approving(t) => (t.votes.last().map(|v| &v.change), None),
        };
        let approval_id = gate.status.pins_id().map(str::to_string);
        let (required, forced, exclusive) = match &gate.status {
            GateStatus::Open(a) => (
                a.approvers.len().max(1) as i64,
                i64::from(a.forced),
                i64::from(a.exclusive),
            ),
            GateStatus::Approving(t) => (i64::from(t.required), 0, 0),
            _ => (1, 0, 0),
        };
        let include = match &gate.status {
            GateStatus::Approving(t) => super::votes::includes_column(&t.include),
            _ => String::new(),
        };
        sqlx::query(
            "INSERT INTO gates (key, status, approval_id, actor, source, reason, changed_at, expires_at, required, forced, exclusive, must_include) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (key) DO UPDATE SET status = excluded.status, approval_id = excluded.approval_id, \
             actor = excluded.actor, source = excluded.source, reason = excluded.reason, \
             changed_at = excluded.changed_at, expires_at = excluded.expires_at, \
             required = excluded.required, forced = excluded.forced, exclusive = excluded.exclusive, \
             must_include = excluded.must_include",
        )
        .bind(gate.key.to_string())
        .bind(gate.status.name())
        .bind(approval_id)
        .bind(change.map(|c| c.by.name.clone()))
        .bind(change.map(|c| c.by.source.as_str()))
        .bind(change.and_then(|c| c.reason.clone()))
        .bind(change.map_or(0, |c| c.at))
        .bind(expires_at)
        .bind(required)
        .bind(forced)
        .bind(exclusive)
        .bind(include)
        .execute(tx.conn())
        .await?;
        Votes::put_votes(tx, gate).await?;
        Self::announce_gate(tx, &gate.key).await
    }

    /// Open gates whose approval ran out by `now`.
    pub async fn expired_gates(self, now: Millis) -> Result<Vec<GateKey>> {
        let rows = sqlx::query("SELECT key FROM gates WHERE status = 'open' AND expires_at <= $1")
            .bind(now)
            .fetch_all(&self.store.pool)
            .await?;
        rows.iter().map(|r| rows::key_in(r, "key")).collect()
    }

    /// Records the revision an approval was first used for. Returns the pinned
    /// checksum, which is another replica's if it pinned first.
    pub async fn pin(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        approval_id: &str,
        canary: &CanaryRef,
        checksum: &str,
        at: Millis,
    ) -> Result<String> {
        let inserted = sqlx::query(
            "INSERT INTO pins (approval_id, canary, gate_key, checksum, pinned_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (approval_id, canary) DO NOTHING",
        )
        .bind(approval_id.to_string())
        .bind(canary.to_string())
        .bind(key.to_string())
        .bind(checksum.to_string())
        .bind(at)
        .execute(tx.conn())
        .await?
        .rows_affected();
        if inserted > 0 {
            Self::announce_gate(tx, key).await?;
        }
        let row = sqlx::query("SELECT checksum FROM pins WHERE approval_id = $1 AND canary = $2")
            .bind(approval_id.to_string())
            .bind(canary.to_string())
            .fetch_one(tx.conn())
            .await?;
        Ok(row.try_get("checksum")?)
    }

    /// The gates a canary has asked, most recent first: how an event finds its PR.
    pub async fn gates_of_canary(self, canary: &CanaryRef) -> Result<Vec<GateKey>> {
        let rows = sqlx::query(
            "SELECT gate_key FROM observations WHERE canary = $1 ORDER BY last_seen DESC",
        )
        .bind(canary.to_string())
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(|r| rows::key_in(r, "gate_key")).collect()
    }

    /// Announces that `key` changed, at COMMIT of `tx`. PostgreSQL only
    /// (SQLite has one process, whose memory is updated directly).
    pub(super) async fn announce_gate(tx: &mut WriteTx<'_>, key: &GateKey) -> Result<()> {
        let conn = tx.conn();
        if conn.backend_name() != <sqlx::Postgres as sqlx::Database>::NAME {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(GATES_CHANNEL)
            .bind(key.to_string())
            .execute(conn)
            .await?;
        Ok(())
    }
}
