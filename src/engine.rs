//! The application core: answers gate checks, applies approvals, records waits
//! and the Flagger timeline, and queues notifications. Uses the store; knows no HTTP.
//!
//! The steady-state check (same canary, same revision, same answer) reads memory
//! and writes nothing: with SQLite this process is the only writer, so its cache
//! of gates is the truth; with PostgreSQL other replicas write too, so the gate
//! row is read per check. Last-seen times are kept in memory and flushed in batches.

mod memory;
mod page;

pub use page::GatePage;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;

use crate::clock::SharedClock;
use crate::gate::event::{classify, EventKind};
use crate::gate::state::{closed_word, one_line, open_hint};
use crate::gate::{
    decide, wait_step, Actor, Answer, Approval, CanaryRef, Change, Channels, Check, Gate, GateKey,
    GateKind, GateStatus, Millis, RepoName, Scope, Verdict, WaitStep,
};
use crate::metrics::{ActionLabels, GateLabels, KindLabels, Metrics};
use crate::notify::{Notice, Notifier};
use crate::store::{
    AuditEntry, Backend, EventRow, ObservationRow, Store, StoreError, WaitRow, WriteTx,
};
use memory::{Memory, Observed, SeenEntry};

/// Errors a person gets told about (on the PR, in Slack, from the API).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{gate} is held by {by} via {via}: lift the hold first")]
    Held {
        gate: String,
        by: String,
        via: crate::gate::Source,
    },
    /// The command predates the gate's last close, so it was about an earlier
    /// revision (or a state someone has since ended).
    #[error("{gate} closed at {}, after this was sent: send it again if it still holds", crate::gate::state::rfc3339(*closed_at))]
    WrittenBeforeClose { gate: String, closed_at: Millis },
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub approval_ttl: Option<Duration>,
    pub default_repo: Option<RepoName>,
    /// How long a check may wait for the store before it answers closed.
    /// Flagger's webhook timeout is 10 s; the promise is an answer within 2 s.
    pub check_deadline: Duration,
    /// The ways of opening a gate that closed answers name.
    pub channels: Channels,
}

/// The default [`EngineSettings::check_deadline`].
pub const CHECK_DEADLINE: Duration = Duration::from_millis(1500);

/// The reason Flagger reads when the store could not record a check in time.
pub const STORE_BUSY: &str =
    "closed: gatebot cannot read its store in time (store busy: try again at the next poll)";

/// What Flagger sent with a check.
#[derive(Debug, Clone, Default)]
pub struct CheckInput {
    pub canary: Option<CanaryRef>,
    pub checksum: String,
    pub phase: String,
    pub metadata: BTreeMap<String, String>,
}

/// Who did something and on which delivery (for replays and the audit log).
#[derive(Debug, Clone)]
pub struct Provenance {
    pub actor: Actor,
    pub reason: Option<String>,
    /// Webhook delivery or click id: the same delivery never applies twice.
    pub delivery: Option<String>,
    /// When the person gave the command, by the source's signed time (GitHub's
    /// `updated_at`, Slack's request timestamp). An open written before the
    /// gate's last close is refused: it was about what came before.
    pub written_at: Option<Millis>,
    /// The revision the person saw (a click on a waiting message): the approval
    /// is pinned to it for that canary at once, so it never opens a newer one.
    pub revision: Option<(CanaryRef, String)>,
}

impl Provenance {
    pub fn new(actor: Actor) -> Self {
        Self {
            actor,
            reason: None,
            delivery: None,
            written_at: None,
            revision: None,
        }
    }

    pub fn reason(mut self, reason: Option<String>) -> Self {
        self.reason = reason.map(|r| one_line(&r)).filter(|r| !r.is_empty());
        self
    }

    pub fn delivery(mut self, delivery: impl Into<String>) -> Self {
        self.delivery = Some(delivery.into());
        self
    }

    pub fn written_at(mut self, at: Option<Millis>) -> Self {
        self.written_at = at;
        self
    }

    pub fn revision(mut self, canary: CanaryRef, checksum: impl Into<String>) -> Self {
        self.revision = Some((canary, checksum.into()));
        self
    }
}

