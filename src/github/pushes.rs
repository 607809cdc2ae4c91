//! When each pull request last got new commits, by GitHub's clock: a command
//! written before that was about an earlier revision, even when the push found
//! its gates closed already and so changed none of them.

use super::client::GithubClient;
use crate::core::Records;
use crate::gate::{Millis, PrNumber, RepoName};
use crate::notify::SendError;
use crate::store::StoreError;

/// The last push GitHub told of, if any.
pub async fn last(
    records: &Records,
    repo: &RepoName,
    number: PrNumber,
) -> Result<Option<Millis>, StoreError> {
    records.pr_pushed_at(repo, number).await
}

/// Records a push at `pushed_at` (GitHub's time); deliveries may come out of order.
pub async fn remember(
    records: &Records,
    repo: &RepoName,
    number: PrNumber,
    pushed_at: Millis,
    now: Millis,
) -> Result<(), StoreError> {
    // One upsert that only moves the time forward: no read, so concurrent
    // deliveries cannot undo each other.
    records.remember_pr_push(repo, number, pushed_at, now).await
}

/// The PR's head commit: as the last push told it, else asked of GitHub once
/// and kept at time 0, so that any push GitHub tells of replaces it.
pub(super) async fn head(
    records: &Records,
    client: &GithubClient,
    repo: &RepoName,
    number: PrNumber,
) -> Result<String, SendError> {
    let unavailable = |e: StoreError| SendError::retry(e.to_string());
    if let Some(sha) = records.pr_head(repo, number).await.map_err(unavailable)? {
        return Ok(sha);
    }
    let pull = client
        .pull(repo, number)
        .await
        .map_err(|e| e.to_send_error())?;
    let Some(sha) = pull.head.map(|h| h.sha).filter(|s| !s.is_empty()) else {
        return Err(SendError::Permanent(format!(
            "GitHub told no head commit of {repo}#{number}"
        )));
    };
    records
        .remember_pr_head(repo, number, &sha, 0)
        .await
        .map_err(unavailable)?;
    Ok(sha)
}
