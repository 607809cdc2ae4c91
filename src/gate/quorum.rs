//! N-of-M approvals: a gate that needs several people opens only when that
//! many distinct people approved the same revision. Pure rules and counting;
//! the policy file fills the rules and the core keeps the tally.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use super::change::{Approval, Change, Check};
use super::key::{CanaryRef, GateKey, GateKind, RepoName, Scope};

/// How many people a kind of gate needs, optionally only in one repository
/// (PR gates) or namespace. The most specific rule wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumRule {
    pub kind: GateKind,
    pub repository: Option<RepoName>,
    pub namespace: Option<String>,
    pub required: u32,
    /// Groups that must be among the approvers, each with its least number.
    pub include: Vec<Include>,
}

/// A group of people, named as the policy names it. Its form says where its
/// members are listed, so one name cannot mean two groups.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Group(String);

/// Where a group's members are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// A GitHub team, `org/slug`: asked of GitHub for a person's login.
    GithubTeam,
    /// A Slack user group by its id (`S…`): asked of Slack for a Slack user.
    SlackGroup,
    /// A name in the policy's `[groups]`, listing GitHub logins.
    Listed,
}

impl Group {
    /// A GitHub team, `org/slug`.
    pub fn team(name: &str) -> Result<Self, String> {
        let ok = |part: &str| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        };
        match name.split_once('/') {
            Some((org, slug)) if ok(org) && ok(slug) => Ok(Self(name.to_ascii_lowercase())),
            _ => Err(format!("`{name}`: write a GitHub team as org/team-slug")),
        }
    }

    /// A Slack user group, by its id.
    pub fn slack(id: &str) -> Result<Self, String> {
        let ok = id.len() > 1
            && id.starts_with('S')
            && id
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if ok {
            Ok(Self(id.to_string()))
        } else {
            Err(format!("`{id}`: write a Slack user group by its id (S…)"))
        }
    }

    /// A group of the policy's `[groups]`: lower case, so it is no Slack id.
    pub fn listed(name: &str) -> Result<Self, String> {
        let ok = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if ok {
            Ok(Self(name.to_string()))
        } else {
            Err(format!(
                "`{name}`: name a [groups] group in lower case letters, digits, - and _"
            ))
        }
    }

    /// The change gatebot opened for the wait (`[change] mode = "create"`):
    /// its approval is one vote, and the gate opens with no fewer. Only the
    /// change's own vote is in it; `[groups]` may not use the name.
    pub fn change() -> Self {
        Self(CHANGE.to_string())
    }

    /// Whether this is [`Group::change`]: a comparison without a String of
    /// its own, for the check of a gate that collects votes.
    pub fn is_change(&self) -> bool {
        self.0 == CHANGE
    }

    pub fn kind(&self) -> GroupKind {
        if self.0.contains('/') {
            GroupKind::GithubTeam
        } else if self.0.starts_with('S') {
            GroupKind::SlackGroup
        } else {
            GroupKind::Listed
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of [`Group::change`].
pub const CHANGE: &str = "change";

/// A group that must be among the approvers: at least this many of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Include {
    pub group: Group,
    pub at_least: u32,
}

/// What a canary's gate needs: so many distinct people, among them so many
/// of each group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Need {
    pub required: u32,
    pub include: Vec<Include>,
}

impl Need {
    fn of(rule: Option<&QuorumRule>) -> Self {
        rule.map_or(Self::one(), |r| Self {
            required: r.required.max(1),
            include: r.include.clone(),
        })
    }

    fn one() -> Self {
        Self {
            required: 1,
            include: Vec::new(),
        }
    }

    /// The change's own approval too (mode `create`).
    pub fn and_change(self) -> Self {
        self.and(Need {
            required: 1,
            include: vec![Include {
                group: Group::change(),
                at_least: 1,
            }],
        })
    }

    /// What a canary's own rule needs, and the change if the gate collects
    /// for one: the change is the gate's, whatever the canary's namespace.
    pub fn with_change_of(self, tally: &Tally) -> Self {
        if tally.include.iter().any(|i| i.group.is_change()) {
            self.and_change()
        } else {
            self
        }
    }

