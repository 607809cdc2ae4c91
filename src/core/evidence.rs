//! Keeps the waiting canaries' numbers current (`evidence`): each pass reads
//! the open waits, fetches every waiting canary's numbers (a few at a time,
//! each call bounded by [limits] prometheus_timeout), and asks the surfaces to
//! show a changed line at most once a minute per canary. Runs beside the
//! gate check, never in it: a slow Prometheus delays only the next line.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::*;
use crate::evidence::Evidence;
use crate::gate::ClusterName;

/// How many canaries are asked about at once.
const AT_ONCE: usize = 8;

/// The most Prometheus queries one pass sends, whatever waits: past it the
/// remaining canaries are asked first at the next pass.
pub const QUERIES_PER_REFRESH: usize = 400;

/// The shortest time between two refreshes of one canary's messages.
pub const REFRESH_AT_MOST_EVERY: Millis = 60_000;

/// One waiting canary: the gates it waits at and its hook metadata.
struct Waiting {
    gates: Vec<GateKey>,
    metadata: BTreeMap<String, String>,
    /// The cluster whose Flagger token its first wait carried (or the
    /// cluster its gate is of): whose budget its queries draw from.
    cluster: Option<ClusterName>,
}

/// What the loop remembers between passes: when each canary's messages
/// were last refreshed, which wait for a refresh, and the progress numbers
/// last seen (a weight step refreshes them too).
#[derive(Default)]
pub struct Refreshed {
    at: HashMap<CanaryRef, Millis>,
    due: BTreeSet<CanaryRef>,
    progress: HashMap<CanaryRef, Numbers>,
    /// Where the next pass starts among the real waiting canaries, so that
    /// those past the query budget are not always the same.
    next: usize,
}

/// The numbers of a canary's progress that its messages show.
type Numbers = (String, Option<u32>, Option<(u32, u32)>, u32);

impl Refreshed {
    /// Forgets the canaries that no longer wait.
    fn keep(&mut self, waiting: &BTreeSet<CanaryRef>) {
        self.at.retain(|c, _| waiting.contains(c));
        self.due.retain(|c| waiting.contains(c));
        self.progress.retain(|c, _| waiting.contains(c));
    }

    /// The canaries due a refresh now, at most once a minute each; a change
    /// inside the minute waits for its end rather than being lost.
    fn take_due(&mut self, now: Millis) -> Vec<CanaryRef> {
        let ready: Vec<CanaryRef> = self
            .due
            .iter()
            .filter(|c| {
                self.at
                    .get(*c)
                    .is_none_or(|at| now - at >= REFRESH_AT_MOST_EVERY)
            })
            .cloned()
            .collect();
        for canary in &ready {
            self.due.remove(canary);
            self.at.insert(canary.clone(), now);
        }
        ready
    }
}

