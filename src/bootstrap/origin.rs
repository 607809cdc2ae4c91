//! What bootstrap builds from the cluster (`kubernetes`): where a canary's
//! revision came from (its commit from the cluster, then the pull request that
//! brought that commit from GitHub), composed here because the core knows
//! neither and the channels never use each other; and the Secret the GitHub
//! App set-up page writes into.

use std::sync::Arc;

use crate::core::origin::{CanaryOrigin, Found, OriginError};
use crate::gate::{CanaryRef, PrNumber, RepoName};
use crate::github::client::{pull_of_commit, GithubClient};
use crate::kubernetes::Cluster;
use crate::notify::BoxFuture;

pub(super) struct ClusterOrigin {
    pub(super) cluster: Cluster,
    pub(super) github: Arc<GithubClient>,
    /// GATEBOT_GITHUB_REPOSITORY: the repository when no annotation names one.
    pub(super) default_repo: Option<RepoName>,
    /// The annotation that would have named it, for the error.
    pub(super) repository_annotation: String,
    /// GATEBOT_GITHUB_ALLOWED_REPOSITORIES: an annotation may name only these (empty: any).
    pub(super) allowed: Vec<RepoName>,
}

impl CanaryOrigin for ClusterOrigin {
    fn find<'a>(
        &'a self,
        canary: &'a CanaryRef,
        known: Option<&'a Found>,
    ) -> BoxFuture<'a, Result<Found, OriginError>> {
        Box::pin(async move {
            let revision = self
                .cluster
                .revision(canary)
                .await
                .map_err(|e| OriginError {
                    why: e.why,
                    missing: e.missing,
                })?;
            let repo = match &revision.repository {
                Some(named) => named.parse::<RepoName>().map_err(|e| {
                    OriginError::new(format!("{}: {e}", self.repository_annotation))
                })?,
                None => self.default_repo.clone().ok_or_else(|| {
                    OriginError::new(format!(
                        "no repository: annotate the Canary with {} or set GATEBOT_GITHUB_REPOSITORY",
                        self.repository_annotation
                    ))
                })?,
            };
            if !(self.allowed.is_empty() || self.allowed.contains(&repo)) {
                return Err(OriginError::new(format!(
                    "{repo} is not in GATEBOT_GITHUB_ALLOWED_REPOSITORIES"
                )));
            }
            // The same commit of the same repository: GitHub said already.
            if let Some(known) = known.filter(|k| {
                k.commit == revision.commit && k.pr.as_ref().is_none_or(|(r, _)| *r == repo)
            }) {
                return Ok(known.clone());
            }
            let pulls = self
                .github
                .pulls_of_commit(&repo, &revision.commit)
                .await
                .map_err(|e| {
                    OriginError::new(format!("GitHub, commit {} of {repo}: {e}", revision.commit))
                })?;
            Ok(Found {
                pr: pull_of_commit(&pulls, &revision.commit).map(|n| (repo, PrNumber(n))),
                commit: revision.commit,
            })
        })
    }
}

/// The lookups of canaries' PRs, when `[kubernetes] lookup` is on.
pub(super) async fn origins(
    config: &crate::config::Config,
    github: Option<Arc<GithubClient>>,
    lookups: crate::core::origin::Lookups,
) -> anyhow::Result<Option<Arc<crate::core::origin::Origins>>> {
    let settings = &config.kubernetes;
    if !settings.lookup {
        return Ok(None);
    }
    // `Config::problems` refuses the lookup without GitHub credentials.
    let Some(github) = github else {
        return Ok(None);
    };
    let finder = ClusterOrigin {
        cluster: Cluster::connect(settings).await?,
        github,
        default_repo: config.github.repository.clone(),
        repository_annotation: settings.repository_annotation.clone(),
        allowed: config.github.allowed_repositories.clone(),
    };
    Ok(Some(Arc::new(crate::core::origin::Origins::new(
        Arc::new(finder),
        config.limits.kubernetes_lookup_backoff,
        lookups,
    ))))
}

/// The Secret the GitHub App set-up page writes into, when one is named.
pub(super) async fn app_secret(
    config: &crate::config::Config,
) -> anyhow::Result<Option<crate::web::setup::AppSecret>> {
    let Some(name) = config
        .kubernetes
        .app_secret
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    Ok(Some(crate::web::setup::AppSecret {
        cluster: Cluster::connect(&config.kubernetes).await?,
        name: name.to_string(),
    }))
}
