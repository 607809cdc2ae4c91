//! Wait deadlines, applied: a canary that waited for people past its deadline
//! is rolled back (the rollback gate opens for the waiting revision, which
//! Flagger checks while it waits for promotion), or its wait is closed for
//! people, and the PR and the Slack thread are told why. Each wait's deadline
//! is acted on once, by whichever replica marks it first.

use std::collections::BTreeMap;

use super::unit::{audit_entry, Unit};
use super::*;
use crate::gate::deadline::OnDeadline;
use crate::gate::timers::WaitFacts;
use crate::gate::{AuditAction, GateKind, Source};
use crate::store::{EventRow, WaitRow, WAIT_PAGE};

/// Who acts when a deadline passes, in the audit log.
pub fn policy_actor() -> Actor {
    Actor::new("policy", Source::Gatebot)
}

/// What a stored wait's timers depend on.
pub(super) fn facts<'a>(
    wait: &'a WaitRow,
    canary: &'a CanaryRef,
    metadata: &'a BTreeMap<String, String>,
) -> WaitFacts<'a> {
    WaitFacts {
        kind: wait.gate.kind,
        scope: &wait.gate.scope,
        canary,
        metadata,
        started_at: wait.started_at,
        authenticated: wait.vouched,
    }
}

impl<'e> Deadlines<'e> {
    /// Acts on every wait whose deadline passed: only those are read, a page
    /// at a time, however many other waits there are. Returns how many.
    pub async fn enforce_deadlines(self) -> Result<usize, CommandError> {
        let now = self.engine.now();
        let mut acted = 0;
        let mut after = None;
        loop {
            let page = self.engine.store.waits().due_waits(now, after).await?;
            for wait in &page {
                acted += usize::from(self.deadline_due(wait, now).await?);
            }
            match page.last() {
                Some(last) if page.len() == WAIT_PAGE => {
                    after = Some((last.due_at.unwrap_or(now), last.id))
                }
                _ => break,
            }
        }
        Ok(acted + self.enforce_announcement_deadlines(now).await?)
    }

    /// A wait whose deadline fell: acted on by the rule that set it.
    async fn deadline_due(self, wait: &WaitRow, now: Millis) -> Result<bool, CommandError> {
        let Some(canary) = wait.canary.clone() else {
            return Ok(false);
        };
        let metadata = strings(&wait.metadata);
        let deadline = match self
            .engine
            .settings
            .timers
            .deadline(&facts(wait, &canary, &metadata))
        {
            Ok(Some(d)) => d,
            Ok(None) => {
                // Set by a policy no longer in force.
                let mut unit = self.engine.commands().begin().await?;
                crate::store::Waits::set_timers(unit.tx(), wait.id, None, wait.remind_at).await?;
                unit.commit().await?;
                return Ok(false);
            }
            Err(why) => {
                // Said once: the wait is marked, so later passes skip it.
                tracing::warn!(gate = %wait.gate, canary = %canary, "{why}: no deadline");
                let mut unit = self.engine.commands().begin().await?;
                crate::store::Waits::mark_deadline(unit.tx(), wait.id, now).await?;
                unit.commit().await?;
                return Ok(false);
            }
        };
        self.deadline_passed(wait, &canary, deadline.after, deadline.action, now)
            .await
    }

    /// Works out every open wait's timers again by the policy in force (at
    /// start-up: the policy may have changed since they started). Writes
    /// only those that differ. Returns how many changed.
    pub async fn schedule_waits(self) -> Result<usize, CommandError> {
        let timers = &self.engine.settings.timers;
        let (mut after, mut changed) = (0, 0);
        loop {
            let page = self.engine.store.waits().open_waits_after(after).await?;
            let mut unit = self.engine.commands().begin().await?;
            for wait in &page {
                let Some(canary) = &wait.canary else { continue };
                let metadata = strings(&wait.metadata);
                let due = timers.due_at(&facts(wait, canary, &metadata));
                let sent = usize::try_from(wait.reminders_sent).unwrap_or(usize::MAX);
                let remind = timers.remind_at(wait.gate.kind, wait.started_at, sent);
                if (due, remind) != (wait.due_at, wait.remind_at) {
                    crate::store::Waits::set_timers(unit.tx(), wait.id, due, remind).await?;
                    changed += 1;
                }
            }
            unit.commit().await?;
            match page.last() {
                Some(last) if page.len() == WAIT_PAGE => after = last.id,
                _ => return Ok(changed),
            }
        }
    }

    /// One wait's deadline, in one unit: marked, acted on, audited, told.
    async fn deadline_passed(
        self,
        wait: &WaitRow,
        canary: &CanaryRef,
        after: std::time::Duration,
        action: OnDeadline,
        now: Millis,
    ) -> Result<bool, CommandError> {
        let mut unit = self.engine.commands().begin().await?;
        if !crate::store::Waits::mark_deadline(unit.tx(), wait.id, now).await? {
            unit.rollback().await;
            return Ok(false);
        }
        let message = deadline_message(wait, after, action);
        let who = Provenance::new(policy_actor()).reason(Some(message.clone()));
        if !act_on_deadline(&mut unit, wait, canary, action, &who, now).await? {
            unit.rollback().await;
            return Ok(false);
        }
        tell_deadline(&mut unit, wait, canary, action, message, now).await?;
        unit.commit().await?;
        let (key, revision) = (&wait.gate, &wait.checksum);
        tracing::info!(gate = %key, canary = %canary, revision = ?revision, action = %action, "wait deadline passed");
        Ok(true)
    }

