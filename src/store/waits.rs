//! The timers of open waits: when each one's deadline falls and its next
//! reminder is due. Housekeeping asks only for the waits that are due, by an
//! index, so a pass costs the same however many other canaries wait.

use super::*;
use crate::gate::{CanaryRef, ClusterName, GateKey, Millis};

/// A wait about to start, with its timers.
#[derive(Debug, Clone, Copy)]
pub struct NewWait<'a> {
    pub key: &'a GateKey,
    pub canary: &'a CanaryRef,
    pub checksum: &'a str,
    pub phase: &'a str,
    /// The hook's metadata, as JSON text.
    pub metadata: &'a str,
    pub at: Millis,
    pub due_at: Option<Millis>,
    pub remind_at: Option<Millis>,
    pub cluster: Option<&'a ClusterName>,
    /// The check carried its cluster's Flagger token.
    pub vouched: bool,
}

/// How many waits one query of housekeeping reads at most.
pub const PAGE: usize = 1000;

impl<'s> Waits<'s> {
    /// Open waits whose deadline fell by `now` and was not acted on, the
    /// earliest first, after `after` (the last one read: due time and id).
    pub async fn due_waits(
        self,
        now: Millis,
        after: Option<(Millis, i64)>,
    ) -> Result<Vec<super::WaitRow>> {
        self.waits_due_by("due_at", now, after).await
    }

    /// Open waits whose next reminder is due by `now`, the earliest first,
    /// after `after` (the last one read).
    pub async fn waits_to_remind(
        self,
        now: Millis,
        after: Option<(Millis, i64)>,
    ) -> Result<Vec<super::WaitRow>> {
        self.waits_due_by("remind_at", now, after).await
    }

    async fn waits_due_by(
        self,
        column: &str,
        now: Millis,
        after: Option<(Millis, i64)>,
    ) -> Result<Vec<super::WaitRow>> {
        // The conditions match the partial indexes `waits_due` and `waits_remind`.
        let sql = format!(
            "SELECT * FROM waits WHERE ended_at IS NULL AND deadline_at IS NULL AND canary <> '' \
             AND {column} IS NOT NULL AND {column} <= $1 \
             AND ({column} > $2 OR ({column} = $2 AND id > $3)) \
             ORDER BY {column}, id LIMIT {PAGE}"
        );
        let (at, id) = after.unwrap_or((Millis::MIN, 0));
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(at)
            .bind(id)
            .fetch_all(&self.store.pool)
            .await?;
        rows.iter().map(super::rows::wait_from_row).collect()
    }

    /// Open waits no canary made whose deadline fell by `now` (a deployment
    /// waiting for a PR's gate), the earliest first, a page at most.
    pub async fn due_announcements(self, now: Millis) -> Result<Vec<super::WaitRow>> {
        // The conditions match the partial index `waits_announcements_due`.
        let rows = sqlx::query(&format!(
            "SELECT * FROM waits WHERE ended_at IS NULL AND deadline_at IS NULL AND canary = '' \
             AND due_at IS NOT NULL AND due_at <= $1 ORDER BY due_at, id LIMIT {PAGE}"
        ))
        .bind(now)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(super::rows::wait_from_row).collect()
    }

    /// A page of open canary waits after `after` (by id), for working out
    /// their timers again by the policy now in force.
    pub async fn open_waits_after(self, after: i64) -> Result<Vec<super::WaitRow>> {
        let rows = sqlx::query(&format!(
            "SELECT * FROM waits WHERE ended_at IS NULL AND deadline_at IS NULL AND canary <> '' \
             AND id > $1 ORDER BY id LIMIT {PAGE}"
        ))
        .bind(after)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(super::rows::wait_from_row).collect()
    }

    /// Sets a wait's timers.
    pub async fn set_timers(
        tx: &mut WriteTx<'_>,
        wait_id: i64,
        due_at: Option<Millis>,
        remind_at: Option<Millis>,
    ) -> Result<()> {
        sqlx::query("UPDATE waits SET due_at = $2, remind_at = $3 WHERE id = $1")
            .bind(wait_id)
            .bind(due_at)
            .bind(remind_at)
            .execute(tx.conn())
            .await?;
        Ok(())
    }

