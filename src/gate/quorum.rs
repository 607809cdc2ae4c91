//! N-of-M approvals: a gate that needs several people opens only when that
//! many distinct people approved the same revision. Pure rules and counting;
//! the policy file fills the rules and the core keeps the tally.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::change::{Approval, Change, Check};
use super::key::{GateKey, GateKind, RepoName, Scope};

/// How many people a kind of gate needs, optionally only in one repository
/// (PR gates) or namespace. The most specific rule wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumRule {
    pub kind: GateKind,
    pub repository: Option<RepoName>,
    pub namespace: Option<String>,
    pub required: u32,
}

impl QuorumRule {
    /// How specific a matching rule is; None when it does not match.
    fn matches(&self, key: &GateKey, namespaces: &[&str]) -> Option<u8> {
        if self.kind != key.kind {
            return None;
        }
        let mut rank = 0;
        if let Some(repo) = &self.repository {
            match &key.scope {
                Scope::Pr { repo: r, .. } if r == repo => rank = 1,
                _ => return None,
            }
        }
        if let Some(ns) = &self.namespace {
            let of_scope = match &key.scope {
                Scope::Canary(c) => Some(c.namespace.as_str()),
                Scope::Namespace(n) => Some(n.as_str()),
                Scope::Pr { .. } | Scope::Named(_) => None,
            };
            let here = of_scope
                .into_iter()
                .chain(namespaces.iter().copied())
                .any(|n| n == ns);
            if !here {
                return None;
            }
            rank += 2;
        }
        Some(rank)
    }
}

/// The most people any canary at `key` could need: what a gate must collect
/// before it opens for every canary. A PR's or a named gate's canaries may be
/// in any namespace, so each namespace rule counts; a canary's or a
/// namespace's gate knows its namespace.
pub fn most(rules: &[QuorumRule], key: &GateKey) -> u32 {
    rules
        .iter()
        .filter_map(|r| r.namespace.as_deref())
        .map(|ns| required(rules, key, &[ns]))
        .fold(required(rules, key, &[]), u32::max)
}

/// The number of distinct people `key` needs: 1 unless a rule says more. A
/// PR's gate is in the namespaces of the canaries waiting at it.
pub fn required(rules: &[QuorumRule], key: &GateKey, namespaces: &[&str]) -> u32 {
    if key.kind.is_rollback() || key.kind.is_legacy() {
        return 1;
    }
    rules
        .iter()
        .filter_map(|r| Some((r.matches(key, namespaces)?, r)))
        // The last of equally specific rules wins, as in the file's order.
        .max_by_key(|(rank, _)| *rank)
        .map_or(1, |(_, r)| r.required.max(1))
}

/// One person's approval of a gate that needs several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    /// Who they are across channels (a GitHub login, by the policy's `[users]`
    /// for Slack): the same person approving twice counts once.
    pub person: String,
    #[serde(flatten)]
    pub change: Change,
    /// The canary and revision they approved; None: whatever waits next.
    pub revision: Option<(String, String)>,
}

impl Vote {
    /// Whether this vote approves `checksum` of `canary` (an unpinned one does).
    fn approves(&self, canary: &str, checksum: &str) -> bool {
        self.revision
            .as_ref()
            .is_none_or(|(c, r)| c != canary || r == checksum)
    }

    /// Whether the two votes name other revisions of the same canary.
    fn disagrees(&self, other: &Vote) -> bool {
        self.revision
            .as_ref()
            .is_some_and(|(c, r)| !other.approves(c, r))
    }
}

/// The approvals so far of a gate whose canaries may need up to `required`
/// people. Each canary is judged when it asks, by its own rule: the votes
/// may already be enough for a canary whose rule asks fewer, which is then
/// pinned to the revision they opened, as an approval's canaries are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Names the pins of the canaries these votes opened; the approval the
    /// tally becomes keeps it, and so keeps them.
    #[serde(skip)]
    pub id: String,
    pub required: u32,
    pub votes: Vec<Vote>,
    /// canary → the revision the votes opened for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pins: BTreeMap<String, String>,
}

impl Tally {
    pub fn new(id: impl Into<String>, required: u32) -> Self {
        Self {
            id: id.into(),
            required,
            votes: Vec::new(),
            pins: BTreeMap::new(),
        }
    }

    /// Counts `vote`: votes for another revision give way to it (a new
    /// revision starts from zero); a person who approved this already keeps
    /// their first approval, from whichever channel.
    pub fn with(mut self, vote: Vote) -> Self {
        self.votes.retain(|v| !v.disagrees(&vote));
        if !self.votes.iter().any(|v| v.person == vote.person) {
            self.votes.push(vote);
        }
        self
    }

