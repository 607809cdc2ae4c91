//! The gate check, Flagger's hot path: the steady state from memory, a
//! change written in one transaction.

use super::memory::SeenEntry;
use super::unit::audit_entry;
use super::*;
use crate::gate::timers::WaitFacts;
use crate::store::{NewWait, WaitRow};

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

impl<'e> Checks<'e> {
    /// Answers Flagger within the check deadline, whatever the store does.
    /// Without a canary (a GET with no body) it only peeks.
    ///
    /// A check that cannot read or record what it needs in time answers closed
    /// with [`STORE_BUSY`]; nothing of it is remembered, so the next poll tries
    /// again. Dropping the unfinished write rolls it back.
    pub async fn check(self, key: &GateKey, input: &CheckInput) -> Result<Checked, CommandError> {
        // With environments, each cluster asks at its own gate.
        let placed;
        let key = if self.engine.settings.environments.is_empty() {
            key
        } else {
            match self.engine.clusters().placed(key, input) {
                Ok(k) => {
                    placed = k;
                    &placed
                }
                Err(verdict) => {
                    self.count_check(key.kind, Answer::Closed);
                    return Ok(Checked::settled(verdict));
                }
            }
        };
        // The steady state is answered from memory, with no timer to arm: always
        // on SQLite, and on PostgreSQL while other replicas' changes are heard.
        if self.engine.gate_cache().answers_from_memory() {
            let gate = self
                .engine
                .memory()
                .gate(key)
                .unwrap_or_else(|| Gate::closed(key.clone()));
            if let Some(verdict) = self.settled(key, &gate, input, self.engine.now()) {
                return Ok(Checked::settled(verdict));
            }
        }
        let deadline = self.engine.settings.check_deadline;
        // Boxed: the store's futures make this one large, and every check's
        // future would carry (and move) that size even when memory answers.
        let slow = Box::pin(self.check_now(key, input));
        match tokio::time::timeout(deadline, slow).await {
            Ok(result) => result,
            Err(_) => {
                self.engine.metrics.checks_store_busy.inc();
                self.count_check(key.kind, Answer::Closed);
                tracing::warn!(gate = %key, ?deadline, "gate check could not reach the store in time: answering closed");
                Ok(Checked::settled(Verdict::closed(STORE_BUSY)))
            }
        }
    }

    async fn check_now(self, key: &GateKey, input: &CheckInput) -> Result<Checked, CommandError> {
        // A passage and the order are a cluster's gate's only.
        let commit = key
            .cluster
            .as_ref()
            .and_then(|_| Clusters::commit_known(input));
        let gate = self.engine.gate(key).await?;
        if let Some(verdict) = self.settled(key, &gate, input, self.engine.now()) {
            return Ok(Checked::settled(verdict));
        }
        let Some(canary) = &input.canary else {
            let now = self.engine.now();
            let verdict = self.engine.freezes().unless_frozen(
                key,
                None,
                now,
                peek(&gate, now, self.engine.settings.channels),
            );
            return Ok(Checked::settled(self.engine.clusters().in_order(
                &gate,
                commit.as_deref(),
                now,
                verdict,
            )));
        };
        let check = Check {
            canary,
            checksum: input.checksum.recorded(),
            phase: input.phase.recorded(),
        };
        let checked = self
            .record_check(key, &check, input, commit.as_deref())
            .await?;
        self.count_check(key.kind, checked.verdict.answer);
        Ok(checked)
    }

