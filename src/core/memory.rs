//! What the engine keeps in memory: every gate (with SQLite this process is the
//! only writer, so the copy is the truth; with PostgreSQL it is trusted while
//! other replicas' changes are heard), and the last check of every canary at
//! every gate (what the steady-state check compares against).
//!
//! Sized for 100,000 gates in a few tens of megabytes: repositories, canaries and
//! people are stored once and referred to by number; a revision is shared by a
//! pin and the observation that made it; a check's reason is kept as a digest,
//! because it is only compared, never shown; Flagger's own phases take one byte.
//! The domain types (`Gate`, `GateKey`) are rebuilt on the way out.

mod compact;

use std::collections::BTreeMap;

use indexmap::{IndexMap, IndexSet};

use crate::gate::{
    Actor, Answer, Approval, CanaryRef, Change, Check, ClusterName, Gate, GateKey, GateName,
    GateStatus, Millis, Namespace, PrNumber, RepoName, Scope,
};
pub use compact::SeenEntry;
use compact::{
    halves, ApprovalId, Approved, CanaryLookup, CanaryName, Changed, Key, Phase, Pin, Quorum,
    ReasonDigest, Revision, Slot, Status, Tag, NEVER,
};

/// One observation as loaded from the store.
pub struct Observed<'a> {
    pub gate: &'a GateKey,
    pub canary: &'a str,
    pub checksum: &'a str,
    pub phase: &'a str,
    pub answer: Answer,
    pub reason: &'a str,
    pub wait_open: bool,
    pub last_seen: Millis,
}

pub struct Memory {
    keeps_gates: bool,
    repos: IndexSet<RepoName>,
    canaries: IndexSet<CanaryName>,
    /// Namespaces and gate names of gates scoped by them.
    names: IndexSet<Box<str>>,
    actors: IndexSet<Actor>,
    /// The clusters of gates kept per cluster (a handful: the policy's).
    clusters: IndexSet<ClusterName>,
    gates: IndexMap<Key, Slot>,
}

impl Memory {
    /// `keeps_gates`: gates are kept too, not only last checks.
    pub fn new(keeps_gates: bool) -> Self {
        Self {
            keeps_gates,
            repos: IndexSet::new(),
            canaries: IndexSet::new(),
            names: IndexSet::new(),
            actors: IndexSet::new(),
            clusters: IndexSet::new(),
            gates: IndexMap::new(),
        }
    }

    /// Gives back what loading left over.
    pub fn shrink_to_fit(&mut self) {
        self.repos.shrink_to_fit();
        self.canaries.shrink_to_fit();
        self.names.shrink_to_fit();
        self.actors.shrink_to_fit();
        self.gates.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.gates.len()
    }

    fn find(&self, key: &GateKey) -> Option<Key> {
        let (tag, id, number) = match &key.scope {
            Scope::Pr { repo, number } => (Tag::Pr, self.repos.get_index_of(repo)?, number.0),
            Scope::Canary(c) => (
                Tag::Canary,
                self.canaries.get_index_of(&CanaryLookup::of(c))?,
                0,
            ),
            Scope::Namespace(ns) => (Tag::Namespace, self.names.get_index_of(ns.as_str())?, 0),
            Scope::Named(name) => (Tag::Named, self.names.get_index_of(name.as_str())?, 0),
        };
        let cluster = match &key.cluster {
            Some(c) => self.clusters.get_index_of(c)? as u16 + 1,
            None => 0,
        };
        Some(Key {
            kind: key.kind,
            tag,
            id: id as u32,
            cluster,
            number,
        })
    }

    fn intern(&mut self, key: &GateKey) -> Key {
        if let Some(k) = self.find(key) {
            return k;
        }
        let (tag, id, number) = match &key.scope {
            Scope::Pr { repo, number } => {
                (Tag::Pr, self.repos.insert_full(repo.clone()).0, number.0)
            }
            Scope::Canary(c) => (Tag::Canary, self.canary_id(&c.to_string()), 0),
            Scope::Namespace(ns) => (Tag::Namespace, self.name_id(ns.as_str()), 0),
            Scope::Named(name) => (Tag::Named, self.name_id(name.as_str()), 0),
        };
        let cluster = match &key.cluster {
            // Clusters come from the policy, so a u16 holds them all.
            Some(c) => self.clusters.insert_full(c.clone()).0 as u16 + 1,
            None => 0,
        };
        Key {
            kind: key.kind,
            tag,
            id: id as u32,
            cluster,
            number,
        }
    }

