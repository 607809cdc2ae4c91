//! Canaries tied to the pull request that brought their revision (found in
//! the cluster and on GitHub, `core::origin`): the latest revision's row per
//! canary, kept so that a restart or another replica need not ask again.

use sqlx::Row;

use super::Origins;
use super::{Result, StoreError};
use crate::gate::{CanaryRef, Millis, PrNumber, RepoName};

/// A canary's revision and the PR that brought it (None: no PR did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryTie {
    pub canary: CanaryRef,
    pub checksum: String,
    pub commit: String,
    pub pr: Option<(RepoName, PrNumber)>,
    pub found_at: Millis,
}

const COLUMNS: &str = "canary, checksum, commit_sha, repo, number, found_at";

fn tie(row: &sqlx::any::AnyRow) -> Result<CanaryTie> {
    let corrupt = |what: &str, e: String| StoreError::Corrupt(format!("canary_ties.{what}: {e}"));
    let canary: String = row.try_get("canary")?;
    let repo: Option<String> = row.try_get("repo")?;
    let number: Option<i64> = row.try_get("number")?;
    let pr = match (repo, number) {
        (Some(repo), Some(number)) => Some((
            repo.parse()
                .map_err(|e: crate::gate::KeyError| corrupt("repo", e.to_string()))?,
            PrNumber(u64::try_from(number).map_err(|e| corrupt("number", e.to_string()))?),
        )),
        _ => None,
    };
    Ok(CanaryTie {
        canary: canary
            .parse()
            .map_err(|e: crate::gate::KeyError| corrupt("canary", e.to_string()))?,
        checksum: row.try_get("checksum")?,
        commit: row.try_get("commit_sha")?,
        pr,
        found_at: row.try_get("found_at")?,
    })
}

impl<'s> Origins<'s> {
    /// The tie of `canary` at `checksum`, if one was found.
    pub async fn canary_tie(self, canary: &CanaryRef, checksum: &str) -> Result<Option<CanaryTie>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM canary_ties WHERE canary = $1 AND checksum = $2"
        ))
        .bind(canary.to_string())
        .bind(checksum.to_string())
        .fetch_optional(&self.store.pool)
        .await?;
        row.as_ref().map(tie).transpose()
    }

    /// Every canary's latest tie (retention bounds them).
    pub async fn canary_ties(self) -> Result<Vec<CanaryTie>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM canary_ties t WHERE found_at = \
             (SELECT MAX(found_at) FROM canary_ties l WHERE l.canary = t.canary) \
             ORDER BY found_at DESC"
        ))
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(tie).collect()
    }

    /// Keeps a tie found (the first one kept for a revision stays) in place
    /// of the canary's earlier ones.
    pub async fn keep_canary_tie(self, tie: &CanaryTie) -> Result<()> {
        let (repo, number) = match &tie.pr {
            Some((repo, number)) => (
                Some(repo.to_string()),
                Some(i64::try_from(number.0).map_err(|_| {
                    StoreError::Corrupt(format!("PR number {} is out of range", number.0))
                })?),
            ),
            None => (None, None),
        };
        let mut tx = self.store.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO canary_ties ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (canary, checksum) DO NOTHING"
        ))
        .bind(tie.canary.to_string())
        .bind(tie.checksum.clone())
        .bind(tie.commit.clone())
        .bind(repo)
        .bind(number)
        .bind(tie.found_at)
        .execute(tx.conn())
        .await?;
        // One row per canary: its checksum comes with an unauthenticated check,
        // so made-up revisions of a real canary must not pile up (memory keeps
        // one per canary too; an older revision is looked up again).
        sqlx::query("DELETE FROM canary_ties WHERE canary = $1 AND checksum <> $2")
            .bind(tie.canary.to_string())
            .bind(tie.checksum.clone())
            .execute(tx.conn())
            .await?;
        tx.commit().await
    }
}
