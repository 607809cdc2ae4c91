//! Flagger's event hook: the canary timeline and its milestones.

use super::admit::Admitted;
use super::*;
use crate::gate::progress::{self, CanaryProgress, Failure};
use crate::store::tickets::TicketRow;

impl<'e> Events<'e> {
    /// Flagger is done with a canary (promoted, or rolling back): the
    /// changes gatebot opened for its revision are to be closed, each
    /// successful only when the promotion went through a gate its change's
    /// vote opened (not one break glass forced). Only an event a Flagger
    /// token vouched for closes anything outside, and only its cluster's.
    async fn changes_done(
        self,
        canary: &CanaryRef,
        input: &CheckInput,
        kind: EventKind,
    ) -> Result<Vec<(TicketRow, bool)>, CommandError> {
        let creates = self
            .engine
            .settings
            .change
            .as_ref()
            .is_some_and(|r| r.mode == crate::gate::ticket::Mode::Create);
        let promoted = match kind {
            EventKind::PromotionCompleted => true,
            EventKind::RollingBack | EventKind::CanaryFailed => false,
            _ => return Ok(Vec::new()),
        };
        let (true, Some(cluster)) = (creates, &input.cluster) else {
            return Ok(Vec::new());
        };
        let tickets = self.engine.store.tickets();
        let rows = tickets
            .tickets_of_revision(
                &canary.to_string(),
                input.checksum.recorded(),
                cluster.as_str(),
            )
            .await?;
        let mut done = Vec::with_capacity(rows.len());
        for row in rows {
            let status = self.engine.gate(&row.gate).await?.status;
            let opened = promoted && opened_by_change(&status, &row);
            done.push((row, opened));
        }
        Ok(done)
    }

    /// Records a Flagger event and tells people about milestones.
    pub async fn record_event(
        self,
        canary: &CanaryRef,
        input: &CheckInput,
        message: &str,
        event_type: &str,
        flagger_at: Option<Millis>,
    ) -> Result<EventKind, CommandError> {
        let now = self.engine.now();
        let kind = classify(message);
        let row = EventRow {
            received_at: now,
            canary: canary.clone(),
            phase: Phase::parse(input.phase.recorded()),
            checksum: input.checksum.recorded().clone(),
            event_type: event_type.to_string(),
            kind: kind.as_str().to_string(),
            message: message.to_string(),
            flagger_at,
            metadata: serde_json::to_string(input.metadata.recorded())
                .unwrap_or_else(|_| "{}".into()),
            cluster: match self.engine.settings.environments.is_empty() {
                true => input.cluster.clone(),
                false => self.engine.clusters().cluster_named(input),
            },
        };
        let gates = self.gates_told(canary, input).await?;
        let changes = self.changes_done(canary, input, kind).await?;
        let mut tx = self.engine.store.begin().await?;
        crate::store::History::insert_event(&mut tx, &row).await?;
        for (ticket, successful) in &changes {
            crate::store::Tickets::close_ticket_in(&mut tx, ticket, *successful, now).await?;
        }
        let mut notices = Vec::new();
        let failure = self
            .progress_in(&mut tx, canary, input, message, now)
            .await?;
        if let Some(f) = failure {
            notices.push(Notice::CanaryFailure {
                canary: canary.clone(),
                gates: gates.clone(),
                failure: f.as_str().to_string(),
                what: f.what().to_string(),
                message: message.to_string(),
                next: f.next().to_string(),
                checksum: input.checksum.recorded().clone(),
                metadata: input.metadata.recorded().clone(),
                at: now,
            });
        }
        if kind.is_final() {
            let ended = self.end_waits_in(&mut tx, &gates, canary, kind.as_str(), now);
            notices.extend(ended.await?);
        }
        if kind.is_milestone() {
            notices.push(Notice::CanaryEvent {
                canary: canary.clone(),
                gates,
                kind: kind.as_str().to_string(),
                message: message.to_string(),
                event_type: event_type.to_string(),
                phase: input.phase.recorded().clone(),
                checksum: input.checksum.recorded().clone(),
                metadata: input.metadata.recorded().clone(),
                at: now,
            });
        }
        let queued = self.engine.finish(&mut tx, &[], &notices, now).await?;
        tx.commit().await?;
        self.engine.after_commit(&[], queued);
        self.engine
            .metrics
            .events
            .get_or_create(&ActionLabels {
                action: kind.as_str().to_string(),
            })
            .inc();
        Ok(kind)
    }

