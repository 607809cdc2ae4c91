//! Who may run a command from a PR comment: the policy's permission, teams
//! and four eyes, asked of GitHub (answers trusted for a minute), and whether
//! the comment is still about the PR's current revision.

use std::sync::Arc;
use std::time::Duration;

use super::client::GithubClient;
use crate::cache::TtlCache;
use crate::command::Verb;
use crate::config::Permission;
use crate::core::dispatch::{Answer, Authorizer, Rule};
use crate::core::CommandError;
use crate::gate::state::rfc3339;
use crate::gate::{GateKey, GateKind, Millis, RepoName};
use crate::policy::Policy;

/// How long a permission or team answer is trusted.
const CACHE_TTL: Duration = Duration::from_secs(60);

/// (repository or team, login) → the answer.
type Cache<T> = TtlCache<(String, String), T>;

pub struct Access {
    client: Arc<GithubClient>,
    policy: Policy,
    permissions: Cache<Option<Permission>>,
    teams: Cache<bool>,
}

impl Access {
    pub fn new(client: Arc<GithubClient>, policy: Policy) -> Self {
        Self {
            client,
            policy,
            permissions: TtlCache::new(CACHE_TTL),
            teams: TtlCache::new(CACHE_TTL),
        }
    }

    async fn permission(
        &self,
        repo: &RepoName,
        user: &str,
    ) -> Result<Option<Permission>, CommandError> {
        let key = (repo.to_string(), user.to_ascii_lowercase());
        self.permissions
            .get_or_fetch(key, || async {
                self.client
                    .permission(repo, user)
                    .await
                    .map_err(|e| super::unanswered(e.to_send_error()))
            })
            .await
    }

    async fn in_team(&self, repo: &RepoName, team: &str, user: &str) -> Result<bool, CommandError> {
        let Some((org, slug)) = team.trim().trim_start_matches('@').split_once('/') else {
            return Ok(false);
        };
        let key = (team.to_ascii_lowercase(), user.to_ascii_lowercase());
        self.teams
            .get_or_fetch(key, || async {
                self.client
                    .team_member(Some(repo), org, slug, user)
                    .await
                    .map_err(|e| super::unanswered(e.to_send_error()))
            })
            .await
    }

    /// Ok(Err(why)) when the person may not run the command.
    async fn authorize(
        &self,
        command: Verb,
        repo: &RepoName,
        user: &str,
        pr_author: &str,
    ) -> Result<Result<(), String>, CommandError> {
        let rule = self.policy.github(command);
        self.authorize_rule(command.as_str(), rule, repo, user, pr_author)
            .await
    }

    /// `/freeze` and `/unfreeze`: the policy's `github.commands.<name>` rule.
    pub async fn authorize_named(
        &self,
        named: Rule,
        repo: &RepoName,
        user: &str,
    ) -> Result<Result<(), String>, CommandError> {
        let rule = self.policy.github_named(named);
        self.authorize_rule(named.name(), rule, repo, user, "")
            .await
    }

    /// Break glass: the policy's `[github.commands.force]`, which must exist.
    pub async fn authorize_force(
        &self,
        repo: &RepoName,
        user: &str,
        pr_author: &str,
    ) -> Result<Result<(), String>, CommandError> {
        let Some(rule) = self.policy.github_force() else {
            return Ok(Err(
                "break glass is not set up: the policy names who may force with [github.commands.force]".into(),
            ));
        };
        self.authorize_rule("promote --force", rule, repo, user, pr_author)
            .await
    }

    async fn authorize_rule(
        &self,
        command: &str,
        rule: crate::policy::GithubRule,
        repo: &RepoName,
        user: &str,
        pr_author: &str,
    ) -> Result<Result<(), String>, CommandError> {
        if rule.forbid_self_approval && user.eq_ignore_ascii_case(pr_author) {
            return Ok(Err(format!(
                "you opened this pull request, so someone else must run `/{command}` (four eyes)"
            )));
        }
        let has = self.permission(repo, user).await?;
        if has < Some(rule.min_permission) {
            let name = permission_name(rule.min_permission);
            return Ok(Err(format!(
                "`/{command}` needs {name} permission on {repo} and you have {}: ask someone with {name} access to run it, or to give you that access",
                has.map_or("none", permission_name)
            )));
        }
        if !rule.teams.is_empty() {
            for team in &rule.teams {
                if self.in_team(repo, team, user).await? {
                    return Ok(Ok(()));
                }
            }
            let teams: Vec<String> = rule.teams.iter().map(|t| format!("@{t}")).collect();
            return Ok(Err(format!(
                "`/{command}` needs membership in {}: ask a member to run it",
                teams.join(" or ")
            )));
        }
        Ok(Ok(()))
    }
}