    /// Marks a wait's deadline as acted on; false when another replica did,
    /// or the wait ended meanwhile.
    pub async fn mark_deadline(tx: &mut WriteTx<'_>, wait_id: i64, at: Millis) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE waits SET deadline_at = $2 WHERE id = $1 AND deadline_at IS NULL AND ended_at IS NULL",
        )
        .bind(wait_id)
        .bind(at)
        .execute(tx.conn())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records that a wait was reminded of `to` points, from `from`, and when
    /// the next is due; false when another replica did, or the wait ended.
    pub async fn mark_reminded(
        tx: &mut WriteTx<'_>,
        wait_id: i64,
        from: i64,
        to: i64,
        next: Option<Millis>,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE waits SET reminders_sent = $3, remind_at = $4 \
             WHERE id = $1 AND reminders_sent = $2 AND ended_at IS NULL",
        )
        .bind(wait_id)
        .bind(from)
        .bind(to)
        .bind(next)
        .execute(tx.conn())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The waits of a gate's latest `limit` posts in `table` (Slack's
    /// messages, Teams' cards), oldest first. `table` is a name in this
    /// crate's source, never input: it is written into the statement.
    pub(super) async fn waits_posted_for_gate(
        self,
        table: &'static str,
        gate: &str,
        limit: i64,
    ) -> Result<Vec<i64>> {
        let sql =
            format!("SELECT wait_id FROM {table} WHERE gate = $1 ORDER BY wait_id DESC LIMIT $2");
        let rows = sqlx::query(&sql)
            .bind(gate.to_string())
            .bind(limit)
            .fetch_all(&self.store.pool)
            .await?;
        let mut ids = rows
            .iter()
            .map(|r| r.try_get("wait_id"))
            .collect::<Result<Vec<i64>, _>>()?;
        ids.reverse();
        Ok(ids)
    }

    /// Starts a wait unless one is open. Returns the new wait's id, or None when
    /// another check (here or on another replica) started it first.
    pub async fn start_wait(tx: &mut WriteTx<'_>, wait: &NewWait<'_>) -> Result<Option<i64>> {
        let row = sqlx::query(
            "INSERT INTO waits (gate_key, canary, checksum, phase, metadata, started_at, due_at, remind_at, cluster, vouched) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (gate_key, canary) WHERE ended_at IS NULL DO NOTHING RETURNING id",
        )
        .bind(wait.key.to_string())
        .bind(wait.canary.to_string())
        .bind(wait.checksum.to_string())
        .bind(wait.phase.to_string())
        .bind(wait.metadata.to_string())
        .bind(wait.at)
        .bind(wait.due_at)
        .bind(wait.remind_at)
        .bind(wait.cluster.map(|c| c.as_str().to_string()))
        .bind(i64::from(wait.vouched))
        .fetch_optional(tx.conn())
        .await?;
        Ok(row.map(|r| r.try_get("id")).transpose()?)
    }

    /// Ends the open wait of a canary at a gate; returns its id if there was one.
    pub async fn end_wait(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        canary: &CanaryRef,
        outcome: &str,
        at: Millis,
    ) -> Result<Option<i64>> {
        NamedGates::end_wait_as(tx, key, &canary.to_string(), outcome, at).await
    }

    pub async fn list(
        self,
        key: Option<&GateKey>,
        open_only: bool,
        limit: i64,
    ) -> Result<Vec<WaitRow>> {
        let rows = sqlx::query(
            "SELECT * FROM waits WHERE ($1 IS NULL OR gate_key = $1) AND ($2 = 0 OR ended_at IS NULL) \
             ORDER BY id DESC LIMIT $3",
        )
        .bind(key.map(|k| k.to_string()))
        .bind(i64::from(open_only))
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(rows::wait_from_row).collect()
    }

