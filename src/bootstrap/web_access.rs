//! Who may act from the web pages: a GitHub login, judged by GitHub's rules
//! for a PR comment (the policy's permission, teams, four eyes). Built here
//! because the web channel may not use the GitHub channel itself.

use std::sync::Arc;

use crate::clock::SharedClock;
use crate::core::authors::PrAuthors;
use crate::core::dispatch::{Authorizer, Rule};
use crate::core::CommandError;
use crate::core::Records;
use crate::gate::{GateKey, RepoName};
use crate::github::access::{Access, CommentAuthorizer, Stale};
use crate::github::client::GithubClient;
use crate::notify::BoxFuture;
use crate::policy::Policy;

pub struct GithubAuthority {
    access: Access,
    authors: PrAuthors,
    records: Records,
    clock: SharedClock,
    default_repo: Option<RepoName>,
}

impl GithubAuthority {
    pub fn new(
        client: Arc<GithubClient>,
        policy: Policy,
        records: Records,
        clock: SharedClock,
        default_repo: Option<RepoName>,
    ) -> Self {
        Self {
            authors: PrAuthors::new(
                records.clone(),
                Some(client.clone() as Arc<dyn crate::core::authors::AuthorLookup>),
            ),
            access: Access::new(client, policy),
            records,
            clock,
            default_repo,
        }
    }
}

impl crate::web::Authority for GithubAuthority {
    fn authorize<'a>(
        &'a self,
        login: &'a str,
        rule: Rule,
        keys: &'a [GateKey],
    ) -> BoxFuture<'a, Result<Result<(), String>, CommandError>> {
        Box::pin(async move {
            // A command's gates share one scope.
            let Some(key) = keys.first() else {
                return Ok(Ok(()));
            };
            let pr = match key.pr() {
                Some((repo, n)) => Some((repo.clone(), n)),
                None => self.records.named_gate(key).await?.and_then(|g| g.spec.pr),
            };
            let (repo, author) = match pr {
                Some((repo, n)) => {
                    let author = self
                        .authors
                        .author(&repo, n, self.clock.now_ms())
                        .await?
                        .unwrap_or_default();
                    (repo, author)
                }
                None => match &self.default_repo {
                    Some(repo) => (repo.clone(), String::new()),
                    None => return Ok(Err(
                        "this gate belongs to no repository, so there is no GitHub permission to check: use Slack, the CLI or the admin token".to_string(),
                    )),
                },
            };
            // The page shows the gate as it is now: nothing is stale.
            let stale = Stale {
                closed_unmerged: false,
                pushed: None,
            };
            CommentAuthorizer {
                access: &self.access,
                repo: &repo,
                user: login,
                pr_author: &author,
                stale: &stale,
            }
            .authorize(rule, keys)
            .await
        })
    }
}