    /// The answer when nothing needs writing: a peek (no canary), or the same
    /// canary, revision and answer as its last check. None: record it.
    fn settled(
        self,
        key: &GateKey,
        gate: &Gate,
        input: &CheckInput,
        now: Millis,
    ) -> Option<Verdict> {
        let Some(canary) = &input.canary else {
            // A peek: the slow path says where a cluster's revision stands.
            if key.cluster.is_some() {
                return None;
            }
            return Some(self.engine.freezes().unless_frozen(
                key,
                None,
                now,
                peek(gate, now, self.engine.settings.channels),
            ));
        };
        let check = Check {
            canary,
            checksum: input.checksum.recorded(),
            phase: input.phase.recorded(),
        };
        let verdict = self.engine.freezes().unless_frozen(
            key,
            Some(canary),
            now,
            decide(
                gate,
                &check,
                now,
                self.engine.settings.channels,
                &self.engine.settings.quorum,
            ),
        );
        let verdict = match key.cluster {
            Some(_) => self.engine.clusters().in_order(
                gate,
                Clusters::commit_known(input).as_deref(),
                now,
                verdict,
            ),
            None => verdict,
        };
        if verdict.pin || verdict.expired {
            return None;
        }
        let mut memory = self.engine.memory();
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

    pub(super) fn count_check(self, kind: GateKind, answer: Answer) {
        self.engine
            .metrics
            .gate_checks
            .get_or_create(&GateLabels {
                kind: kind.as_str(),
                result: answer.as_str(),
            })
            .inc();
    }

    /// The slow path: something changed, so write it down in one transaction:
    /// read the gate (locked), decide, apply what the answer changes (an
    /// expiry, a pin, the canary's wait), then record the observation.
    async fn record_check(
        self,
        key: &GateKey,
        check: &Check<'_>,
        input: &CheckInput,
        commit: Option<&str>,
    ) -> Result<Checked, CommandError> {
        let _turn = self.engine.write.lock().await;
        let now = self.engine.now();
        let mut tx = self.engine.store.begin().await?;
        // Locked: an expiry or a pin is decided on the gate as it stands, not on
        // one that another replica has since held or approved anew.
        let mut gate = self.engine.gate_in(&mut tx, key).await?;
        let mut verdict = self.verdict_of(key, &gate, check, commit, now);
        let metadata =
            serde_json::to_string(input.metadata.recorded()).unwrap_or_else(|_| "{}".into());
        let at = CheckAt {
            key,
            check,
            input,
            metadata: &metadata,
            now,
        };
        let mut out = Written::default();
        if verdict.expired {
            expire(&mut tx, &at, &mut gate, &mut out).await?;
        }
        let mut pinned_now = false;
        let passage = Clusters::passage(key, commit, now);
        if verdict.pin {
            match pin(&mut tx, &at, &mut gate, &mut out).await? {
                Pinned::Now => pinned_now = true,
                // Another replica pinned this canary to another revision first.
                Pinned::Elsewhere => verdict = self.verdict_of(key, &gate, check, commit, now),
                Pinned::Nothing => {}
            }
        }
        let (seen, before) = {
            let memory = self.engine.memory();
            let last = memory.last(key, check.canary);
            (
                last.map(SeenEntry::seen),
                last.map(|s| Before::of(s, check)),
            )
        };
        if let Some(p) = passage.filter(|_| pinned_now) {
            crate::store::Passages::record_passage(&mut tx, &p).await?;
            out.passage = Some(p);
        }
        let step = wait_step(key.kind, seen.as_ref(), check, verdict.answer);
        let change = change(verdict.expired, pinned_now, step, before, verdict.answer);
        let was_open = seen.as_ref().is_some_and(|s| s.wait_open);
        let wait_open = self
            .step_wait(&mut tx, &at, &verdict, step, was_open, &mut out)
            .await?;
        let (answer, reason) = (verdict.answer, &verdict.reason);
        crate::store::Observations::observe(&mut tx, key, check, answer, reason, &metadata, now)
            .await?;
        self.commit_check(tx, &gate, &at, &verdict, wait_open, out)
            .await?;
        Ok(Checked {
            verdict,
            change: Some(change),
        })
    }

    /// The answer for the canary at `gate` as it stands, freezes, windows
    /// and the environments' order included.
    fn verdict_of(
        self,
        key: &GateKey,
        gate: &Gate,
        check: &Check<'_>,
        commit: Option<&str>,
        now: Millis,
    ) -> Verdict {
        let settings = &self.engine.settings;
        let decided = decide(gate, check, now, settings.channels, &settings.quorum);
        let verdict = self
            .engine
            .freezes()
            .unless_frozen(key, Some(check.canary), now, decided);
        self.engine.clusters().in_order(gate, commit, now, verdict)
    }

    /// What Flagger is answered when the canary of `wait` asks again at its
    /// revision, now: read only, for a page to show beside the wait (a gate
    /// approved for another revision is closed for this one). The commit is
    /// the wait's `commit` metadata, as a check's.
    pub async fn answer_for_wait(self, wait: &WaitRow) -> Result<Verdict, StoreError> {
        let gate = self.engine.gate(&wait.gate).await?;
        let now = self.engine.now();
        let Some(canary) = &wait.canary else {
            return Ok(self.engine.freezes().unless_frozen(
                &wait.gate,
                None,
                now,
                peek(&gate, now, self.engine.settings.channels),
            ));
        };
        let commit = wait
            .metadata
            .get("commit")
            .and_then(|c| c.as_str())
            .filter(|c| crate::gate::environment::valid_commit(c))
            .map(str::to_ascii_lowercase);
        let phase = wait.phase.to_string();
        let check = Check {
            canary,
            checksum: &wait.checksum,
            phase: &phase,
        };
        Ok(self.verdict_of(&wait.gate, &gate, &check, commit.as_deref(), now))
    }

    /// Starts, restarts or ends the canary's wait as `step` says; whether a
    /// wait is open after it.
    async fn step_wait(
        self,
        tx: &mut WriteTx<'_>,
        at: &CheckAt<'_>,
        verdict: &Verdict,
        step: WaitStep,
        was_open: bool,
        out: &mut Written,
    ) -> Result<bool, StoreError> {
        match step {
            // An open answer that needs a write (a pin, a new observation) ends
            // the canary's wait even when this replica did not see it start:
            // on PostgreSQL another replica may have.
            WaitStep::Nothing if verdict.answer == Answer::Open => {
                end_wait(tx, at, "opened", out).await?;
                Ok(was_open)
            }
            WaitStep::Nothing => Ok(was_open),
            step @ (WaitStep::Start | WaitStep::Restart) => {
                if step == WaitStep::Restart {
                    end_wait(tx, at, "superseded", out).await?;
                }
                self.start_wait(tx, at, verdict, out).await?;
                Ok(true)
            }
            WaitStep::End => {
                end_wait(tx, at, "opened", out).await?;
                Ok(false)
            }
        }
    }

    /// A new wait for the canary, with its deadline and first reminder.
    async fn start_wait(
        self,
        tx: &mut WriteTx<'_>,
        at: &CheckAt<'_>,
        verdict: &Verdict,
        out: &mut Written,
    ) -> Result<(), StoreError> {
        let (key, check, now) = (at.key, at.check, at.now);
        let timers = &self.engine.settings.timers;
        let facts = WaitFacts {
            kind: key.kind,
            scope: &key.scope,
            canary: check.canary,
            metadata: at.input.metadata.recorded(),
            started_at: now,
            authenticated: at.input.cluster.is_some(),
        };
        let wait = NewWait {
            key,
            canary: check.canary,
            checksum: check.checksum,
            phase: check.phase,
            metadata: at.metadata,
            at: now,
            due_at: timers.due_at(&facts),
            remind_at: timers.remind_at(key.kind, now, 0),
            cluster: key.cluster.as_ref().or(at.input.cluster.as_ref()),
            vouched: at.input.cluster.is_some(),
        };
        // Past its cluster's budget a check starts no wait (and so no
        // message), vouched or not: a leaked token floods only its own
        // cluster's share. It is answered all the same.
        if self.engine.budget().draw("wait", wait.cluster, 1) == 0 {
            return Ok(());
        }
        if !wait.vouched {
            for ended in self.engine.bounds().make_room(tx, key, now).await? {
                out.notices
                    .push(super::bounds::ended_notice(&ended, "evicted", now));
                out.evicted.push(ended);
            }
        }
        let Some(wait_id) = crate::store::Waits::start_wait(tx, &wait).await? else {
            return Ok(());
        };
        let reason = verdict.reason.clone();
        let entry = entry_of(at, AuditAction::Wait, Actor::gatebot(), reason);
        out.audits.push(entry);
        out.notices.push(Notice::WaitStarted {
            wait_id,
            gate: key.clone(),
            canary: Some(check.canary.clone()),
            checksum: check.checksum.to_string(),
            phase: check.phase.to_string(),
            reason: verdict.reason.clone(),
            metadata: at.input.metadata.recorded().clone(),
            at: now,
        });
        self.engine
            .metrics
            .waits_started
            .get_or_create(&KindLabels {
                kind: key.kind.as_str(),
            })
            .inc();
        Ok(())
    }

    /// Writes the audit entries and notices, commits, and only then lets
    /// memory and the outbox know.
    async fn commit_check(
        self,
        mut tx: WriteTx<'_>,
        gate: &Gate,
        at: &CheckAt<'_>,
        verdict: &Verdict,
        wait_open: bool,
        out: Written,
    ) -> Result<(), StoreError> {
        let (key, check, now) = (at.key, at.check, at.now);
        let queued = self
            .engine
            .finish(&mut tx, &out.audits, &out.notices, now)
            .await?;
        let applying = self.engine.applying.lock().await;
        tx.commit().await?;
        self.engine.remember(gate);
        if let Some(p) = out.passage.clone() {
            self.engine.clusters().passed(p);
        }
        let (answer, reason) = (verdict.answer, &verdict.reason);
        self.engine
            .memory()
            .observe(key, check, answer, reason, wait_open, now);
        for wait in &out.evicted {
            self.engine.bounds().forget_wait(wait);
        }
        drop(applying);
        self.engine.after_commit(&out.audits, queued);
        Ok(())
    }
}

/// What a recorded check writes besides the gate, gathered as its steps decide.
#[derive(Default)]
struct Written {
    audits: Vec<AuditEntry>,
    notices: Vec<Notice>,
    /// A cluster's promote gate opened for a commit: the next environment's order.
    passage: Option<crate::store::Passage>,
    /// Made-up waits ended to make room for this one.
    evicted: Vec<crate::store::OpenWait>,
}

/// The check being recorded, as each step (an expiry, a pin, its wait) reads it.
struct CheckAt<'a> {
    key: &'a GateKey,
    check: &'a Check<'a>,
    input: &'a CheckInput,
    /// `input.metadata` as stored.
    metadata: &'a str,
    now: Millis,
}