/// Why a comment's opening commands may be out of date.
pub struct Stale {
    pub closed_unmerged: bool,
    /// The PR's last push, when the comment was written before it, and the
    /// gate kinds a push closes ([github] close_on_push; checked at start).
    pub pushed: Option<(Millis, Vec<GateKind>)>,
}

/// Who may run a command from this comment: the PR is open (or merged), the
/// comment is newer than the last push, and the person has the permission,
/// team and four eyes the policy asks for.
pub struct CommentAuthorizer<'a> {
    pub access: &'a Access,
    pub repo: &'a RepoName,
    pub user: &'a str,
    pub pr_author: &'a str,
    pub stale: &'a Stale,
}

impl CommentAuthorizer<'_> {
    /// Why a comment's command is about what came before, if it is.
    fn stale(&self, rule: Rule, keys: &[GateKey]) -> Option<String> {
        if self.stale.closed_unmerged {
            return Some("this pull request was closed without merging, so its gates no longer take commands: reopen it first".to_string());
        }
        let (at, kinds) = self.stale.pushed.as_ref()?;
        let opened = match rule {
            Rule::Verb(verb) => verb.kind_opened(),
            Rule::Force => keys.first().map(|k| k.kind),
            _ => None,
        };
        opened.is_some_and(|k| kinds.contains(&k)).then(|| {
            format!(
                "written before the push at {}, so it was about an earlier revision: comment again",
                rfc3339(*at)
            )
        })
    }
}

impl Authorizer for CommentAuthorizer<'_> {
    type Denied = String;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, String> {
        Box::pin(async move {
            let access = self.access;
            let (repo, user) = (self.repo, self.user);
            match rule {
                Rule::Freeze | Rule::Unfreeze => {
                    return access.authorize_named(rule, repo, user).await
                }
                Rule::Close => {
                    return Ok(Err("a comment does not close gates: use `/hold`".into()))
                }
                Rule::Named => {
                    return Ok(Err(
                        "a comment does not create or retire named gates: a pipeline does, with its token".into(),
                    ))
                }
                Rule::Force | Rule::Verb(_) => {}
            }
            if let Some(why) = self.stale(rule, keys) {
                return Ok(Err(why));
            }
            let answer = match rule {
                Rule::Verb(verb) => access.authorize(verb, repo, user, self.pr_author).await,
                _ => access.authorize_force(repo, user, self.pr_author).await,
            };
            refused_when_unanswerable(answer, repo)
        })
    }
}

/// A question GitHub will never answer (a plain 403 for the permission:
/// gatebot's token may not read the repository's collaborators) refuses the
/// command and says why, rather than dropping the comment unanswered; one it
/// may answer later is asked again. GitHub's own words go to the log only.
fn refused_when_unanswerable(
    answer: Result<Result<(), String>, CommandError>,
    repo: &RepoName,
) -> Result<Result<(), String>, CommandError> {
    match answer {
        Err(CommandError::Unanswered {
            message,
            lasting: true,
            ..
        }) => {
            tracing::warn!(%repo, error = %message, "GitHub refused to say who may run a command");
            Ok(Err(format!(
                "GitHub would not tell gatebot who may act on {repo}: its token may lack access to the repository's collaborators or teams (an admin can see why in gatebot's log)"
            )))
        }
        other => other,
    }
}

fn permission_name(p: Permission) -> &'static str {
    match p {
        Permission::Read => "read",
        Permission::Triage => "triage",
        Permission::Write => "write",
        Permission::Maintain => "maintain",
        Permission::Admin => "admin",
    }
}
