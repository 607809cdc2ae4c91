//! The change requests gatebot opened for waiting canaries (`[change] mode =
//! "create"`), one per gate, canary and revision: claimed before the change
//! system is asked, so two replicas never open two; then followed until the
//! gate opens or is held, and closed when Flagger is done.

use sqlx::Row;

use super::rows::key_in;
use super::{Result, Tickets, WriteTx};
use crate::gate::{GateKey, Millis};

/// Where a ticket is in its life.
pub mod state {
    /// Claimed; the change system has not answered yet.
    pub const CREATING: &str = "creating";
    /// Waiting for its approval.
    pub const OPEN: &str = "open";
    /// The gate opened by it.
    pub const OPENED: &str = "opened";
    /// Rejected: the gate held by it.
    pub const REJECTED: &str = "rejected";
    /// Flagger is done: to be moved to its end state.
    pub const CLOSING: &str = "closing";
    /// Claimed to be closed; the change system has not answered yet.
    pub const CLOSE_CLAIMED: &str = "close-claimed";
    pub const CLOSED: &str = "closed";
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketRow {
    pub gate: GateKey,
    pub canary: String,
    pub checksum: String,
    /// The cluster whose Flagger token vouched for its wait.
    pub cluster: String,
    pub number: String,
    pub state: String,
    pub successful: bool,
    pub changed_at: Millis,
    /// When its canary was last seen waiting for it.
    pub seen_at: Millis,
}

impl<'s> Tickets<'s> {
    /// Claims the ticket of a wait; false when it has one (or another
    /// replica is making it).
    pub async fn claim_ticket(self, row: &TicketRow, now: Millis) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO change_tickets (gate_key, canary, checksum, cluster, state, created_at, changed_at, seen_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6, $6) ON CONFLICT DO NOTHING",
        )
        .bind(row.gate.to_string())
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .bind(row.cluster.clone())
        .bind(state::CREATING)
        .bind(now)
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The change system opened it as `number`.
    pub async fn ticket_made(self, row: &TicketRow, number: &str, now: Millis) -> Result<()> {
        self.move_ticket(row, &[state::CREATING], state::OPEN, Some(number), now)
            .await
            .map(drop)
    }

    /// Moves a ticket from one of `from` to `to`; false when it had moved.
    pub async fn move_ticket(
        self,
        row: &TicketRow,
        from: &[&str],
        to: &str,
        number: Option<&str>,
        now: Millis,
    ) -> Result<bool> {
        let states = from
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let done = sqlx::query(&format!(
            "UPDATE change_tickets SET state = $1, number = COALESCE($2, number), changed_at = $3 \
             WHERE gate_key = $4 AND canary = $5 AND checksum = $6 AND state IN ({states})"
        ))
        .bind(to.to_string())
        .bind(number.map(str::to_string))
        .bind(now)
        .bind(row.gate.to_string())
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Tickets to be closed, oldest change first, at most `limit`: those
    /// Flagger is done with, and those whose claim to close was made before
    /// `stale` (a replica that died mid-call).
    pub async fn tickets_to_close(self, stale: Millis, limit: i64) -> Result<Vec<TicketRow>> {
        let rows = sqlx::query(
            "SELECT * FROM change_tickets WHERE state = $1 OR (state = $2 AND changed_at < $3) \
             ORDER BY changed_at LIMIT $4",
        )
        .bind(state::CLOSING)
        .bind(state::CLOSE_CLAIMED)
        .bind(stale)
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(ticket_from_row).collect()
    }

    /// Claims a ticket to close it; false when another replica has (or it
    /// moved meanwhile). A stale claim may be taken over.
    pub async fn claim_close(self, row: &TicketRow, now: Millis, stale: Millis) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE change_tickets SET state = $1, changed_at = $2 \
             WHERE gate_key = $3 AND canary = $4 AND checksum = $5 \
             AND (state = $6 OR (state = $1 AND changed_at < $7))",
        )
        .bind(state::CLOSE_CLAIMED)
        .bind(now)
        .bind(row.gate.to_string())
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .bind(state::CLOSING)
        .bind(stale)
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Tickets in `state`, oldest change first, at most `limit`.
    pub async fn tickets_in(self, state: &str, limit: i64) -> Result<Vec<TicketRow>> {
        let rows = sqlx::query(
            "SELECT * FROM change_tickets WHERE state = $1 ORDER BY changed_at LIMIT $2",
        )
        .bind(state.to_string())
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(ticket_from_row).collect()
    }

