//! Change freezes: while one covers a gate, the gate answers closed, whatever
//! was approved. Rollback gates are never frozen. Pure.

use std::fmt;
use std::str::FromStr;

use super::change::{Actor, Approval, Millis};
use super::key::{CanaryRef, GateKey, GateKind, KeyError, Namespace, RepoName, Scope};
use super::state::{rfc3339, Gate, GateStatus};
use super::window::WindowState;

/// What a freeze covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FreezeScope {
    All,
    Repo(RepoName),
    Namespace(Namespace),
}

impl fmt::Display for FreezeScope {
    /// As stored and typed: `all`, `acme/shop`, `ns/prod`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Repo(r) => write!(f, "{r}"),
            Self::Namespace(ns) => write!(f, "ns/{ns}"),
        }
    }
}

impl FromStr for FreezeScope {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        let s = s.trim();
        if s == "all" {
            return Ok(Self::All);
        }
        if let Some(ns) = s.strip_prefix("ns/") {
            return Namespace::new(ns).map(Self::Namespace);
        }
        s.parse().map(Self::Repo)
    }
}

/// A freeze in force (or lifted, in the history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freeze {
    pub id: i64,
    pub scope: FreezeScope,
    pub reason: String,
    pub by: Actor,
    pub at: Millis,
    /// When it ends by itself; None: until someone lifts it.
    pub until: Option<Millis>,
}

impl Freeze {
    pub fn active(&self, now: Millis) -> bool {
        self.until.is_none_or(|u| now < u)
    }

    /// Whether the freeze holds `key` when `canary` asks (None: a peek).
    pub fn covers(&self, key: &GateKey, canary: Option<&CanaryRef>) -> bool {
        if !matches!(
            key.kind,
            GateKind::Start | GateKind::Promote | GateKind::Traffic | GateKind::LegacyGate
        ) {
            return false;
        }
        match &self.scope {
            FreezeScope::All => true,
            FreezeScope::Repo(repo) => key.pr().is_some_and(|(r, _)| r == repo),
            FreezeScope::Namespace(ns) => {
                let of_key = match &key.scope {
                    Scope::Namespace(n) => n == ns,
                    Scope::Canary(c) => c.namespace == ns.as_str(),
                    _ => false,
                };
                of_key || canary.is_some_and(|c| c.namespace == ns.as_str())
            }
        }
    }

    /// The reason Flagger reads: who froze what, why, and until when.
    pub fn reason_line(&self) -> String {
        let until = match self.until {
            Some(u) => format!(" until {}", rfc3339(u)),
            None => String::new(),
        };
        format!(
            "frozen ({}) by {} via {} since {}{until}: {}; `/gatebot unfreeze {}` lifts it",
            self.scope,
            self.by.name,
            self.by.source,
            rfc3339(self.at),
            self.reason,
            self.scope
        )
    }
}

/// The freeze in force that holds `key` for `canary` now, if any.
pub fn frozen<'a>(
    freezes: &'a [Freeze],
    key: &GateKey,
    canary: Option<&CanaryRef>,
    now: Millis,
) -> Option<&'a Freeze> {
    freezes
        .iter()
        .find(|f| f.active(now) && f.covers(key, canary))
}

/// When a freeze given `for` a while or `until` a time ends.
pub fn end_of(
    now: Millis,
    for_: Option<&str>,
    until: Option<&str>,
) -> Result<Option<Millis>, String> {
    match (for_, until) {
        (Some(_), Some(_)) => Err("give `for` or `until`, not both".into()),
        (Some(d), None) => humantime::parse_duration(d)
            .map(|d| Some(now.saturating_add(super::millis(d))))
            .map_err(|e| format!("for `{}`: {e} (write e.g. 2h, 1d)", quoted(d))),
        (None, Some(t)) => {
            let t_ = quoted(t);
            let at = humantime::parse_rfc3339_weak(t)
                .map_err(|e| format!("until `{t_}`: {e} (write e.g. 2026-12-24T18:00:00Z)"))?;
            let ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|_| format!("until `{t_}` is before 1970"))?
                .as_millis() as Millis;
            if ms <= now {
                return Err(format!("until `{t_}` is in the past ({})", rfc3339(now)));
            }
            Ok(Some(ms))
        }
        (None, None) => Ok(None),
    }
}

/// A person's word, shown between backticks in an answer: at most 40
/// characters, with no backtick or control character to end the quote early
/// (and let a mention after it ping).
fn quoted(word: &str) -> String {
    let kept: String = word
        .chars()
        .filter(|c| *c != '`' && !c.is_control())
        .take(41)
        .collect();
    match kept.chars().count() > 40 {
        true => kept.chars().take(39).chain(['…']).collect(),
        false => kept,
    }
}

/// Whether a gate people opened lets something outside Flagger go now (a
/// GitHub deployment its protection rule holds), by the rules of Flagger's
/// check: an approval for every canary that has not expired, and no freeze
/// or closed release window, which break glass goes past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outside<'g> {
    /// It may go, by this approval.
    Go(&'g Approval),
    /// Open, but held: why, and when that may change.
    Held { why: String, until: Option<Millis> },
    /// Not open for it.
    Closed,
}

