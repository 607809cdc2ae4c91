//! What the notification sinks ask of the store beyond jobs: pull requests
//! GitHub says do not exist, and the waits a digest covers.

use sqlx::Row;

use super::Notices;
use super::Result;
use crate::gate::{Millis, PrNumber, RepoName};

/// A wait as a digest names it.
#[derive(Debug, Clone)]
pub struct WaitBrief {
    pub id: i64,
    pub gate: String,
    pub canary: String,
    /// JSON object of the canary's webhook metadata.
    pub metadata: String,
}

impl<'s> Notices<'s> {
    /// Whether GitHub answered 404 for this PR after `since`.
    pub async fn pr_missing(
        self,
        repo: &RepoName,
        number: PrNumber,
        since: Millis,
    ) -> Result<bool> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM missing_prs WHERE repo = $1 AND number = $2 AND marked_at > $3",
        )
        .bind(repo.to_string())
        .bind(number.0 as i64)
        .bind(since)
        .fetch_one(&self.store.pool)
        .await?;
        Ok(row.try_get::<i64, _>("n")? > 0)
    }

    /// Remembers that GitHub answered 404 for this PR.
    pub async fn mark_pr_missing(
        self,
        repo: &RepoName,
        number: PrNumber,
        now: Millis,
    ) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO missing_prs (repo, number, marked_at) VALUES ($1, $2, $3) \
             ON CONFLICT (repo, number) DO UPDATE SET marked_at = excluded.marked_at",
        )
        .bind(repo.to_string())
        .bind(number.0 as i64)
        .bind(now);
        self.store.execute_alone(query).await
    }

    /// Forgets a PR's 404: it was seen to exist after all.
    pub async fn forget_pr_missing(self, repo: &RepoName, number: PrNumber) -> Result<()> {
        let query = sqlx::query("DELETE FROM missing_prs WHERE repo = $1 AND number = $2")
            .bind(repo.to_string())
            .bind(number.0 as i64);
        self.store.execute_alone(query).await
    }

    /// Waits started in [since, until), after id `after`, for which no job with
    /// once-key `once_prefix` + id was queued: the ones not announced one by one.
    pub async fn unannounced_waits(
        self,
        once_prefix: &str,
        since: Millis,
        until: Millis,
        after: i64,
        limit: i64,
    ) -> Result<Vec<WaitBrief>> {
        let rows = sqlx::query(
            "SELECT w.id, w.gate_key, w.canary, w.metadata FROM waits w \
             WHERE w.started_at >= $1 AND w.started_at < $2 AND w.id > $3 \
             AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.once_key = $4 || CAST(w.id AS TEXT)) \
             ORDER BY w.id LIMIT $5",
        )
        .bind(since)
        .bind(until)
        .bind(after)
        .bind(once_prefix.to_string())
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(WaitBrief {
                    id: r.try_get("id")?,
                    gate: r.try_get("gate_key")?,
                    canary: r.try_get("canary")?,
                    metadata: r.try_get("metadata")?,
                })
            })
            .collect()
    }
}
