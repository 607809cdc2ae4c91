//! What people do to gates, one change at a time: open, close, hold, unhold,
//! refuse, and expiry. Each is one [`Unit`]; several changes that belong
//! together (one command, one delivery) share one with [`Commands::begin`].

use super::unit::Unit;
use super::*;

/// How many times a change whose gate was locked is tried before it is
/// refused (503): with `store::LOCK_TIMEOUT` of 1 s, an answer within 4 s.
const ATTEMPTS: u32 = 3;

/// The wait before attempt `tried + 1`: 100 ms, then 200 ms, and up to as much
/// again at random, so that writes that met at one lock do not meet again.
fn backoff(tried: u32) -> Duration {
    let base = Duration::from_millis(50 << tried.min(4));
    let random = uuid::Uuid::new_v4().as_u128() as u64 % (base.as_millis() as u64 + 1);
    base + Duration::from_millis(random)
}

#[derive(Clone, Copy)]
enum Act {
    Open,
    Close,
    Hold,
    Unhold,
}

impl<'e> Commands<'e> {
    /// Starts a unit of work.
    pub async fn begin(self) -> Result<Unit<'e>, StoreError> {
        Unit::begin(self.engine).await
    }

    /// Queues jobs that no gate change carries (replies to a click or a command)
    /// and wakes the outbox. Returns how many were queued.
    pub async fn enqueue(self, jobs: &[crate::store::NewJob]) -> Result<usize, StoreError> {
        let now = self.engine.now();
        let mut tx = self.engine.store.begin().await?;
        let queued = queue_jobs(&mut tx, jobs, now).await?;
        tx.commit().await?;
        self.engine.after_commit(&[], queued);
        Ok(queued)
    }

    /// Opens a gate ([`Unit::open`]) in a unit of its own.
    pub async fn open(self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.alone(Act::Open, key, who).await
    }

    /// Closes a gate ([`Unit::close`]) in a unit of its own.
    pub async fn close(self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.alone(Act::Close, key, who).await
    }

    /// Holds a gate ([`Unit::hold`]) in a unit of its own.
    pub async fn hold(self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.alone(Act::Hold, key, who).await
    }

    /// Lifts a hold ([`Unit::unhold`]) in a unit of its own.
    pub async fn unhold(self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.alone(Act::Unhold, key, who).await
    }

    /// One change in a unit of its own, tried again when its gate was locked.
    async fn alone(self, act: Act, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.retrying(|| self.alone_once(act, key, who)).await
    }

    async fn alone_once(
        self,
        act: Act,
        key: &GateKey,
        who: &Provenance,
    ) -> Result<Gate, CommandError> {
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

    /// Runs `attempt` until it succeeds or fails otherwise than on a lock
    /// (`StoreError::Contended`), at most [`ATTEMPTS`] times, a short random
    /// while apart. Each attempt is a unit of its own: the write turn and the
    /// transaction are given up before the wait.
    pub(crate) async fn retrying<T, F, Fut>(self, mut attempt: F) -> Result<T, CommandError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, CommandError>>,
    {
        let mut tried = 1;
        loop {
            match attempt().await {
                Err(CommandError::Store(e)) if e.contended() && tried < ATTEMPTS => {
                    tracing::info!(error = %e, attempt = tried, "a gate was locked: trying again");
                    tokio::time::sleep(backoff(tried)).await;
                    tried += 1;
                }
                done => return done,
            }
        }
    }

    /// Records that someone was refused ([`Unit::refuse`]).
    pub async fn refuse(self, key: &GateKey, who: &Provenance) -> Result<(), CommandError> {
        let mut unit = self.begin().await?;
        unit.refuse(key, who).await?;
        unit.commit().await?;
        Ok(())
    }

    /// Closes approvals whose time ran out, so the record says so even when no
    /// canary asks. Returns how many.
    pub async fn expire_due(self) -> Result<usize, CommandError> {
        let now = self.engine.now();
        let due = self.engine.store.gates().expired_gates(now).await?;
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
