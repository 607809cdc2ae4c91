//! Per pull request: its head commit, and the check run of each of its gates
//! (`pr_heads`, `check_runs`).

use sqlx::Row;

use super::prs::about_pr;
use super::rows::{id_in, signed};
use super::CheckRuns;
use super::Result;
use crate::gate::{GateKey, GateKind, Millis, PrNumber, RepoName};

/// A gate's check run as last sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRunRow {
    pub head_sha: String,
    /// 0: being created by the job `digest` names.
    pub run_id: u64,
    pub digest: Option<String>,
    /// When gatebot last created or edited it (or claimed its creation);
    /// `put_check_run` sets it, whatever this says.
    pub updated_at: Millis,
}

impl<'s> CheckRuns<'s> {
    /// The PR's head commit, if GitHub has told it.
    pub async fn pr_head(self, repo: &RepoName, number: PrNumber) -> Result<Option<String>> {
        let query = about_pr(
            "SELECT head_sha FROM pr_heads WHERE repo = $1 AND number = $2",
            repo,
            number,
        )?;
        self.store.first_value(query).await
    }

    /// Records the head pushed at `pushed_at` (GitHub's time). Deliveries come
    /// out of order, so only a later push replaces it; one statement.
    pub async fn remember_pr_head(
        self,
        repo: &RepoName,
        number: PrNumber,
        head_sha: &str,
        pushed_at: Millis,
    ) -> Result<()> {
        let query = about_pr(
            "INSERT INTO pr_heads (repo, number, head_sha, pushed_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (repo, number) DO UPDATE SET head_sha = excluded.head_sha, \
             pushed_at = excluded.pushed_at WHERE pr_heads.pushed_at < excluded.pushed_at",
            repo,
            number,
        )?
        .bind(head_sha.to_string())
        .bind(pushed_at);
        self.store.execute_alone(query).await
    }

    pub async fn check_run(
        self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
    ) -> Result<Option<CheckRunRow>> {
        let row = about_pr(
            "SELECT head_sha, run_id, digest, updated_at FROM check_runs WHERE repo = $1 AND number = $2 AND kind = $3",
            repo,
            number,
        )?
        .bind(kind.as_str())
        .fetch_optional(&self.store.pool)
        .await?;
        row.map(|row| {
            Ok(CheckRunRow {
                head_sha: row.try_get("head_sha")?,
                run_id: id_in(&row, "run_id", "check run id")?,
                digest: row.try_get("digest")?,
                updated_at: row.try_get("updated_at")?,
            })
        })
        .transpose()
    }

    /// Claims the creation of a gate's check run for outbox job `job`, as
    /// `claim_status_creation` does for the status comment: false when
    /// another job holds a claim younger than `stale_after`, or a run exists
    /// (none for a key of no pull request).
    pub async fn claim_check_run(
        self,
        key: &GateKey,
        head_sha: &str,
        job: &str,
        now: Millis,
        stale_after: Millis,
    ) -> Result<bool> {
        let Some((repo, number)) = key.pr() else {
            return Ok(false);
        };
        let mut tx = self.store.begin().await?;
        let row = about_pr(
            "INSERT INTO check_runs (repo, number, kind, head_sha, run_id, digest, updated_at) \
             VALUES ($1, $2, $3, $4, 0, $5, $6) ON CONFLICT (repo, number, kind) DO UPDATE \
             SET head_sha = excluded.head_sha, updated_at = excluded.updated_at, digest = excluded.digest \
             WHERE check_runs.run_id = 0 \
             AND (check_runs.digest = excluded.digest OR check_runs.updated_at < $7) \
             RETURNING run_id",
            repo,
            number,
        )?
        .bind(key.kind.as_str())
        .bind(head_sha.to_string())
        .bind(format!("creating:{job}"))
        .bind(now)
        .bind(now - stale_after)
        .fetch_optional(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(row.is_some())
    }

    /// Records what a gate's check run now shows.
    pub async fn put_check_run(
        self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        run: &CheckRunRow,
        now: Millis,
    ) -> Result<()> {
        let query = about_pr(
            "INSERT INTO check_runs (repo, number, kind, head_sha, run_id, digest, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (repo, number, kind) DO UPDATE SET \
             head_sha = excluded.head_sha, run_id = excluded.run_id, digest = excluded.digest, \
             updated_at = excluded.updated_at",
            repo,
            number,
        )?
        .bind(kind.as_str())
        .bind(run.head_sha.clone())
        .bind(signed(run.run_id, "check run id")?)
        .bind(run.digest.clone())
        .bind(now);
        self.store.execute_alone(query).await
    }

    /// Forgets a gate's check run `run_id` (0: a claim to create it), unless
    /// another has replaced it meanwhile.
    pub async fn forget_check_run(
        self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        run_id: u64,
    ) -> Result<()> {
        let query = about_pr(
            "DELETE FROM check_runs WHERE repo = $1 AND number = $2 AND kind = $3 AND run_id = $4",
            repo,
            number,
        )?
        .bind(kind.as_str())
        .bind(signed(run_id, "check run id")?);
        self.store.execute_alone(query).await
    }
}
