//! Gate state and the decisions made on it: what a check answers, when an
//! approval is pinned or expires, and when a wait starts or ends. No I/O.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::change::{Approval, Change, Check, Millis};
use super::key::{GateKey, GateKind, Scope};
use super::quorum::{self, QuorumRule, Tally, Vote};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GateStatus {
    Closed {
        change: Option<Change>,
    },
    Open(Approval),
    /// Closed, and approvals are refused until someone lifts the hold.
    Held {
        change: Change,
    },
    /// Closed: some of the people the gate needs have approved.
    Approving(Tally),
}

impl GateStatus {
    /// What names the pins: the approval in force, or the votes collected.
    pub fn pins_id(&self) -> Option<&str> {
        match self {
            Self::Open(a) => Some(&a.id),
            Self::Approving(t) => Some(&t.id),
            _ => None,
        }
    }

    /// canary → revision, of the approval in force or of the votes collected.
    pub fn pins_mut(&mut self) -> Option<&mut BTreeMap<String, String>> {
        match self {
            Self::Open(a) => Some(&mut a.pins),
            Self::Approving(t) => Some(&mut t.pins),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Closed { .. } => "closed",
            Self::Open(_) => "open",
            Self::Held { .. } => "held",
            Self::Approving(_) => "approving",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub key: GateKey,
    #[serde(flatten)]
    pub status: GateStatus,
}

impl Gate {
    pub fn closed(key: GateKey) -> Self {
        Self {
            key,
            status: GateStatus::Closed { change: None },
        }
    }
}

/// What a check is answered; stored and shown as "open" or "closed".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Open,
    Closed,
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
        }
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an answer (open or closed)")]
pub struct UnknownAnswer(pub String);

impl std::str::FromStr for Answer {
    type Err = UnknownAnswer;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "open" => Ok(Self::Open),
            "closed" => Ok(Self::Closed),
            other => Err(UnknownAnswer(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub answer: Answer,
    /// One line for Flagger's logs.
    pub reason: String,
    /// This check is the approval's first for the canary: pin it to this revision.
    pub pin: bool,
    /// The approval has run out; the gate should be recorded as expired.
    pub expired: bool,
    /// Opened by break glass: no freeze or release window holds it.
    pub forced: bool,
}

impl Verdict {
    pub fn closed(reason: impl Into<String>) -> Self {
        Self {
            answer: Answer::Closed,
            reason: reason.into(),
            pin: false,
            expired: false,
            forced: false,
        }
    }

    fn open(reason: String, pin: bool, forced: bool) -> Self {
        Self {
            answer: Answer::Open,
            reason,
            pin,
            expired: false,
            forced,
        }
    }
}

/// The ways of opening a gate this server offers, so that a reason names only
/// those (on a laptop without GitHub or Slack, the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Channels {
    /// GitHub webhooks are verified: `/promote` comments arrive.
    pub github: bool,
    /// Slack requests are verified: Approve clicks arrive.
    pub slack: bool,
}

/// The answer to one check. Pure: same gate, check, time, channels and
/// quorum rules, same verdict. A gate that collects approvals opens for the
/// canary that asks when enough people approved for its own rule.
/// Every check answers with its reason, so each is written into one buffer.
pub fn decide(
    gate: &Gate,
    check: &Check,
    now: Millis,
    channels: Channels,
    quorum: &[QuorumRule],
) -> Verdict {
    let key = &gate.key;
    let closed = closed_word(key.kind);
    match &gate.status {
        GateStatus::Held { change } if is_retirement(key, change) => Verdict::closed(format!(
            "retired by {} via {} at {}{}: a retired gate takes no approvals; the pipeline creates a gate with another name for its next run",
            change.by.name,
            change.by.source,
            Rfc3339(change.at),
            retirement_suffix(change.reason.as_deref()),
        )),
        GateStatus::Held { change } => Verdict::closed(format!(
            "held by {} via {}{}: {} to lift it",
            change.by.name,
            change.by.source,
            reason_suffix(&change.reason),
            unhold_hint(key)
        )),
        GateStatus::Closed { .. } => {
            let mut reason = String::with_capacity(REASON_CAPACITY);
            reason.push_str(closed);
            reason.push_str(": ");
            write_open_hint(&mut reason, key, channels);
            Verdict::closed(reason)
        }
        GateStatus::Approving(tally) => approving(key, tally, check, channels, quorum),
        GateStatus::Open(approval) if approval.expired(now) => Verdict {
            expired: true,
            ..Verdict::closed(format!(
                "{closed}: the approval by {} expired at {}; {}",
                approval.change.by.name,
                rfc3339(approval.expires_at.unwrap_or(now)),
                open_hint(key, channels)
            ))
        },
        GateStatus::Open(approval) => approved(key, approval, check, channels),
    }
}

/// The answer of an open gate with an approval in force: open for a revision
/// it is pinned to or can be pinned to now, closed for any other.
fn approved(key: &GateKey, approval: &Approval, check: &Check, channels: Channels) -> Verdict {
    let closed = closed_word(key.kind);
    let by = &approval.change.by;
    let mut reason = String::with_capacity(REASON_CAPACITY);
    write_approved(&mut reason, approval);
    let forced = approval.forced;
    if !key.kind.pinned() {
        return Verdict::open(reason, false, forced);
    }
    let pinned = approval
        .pins
        .iter()
        .find(|(canary, _)| check.canary.is(canary))
        .map(|(_, revision)| revision);
    if pinned.is_none() && approval.exclusive {
        let canaries: Vec<&str> = approval.pins.keys().map(String::as_str).collect();
        return Verdict::closed(format!(
            "{closed}: the approval by {} is for {} only; {}",
            by.name,
            canaries.join(" and "),
            open_hint(key, channels)
        ));
    }
    match pinned {
        Some(pinned) if *pinned == check.checksum => {
            let _ = write!(reason, " for revision {pinned}");
            Verdict::open(reason, false, forced)
        }
        Some(pinned) => Verdict::closed(format!(
            "{closed}: the approval by {} was for revision {pinned}, this is revision {}; {}",
            by.name,
            check.checksum,
            open_hint(key, channels)
        )),
        None => {
            let _ = write!(reason, " for revision {}", check.checksum);
            Verdict::open(reason, true, forced)
        }
    }
}

/// The answer of a gate that is collecting approvals: open for a canary the
/// votes opened for this revision, or whose own rule they now meet (pin it).
fn approving(
    key: &GateKey,
    tally: &Tally,
    check: &Check,
    channels: Channels,
    rules: &[QuorumRule],
) -> Verdict {
    let closed = closed_word(key.kind);
    let open = |votes: Vec<&Vote>, revision: &str, pin: bool| {
        let mut reason = String::with_capacity(REASON_CAPACITY);
        write_voted(&mut reason, &votes);
        let _ = write!(reason, " for revision {revision}");
        Verdict::open(reason, pin, false)
    };
    let counting: Vec<&Vote> = tally.counting(check).collect();
    let pinned = tally.pins.iter().find(|(c, _)| check.canary.is(c));
    match pinned {
        // Opened for this revision: by whoever approved it then, even if
        // later votes for another revision have since replaced theirs.
        Some((_, revision)) if *revision == check.checksum => {
            let voters = if counting.is_empty() {
                tally.votes.iter().collect()
            } else {
                counting
            };
            open(voters, revision, false)
        }
        Some((_, revision)) => Verdict::closed(format!(
            "{closed}: the approvals were for revision {revision}, this is revision {}; {}",
            check.checksum,
            open_hint(key, channels)
        )),
        None => {
            let need =
                quorum::need(rules, key, &[check.canary.namespace.as_str()]).with_change_of(tally);
            if need.met(&counting, Some(check.canary)) {
                return open(counting, check.checksum, true);
            }
            Verdict::closed(format!(
                "{closed}: {}: {}",
                tally.reason(check, &need),
                open_hint(key, channels)
            ))
        }
    }
}

/// "approved by alice via github and bob via slack at …": the votes that
/// opened a gate for one canary.
fn write_voted(out: &mut String, votes: &[&Vote]) {
    out.push_str("approved by ");
    for (n, v) in votes.iter().enumerate() {
        if n > 0 {
            out.push_str(" and ");
        }
        let _ = write!(out, "{} via {}", v.change.by.name, v.change.by.source);
    }
    if let Some(at) = votes.iter().map(|v| v.change.at).max() {
        let _ = write!(out, " at {}", Rfc3339(at));
    }
}

/// "approved by alice via github at …", naming everyone a gate needed, and
/// break glass first.
fn write_approved(out: &mut String, approval: &Approval) {
    let by = &approval.change.by;
    if approval.forced {
        let _ = write!(
            out,
            "forced open by {} via {} at {}{}",
            by.name,
            by.source,
            Rfc3339(approval.change.at),
            reason_suffix(&approval.change.reason)
        );
        return;
    }
    if approval.approvers.len() > 1 {
        out.push_str("approved by ");
        for (n, a) in approval.approvers.iter().enumerate() {
            if n > 0 {
                out.push_str(" and ");
            }
            let _ = write!(out, "{} via {}", a.name, a.source);
        }
        let _ = write!(out, " at {}", Rfc3339(approval.change.at));
        return;
    }
    let _ = write!(
        out,
        "approved by {} via {} at {}",
        by.name,
        by.source,
        Rfc3339(approval.change.at)
    );
}

/// Room for most reasons, so that writing one does not grow the buffer.
const REASON_CAPACITY: usize = 160;

/// How a closed answer starts: a closed rollback gate is the normal state, not a wait.
pub fn closed_word(kind: GateKind) -> &'static str {
    if kind.is_rollback() {
        "not rolling back"
    } else {
        "waiting"
    }
}

/// What a person does to open this gate, naming only the ways this server offers.
pub fn open_hint(key: &GateKey, channels: Channels) -> String {
    let mut hint = String::with_capacity(REASON_CAPACITY);
    write_open_hint(&mut hint, key, channels);
    hint
}

/// [`open_hint`], appended to `out`.
fn write_open_hint(out: &mut String, key: &GateKey, channels: Channels) {
    let mut ways = Ways { out, any: false };
    let cli = |ways: &mut Ways| ways.add(format_args!("run `gatebot gates open {key}`"));
    match (&key.scope, key.kind) {
        (_, GateKind::LegacyGate) => {
            if channels.slack {
                ways.add(format_args!("approve in Slack"));
            }
            ways.add(format_args!("POST /gate/open"));
        }
        (_, GateKind::LegacyRollback) => ways.add(format_args!("POST /rollback/open")),
        (Scope::Pr { repo, number }, kind) => {
            if channels.github {
                match &key.cluster {
                    Some(c) => ways.add(format_args!(
                        "comment {} {c} on {repo}#{number}",
                        kind.command()
                    )),
                    None => ways.add(format_args!(
                        "comment {} on {repo}#{number}",
                        kind.command()
                    )),
                }
            }
            if channels.slack {
                ways.add(format_args!("approve in Slack"));
            }
            if !ways.any {
                cli(&mut ways);
            }
        }
        (Scope::Canary(_) | Scope::Namespace(_) | Scope::Named(_), _) => {
            if channels.slack {
                ways.add(format_args!("approve in Slack"));
            }
            cli(&mut ways);
        }
    }
    if key.kind.is_rollback() {
        ways.out.push_str(" to roll back");
    }
}

/// Ways of opening a gate, written one after another with " or " between.
struct Ways<'a> {
    out: &'a mut String,
    any: bool,
}