pub struct Engine {
    store: Store,
    clock: SharedClock,
    settings: EngineSettings,
    metrics: Arc<Metrics>,
    notifier: Notifier,
    outbox_wake: Arc<Notify>,
    /// Every gate with SQLite (kept current by this process's writes), and the
    /// last check of every canary at every gate.
    memory: Mutex<Memory>,
    /// Serialises the slow path so two checks of one canary don't both start a wait.
    write: tokio::sync::Mutex<()>,
}

/// A gate as the API lists it.
#[derive(Debug, Clone, Serialize)]
pub struct GateSummary {
    pub gate: String,
    pub state: &'static str,
    pub by: Option<Actor>,
    pub reason: Option<String>,
    pub at: Option<Millis>,
    pub expires_at: Option<Millis>,
    pub canaries: Vec<CanarySeen>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CanarySeen {
    pub canary: String,
    pub checksum: String,
    pub phase: String,
    pub answer: String,
    pub reason: String,
    pub last_seen: Millis,
    pub waiting_since: Option<Millis>,
}

/// One gate in full.
#[derive(Debug, Clone, Serialize)]
pub struct GateDetail {
    #[serde(flatten)]
    pub gate: Gate,
    pub observations: Vec<ObservationRow>,
    pub waits: Vec<WaitRow>,
    pub audit: Vec<AuditEntry>,
}

impl Engine {
    pub async fn new(
        store: Store,
        clock: SharedClock,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
        notifier: Notifier,
        outbox_wake: Arc<Notify>,
    ) -> Result<Self, StoreError> {
        let mut memory = Memory::new(store.backend() == Backend::Sqlite);
        if memory.keeps_gates() {
            store.each_gate(|gate| memory.put_gate(&gate)).await?;
        }
        store
            .each_observation(|o| {
                if let Ok(gate) = GateKey::parse(&o.gate, None) {
                    memory.load(Observed {
                        gate: &gate,
                        canary: &o.canary,
                        checksum: &o.checksum,
                        phase: &o.phase,
                        answer: o.answer,
                        reason: &o.reason,
                        wait_open: o.wait_open,
                        last_seen: o.last_seen,
                    });
                }
            })
            .await?;
        memory.shrink_to_fit();
        tracing::info!(gates = memory.len(), "loaded gates and last checks");
        Ok(Self {
            store,
            clock,
            settings,
            metrics,
            notifier,
            outbox_wake,
            memory: Mutex::new(memory),
            write: tokio::sync::Mutex::new(()),
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The gate as it stands (closed when never touched).
    pub async fn gate(&self, key: &GateKey) -> Result<Gate, StoreError> {
        let found = match self.store.backend() {
            Backend::Sqlite => self.memory().gate(key),
            Backend::Postgres => self.store.load_gate(key).await?,
        };
        Ok(found.unwrap_or_else(|| Gate::closed(key.clone())))
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().expect("engine memory poisoned")
    }

    fn remember(&self, gate: &Gate) {
        self.memory().put_gate(gate);
    }

    /// Answers Flagger within the check deadline, whatever the store does.
    /// Without a canary (a GET with no body) it only peeks.
    ///
    /// A check that cannot read or record what it needs in time answers closed
    /// with [`STORE_BUSY`]; nothing of it is remembered, so the next poll tries
    /// again. Dropping the unfinished write rolls it back.
    pub async fn check(&self, key: &GateKey, input: &CheckInput) -> Result<Verdict, EngineError> {
        // SQLite's steady state is answered from memory, with no timer to arm.
        if self.store.backend() == Backend::Sqlite {
            let gate = self
                .memory()
                .gate(key)
                .unwrap_or_else(|| Gate::closed(key.clone()));
            if let Some(verdict) = self.settled(key, &gate, input, self.now()) {
                return Ok(verdict);
            }
        }
        let deadline = self.settings.check_deadline;
        match tokio::time::timeout(deadline, self.check_now(key, input)).await {
            Ok(result) => result,
            Err(_) => {
                self.metrics.checks_store_busy.inc();
                self.count_check(key.kind, Answer::Closed);
                tracing::warn!(gate = %key, ?deadline, "gate check could not reach the store in time: answering closed");
                Ok(Verdict::closed(STORE_BUSY))
            }
        }
    }

    async fn check_now(&self, key: &GateKey, input: &CheckInput) -> Result<Verdict, EngineError> {
        let gate = self.gate(key).await?;
        if let Some(verdict) = self.settled(key, &gate, input, self.now()) {
            return Ok(verdict);
        }
        let Some(canary) = &input.canary else {
            return Ok(peek(&gate, self.now(), self.settings.channels));
        };
        let check = Check {
            canary: canary.clone(),
            checksum: input.checksum.clone(),
            phase: input.phase.clone(),
        };
        let verdict = self.record_check(key, &check, input).await?;
        self.count_check(key.kind, verdict.answer);
        Ok(verdict)
    }

    /// The answer when nothing needs writing: a peek (no canary), or the same
    /// canary, revision and answer as its last check. None: record it.
    fn settled(
        &self,
        key: &GateKey,
        gate: &Gate,
        input: &CheckInput,
        now: Millis,
    ) -> Option<Verdict> {
        let Some(canary) = &input.canary else {
            return Some(peek(gate, now, self.settings.channels));
        };
        let check = Check {
            canary: canary.clone(),
            checksum: input.checksum.clone(),
            phase: input.phase.clone(),
        };
        let verdict = decide(gate, &check, now, self.settings.channels);
        if verdict.pin || verdict.expired {
            return None;
        }
        let mut memory = self.memory();
        let s = memory.last_mut(key, canary)?;
        let step = wait_step(key.kind, Some(&s.seen()), &check, verdict.answer);
        let same = step == WaitStep::Nothing
            && s.answer == verdict.answer
            && s.checksum == check.checksum
            && s.phase == check.phase
            && s.reason == verdict.reason;
        if !same {
            return None;
        }
        s.last_seen = now;
        s.dirty = true;
        drop(memory);
        self.count_check(key.kind, verdict.answer);
        Some(verdict)
    }

    fn count_check(&self, kind: GateKind, answer: Answer) {
        self.metrics
            .gate_checks
            .get_or_create(&GateLabels {
                kind: kind.as_str(),
                result: answer.as_str(),
            })
            .inc();
    }

    /// The slow path: something changed, so write it down in one transaction.
    async fn record_check(
        &self,
        key: &GateKey,
        check: &Check,
        input: &CheckInput,
    ) -> Result<Verdict, EngineError> {
        let _turn = self.write.lock().await;
        let now = self.now();
        let mut gate = self.gate(key).await?;
        let mut verdict = decide(&gate, check, now, self.settings.channels);
        let metadata = serde_json::to_string(&input.metadata).unwrap_or_else(|_| "{}".into());
        let mut notices = Vec::new();
        let mut audits = Vec::new();
        let mut tx = self.store.begin().await?;

        if verdict.expired {
            if let GateStatus::Open(approval) = &gate.status {
                audits.push(AuditEntry {
                    at: now,
                    gate: key.to_string(),
                    action: "expire".into(),
                    actor: Actor::gatebot(),
                    reason: Some(format!("approval by {} expired", approval.change.by.name)),
                    revision: Some(check.checksum.clone()),
                    canary: Some(check.canary.to_string()),
                    delivery: None,
                });
            }
            gate.status = GateStatus::Closed {
                change: Some(Change {
                    by: Actor::gatebot(),
                    reason: Some("approval expired".into()),
                    at: now,
                }),
            };
            Store::put_gate(&mut tx, &gate).await?;
            notices.push(Notice::GateChanged {
                gate: key.to_string(),
                action: "expire".into(),
                actor: Actor::gatebot(),
                reason: Some("approval expired".into()),
                at: now,
            });
        }

        if verdict.pin {
            if let GateStatus::Open(approval) = &mut gate.status {
                let pinned = Store::pin(
                    &mut tx,
                    key,
                    &approval.id,
                    &check.canary,
                    &check.checksum,
                    now,
                )
                .await?;
                approval
                    .pins
                    .insert(check.canary.to_string(), pinned.clone());
                if pinned == check.checksum {
                    audits.push(AuditEntry {
                        at: now,
                        gate: key.to_string(),
                        action: "pin".into(),
                        actor: approval.change.by.clone(),
                        reason: Some(format!("approval used by {}", check.canary)),
                        revision: Some(pinned),
                        canary: Some(check.canary.to_string()),
                        delivery: None,
                    });
                } else {
                    // Another replica pinned this canary to another revision first.
                    verdict = decide(&gate, check, now, self.settings.channels);
                }
            }
        }

        let seen = self.memory().last(key, &check.canary).map(SeenEntry::seen);
        let mut wait_open = seen.as_ref().is_some_and(|s| s.wait_open);
        match wait_step(key.kind, seen.as_ref(), check, verdict.answer) {
            WaitStep::Nothing => {}
            step @ (WaitStep::Start | WaitStep::Restart) => {
                if step == WaitStep::Restart {
                    if let Some(id) =
                        Store::end_wait(&mut tx, key, &check.canary, "superseded", now).await?
                    {
                        notices.push(wait_ended(id, key, check, "superseded", now));
                    }
                }
                if let Some(wait_id) = Store::start_wait(
                    &mut tx,
                    key,
                    &check.canary,
                    &check.checksum,
                    &check.phase,
                    &metadata,
                    now,
                )
                .await?
                {
                    audits.push(AuditEntry {
                        at: now,
                        gate: key.to_string(),
                        action: "wait".into(),
                        actor: Actor::gatebot(),
                        reason: Some(verdict.reason.clone()),
                        revision: Some(check.checksum.clone()),
                        canary: Some(check.canary.to_string()),
                        delivery: None,
                    });
                    notices.push(Notice::WaitStarted {
                        wait_id,
                        gate: key.to_string(),
                        canary: check.canary.to_string(),
                        checksum: check.checksum.clone(),
                        phase: check.phase.clone(),
                        reason: verdict.reason.clone(),
                        metadata: input.metadata.clone(),
                        at: now,
                    });
                    self.metrics
                        .waits_started
                        .get_or_create(&KindLabels {
                            kind: key.kind.as_str(),
                        })
                        .inc();
                }
                wait_open = true;
            }
            WaitStep::End => {
                if let Some(id) =
                    Store::end_wait(&mut tx, key, &check.canary, "opened", now).await?
                {
                    notices.push(wait_ended(id, key, check, "opened", now));
                }
                wait_open = false;
            }
        }

        Store::observe(
            &mut tx,
            key,
            &check.canary,
            &check.checksum,
            &check.phase,
            verdict.answer,
            &verdict.reason,
            &metadata,
            now,
        )
        .await?;
        let queued = self.finish(&mut tx, &audits, &notices, now).await?;
        tx.commit().await?;
        self.after_commit(&audits, queued);
        self.remember(&gate);
        self.memory().observe(
            key,
            &check.canary,
            &check.checksum,
            &check.phase,
            verdict.answer,
            &verdict.reason,
            wait_open,
            now,
        );
        Ok(verdict)
    }

    /// Writes audit entries and queues the jobs the notices mean. Returns how many jobs.
    async fn finish(
        &self,
        tx: &mut WriteTx<'_>,
        audits: &[AuditEntry],
        notices: &[Notice],
        now: Millis,
    ) -> Result<usize, StoreError> {
        for entry in audits {
            Store::audit(tx, entry).await?;
        }
        let mut queued = 0;
        for notice in notices {
            for planned in self.notifier.plan(notice) {
                match planned {
                    Ok(job) => queued += usize::from(Store::enqueue(tx, &job, now).await?),
                    // A bug, said loudly; the change the notice reports still happens.
                    Err(e) => {
                        tracing::error!(error = %e, "notification dropped");
                        self.metrics.dropped(&e.sink, "unencodable");
                    }
                }
            }
        }
        Ok(queued)
    }

    /// Nudges the outbox worker after jobs were queued outside the engine.
    pub fn wake_outbox(&self) {
        self.outbox_wake.notify_one();
    }

    fn after_commit(&self, audits: &[AuditEntry], queued: usize) {
        for entry in audits {
            self.metrics
                .audit_events
                .get_or_create(&ActionLabels {
                    action: entry.action.clone(),
                })
                .inc();
        }
        if queued > 0 {
            self.outbox_wake.notify_one();
        }
    }

    /// Queues jobs that no gate change carries (replies to a click or a command)
    /// and wakes the outbox. Returns how many were queued.
    pub async fn enqueue(&self, jobs: &[crate::store::NewJob]) -> Result<usize, StoreError> {
        let now = self.now();
        let mut tx = self.store.begin().await?;
        let mut queued = 0;
        for job in jobs {
            queued += usize::from(Store::enqueue(&mut tx, job, now).await?);
        }
        tx.commit().await?;
        self.after_commit(&[], queued);
        Ok(queued)
    }

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

    /// Records a Flagger event and tells people about milestones.
    pub async fn record_event(
        &self,
        canary: &CanaryRef,
        input: &CheckInput,
        message: &str,
        event_type: &str,
        flagger_at: Option<Millis>,
    ) -> Result<EventKind, EngineError> {
        let now = self.now();
        let kind = classify(message);
        let row = EventRow {
            received_at: now,
            canary: canary.to_string(),
            phase: input.phase.clone(),
            checksum: input.checksum.clone(),
            event_type: event_type.to_string(),
            kind: kind.as_str().to_string(),
            message: message.to_string(),
            flagger_at,
            metadata: serde_json::to_string(&input.metadata).unwrap_or_else(|_| "{}".into()),
        };
        let mut gates: Vec<String> = self.store.gates_of_canary(&canary.to_string()).await?;
        if let Some(pr) = self.pr_from_metadata(&input.metadata) {
            for kind in [GateKind::Start, GateKind::Promote] {
                let key = GateKey::new(kind, pr.clone()).to_string();
                if !gates.contains(&key) {
                    gates.push(key);
                }
            }
        }
        let mut tx = self.store.begin().await?;
        Store::insert_event(&mut tx, &row).await?;
        let mut notices = Vec::new();
        if kind.is_final() {
            let outcome = kind.as_str();
            let keys: HashSet<&String> = gates.iter().collect();
            for key in keys {
                let Ok(key) = GateKey::parse(key, None) else {
                    continue;
                };
                if let Some(id) = Store::end_wait(&mut tx, &key, canary, outcome, now).await? {
                    notices.push(Notice::WaitEnded {
                        wait_id: id,
                        gate: key.to_string(),
                        canary: canary.to_string(),
                        outcome: outcome.to_string(),
                        at: now,
                    });
                    self.memory().end_wait(&key, canary);
                }
            }
        }
        if kind.is_milestone() {
            notices.push(Notice::CanaryEvent {
                canary: canary.to_string(),
                gates,
                kind: kind.as_str().to_string(),
                message: message.to_string(),
                event_type: event_type.to_string(),
                phase: input.phase.clone(),
                checksum: input.checksum.clone(),
                metadata: input.metadata.clone(),
                at: now,
            });
        }
        let queued = self.finish(&mut tx, &[], &notices, now).await?;
        tx.commit().await?;
        self.after_commit(&[], queued);
        self.metrics
            .events
            .get_or_create(&ActionLabels {
                action: kind.as_str().to_string(),
            })
            .inc();
        Ok(kind)
    }

    /// A canary's event metadata may name its PR: `pr: "42"` (default repository)
    /// and optionally `repository: owner/name`.
    fn pr_from_metadata(&self, metadata: &BTreeMap<String, String>) -> Option<Scope> {
        let number = metadata
            .get("pr")?
            .trim()
            .trim_start_matches('#')
            .parse()
            .ok()?;
        let repo = match metadata.get("repository").or_else(|| metadata.get("repo")) {
            Some(r) => r.parse().ok()?,
            None => self.settings.default_repo.clone()?,
        };
        Some(Scope::Pr { repo, number })
    }

    /// Writes last-seen times gathered since the last flush.
    pub async fn flush_seen(&self) -> Result<usize, StoreError> {
        let batch = self.memory().take_dirty();
        self.store.touch_observations(&batch).await?;
        self.metrics
            .waits_open
            .set(self.store.open_wait_count().await?);
        Ok(batch.len())
    }

    /// Every gate anyone opened or Flagger asked, with the canaries at it.
    pub async fn list(&self) -> Result<Vec<GateSummary>, StoreError> {
        let mut gates: BTreeMap<String, Gate> = match self.store.backend() {
            Backend::Sqlite => self
                .memory()
                .gates()
                .into_iter()
                .map(|g| (g.key.to_string(), g))
                .collect(),
            Backend::Postgres => self
                .store
                .load_gates()
                .await?
                .into_iter()
                .map(|g| (g.key.to_string(), g))
                .collect(),
        };
        let observations = self.store.load_observations().await?;
        let waits: HashMap<i64, Millis> = self
            .store
            .waits(None, true, 10_000)
            .await?
            .into_iter()
            .map(|w| (w.id, w.started_at))
            .collect();
        let mut canaries: BTreeMap<String, Vec<CanarySeen>> = BTreeMap::new();
        for o in observations {
            if let Ok(key) = GateKey::parse(&o.gate, None) {
                gates
                    .entry(o.gate.clone())
                    .or_insert_with(|| Gate::closed(key));
            }
            canaries
                .entry(o.gate.clone())
                .or_default()
                .push(CanarySeen {
                    waiting_since: o.wait_id.and_then(|id| waits.get(&id).copied()),
                    canary: o.canary,
                    checksum: o.checksum,
                    phase: o.phase,
                    answer: o.answer,
                    reason: o.reason,
                    last_seen: o.last_seen,
                });
        }
        let memory = self.memory();
        Ok(gates
            .into_values()
            .map(|gate| {
                let key = gate.key.to_string();
                let mut at_gate = canaries.remove(&key).unwrap_or_default();
                for c in &mut at_gate {
                    if let Some(at) = memory.last_seen(&gate.key, &c.canary) {
                        c.last_seen = c.last_seen.max(at);
                    }
                }
                summarise(gate, at_gate)
            })
            .collect())
    }

    pub async fn detail(&self, key: &GateKey) -> Result<GateDetail, StoreError> {
        let gate = self.gate(key).await?;
        Ok(GateDetail {
            gate,
            observations: self.store.observations_for(key).await?,
            waits: self.store.waits(Some(key), false, 50).await?,
            audit: self.store.audit_log(Some(key), 100).await?,
        })
    }

    /// The gates of one PR that exist (opened or asked by Flagger).
    pub async fn gates_of_pr(
        &self,
        repo: &RepoName,
        number: crate::gate::PrNumber,
    ) -> Result<Vec<GateSummary>, StoreError> {
        Ok(self
            .list()
            .await?
            .into_iter()
            .filter(|g| {
                GateKey::parse(&g.gate, None)
                    .ok()
                    .and_then(|k| k.pr().map(|(r, n)| r == repo && n == number))
                    .unwrap_or(false)
            })
            .collect())
    }
}

fn wait_ended(id: i64, key: &GateKey, check: &Check, outcome: &str, at: Millis) -> Notice {
    Notice::WaitEnded {
        wait_id: id,
        gate: key.to_string(),
        canary: check.canary.to_string(),
        outcome: outcome.to_string(),
        at,
    }
}

/// The gate's state for someone looking, not for a canary: no pinning applies.
fn peek(gate: &Gate, now: Millis, channels: Channels) -> Verdict {
    let closed = |reason: String| Verdict {
        answer: Answer::Closed,
        reason,
        pin: false,
        expired: false,
    };
    match &gate.status {
        GateStatus::Open(a) if !a.expired(now) => Verdict {
            answer: Answer::Open,
            reason: format!(
                "approved by {} via {} at {}",
                a.change.by.name,
                a.change.by.source,
                crate::gate::state::rfc3339(a.change.at)
            ),
            pin: false,
            expired: false,
        },
        GateStatus::Held { change } => closed(format!(
            "held by {} via {}",
            change.by.name, change.by.source
        )),
        _ => closed(format!(
            "{}: {}",
            closed_word(gate.key.kind),
            open_hint(&gate.key, channels)
        )),
    }
}

fn summarise(gate: Gate, canaries: Vec<CanarySeen>) -> GateSummary {
    let (state, change, expires_at) = match &gate.status {
        GateStatus::Open(a) => ("open", Some(&a.change), a.expires_at),
        GateStatus::Closed { change } => ("closed", change.as_ref(), None),
        GateStatus::Held { change } => ("held", Some(change), None),
    };
    GateSummary {
        gate: gate.key.to_string(),
        state,
        by: change.map(|c| c.by.clone()),
        reason: change.and_then(|c| c.reason.clone()),
        at: change.map(|c| c.at),
        expires_at,
        canaries,
    }
}