/// Closes an approval that expired.
async fn expire(
    tx: &mut WriteTx<'_>,
    at: &CheckAt<'_>,
    gate: &mut Gate,
    out: &mut Written,
) -> Result<(), StoreError> {
    let (key, now) = (at.key, at.now);
    if let GateStatus::Open(approval) = &gate.status {
        let reason = format!("approval by {} expired", approval.change.by.name);
        let entry = entry_of(at, AuditAction::Expire, Actor::gatebot(), reason);
        out.audits.push(entry);
    }
    gate.status = GateStatus::Closed {
        change: Some(Change {
            by: Actor::gatebot(),
            reason: Some("approval expired".into()),
            at: now,
        }),
    };
    crate::store::Gates::put_gate(tx, gate).await?;
    out.notices.push(Notice::GateChanged {
        gate: key.clone(),
        action: AuditAction::Expire,
        actor: Actor::gatebot(),
        reason: Some("approval expired".into()),
        at: now,
        // The status comment of a named gate's PR shows the expiry time already.
        pr: None,
    });
    Ok(())
}

/// What pinning an approval to the canary's revision came to.
enum Pinned {
    /// Pinned to this revision now.
    Now,
    /// Pinned to another revision already (by another replica, first).
    Elsewhere,
    /// Nothing to pin: no approval, or no one who gave it.
    Nothing,
}