    fn name_id(&mut self, name: &str) -> usize {
        match self.names.get_index_of(name) {
            Some(i) => i,
            None => self.names.insert_full(name.into()).0,
        }
    }

    fn canary_id(&mut self, canary: &str) -> usize {
        match self.canaries.get_index_of(&CanaryLookup(halves(canary))) {
            Some(i) => i,
            None => self.canaries.insert_full(CanaryName(canary.into())).0,
        }
    }

    fn canary_of(&self, c: &CanaryRef) -> Option<u32> {
        self.canaries
            .get_index_of(&CanaryLookup::of(c))
            .map(|i| i as u32)
    }

    fn canary_text(&self, id: u32) -> &str {
        self.canaries.get_index(id as usize).map_or("", |c| &c.0)
    }

    fn gate_key(&self, k: &Key) -> Option<GateKey> {
        let name = || self.names.get_index(k.id as usize);
        let scope = match k.tag {
            Tag::Pr => Scope::Pr {
                repo: self.repos.get_index(k.id as usize)?.clone(),
                number: PrNumber(k.number),
            },
            Tag::Canary => {
                let (ns, name) = self.canary_text(k.id).split_once('/')?;
                Scope::Canary(CanaryRef::new(ns, name).ok()?)
            }
            Tag::Namespace => Scope::Namespace(Namespace::new(name()?).ok()?),
            Tag::Named => Scope::Named(GateName::new(name()?).ok()?),
        };
        let cluster = match k.cluster {
            0 => None,
            n => Some(self.clusters.get_index(usize::from(n) - 1)?.clone()),
        };
        Some(GateKey::new(k.kind, scope).at(cluster))
    }

    // ---- gates ----

    /// The gate as last written, if this memory keeps gates and it was ever changed.
    pub fn gate(&self, key: &GateKey) -> Option<Gate> {
        let status = self.gates.get(&self.find(key)?)?.status.as_ref()?;
        Some(Gate {
            key: key.clone(),
            status: self.status(status),
        })
    }

    /// Every gate kept, in no particular order.
    pub fn gates(&self) -> Vec<Gate> {
        self.gates
            .iter()
            .filter_map(|(k, slot)| {
                Some(Gate {
                    key: self.gate_key(k)?,
                    status: self.status(slot.status.as_ref()?),
                })
            })
            .collect()
    }

    pub fn put_gate(&mut self, gate: &Gate) {
        if !self.keeps_gates {
            return;
        }
        let key = self.intern(&gate.key);
        let status = match &gate.status {
            GateStatus::Closed { change } => {
                Status::Closed(change.as_ref().map(|c| self.changed(c)))
            }
            GateStatus::Held { change } => Status::Held(self.changed(change)),
            GateStatus::Open(a) => {
                let mut pins = Vec::with_capacity(a.pins.len());
                for (canary, checksum) in &a.pins {
                    let canary = self.canary_id(canary) as u32;
                    let shared = self
                        .gates
                        .get(&key)
                        .and_then(|s| s.observed(canary, checksum));
                    pins.push(Pin {
                        canary,
                        checksum: shared.unwrap_or_else(|| Revision(checksum.as_str().into())),
                    });
                }
                Status::Open(Approved {
                    id: ApprovalId::new(&a.id),
                    change: self.changed(&a.change),
                    expires_at: a.expires_at.unwrap_or(NEVER),
                    pins: pins.into_boxed_slice(),
                    quorum: (a.approvers.len() > 1 || a.forced || a.exclusive).then(|| {
                        Box::new(Quorum {
                            approvers: a.approvers.clone(),
                            forced: a.forced,
                            exclusive: a.exclusive,
                        })
                    }),
                })
            }
            GateStatus::Approving(t) => Status::Approving(Box::new(t.clone())),
        };
        self.gates.entry(key).or_default().status = Some(status);
    }

