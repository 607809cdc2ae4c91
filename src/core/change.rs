//! What people do to gates: open, close, hold, unhold, refuse, and expiry.

use super::*;

impl Engine {
    /// Opens a gate: a new approval, expiring after the TTL, unpinned unless the
    /// person saw one revision (`Provenance::revision`). Refused when written
    /// before the gate's last close; a no-op when older than the approval in force.
    pub async fn open(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        let written = |at: Millis| who.written_at.is_some_and(|w| w < at);
        self.change(key, "open", who, |gate, now, ttl| match &gate.status {
            GateStatus::Held { change } => Err(EngineError::Held {
                gate: key.to_string(),
                by: change.by.name.clone(),
                via: change.by.source,
            }),
            GateStatus::Closed { change: Some(c) } if written(c.at) => {
                Err(EngineError::WrittenBeforeClose {
                    gate: key.to_string(),
                    closed_at: c.at,
                })
            }
            // Older than the approval in force: adds nothing, and must not re-arm
            // it with a fresh TTL and no pins.
            GateStatus::Open(a) if written(a.change.at) => Ok(None),
            _ => Ok(Some(GateStatus::Open(Approval {
                id: uuid::Uuid::new_v4().to_string(),
                change: Change {
                    by: who.actor.clone(),
                    reason: who.reason.clone(),
                    at: now,
                },
                expires_at: ttl
                    .filter(|_| key.kind.pinned())
                    .map(|t| now + t.as_millis() as Millis),
                pins: who
                    .revision
                    .iter()
                    .filter(|_| key.kind.pinned())
                    .map(|(canary, checksum)| (canary.to_string(), checksum.clone()))
                    .collect(),
            }))),
        })
        .await
    }

    /// Closes a gate (a hold stays a hold).
    pub async fn close(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.change(key, "close", who, |gate, now, _| {
            Ok(match gate.status {
                GateStatus::Held { .. } => None,
                _ => Some(GateStatus::Closed {
                    change: Some(Change {
                        by: who.actor.clone(),
                        reason: who.reason.clone(),
                        at: now,
                    }),
                }),
            })
        })
        .await
    }

    /// Closes a gate and refuses approvals until `unhold`.
    pub async fn hold(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.change(key, "hold", who, |_, now, _| {
            Ok(Some(GateStatus::Held {
                change: Change {
                    by: who.actor.clone(),
                    reason: who.reason.clone(),
                    at: now,
                },
            }))
        })
        .await
    }

    /// Lifts a hold; the gate stays closed until someone approves.
    pub async fn unhold(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.change(key, "unhold", who, |gate, now, _| {
            Ok(match gate.status {
                GateStatus::Held { .. } => Some(GateStatus::Closed {
                    change: Some(Change {
                        by: who.actor.clone(),
                        reason: who.reason.clone(),
                        at: now,
                    }),
                }),
                _ => None,
            })
        })
        .await
    }

    /// Records that someone was refused. Changes no gate.
    pub async fn refuse(&self, key: &GateKey, who: &Provenance) -> Result<(), EngineError> {
        let now = self.now();
        let entry = self.audit_entry(key, "refuse", who, now);
        let mut tx = self.store.begin().await?;
        if let Some(delivery) = &who.delivery {
            if self
                .store
                .applied(&mut tx, delivery, &key.to_string(), "refuse")
                .await?
            {
                tx.rollback().await;
                return Ok(());
            }
        }
        Store::audit(&mut tx, &entry).await?;
        tx.commit().await?;
        self.after_commit(std::slice::from_ref(&entry), 0);
        Ok(())
    }

    fn audit_entry(
        &self,
        key: &GateKey,
        action: &str,
        who: &Provenance,
        now: Millis,
    ) -> AuditEntry {
        AuditEntry {
            at: now,
            gate: key.to_string(),
            action: action.to_string(),
            actor: who.actor.clone(),
            reason: who.reason.clone(),
            revision: None,
            canary: None,
            delivery: who.delivery.clone(),
        }
    }

    /// One change by a person: computes the new status, writes it, audits it,
    /// queues notices. A delivery already applied changes nothing.
    async fn change(
        &self,
        key: &GateKey,
        action: &str,
        who: &Provenance,
        next: impl FnOnce(&Gate, Millis, Option<Duration>) -> Result<Option<GateStatus>, EngineError>,
    ) -> Result<Gate, EngineError> {
        let _turn = self.write.lock().await;
        let now = self.now();
        let mut gate = self.gate(key).await?;
        let mut tx = self.store.begin().await?;
        if let Some(delivery) = &who.delivery {
            if self
                .store
                .applied(&mut tx, delivery, &key.to_string(), action)
                .await?
            {
                tx.rollback().await;
                return Ok(gate);
            }
        }
        let status = match next(&gate, now, self.settings.approval_ttl) {
            Ok(Some(status)) => status,
            // Nothing to write (or a refusal such as a hold): end the transaction
            // cleanly rather than discarding its connection.
            Ok(None) => {
                tx.rollback().await;
                return Ok(gate);
            }
            Err(e) => {
                tx.rollback().await;
                return Err(e);
            }
        };
        gate.status = status;
        Store::put_gate(&mut tx, &gate).await?;
        if let (GateStatus::Open(a), Some((canary, _))) = (&gate.status, &who.revision) {
            if let Some(checksum) = a.pins.get(&canary.to_string()) {
                Store::pin(&mut tx, key, &a.id, canary, checksum, now).await?;
            }
        }
        let entry = self.audit_entry(key, action, who, now);
        let notice = Notice::GateChanged {
            gate: key.to_string(),
            action: action.to_string(),
            actor: who.actor.clone(),
            reason: who.reason.clone(),
            at: now,
        };
        let queued = self
            .finish(&mut tx, std::slice::from_ref(&entry), &[notice], now)
            .await?;
        tx.commit().await?;
        self.after_commit(std::slice::from_ref(&entry), queued);
        self.remember(&gate);
        tracing::info!(gate = %key, action, actor = %who.actor.name, source = %who.actor.source, "gate changed");
        Ok(gate)
    }

    /// Closes approvals whose time ran out, so the record says so even when no
    /// canary asks. Returns how many.
    pub async fn expire_due(&self) -> Result<usize, EngineError> {
        let now = self.now();
        let due: Vec<GateKey> = self
            .store
            .expired_gates(now)
            .await?
            .iter()
            .filter_map(|k| GateKey::parse(k, None).ok())
            .collect();
        let who = Provenance::new(Actor::gatebot()).reason(Some("approval expired".into()));
        let mut expired = 0;
        for key in &due {
            let gate = self
                .change(key, "expire", &who, |gate, now, _| {
                    Ok(match &gate.status {
                        GateStatus::Open(a) if a.expired(now) => Some(GateStatus::Closed {
                            change: Some(Change {
                                by: Actor::gatebot(),
                                reason: Some("approval expired".into()),
                                at: now,
                            }),
                        }),
                        _ => None,
                    })
                })
                .await?;
            expired += usize::from(matches!(gate.status, GateStatus::Closed { .. }));
        }
        Ok(expired)
    }
}