    /// Takes back `person`'s vote (a dismissed review): only the one `cast`
    /// gave, when named; the others stand. None when there was none.
    pub fn without(mut self, person: &str, cast: Option<&str>) -> Option<Self> {
        let before = self.votes.len();
        // A vote's reason starts with what cast it, then what was said.
        let cast_by = |reason: &str, c: &str| {
            reason == c
                || reason
                    .strip_prefix(c)
                    .is_some_and(|rest| rest.starts_with("; "))
        };
        let theirs = |v: &Vote| {
            v.person == person
                && cast.is_none_or(|c| v.change.reason.as_deref().is_some_and(|r| cast_by(r, c)))
        };
        self.votes.retain(|v| !theirs(v));
        (self.votes.len() < before).then_some(self)
    }

    /// Enough distinct people approved.
    pub fn complete(&self) -> bool {
        self.votes.len() >= self.required as usize
    }

    /// The revisions the votes name and those they opened already, together:
    /// the approval they open is pinned to them.
    pub fn all_pins(&self) -> BTreeMap<String, String> {
        let named = self.votes.iter().filter_map(|v| v.revision.clone());
        // What a canary was opened for stands over what a vote named.
        named.chain(self.pins.clone()).collect()
    }

    /// The votes that approve what `check` asks about.
    pub fn counting<'a>(&'a self, check: &'a Check<'a>) -> impl Iterator<Item = &'a Vote> {
        self.votes.iter().filter(|v| {
            v.revision
                .as_ref()
                .is_none_or(|(c, r)| !check.canary.is(c) || r == check.checksum)
        })
    }

    /// "1 of 2 approvals: @alice", for messages and the status comment.
    pub fn summary(&self) -> String {
        summary(self.required, self.votes.iter())
    }

    /// Why `check` waits, when its canary needs `needed` people: how many
    /// approved this revision and who is still needed.
    pub fn reason(&self, check: &Check, needed: u32) -> String {
        let counting: Vec<&Vote> = self.counting(check).collect();
        let missing = (needed as usize).saturating_sub(counting.len());
        let mut out = summary(needed, counting.iter().copied());
        let _ = write!(out, " for revision {}; ", check.checksum);
        let _ = write!(
            out,
            "{missing} more {} needed",
            if missing == 1 {
                "approval"
            } else {
                "approvals"
            }
        );
        if !counting.is_empty() {
            let names: Vec<String> = counting
                .iter()
                .map(|v| format!("@{}", v.change.by.name))
                .collect();
            let _ = write!(out, ", from someone other than {}", names.join(" and "));
        }
        out
    }
}

/// "2 of 2 approvals: @alice, @bob" for a gate several people opened.
pub fn opened_by(approval: &Approval) -> Option<String> {
    let n = approval.approvers.len();
    (n > 1).then(|| {
        let names: Vec<String> = approval
            .approvers
            .iter()
            .map(|a| format!("@{}", a.name))
            .collect();
        format!("{n} of {n} approvals: {}", names.join(", "))
    })
}