impl Ways<'_> {
    fn add(&mut self, way: fmt::Arguments<'_>) {
        if self.any {
            self.out.push_str(" or ");
        }
        self.any = true;
        // Writing to a String cannot fail.
        let _ = self.out.write_fmt(way);
    }
}

/// What a pipeline's retirement holds its named gate with: "retired", or
/// "retired: <why>" with the pipeline's reason.
pub fn retirement_reason(why: Option<&str>) -> String {
    match why.map(str::trim).filter(|w| !w.is_empty()) {
        Some(why) => format!("{RETIRED}: {why}"),
        None => RETIRED.to_string(),
    }
}

const RETIRED: &str = "retired";

/// A named gate held by its retirement (not by someone's `hold`).
fn is_retirement(key: &GateKey, change: &Change) -> bool {
    matches!(key.scope, Scope::Named(_))
        && change.reason.as_deref().is_some_and(|r| {
            r == RETIRED
                || r.strip_prefix(RETIRED)
                    .is_some_and(|rest| rest.starts_with(": "))
        })
}

/// The pipeline's reason for retiring, as " (why)".
fn retirement_suffix(reason: Option<&str>) -> String {
    let why = reason
        .and_then(|r| r.strip_prefix(RETIRED))
        .and_then(|r| r.strip_prefix(": "))
        .map(|r| r.to_string());
    reason_suffix(&why)
}