    /// The gates an event of `canary` is told at: those it was seen at, and
    /// its PR's start and promote gates when its metadata names a PR. With
    /// environments, only its own cluster's: a canary of the same name in
    /// another cluster is another rollout.
    async fn gates_told(
        self,
        canary: &CanaryRef,
        input: &CheckInput,
    ) -> Result<Vec<GateKey>, CommandError> {
        let mut gates = self.engine.store.gates().gates_of_canary(canary).await?;
        let cluster = match self.engine.settings.environments.is_empty() {
            true => None,
            false => self.engine.clusters().cluster_named(input),
        };
        gates.retain(|k| k.cluster.is_none() || k.cluster == cluster);
        if let Some(pr) = self
            .engine
            .admit()
            .event_pr(&input.metadata)
            .map(Admitted::into_inner)
        {
            for kind in [GateKind::Start, GateKind::Promote] {
                let key = GateKey::new(kind, pr.clone()).at(cluster.clone());
                if !gates.contains(&key) {
                    gates.push(key);
                }
            }
        }
        Ok(gates)
    }

    /// Ends the canary's waits at `gates` (its rollout is over), each said once.
    async fn end_waits_in(
        self,
        tx: &mut WriteTx<'_>,
        gates: &[GateKey],
        canary: &CanaryRef,
        outcome: &str,
        now: Millis,
    ) -> Result<Vec<Notice>, CommandError> {
        let mut notices = Vec::new();
        let keys: HashSet<&GateKey> = gates.iter().collect();
        for key in keys {
            if let Some(id) = crate::store::Waits::end_wait(tx, key, canary, outcome, now).await? {
                notices.push(Notice::WaitEnded {
                    wait_id: id,
                    gate: key.clone(),
                    canary: Some(canary.clone()),
                    outcome: outcome.to_string(),
                    at: now,
                });
                self.engine.memory().end_wait(key, canary);
            }
        }
        Ok(notices)
    }

    /// Folds the event into the canary's stored progress, in the event's
    /// transaction; the failure to announce, once per revision and kind.
    async fn progress_in(
        self,
        tx: &mut WriteTx<'_>,
        canary: &CanaryRef,
        input: &CheckInput,
        message: &str,
        now: Millis,
    ) -> Result<Option<Failure>, StoreError> {
        let prev = match self.engine.store.backend() {
            Backend::Sqlite => crate::store::Progress::canary_progress_in(tx, canary).await?,
            Backend::Postgres => crate::store::Progress::lock_canary_progress(tx, canary).await?,
        };
        let seen = progress::Seen {
            checksum: input.checksum.recorded(),
            message,
            threshold: progress::threshold_of(input.metadata.recorded().get("threshold")),
            at: now,
        };
        let (next, failure) = CanaryProgress::after(prev, seen);
        crate::store::Progress::put_canary_progress(tx, canary, &next).await?;
        Ok(failure)
    }

    /// Writes last-seen times gathered since the last flush.
    pub async fn flush_seen(self) -> Result<usize, StoreError> {
        let batch = self.engine.memory().take_dirty();
        self.engine
            .store
            .observations()
            .touch_observations(&batch)
            .await?;
        self.engine
            .metrics
            .waits_open
            .set(self.engine.store.waits().open_wait_count().await?);
        Ok(batch.len())
    }
}

/// Whether the ticket's change opened its gate for its canary at its
/// revision: among those whose approvals opened it, and not by break glass.
fn opened_by_change(status: &GateStatus, row: &TicketRow) -> bool {
    let GateStatus::Open(a) = status else {
        return false;
    };
    // The change votes as gatebot: a person named like it is not it.
    let by_change = |actor: &Actor| {
        actor.source == Source::Gatebot && actor.name.eq_ignore_ascii_case(&row.number)
    };
    !a.forced
        && a.pins.get(&row.canary) == Some(&row.checksum)
        && (by_change(&a.change.by) || a.approvers.iter().any(by_change))
}
