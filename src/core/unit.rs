//! A unit of work: everything one command or one delivery changes (gates,
//! audit entries, outbox jobs, the delivery's own settlement), written in one
//! transaction. What it changed becomes visible (memory, metrics, the outbox's
//! wake-up, the log) only once it commits; dropped uncommitted, nothing happened.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::{CommandError, Engine, Provenance};
use crate::gate::quorum::{self, Tally, Vote};
use crate::gate::{
    Actor, Approval, AuditAction, CanaryRef, Change, Gate, GateKey, GateKind, GateStatus, Millis,
    Scope,
};
use crate::metrics::CommandLabels;
use crate::notify::Notice;
use crate::store::{AuditEntry, NewJob, StoreError, WriteTx};

pub struct Unit<'e> {
    engine: &'e Engine,
    tx: WriteTx<'e>,
    /// The engine's write turn: a check cannot start a wait mid-command.
    _turn: tokio::sync::MutexGuard<'e, ()>,
    now: Millis,
    /// Gates as this unit left them, by key: later changes in the unit see them.
    gates: HashMap<String, Gate>,
    audits: Vec<AuditEntry>,
    queued: usize,
    counts: Vec<CommandLabels>,
    changes: Vec<(GateKey, AuditAction, Provenance)>,
    /// Waits this unit ended outside the check: memory forgets them once it commits.
    ended: Vec<(GateKey, CanaryRef)>,
}

impl<'e> Unit<'e> {
    /// Starts a unit of work: the engine's write turn, then a transaction.
    pub(super) async fn begin(engine: &'e Engine) -> Result<Self, StoreError> {
        let turn = engine.write.lock().await;
        let tx = engine.store.begin().await?;
        Ok(Unit {
            engine,
            tx,
            _turn: turn,
            now: engine.now(),
            gates: HashMap::new(),
            audits: Vec::new(),
            queued: 0,
            counts: Vec::new(),
            changes: Vec::new(),
            ended: Vec::new(),
        })
    }

    pub fn now(&self) -> Millis {
        self.now
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// For a channel's own rows that belong with the change (e.g. settling the
    /// delivery that caused it).
    pub(super) fn tx(&mut self) -> &mut WriteTx<'e> {
        &mut self.tx
    }

    /// The gate as this unit sees it (its own changes first), locked until the
    /// unit ends on PostgreSQL ([`Engine::gate_in`]): what it decides on is
    /// what it overwrites. `&mut`: a unit's transaction is not `Sync`, so a
    /// shared borrow could not cross the await.
    pub async fn gate(&mut self, key: &GateKey) -> Result<Gate, StoreError> {
        match self.gates.get(&key.to_string()) {
            Some(gate) => Ok(gate.clone()),
            None => self.engine.gate_in(&mut self.tx, key).await,
        }
    }

    /// Queues jobs that no gate change carries (replies, reactions).
    pub async fn enqueue(&mut self, jobs: &[NewJob]) -> Result<(), StoreError> {
        self.queued += super::queue_jobs(&mut self.tx, jobs, self.now).await?;
        Ok(())
    }

    /// Counts a command (`gatebot_commands_total`) once the unit commits.
    pub fn count(&mut self, source: &'static str, command: &str, result: &'static str) {
        self.counts.push(CommandLabels {
            source,
            command: command.to_string(),
            result,
        });
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        let engine = self.engine;
        let applying = engine.applying.lock().await;
        self.tx.commit().await?;
        for gate in self.gates.values() {
            engine.remember(gate);
        }
        for (gate, canary) in &self.ended {
            engine.memory().end_wait(gate, canary);
        }
        drop(applying);
        engine.after_commit(&self.audits, self.queued);
        for labels in &self.counts {
            engine.metrics.commands.get_or_create(labels).inc();
        }
        for (gate, action, who) in &self.changes {
            tracing::info!(gate = %gate, action = %action, actor = %who.actor.name, source = %who.actor.source, "gate changed");
        }
        Ok(())
    }

    /// A wait at `key` for `canary` that this unit ended.
    pub(super) fn ended_wait(&mut self, key: &GateKey, canary: CanaryRef) {
        self.ended.push((key.clone(), canary));
    }

    /// Ends the unit having written nothing that counts.
    pub async fn rollback(self) {
        self.tx.rollback().await;
    }

