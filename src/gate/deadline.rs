//! Wait deadlines: how long a canary may wait at a gate for people, and what
//! happens then. Pure rules; the policy file fills them and the core applies
//! them to the waits that outlast them.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::key::{CanaryRef, GateKind, RepoName, Scope};

/// What a deadline does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadline {
    /// Opens the rollback gate for the waiting revision: Flagger checks
    /// rollback hooks while it waits for promotion, and rolls back.
    Rollback,
    /// Ends the wait for people (the message loses its buttons) and says so;
    /// the gate stays closed.
    Close,
    /// Only tells people.
    Nothing,
}

impl OnDeadline {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rollback => "rollback",
            Self::Close => "close",
            Self::Nothing => "nothing",
        }
    }

    /// Flagger does not check rollback hooks while it waits at the start gate
    /// (fluxcd/flagger#1432), so a rollback there would never be acted on.
    pub fn allowed_at(self, kind: GateKind) -> bool {
        !(self == Self::Rollback && kind == GateKind::Start)
    }

    /// Rollback where Flagger acts on it, close at the start gate.
    pub fn default_for(kind: GateKind) -> Self {
        match kind {
            GateKind::Start => Self::Close,
            _ => Self::Rollback,
        }
    }
}

impl fmt::Display for OnDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnDeadline {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "rollback" => Ok(Self::Rollback),
            "close" => Ok(Self::Close),
            "nothing" => Ok(Self::Nothing),
            other => Err(format!(
                "on_deadline `{other}`: write rollback, close or nothing"
            )),
        }
    }
}

/// A deadline as it applies to one wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub after: Duration,
    pub action: OnDeadline,
}

/// Which waits a rule is for: the kind, and optionally a repository (PR
/// gates), a namespace or one canary. The most specific rule wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlineRule {
    pub kind: GateKind,
    pub repository: Option<RepoName>,
    pub namespace: Option<String>,
    pub canary: Option<CanaryRef>,
    pub deadline: Deadline,
}

impl DeadlineRule {
    /// How specific a matching rule is; None when it does not match.
    fn matches(&self, kind: GateKind, scope: &Scope, canary: &CanaryRef) -> Option<u8> {
        if self.kind != kind {
            return None;
        }
        let mut rank = 0;
        if let Some(repo) = &self.repository {
            match scope {
                Scope::Pr { repo: r, .. } if r == repo => rank = 1,
                _ => return None,
            }
        }
        if let Some(ns) = &self.namespace {
            if *ns != canary.namespace {
                return None;
            }
            rank = 2;
        }
        if let Some(c) = &self.canary {
            if c != canary {
                return None;
            }
            rank = 3;
        }
        Some(rank)
    }
}

/// The deadline of a wait no canary made (a GitHub deployment waiting for
/// a PR's gate): the most specific rule of its kind that names no namespace
/// and no canary, by repository for a PR gate.
pub fn deadline_without_canary(
    rules: &[DeadlineRule],
    kind: GateKind,
    scope: &Scope,
) -> Option<Deadline> {
    if !kind.has_waits() || kind.is_legacy() {
        return None;
    }
    let deadline = rules
        .iter()
        .filter(|r| r.kind == kind && r.namespace.is_none() && r.canary.is_none())
        .filter_map(|r| match (&r.repository, scope) {
            (None, _) => Some((0, r)),
            (Some(repo), Scope::Pr { repo: r2, .. }) if repo == r2 => Some((1, r)),
            _ => None,
        })
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, r)| r.deadline)?;
    // Nothing to roll back: the deadline closes the wait.
    Some(Deadline {
        action: OnDeadline::Close,
        ..deadline
    })
}