    /// Closes the outside waits whose deadline passed: each ended as
    /// `deadline`, audited and told, once across replicas. How many.
    pub(super) async fn enforce_announcement_deadlines(
        self,
        now: Millis,
    ) -> Result<usize, CommandError> {
        let mut acted = 0;
        for wait in self.engine.store.waits().due_announcements(now).await? {
            acted += usize::from(self.announcement_due(&wait, now).await?);
        }
        Ok(acted)
    }

    async fn announcement_due(self, wait: &WaitRow, now: Millis) -> Result<bool, CommandError> {
        let mut unit = self.engine.commands().begin().await?;
        if !crate::store::Waits::mark_deadline(unit.tx(), wait.id, now).await? {
            unit.rollback().await;
            return Ok(false);
        }
        let key = &wait.gate;
        let after = wait.due_at.unwrap_or(now).saturating_sub(wait.started_at);
        let waited = humantime::format_duration(std::time::Duration::from_secs(
            u64::try_from(after / 1000).unwrap_or(0),
        ));
        let message =
            format!("waited {waited} at {key} without a decision: the deadline closed the wait");
        let who = Provenance::new(policy_actor()).reason(Some(message));
        crate::store::NamedGates::end_announcement(unit.tx(), key, "deadline", now).await?;
        let notice = Notice::WaitEnded {
            wait_id: wait.id,
            gate: key.clone(),
            canary: None,
            outcome: "deadline".into(),
            at: now,
        };
        unit.record(
            audit_entry(key, AuditAction::Deadline, &who, now),
            &[notice],
        )
        .await?;
        unit.commit().await?;
        tracing::info!(gate = %key, "the deadline of a wait no canary made passed");
        Ok(true)
    }
}

/// What the deadline did, in words for the audit log, the timeline and Slack.
fn deadline_message(wait: &WaitRow, after: std::time::Duration, action: OnDeadline) -> String {
    let key = &wait.gate;
    let waited = humantime::format_duration(after);
    let revision = &wait.checksum;
    let rollback = key.sibling(GateKind::Rollback);
    match action {
        OnDeadline::Rollback => format!(
            "waited {waited} at {key} for revision {revision} without a decision: the deadline rolls it back ({rollback} opened)"
        ),
        OnDeadline::Close => format!(
            "waited {waited} at {key} for revision {revision} without a decision: the deadline closed the wait; it stays closed until someone approves"
        ),
        OnDeadline::Nothing => format!(
            "waited {waited} at {key} for revision {revision} without a decision: the deadline passed"
        ),
    }
}

/// Rolls the canary back or audits the deadline, in `unit`; false when the
/// rollback gate cannot be opened (then nothing is to be kept).
async fn act_on_deadline(
    unit: &mut Unit<'_>,
    wait: &WaitRow,
    canary: &CanaryRef,
    action: OnDeadline,
    who: &Provenance,
    now: Millis,
) -> Result<bool, CommandError> {
    let (key, revision) = (&wait.gate, &wait.checksum);
    if action != OnDeadline::Rollback {
        let mut entry = audit_entry(key, AuditAction::Deadline, who, now);
        entry.canary = Some(canary.clone());
        entry.revision = Some(revision.clone());
        unit.record(entry, &[]).await?;
        return Ok(true);
    }
    // For the waiting canary and revision only: it never rolls back the
    // next revision, nor any other canary at this gate.
    let rollback = key.sibling(GateKind::Rollback);
    let who = who.clone().only(canary.clone(), revision.clone());
    match unit.open(&rollback, &who).await {
        Ok(_) => Ok(true),
        Err(CommandError::Store(e)) => Err(e.into()),
        Err(other) => {
            tracing::warn!(gate = %rollback, error = %other, "the deadline cannot open the rollback gate");
            Ok(false)
        }
    }
}

/// Puts the deadline on the canary's timeline (which the PR's status comment
/// shows, and its Slack thread); a closing deadline takes the message's buttons.
async fn tell_deadline(
    unit: &mut Unit<'_>,
    wait: &WaitRow,
    canary: &CanaryRef,
    action: OnDeadline,
    message: String,
    now: Millis,
) -> Result<(), StoreError> {
    let (key, revision) = (&wait.gate, &wait.checksum);
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
        cluster: wait.cluster.clone(),
    };
    crate::store::History::insert_event(unit.tx(), &event).await?;
    let mut notices = vec![Notice::CanaryEvent {
        canary: canary.clone(),
        gates: vec![key.clone()],
        kind: "deadline".into(),
        message,
        event_type: "Warning".into(),
        phase: wait.phase.to_string(),
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
    unit.notify(&notices).await
}

/// A wait's metadata as the hook sent it, values as text.
pub(super) fn strings(metadata: &serde_json::Value) -> BTreeMap<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::GateKey;

    /// Under `[[environments]]` an unauthenticated check's wait has its
    /// gate's cluster too: its metadata's deadline stays Flagger's claim.
    #[test]
    fn a_stored_wait_is_authenticated_only_when_a_token_vouched_for_it() {
        let gate = GateKey::parse("/gates/promote/acme/shop/pr/42@prod", None).unwrap();
        let canary: CanaryRef = "test/podinfo".parse().unwrap();
        let mut wait = WaitRow {
            id: 1,
            gate,
            canary: Some(canary.clone()),
            checksum: "rev-a".into(),
            phase: crate::gate::Phase::WaitingPromotion,
            metadata: serde_json::json!({}),
            started_at: 0,
            ended_at: None,
            outcome: None,
            reminders_sent: 0,
            cluster: Some("prod".parse().unwrap()),
            vouched: false,
            due_at: None,
            remind_at: None,
        };
        let metadata = BTreeMap::new();
        assert!(!facts(&wait, &canary, &metadata).authenticated);
        wait.vouched = true;
        assert!(facts(&wait, &canary, &metadata).authenticated);
    }
}
