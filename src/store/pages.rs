//! Paged reads for the operator API's gate list: a page is a range of gate keys,
//! so no request loads every gate or observation.
//!
//! Keys are compared and ordered by the database in one collation (`key > $1`
//! and `ORDER BY key` agree), so a cursor is simply the last key of a page.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::Pages;
use super::{rows, Result};
use crate::gate::audit::as_text;
use crate::gate::{Answer, CanaryRef, Gate, GateKey, GateStatus, Millis, Phase};

/// What one canary last asked one gate, as the gate list shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CanarySeen {
    #[serde(with = "as_text")]
    pub canary: CanaryRef,
    pub checksum: String,
    pub phase: Phase,
    pub answer: Answer,
    pub reason: String,
    pub last_seen: Millis,
    /// When its open wait started, if one is open.
    pub waiting_since: Option<Millis>,
}

/// The columns [`seen_from_row`] reads: an observation (`o`) and when its
/// open wait started.
pub(super) const SEEN_COLUMNS: &str =
    "o.gate_key, o.canary, o.checksum, o.phase, o.answer, o.reason, o.last_seen, \
     (SELECT w.started_at FROM waits w WHERE w.gate_key = o.gate_key AND w.canary = o.canary \
     AND w.ended_at IS NULL) AS waiting_since";

/// A canary's last check and its gate, from a row of [`SEEN_COLUMNS`].
pub(super) fn seen_from_row(r: &AnyRow) -> Result<(GateKey, CanarySeen)> {
    let seen = CanarySeen {
        canary: rows::canary_in(r, "canary")?,
        checksum: r.try_get("checksum")?,
        phase: rows::phase_in(r, "phase")?,
        answer: rows::answer_in(r, "answer")?,
        reason: r.try_get("reason")?,
        last_seen: r.try_get("last_seen")?,
        waiting_since: r.try_get("waiting_since")?,
    };
    Ok((rows::key_in(r, "gate_key")?, seen))
}

impl<'s> Pages<'s> {
    /// Up to `limit` keys, in order, after `after`, of every gate the list
    /// shows: those with a row and those only Flagger has asked.
    pub async fn gate_keys_after(self, after: Option<&str>, limit: i64) -> Result<Vec<GateKey>> {
        // Every key is longer than "", so "" starts from the first.
        let rows = sqlx::query(
            "SELECT k.key FROM (SELECT key FROM gates UNION SELECT gate_key AS key FROM observations) AS k \
             WHERE k.key > $1 ORDER BY k.key LIMIT $2",
        )
        .bind(after.unwrap_or("").to_string())
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(|r| rows::key_in(r, "key")).collect()
    }

    /// The stored gates with keys from `first` to `last`, with their pins.
    pub async fn gates_between(self, first: &str, last: &str) -> Result<Vec<Gate>> {
        let rows = sqlx::query("SELECT * FROM gates WHERE key >= $1 AND key <= $2 ORDER BY key")
            .bind(first.to_string())
            .bind(last.to_string())
            .fetch_all(&self.store.pool)
            .await?;
        let pin_rows = sqlx::query(
            "SELECT p.approval_id, p.canary, p.checksum FROM pins p \
             JOIN gates g ON g.approval_id = p.approval_id WHERE g.key >= $1 AND g.key <= $2",
        )
        .bind(first.to_string())
        .bind(last.to_string())
        .fetch_all(&self.store.pool)
        .await?;
        let mut pins: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for p in &pin_rows {
            pins.entry(p.try_get("approval_id")?)
                .or_default()
                .push((p.try_get("canary")?, p.try_get("checksum")?));
        }
        let mut votes = self.store.votes().votes_between(first, last).await?;
        let mut gates = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut gate = rows::gate_from_row(row)?;
            if let Some(v) = votes.remove(&gate.key.to_string()) {
                super::votes::attach(&mut gate, v);
            }
            if let GateStatus::Open(approval) = &mut gate.status {
                approval
                    .pins
                    .extend(pins.remove(&approval.id).into_iter().flatten());
            }
            gates.push(gate);
        }
        Ok(gates)
    }

    /// The canaries seen at the gates with keys from `first` to `last`, each
    /// with its gate.
    pub async fn canaries_between(
        self,
        first: &str,
        last: &str,
    ) -> Result<Vec<(GateKey, CanarySeen)>> {
        let rows = sqlx::query(&format!(
            "SELECT {SEEN_COLUMNS} FROM observations o \
             WHERE o.gate_key >= $1 AND o.gate_key <= $2 ORDER BY o.gate_key, o.canary"
        ))
        .bind(first.to_string())
        .bind(last.to_string())
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(seen_from_row).collect()
    }
}
