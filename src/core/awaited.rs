//! Waits that something outside Flagger starts: a GitHub deployment that an
//! environment's protection rule holds until a pull request's gate opens.
//! Started here, for every channel alike: announced as a canary's wait is
//! (`Notice::WaitStarted`, no canary), ended when people decide the gate,
//! and closed by the deadline of the policy's rules that name no canary.

use std::collections::BTreeMap;

use super::deadlines::policy_actor;
use super::unit::{audit_entry, Unit};
use super::{CommandError, Engine, Provenance};
use crate::gate::{Actor, AuditAction, Change, GateKey, GateStatus, Millis};
use crate::notify::Notice;
use crate::store::{ProtectionRequest, Store, StoreError, WaitRow};

/// What starting an outside wait found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Awaited {
    /// The gate is open now, by this change: nothing to wait for.
    Open(Change),
    /// The wait is announced (now, or by an earlier request).
    Waiting,
}

impl Unit<'_> {
    /// Stores a deployment's protection request in this unit; false when the
    /// same workflow run and environment wait already (a redelivery).
    pub async fn put_protection_request(
        &mut self,
        request: &ProtectionRequest,
    ) -> Result<bool, StoreError> {
        Store::put_protection_request(self.tx(), request).await
    }

    /// Starts people's wait at `key` for something outside Flagger, in this
    /// unit, unless the gate is open already.
    pub async fn await_gate(
        &mut self,
        key: &GateKey,
        reason: String,
        metadata: BTreeMap<String, String>,
    ) -> Result<Awaited, CommandError> {
        let now = self.now();
        let gate = self.gate(key).await?;
        if let GateStatus::Open(a) = &gate.status {
            if !a.expired(now) && !a.exclusive {
                return Ok(Awaited::Open(a.change.clone()));
            }
        }
        let text = serde_json::to_string(&metadata)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode metadata: {e}")))?;
        let timers = &self.engine().settings().timers;
        let due = timers.due_without_canary(key.kind, &key.scope, now);
        let Some(wait_id) = Store::start_announcement(self.tx(), key, &text, now, due).await?
        else {
            return Ok(Awaited::Waiting);
        };
        let notice = Notice::WaitStarted {
            wait_id,
            gate: key.clone(),
            canary: None,
            checksum: String::new(),
            phase: String::new(),
            reason: reason.clone(),
            metadata,
            at: now,
        };
        let who = Provenance::new(Actor::gatebot()).reason(Some(reason));
        self.record(audit_entry(key, AuditAction::Wait, &who, now), &[notice])
            .await?;
        Ok(Awaited::Waiting)
    }
}

impl Engine {
    /// Closes the outside waits whose deadline passed: each ended as
    /// `deadline`, audited and told, once across replicas. How many.
    pub(super) async fn enforce_announcement_deadlines(
        &self,
        now: Millis,
    ) -> Result<usize, CommandError> {
        let mut acted = 0;
        for wait in self.store.due_announcements(now).await? {
            acted += usize::from(self.announcement_due(&wait, now).await?);
        }
        Ok(acted)
    }

    async fn announcement_due(&self, wait: &WaitRow, now: Millis) -> Result<bool, CommandError> {
        let mut unit = self.begin().await?;
        if !Store::mark_deadline(unit.tx(), wait.id, now).await? {
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
        Store::end_announcement(unit.tx(), key, "deadline", now).await?;
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
