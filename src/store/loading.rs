//! Paged reads that fill the engine's memory at start. A page at a time, so that
//! start-up never holds every row at once (decoded rows of 100,000 gates are about
//! a hundred megabytes, and the allocator keeps what it once held), and each
//! gate's pins come with it in one ordered join.

use sqlx::Row;

use super::pages::{seen_from_row, SEEN_COLUMNS};
use super::Loading;
use super::{rows, CanarySeen, Result};
use crate::gate::{Gate, GateKey};

const PAGE: i64 = 2000;

impl<'s> Loading<'s> {
    /// Every gate with its current approval's pins, in key order.
    pub async fn each_gate(self, mut f: impl FnMut(Gate)) -> Result<()> {
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
            .fetch_all(&self.store.pool)
            .await?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            let first: String = rows[0].try_get("key")?;
            after = last.try_get("key")?;
            let mut votes = self.store.votes().votes_between(&first, &after).await?;
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

    /// Every canary's last check at each gate, in (gate, canary) order.
    pub async fn each_observation(self, mut f: impl FnMut(GateKey, CanarySeen)) -> Result<()> {
        let (mut gate, mut canary) = (String::new(), String::new());
        loop {
            let rows = sqlx::query(&format!(
                "SELECT {SEEN_COLUMNS} FROM observations o WHERE (o.gate_key, o.canary) > ($1, $2) \
                 ORDER BY o.gate_key, o.canary LIMIT $3"
            ))
            .bind(gate.clone())
            .bind(canary.clone())
            .bind(PAGE)
            .fetch_all(&self.store.pool)
            .await?;
            if rows.is_empty() {
                return Ok(());
            }
            for row in &rows {
                let (key, seen) = seen_from_row(row)?;
                // The cursor is the text as stored, so that pages meet exactly.
                gate = row.try_get("gate_key")?;
                canary = row.try_get("canary")?;
                f(key, seen);
            }
        }
    }
}
