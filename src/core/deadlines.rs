//! Wait deadlines, applied: a canary that waited for people past its deadline
//! is rolled back (the rollback gate opens for the waiting revision, which
//! Flagger checks while it waits for promotion), or its wait is closed for
//! people, and the PR and the Slack thread are told why. Each wait's deadline
//! is acted on once, by whichever replica marks it first.

use std::collections::BTreeMap;

use super::unit::audit_entry;
use super::*;
use crate::gate::deadline::{deadline_for, DeadlineRule, OnDeadline};
use crate::gate::{AuditAction, GateKind, Source};
use crate::store::{EventRow, WaitRow};

/// The most waits looked at in one pass; the rest wait for the next one.
const PASS: i64 = 1000;

/// Who acts when a deadline passes, in the audit log.
pub fn policy_actor() -> Actor {
    Actor::new("policy", Source::Gatebot)
}

impl Engine {
    /// Acts on every wait whose deadline passed. Returns how many.
    pub async fn enforce_deadlines(&self, rules: &[DeadlineRule]) -> Result<usize, EngineError> {
        let now = self.now();
        let mut acted = 0;
        for wait in self.store.waits_without_deadline(PASS).await? {
            let Some(canary) = wait.canary.clone() else {
                continue;
            };
            let metadata = strings(&wait.metadata);
            let deadline =
                match deadline_for(rules, wait.gate.kind, &wait.gate.scope, &canary, &metadata) {
                    Ok(Some(d)) => d,
                    Ok(None) => continue,
                    Err(why) => {
                        // Said once: the wait is marked, so later passes skip it.
                        tracing::warn!(gate = %wait.gate, canary = %canary, "{why}: no deadline");
                        let mut unit = self.begin().await?;
                        Store::mark_deadline(unit.tx(), wait.id, now).await?;
                        unit.commit().await?;
                        continue;
                    }
                };
            let due = wait.started_at + deadline.after.as_millis() as Millis;
            if now < due {
                continue;
            }
            if self
                .deadline_passed(&wait, &canary, deadline.after, deadline.action, now)
                .await?
            {
                acted += 1;
            }
        }
        Ok(acted)
    }

    /// One wait's deadline, in one unit: marked, acted on, audited, told.
    async fn deadline_passed(
        &self,
        wait: &WaitRow,
        canary: &CanaryRef,
        after: std::time::Duration,
        action: OnDeadline,
        now: Millis,
    ) -> Result<bool, EngineError> {
        let mut unit = self.begin().await?;
        if !Store::mark_deadline(unit.tx(), wait.id, now).await? {
            unit.rollback().await;
            return Ok(false);
        }
        let key = &wait.gate;
        let waited = humantime::format_duration(after);
        let revision = &wait.checksum;
        let rollback = GateKey::new(GateKind::Rollback, key.scope.clone());
        let message = match action {
            OnDeadline::Rollback => format!(
                "waited {waited} at {key} for revision {revision} without a decision: the deadline rolls it back ({rollback} opened)"
            ),
            OnDeadline::Close => format!(
                "waited {waited} at {key} for revision {revision} without a decision: the deadline closed the wait; it stays closed until someone approves"
            ),
            OnDeadline::Nothing => format!(
                "waited {waited} at {key} for revision {revision} without a decision: the deadline passed"
            ),
        };
        let who = Provenance::new(policy_actor()).reason(Some(message.clone()));
        match action {
            OnDeadline::Rollback => {
                // Pinned to the waiting revision: it never rolls back the next one.
                let who = who.clone().revision(canary.clone(), revision.clone());
                if let Err(e) = unit.open(&rollback, &who).await {
                    unit.rollback().await;
                    return match e {
                        EngineError::Store(e) => Err(e.into()),
                        other => {
                            tracing::warn!(gate = %rollback, error = %other, "the deadline cannot open the rollback gate");
                            Ok(false)
                        }
                    };
                }
            }
            OnDeadline::Close | OnDeadline::Nothing => {
                let entry = audit_entry(key, AuditAction::Deadline, &who, now);
                let mut entry = entry;
                entry.canary = Some(canary.clone());
                entry.revision = Some(revision.clone());
                unit.record(entry, &[]).await?;
            }
        }
        // On the canary's timeline, which the PR's status comment shows, and
        // in its Slack thread.
        let event = EventRow {
            received_at: now,
            canary: canary.clone(),
            phase: wait.phase.clone(),
            checksum: revision.clone(),
            event_type: "Warning".into(),
            kind: "deadline".into(),
            message: message.clone(),
            flagger_at: None,
            metadata: wait.metadata.to_string(),
        };
        Store::insert_event(unit.tx(), &event).await?;
        let mut notices = vec![Notice::CanaryEvent {
            canary: canary.clone(),
            gates: vec![key.clone()],
            kind: "deadline".into(),
            message,
            event_type: "Warning".into(),
            phase: wait.phase.clone(),
            checksum: revision.clone(),
            metadata: strings(&wait.metadata),
            at: now,
        }];
        if action == OnDeadline::Close {
            // Over for people: the message loses its buttons. Flagger still
            // asks, so the wait itself goes on and is not announced again.
            notices.push(Notice::WaitEnded {
                wait_id: wait.id,
                gate: key.clone(),
                canary: Some(canary.clone()),
                outcome: "deadline".into(),
                at: now,
            });
        }
        unit.notify(&notices).await?;
        unit.commit().await?;
        tracing::info!(gate = %key, canary = %canary, revision = %revision, action = %action, "wait deadline passed");
        Ok(true)
    }
}

/// A wait's metadata as the hook sent it, values as text.
fn strings(metadata: &serde_json::Value) -> BTreeMap<String, String> {
    let Some(map) = metadata.as_object() else {
        return BTreeMap::new();
    };
    map.iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), v)
        })
        .collect()
}