fn summary<'a>(required: u32, votes: impl Iterator<Item = &'a Vote>) -> String {
    let names: Vec<String> = votes.map(|v| format!("@{}", v.change.by.name)).collect();
    let noun = if required == 1 {
        "approval"
    } else {
        "approvals"
    };
    if names.is_empty() {
        format!("0 of {required} {noun}")
    } else {
        format!("{} of {required} {noun}: {}", names.len(), names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{Actor, CanaryRef, PrNumber, Source};

    fn pr_gate(kind: GateKind) -> GateKey {
        GateKey::new(
            kind,
            Scope::Pr {
                repo: "acme/shop".parse().unwrap(),
                number: PrNumber(42),
            },
        )
    }

    #[test]
    fn a_withdrawn_vote_no_longer_counts() {
        let tally = Tally::new("t", 2)
            .with(vote("alice", &[]))
            .with(vote("bob", &[]));
        let left = tally.clone().without("alice", None).unwrap();
        assert_eq!(left.votes.len(), 1);
        assert_eq!(left.votes[0].person, "bob");
        assert!(!left.complete());
        assert_eq!(
            tally.clone().without("carol", None),
            None,
            "carol had not voted"
        );
        let mut cast = tally.clone();
        cast.votes[0].change.reason = Some("approving review 7 of abc; looks good".into());
        assert!(cast
            .clone()
            .without("alice", Some("approving review 7 of abc"))
            .is_some());
        assert_eq!(
            cast.without("alice", Some("approving review 7 of ab")),
            None,
            "another review's id is not a prefix of this one's"
        );
        assert_eq!(
            tally.without("alice", Some("approving review 7 of abc")),
            None,
            "a vote cast otherwise is not taken back by what did not cast it"
        );
    }

    fn rule(kind: GateKind, repo: Option<&str>, ns: Option<&str>, required: u32) -> QuorumRule {
        QuorumRule {
            kind,
            repository: repo.map(|r| r.parse().unwrap()),
            namespace: ns.map(str::to_string),
            required,
        }
    }

    fn vote(person: &str, pins: &[(&str, &str)]) -> Vote {
        Vote {
            person: person.into(),
            change: Change {
                by: Actor::new(person, Source::Github),
                reason: None,
                at: 0,
            },
            revision: pins.first().map(|(c, r)| (c.to_string(), r.to_string())),
        }
    }

    #[test]
    fn the_most_specific_rule_says_how_many() {
        let rules = [
            rule(GateKind::Promote, None, None, 2),
            rule(GateKind::Promote, Some("acme/shop"), None, 3),
            rule(GateKind::Promote, None, Some("prod"), 4),
            rule(GateKind::Traffic, Some("acme/other"), None, 5),
        ];
        let promote = pr_gate(GateKind::Promote);
        // (gate, namespaces waiting there, required)
        let table: [(&GateKey, &[&str], u32); 6] = [
            (&promote, &[], 3),
            (&promote, &["prod"], 4),
            (&promote, &["dev"], 3),
            (&pr_gate(GateKind::Traffic), &[], 1),
            (&pr_gate(GateKind::Rollback), &[], 1),
            (
                &GateKey::new(
                    GateKind::Promote,
                    Scope::Canary(CanaryRef::new("prod", "podinfo").unwrap()),
                ),
                &[],
                4,
            ),
        ];
        for (key, namespaces, want) in table {
            assert_eq!(
                required(&rules, key, namespaces),
                want,
                "{key} in {namespaces:?}"
            );
        }
        assert_eq!(required(&[], &promote, &[]), 1);
    }

    /// A PR's gate collects what its most demanding canary could need; a
    /// canary's own gate knows its namespace.
    #[test]
    fn the_most_a_gate_collects_counts_every_namespace_rule() {
        let rules = [
            rule(GateKind::Promote, None, Some("prod"), 2),
            rule(GateKind::Promote, None, Some("dev"), 1),
            rule(GateKind::Promote, Some("acme/other"), Some("prod"), 5),
        ];
        let dev = GateKey::new(
            GateKind::Promote,
            Scope::Canary(CanaryRef::new("dev", "podinfo").unwrap()),
        );
        assert_eq!(most(&rules, &pr_gate(GateKind::Promote)), 2);
        assert_eq!(most(&rules, &dev), 1);
        assert_eq!(most(&rules, &pr_gate(GateKind::Rollback)), 1);
        assert_eq!(most(&[], &pr_gate(GateKind::Promote)), 1);
    }

    #[test]
    fn one_person_counts_once_and_a_new_revision_starts_from_zero() {
        // (votes in order, distinct people counted, complete at 2)
        let table: [(&[Vote], usize); 4] = [
            (&[vote("alice", &[]), vote("alice", &[])], 1),
            (&[vote("alice", &[]), vote("bob", &[])], 2),
            (
                &[
                    vote("alice", &[("prod/app", "r1")]),
                    vote("bob", &[("prod/app", "r2")]),
                ],
                1,
            ),
            (
                &[
                    vote("alice", &[("prod/app", "r1")]),
                    vote("bob", &[("prod/web", "r9")]),
                ],
                2,
            ),
        ];
        for (votes, counted) in table {
            let tally = votes.iter().cloned().fold(Tally::new("t", 2), Tally::with);
            assert_eq!(tally.votes.len(), counted, "{votes:?}");
            assert_eq!(tally.complete(), counted == 2);
        }
    }

    #[test]
    fn the_reason_says_who_approved_this_revision_and_who_is_needed() {
        let canary = CanaryRef::new("prod", "app").unwrap();
        let check = |checksum| Check {
            canary: &canary,
            checksum,
            phase: "WaitingPromotion",
        };
        let tally = Tally::new("t", 2).with(vote("alice", &[("prod/app", "r1")]));
        assert_eq!(tally.summary(), "1 of 2 approvals: @alice");
        assert_eq!(
            tally.reason(&check("r1"), 2),
            "1 of 2 approvals: @alice for revision r1; 1 more approval needed, from someone other than @alice"
        );
        assert_eq!(
            tally.reason(&check("r2"), 2),
            "0 of 2 approvals for revision r2; 2 more approvals needed"
        );
    }
}
