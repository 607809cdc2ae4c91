//! Teams' authorizer for the one command path, and why it says no.

use super::activity::Activity;
use crate::core::dispatch::{Answer, Authorizer, Outcome, Rule};
use crate::core::{AppState, CommandError};
use crate::gate::{GateKey, Scope};
use crate::notify::SendError;

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
    /// A click on a card someone decided already ("approved by Rido").
    Decided(String),
    /// A click on a card whose wait is over (why).
    Over(String),
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
            Self::Decided(how) => write!(f, "this card was {how} already"),
            Self::Over(why) => f.write_str(why),
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
    /// A click on a card decided or over: refused once the person may act.
    pub(super) card: Option<TeamsDenied>,
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
        self.card.clone().map_or(Ok(()), Err)
    }
}

impl Authorizer for TeamsAuthorizer<'_> {
    type Denied = TeamsDenied;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, TeamsDenied> {
        Box::pin(async move { Ok(self.check(rule, keys)) })
    }
}

/// How a person is named in the audit: their Teams name, else their id.
pub(super) fn name_of(activity: &Activity) -> &str {
    if activity.from.name.is_empty() {
        activity.from.id.as_str()
    } else {
        activity.from.name.as_str()
    }
}

/// Who a Teams person is when approvals are counted.
pub(super) fn person_of(activity: &Activity) -> String {
    let id = activity.from.aad_object_id.as_deref();
    format!("teams:{}", id.unwrap_or(&activity.from.id))
}

pub(super) fn answer(outcome: Outcome<TeamsDenied>) -> String {
    match outcome {
        Outcome::Applied(applied) => applied.summary(),
        Outcome::Denied(denied) => denied.to_string(),
        Outcome::Invalid(invalid) => invalid.to_string(),
        Outcome::Held { gate, by, via } => format!("{gate} is held by {by} via {via}"),
        Outcome::WrittenBeforeClose { gate, .. } => {
            format!("{gate} was closed after this was written: send it again")
        }
        Outcome::Named(why) => why.to_string(),
    }
}

/// The outbox's terms for a command not done.
pub(super) fn send_error(e: CommandError) -> SendError {
    SendError::of(e.lasting(), e.retry_after(), e.to_string())
}