    /// Both needs at once: the most people of either, and every group at
    /// the most either asks.
    fn and(mut self, other: Need) -> Self {
        self.required = self.required.max(other.required);
        for inc in other.include {
            match self.include.iter_mut().find(|i| i.group == inc.group) {
                Some(i) => i.at_least = i.at_least.max(inc.at_least),
                None => self.include.push(inc),
            }
        }
        self
    }

    /// Whether only the change is needed besides one person's approval.
    pub fn change_only(&self) -> bool {
        self.required <= 1 && self.include.iter().all(|i| i.group.is_change())
    }

    /// Whether `votes` are enough (for `canary`, when one asks).
    pub fn met(&self, votes: &[&Vote], canary: Option<&CanaryRef>) -> bool {
        votes.len() >= self.required as usize && self.short(votes, canary).is_empty()
    }

    /// Each group with fewer approvers than it needs, and how many more. A
    /// change's vote is its canary's only: it fills no other canary's need.
    pub fn short(&self, votes: &[&Vote], canary: Option<&CanaryRef>) -> Vec<(&Group, u32)> {
        let counts = |v: &Vote, group: &Group| {
            v.groups.contains(group)
                && (!group.is_change()
                    || canary.is_none_or(|c| v.revision.as_ref().is_some_and(|(vc, _)| c.is(vc))))
        };
        self.include
            .iter()
            .filter_map(|inc| {
                let have = votes.iter().filter(|v| counts(v, &inc.group)).count();
                let missing = (inc.at_least as usize).saturating_sub(have);
                (missing > 0).then_some((&inc.group, missing as u32))
            })
            .collect()
    }

