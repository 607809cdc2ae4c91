//! Who is in the groups quorum rules name (`[[approvals]] include`): a GitHub
//! team asked of GitHub for the person's login, a Slack user group asked of
//! Slack for their Slack user, a `[groups]` list read from the policy.
//! Composed here because the core knows neither service and the channels
//! never use each other.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;

use crate::cache::TtlCache;
use crate::config::Config;
use crate::core::members::Membership;
use crate::core::{CommandError, Provenance};
use crate::gate::{Group, GroupKind};
use crate::github::client::GithubClient;
use crate::metrics::Metrics;
use crate::notify::BoxFuture;
use crate::policy::Policy;
use crate::slack::approvers::Approvers;

/// How long a GitHub team's answer is trusted, as for command rules.
const TEAM_TTL: Duration = Duration::from_secs(60);

pub(super) struct Members {
    policy: Policy,
    github: Option<Arc<GithubClient>>,
    slack: Option<Arc<Approvers>>,
    /// (team, login) → member.
    teams: TtlCache<(String, String), bool>,
}

impl Members {
    /// Refuses to start when a rule names a group of a service that is not
    /// set up: its members could never be known.
    pub(super) fn new(
        config: &Config,
        metrics: &Metrics,
        policy: &Policy,
        github: Option<Arc<GithubClient>>,
    ) -> anyhow::Result<Self> {
        let groups = || policy.quorum().iter().flat_map(|r| &r.include);
        let slack = if groups().any(|i| i.group.kind() == GroupKind::SlackGroup) {
            crate::slack::group_members(config, metrics)?
        } else {
            None
        };
        for inc in groups() {
            match inc.group.kind() {
                GroupKind::GithubTeam if github.is_none() => bail!(
                    "[[approvals]] include names the GitHub team {}, but GitHub is not set up (GATEBOT_GITHUB_TOKEN or the App's settings)",
                    inc.group
                ),
                GroupKind::SlackGroup if slack.is_none() => bail!(
                    "[[approvals]] include names the Slack user group {}, but Slack is not set up (GATEBOT_SLACK_BOT_TOKEN)",
                    inc.group
                ),
                _ => {}
            }
        }
        Ok(Self {
            policy: policy.clone(),
            github,
            slack,
            teams: TtlCache::new(TEAM_TTL),
        })
    }

    async fn in_team(&self, team: &Group, login: String) -> Result<bool, CommandError> {
        let (Some(github), Some((org, slug))) = (&self.github, team.as_str().split_once('/'))
        else {
            return Ok(false);
        };
        self.teams
            .get_or_fetch((team.to_string(), login.clone()), || async {
                github
                    .team_member(None, org, slug, &login)
                    .await
                    .map_err(|e| crate::github::unanswered(e.to_send_error()))
            })
            .await
    }

    async fn in_slack_group(&self, group: &Group, who: &Provenance) -> Result<bool, CommandError> {
        let user = match who.slack_user() {
            Some(id) => Some(id.to_string()),
            None => who
                .login()
                .and_then(|l| self.policy.slack_user_of(&l).map(str::to_string)),
        };
        let (Some(slack), Some(user)) = (&self.slack, user) else {
            return Ok(false);
        };
        slack
            .is_member(group.as_str(), &user)
            .await
            .map_err(crate::github::unanswered)
    }
}

impl Membership for Members {
    fn is_member<'a>(
        &'a self,
        group: &'a Group,
        who: &'a Provenance,
    ) -> BoxFuture<'a, Result<bool, CommandError>> {
        Box::pin(async move {
            match group.kind() {
                GroupKind::GithubTeam => match who.login() {
                    Some(login) => self.in_team(group, login).await,
                    None => Ok(false),
                },
                GroupKind::SlackGroup => self.in_slack_group(group, who).await,
                GroupKind::Listed => Ok(who
                    .login()
                    .is_some_and(|l| self.policy.listed_in(group.as_str(), &l))),
            }
        })
    }
}
