//! What gatebot knows about each pull request beyond its gates: who opened it,
//! when it last got new commits, and its status comment.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, Row};

use super::rows::{id_in, signed};
use super::Prs;
use super::{Result, WriteTx};
use crate::gate::{Millis, PrNumber, RepoName};

/// A pull request's status comment as last sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusComment {
    pub comment_id: u64,
    /// SHA-256 of the body it shows; None when not known (then it is edited anyway).
    pub digest: Option<String>,
}

/// A statement whose `$1` and `$2` are a pull request's repository and number.
pub(super) fn about_pr<'q>(
    sql: &'q str,
    repo: &RepoName,
    number: PrNumber,
) -> Result<Query<'q, Any, AnyArguments<'q>>> {
    Ok(sqlx::query(sql)
        .bind(repo.to_string())
        .bind(signed(number.0, "PR number")?))
}

impl<'s> Prs<'s> {
    // ---- authors ----

    /// Who opened the pull request, if gatebot has learned it.
    pub async fn pr_author(self, repo: &RepoName, number: PrNumber) -> Result<Option<String>> {
        let query = about_pr(
            "SELECT login FROM pr_authors WHERE repo = $1 AND number = $2",
            repo,
            number,
        )?;
        self.store.first_value(query).await
    }

    pub async fn put_pr_author(
        tx: &mut WriteTx<'_>,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
        at: Millis,
    ) -> Result<()> {
        about_pr(
            "INSERT INTO pr_authors (repo, number, login, learned_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (repo, number) DO UPDATE SET login = excluded.login, learned_at = excluded.learned_at \
             WHERE pr_authors.login <> excluded.login",
            repo,
            number,
        )?
        .bind(login.to_string())
        .bind(at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// `put_pr_author` in a transaction of its own.
    pub async fn remember_pr_author(
        self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
        at: Millis,
    ) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_pr_author(&mut tx, repo, number, login, at).await?;
        tx.commit().await
    }

    // ---- pushes ----

    /// When the pull request last got new commits (GitHub's time), if known.
    pub async fn pr_pushed_at(self, repo: &RepoName, number: PrNumber) -> Result<Option<Millis>> {
        let query = about_pr(
            "SELECT pushed_at FROM pr_pushes WHERE repo = $1 AND number = $2",
            repo,
            number,
        )?;
        self.store.first_value(query).await
    }

    /// Records a push at `pushed_at`. Deliveries come out of order, so the time
    /// only moves forward; one statement, so concurrent writers cannot undo that.
    pub async fn put_pr_push(
        tx: &mut WriteTx<'_>,
        repo: &RepoName,
        number: PrNumber,
        pushed_at: Millis,
        now: Millis,
    ) -> Result<()> {
        about_pr(
            "INSERT INTO pr_pushes (repo, number, pushed_at, recorded_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (repo, number) DO UPDATE SET pushed_at = excluded.pushed_at, \
             recorded_at = excluded.recorded_at WHERE pr_pushes.pushed_at < excluded.pushed_at",
            repo,
            number,
        )?
        .bind(pushed_at)
        .bind(now)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// `put_pr_push` in a transaction of its own.
    pub async fn remember_pr_push(
        self,
        repo: &RepoName,
        number: PrNumber,
        pushed_at: Millis,
        now: Millis,
    ) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_pr_push(&mut tx, repo, number, pushed_at, now).await?;
        tx.commit().await
    }

    // ---- status comments ----

    pub async fn status_comment(
        self,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<Option<StatusComment>> {
        let row = about_pr(
            "SELECT comment_id, digest FROM status_comments WHERE repo = $1 AND number = $2",
            repo,
            number,
        )?
        .fetch_optional(&self.store.pool)
        .await?;
        row.map(|row| {
            Ok(StatusComment {
                comment_id: id_in(&row, "comment_id", "status comment id")?,
                digest: row.try_get("digest")?,
            })
        })
        .transpose()
    }

    pub async fn put_status_comment(
        tx: &mut WriteTx<'_>,
        repo: &RepoName,
        number: PrNumber,
        comment: &StatusComment,
        at: Millis,
    ) -> Result<()> {
        about_pr(
            "INSERT INTO status_comments (repo, number, comment_id, digest, updated_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (repo, number) DO UPDATE SET \
             comment_id = excluded.comment_id, digest = excluded.digest, updated_at = excluded.updated_at",
            repo,
            number,
        )?
        .bind(signed(comment.comment_id, "comment id")?)
        .bind(comment.digest.clone())
        .bind(at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// Claims the creation of a PR's status comment for outbox job `job`, so
    /// that two replicas sending its first version do not both create one: a
    /// row with comment id 0 stands for "being created", its digest naming the
    /// job. False when another job holds the claim (taken less than
    /// `stale_after` ago) or the comment exists. The same job, retried or taken
    /// over from a dead replica, gets its claim back at once.
    pub async fn claim_status_creation(
        self,
        repo: &RepoName,
        number: PrNumber,
        job: &str,
        now: Millis,
        stale_after: Millis,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        let owner = format!("creating:{job}");
        let row = about_pr(
            "INSERT INTO status_comments (repo, number, comment_id, digest, updated_at) \
             VALUES ($1, $2, 0, $3, $4) ON CONFLICT (repo, number) DO UPDATE \
             SET updated_at = excluded.updated_at, digest = excluded.digest \
             WHERE status_comments.comment_id = 0 \
             AND (status_comments.digest = excluded.digest OR status_comments.updated_at < $5) \
             RETURNING comment_id",
            repo,
            number,
        )?
        .bind(owner)
        .bind(now)
        .bind(now - stale_after)
        .fetch_optional(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(row.is_some())
    }

    /// Gives a claim to create back (creating failed).
    pub async fn release_status_creation(self, repo: &RepoName, number: PrNumber) -> Result<()> {
        let query = about_pr(
            "DELETE FROM status_comments WHERE repo = $1 AND number = $2 AND comment_id = 0",
            repo,
            number,
        )?;
        self.store.execute_alone(query).await
    }

    /// `put_status_comment` in a transaction of its own.
    pub async fn remember_status_comment(
        self,
        repo: &RepoName,
        number: PrNumber,
        comment: &StatusComment,
        at: Millis,
    ) -> Result<()> {
        let mut tx = self.store.begin().await?;
        Self::put_status_comment(&mut tx, repo, number, comment, at).await?;
        tx.commit().await
    }
}