impl<'e> EvidenceRefresh<'e> {
    /// One pass: fetches the numbers of every waiting canary, and queues a
    /// refresh of the messages whose numbers changed. Returns how many.
    pub async fn refresh_evidence(
        self,
        evidence: &Evidence,
        refreshed: &mut Refreshed,
    ) -> Result<usize, CommandError> {
        if !evidence.is_on() {
            return Ok(0);
        }
        let waiting = self.waiting_canaries().await?;
        let now = self.engine.now();
        let mut changed = Vec::new();
        let mut real = Vec::new();
        let vouched = self.engine.store.waits().vouched_waiting_canaries().await?;
        for (canary, w) in &waiting {
            if self.is_real(canary, &vouched).await? {
                real.push((canary, w));
            }
        }
        let per = evidence.queries_per_canary();
        let fit = (QUERIES_PER_REFRESH / per).max(1);
        let start = refreshed.next % real.len().max(1);
        real.rotate_left(start);
        let asked = fit.min(real.len());
        refreshed.next = start + asked;
        for (_, w) in &real[asked..] {
            self.engine
                .budget()
                .count_refused("query", w.cluster.as_ref(), per);
        }
        // Each canary's queries also draw from its cluster's budget, so that
        // one cluster's canaries can't spend what another's need.
        let mut allowed = Vec::with_capacity(asked);
        for (c, w) in &real[..asked] {
            if self.engine.budget().draw("query", w.cluster.as_ref(), per) == per {
                allowed.push((*c, *w));
            }
        }
        for chunk in allowed.chunks(AT_ONCE) {
            let fetches = chunk
                .iter()
                .map(|(c, w)| evidence.fetch(c, &w.metadata, now));
            let fetched = futures_util::future::join_all(fetches).await;
            for ((canary, _), moved) in chunk.iter().zip(fetched) {
                if moved {
                    changed.push((*canary).clone());
                }
            }
        }
        let names: BTreeSet<CanaryRef> = waiting.keys().cloned().collect();
        evidence.retain(&names);
        refreshed.keep(&names);
        refreshed.due.extend(changed);
        for canary in &names {
            if self.progress_moved(canary, refreshed).await? {
                refreshed.due.insert(canary.clone());
            }
        }
        let notices: Vec<Notice> = refreshed
            .take_due(now)
            .into_iter()
            .map(|canary| {
                let gates = waiting[&canary].gates.clone();
                Notice::Evidence {
                    canary,
                    gates,
                    at: now,
                }
            })
            .collect();
        if notices.is_empty() {
            return Ok(0);
        }
        let mut tx = self.engine.store.begin().await?;
        let queued = self.engine.finish(&mut tx, &[], &notices, now).await?;
        tx.commit().await?;
        self.engine.after_commit(&[], queued);
        Ok(notices.len())
    }

    /// Whether `canary` is known to be real, so that its numbers may be read:
    /// a Flagger token vouched for its wait, a person's approval was used by
    /// it (a pin, at any gate), or the cluster showed its Canary
    /// object. A check alone is a claim, and so is an event: without Flagger
    /// tokens `/flagger/events` is as open as the checks (with them, the
    /// canary's waits are vouched already).
    async fn is_real(
        self,
        canary: &CanaryRef,
        vouched: &BTreeSet<CanaryRef>,
    ) -> Result<bool, CommandError> {
        if vouched.contains(canary) {
            return Ok(true);
        }
        if self
            .engine
            .origins
            .get()
            .is_some_and(|o| o.confirmed(canary))
        {
            return Ok(true);
        }
        Ok(self
            .engine
            .store
            .deployments()
            .canary_pinned(&canary.to_string())
            .await?)
    }

    /// Whether the canary's weight, iteration or failed checks moved since
    /// the last pass (Flagger's events change them between messages).
    async fn progress_moved(
        self,
        canary: &CanaryRef,
        refreshed: &mut Refreshed,
    ) -> Result<bool, CommandError> {
        let Some(p) = self.engine.store.progress().canary_progress(canary).await? else {
            return Ok(false);
        };
        let numbers = (p.checksum, p.weight, p.iteration, p.failed_checks);
        let before = refreshed.progress.insert(canary.clone(), numbers.clone());
        Ok(before.is_some_and(|b| b != numbers))
    }

    /// The canaries of the open waits, a page at a time.
    async fn waiting_canaries(self) -> Result<BTreeMap<CanaryRef, Waiting>, CommandError> {
        let mut out: BTreeMap<CanaryRef, Waiting> = BTreeMap::new();
        let mut after = 0;
        loop {
            let page = self.engine.store.waits().open_waits_after(after).await?;
            for wait in &page {
                let Some(canary) = &wait.canary else { continue };
                let entry = out.entry(canary.clone()).or_insert_with(|| Waiting {
                    gates: Vec::new(),
                    metadata: crate::evidence::strings(&wait.metadata),
                    cluster: wait.gate.cluster.clone().or_else(|| wait.cluster.clone()),
                });
                entry.gates.push(wait.gate.clone());
            }
            match page.last() {
                Some(last) if page.len() == crate::store::WAIT_PAGE => after = last.id,
                _ => return Ok(out),
            }
        }
    }
}