/// Pins the approval (or the votes enough for this canary's rule) to the
/// canary's revision.
async fn pin(
    tx: &mut WriteTx<'_>,
    at: &CheckAt<'_>,
    gate: &mut Gate,
    out: &mut Written,
) -> Result<Pinned, StoreError> {
    let (key, check, now) = (at.key, at.check, at.now);
    let by = match &gate.status {
        GateStatus::Open(approval) => Some(approval.change.by.clone()),
        GateStatus::Approving(tally) => tally.votes.last().map(|v| v.change.by.clone()),
        _ => None,
    };
    let (Some(id), Some(by)) = (gate.status.pins_id().map(str::to_string), by) else {
        return Ok(Pinned::Nothing);
    };
    let pinned = crate::store::Gates::pin(tx, key, &id, check.canary, check.checksum, now).await?;
    if let Some(pins) = gate.status.pins_mut() {
        pins.insert(check.canary.to_string(), pinned.clone());
    }
    if pinned != check.checksum {
        return Ok(Pinned::Elsewhere);
    }
    let reason = format!("approval used by {}", check.canary);
    out.audits.push(entry_of(at, AuditAction::Pin, by, reason));
    Ok(Pinned::Now)
}

/// An audit entry about the checking canary at its revision.
fn entry_of(at: &CheckAt<'_>, action: AuditAction, actor: Actor, reason: String) -> AuditEntry {
    let who = Provenance {
        reason: Some(reason),
        ..Provenance::new(actor)
    };
    AuditEntry {
        revision: Some(at.check.checksum.to_string()),
        canary: Some(at.check.canary.clone()),
        ..audit_entry(at.key, action, &who, at.now)
    }
}

/// Ends the canary's wait, if one is open, with `outcome`.
async fn end_wait(
    tx: &mut WriteTx<'_>,
    at: &CheckAt<'_>,
    outcome: &str,
    out: &mut Written,
) -> Result<(), StoreError> {
    let (key, check) = (at.key, at.check);
    if let Some(id) = crate::store::Waits::end_wait(tx, key, check.canary, outcome, at.now).await? {
        out.notices
            .push(wait_ended(id, key, check, outcome, at.now));
    }
    Ok(())
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