    fn changed(&mut self, c: &Change) -> Changed {
        let by = match self.actors.get_index_of(&c.by) {
            Some(i) => i,
            None => self.actors.insert_full(c.by.clone()).0,
        };
        Changed {
            by: by as u32,
            reason: c.reason.as_deref().map(Into::into),
            at: c.at,
        }
    }

    fn change(&self, c: &Changed) -> Change {
        Change {
            by: self
                .actors
                .get_index(c.by as usize)
                .cloned()
                .unwrap_or_else(Actor::gatebot),
            reason: c.reason.as_deref().map(str::to_string),
            at: c.at,
        }
    }

    fn status(&self, s: &Status) -> GateStatus {
        match s {
            Status::Closed(c) => GateStatus::Closed {
                change: c.as_ref().map(|c| self.change(c)),
            },
            Status::Held(c) => GateStatus::Held {
                change: self.change(c),
            },
            Status::Open(a) => GateStatus::Open(Approval {
                id: a.id.text(),
                change: self.change(&a.change),
                expires_at: Some(a.expires_at).filter(|t| *t != NEVER),
                pins: a
                    .pins
                    .iter()
                    .map(|p| {
                        (
                            self.canary_text(p.canary).to_string(),
                            p.checksum.0.to_string(),
                        )
                    })
                    .collect::<BTreeMap<_, _>>(),
                approvers: a
                    .quorum
                    .as_ref()
                    .map_or_else(Vec::new, |q| q.approvers.clone()),
                forced: a.quorum.as_ref().is_some_and(|q| q.forced),
                exclusive: a.quorum.as_ref().is_some_and(|q| q.exclusive),
            }),
            Status::Approving(t) => GateStatus::Approving((**t).clone()),
        }
    }

    // ---- last checks ----

    pub fn last(&self, key: &GateKey, canary: &CanaryRef) -> Option<&SeenEntry> {
        let canary = self.canary_of(canary)?;
        let slot = self.gates.get(&self.find(key)?)?;
        slot.seen.iter().find(|(c, _)| *c == canary).map(|(_, s)| s)
    }

    pub fn last_mut(&mut self, key: &GateKey, canary: &CanaryRef) -> Option<&mut SeenEntry> {
        let canary = self.canary_of(canary)?;
        let key = self.find(key)?;
        let slot = self.gates.get_mut(&key)?;
        slot.seen
            .iter_mut()
            .find(|(c, _)| *c == canary)
            .map(|(_, s)| s)
    }

    /// The canaries waiting at a gate now, each with the revision that waits.
    pub fn waiting_at(&self, key: &GateKey) -> Vec<(String, String)> {
        let Some(slot) = self.find(key).and_then(|k| self.gates.get(&k)) else {
            return Vec::new();
        };
        slot.seen
            .iter()
            .filter(|(_, s)| s.wait_open)
            .map(|(c, s)| (self.canary_text(*c).to_string(), s.checksum.0.to_string()))
            .collect()
    }

    /// When the canary last asked the gate.
    pub fn last_seen(&self, key: &GateKey, canary: &CanaryRef) -> Option<Millis> {
        let canary = self.canary_of(canary)?;
        let slot = self.gates.get(&self.find(key)?)?;
        slot.seen
            .iter()
            .find(|(c, _)| *c == canary)
            .map(|(_, s)| s.last_seen)
    }

    /// Records a check that was just written to the store.
    pub fn observe(
        &mut self,
        key: &GateKey,
        check: &Check<'_>,
        answer: Answer,
        reason: &str,
        wait_open: bool,
        now: Millis,
    ) {
        let canary = check.canary.to_string();
        self.load(Observed {
            gate: key,
            canary: &canary,
            checksum: check.checksum,
            phase: check.phase,
            answer,
            reason,
            wait_open,
            last_seen: now,
        });
    }

