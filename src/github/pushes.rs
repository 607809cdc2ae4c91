//! When each pull request last got new commits, by GitHub's clock: a command
//! written before that was about an earlier revision, even when the push found
//! its gates closed already and so changed none of them.

use crate::gate::{Millis, PrNumber, RepoName};
use crate::store::{Store, StoreError};

fn key(repo: &RepoName, number: PrNumber) -> String {
    format!("pr-pushed:{repo}#{}", number.0)
}

/// The last push GitHub told of, if any.
pub async fn last(
    store: &Store,
    repo: &RepoName,
    number: PrNumber,
) -> Result<Option<Millis>, StoreError> {
    Ok(store
        .kv_get(&key(repo, number))
        .await?
        .and_then(|v| v.parse().ok()))
}

/// Records a push at `pushed_at` (GitHub's time); deliveries may come out of order.
pub async fn remember(
    store: &Store,
    repo: &RepoName,
    number: PrNumber,
    pushed_at: Millis,
    now: Millis,
) -> Result<(), StoreError> {
    if last(store, repo, number).await? >= Some(pushed_at) {
        return Ok(());
    }
    store
        .kv_put(&key(repo, number), &pushed_at.to_string(), now)
        .await
}