    pub async fn wait(self, id: i64) -> Result<Option<WaitRow>> {
        let row = sqlx::query("SELECT * FROM waits WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.store.pool)
            .await?;
        row.as_ref().map(rows::wait_from_row).transpose()
    }

    pub async fn open_wait_count(self) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM waits WHERE ended_at IS NULL")
            .fetch_one(&self.store.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    /// Open waits that no Flagger token vouched for, at `key` or in all.
    pub async fn open_unvouched_waits(tx: &mut WriteTx<'_>, key: Option<&GateKey>) -> Result<i64> {
        use sqlx::Row;
        // The condition matches the partial index `waits_open_unvouched`.
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM waits WHERE ended_at IS NULL AND vouched = 0 AND canary <> '' \
             AND ($1 IS NULL OR gate_key = $1)",
        )
        .bind(key.map(ToString::to_string))
        .fetch_one(tx.conn())
        .await?;
        Ok(row.try_get("n")?)
    }

    /// The `n` oldest open waits no Flagger token vouched for, at `key` or in
    /// all, each with when its canary last asked.
    pub async fn oldest_unvouched_waits(
        tx: &mut WriteTx<'_>,
        key: Option<&GateKey>,
        n: i64,
    ) -> Result<Vec<OpenWait>> {
        let rows = sqlx::query(
            "SELECT w.id, w.gate_key, w.canary, w.started_at, w.metadata, w.vouched, o.last_seen \
             FROM waits w LEFT JOIN observations o ON o.gate_key = w.gate_key AND o.canary = w.canary \
             WHERE w.ended_at IS NULL AND w.vouched = 0 AND w.canary <> '' \
             AND ($1 IS NULL OR w.gate_key = $1) ORDER BY w.started_at, w.id LIMIT $2",
        )
        .bind(key.map(ToString::to_string))
        .bind(n)
        .fetch_all(tx.conn())
        .await?;
        rows.iter().map(open_wait_from_row).collect()
    }

    /// Open canary waits whose canary last asked before `before`, the
    /// longest silent first, a page at most.
    pub async fn silent_waits(self, before: Millis) -> Result<Vec<OpenWait>> {
        let rows = sqlx::query(&format!(
            "SELECT w.id, w.gate_key, w.canary, w.started_at, w.metadata, w.vouched, o.last_seen \
             FROM waits w JOIN observations o ON o.gate_key = w.gate_key AND o.canary = w.canary \
             WHERE w.ended_at IS NULL AND w.canary <> '' AND o.last_seen < $1 \
             ORDER BY o.last_seen, w.id LIMIT {PAGE}"
        ))
        .bind(before)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(open_wait_from_row).collect()
    }

    /// The canaries of open waits that a Flagger token vouched for.
    pub async fn vouched_waiting_canaries(self) -> Result<std::collections::BTreeSet<CanaryRef>> {
        use sqlx::Row;
        let rows = sqlx::query(
            "SELECT DISTINCT canary FROM waits WHERE ended_at IS NULL AND vouched = 1 AND canary <> ''",
        )
        .fetch_all(&self.store.pool)
        .await?;
        let mut out = std::collections::BTreeSet::new();
        for row in &rows {
            let text: String = row.try_get("canary")?;
            if let Ok(canary) = text.parse() {
                out.insert(canary);
            }
        }
        Ok(out)
    }

    /// Ends the open wait `id`, unless it ended meanwhile; whether it did.
    pub async fn end_wait_by_id(
        tx: &mut WriteTx<'_>,
        wait: &OpenWait,
        outcome: &str,
        at: Millis,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE waits SET ended_at = $2, outcome = $3 WHERE id = $1 AND ended_at IS NULL",
        )
        .bind(wait.id)
        .bind(at)
        .bind(outcome.to_string())
        .execute(tx.conn())
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        tx.ended_wait(wait.gate.kind, outcome, at - wait.started_at);
        Ok(true)
    }

    /// Forgets a made-up canary's last check at a gate (its wait ended for
    /// want of room or of asking): its next check, if any, starts afresh.
    pub async fn forget_observation(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        canary: &CanaryRef,
    ) -> Result<()> {
        sqlx::query("DELETE FROM observations WHERE gate_key = $1 AND canary = $2")
            .bind(key.to_string())
            .bind(canary.to_string())
            .execute(tx.conn())
            .await?;
        Ok(())
    }

    /// Deletes the audit entry that made-up wait `wait` wrote when it
    /// started. A check no token vouched for, asked once, is nobody's
    /// history, and the audit is kept for a year: a flood's entries would
    /// grow the store for as long.
    pub async fn forget_wait_entry(tx: &mut WriteTx<'_>, wait: &OpenWait) -> Result<()> {
        sqlx::query(
            "DELETE FROM audit WHERE gate_key = $1 AND canary = $2 AND at = $3 \
             AND action = 'wait' AND source = 'gatebot'",
        )
        .bind(wait.gate.to_string())
        .bind(wait.canary.to_string())
        .bind(wait.started_at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }
}

/// An open wait a canary made, with when that canary last asked its gate.
#[derive(Debug, Clone)]
pub struct OpenWait {
    pub id: i64,
    pub gate: GateKey,
    pub canary: CanaryRef,
    pub started_at: Millis,
    /// The canary's last check as stored (None: none stored).
    pub last_seen: Option<Millis>,
    /// The hook's metadata, as stored.
    pub metadata: serde_json::Value,
    /// The check that started it carried its cluster's Flagger token.
    pub vouched: bool,
}

fn open_wait_from_row(row: &sqlx::any::AnyRow) -> Result<OpenWait> {
    use sqlx::Row;
    let canary: String = row.try_get("canary")?;
    Ok(OpenWait {
        id: row.try_get("id")?,
        gate: super::rows::key_in(row, "gate_key")?,
        canary: canary
            .parse()
            .map_err(|e| super::StoreError::Corrupt(format!("canary {canary}: {e}")))?,
        started_at: row.try_get("started_at")?,
        last_seen: row.try_get("last_seen")?,
        metadata: super::rows::json(&row.try_get::<String, _>("metadata")?),
        vouched: row.try_get::<i64, _>("vouched")? != 0,
    })
}
