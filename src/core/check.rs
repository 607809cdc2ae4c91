//! The gate check, Flagger's hot path: the steady state from memory, a
//! change written in one transaction.

use super::memory::SeenEntry;
use super::*;
use crate::gate::timers::WaitFacts;
use crate::store::NewWait;

/// A check's answer and, when it was written down, what it changed: the one
/// thing about it worth a line at info. The steady state changes nothing.
#[derive(Debug)]
pub struct Checked {
    pub verdict: Verdict,
    pub change: Option<&'static str>,
}

impl Checked {
    fn settled(verdict: Verdict) -> Self {
        Self {
            verdict,
            change: None,
        }
    }
}

impl Engine {
    /// Answers Flagger within the check deadline, whatever the store does.
    /// Without a canary (a GET with no body) it only peeks.
    ///
    /// A check that cannot read or record what it needs in time answers closed
    /// with [`STORE_BUSY`]; nothing of it is remembered, so the next poll tries
    /// again. Dropping the unfinished write rolls it back.
    pub async fn check(&self, key: &GateKey, input: &CheckInput) -> Result<Checked, CommandError> {
        // The steady state is answered from memory, with no timer to arm: always
        // on SQLite, and on PostgreSQL while other replicas' changes are heard.
        if self.answers_from_memory() {
            let gate = self
                .memory()
                .gate(key)
                .unwrap_or_else(|| Gate::closed(key.clone()));
            if let Some(verdict) = self.settled(key, &gate, input, self.now()) {
                return Ok(Checked::settled(verdict));
            }
        }
        let deadline = self.settings.check_deadline;
        match tokio::time::timeout(deadline, self.check_now(key, input)).await {
            Ok(result) => result,
            Err(_) => {
                self.metrics.checks_store_busy.inc();
                self.count_check(key.kind, Answer::Closed);
                tracing::warn!(gate = %key, ?deadline, "gate check could not reach the store in time: answering closed");
                Ok(Checked::settled(Verdict::closed(STORE_BUSY)))
            }
        }
    }

