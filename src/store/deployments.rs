//! The GitHub Deployment of each canary revision tied to a pull request, and
//! the state of the last status posted on it ([github] deployments).

use sqlx::Row;

use crate::gate::GateKey;

use super::prs::about_pr;
use super::rows::{id_in, signed};
use super::Deployments;
use super::Result;
use crate::gate::{PrNumber, RepoName};

/// One revision's deployment as last sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentRow {
    pub canary: String,
    pub checksum: String,
    pub deployment_id: u64,
    /// The state of the last status posted.
    pub state: String,
}

impl DeploymentRow {
    /// A row [`Store::reserve_deployment`] made: GitHub has not been asked yet.
    pub fn reserved(&self) -> bool {
        self.deployment_id == RESERVED
    }
}

/// The deployment id of a reserved row (GitHub's ids start at 1).
const RESERVED: u64 = 0;

/// Whether a revision's deployment may be created (see [`Store::reserve_deployment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// The PR keeps a row for it now (or had one already).
    Yes,
    /// The PR's deployments name `max` canaries already, none of them this one.
    Full,
}

impl<'s> Deployments<'s> {
    /// The PR's deployments, in the order GitHub created them.
    pub async fn deployments_of(
        self,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<Vec<DeploymentRow>> {
        let rows = about_pr(
            "SELECT canary, checksum, deployment_id, state FROM github_deployments \
             WHERE repo = $1 AND number = $2 ORDER BY deployment_id",
            repo,
            number,
        )?
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(DeploymentRow {
                    canary: row.try_get("canary")?,
                    checksum: row.try_get("checksum")?,
                    deployment_id: id_in(row, "deployment_id", "deployment id")?,
                    state: row.try_get("state")?,
                })
            })
            .collect()
    }

    /// Records a revision's deployment and the state last posted on it.
    pub async fn put_deployment(
        self,
        repo: &RepoName,
        number: PrNumber,
        row: &DeploymentRow,
        now: crate::gate::Millis,
    ) -> Result<()> {
        let query = about_pr(
            "INSERT INTO github_deployments (repo, number, canary, checksum, deployment_id, state, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (repo, number, canary, checksum) DO UPDATE SET \
             deployment_id = excluded.deployment_id, state = excluded.state, updated_at = excluded.updated_at",
            repo,
            number,
        )?
        .bind(row.canary.clone())
        .bind(row.checksum.clone())
        .bind(signed(row.deployment_id, "deployment id")?)
        .bind(row.state.clone())
        .bind(now);
        self.store.execute_alone(query).await
    }

    /// Reserves the row of revision (`canary`, `checksum`)'s deployment
    /// before GitHub is asked to create it: refused when the PR's rows name
    /// `max` canaries already and none is `canary`. Counted and written in
    /// one transaction.
    pub async fn reserve_deployment(
        self,
        repo: &RepoName,
        number: PrNumber,
        canary: &str,
        checksum: &str,
        max: usize,
        now: crate::gate::Millis,
    ) -> Result<Reserved> {
        let mut tx = self.store.begin().await?;
        let canaries: i64 = about_pr(
            "SELECT COUNT(DISTINCT canary) FROM github_deployments WHERE repo = $1 AND number = $2",
            repo,
            number,
        )?
        .fetch_one(tx.conn())
        .await?
        .try_get(0)?;
        let mine: i64 = about_pr(
            "SELECT COUNT(*) FROM github_deployments WHERE repo = $1 AND number = $2 AND canary = $3",
            repo,
            number,
        )?
        .bind(canary.to_string())
        .fetch_one(tx.conn())
        .await?
        .try_get(0)?;
        if mine == 0 && usize::try_from(canaries).map_or(true, |n| n >= max) {
            return Ok(Reserved::Full);
        }
        about_pr(
            "INSERT INTO github_deployments (repo, number, canary, checksum, deployment_id, state, updated_at) \
             VALUES ($1, $2, $3, $4, $5, '', $6) ON CONFLICT (repo, number, canary, checksum) DO NOTHING",
            repo,
            number,
        )?
        .bind(canary.to_string())
        .bind(checksum.to_string())
        .bind(signed(RESERVED, "deployment id")?)
        .bind(now)
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(Reserved::Yes)
    }

    /// Whether `canary`'s revision `checksum` is known to be real at one of
    /// `gates`: a person's approval there was used by this revision (a pin),
    /// or a Flagger token vouched for a wait of it. A check alone is
    /// anyone's claim, and so is its checksum: what makes a revision worth
    /// a deployment.
    pub async fn revision_real(
        self,
        gates: &[GateKey],
        canary: &str,
        checksum: &str,
    ) -> Result<bool> {
        for gate in gates {
            let found: Option<i64> = self
                .store.first_value(
                    sqlx::query(
                        "SELECT (SELECT COUNT(*) FROM pins \
                                 WHERE gate_key = $1 AND canary = $2 AND checksum = $3) \
                              + (SELECT COUNT(*) FROM waits \
                                 WHERE gate_key = $1 AND canary = $2 AND checksum = $3 AND vouched = 1)",
                    )
                    .bind(gate.to_string())
                    .bind(canary.to_string())
                    .bind(checksum.to_string()),
                )
                .await?;
            if found.is_some_and(|n| n > 0) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a person's approval at any gate was used by `canary` (a
    /// pin): what makes a canary real when no Flagger token vouches for it.
    pub async fn canary_pinned(self, canary: &str) -> Result<bool> {
        let found: Option<i64> = self
            .store
            .first_value(
                sqlx::query("SELECT COUNT(*) FROM pins WHERE canary = $1").bind(canary.to_string()),
            )
            .await?;
        Ok(found.is_some_and(|n| n > 0))
    }
}