fn unhold_hint(key: &GateKey) -> String {
    match &key.scope {
        Scope::Pr { .. } => format!("comment /unhold on {}", key.subject()),
        Scope::Canary(_) | Scope::Namespace(_) | Scope::Named(_) => {
            format!("run `gatebot gates open {key}`")
        }
    }
}

fn reason_suffix(reason: &Option<String>) -> String {
    match reason.as_deref().map(str::trim) {
        Some(r) if !r.is_empty() => format!(" ({})", one_line(r)),
        _ => String::new(),
    }
}

/// Reasons end up in HTTP bodies and log lines: `s` on one line, its runs of
/// white space one space each, and any NUL (which PostgreSQL's text cannot
/// hold, so a command carrying one could never be written) shown as U+FFFD.
pub fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('\0', "\u{FFFD}")
}

pub fn rfc3339(ms: Millis) -> String {
    Rfc3339(ms).to_string()
}

/// [`rfc3339`] without a String of its own, for writing into another.
pub(crate) struct Rfc3339(pub(crate) Millis);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = UNIX_EPOCH + Duration::from_millis(self.0.max(0) as u64);
        humantime::format_rfc3339_seconds(t).fmt(f)
    }
}

/// What the last check by a canary at a gate left behind. The revision is shared
/// with the engine's memory, so looking it up allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub checksum: std::sync::Arc<str>,
    pub wait_open: bool,
}