/// The deadline of a wait of `canary` at a gate of `kind` and `scope`: the
/// Canary hook's metadata (`deadline: 2h`, `on_deadline: rollback`) over the
/// most specific rule. `Err` says what is wrong with the metadata; the rules
/// were checked when the policy was read.
pub fn deadline_for(
    rules: &[DeadlineRule],
    kind: GateKind,
    scope: &Scope,
    canary: &CanaryRef,
    metadata: &BTreeMap<String, String>,
) -> Result<Option<Deadline>, String> {
    if !kind.has_waits() || kind.is_legacy() {
        return Ok(None);
    }
    let ruled = rules
        .iter()
        .filter_map(|r| Some((r.matches(kind, scope, canary)?, r)))
        // The last of equally specific rules wins, as in the file's order.
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, r)| r.deadline);
    let after = match metadata.get("deadline").map(|d| d.trim()) {
        None | Some("") => None,
        Some(text) => Some(
            humantime::parse_duration(text)
                .map_err(|e| format!("deadline `{text}` in the webhook's metadata: {e}"))?,
        ),
    };
    let action = match metadata.get("on_deadline") {
        None => None,
        Some(text) => Some(text.parse::<OnDeadline>()?),
    };
    let deadline = match (after.or(ruled.map(|d| d.after)), ruled) {
        (None, _) => return Ok(None),
        (Some(after), ruled) => Deadline {
            after,
            action: action
                .or(ruled.map(|d| d.action))
                .unwrap_or_else(|| OnDeadline::default_for(kind)),
        },
    };
    if !deadline.action.allowed_at(kind) {
        return Err(format!(
            "on_deadline rollback at the {kind} gate: Flagger does not check rollback hooks while it waits to start (fluxcd/flagger#1432); write close or nothing"
        ));
    }
    Ok(Some(deadline))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_without_a_canary_takes_the_rules_that_name_none() {
        let mut by_repo = rule(GateKind::Promote, 60, OnDeadline::Rollback);
        by_repo.repository = Some("acme/shop".parse().unwrap());
        let mut by_ns = rule(GateKind::Promote, 5, OnDeadline::Close);
        by_ns.namespace = Some("prod".into());
        let any = rule(GateKind::Promote, 3600, OnDeadline::Close);
        let rules = [any.clone(), by_repo, by_ns];
        let d = deadline_without_canary(&rules, GateKind::Promote, &pr()).unwrap();
        assert_eq!(d.after, Duration::from_secs(60), "the repository's rule");
        assert_eq!(d.action, OnDeadline::Close, "nothing to roll back");
        let other: Scope = Scope::Pr {
            repo: "acme/other".parse().unwrap(),
            number: crate::gate::PrNumber(1),
        };
        let d = deadline_without_canary(&rules, GateKind::Promote, &other).unwrap();
        assert_eq!(d.after, Duration::from_secs(3600));
        assert_eq!(
            deadline_without_canary(&rules, GateKind::Start, &pr()),
            None
        );
    }

    fn rule(kind: GateKind, after: u64, action: OnDeadline) -> DeadlineRule {
        DeadlineRule {
            kind,
            repository: None,
            namespace: None,
            canary: None,
            deadline: Deadline {
                after: Duration::from_secs(after),
                action,
            },
        }
    }

    fn pr() -> Scope {
        Scope::Pr {
            repo: "acme/shop".parse().unwrap(),
            number: crate::gate::PrNumber(42),
        }
    }

    fn podinfo() -> CanaryRef {
        CanaryRef::new("prod", "podinfo").unwrap()
    }

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A wait, its metadata, and the deadline it gets (seconds, action).
    type Case<'a> = (
        &'a Scope,
        &'a CanaryRef,
        &'a [(&'a str, &'a str)],
        Option<(u64, OnDeadline)>,
    );

    #[test]
    fn the_most_specific_rule_wins_and_metadata_wins_over_rules() {
        let mut repo = rule(GateKind::Promote, 7200, OnDeadline::Rollback);
        repo.repository = Some("acme/shop".parse().unwrap());
        let mut ns = rule(GateKind::Promote, 3600, OnDeadline::Nothing);
        ns.namespace = Some("prod".into());
        let mut one = rule(GateKind::Promote, 600, OnDeadline::Close);
        one.canary = Some(podinfo());
        let any = rule(GateKind::Promote, 86400, OnDeadline::Rollback);
        let other_repo = Scope::Pr {
            repo: "acme/web".parse().unwrap(),
            number: crate::gate::PrNumber(1),
        };
        let staging = CanaryRef::new("staging", "podinfo").unwrap();
        let backend = CanaryRef::new("prod", "backend").unwrap();
        let rules = [any.clone(), repo.clone(), ns.clone(), one.clone()];
        let table: [Case; 6] = [
            (&pr(), &podinfo(), &[], Some((600, OnDeadline::Close))),
            (&pr(), &backend, &[], Some((3600, OnDeadline::Nothing))),
            (&pr(), &staging, &[], Some((7200, OnDeadline::Rollback))),
            (
                &other_repo,
                &staging,
                &[],
                Some((86400, OnDeadline::Rollback)),
            ),
            (
                &pr(),
                &podinfo(),
                &[("deadline", "2h")],
                Some((7200, OnDeadline::Close)),
            ),
            (
                &pr(),
                &staging,
                &[("deadline", "30m"), ("on_deadline", "nothing")],
                Some((1800, OnDeadline::Nothing)),
            ),
        ];
        for (scope, canary, m, want) in table {
            let got = deadline_for(&rules, GateKind::Promote, scope, canary, &meta(m)).unwrap();
            let want = want.map(|(s, action)| Deadline {
                after: Duration::from_secs(s),
                action,
            });
            assert_eq!(got, want, "{scope} {canary} {m:?}");
        }
    }

    #[test]
    fn no_rule_and_no_metadata_is_no_deadline_and_metadata_alone_is_one() {
        let none = deadline_for(&[], GateKind::Promote, &pr(), &podinfo(), &meta(&[])).unwrap();
        assert_eq!(none, None);
        let only = deadline_for(
            &[],
            GateKind::Start,
            &pr(),
            &podinfo(),
            &meta(&[("deadline", "1h")]),
        )
        .unwrap();
        assert_eq!(
            only,
            Some(Deadline {
                after: Duration::from_secs(3600),
                action: OnDeadline::Close
            }),
            "close at the start gate unless told"
        );
        let rules = [rule(GateKind::Promote, 60, OnDeadline::Rollback)];
        let rollback = deadline_for(&rules, GateKind::Rollback, &pr(), &podinfo(), &meta(&[]));
        assert_eq!(rollback, Ok(None), "nobody waits at a rollback gate");
    }

    #[test]
    fn bad_metadata_and_a_rollback_at_the_start_gate_say_what_to_write() {
        let bad = deadline_for(
            &[],
            GateKind::Promote,
            &pr(),
            &podinfo(),
            &meta(&[("deadline", "soon")]),
        )
        .unwrap_err();
        assert!(bad.contains("deadline `soon`"), "{bad}");
        let bad = deadline_for(
            &[],
            GateKind::Promote,
            &pr(),
            &podinfo(),
            &meta(&[("deadline", "1h"), ("on_deadline", "explode")]),
        )
        .unwrap_err();
        assert!(bad.contains("rollback, close or nothing"), "{bad}");
        let start = deadline_for(
            &[],
            GateKind::Start,
            &pr(),
            &podinfo(),
            &meta(&[("deadline", "1h"), ("on_deadline", "rollback")]),
        )
        .unwrap_err();
        assert!(start.contains("flagger#1432"), "{start}");
    }
}
