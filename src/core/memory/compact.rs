//! The compact values the engine's memory is made of: a few bytes each, and
//! strings only where a value is not shared.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use indexmap::Equivalent;

use crate::gate::{Answer, CanaryRef, GateKind, Millis, Seen};

/// A revision (Flagger checksum), shared between a pin and an observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision(pub(super) Arc<str>);

impl PartialEq<String> for Revision {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl Revision {
    pub fn is(&self, checksum: &str) -> bool {
        *self.0 == *checksum
    }
}

/// A phase as Flagger sent it: one of its own phases, or anything else as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Known(u8),
    Other(Box<str>),
}

/// Flagger's `CanaryPhase` values, and "" for a check that names none.
pub(super) const PHASES: [&str; 12] = [
    "",
    "Initializing",
    "Initialized",
    "Waiting",
    "Progressing",
    "WaitingPromotion",
    "Promoting",
    "Finalising",
    "Succeeded",
    "Failed",
    "Terminating",
    "Terminated",
];

impl Phase {
    pub(super) fn new(phase: &str) -> Self {
        match PHASES.iter().position(|p| *p == phase) {
            Some(i) => Self::Known(i as u8),
            None => Self::Other(phase.into()),
        }
    }

    pub(super) fn as_str(&self) -> &str {
        match self {
            Self::Known(i) => PHASES[usize::from(*i)],
            Self::Other(s) => s,
        }
    }
}

impl PartialEq<String> for Phase {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl Phase {
    pub fn is(&self, phase: &str) -> bool {
        self.as_str() == phase
    }
}

/// A digest of the reason last answered: enough to tell that it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasonDigest(u64);

impl ReasonDigest {
    pub(super) fn new(reason: &str) -> Self {
        // DefaultHasher::new() has fixed keys: the same text, the same digest.
        let mut h = DefaultHasher::new();
        reason.hash(&mut h);
        Self(h.finish())
    }
}

impl PartialEq<String> for ReasonDigest {
    fn eq(&self, other: &String) -> bool {
        *self == Self::new(other)
    }
}

/// The last check of one canary at one gate.
#[derive(Debug, Clone)]
pub struct SeenEntry {
    pub checksum: Revision,
    pub phase: Phase,
    pub answer: Answer,
    pub reason: ReasonDigest,
    pub wait_open: bool,
    pub last_seen: Millis,
    /// `last_seen` moved since it was last written.
    pub dirty: bool,
}

impl SeenEntry {
    pub fn seen(&self) -> Seen {
        Seen {
            checksum: self.checksum.0.clone(),
            wait_open: self.wait_open,
        }
    }
}

/// A canary as stored: `namespace/name` in one allocation. It hashes its two
/// halves, so that a `CanaryRef` finds it without building the string.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CanaryName(pub(super) Box<str>);

pub(super) fn halves(s: &str) -> (&str, Option<&str>) {
    match s.split_once('/') {
        Some((ns, name)) => (ns, Some(name)),
        None => (s, None),
    }
}

impl Hash for CanaryName {
    fn hash<H: Hasher>(&self, h: &mut H) {
        halves(&self.0).hash(h);
    }
}

/// Looks a canary up by its halves.
#[derive(Hash)]
pub(super) struct CanaryLookup<'a>(pub(super) (&'a str, Option<&'a str>));

impl<'a> CanaryLookup<'a> {
    pub(super) fn of(c: &'a CanaryRef) -> Self {
        Self((c.namespace.as_str(), Some(c.name.as_str())))
    }
}

impl Equivalent<CanaryName> for CanaryLookup<'_> {
    fn equivalent(&self, key: &CanaryName) -> bool {
        halves(&key.0) == self.0
    }
}

/// What a [`Key`]'s `id` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Tag {
    /// A repository (and `number` is the PR).
    Pr,
    Canary,
    /// A namespace or a gate name, interned among the names.
    Namespace,
    Named,
}

/// A gate key in 16 bytes: the repository, canary or name by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) kind: GateKind,
    pub(super) tag: Tag,
    pub(super) id: u32,
    /// The cluster's number plus one; 0 for a gate of every cluster.
    pub(super) cluster: u16,
    pub(super) number: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ApprovalId {
    Uuid(uuid::Uuid),
    Other(Box<str>),
}

impl ApprovalId {
    pub(super) fn new(id: &str) -> Self {
        match uuid::Uuid::try_parse(id) {
            // Only when printing gives back the same text (lowercase, hyphenated).
            Ok(u)
                if u.hyphenated()
                    .encode_lower(&mut uuid::Uuid::encode_buffer())
                    == id =>
            {
                Self::Uuid(u)
            }
            _ => Self::Other(id.into()),
        }
    }

    pub(super) fn text(&self) -> String {
        match self {
            Self::Uuid(u) => u.hyphenated().to_string(),
            Self::Other(s) => s.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Changed {
    pub(super) by: u32,
    pub(super) reason: Option<Box<str>>,
    pub(super) at: Millis,
}

#[derive(Debug, Clone)]
pub(super) struct Pin {
    pub(super) canary: u32,
    pub(super) checksum: Revision,
}

#[derive(Debug, Clone)]
pub(super) struct Approved {
    pub(super) id: ApprovalId,
    pub(super) change: Changed,
    /// `NEVER` when it does not expire (half the size of an `Option`).
    pub(super) expires_at: Millis,
    pub(super) pins: Box<[Pin]>,
    /// Who opened a gate that needed several people, break glass, or an
    /// approval for its pinned canaries only; None for the usual one approval
    /// (a pointer's size, not a `Vec`'s).
    pub(super) quorum: Option<Box<Quorum>>,
}

#[derive(Debug, Clone)]
pub(super) struct Quorum {
    pub(super) approvers: Vec<crate::gate::Actor>,
    pub(super) forced: bool,
    pub(super) exclusive: bool,
}

pub(super) const NEVER: Millis = Millis::MIN;

#[derive(Debug, Clone)]
pub(super) enum Status {
    Closed(Option<Changed>),
    Open(Approved),
    Held(Changed),
    /// Rare, and never on the steady path: kept as the domain has it.
    Approving(Box<crate::gate::Tally>),
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    /// None: not kept (PostgreSQL), or never opened, closed or held.
    pub(super) status: Option<Status>,
    /// canary → its last check here; exactly as long as needed (a `Vec` would
    /// start with room for four).
    pub(super) seen: Box<[(u32, SeenEntry)]>,
}

impl Slot {
    pub(super) fn pinned(&self, canary: u32, checksum: &str) -> Option<Revision> {
        match &self.status {
            Some(Status::Open(a)) => a
                .pins
                .iter()
                .find(|p| p.canary == canary && *p.checksum.0 == *checksum)
                .map(|p| p.checksum.clone()),
            _ => None,
        }
    }

    pub(super) fn observed(&self, canary: u32, checksum: &str) -> Option<Revision> {
        self.seen
            .iter()
            .find(|(c, s)| *c == canary && *s.checksum.0 == *checksum)
            .map(|(_, s)| s.checksum.clone())
    }
}