    /// Records a check as the store has it.
    pub fn load(&mut self, o: Observed<'_>) {
        let key = self.intern(o.gate);
        let canary = self.canary_id(o.canary) as u32;
        let slot = self.gates.entry(key).or_default();
        let checksum = slot
            .pinned(canary, o.checksum)
            .or_else(|| slot.observed(canary, o.checksum))
            .unwrap_or_else(|| Revision(o.checksum.into()));
        let entry = SeenEntry {
            checksum,
            phase: Phase::new(o.phase),
            answer: o.answer,
            reason: ReasonDigest::new(o.reason),
            wait_open: o.wait_open,
            last_seen: o.last_seen,
            dirty: false,
        };
        match slot.seen.iter_mut().find(|(c, _)| *c == canary) {
            Some((_, s)) => *s = entry,
            None => {
                let mut seen = std::mem::take(&mut slot.seen).into_vec();
                seen.reserve_exact(1);
                seen.push((canary, entry));
                slot.seen = seen.into_boxed_slice();
            }
        }
    }

    pub fn end_wait(&mut self, key: &GateKey, canary: &CanaryRef) {
        if let Some(s) = self.last_mut(key, canary) {
            s.wait_open = false;
        }
    }

    /// Forgets the canary's last check at the gate (a made-up wait ended for
    /// want of room or of asking), and the gate's slot when nothing is left
    /// in it, so a flood of made-up canaries leaves no entry behind. Its name
    /// stays interned (ids are positions), a few dozen bytes.
    pub fn forget(&mut self, key: &GateKey, canary: &CanaryRef) {
        let (Some(canary), Some(key)) = (self.canary_of(canary), self.find(key)) else {
            return;
        };
        let Some(slot) = self.gates.get_mut(&key) else {
            return;
        };
        if !slot.seen.iter().any(|(c, _)| *c == canary) {
            return;
        }
        let seen: Vec<_> = std::mem::take(&mut slot.seen)
            .into_vec()
            .into_iter()
            .filter(|(c, _)| *c != canary)
            .collect();
        slot.seen = seen.into_boxed_slice();
        if slot.seen.is_empty() && slot.status.is_none() {
            self.gates.swap_remove(&key);
        }
    }