    /// Opens a gate: a new approval, expiring after the TTL, unpinned unless the
    /// person saw one revision (`Provenance::revision`). Refused when written
    /// before the gate's last close; a no-op when older than the approval in force.
    /// A gate that needs several people counts the approval and opens with the
    /// last one needed; break glass (`Provenance::force`) opens it at once.
    pub async fn open(&mut self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        let gate = self.gate(key).await?;
        if let Some(same) = stands(&gate, who)? {
            return Ok(same);
        }
        let now = self.now;
        let revision = who
            .revision
            .as_ref()
            .map(|(c, r)| (c.to_string(), r.clone()));
        // What the gate's most demanding canary could need: each canary is
        // judged by its own rule when it asks (`gate::decide`).
        let mut need = quorum::most(&self.engine.settings.quorum, key);
        let settings = &self.engine.settings;
        let envs = &settings.environments;
        let creates = settings
            .change
            .as_ref()
            .is_some_and(|r| r.creates_for(key, envs));
        if creates {
            need = need.and_change();
        }
        let exclusive = who.exclusive && revision.is_some();
        if let (true, Some((canary, checksum)), GateStatus::Open(a)) =
            (exclusive, &revision, &gate.status)
        {
            if !a.expired(now) {
                // Open for another canary under its change: this canary's
                // change opens it alone only when nothing else is needed;
                // otherwise it waits for that approval to end.
                if creates && !need.change_only() {
                    return Ok(gate.clone());
                }
                return self.open_also(key, a, canary, checksum, who).await;
            }
        }
        if who.force || (need.required <= 1 && need.include.is_empty()) {
            let action = if who.force {
                AuditAction::Force
            } else {
                AuditAction::Open
            };
            let pins = revision.into_iter().collect();
            let approval = self.approval(key, who, new_id(), pins, Vec::new());
            let status = GateStatus::Open(approval);
            return self
                .change(key, action, who, |_, _, _| Ok(Some(status)))
                .await;
        }
        self.vote(key, gate, who, revision, need).await
    }

    /// Counts one person's approval at a gate that needs `required` people;
    /// opens it with the last one needed.
    async fn vote(
        &mut self,
        key: &GateKey,
        gate: Gate,
        who: &Provenance,
        revision: Option<(String, String)>,
        need: quorum::Need,
    ) -> Result<Gate, CommandError> {
        let now = self.now;
        // The revision the person saw: the one a click showed, or the one
        // waiting when only one waits (what the status comment shows).
        let waiting = self.engine.memory().waiting_at(key);
        let vote = Vote {
            person: who.person_name(),
            change: change_by(who, now),
            revision: revision.or_else(|| match waiting.as_slice() {
                [one] => Some(one.clone()),
                _ => None,
            }),
            groups: who.groups.clone(),
        };
        let tally = match gate.status {
            GateStatus::Approving(t) => t.needing(need),
            // Already open for what this approves: nothing to count.
            GateStatus::Open(a)
                if !a.expired(now)
                    && vote
                        .revision
                        .as_ref()
                        .is_none_or(|(c, r)| a.pins.get(c).is_none_or(|p| p == r)) =>
            {
                return Ok(Gate {
                    key: key.clone(),
                    status: GateStatus::Open(a),
                });
            }
            _ => Tally::new(new_id(), 0).needing(need),
        };
        let tally = tally.with(vote);
        let (action, status) = if tally.complete() {
            let approvers = tally.votes.iter().map(|v| v.change.by.clone()).collect();
            let pins = tally.all_pins();
            let mut approval = self.approval(key, who, tally.id.clone(), pins, approvers);
            if let Some(pins) = tally.change_pins() {
                // Under changes gatebot opened: only the canaries whose own
                // change voted, whoever voted last.
                approval.pins = pins;
                approval.exclusive = true;
            }
            (AuditAction::Open, GateStatus::Open(approval))
        } else {
            (AuditAction::Approve, GateStatus::Approving(tally))
        };
        self.change(key, action, who, |_, _, _| Ok(Some(status)))
            .await
    }

    /// A new approval by `who` at `key`, expiring after the TTL counted from
    /// when it can first be used (an approval given outside the release
    /// window waits for the window).
    fn approval(
        &self,
        key: &GateKey,
        who: &Provenance,
        id: String,
        pins: BTreeMap<String, String>,
        approvers: Vec<Actor>,
    ) -> Approval {
        let settings = &self.engine.settings;
        let pinned = key.kind.pinned();
        Approval {
            id,
            change: change_by(who, self.now),
            expires_at: ends(
                settings.approval_ttl.filter(|_| pinned).map(|t| {
                    let from = settings.calendar.usable_from(key.kind, self.now);
                    from + t.as_millis() as Millis
                }),
                // An approval under a change ends with the change's window.
                who.ticket.as_ref().map(|t| t.until),
            ),
            pins: pins.into_iter().filter(|_| pinned).collect(),
            approvers,
            forced: who.force,
            exclusive: who.exclusive && who.revision.is_some(),
        }
    }

