//! Teams' authorizer for the one command path, and why it says no.

use super::activity::Activity;
use crate::core::authors::PrAuthors;
use crate::core::dispatch::{Answer, Authorizer, Rule};
use crate::core::{AppState, CommandError};
use crate::gate::{GateKey, Scope};
use crate::notify::SendError;
use crate::policy::ChatRule;

/// Why Teams refuses someone.
#[derive(Debug, Clone)]
pub enum TeamsDenied {
    /// No approvers for the command (the setting to change).
    Nobody(String),
    /// Not among the command's approvers (or the message named no Entra
    /// id): who, and the setting that lists the approvers.
    NotApprover(String, String),
    /// Break glass needs `[teams.commands.force]`.
    NoForce,
    /// Four eyes, and the person is not mapped to a GitHub login in
    /// `[users]`, so it cannot be told whether they opened the PR.
    Unmapped(String),
    /// Four eyes, and they opened the PR (the whole sentence).
    OwnPullRequest(String),
    /// A click on a card someone decided already ("approved by Rido").
    Decided(String),
    /// A click on a card whose wait is over (why).
    Over(String),
}

impl std::fmt::Display for TeamsDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nobody(setting) => write!(
                f,
                "nobody may do this from Teams: set {setting} (Entra object ids)"
            ),
            Self::NotApprover(who, setting) => write!(
                f,
                "{who} is not a Teams approver: the approvers are the Entra object ids in {setting}"
            ),
            Self::NoForce => f.write_str("break glass (--force) is not offered in Teams unless [teams.commands.force] names approvers: use GitHub, Slack or the CLI"),
            Self::Unmapped(who) => write!(
                f,
                "the policy asks four eyes here, and {who} is not mapped to a GitHub login: add them to [users] (login = {{ teams = \"<Entra object id>\" }}), or approve from GitHub, Slack or the web pages"
            ),
            Self::OwnPullRequest(why) => f.write_str(why),
            Self::Decided(how) => write!(f, "this card was {how} already"),
            Self::Over(why) => f.write_str(why),
        }
    }
}

/// Teams' rules: the policy's `[teams]` approvers for the command (else
/// [teams] approvers), by Entra object id; break glass only by
/// `[teams.commands.force]`; four eyes by the `[users]` mapping to GitHub.
pub(super) struct TeamsAuthorizer<'a> {
    pub(super) state: &'a AppState,
    pub(super) authors: &'a PrAuthors,
    /// The sender's Entra object id, and how to name them.
    pub(super) aad_object_id: Option<&'a str>,
    pub(super) name: &'a str,
    /// A click on a card decided or over: refused once the person may act.
    pub(super) card: Option<TeamsDenied>,
}

impl TeamsAuthorizer<'_> {
    fn rule(&self, rule: Rule) -> Result<ChatRule, TeamsDenied> {
        let policy = &self.state.policy;
        match rule {
            Rule::Verb(verb) => Ok(policy.teams(verb)),
            Rule::Force => policy.teams_force().ok_or(TeamsDenied::NoForce),
            other => Ok(policy.teams_named(other)),
        }
    }

    /// The sender's Entra object id, when the rule lists it.
    fn approver(&self, rule: &ChatRule) -> Result<&str, TeamsDenied> {
        let not = || TeamsDenied::NotApprover(self.name.to_string(), rule.setting.clone());
        let me = self
            .aad_object_id
            .filter(|id| !id.is_empty())
            .ok_or_else(not)?;
        if rule.approvers.is_empty() {
            return Err(TeamsDenied::Nobody(rule.setting.clone()));
        }
        if !rule.approvers.iter().any(|a| a.eq_ignore_ascii_case(me)) {
            return Err(not());
        }
        Ok(me)
    }

    /// Four eyes on a PR's gates: asked by the Teams rule, or by GitHub's or
    /// Slack's for the same command (one person may not pass it by chat).
    fn asks_four_eyes(&self, rule: Rule, teams: &ChatRule) -> bool {
        let policy = &self.state.policy;
        teams.forbid_self_approval
            || match rule {
                Rule::Verb(verb) => {
                    policy.github(verb).forbid_self_approval
                        || policy.slack(verb).forbid_self_approval
                }
                _ => false,
            }
    }

    /// Why `me` may not act on a PR's gates under four eyes: unmapped, or
    /// the PR's author by the policy's `[users]`.
    async fn own_pull_request(
        &self,
        me: &str,
        scope: &Scope,
    ) -> Result<Option<TeamsDenied>, CommandError> {
        let Scope::Pr { repo, number } = scope else {
            return Ok(None);
        };
        let Some(login) = self.state.policy.github_login_of_teams(me) else {
            return Ok(Some(TeamsDenied::Unmapped(self.name.to_string())));
        };
        let now = self.state.engine.now();
        let opened = self.authors.opened_by(repo, *number, login, now).await?;
        Ok(opened.then(|| {
            TeamsDenied::OwnPullRequest(format!(
                "{} (@{login}) opened {repo}#{}: someone else must approve (four eyes)",
                self.name, number.0
            ))
        }))
    }

    async fn check(
        &self,
        rule: Rule,
        keys: &[GateKey],
    ) -> Result<Result<(), TeamsDenied>, CommandError> {
        let teams = match self.rule(rule) {
            Ok(teams) => teams,
            Err(denied) => return Ok(Err(denied)),
        };
        let me = match self.approver(&teams) {
            Ok(me) => me,
            Err(denied) => return Ok(Err(denied)),
        };
        // A command's gates share its scope.
        if let (true, Some(key)) = (self.asks_four_eyes(rule, &teams), keys.first()) {
            if let Some(denied) = self.own_pull_request(me, &key.scope).await? {
                return Ok(Err(denied));
            }
        }
        Ok(self.card.clone().map_or(Ok(()), Err))
    }
}

impl Authorizer for TeamsAuthorizer<'_> {
    type Denied = TeamsDenied;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, TeamsDenied> {
        Box::pin(self.check(rule, keys))
    }
}

/// Who a Teams person is when approvals are counted: their GitHub login by
/// the policy's `[users]`, so approving from GitHub, Slack and Teams counts
/// once; else their Entra object id.
pub(super) fn person_of(state: &AppState, activity: &Activity) -> String {
    let id = activity.from.aad_object_id.as_deref();
    if let Some(login) = id.and_then(|id| state.policy.github_login_of_teams(id)) {
        return login.to_string();
    }
    format!("teams:{}", id.unwrap_or(&activity.from.id))
}

/// How a person is named in the audit: their Teams name, else their id.
pub(super) fn name_of(activity: &Activity) -> &str {
    if activity.from.name.is_empty() {
        activity.from.id.as_str()
    } else {
        activity.from.name.as_str()
    }
}

/// The outbox's terms for a command not done.
pub(super) fn send_error(e: CommandError) -> SendError {
    e.into()
}
