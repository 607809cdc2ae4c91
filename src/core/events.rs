//! Flagger's event hook: the canary timeline and its milestones.

use super::admit::Admitted;
use super::*;
use crate::gate::progress::{self, CanaryProgress, Failure};

impl<'e> Events<'e> {
    /// Flagger is done with a canary (promoted, or rolling back): the
    /// changes gatebot opened for it are to be closed. Only an event a Flagger
    /// token vouched for closes anything outside.
    async fn done_with_changes(
        self,
        tx: &mut crate::store::WriteTx<'_>,
        canary: &CanaryRef,
        input: &CheckInput,
        kind: EventKind,
        now: Millis,
    ) -> Result<(), CommandError> {
        let creates = self
            .engine
            .settings
            .change
            .as_ref()
            .is_some_and(|r| r.mode == crate::gate::ticket::Mode::Create);
        let successful = match kind {
            EventKind::PromotionCompleted => true,
            EventKind::RollingBack | EventKind::CanaryFailed => false,
            _ => return Ok(()),
        };
        if let (true, Some(cluster)) = (creates, &input.cluster) {
            let revision = (canary.to_string(), input.checksum.recorded().clone());
            crate::store::Tickets::close_tickets_of(
                tx,
                (&revision.0, &revision.1),
                cluster.as_str(),
                successful,
                now,
            )
            .await?;
        }
        Ok(())
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
        let mut tx = self.engine.store.begin().await?;
        crate::store::History::insert_event(&mut tx, &row).await?;
        self.done_with_changes(&mut tx, canary, input, kind, now)
            .await?;
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
