//! Read models: gates as the API, the CLI and `/status` list them, and one page
//! of the gate list, read by key range so that a page costs the same whatever
//! the number of gates.

use super::*;

/// A gate as the API lists it.
#[derive(Debug, Clone, Serialize)]
pub struct GateSummary {
    pub gate: String,
    pub state: &'static str,
    pub by: Option<Actor>,
    pub reason: Option<String>,
    pub at: Option<Millis>,
    pub expires_at: Option<Millis>,
    /// At a gate that needs several people: "1 of 2 approvals: @alice".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<String>,
    /// Opened by break glass.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    pub canaries: Vec<CanarySeen>,
}

/// One gate in full.
#[derive(Debug, Clone, Serialize)]
pub struct GateDetail {
    #[serde(flatten)]
    pub gate: Gate,
    pub observations: Vec<ObservationRow>,
    pub waits: Vec<WaitRow>,
    pub audit: Vec<AuditEntry>,
    /// What the pipeline that created a named gate said about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub named: Option<crate::store::NamedGate>,
}

/// Gates in key order, and the cursor of the next page (its last key) when
/// there may be more.
#[derive(Debug, Clone, Serialize)]
pub struct GatePage {
    pub gates: Vec<GateSummary>,
    pub next: Option<String>,
}

impl<'e> Reads<'e> {
    /// Every gate anyone opened or Flagger asked, with the canaries at it.
    pub async fn list(self) -> Result<Vec<GateSummary>, StoreError> {
        self.summaries(|_| true).await
    }

    /// [`Reads::list`], of the gates `keep` keeps.
    async fn summaries(
        self,
        keep: impl Fn(&GateKey) -> bool,
    ) -> Result<Vec<GateSummary>, StoreError> {
        let mut gates: BTreeMap<String, Gate> = match self.engine.store.backend() {
            Backend::Sqlite => self
                .engine
                .memory()
                .gates()
                .into_iter()
                .map(|g| (g.key.to_string(), g))
                .collect(),
            Backend::Postgres => self
                .engine
                .store
                .gates()
                .load_gates()
                .await?
                .into_iter()
                .map(|g| (g.key.to_string(), g))
                .collect(),
        };
        let observations = self.engine.store.observations().load_observations().await?;
        let waits: HashMap<i64, Millis> = self
            .engine
            .store
            .waits()
            .list(None, true, 10_000)
            .await?
            .into_iter()
            .map(|w| (w.id, w.started_at))
            .collect();
        let mut canaries: BTreeMap<String, Vec<CanarySeen>> = BTreeMap::new();
        for o in observations {
            let key = o.gate.to_string();
            gates
                .entry(key.clone())
                .or_insert_with(|| Gate::closed(o.gate.clone()));
            canaries.entry(key).or_default().push(CanarySeen {
                waiting_since: o.wait_id.and_then(|id| waits.get(&id).copied()),
                canary: o.canary,
                checksum: o.checksum,
                phase: o.phase,
                answer: o.answer,
                reason: o.reason,
                last_seen: o.last_seen,
            });
        }
        let memory = self.engine.memory();
        Ok(gates
            .into_values()
            .filter(|gate| keep(&gate.key))
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

    pub async fn detail(self, key: &GateKey) -> Result<GateDetail, StoreError> {
        let gate = self.engine.gate(key).await?;
        Ok(GateDetail {
            gate,
            observations: self
                .engine
                .store
                .observations()
                .observations_for(key)
                .await?,
            waits: self.engine.store.waits().list(Some(key), false, 50).await?,
            audit: self
                .engine
                .store
                .history()
                .audit_log(Some(key), 100)
                .await?,
            named: self.engine.named().find(key).await?,
        })
    }

    /// The gates of one PR that exist (opened or asked by Flagger).
    pub async fn gates_of_pr(
        self,
        repo: &RepoName,
        number: crate::gate::PrNumber,
    ) -> Result<Vec<GateSummary>, StoreError> {
        self.summaries(|k| k.pr().is_some_and(|(r, n)| r == repo && n == number))
            .await
    }

    /// Up to `limit` gates after the key `after` (from the first when `None`),
    /// as [`Reads::list`] shows them.
    pub async fn page(self, after: Option<&str>, limit: usize) -> Result<GatePage, StoreError> {
        let want = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut keys = self
            .engine
            .store
            .pages()
            .gate_keys_after(after, want.saturating_add(1))
            .await?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
            return Ok(GatePage {
                gates: Vec::new(),
                next: None,
            });
        };
        let (first, last) = (first.to_string(), last.to_string());
        let mut stored: HashMap<GateKey, Gate> = match self.engine.store.backend() {
            Backend::Sqlite => {
                let memory = self.engine.memory();
                keys.iter()
                    .filter_map(|k| memory.gate(k).map(|g| (k.clone(), g)))
                    .collect()
            }
            Backend::Postgres => self
                .engine
                .store
                .pages()
                .gates_between(&first, &last)
                .await?
                .into_iter()
                .map(|g| (g.key.clone(), g))
                .collect(),
        };
        let mut canaries: HashMap<GateKey, Vec<CanarySeen>> = HashMap::new();
        for (key, seen) in self
            .engine
            .store
            .pages()
            .canaries_between(&first, &last)
            .await?
        {
            canaries.entry(key).or_default().push(seen);
        }
        let memory = self.engine.memory();
        let next = more.then_some(last);
        let gates = keys
            .iter()
            .map(|key| {
                let gate = stored
                    .remove(key)
                    .unwrap_or_else(|| Gate::closed(key.clone()));
                let mut at_gate = canaries.remove(key).unwrap_or_default();
                for c in &mut at_gate {
                    if let Some(at) = memory.last_seen(key, &c.canary) {
                        c.last_seen = c.last_seen.max(at);
                    }
                }
                summarise(gate, at_gate)
            })
            .collect();
        Ok(GatePage { gates, next })
    }
}

pub(super) fn summarise(gate: Gate, canaries: Vec<CanarySeen>) -> GateSummary {
    let (state, change, expires_at) = match &gate.status {
        GateStatus::Open(a) => ("open", Some(&a.change), a.expires_at),
        GateStatus::Closed { change } => ("closed", change.as_ref(), None),
        GateStatus::Held { change } => ("held", Some(change), None),
        GateStatus::Approving(t) => ("approving", t.votes.last().map(|v| &v.change), None),
    };
    let (approvals, forced) = match &gate.status {
        GateStatus::Approving(t) => (Some(t.summary()), false),
        GateStatus::Open(a) => (crate::gate::quorum::opened_by(a), a.forced),
        _ => (None, false),
    };
    GateSummary {
        gate: gate.key.to_string(),
        state,
        approvals,
        forced,
        by: change.map(|c| c.by.clone()),
        reason: change.and_then(|c| c.reason.clone()),
        at: change.map(|c| c.at),
        expires_at,
        canaries,
    }
}
