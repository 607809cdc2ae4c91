//! Deployments that an environment's protection rule holds for gatebot's
//! approval (`deployment_protection_rule`, `[[github.protection]]`): one row
//! per workflow run and environment, pending until decided.

use sqlx::Row;

use super::prs::about_pr;
use super::rows::{signed, unsigned};
use super::Protection;
use super::{Result, WriteTx};
use crate::gate::{GateKey, Millis, PrNumber, RepoName};

/// One deployment waiting for (or decided by) a gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectionRequest {
    pub repo: RepoName,
    pub run_id: u64,
    pub environment: String,
    pub number: PrNumber,
    pub gate: GateKey,
    pub callback_url: String,
    pub installation: Option<u64>,
    pub requested_at: Millis,
    /// The commit deployed (GitHub's `deployment.sha`); empty when not known.
    pub sha: String,
}

impl<'s> Protection<'s> {
    /// Records a request, in the unit that starts its wait; false when the
    /// same run and environment are waiting already (a replay changes
    /// nothing). A decided one asks again when its job is re-run (the run id
    /// stays), so it is pending again.
    pub async fn put_protection_request(
        tx: &mut WriteTx<'_>,
        r: &ProtectionRequest,
    ) -> Result<bool> {
        let installation = r
            .installation
            .map(|i| signed(i, "installation"))
            .transpose()?;
        let done = sqlx::query(
            "INSERT INTO github_protection_requests (repo, run_id, environment, number, gate_key, \
             callback_url, installation, requested_at, sha) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (repo, run_id, environment) DO UPDATE SET number = excluded.number, \
             gate_key = excluded.gate_key, callback_url = excluded.callback_url, \
             installation = excluded.installation, requested_at = excluded.requested_at, \
             sha = excluded.sha, \
             decided_at = NULL, state = NULL \
             WHERE github_protection_requests.decided_at IS NOT NULL",
        )
        .bind(r.repo.to_string())
        .bind(signed(r.run_id, "run id")?)
        .bind(r.environment.clone())
        .bind(signed(r.number.0, "PR number")?)
        .bind(r.gate.to_string())
        .bind(r.callback_url.clone())
        .bind(installation)
        .bind(r.requested_at)
        .bind(r.sha.clone())
        .execute(tx.conn())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The PR's undecided requests made by `at`, oldest first.
    pub async fn pending_protections(
        self,
        repo: &RepoName,
        number: PrNumber,
        at: Millis,
    ) -> Result<Vec<ProtectionRequest>> {
        let rows = about_pr(
            "SELECT run_id, environment, gate_key, callback_url, installation, requested_at, sha \
             FROM github_protection_requests WHERE repo = $1 AND number = $2 \
             AND decided_at IS NULL AND requested_at <= $3 ORDER BY requested_at, run_id",
            repo,
            number,
        )?
        .bind(at)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let installation: Option<i64> = row.try_get("installation")?;
                Ok(ProtectionRequest {
                    repo: repo.clone(),
                    run_id: unsigned(row.try_get("run_id")?, "run id")?,
                    environment: row.try_get("environment")?,
                    number,
                    gate: super::rows::key_in(row, "gate_key")?,
                    callback_url: row.try_get("callback_url")?,
                    installation: installation
                        .map(|i| unsigned(i, "installation"))
                        .transpose()?,
                    requested_at: row.try_get("requested_at")?,
                    sha: row.try_get("sha")?,
                })
            })
            .collect()
    }

    /// Records how a request was decided (`approved`, `rejected`, `refused`,
    /// `failed`); false when it was decided already.
    pub async fn decide_protection(
        self,
        r: &ProtectionRequest,
        state: &str,
        at: Millis,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        let done = sqlx::query(
            "UPDATE github_protection_requests SET decided_at = $4, state = $5 \
             WHERE repo = $1 AND run_id = $2 AND environment = $3 AND decided_at IS NULL",
        )
        .bind(r.repo.to_string())
        .bind(signed(r.run_id, "run id")?)
        .bind(r.environment.clone())
        .bind(at)
        .bind(state.to_string())
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }
}