/// How a check moves the canary's wait at a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStep {
    Nothing,
    /// The first closed answer: notify people.
    Start,
    /// A new revision is waiting where an old one waited: end the old wait, start anew.
    Restart,
    /// The gate opened for the canary.
    End,
}

pub fn wait_step(kind: GateKind, seen: Option<&Seen>, check: &Check, answer: Answer) -> WaitStep {
    if !kind.has_waits() {
        return WaitStep::Nothing;
    }
    let waiting = seen.filter(|s| s.wait_open);
    match (answer, waiting) {
        (Answer::Closed, None) => WaitStep::Start,
        (Answer::Closed, Some(s)) if *s.checksum != *check.checksum => WaitStep::Restart,
        (Answer::Closed, Some(_)) => WaitStep::Nothing,
        (Answer::Open, Some(_)) => WaitStep::End,
        (Answer::Open, None) => WaitStep::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::key::CanaryRef;
    use crate::gate::{Actor, Source};

    /// The unit tests read reasons of a server with GitHub configured.
    fn decide(gate: &Gate, check: &Check, now: Millis) -> Verdict {
        super::decide(gate, check, now, GITHUB, &two())
    }

    /// Every promote gate needs two people.
    fn two() -> Vec<QuorumRule> {
        vec![QuorumRule {
            kind: GateKind::Promote,
            repository: None,
            namespace: None,
            required: 2,
            include: Vec::new(),
        }]
    }

    const GITHUB: Channels = Channels {
        github: true,
        slack: false,
    };

    const BOTH: Channels = Channels {
        github: true,
        slack: true,
    };

    const T0: Millis = 1_764_500_000_000;

    fn key(kind: GateKind) -> GateKey {
        if kind.is_legacy() {
            return GateKey::new(
                kind,
                Scope::Canary(CanaryRef::new("test", "podinfo").unwrap()),
            );
        }
        GateKey::parse(&format!("/gates/{kind}/acme/shop/pr/42"), None).unwrap()
    }

    fn check<'a>(canary: &str, checksum: &'a str) -> Check<'a> {
        Check {
            // A check borrows its canary; a test's may live as long as the test.
            canary: Box::leak(Box::new(CanaryRef::new("test", canary).unwrap())),
            checksum,
            phase: "Progressing",
        }
    }

    fn open(kind: GateKind, pins: &[(&str, &str)], expires_at: Option<Millis>) -> Gate {
        Gate {
            key: key(kind),
            status: GateStatus::Open(Approval {
                id: "a1".into(),
                change: Change {
                    by: Actor::new("alice", Source::Github),
                    reason: None,
                    at: T0,
                },
                expires_at,
                pins: pins
                    .iter()
                    .map(|(c, s)| (format!("test/{c}"), s.to_string()))
                    .collect(),
                approvers: Vec::new(),
                forced: false,
                exclusive: false,
            }),
        }
    }

    fn vote(name: &str, revision: Option<&str>) -> crate::gate::Vote {
        crate::gate::Vote {
            person: name.into(),
            change: Change {
                by: Actor::new(name, Source::Github),
                reason: None,
                at: T0,
            },
            revision: revision.map(|r| ("test/podinfo".to_string(), r.to_string())),
            groups: Vec::new(),
        }
    }

    /// Several people: closed until enough approved this revision, the reason
    /// saying who is still needed; opened by them, it names them all.
    #[test]
    fn a_gate_that_needs_two_says_who_approved_and_who_is_missing() {
        let approving = |votes: Vec<crate::gate::Vote>| Gate {
            key: key(GateKind::Promote),
            status: GateStatus::Approving(votes.into_iter().fold(Tally::new("t", 2), Tally::with)),
        };
        // (votes, checksum asked, answer, reason)
        let table = [
            (vec![vote("alice", Some("r1"))], "r1", Answer::Closed,
             "waiting: 1 of 2 approvals: @alice for revision r1; 1 more approval needed, from someone other than @alice: comment /promote on acme/shop#42"),
            (vec![vote("alice", Some("r1"))], "r2", Answer::Closed,
             "waiting: 0 of 2 approvals for revision r2; 2 more approvals needed: comment /promote on acme/shop#42"),
            (vec![vote("alice", None)], "r2", Answer::Closed,
             "waiting: 1 of 2 approvals: @alice for revision r2; 1 more approval needed, from someone other than @alice: comment /promote on acme/shop#42"),
        ];
        for (votes, checksum, answer, reason) in table {
            let v = decide(&approving(votes), &check("podinfo", checksum), T0);
            assert_eq!((v.answer, v.reason.as_str()), (answer, reason));
        }
        // docs/policy.md quotes it.
        let quoted = super::decide(
            &approving(vec![vote("alice", Some("85d557f47b"))]),
            &check("podinfo", "85d557f47b"),
            T0,
            BOTH,
            &two(),
        )
        .reason;
        assert!(
            include_str!("../../docs/policy.md").contains(&format!("      {quoted}\n")),
            "not quoted: {quoted}"
        );
        let mut both = open(GateKind::Promote, &[("podinfo", "r1")], None);
        if let GateStatus::Open(a) = &mut both.status {
            a.approvers = vec![
                Actor::new("alice", Source::Github),
                Actor::new("bob", Source::Slack),
            ];
        }
        let v = decide(&both, &check("podinfo", "r1"), T0);
        assert_eq!(v.answer, Answer::Open);
        starts(
            &v.reason,
            "approved by alice via github and bob via slack at ",
        );
        assert!(!v.forced);
    }

    /// A namespace's rule is judged when its canary asks: one approval opens
    /// the PR's gate for `dev` (pinning it) and leaves `prod` waiting for two.
    #[test]
    fn each_canary_is_judged_by_its_own_namespace_rule() {
        let rules = vec![QuorumRule {
            kind: GateKind::Promote,
            repository: None,
            namespace: Some("prod".into()),
            required: 2,
            include: Vec::new(),
        }];
        let mut tally = Tally::new("t", 2).with(vote("alice", None));
        let gate = |tally: &Tally| Gate {
            key: key(GateKind::Promote),
            status: GateStatus::Approving(tally.clone()),
        };
        let dev = CanaryRef::new("dev", "podinfo").unwrap();
        let prod = CanaryRef::new("prod", "podinfo").unwrap();
        let ask = |tally: &Tally, canary: &CanaryRef, checksum: &str| {
            let check = Check {
                canary,
                checksum,
                phase: "WaitingPromotion",
            };
            super::decide(&gate(tally), &check, T0, GITHUB, &rules)
        };
        let v = ask(&tally, &dev, "d1");
        assert_eq!((v.answer, v.pin), (Answer::Open, true), "{}", v.reason);
        starts(&v.reason, "approved by alice via github at ");
        assert!(v.reason.ends_with(" for revision d1"), "{}", v.reason);
        let v = ask(&tally, &prod, "p1");
        assert_eq!(v.answer, Answer::Closed);
        starts(
            &v.reason,
            "waiting: 1 of 2 approvals: @alice for revision p1",
        );
        // Pinned: dev's next revision waits again.
        tally.pins.insert("dev/podinfo".into(), "d1".into());
        assert_eq!(ask(&tally, &dev, "d1").answer, Answer::Open);
        assert!(!ask(&tally, &dev, "d1").pin);
        let v = ask(&tally, &dev, "d2");
        assert_eq!(v.answer, Answer::Closed);
        assert!(
            v.reason
                .contains("were for revision d1, this is revision d2"),
            "{}",
            v.reason
        );
        // A second person opens prod.
        let tally = tally.with(vote("bob", None));
        assert_eq!(ask(&tally, &prod, "p1").answer, Answer::Open);
    }

    /// A deadline's rollback is for the canary whose wait ran out: any other
    /// canary, at any revision, is not rolled back by it.
    #[test]
    fn an_exclusive_approval_opens_for_its_canaries_only() {
        let mut gate = open(GateKind::Rollback, &[("podinfo", "real1")], None);
        if let GateStatus::Open(a) = &mut gate.status {
            a.exclusive = true;
        }
        assert_eq!(
            decide(&gate, &check("podinfo", "real1"), T0).answer,
            Answer::Open
        );
        for (canary, checksum) in [("evil", "x"), ("backend", "real1"), ("podinfo", "real2")] {
            let v = decide(&gate, &check(canary, checksum), T0);
            assert_eq!(
                v.answer,
                Answer::Closed,
                "{canary} at {checksum}: {}",
                v.reason
            );
            assert!(!v.pin);
        }
        let v = decide(&gate, &check("evil", "x"), T0);
        starts(
            &v.reason,
            "not rolling back: the approval by alice is for test/podinfo only; ",
        );
    }

    /// Break glass says so to Flagger, and tells the core to pass freezes and windows.
    #[test]
    fn a_forced_approval_is_named_and_marked() {
        let mut forced = open(GateKind::Promote, &[], None);
        if let GateStatus::Open(a) = &mut forced.status {
            a.forced = true;
            a.change.reason = Some("payments down".into());
        }
        let v = decide(&forced, &check("podinfo", "r1"), T0);
        assert_eq!(v.answer, Answer::Open);
        assert!(v.forced);
        assert!(
            v.reason.starts_with("forced open by alice via github at ")
                && v.reason.contains("(payments down) for revision r1"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn closed_gate_says_what_to_comment() {
        let v = decide(
            &Gate::closed(key(GateKind::Promote)),
            &check("podinfo", "r1"),
            T0,
        );
        assert_eq!(v.answer, Answer::Closed);
        assert_eq!(v.reason, "waiting: comment /promote on acme/shop#42");
    }

    /// Asserts that `reason` starts with `start`, showing it when not.
    fn starts(reason: &str, start: &str) {
        assert!(reason.starts_with(start), "{reason}");
    }

    /// The reason a closed gate of `kind` gives on a server with `channels`.
    fn closed_reason(kind: GateKind, channels: Channels) -> String {
        super::decide(
            &Gate::closed(key(kind)),
            &check("podinfo", "r1"),
            T0,
            channels,
            &[],
        )
        .reason
    }

    /// A closed answer names only the ways this server offers.
    #[test]
    fn closed_gate_names_only_configured_channels() {
        let laptop = Channels::default();
        let slack = Channels {
            github: false,
            slack: true,
        };
        let table = [
            (
                GateKind::Promote,
                laptop,
                "waiting: run `gatebot gates open /gates/promote/acme/shop/pr/42`",
            ),
            (
                GateKind::Promote,
                BOTH,
                "waiting: comment /promote on acme/shop#42 or approve in Slack",
            ),
            (GateKind::Promote, slack, "waiting: approve in Slack"),
            (GateKind::LegacyGate, laptop, "waiting: POST /gate/open"),
            (
                GateKind::LegacyGate,
                slack,
                "waiting: approve in Slack or POST /gate/open",
            ),
        ];
        for (kind, channels, reason) in table {
            assert_eq!(closed_reason(kind, channels), reason);
        }
    }

    /// Closed is a rollback gate's normal state: nobody is waiting at it.
    #[test]
    fn closed_rollback_gate_is_not_rolling_back() {
        let table = [
            (GateKind::Rollback, GITHUB, "not rolling back: comment /rollback on acme/shop#42 to roll back"),
            (GateKind::Rollback, Channels::default(), "not rolling back: run `gatebot gates open /gates/rollback/acme/shop/pr/42` to roll back"),
            (GateKind::LegacyRollback, Channels::default(), "not rolling back: POST /rollback/open to roll back"),
        ];
        for (kind, channels, reason) in table {
            assert_eq!(closed_reason(kind, channels), reason);
        }
    }

    /// Where docs/ quote an answer, the quote is what gatebot says.
    #[test]
    fn answers_quoted_in_the_docs_are_real() {
        let operations = include_str!("../../docs/operations.md");
        let install = include_str!("../../docs/install-kubernetes.md");
        let at = humantime::parse_rfc3339("2026-11-30T14:02:00Z").unwrap();
        let at = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as Millis;
        let mut approved = open(GateKind::Start, &[("podinfo", "85d557f47b")], None);
        if let GateStatus::Open(a) = &mut approved.status {
            a.change.at = at;
        }
        let both = BOTH;
        let say = |gate: &Gate, checksum, channels| {
            super::decide(gate, &check("podinfo", checksum), at, channels, &[]).reason
        };
        let closed = |kind| Gate::closed(key(kind));
        let quotes = [
            (operations, say(&closed(GateKind::Promote), "r1", GITHUB)),
            (operations, say(&approved, "85d557f47b", GITHUB)),
            (operations, say(&closed(GateKind::Rollback), "r1", GITHUB)),
            (
                install,
                format!("403 {}", say(&closed(GateKind::Start), "r1", both)),
            ),
            (
                install,
                format!("200 {}", say(&approved, "85d557f47b", both)),
            ),
        ];
        for (doc, quote) in quotes {
            assert!(doc.contains(&format!("`{quote}`")), "not quoted: `{quote}`");
        }
        let mut promote = approved.clone();
        promote.key = key(GateKind::Promote);
        let moved = say(&promote, "7c1e2a90f3", GITHUB);
        assert!(
            operations.contains(&format!("`{moved}`")),
            "not quoted: `{moved}`"
        );
    }

    #[test]
    fn first_check_after_approval_opens_and_pins() {
        let v = decide(
            &open(GateKind::Promote, &[], None),
            &check("podinfo", "r1"),
            T0,
        );
        assert_eq!(v.answer, Answer::Open);
        assert!(v.pin);
        starts(&v.reason, "approved by alice via github at 2025-");
    }

    #[test]
    fn pinned_revision_stays_open_for_blue_green_second_check() {
        let g = open(GateKind::Promote, &[("podinfo", "r1")], None);
        let v = decide(&g, &check("podinfo", "r1"), T0 + 60_000);
        assert_eq!(v.answer, Answer::Open);
        assert!(!v.pin);
    }

    #[test]
    fn new_revision_sees_the_gate_closed() {
        let g = open(GateKind::Promote, &[("podinfo", "r1")], None);
        let v = decide(&g, &check("podinfo", "r2"), T0);
        assert_eq!(v.answer, Answer::Closed);
        assert!(v.reason.contains("was for revision r1"), "{}", v.reason);
    }

    #[test]
    fn pins_are_per_canary() {
        let g = open(GateKind::Promote, &[("podinfo", "r1")], None);
        let v = decide(&g, &check("backend", "b7"), T0);
        assert_eq!(v.answer, Answer::Open);
        assert!(v.pin);
    }

    #[test]
    fn rollback_gate_is_pinned_too() {
        let g = open(GateKind::Rollback, &[("podinfo", "r1")], None);
        assert_eq!(
            decide(&g, &check("podinfo", "r2"), T0).answer,
            Answer::Closed
        );
    }

    #[test]
    fn expired_approval_closes() {
        let g = open(GateKind::Start, &[], Some(T0 + 1000));
        assert_eq!(
            decide(&g, &check("podinfo", "r1"), T0 + 999).answer,
            Answer::Open
        );
        let v = decide(&g, &check("podinfo", "r1"), T0 + 1000);
        assert_eq!(v.answer, Answer::Closed);
        assert!(v.expired);
        assert!(v.reason.contains("expired"));
    }

    #[test]
    fn legacy_gates_are_never_pinned() {
        let g = open(GateKind::LegacyGate, &[("podinfo", "r1")], None);
        let v = decide(&g, &check("podinfo", "r2"), T0);
        assert_eq!(v.answer, Answer::Open);
        assert!(!v.pin);
    }

    #[test]
    fn held_gate_says_how_to_lift() {
        let g = Gate {
            key: key(GateKind::Promote),
            status: GateStatus::Held {
                change: Change {
                    by: Actor::new("bob", Source::Slack),
                    reason: Some("incident\n123".into()),
                    at: T0,
                },
            },
        };
        let v = decide(&g, &check("podinfo", "r1"), T0);
        assert_eq!(v.answer, Answer::Closed);
        assert_eq!(
            v.reason,
            "held by bob via slack (incident 123): comment /unhold on acme/shop#42 to lift it"
        );
    }

    #[test]
    fn waits_start_once_and_restart_on_new_revision() {
        let c = check("podinfo", "r1");
        let k = GateKind::Promote;
        assert_eq!(wait_step(k, None, &c, Answer::Closed), WaitStep::Start);
        let waiting = Seen {
            checksum: "r1".into(),
            wait_open: true,
        };
        assert_eq!(
            wait_step(k, Some(&waiting), &c, Answer::Closed),
            WaitStep::Nothing
        );
        assert_eq!(
            wait_step(k, Some(&waiting), &check("podinfo", "r2"), Answer::Closed),
            WaitStep::Restart
        );
        assert_eq!(
            wait_step(k, Some(&waiting), &c, Answer::Open),
            WaitStep::End
        );
        assert_eq!(
            wait_step(GateKind::Rollback, None, &c, Answer::Closed),
            WaitStep::Nothing
        );
    }
}
