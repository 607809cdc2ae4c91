//! Teams' authorizer for the one command path, and why it says no.

use crate::core::dispatch::{Answer, Authorizer, Rule};
use crate::core::AppState;
use crate::gate::{GateKey, Scope};

/// Why Teams refuses someone.
#[derive(Debug, Clone)]
pub enum TeamsDenied {
    /// GATEBOT_TEAMS_APPROVERS is empty.
    Nobody,
    /// Not in GATEBOT_TEAMS_APPROVERS (or the message named no Entra id).
    NotApprover(String),
    /// Break glass is not offered in Teams.
    NoForce,
    /// The policy asks four eyes, and a Teams person is not yet known by
    /// their GitHub login, so it cannot be told whether they opened the PR.
    FourEyes,
}

impl std::fmt::Display for TeamsDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nobody => f.write_str("nobody may act from Teams: set GATEBOT_TEAMS_APPROVERS"),
            Self::NotApprover(who) => write!(
                f,
                "{who} is not a Teams approver: the approvers are the Entra object ids in GATEBOT_TEAMS_APPROVERS"
            ),
            Self::NoForce => f.write_str("break glass (--force) is not offered in Teams: use GitHub, Slack or the CLI"),
            Self::FourEyes => f.write_str("the policy asks four eyes here, which Teams cannot check yet: approve from GitHub, Slack or the web pages"),
        }
    }
}

/// Teams' rules: GATEBOT_TEAMS_APPROVERS by Entra object id; no break glass;
/// four eyes, where the policy asks it, refused.
pub(super) struct TeamsAuthorizer<'a> {
    pub(super) state: &'a AppState,
    /// The sender's Entra object id, and how to name them.
    pub(super) aad_object_id: Option<&'a str>,
    pub(super) name: &'a str,
}

impl TeamsAuthorizer<'_> {
    fn check(&self, rule: Rule, keys: &[GateKey]) -> Result<(), TeamsDenied> {
        let approvers = &self.state.config.teams.approvers;
        let mut listed = approvers.iter().map(|a| a.trim()).filter(|a| !a.is_empty());
        let Some(me) = self.aad_object_id.filter(|id| !id.is_empty()) else {
            return Err(TeamsDenied::NotApprover(self.name.to_string()));
        };
        if listed.clone().next().is_none() {
            return Err(TeamsDenied::Nobody);
        }
        if !listed.any(|a| a.eq_ignore_ascii_case(me)) {
            return Err(TeamsDenied::NotApprover(self.name.to_string()));
        }
        let policy = &self.state.policy;
        let four_eyes = match rule {
            Rule::Force => return Err(TeamsDenied::NoForce),
            Rule::Verb(verb) => {
                policy.github(verb).forbid_self_approval || policy.slack(verb).forbid_self_approval
            }
            _ => false,
        };
        let on_a_pr = keys.iter().any(|k| matches!(k.scope, Scope::Pr { .. }));
        if four_eyes && on_a_pr {
            return Err(TeamsDenied::FourEyes);
        }
        Ok(())
    }
}

impl Authorizer for TeamsAuthorizer<'_> {
    type Denied = TeamsDenied;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, TeamsDenied> {
        Box::pin(async move { Ok(self.check(rule, keys)) })
    }
}