    /// "still needs someone from acme/sre", or None when no group is short.
    pub fn still_needs(&self, votes: &[&Vote], canary: Option<&CanaryRef>) -> Option<String> {
        let short = self.short(votes, canary);
        if short.is_empty() {
            return None;
        }
        let each: Vec<String> = short
            .iter()
            .map(|(group, n)| match n {
                _ if group.is_change() => "its change approved".to_string(),
                1 => format!("someone from {group}"),
                n => format!("{n} more people from {group}"),
            })
            .collect();
        Some(format!("still needs {}", each.join(" and ")))
    }
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

/// The most any canary at `key` could need: what a gate must collect before
/// it opens for every canary. A PR's or a named gate's canaries may be in any
/// namespace, so each namespace rule counts; a canary's or a namespace's gate
/// knows its namespace.
pub fn most(rules: &[QuorumRule], key: &GateKey) -> Need {
    rules
        .iter()
        .filter_map(|r| r.namespace.as_deref())
        .map(|ns| need(rules, key, &[ns]))
        .fold(need(rules, key, &[]), Need::and)
}

/// What `key` needs: one person unless a rule says more. A PR's gate is in
/// the namespaces of the canaries waiting at it.
pub fn need(rules: &[QuorumRule], key: &GateKey, namespaces: &[&str]) -> Need {
    if key.kind.is_rollback() || key.kind.is_legacy() {
        return Need::one();
    }
    let rule = rules
        .iter()
        .filter_map(|r| Some((r.matches(key, namespaces)?, r)))
        // The last of equally specific rules wins, as in the file's order.
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, r)| r);
    Need::of(rule)
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
    /// The groups the person was found in when they approved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Group>,
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
    /// The groups that must be among the votes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<Include>,
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
            include: Vec::new(),
            votes: Vec::new(),
            pins: BTreeMap::new(),
        }
    }

    /// Counts `vote`: votes for another revision give way to it (a new
    /// revision starts from zero); a person who approved this already keeps
    /// their first approval, from whichever channel, and adds the groups the
    /// later one found them in.
    pub fn with(mut self, vote: Vote) -> Self {
        self.votes.retain(|v| !v.disagrees(&vote));
        match self.votes.iter_mut().find(|v| v.person == vote.person) {
            Some(first) => {
                for g in vote.groups {
                    if !first.groups.contains(&g) {
                        first.groups.push(g);
                    }
                }
            }
            None => self.votes.push(vote),
        }
        self
    }

    /// Takes on what the gate needs now.
    pub fn needing(self, need: Need) -> Self {
        Self {
            required: need.required,
            include: need.include,
            ..self
        }
    }

    /// What the gate collects for: the most any of its canaries could need.
    pub fn need(&self) -> Need {
        Need {
            required: self.required,
            include: self.include.clone(),
        }
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

    /// Enough distinct people approved, with every group among them.
    pub fn complete(&self) -> bool {
        let votes: Vec<&Vote> = self.votes.iter().collect();
        self.need().met(&votes, None)
    }

    /// Under changes gatebot opened: the canaries (and revisions) whose own
    /// change voted, the only ones the approval may open. None otherwise.
    pub fn change_pins(&self) -> Option<BTreeMap<String, String>> {
        if !self.include.iter().any(|i| i.group.is_change()) {
            return None;
        }
        let pins = self
            .votes
            .iter()
            .filter(|v| v.groups.iter().any(Group::is_change));
        Some(pins.filter_map(|v| v.revision.clone()).collect())
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

    /// "1 of 2 approvals: @alice", and the groups still short ("; still
    /// needs someone from acme/sre"), for messages and the status comment.
    pub fn summary(&self) -> String {
        let mut out = summary(self.required, self.votes.iter());
        let votes: Vec<&Vote> = self.votes.iter().collect();
        if let Some(groups) = self.need().still_needs(&votes, None) {
            let _ = write!(out, "; {groups}");
        }
        out
    }

    /// Why `check` waits, when its canary needs `need`: how many approved
    /// this revision and who is still needed.
    pub fn reason(&self, check: &Check, need: &Need) -> String {
        let counting: Vec<&Vote> = self.counting(check).collect();
        let missing = (need.required as usize).saturating_sub(counting.len());
        let mut out = summary(need.required, counting.iter().copied());
        let _ = write!(out, " for revision {}", check.checksum);
        if missing > 0 || need.short(&counting, Some(check.canary)).is_empty() {
            let noun = if missing == 1 {
                "approval"
            } else {
                "approvals"
            };
            let _ = write!(out, "; {missing} more {noun} needed");
            if !counting.is_empty() {
                let names: Vec<String> = counting
                    .iter()
                    .map(|v| format!("@{}", v.change.by.name))
                    .collect();
                let _ = write!(out, ", from someone other than {}", names.join(" and "));
            }
        }
        if let Some(groups) = need.still_needs(&counting, Some(check.canary)) {
            let _ = write!(out, "; {groups}");
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
            include: Vec::new(),
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
            groups: Vec::new(),
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
                need(&rules, key, namespaces).required,
                want,
                "{key} in {namespaces:?}"
            );
        }
        assert_eq!(need(&[], &promote, &[]).required, 1);
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
        let most = |rules: &[QuorumRule], key: &GateKey| most(rules, key).required;
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

    fn member(person: &str, groups: &[&str]) -> Vote {
        Vote {
            groups: groups.iter().map(|g| Group::team(g).unwrap()).collect(),
            ..vote(person, &[])
        }
    }

    /// Two approvals, at least one of them from acme/sre: enough people is
    /// not enough without the team, the answer says who is missing, and a
    /// person's later vote adds the groups it found them in.
    #[test]
    fn a_group_the_rule_includes_must_be_among_the_votes() {
        let sre = Include {
            group: Group::team("acme/sre").unwrap(),
            at_least: 1,
        };
        let need = Need {
            required: 2,
            include: vec![sre.clone()],
        };
        let tally = |votes: &[Vote]| {
            votes
                .iter()
                .cloned()
                .fold(Tally::new("t", 0).needing(need.clone()), Tally::with)
        };
        let two = tally(&[vote("alice", &[]), vote("bob", &[])]);
        assert!(!two.complete());
        assert_eq!(
            two.summary(),
            "2 of 2 approvals: @alice, @bob; still needs someone from acme/sre"
        );
        let with_sre = tally(&[vote("alice", &[]), member("dave", &["acme/sre"])]);
        assert!(with_sre.complete());
        assert_eq!(with_sre.summary(), "2 of 2 approvals: @alice, @dave");
        let again = tally(&[
            vote("alice", &[]),
            vote("bob", &[]),
            member("alice", &["acme/sre"]),
        ]);
        assert_eq!(again.votes.len(), 2, "alice counts once");
        assert!(
            again.complete(),
            "her second approval found her in acme/sre"
        );
        let canary = CanaryRef::new("prod", "app").unwrap();
        let check = Check {
            canary: &canary,
            checksum: "r1",
            phase: "WaitingPromotion",
        };
        assert_eq!(
            tally(&[vote("alice", &[])]).reason(&check, &need),
            "1 of 2 approvals: @alice for revision r1; 1 more approval needed, from someone other than @alice; still needs someone from acme/sre"
        );
        let three = Need {
            required: 3,
            include: vec![Include { at_least: 2, ..sre }],
        };
        assert_eq!(
            three.still_needs(&[], None).as_deref(),
            Some("still needs 2 more people from acme/sre")
        );
    }

    /// Under changes gatebot opened, a change's vote is its canary's only:
    /// it fills no other canary's need, and the approval it completes opens
    /// only the canaries whose own change voted, whoever voted last.
    #[test]
    fn a_changes_vote_is_its_canarys_only() {
        let change = |canary: &str| Vote {
            groups: vec![Group::change()],
            ..vote("chg1", &[(canary, "r1")])
        };
        let need = Need::one().and_change();
        let tally = Tally::new("t", 0)
            .needing(Need {
                required: 2,
                ..need.clone()
            })
            .with(change("prod/a"))
            .with(vote("alice", &[("prod/b", "r2")]));
        let votes: Vec<&Vote> = tally.votes.iter().collect();
        let (a, b) = (
            CanaryRef::new("prod", "a").unwrap(),
            CanaryRef::new("prod", "b").unwrap(),
        );
        assert!(need.met(&votes, Some(&a)));
        assert!(!need.met(&votes, Some(&b)), "a's change is not b's");
        assert_eq!(
            need.still_needs(&votes, Some(&b)).as_deref(),
            Some("still needs its change approved")
        );
        assert!(tally.complete());
        assert_eq!(
            tally.change_pins(),
            Some(BTreeMap::from([("prod/a".to_string(), "r1".to_string())])),
            "alice's vote for b opens nothing for b"
        );
        assert_eq!(Tally::new("t", 2).change_pins(), None);
        assert!(
            need.change_only()
                && !Need {
                    required: 2,
                    ..need
                }
                .change_only()
        );
    }

    /// A PR's gate collects for its most demanding canary: every group any
    /// rule names, at the most any asks.
    #[test]
    fn the_most_a_gate_collects_takes_every_group() {
        let include = |group: &str, at_least| Include {
            group: Group::team(group).unwrap(),
            at_least,
        };
        let rules = [
            QuorumRule {
                include: vec![include("acme/sre", 1)],
                ..rule(GateKind::Promote, None, None, 2)
            },
            QuorumRule {
                include: vec![include("acme/sre", 2), include("acme/dba", 1)],
                ..rule(GateKind::Promote, None, Some("prod"), 3)
            },
        ];
        let most = most(&rules, &pr_gate(GateKind::Promote));
        assert_eq!(most.required, 3);
        assert_eq!(
            most.include,
            vec![include("acme/sre", 2), include("acme/dba", 1)]
        );
        assert_eq!(most_rollback(&rules), Need::one());
    }

    fn most_rollback(rules: &[QuorumRule]) -> Need {
        most(rules, &pr_gate(GateKind::Rollback))
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
        let two = Need {
            required: 2,
            include: Vec::new(),
        };
        assert_eq!(
            tally.reason(&check("r1"), &two),
            "1 of 2 approvals: @alice for revision r1; 1 more approval needed, from someone other than @alice"
        );
        assert_eq!(
            tally.reason(&check("r2"), &two),
            "0 of 2 approvals for revision r2; 2 more approvals needed"
        );
    }
}
