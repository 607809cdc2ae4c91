//! Waits that something outside Flagger starts: a GitHub deployment that an
//! environment's protection rule holds until a pull request's gate opens.
//! Started here, for every channel alike: announced as a canary's wait is
//! (`Notice::WaitStarted`, no canary), ended when people decide the gate,
//! and closed by the deadline of the policy's rules that name no canary.

use std::collections::BTreeMap;

use super::unit::{audit_entry, Unit};
use super::{CommandError, Provenance};
use crate::gate::{Actor, AuditAction, Change, GateKey, GateStatus};
use crate::notify::Notice;
use crate::store::{ProtectionRequest, StoreError};

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
        crate::store::Protection::put_protection_request(self.tx(), request).await
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
        let Some(wait_id) =
            crate::store::NamedGates::start_announcement(self.tx(), key, &text, now, due).await?
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
