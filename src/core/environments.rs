//! Environments in the check: which cluster's gate a check asks at, the
//! commit its revision is, and whether the environment before has promoted
//! that commit a soak ago. Passages (a cluster's promote gate opening for a
//! commit) are written with the check that pinned them and kept in memory,
//! so that the order is answered without the store.

use std::sync::Mutex;

use indexmap::IndexMap;

use super::admit::{Admit, Admitted};
use super::commands::{Act, Plan};
use super::dispatch::Request;
use super::{CheckInput, Clusters, CommandError};
use crate::command::{Command, Invalid};
use crate::gate::environment::{order, Environments, Order, Target, UNKNOWN_COMMIT};
use crate::gate::{ClusterName, Gate, GateKey, GateKind, GateStatus, Millis, Scope, Verdict};
use crate::store::{Passage, StoreError};

/// Promote gates and commits whose passages are kept in memory; the oldest
/// goes first. The store keeps them for the history's length.
const KEPT: usize = 10_000;

/// A promote gate (of every cluster) and a commit: the clusters that
/// promoted it, and when.
type Passed = IndexMap<(GateKey, String), Vec<(ClusterName, Millis)>>;

/// What memory keeps of the order: passages.
#[derive(Default)]
pub(super) struct Paths {
    passed: Mutex<Passed>,
}

impl Paths {
    fn pass(&self, p: Passage) {
        let mut passed = self.passed.lock().expect("passages poisoned");
        let clusters = passed.entry((p.gate, p.commit)).or_default();
        if !clusters.iter().any(|(c, _)| *c == p.cluster) {
            clusters.push((p.cluster, p.at));
        }
        if passed.len() > KEPT {
            passed.shift_remove_index(0);
        }
    }

    fn when(&self, gate: &GateKey, commit: &str, cluster: &ClusterName) -> Option<Millis> {
        let passed = self.passed.lock().expect("passages poisoned");
        let clusters = passed.get(&(gate.clone(), commit.to_string()))?;
        clusters
            .iter()
            .find(|(c, _)| c == cluster)
            .map(|(_, at)| *at)
    }
}

impl<'e> Clusters<'e> {
    /// The gate a check asks at: with `[[environments]]`, its cluster's
    /// (admitted by [`Admit::placement`]); without, the gate as named.
    pub(super) fn placed(self, key: &GateKey, input: &CheckInput) -> Result<GateKey, Verdict> {
        let cluster = self.engine.admit().placement(input)?;
        Ok(key.clone().at(Some(cluster.into_inner())))
    }

    /// The cluster a check or an event says it is from (see [`Admit::cluster_named`]).
    pub(super) fn cluster_named(self, input: &CheckInput) -> Option<ClusterName> {
        self.engine.admit().cluster_named(input)
    }

    /// The commit the checked revision was built from (see [`Admit::commit`]).
    pub(super) fn commit_known(input: &CheckInput) -> Option<String> {
        Admit::commit(input).map(Admitted::into_inner)
    }

    /// An open answer in a later environment, closed until the one before
    /// promoted the same commit a soak ago. Break glass skips the order; a
    /// rollback never waits for it. The approval stays unpinned, so it takes
    /// effect once the soak ends. A gate that still waits for its approval
    /// says where the revision stands too, before how to approve it.
    pub(super) fn in_order(
        self,
        gate: &Gate,
        commit: Option<&str>,
        now: Millis,
        verdict: Verdict,
    ) -> Verdict {
        let key = &gate.key;
        let open = verdict.answer == crate::gate::Answer::Open;
        let awaiting = !open
            && matches!(
                gate.status,
                GateStatus::Closed { .. } | GateStatus::Approving(_)
            )
            && verdict.reason.starts_with("waiting: ");
        if !(open || awaiting) || verdict.forced || key.kind.is_rollback() {
            return verdict;
        }
        let envs = &self.engine.settings.environments;
        let Some(env) = key.cluster.as_ref().and_then(|c| envs.of_cluster(c)) else {
            return verdict;
        };
        let promoted_gate = GateKey::new(GateKind::Promote, key.scope.clone());
        let promoted = |c: &ClusterName, at: &str| self.engine.paths.when(&promoted_gate, at, c);
        match order(envs, env, commit, promoted, now) {
            Order::Free => verdict,
            Order::Waiting(line) if open => Verdict {
                expired: verdict.expired,
                ..Verdict::closed(line)
            },
            Order::Waiting(line) => {
                let how = verdict.reason.trim_start_matches("waiting: ");
                Verdict {
                    reason: format!("{line}; and {how}"),
                    ..verdict
                }
            }
        }
    }

    /// The passage a pin at `key` makes, if it is a promote gate of a
    /// cluster: of [`UNKNOWN_COMMIT`] when the revision's commit is not
    /// known, so that the next environment says why it waits.
    pub(super) fn passage(key: &GateKey, commit: Option<&str>, at: Millis) -> Option<Passage> {
        if key.kind != GateKind::Promote {
            return None;
        }
        Some(Passage {
            gate: GateKey::new(GateKind::Promote, key.scope.clone()),
            commit: commit.unwrap_or(UNKNOWN_COMMIT).to_string(),
            cluster: key.cluster.clone()?,
            at,
        })
    }

    /// Lets memory know of a committed passage.
    pub(super) fn passed(self, p: Passage) {
        self.engine.paths.pass(p);
    }