    /// Last-seen times that moved since the last call: (gate, canary, time).
    pub fn take_dirty(&mut self) -> Vec<(String, String, Millis)> {
        let mut out = Vec::new();
        for i in 0..self.gates.len() {
            let Some((key, slot)) = self.gates.get_index(i) else {
                continue;
            };
            if !slot.seen.iter().any(|(_, s)| s.dirty) {
                continue;
            }
            let Some(gate) = self.gate_key(key).map(|k| k.to_string()) else {
                continue;
            };
            for (c, s) in &slot.seen {
                if s.dirty {
                    out.push((gate.clone(), self.canary_text(*c).to_string(), s.last_seen));
                }
            }
            if let Some((_, slot)) = self.gates.get_index_mut(i) {
                for (_, s) in slot.seen.iter_mut() {
                    s.dirty = false;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Source;

    fn key(text: &str) -> GateKey {
        GateKey::parse(text, None).unwrap()
    }

    fn open(key: &GateKey, pins: &[(&str, &str)]) -> Gate {
        Gate {
            key: key.clone(),
            status: GateStatus::Open(Approval {
                id: uuid::Uuid::new_v4().to_string(),
                change: Change {
                    by: Actor::new("alice", Source::Github),
                    reason: Some("looks good".into()),
                    at: 7,
                },
                expires_at: Some(99),
                pins: pins
                    .iter()
                    .map(|(c, s)| (c.to_string(), s.to_string()))
                    .collect(),
                approvers: Vec::new(),
                forced: false,
                exclusive: false,
            }),
        }
    }

    #[test]
    fn gates_come_back_as_they_went_in() {
        let mut m = Memory::new(true);
        let pr = key("/gates/promote/acme/shop/pr/42");
        let canary = key("/gates/traffic/canary/test/podinfo");
        let legacy = key("/loadtester/gate/test/podinfo");
        let mut odd = open(&pr, &[("test/podinfo", "r1"), ("test/backend", "b7")]);
        if let GateStatus::Open(a) = &mut odd.status {
            a.id = "not-a-uuid".into();
        }
        let mut quorum = open(
            &key("/gates/start/acme/shop/pr/43"),
            &[("test/podinfo", "r1")],
        );
        if let GateStatus::Open(a) = &mut quorum.status {
            a.approvers = vec![
                Actor::new("alice", Source::Github),
                Actor::new("bob", Source::Slack),
            ];
            a.forced = true;
        }
        let mut exclusive = open(
            &key("/gates/rollback/acme/shop/pr/44"),
            &[("test/podinfo", "r1")],
        );
        if let GateStatus::Open(a) = &mut exclusive.status {
            a.exclusive = true;
        }
        let mut approving = Gate {
            key: key("/gates/traffic/acme/shop/pr/42"),
            status: GateStatus::Approving(crate::gate::Tally::new("t", 2).with(
                crate::gate::Vote {
                    person: "alice".into(),
                    change: Change {
                        by: Actor::new("alice", Source::Github),
                        reason: None,
                        at: 5,
                    },
                    revision: Some(("test/podinfo".into(), "r1".into())),
                    groups: Vec::new(),
                },
            )),
        };
        if let GateStatus::Approving(t) = &mut approving.status {
            t.pins.insert("dev/podinfo".into(), "d1".into());
        }
        let gates = [
            odd,
            quorum,
            exclusive,
            approving,
            open(&canary, &[]),
            Gate {
                key: legacy.clone(),
                status: GateStatus::Held {
                    change: Change {
                        by: Actor::new("bob", Source::Slack),
                        reason: None,
                        at: 3,
                    },
                },
            },
        ];
        for g in &gates {
            m.put_gate(g);
        }
        for g in &gates {
            assert_eq!(m.gate(&g.key).as_ref(), Some(g));
        }
        assert_eq!(m.gate(&key("/gates/start/acme/shop/pr/42")), None);
        let mut all = m.gates();
        all.sort_by_key(|g| g.key.to_string());
        assert_eq!(all.len(), gates.len());
    }

    #[test]
    fn a_pin_and_its_observation_share_the_revision() {
        let mut m = Memory::new(true);
        let pr = key("/gates/promote/acme/shop/pr/42");
        let c = CanaryRef::new("test", "podinfo").unwrap();
        m.put_gate(&open(&pr, &[("test/podinfo", "r1")]));
        let check = Check {
            canary: &c,
            checksum: "r1",
            phase: "Progressing",
        };
        m.observe(&pr, &check, Answer::Open, "approved", false, 5);
        let slot = &m.gates[0];
        let Some(Status::Open(a)) = &slot.status else {
            panic!("not open")
        };
        assert!(std::sync::Arc::ptr_eq(
            &a.pins[0].checksum.0,
            &slot.seen[0].1.checksum.0
        ));
        let s = m.last(&pr, &c).unwrap();
        assert!(s.phase == "Progressing".to_string());
        assert!(s.reason == "approved".to_string());
        assert!(s.reason != "approved by bob".to_string());
        assert!(s.checksum == "r1".to_string());
    }

    #[test]
    fn last_seen_times_are_taken_once() {
        let mut m = Memory::new(false);
        let pr = key("/gates/start/acme/shop/pr/1");
        let c = CanaryRef::new("test", "podinfo").unwrap();
        let check = Check {
            canary: &c,
            checksum: "r1",
            phase: "Odd phase",
        };
        m.observe(&pr, &check, Answer::Closed, "waiting", true, 5);
        assert_eq!(m.gate(&pr), None, "PostgreSQL: gates are not kept");
        let s = m.last_mut(&pr, &c).unwrap();
        assert!(s.phase == "Odd phase".to_string());
        s.last_seen = 9;
        s.dirty = true;
        assert_eq!(
            m.take_dirty(),
            vec![(pr.to_string(), "test/podinfo".to_string(), 9)]
        );
        assert!(m.take_dirty().is_empty());
        assert_eq!(m.last_seen(&pr, &c), Some(9));
        m.end_wait(&pr, &c);
        assert!(!m.last(&pr, &c).unwrap().wait_open);
        m.forget(&pr, &c);
        assert!(m.last(&pr, &c).is_none());
        assert_eq!(m.len(), 0, "the empty slot is gone");
    }
}
