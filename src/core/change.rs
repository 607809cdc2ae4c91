//! What people do to gates, one change at a time: open, close, hold, unhold,
//! refuse, and expiry. Each is one [`Unit`]; several changes that belong
//! together (one command, one delivery) share one with [`Engine::begin`].

use super::*;

#[derive(Clone, Copy)]
enum Act {
    Open,
    Close,
    Hold,
    Unhold,
}

impl Engine {
    /// Opens a gate ([`Unit::open`]) in a unit of its own.
    pub async fn open(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.alone(Act::Open, key, who).await
    }

    /// Closes a gate ([`Unit::close`]) in a unit of its own.
    pub async fn close(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.alone(Act::Close, key, who).await
    }

    /// Holds a gate ([`Unit::hold`]) in a unit of its own.
    pub async fn hold(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.alone(Act::Hold, key, who).await
    }

    /// Lifts a hold ([`Unit::unhold`]) in a unit of its own.
    pub async fn unhold(&self, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        self.alone(Act::Unhold, key, who).await
    }

    async fn alone(&self, act: Act, key: &GateKey, who: &Provenance) -> Result<Gate, EngineError> {
        let mut unit = self.begin().await?;
        let done = match act {
            Act::Open => unit.open(key, who).await,
            Act::Close => unit.close(key, who).await,
            Act::Hold => unit.hold(key, who).await,
            Act::Unhold => unit.unhold(key, who).await,
        };
        match done {
            Ok(gate) => {
                unit.commit().await?;
                Ok(gate)
            }
            Err(e) => {
                unit.rollback().await;
                Err(e)
            }
        }
    }

    /// Records that someone was refused ([`Unit::refuse`]).
    pub async fn refuse(&self, key: &GateKey, who: &Provenance) -> Result<(), EngineError> {
        let mut unit = self.begin().await?;
        unit.refuse(key, who).await?;
        unit.commit().await?;
        Ok(())
    }

    /// Closes approvals whose time ran out, so the record says so even when no
    /// canary asks. Returns how many.
    pub async fn expire_due(&self) -> Result<usize, EngineError> {
        let now = self.now();
        let due = self.store.expired_gates(now).await?;
        let who = Provenance::new(Actor::gatebot()).reason(Some("approval expired".into()));
        let mut expired = 0;
        for key in &due {
            let mut unit = self.begin().await?;
            let gate = unit
                .change(key, AuditAction::Expire, &who, |gate, now, _| {
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
            unit.commit().await?;
            expired += usize::from(matches!(gate.status, GateStatus::Closed { .. }));
        }
        Ok(expired)
    }
}
