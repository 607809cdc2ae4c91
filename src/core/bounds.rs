//! Open waits are bounded. Anyone who reaches the gate URLs can start a wait
//! (one per new URL or canary name), so without a Flagger token a wait is a
//! claim: at most [`OPEN_WAITS_PER_GATE`] such waits are open at one gate and
//! [`OPEN_WAITS`] in all. A new one past either bound ends an older one
//! (`outcome = "evicted"`): among the [`CANDIDATES`] oldest, first one whose
//! canary never asked again after its wait started (what a made-up check
//! does), else the oldest. A wait that a token vouched for is never ended for
//! room, and a check is answered as it would be either way (the wait only
//! decides who is told).
//!
//! A wait whose canary stopped asking ends too (`outcome = "abandoned"`):
//! after [`SILENT_AFTER`], or ten times the canary's analysis interval when
//! that is longer (its `interval` metadata, bounded to an hour).
//!
//! A made-up wait that ends either way also forgets its canary's last check
//! (store and memory), and one ended for room whose canary never asked
//! again also its audit entry, so a flood of made-up canaries leaves nothing
//! behind but its rows in `waits`, pruned with the history
//! (`[limits] retention_history`) and at most 2,000 open waits' entries.

use super::*;
use crate::store::OpenWait;

/// The most open waits without a Flagger token at one gate.
pub const OPEN_WAITS_PER_GATE: i64 = 100;

/// The most open waits without a Flagger token in all.
pub const OPEN_WAITS: i64 = 2_000;

/// How many of the oldest waits are looked at to choose the one to end.
const CANDIDATES: i64 = 32;

/// A wait whose canary has not asked for this long ends as abandoned
/// (Flagger asks every analysis interval while a canary waits).
pub const SILENT_AFTER: Millis = 30 * 60_000;

/// A canary with a long interval may stay silent this many intervals.
const SILENT_INTERVALS: u32 = 10;

impl<'e> Bounds<'e> {
    /// Ends older made-up waits until one more fits at `key` and in all, in
    /// the check's transaction. The waits ended, for their notices.
    pub(super) async fn make_room(
        self,
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        now: Millis,
    ) -> Result<Vec<OpenWait>, StoreError> {
        let mut ended = Vec::new();
        for (scope, most) in [(Some(key), OPEN_WAITS_PER_GATE), (None, OPEN_WAITS)] {
            let open = crate::store::Waits::open_unvouched_waits(tx, scope).await?;
            if open < most {
                continue;
            }
            // One at a time keeps a flood's checks cheap; more only after the
            // bounds were lowered.
            let over = (open - most + 1).min(CANDIDATES);
            let mut candidates =
                crate::store::Waits::oldest_unvouched_waits(tx, scope, CANDIDATES).await?;
            candidates.retain(|w| !ended.iter().any(|e: &OpenWait| e.id == w.id));
            for wait in pick(candidates, over) {
                if crate::store::Waits::end_wait_by_id(tx, &wait, "evicted", now).await? {
                    crate::store::Waits::forget_observation(tx, &wait.gate, &wait.canary).await?;
                    // Ended for room by a flood: one asked once leaves no
                    // audit entry either (the audit is kept a year).
                    if !asked_again(&wait) {
                        crate::store::Waits::forget_wait_entry(tx, &wait).await?;
                    }
                    ended.push(wait);
                }
            }
        }
        self.engine
            .budget()
            .count_refused("wait", key.cluster.as_ref(), ended.len());
        Ok(ended)
    }

