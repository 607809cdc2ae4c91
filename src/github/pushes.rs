//! When each pull request last got new commits, by GitHub's clock: a command
//! written before that was about an earlier revision, even when the push found
//! its gates closed already and so changed none of them.

use crate::core::Records;
use crate::gate::{Millis, PrNumber, RepoName};
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
