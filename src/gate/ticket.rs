//! Change tickets: an approval tied to an approved change request in
//! ServiceNow or Jira Service Management. Pure: which gates the policy's
//! `[change]` covers, which word of a command names a change, and whether a
//! change, as its system answered, lets a gate open now.

use std::fmt;

use super::environment::Environments;
use super::key::{GateKey, GateKind};
use super::state::rfc3339;
use super::Millis;

/// Where change requests live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// ServiceNow's Change Management API (`/api/sn_chg_rest/change`).
    ServiceNow,
    /// Jira Service Management's request API (`/rest/servicedeskapi/request`).
    Jira,
}

impl Provider {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "servicenow" => Some(Self::ServiceNow),
            "jira" => Some(Self::Jira),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServiceNow => "servicenow",
            Self::Jira => "jira",
        }
    }

    /// As people call it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ServiceNow => "ServiceNow",
            Self::Jira => "Jira Service Management",
        }
    }
}

/// How a gate under the rule is tied to its change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each approval names an approved change (`/promote CHG0031337`).
    Reference,
    /// gatebot opens a change when a canary starts waiting, the gate opens
    /// when it is approved, and gatebot closes it when Flagger is done.
    Create,
}

/// The policy's `[change]`: which gates need a change, and where changes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRule {
    pub provider: Provider,
    pub mode: Mode,
    /// The kinds of gate under the rule.
    pub kinds: Vec<GateKind>,
    /// The `[[environments]]` under the rule; empty: every gate of `kinds`.
    pub environments: Vec<String>,
    /// A change must name this configuration item or service.
    pub service: Option<String>,
    /// Jira: the project key of change numbers (`CHG` of `CHG-12`).
    pub project: Option<String>,
    /// Mode `create`: how long the planned window of a change gatebot
    /// opens is, from when the canary started waiting.
    pub window: Millis,
}

impl ChangeRule {
    /// Whether a gate of `kind` in `environment` needs a change.
    pub fn covers(&self, kind: GateKind, environment: Option<&str>) -> bool {
        self.kinds.contains(&kind)
            && (self.environments.is_empty()
                || environment.is_some_and(|e| self.environments.iter().any(|x| x == e)))
    }

    /// Whether gate `key` needs a change: its kind, in its cluster's environment.
    pub fn covers_gate(&self, key: &GateKey, envs: &Environments) -> bool {
        let env = key.cluster.as_ref().and_then(|c| envs.of_cluster(c));
        self.covers(key.kind, env.map(|e| e.name.as_str()))
    }

    /// Whether gate `key` opens only with the change gatebot opens for it
    /// (mode `create`): the change's approval is then one of its votes.
    pub fn creates_for(&self, key: &GateKey, envs: &Environments) -> bool {
        self.mode == Mode::Create && self.covers_gate(key, envs)
    }

    /// The change number `text` names, as this provider writes them:
    /// ServiceNow's `CHG0031337`, Jira's `CHG-12` (of the rule's project).
    /// Only such a word is ever sent to the provider.
    pub fn number_in(&self, text: &str) -> Option<String> {
        text.split(|c: char| c.is_whitespace() || ",;()[]<>\"'`".contains(c))
            .map(|w| w.trim_end_matches(['.', ':', '!', '?']))
            .find(|w| self.is_number(w))
            .map(str::to_string)
    }

    /// Whether `word` is a change number as this provider writes them.
    pub fn is_number(&self, word: &str) -> bool {
        let digits = |d: &str| (1..=12).contains(&d.len()) && d.chars().all(|c| c.is_ascii_digit());
        match self.provider {
            Provider::ServiceNow => word.strip_prefix("CHG").is_some_and(digits),
            Provider::Jira => self.project.as_deref().is_some_and(|p| {
                word.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|n| digits(n) && !n.starts_with('0'))
            }),
        }
    }

    /// How to name a change in a command, for the refusal.
    pub fn example(&self) -> String {
        match (self.provider, &self.project) {
            (Provider::Jira, Some(p)) => format!("{p}-123"),
            _ => "CHG0031337".to_string(),
        }
    }
}

/// Where the provider's own fields are, for Jira (custom fields differ per
/// site) and ServiceNow's standard change template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// ServiceNow: create from this standard change template (sys_id); else a normal change.
    pub template: Option<String>,
    /// Jira: the service desk and request type of changes gatebot opens.
    pub service_desk: Option<String>,
    pub request_type: Option<String>,
    /// Jira: the request fields of the planned start and end, and the affected service.
    pub start_field: Option<String>,
    pub end_field: Option<String>,
    pub service_field: Option<String>,
}

/// What the change's approvers decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approved,
    Pending,
    Rejected,
}

