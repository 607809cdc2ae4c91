//! The GitHub Deployment of each canary revision tied to a pull request, and
//! the state of the last status posted on it (GATEBOT_GITHUB_DEPLOYMENTS).

use sqlx::Row;

use super::prs::about_pr;
use super::rows::{id_in, signed};
use super::{Result, Store};
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

impl Store {
    /// The PR's deployments, in the order GitHub created them.
    pub async fn deployments_of(
        &self,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<Vec<DeploymentRow>> {
        let rows = about_pr(
            "SELECT canary, checksum, deployment_id, state FROM github_deployments \
             WHERE repo = $1 AND number = $2 ORDER BY deployment_id",
            repo,
            number,
        )?
        .fetch_all(&self.pool)
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
        &self,
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
        self.execute_alone(query).await
    }
}
