//! Who opened each pull request, so that four eyes hold across GitHub and
//! Slack: learned from every delivery that names the PR, asked of GitHub's API
//! when gatebot has not seen one.

use std::sync::Arc;

use super::CommandError;
use super::Records;
use crate::gate::{Millis, PrNumber, RepoName};
use crate::notify::BoxFuture;
use crate::store::StoreError;

/// Asks the forge who opened a pull request (GitHub's `GET /pulls/{n}`).
pub trait AuthorLookup: Send + Sync {
    /// The author's login; None when the PR does not exist or names nobody.
    fn author<'a>(
        &'a self,
        repo: &'a RepoName,
        number: PrNumber,
    ) -> BoxFuture<'a, Result<Option<String>, CommandError>>;
}

/// Records the author seen in a delivery.
pub async fn remember(
    records: &Records,
    repo: &RepoName,
    number: PrNumber,
    login: &str,
    at: Millis,
) -> Result<(), StoreError> {
    if !is_new(records, repo, number, login).await? {
        return Ok(());
    }
    records.remember_pr_author(repo, number, login, at).await
}

/// Whether `login` is worth writing as the PR's author: named, and not known
/// already (authors never change, so a known one needs no write).
pub async fn is_new(
    records: &Records,
    repo: &RepoName,
    number: PrNumber,
    login: &str,
) -> Result<bool, StoreError> {
    Ok(!login.is_empty() && records.pr_author(repo, number).await?.as_deref() != Some(login))
}

#[derive(Clone)]
pub struct PrAuthors {
    records: Records,
    /// None without GitHub credentials: then only authors seen in deliveries are known.
    lookup: Option<Arc<dyn AuthorLookup>>,
}

impl PrAuthors {
    pub fn new(records: Records, lookup: Option<Arc<dyn AuthorLookup>>) -> Self {
        Self { records, lookup }
    }

    /// The PR's author's login, or None when it cannot be known.
    pub async fn author(
        &self,
        repo: &RepoName,
        number: PrNumber,
        now: Millis,
    ) -> Result<Option<String>, CommandError> {
        if let Some(login) = self.records.pr_author(repo, number).await? {
            return Ok(Some(login));
        }
        let Some(lookup) = &self.lookup else {
            return Ok(None);
        };
        let login = lookup.author(repo, number).await?;
        if let Some(login) = &login {
            remember(&self.records, repo, number, login, now).await?;
        }
        Ok(login)
    }

    /// Whether `login` opened the PR (false when its author cannot be known).
    pub async fn opened_by(
        &self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
        now: Millis,
    ) -> Result<bool, CommandError> {
        let author = self.author(repo, number, now).await?;
        Ok(author.is_some_and(|a| a.eq_ignore_ascii_case(login)))
    }
}