    /// Ends the waits whose canary stopped asking (see the module), told as
    /// any ending is. How many.
    pub async fn end_silent_waits(self) -> Result<usize, CommandError> {
        let now = self.engine.now();
        let mut ended = 0;
        for wait in self
            .engine
            .store
            .waits()
            .silent_waits(now - SILENT_AFTER)
            .await?
        {
            let last = wait.last_seen.unwrap_or(wait.started_at);
            if now - last < silent_after(&wait.metadata) {
                continue;
            }
            let mut tx = self.engine.store.begin().await?;
            if !crate::store::Waits::end_wait_by_id(&mut tx, &wait, "abandoned", now).await? {
                tx.rollback().await;
                continue;
            }
            if !wait.vouched {
                crate::store::Waits::forget_observation(&mut tx, &wait.gate, &wait.canary).await?;
            }
            let notice = ended_notice(&wait, "abandoned", now);
            let queued = self.engine.finish(&mut tx, &[], &[notice], now).await?;
            let applying = self.engine.applying.lock().await;
            tx.commit().await?;
            self.forget_wait(&wait);
            drop(applying);
            self.engine.after_commit(&[], queued);
            tracing::info!(gate = %wait.gate, canary = %wait.canary, "wait abandoned: its canary stopped asking");
            ended += 1;
        }
        Ok(ended)
    }

    /// Memory after a bounded wait ended: a made-up canary's last check goes.
    pub(super) fn forget_wait(self, wait: &OpenWait) {
        let mut memory = self.engine.memory();
        match wait.vouched {
            true => memory.end_wait(&wait.gate, &wait.canary),
            false => memory.forget(&wait.gate, &wait.canary),
        }
    }
}

fn asked_again(wait: &OpenWait) -> bool {
    wait.last_seen.is_some_and(|s| s > wait.started_at)
}

/// The notice of a bounded wait's end: its messages change as for any ending.
pub(super) fn ended_notice(wait: &OpenWait, outcome: &str, at: Millis) -> Notice {
    Notice::WaitEnded {
        wait_id: wait.id,
        gate: wait.gate.clone(),
        canary: Some(wait.canary.clone()),
        outcome: outcome.to_string(),
        at,
    }
}

/// `over` waits to end among the oldest: those whose canary never asked
/// again first, then by age.
fn pick(mut candidates: Vec<OpenWait>, over: i64) -> Vec<OpenWait> {
    // Stable: each group stays oldest first.
    candidates.sort_by_key(asked_again);
    candidates.truncate(usize::try_from(over).unwrap_or(0));
    candidates
}

/// How long the wait's canary may stay silent before its wait is abandoned.
fn silent_after(metadata: &serde_json::Value) -> Millis {
    let interval = metadata
        .get("interval")
        .and_then(serde_json::Value::as_str)
        .and_then(crate::gate::interval::bounded);
    let by_interval = interval.map_or(0, |i| {
        Millis::try_from((i * SILENT_INTERVALS).as_millis()).unwrap_or(Millis::MAX)
    });
    SILENT_AFTER.max(by_interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(id: i64, started_at: Millis, last_seen: Millis) -> OpenWait {
        OpenWait {
            id,
            gate: GateKey::parse("/gates/promote/acme/shop/pr/1", None).unwrap(),
            canary: CanaryRef::new("test", &format!("c{id}")).unwrap(),
            started_at,
            last_seen: Some(last_seen),
            metadata: serde_json::json!({}),
            vouched: false,
        }
    }

    #[test]
    fn a_canary_that_asks_again_is_ended_last() {
        let ids = |w: Vec<OpenWait>| w.iter().map(|w| w.id).collect::<Vec<_>>();
        let asks = wait(1, 10, 70);
        let once = [wait(2, 20, 20), wait(3, 30, 30)];
        let all = vec![asks.clone(), once[0].clone(), once[1].clone()];
        assert_eq!(ids(pick(all.clone(), 1)), vec![2]);
        assert_eq!(ids(pick(all, 3)), vec![2, 3, 1]);
    }

    #[test]
    fn a_long_interval_waits_longer_but_not_without_end() {
        let of = |v: serde_json::Value| silent_after(&v);
        assert_eq!(of(serde_json::json!({})), SILENT_AFTER);
        assert_eq!(of(serde_json::json!({"interval": "1m"})), SILENT_AFTER);
        assert_eq!(of(serde_json::json!({"interval": "10m"})), 100 * 60_000);
        assert_eq!(
            of(serde_json::json!({"interval": "99999999999y"})),
            10 * 3_600_000
        );
    }
}