    /// Loads the newest passages (at start, and when PostgreSQL's listener
    /// reconnects).
    pub(super) async fn load_passages(self) -> Result<(), StoreError> {
        if self.engine.settings.environments.is_empty() {
            return Ok(());
        }
        let mut all = self.engine.store.passages().all(KEPT as i64).await?;
        all.reverse();
        for p in all {
            self.engine.paths.pass(p);
        }
        Ok(())
    }

    /// Re-reads a promote gate's passages (another replica may have written one).
    pub(super) async fn refresh_passages(self, key: &GateKey) -> Result<(), StoreError> {
        if self.engine.settings.environments.is_empty() || key.kind != GateKind::Promote {
            return Ok(());
        }
        let gate = GateKey::new(GateKind::Promote, key.scope.clone());
        for p in self.engine.store.passages().passages_of(&gate).await? {
            self.engine.paths.pass(p);
        }
        Ok(())
    }
    /// Where a scope's gates are: each cluster's with environments, else
    /// the one gate of every cluster.
    pub(crate) fn placements(self) -> Vec<Option<ClusterName>> {
        let envs = &self.engine.settings.environments;
        match envs.is_empty() {
            true => vec![None],
            false => envs.clusters().cloned().map(Some).collect(),
        }
    }

    /// A command's gates in the clusters it is for. With environments, a gate
    /// named without a cluster stands for: the environment or cluster the
    /// request names (`--env`, or the first word after the command); else,
    /// for an open, the one environment that waits (several, or none: "which
    /// one?"); else every cluster. A gate of one cluster (a button's) and a
    /// pipeline's named gate stay as they are.
    pub(super) async fn place_plan(
        self,
        mut plan: Plan,
        request: &Request,
    ) -> Result<Result<Plan, Invalid>, CommandError> {
        let envs = &self.engine.settings.environments;
        let placed = |k: &GateKey| k.cluster.is_some() || matches!(k.scope, Scope::Named(_));
        // A gate of a cluster the policy does not name is no gate: nothing
        // is kept for it, so no one can grow memory with made-up clusters.
        let unknown = plan
            .keys
            .iter()
            .filter_map(|k| k.cluster.as_ref())
            .find(|c| envs.of_cluster(c).is_none());
        if let Some(cluster) = unknown {
            return Ok(Err(Invalid::UnknownPlace {
                place: cluster.to_string(),
                all: names(envs),
            }));
        }
        if let (true, Some(place)) = (envs.is_empty(), &request.place) {
            return Ok(Err(Invalid::UnknownPlace {
                place: place.clone(),
                all: Vec::new(),
            }));
        }
        if envs.is_empty() || plan.keys.iter().all(placed) {
            return Ok(Ok(plan));
        }
        let target = match request.place.as_deref() {
            Some(place) => match envs.target_of_word(place) {
                Some(t) => Some(t),
                None => {
                    return Ok(Err(Invalid::UnknownPlace {
                        place: place.to_string(),
                        all: names(envs),
                    }))
                }
            },
            None => first_word(&request.command).and_then(|w| envs.target_of_word(w)),
        };
        let clusters = match target {
            Some(t) => envs.clusters_of(&t),
            None if plan.act == Act::Open => match self.waiting(&plan.keys).await?.as_slice() {
                [one] => envs.clusters_of(&Target::Environment(one.clone())),
                waiting => {
                    return Ok(Err(Invalid::Which {
                        verb: request.command.name().to_string(),
                        waiting: waiting.iter().map(ToString::to_string).collect(),
                        all: envs.all().iter().map(|e| e.name.to_string()).collect(),
                    }))
                }
            },
            None => envs.clusters().cloned().collect(),
        };
        plan.keys = plan
            .keys
            .iter()
            .flat_map(|k| match placed(k) {
                true => vec![k.clone()],
                false => clusters
                    .iter()
                    .map(|c| k.clone().at(Some(c.clone())))
                    .collect(),
            })
            .collect();
        Ok(Ok(plan))
    }

    /// The environments where a canary waits at one of `keys`, in order.
    async fn waiting(self, keys: &[GateKey]) -> Result<Vec<ClusterName>, StoreError> {
        let mut out = Vec::new();
        for env in self.engine.settings.environments.all() {
            'env: for cluster in &env.clusters {
                for key in keys {
                    let at = key.clone().at(Some(cluster.clone()));
                    if !self
                        .engine
                        .store
                        .waits()
                        .list(Some(&at), true, 1)
                        .await?
                        .is_empty()
                    {
                        out.push(env.name.clone());
                        break 'env;
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The first word of a command's reason: where chat commands name an
/// environment or cluster (`/promote production`, `/hold prod-eu`).
fn first_word(command: &Command) -> Option<&str> {
    let reason = match command {
        Command::Open { reason, .. }
        | Command::Close { reason }
        | Command::Hold { reason }
        | Command::Unhold { reason } => reason.as_deref(),
        _ => None,
    };
    reason?.split_whitespace().next()
}

/// Every environment and cluster, for a refusal that lists them.
fn names(envs: &Environments) -> Vec<String> {
    envs.all()
        .iter()
        .flat_map(|e| std::iter::once(&e.name).chain(&e.clusters))
        .map(ToString::to_string)
        .collect()
}
