//! The timers of open waits: when each one's deadline falls and its next
//! reminder is due. Housekeeping asks only for the waits that are due, by an
//! index, so a pass costs the same however many other canaries wait.

use super::{Result, Store, WriteTx};
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
}

/// How many waits one query of housekeeping reads at most.
pub const PAGE: usize = 1000;

impl Store {
    /// Open waits whose deadline fell by `now` and was not acted on, the
    /// earliest first, after `after` (the last one read: due time and id).
    pub async fn due_waits(
        &self,
        now: Millis,
        after: Option<(Millis, i64)>,
    ) -> Result<Vec<super::WaitRow>> {
        self.waits_due_by("due_at", now, after).await
    }

    /// Open waits whose next reminder is due by `now`, the earliest first,
    /// after `after` (the last one read).
    pub async fn waits_to_remind(
        &self,
        now: Millis,
        after: Option<(Millis, i64)>,
    ) -> Result<Vec<super::WaitRow>> {
        self.waits_due_by("remind_at", now, after).await
    }

    async fn waits_due_by(
        &self,
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
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(super::rows::wait_from_row).collect()
    }

    /// Open waits no canary made whose deadline fell by `now` (a deployment
    /// waiting for a PR's gate), the earliest first, a page at most.
    pub async fn due_announcements(&self, now: Millis) -> Result<Vec<super::WaitRow>> {
        // The conditions match the partial index `waits_announcements_due`.
        let rows = sqlx::query(&format!(
            "SELECT * FROM waits WHERE ended_at IS NULL AND deadline_at IS NULL AND canary = '' \
             AND due_at IS NOT NULL AND due_at <= $1 ORDER BY due_at, id LIMIT {PAGE}"
        ))
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(super::rows::wait_from_row).collect()
    }

    /// A page of open canary waits after `after` (by id), for working out
    /// their timers again by the policy now in force.
    pub async fn open_waits_after(&self, after: i64) -> Result<Vec<super::WaitRow>> {
        let rows = sqlx::query(&format!(
            "SELECT * FROM waits WHERE ended_at IS NULL AND deadline_at IS NULL AND canary <> '' \
             AND id > $1 ORDER BY id LIMIT {PAGE}"
        ))
        .bind(after)
        .fetch_all(&self.pool)
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
}