pub fn outside<'g>(
    gate: &'g Gate,
    freezes: &[Freeze],
    window: WindowState,
    now: Millis,
) -> Outside<'g> {
    let GateStatus::Open(a) = &gate.status else {
        return Outside::Closed;
    };
    if a.expired(now) || a.exclusive {
        return Outside::Closed;
    }
    if a.forced {
        return Outside::Go(a);
    }
    if let Some(f) = frozen(freezes, &gate.key, None, now) {
        return Outside::Held {
            why: f.reason_line(),
            until: f.until,
        };
    }
    match window {
        WindowState::Closed { reason, next, .. } => Outside::Held {
            why: reason,
            until: next,
        },
        _ => Outside::Go(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Source;

    fn freeze(scope: &str, until: Option<Millis>) -> Freeze {
        Freeze {
            id: 1,
            scope: scope.parse().unwrap(),
            reason: "end of year".into(),
            by: Actor::new("alice", Source::Slack),
            at: 0,
            until,
        }
    }

    fn key(text: &str) -> GateKey {
        GateKey::parse(text, None).unwrap()
    }

    #[test]
    fn a_deployment_goes_by_an_open_gate_unless_a_freeze_or_a_window_holds_it() {
        use crate::gate::{Change, Source};
        let approval = |forced: bool, exclusive: bool, expires_at: Option<Millis>| Approval {
            id: "a".into(),
            change: Change {
                by: Actor::new("alice", Source::Github),
                reason: None,
                at: 0,
            },
            expires_at,
            pins: Default::default(),
            approvers: Vec::new(),
            forced,
            exclusive,
        };
        let gate = |a: Approval| Gate {
            key: key("/gates/promote/acme/shop/pr/1"),
            status: GateStatus::Open(a),
        };
        let shut = || WindowState::Closed {
            reason: "outside the window".into(),
            next: Some(500),
            until: 500,
        };
        let frozen = [freeze("acme/shop", Some(900))];
        let open = gate(approval(false, false, None));
        assert!(matches!(
            outside(&open, &[], WindowState::Unrestricted, 10),
            Outside::Go(_)
        ));
        assert_eq!(
            outside(&open, &frozen, WindowState::Unrestricted, 10),
            Outside::Held {
                why: frozen[0].reason_line(),
                until: Some(900)
            }
        );
        assert!(matches!(
            outside(&open, &[], shut(), 10),
            Outside::Held {
                until: Some(500),
                ..
            }
        ));
        let forced = gate(approval(true, false, None));
        assert!(matches!(
            outside(&forced, &frozen, shut(), 10),
            Outside::Go(_)
        ));
        for closed in [
            gate(approval(false, true, None)),
            gate(approval(false, false, Some(10))),
            Gate::closed(key("/gates/promote/acme/shop/pr/1")),
        ] {
            assert_eq!(
                outside(&closed, &[], WindowState::Unrestricted, 10),
                Outside::Closed
            );
        }
    }

    #[test]
    fn scopes_cover_their_gates_and_never_a_rollback() {
        let prod = CanaryRef::new("prod", "podinfo").unwrap();
        let test = CanaryRef::new("test", "podinfo").unwrap();
        let table = [
            ("all", "/gates/promote/acme/shop/pr/1", None, true),
            ("all", "/gates/rollback/acme/shop/pr/1", None, false),
            ("all", "/loadtester/rollback/prod/podinfo", None, false),
            ("all", "/loadtester/gate/prod/podinfo", None, true),
            ("acme/shop", "/gates/start/acme/shop/pr/1", None, true),
            ("acme/shop", "/gates/start/acme/web/pr/1", None, false),
            ("ns/prod", "/gates/traffic/prod", None, true),
            ("ns/prod", "/gates/traffic/canary/prod/podinfo", None, true),
            (
                "ns/prod",
                "/gates/promote/acme/shop/pr/1",
                Some(&prod),
                true,
            ),
            (
                "ns/prod",
                "/gates/promote/acme/shop/pr/1",
                Some(&test),
                false,
            ),
            ("ns/prod", "/gates/promote/named/r1", None, false),
        ];
        for (scope, gate, canary, want) in table {
            assert_eq!(
                freeze(scope, None).covers(&key(gate), canary),
                want,
                "{scope} {gate} {canary:?}"
            );
        }
    }

    #[test]
    fn a_timed_freeze_ends_by_itself_and_says_until_when() {
        let f = freeze("all", Some(7_200_000));
        let gate = key("/gates/promote/acme/shop/pr/1");
        assert!(frozen(std::slice::from_ref(&f), &gate, None, 7_199_999).is_some());
        assert!(frozen(std::slice::from_ref(&f), &gate, None, 7_200_000).is_none());
        let line = f.reason_line();
        assert!(
            line.starts_with("frozen (all) by alice via slack since 1970-01-01T00:00:00Z until 1970-01-01T02:00:00Z: end of year"),
            "{line}"
        );
    }

    #[test]
    fn scopes_read_back_as_written() {
        for text in ["all", "acme/shop", "ns/prod"] {
            assert_eq!(text.parse::<FreezeScope>().unwrap().to_string(), text);
        }
        for bad in ["", "ns/Prod", "nonsense", "a/b/c"] {
            assert!(bad.parse::<FreezeScope>().is_err(), "{bad:?}");
        }
    }

    /// A time gatebot cannot read is quoted back without what would end the
    /// quote (a backtick, so a mention after it would ping), and briefly; a
    /// while past the store's last millisecond ends there.
    #[test]
    fn an_unreadable_time_is_quoted_back_safely() {
        let why = end_of(0, Some("2h`@acme/sre"), None).unwrap_err();
        assert!(why.starts_with("for `2h@acme/sre`: "), "{why}");
        let long = "x".repeat(5000);
        let why = end_of(0, None, Some(&long)).unwrap_err();
        assert!(why.len() < 200, "{why}");
        assert_eq!(end_of(i64::MAX - 5, Some("1h"), None), Ok(Some(i64::MAX)));
    }
}