/// A change request as its system answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub number: String,
    /// Where a person opens it.
    pub link: String,
    pub decision: Decision,
    /// Closed or canceled: it lets nothing open any more.
    pub closed: bool,
    /// The planned window, start and end.
    pub window: Option<(Millis, Millis)>,
    /// The configuration items and services it names.
    pub services: Vec<String>,
}

/// Why a change lets no gate open now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady(pub String);

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Ticket {
    /// Until when this change lets a gate open (its window's end), or why
    /// it does not now.
    pub fn allows(&self, now: Millis, service: Option<&str>) -> Result<Millis, NotReady> {
        let n = &self.number;
        let no = |why: String| Err(NotReady(why));
        // A rejected change is often closed too: the rejection is the news.
        if self.decision == Decision::Rejected {
            return no(format!("change {n} was rejected"));
        }
        if self.closed {
            return no(format!("change {n} is closed"));
        }
        if self.decision == Decision::Pending {
            return no(format!("change {n} is not approved yet"));
        }
        let Some((start, end)) = self.window else {
            return no(format!("change {n} has no planned window"));
        };
        if now < start {
            return no(format!("change {n}'s window begins at {}", rfc3339(start)));
        }
        if now >= end {
            return no(format!("change {n}'s window ended at {}", rfc3339(end)));
        }
        if let Some(s) = service {
            if !self.services.iter().any(|x| x.eq_ignore_ascii_case(s)) {
                return no(format!("change {n} does not name {s}"));
            }
        }
        Ok(end)
    }

    /// Whether waiting could still make it allow (not rejected, closed or past).
    pub fn may_yet(&self, now: Millis) -> bool {
        !self.closed
            && self.decision != Decision::Rejected
            && self.window.is_none_or(|(_, end)| now < end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(provider: Provider) -> ChangeRule {
        ChangeRule {
            provider,
            mode: Mode::Reference,
            kinds: vec![GateKind::Promote],
            environments: vec!["production".into()],
            service: Some("shop".into()),
            project: Some("CHG".into()),
            window: 3_600_000,
        }
    }

    #[test]
    fn only_a_word_shaped_like_the_providers_numbers_is_a_change() {
        let sn = rule(Provider::ServiceNow);
        let jira = rule(Provider::Jira);
        let table = [
            (
                &sn,
                "production CHG0031337 because the budget is fine",
                Some("CHG0031337"),
            ),
            (&sn, "(CHG0031337).", Some("CHG0031337")),
            (&sn, "chg0031337", None),
            (&sn, "CHG0031337^ORnumber=CHG1", None),
            (&sn, "CHG", None),
            (&jira, "CHG-12 looks good", Some("CHG-12")),
            (&jira, "OPS-12", None),
            (&jira, "CHG-012", None),
            (&jira, "CHG-12/../..", None),
        ];
        for (rule, text, want) in table {
            assert_eq!(rule.number_in(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn a_rule_covers_its_kinds_in_its_environments() {
        let r = rule(Provider::ServiceNow);
        assert!(r.covers(GateKind::Promote, Some("production")));
        assert!(!r.covers(GateKind::Promote, Some("staging")));
        assert!(!r.covers(GateKind::Promote, None));
        assert!(!r.covers(GateKind::Traffic, Some("production")));
        let everywhere = ChangeRule {
            environments: Vec::new(),
            ..r
        };
        assert!(everywhere.covers(GateKind::Promote, None));
    }

    #[test]
    fn a_change_allows_while_approved_in_its_window_and_naming_the_service() {
        let ticket = Ticket {
            number: "CHG1".into(),
            link: String::new(),
            decision: Decision::Approved,
            closed: false,
            window: Some((1_000, 2_000)),
            services: vec!["Shop".into()],
        };
        assert_eq!(ticket.allows(1_500, Some("shop")), Ok(2_000));
        let why = |t: &Ticket, now| t.allows(now, Some("shop")).unwrap_err().0;
        assert_eq!(
            why(&ticket, 500),
            "change CHG1's window begins at 1970-01-01T00:00:01Z"
        );
        assert_eq!(
            why(&ticket, 2_000),
            "change CHG1's window ended at 1970-01-01T00:00:02Z"
        );
        let other = Ticket {
            services: vec!["billing".into()],
            ..ticket.clone()
        };
        assert_eq!(why(&other, 1_500), "change CHG1 does not name shop");
        let pending = Ticket {
            decision: Decision::Pending,
            ..ticket.clone()
        };
        assert_eq!(why(&pending, 1_500), "change CHG1 is not approved yet");
        assert!(pending.may_yet(1_500));
        let rejected = Ticket {
            decision: Decision::Rejected,
            ..ticket.clone()
        };
        assert_eq!(why(&rejected, 1_500), "change CHG1 was rejected");
        assert!(!rejected.may_yet(1_500));
        let closed = Ticket {
            closed: true,
            ..ticket
        };
        assert_eq!(why(&closed, 1_500), "change CHG1 is closed");
    }
}