    /// A gate already open when an approval for one canary only comes (a
    /// second deadline's rollback): an approval for every canary already
    /// covers it; one for other canaries only is extended to it, so that
    /// neither canary loses its rollback to the other.
    async fn open_also(
        &mut self,
        key: &GateKey,
        open: &Approval,
        canary: &str,
        checksum: &str,
        who: &Provenance,
    ) -> Result<Gate, CommandError> {
        let pinned = open.pins.get(canary);
        if pinned.is_some_and(|p| p == checksum) || (!open.exclusive && pinned.is_none()) {
            return Ok(Gate {
                key: key.clone(),
                status: GateStatus::Open(open.clone()),
            });
        }
        let mut approval = open.clone();
        approval.exclusive = true;
        approval
            .pins
            .insert(canary.to_string(), checksum.to_string());
        let status = GateStatus::Open(approval);
        self.change(key, AuditAction::Open, who, |_, _, _| Ok(Some(status)))
            .await
    }

    /// Closes a gate (a hold stays a hold).
    pub async fn close(&mut self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.change(key, AuditAction::Close, who, |gate, now, _| {
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
    pub async fn hold(&mut self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.change(key, AuditAction::Hold, who, |_, now, _| {
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
    pub async fn unhold(&mut self, key: &GateKey, who: &Provenance) -> Result<Gate, CommandError> {
        self.change(key, AuditAction::Unhold, who, |gate, now, _| {
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

    /// Records that someone was refused. Changes no gate; a delivery refused
    /// before is not audited twice.
    pub async fn refuse(&mut self, key: &GateKey, who: &Provenance) -> Result<(), StoreError> {
        if let Some(delivery) = &who.delivery {
            let engine = self.engine;
            if engine
                .store
                .history()
                .applied(&mut self.tx, delivery, key, AuditAction::Refuse)
                .await?
            {
                return Ok(());
            }
        }
        let entry = audit_entry(key, AuditAction::Refuse, who, self.now);
        crate::store::History::audit(&mut self.tx, &entry).await?;
        self.audits.push(entry);
        Ok(())
    }

    /// Audits what is not a gate change (a named gate created) and queues
    /// its notices.
    pub(super) async fn record(
        &mut self,
        entry: AuditEntry,
        notices: &[Notice],
    ) -> Result<(), StoreError> {
        self.queued += self
            .engine
            .finish(
                &mut self.tx,
                std::slice::from_ref(&entry),
                notices,
                self.now,
            )
            .await?;
        self.audits.push(entry);
        Ok(())
    }

    /// Queues notices that no audit entry carries (waits ended by a change).
    pub(super) async fn notify(&mut self, notices: &[Notice]) -> Result<(), StoreError> {
        self.queued += self
            .engine
            .finish(&mut self.tx, &[], notices, self.now)
            .await?;
        Ok(())
    }

    /// One change by a person: computes the new status, writes it, audits it,
    /// queues its notice. A delivery already applied changes nothing.
    pub(super) async fn change(
        &mut self,
        key: &GateKey,
        action: AuditAction,
        who: &Provenance,
        next: impl FnOnce(&Gate, Millis, Option<Duration>) -> Result<Option<GateStatus>, CommandError>,
    ) -> Result<Gate, CommandError> {
        let now = self.now;
        let mut gate = self.gate(key).await?;
        // Nothing to write, or a refusal such as a hold: no trace of the delivery.
        let Some(status) = next(&gate, now, self.engine.settings.approval_ttl)? else {
            return Ok(gate);
        };
        if let Some(delivery) = &who.delivery {
            let engine = self.engine;
            if engine
                .store
                .history()
                .applied(&mut self.tx, delivery, key, action)
                .await?
            {
                return Ok(gate);
            }
        }
        gate.status = status;
        crate::store::Gates::put_gate(&mut self.tx, &gate).await?;
        if let GateStatus::Open(a) = &gate.status {
            // A new approval, pinned at once to what the people approved.
            for (canary, checksum) in &a.pins {
                let canary: CanaryRef = canary
                    .parse()
                    .map_err(|e| StoreError::Corrupt(format!("pinned canary `{canary}`: {e}")))?;
                crate::store::Gates::pin(&mut self.tx, key, &a.id, &canary, checksum, now).await?;
            }
        }
        let entry = audit_entry(key, action, who, now);
        let pr = match key.scope {
            Scope::Named(_) => crate::store::NamedGates::named_gate_in(&mut self.tx, key)
                .await?
                .and_then(|n| n.spec.pr),
            _ => None,
        };
        let notice = Notice::GateChanged {
            gate: key.clone(),
            action,
            actor: who.actor.clone(),
            reason: who.reason.clone(),
            at: now,
            pr,
        };
        self.queued += self
            .engine
            .finish(&mut self.tx, std::slice::from_ref(&entry), &[notice], now)
            .await?;
        self.audits.push(entry);
        self.end_announcement(key, action).await?;
        self.gates.insert(key.to_string(), gate.clone());
        self.changes.push((key.clone(), action, who.clone()));
        Ok(gate)
    }

    /// Ends the announcement (a wait no canary made) of a gate someone decided.
    async fn end_announcement(
        &mut self,
        key: &GateKey,
        action: AuditAction,
    ) -> Result<(), StoreError> {
        let Some(outcome) = announcement_outcome(action) else {
            return Ok(());
        };
        let approved = outcome == "approved";
        let ended: Vec<(GateKey, &str)> = match &key.scope {
            Scope::Named(_) => vec![(key.clone(), outcome)],
            // A deployment's wait at a PR's gate ends when the gate opens, or
            // when a Reject opens the PR's rollback gate; it outlasts a close
            // or a hold, since the deployment still waits.
            Scope::Pr { .. } if approved && key.kind == GateKind::Rollback => {
                [GateKind::Promote, GateKind::Traffic]
                    .map(|k| (key.sibling(k), "rejected"))
                    .to_vec()
            }
            Scope::Pr { .. } if approved => vec![(key.clone(), outcome)],
            _ => return Ok(()),
        };
        let now = self.now;
        for (key, outcome) in ended {
            let Some(wait_id) =
                crate::store::NamedGates::end_announcement(&mut self.tx, &key, outcome, now)
                    .await?
            else {
                continue;
            };
            let notice = Notice::WaitEnded {
                wait_id,
                gate: key,
                canary: None,
                outcome: outcome.to_string(),
                at: now,
            };
            self.notify(&[notice]).await?;
        }
        Ok(())
    }
}

/// The outcome of an announcement that ends because its gate changed.
fn announcement_outcome(action: AuditAction) -> Option<&'static str> {
    match action {
        AuditAction::Open | AuditAction::Force => Some("approved"),
        AuditAction::Close => Some("rejected"),
        AuditAction::Hold => Some("held"),
        _ => None,
    }
}

/// Whether an open stops before it changes anything: refused at a held gate
/// or when written before the gate's last close; the gate as it is when
/// older than the approval in force (it must not re-arm it with a fresh TTL
/// and no pins).
fn stands(gate: &Gate, who: &Provenance) -> Result<Option<Gate>, CommandError> {
    let written = |at: Millis| who.written_at.is_some_and(|w| w < at);
    match &gate.status {
        GateStatus::Held { change } => Err(CommandError::Held {
            gate: gate.key.clone(),
            by: change.by.name.clone(),
            via: change.by.source,
        }),
        GateStatus::Closed { change: Some(c) } if written(c.at) => {
            Err(CommandError::WrittenBeforeClose {
                gate: gate.key.clone(),
                closed_at: c.at,
            })
        }
        GateStatus::Open(a) if written(a.change.at) => Ok(Some(gate.clone())),
        _ => Ok(None),
    }
}

/// The change `who` makes now.
fn change_by(who: &Provenance, now: Millis) -> Change {
    Change {
        by: who.actor.clone(),
        reason: who.reason.clone(),
        at: now,
    }
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(super) fn audit_entry(
    key: &GateKey,
    action: AuditAction,
    who: &Provenance,
    now: Millis,
) -> AuditEntry {
    AuditEntry {
        at: now,
        gate: key.clone(),
        action,
        actor: who.actor.clone(),
        reason: who.reason.clone(),
        revision: None,
        canary: None,
        delivery: who.delivery.clone(),
    }
}

/// The earlier of two ends, either of which may be none.
fn ends(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
