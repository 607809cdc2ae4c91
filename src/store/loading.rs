//! Paged reads that fill the engine's memory at start. A page at a time, so that
//! start-up never holds every row at once (decoded rows of 100,000 gates are about
//! a hundred megabytes, and the allocator keeps what it once held), and each
//! gate's pins come with it in one ordered join.

use sqlx::Row;

use super::{rows, Result, Store};
use crate::gate::{Answer, CanaryRef, Gate, GateKey, Millis, Phase};

const PAGE: i64 = 2000;

/// The last check of a canary at a gate, as the engine keeps it.
#[derive(Debug, Clone)]
pub struct SeenRow {
    pub gate: GateKey,
    pub canary: CanaryRef,
    pub checksum: String,
    pub phase: Phase,
    pub answer: Answer,
    pub reason: String,
    pub last_seen: Millis,
    pub wait_open: bool,
}

impl Store {
    /// Every gate with its current approval's pins, in key order.
    pub async fn each_gate(&self, mut f: impl FnMut(Gate)) -> Result<()> {
        let mut after = String::new();
        loop {
            let rows = sqlx::query(
                "SELECT g.*, p.canary AS pin_canary, p.checksum AS pin_checksum \
                 FROM (SELECT * FROM gates WHERE key > $1 ORDER BY key LIMIT $2) g \
                 LEFT JOIN pins p ON p.approval_id = g.approval_id AND g.status IN ('open', 'approving') \
                 ORDER BY g.key, p.canary",
            )
            .bind(after.clone())
            .bind(PAGE)
            .fetch_all(&self.pool)
            .await?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            let first: String = rows[0].try_get("key")?;
            after = last.try_get("key")?;
            let mut votes = self.votes_between(&first, &after).await?;
            let mut current: Option<(String, Gate)> = None;
            for row in &rows {
                let key: String = row.try_get("key")?;
                if current.as_ref().is_none_or(|(k, _)| *k != key) {
                    if let Some((_, gate)) = current.take() {
                        f(gate);
                    }
                    let mut gate = rows::gate_from_row(row)?;
                    if let Some(v) = votes.remove(&key) {
                        super::votes::attach(&mut gate, v);
                    }
                    current = Some((key, gate));
                }
                let pin: Option<String> = row.try_get("pin_canary")?;
                if let (Some(canary), Some((_, gate))) = (pin, current.as_mut()) {
                    if let Some(pins) = gate.status.pins_mut() {
                        pins.insert(canary, row.try_get("pin_checksum")?);
                    }
                }
            }
            if let Some((_, gate)) = current {
                f(gate);
            }
        }
    }

    /// Every observation, with whether its wait is open, in (gate, canary) order.
    pub async fn each_observation(&self, mut f: impl FnMut(SeenRow)) -> Result<()> {
        let (mut gate, mut canary) = (String::new(), String::new());
        loop {
            let rows = sqlx::query(
                "SELECT o.gate_key, o.canary, o.checksum, o.phase, o.answer, o.reason, o.last_seen, \
                 (SELECT w.id FROM waits w WHERE w.gate_key = o.gate_key AND w.canary = o.canary \
                  AND w.ended_at IS NULL) AS wait_id \
                 FROM observations o WHERE (o.gate_key, o.canary) > ($1, $2) \
                 ORDER BY o.gate_key, o.canary LIMIT $3",
            )
            .bind(gate.clone())
            .bind(canary.clone())
            .bind(PAGE)
            .fetch_all(&self.pool)
            .await?;
            if rows.is_empty() {
                return Ok(());
            }
            for row in &rows {
                let gate_key: String = row.try_get("gate_key")?;
                let canary_text: String = row.try_get("canary")?;
                let seen = SeenRow {
                    gate: rows::key_in(row, "gate_key")?,
                    canary: rows::canary_in(row, "canary")?,
                    checksum: row.try_get("checksum")?,
                    phase: rows::phase_in(row, "phase")?,
                    answer: rows::answer_in(row, "answer")?,
                    reason: row.try_get("reason")?,
                    last_seen: row.try_get("last_seen")?,
                    wait_open: row.try_get::<Option<i64>, _>("wait_id")?.is_some(),
                };
                gate = gate_key;
                canary = canary_text;
                f(seen);
            }
        }
    }
}