    async fn check_now(&self, key: &GateKey, input: &CheckInput) -> Result<Checked, CommandError> {
        let gate = self.gate(key).await?;
        if let Some(verdict) = self.settled(key, &gate, input, self.now()) {
            return Ok(Checked::settled(verdict));
        }
        let Some(canary) = &input.canary else {
            let now = self.now();
            return Ok(Checked::settled(self.unless_frozen(
                key,
                None,
                now,
                peek(&gate, now, self.settings.channels),
            )));
        };
        let check = Check {
            canary,
            checksum: &input.checksum,
            phase: &input.phase,
        };
        let checked = self.record_check(key, &check, input).await?;
        self.count_check(key.kind, checked.verdict.answer);
        Ok(checked)
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
            return Some(self.unless_frozen(
                key,
                None,
                now,
                peek(gate, now, self.settings.channels),
            ));
        };
        let check = Check {
            canary,
            checksum: &input.checksum,
            phase: &input.phase,
        };
        let verdict = self.unless_frozen(
            key,
            Some(canary),
            now,
            decide(
                gate,
                &check,
                now,
                self.settings.channels,
                &self.settings.quorum,
            ),
        );
        if verdict.pin || verdict.expired {
            return None;
        }
        let mut memory = self.memory();
        let s = memory.last_mut(key, canary)?;
        let step = wait_step(key.kind, Some(&s.seen()), &check, verdict.answer);
        let same = step == WaitStep::Nothing
            && s.answer == verdict.answer
            && s.checksum.is(check.checksum)
            && s.phase.is(check.phase)
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
        check: &Check<'_>,
        input: &CheckInput,
    ) -> Result<Checked, CommandError> {
        let _turn = self.write.lock().await;
        let now = self.now();
        let mut tx = self.store.begin().await?;
        // Locked: an expiry or a pin is decided on the gate as it stands, not on
        // one that another replica has since held or approved anew.
        let mut gate = self.gate_in(&mut tx, key).await?;
        let mut verdict = self.unless_frozen(
            key,
            Some(check.canary),
            now,
            decide(
                &gate,
                check,
                now,
                self.settings.channels,
                &self.settings.quorum,
            ),
        );
        let metadata = serde_json::to_string(&input.metadata).unwrap_or_else(|_| "{}".into());
        let mut notices = Vec::new();
        let mut audits = Vec::new();
        // What this check changes, most telling first (see `change`).
        let mut pinned_now = false;

        if verdict.expired {
            if let GateStatus::Open(approval) = &gate.status {
                audits.push(AuditEntry {
                    at: now,
                    gate: key.clone(),
                    action: AuditAction::Expire,
                    actor: Actor::gatebot(),
                    reason: Some(format!("approval by {} expired", approval.change.by.name)),
                    revision: Some(check.checksum.to_string()),
                    canary: Some(check.canary.clone()),
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
                gate: key.clone(),
                action: AuditAction::Expire,
                actor: Actor::gatebot(),
                reason: Some("approval expired".into()),
                at: now,
                // The status comment of a named gate's PR shows the expiry time already.
                pr: None,
            });
        }

        if verdict.pin {
            // An approval, or votes enough for this canary's rule.
            let by = match &gate.status {
                GateStatus::Open(approval) => Some(approval.change.by.clone()),
                GateStatus::Approving(tally) => tally.votes.last().map(|v| v.change.by.clone()),
                _ => None,
            };
            if let (Some(id), Some(by)) = (gate.status.pins_id().map(str::to_string), by) {
                let pinned =
                    Store::pin(&mut tx, key, &id, check.canary, check.checksum, now).await?;
                if let Some(pins) = gate.status.pins_mut() {
                    pins.insert(check.canary.to_string(), pinned.clone());
                }
                if pinned == check.checksum {
                    pinned_now = true;
                    audits.push(AuditEntry {
                        at: now,
                        gate: key.clone(),
                        action: AuditAction::Pin,
                        actor: by,
                        reason: Some(format!("approval used by {}", check.canary)),
                        revision: Some(pinned),
                        canary: Some(check.canary.clone()),
                        delivery: None,
                    });
                } else {
                    // Another replica pinned this canary to another revision first.
                    verdict = self.unless_frozen(
                        key,
                        Some(check.canary),
                        now,
                        decide(
                            &gate,
                            check,
                            now,
                            self.settings.channels,
                            &self.settings.quorum,
                        ),
                    );
                }
            }
        }

        let (seen, before) = {
            let memory = self.memory();
            let last = memory.last(key, check.canary);
            (
                last.map(SeenEntry::seen),
                last.map(|s| Before::of(s, check)),
            )
        };
        let mut wait_open = seen.as_ref().is_some_and(|s| s.wait_open);
        let step = wait_step(key.kind, seen.as_ref(), check, verdict.answer);
        let change = change(verdict.expired, pinned_now, step, before, verdict.answer);
        match step {
            // An open answer that needs a write (a pin, a new observation) ends
            // the canary's wait even when this replica did not see it start:
            // on PostgreSQL another replica may have.
            WaitStep::Nothing if verdict.answer == Answer::Open => {
                if let Some(id) = Store::end_wait(&mut tx, key, check.canary, "opened", now).await?
                {
                    notices.push(wait_ended(id, key, check, "opened", now));
                }
            }
            WaitStep::Nothing => {}
            step @ (WaitStep::Start | WaitStep::Restart) => {
                if step == WaitStep::Restart {
                    if let Some(id) =
                        Store::end_wait(&mut tx, key, check.canary, "superseded", now).await?
                    {
                        notices.push(wait_ended(id, key, check, "superseded", now));
                    }
                }
                let timers = &self.settings.timers;
                let facts = WaitFacts {
                    kind: key.kind,
                    scope: &key.scope,
                    canary: check.canary,
                    metadata: &input.metadata,
                    started_at: now,
                    authenticated: input.cluster.is_some(),
                };
                let wait = NewWait {
                    key,
                    canary: check.canary,
                    checksum: check.checksum,
                    phase: check.phase,
                    metadata: &metadata,
                    at: now,
                    due_at: timers.due_at(&facts),
                    remind_at: timers.remind_at(key.kind, now, 0),
                    cluster: input.cluster.as_ref(),
                };
                if let Some(wait_id) = Store::start_wait(&mut tx, &wait).await? {
                    audits.push(AuditEntry {
                        at: now,
                        gate: key.clone(),
                        action: AuditAction::Wait,
                        actor: Actor::gatebot(),
                        reason: Some(verdict.reason.clone()),
                        revision: Some(check.checksum.to_string()),
                        canary: Some(check.canary.clone()),
                        delivery: None,
                    });
                    notices.push(Notice::WaitStarted {
                        wait_id,
                        gate: key.clone(),
                        canary: Some(check.canary.clone()),
                        checksum: check.checksum.to_string(),
                        phase: check.phase.to_string(),
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
                if let Some(id) = Store::end_wait(&mut tx, key, check.canary, "opened", now).await?
                {
                    notices.push(wait_ended(id, key, check, "opened", now));
                }
                wait_open = false;
            }
        }

        Store::observe(
            &mut tx,
            key,
            check.canary,
            check.checksum,
            check.phase,
            verdict.answer,
            &verdict.reason,
            &metadata,
            now,
        )
        .await?;
        let queued = self.finish(&mut tx, &audits, &notices, now).await?;
        let applying = self.applying.lock().await;
        tx.commit().await?;
        self.remember(&gate);
        self.memory().observe(
            key,
            check.canary,
            check.checksum,
            check.phase,
            verdict.answer,
            &verdict.reason,
            wait_open,
            now,
        );
        drop(applying);
        self.after_commit(&audits, queued);
        Ok(Checked {
            verdict,
            change: Some(change),
        })
    }
}

/// How a check compares with the canary's last one at the gate.
#[derive(Clone, Copy)]
struct Before {
    answer: Answer,
    same_revision: bool,
    same_phase: bool,
}

impl Before {
    fn of(s: &SeenEntry, check: &Check<'_>) -> Self {
        Self {
            answer: s.answer,
            same_revision: s.checksum.is(check.checksum),
            same_phase: s.phase.is(check.phase),
        }
    }
}

/// The one change a recorded check is logged for, the most telling first.
fn change(
    expired: bool,
    pinned: bool,
    step: WaitStep,
    before: Option<Before>,
    answer: Answer,
) -> &'static str {
    match (step, before) {
        _ if expired => "approval expired",
        _ if pinned => "approval pinned to this revision",
        (WaitStep::Start, _) => "wait started",
        (WaitStep::Restart, _) => "wait restarted for a new revision",
        (WaitStep::End, _) => "wait ended",
        (_, None) => "first check",
        (_, Some(b)) if b.answer != answer => "answer changed",
        (_, Some(b)) if !b.same_revision => "new revision",
        (_, Some(b)) if !b.same_phase => "phase changed",
        _ => "reason changed",
    }
}

fn wait_ended(id: i64, key: &GateKey, check: &Check<'_>, outcome: &str, at: Millis) -> Notice {
    Notice::WaitEnded {
        wait_id: id,
        gate: key.clone(),
        canary: Some(check.canary.clone()),
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
        forced: false,
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
            forced: a.forced,
        },
        GateStatus::Held { change } => closed(format!(
            "held by {} via {}",
            change.by.name, change.by.source
        )),
        GateStatus::Approving(t) => closed(format!(
            "{}: {}: {}",
            closed_word(gate.key.kind),
            t.summary(),
            open_hint(&gate.key, channels)
        )),
        _ => closed(format!(
            "{}: {}",
            closed_word(gate.key.kind),
            open_hint(&gate.key, channels)
        )),
    }
}
