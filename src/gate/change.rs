//! The facts a decision is made from: who acted, from where and when, the
//! approvals they left, and what Flagger asks when it checks a gate. No I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::key::CanaryRef;

/// Unix time in milliseconds.
pub type Millis = i64;

/// `d` in milliseconds, the longest a `Millis` holds when it is longer.
pub fn millis(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// Where a person (or gatebot) acted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Github,
    Slack,
    Api,
    Cli,
    Loadtester,
    Gatebot,
    /// The pages under /ui.
    Web,
    /// The Microsoft Teams bot.
    Teams,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Github => "github",
            Self::Slack => "slack",
            Self::Api => "api",
            Self::Cli => "cli",
            Self::Loadtester => "loadtester",
            Self::Gatebot => "gatebot",
            Self::Web => "web",
            Self::Teams => "teams",
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "github" => Self::Github,
            "slack" => Self::Slack,
            "cli" => Self::Cli,
            "loadtester" => Self::Loadtester,
            "gatebot" => Self::Gatebot,
            "web" => Self::Web,
            "teams" => Self::Teams,
            _ => Self::Api,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Actor {
    pub name: String,
    pub source: Source,
}

impl Actor {
    pub fn new(name: impl Into<String>, source: Source) -> Self {
        Self {
            name: name.into(),
            source,
        }
    }

    pub fn gatebot() -> Self {
        Self::new("gatebot", Source::Gatebot)
    }
}

/// Who changed a gate, when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub by: Actor,
    pub reason: Option<String>,
    pub at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    #[serde(flatten)]
    pub change: Change,
    pub expires_at: Option<Millis>,
    /// canary → the revision (Flagger checksum) this approval was first used for.
    pub pins: BTreeMap<String, String>,
    /// Everyone whose approvals together opened a gate that needs several
    /// people, in order; empty when one sufficed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<Actor>,
    /// Break glass: opened past a freeze, a release window or missing approvals.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    /// For its pinned canaries only (a deadline's rollback): every other
    /// canary finds the gate closed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
}

impl Approval {
    pub fn expired(&self, now: Millis) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

/// What Flagger says when it asks a gate, borrowed from the request: the
/// steady state copies none of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check<'a> {
    pub canary: &'a CanaryRef,
    pub checksum: &'a str,
    pub phase: &'a str,
}