    /// The tickets of `canary` at `checksum` opened for `cluster`'s waits that
    /// are not yet to be closed.
    pub async fn tickets_of_revision(
        self,
        canary: &str,
        checksum: &str,
        cluster: &str,
    ) -> Result<Vec<TicketRow>> {
        let rows = sqlx::query(
            "SELECT * FROM change_tickets WHERE canary = $1 AND checksum = $2 AND cluster = $3 \
             AND state IN ($4, $5, $6)",
        )
        .bind(canary.to_string())
        .bind(checksum.to_string())
        .bind(cluster.to_string())
        .bind(state::OPEN)
        .bind(state::OPENED)
        .bind(state::REJECTED)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(ticket_from_row).collect()
    }

    /// Flagger is done with the ticket's revision: to be closed, `successful`
    /// or not, in the unit that records the event (unless it moved meanwhile).
    pub(crate) async fn close_ticket_in(
        tx: &mut WriteTx<'_>,
        row: &TicketRow,
        successful: bool,
        now: Millis,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE change_tickets SET state = $1, successful = $2, changed_at = $3 \
             WHERE gate_key = $4 AND canary = $5 AND checksum = $6 AND state IN ($7, $8, $9)",
        )
        .bind(state::CLOSING)
        .bind(i64::from(successful))
        .bind(now)
        .bind(row.gate.to_string())
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .bind(state::OPEN)
        .bind(state::OPENED)
        .bind(state::REJECTED)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// A ticket looked at now (to the back of the line), and whether its
    /// canary still waits for it.
    pub async fn touch_ticket(self, row: &TicketRow, waiting: bool, now: Millis) -> Result<()> {
        sqlx::query(
            "UPDATE change_tickets SET changed_at = $1, seen_at = CASE WHEN $2 = 1 THEN $1 ELSE seen_at END \
             WHERE gate_key = $3 AND canary = $4 AND checksum = $5 AND state = $6",
        )
        .bind(now)
        .bind(i64::from(waiting))
        .bind(row.gate.to_string())
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .bind(row.state.clone())
        .execute(&self.store.pool)
        .await?;
        Ok(())
    }

    /// Marks a ticket to be closed unsuccessfully (its canary has long
    /// stopped waiting for it).
    pub async fn abandon_ticket(self, row: &TicketRow, now: Millis) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE change_tickets SET state = $1, successful = 0, changed_at = $2 \
             WHERE gate_key = $3 AND canary = $4 AND checksum = $5 AND state = $6",
        )
        .bind(state::CLOSING)
        .bind(now)
        .bind(row.gate.to_string())
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .bind(row.state.clone())
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Forgets closed tickets last changed before `before`, and claims that
    /// were never answered (a replica that died mid-call) before `stale`.
    pub async fn prune_tickets(self, before: Millis, stale: Millis) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM change_tickets WHERE (state = $1 AND changed_at < $2) OR (state = $3 AND changed_at < $4)",
        )
        .bind(state::CLOSED)
        .bind(before)
        .bind(state::CREATING)
        .bind(stale)
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

fn ticket_from_row(row: &sqlx::any::AnyRow) -> Result<TicketRow> {
    Ok(TicketRow {
        gate: key_in(row, "gate_key")?,
        canary: row.try_get("canary")?,
        checksum: row.try_get("checksum")?,
        cluster: row.try_get("cluster")?,
        number: row.try_get("number")?,
        state: row.try_get("state")?,
        successful: row.try_get::<i64, _>("successful")? != 0,
        changed_at: row.try_get("changed_at")?,
        seen_at: row.try_get("seen_at")?,
    })
}
