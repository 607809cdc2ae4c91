//! Where a commit has been promoted, per cluster (`passages`): what a later
//! environment's order is checked against.

use sqlx::Row;

use super::Passages;
use super::{Result, StoreError, WriteTx};
use crate::gate::{ClusterName, GateKey, Millis};

/// A cluster's promote gate opened for a commit, first at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// The promote gate, of every cluster (no `@cluster`).
    pub gate: GateKey,
    pub commit: String,
    pub cluster: ClusterName,
    pub at: Millis,
}

fn passage(row: &sqlx::any::AnyRow) -> Result<Passage> {
    let corrupt = |what: &str, e: String| StoreError::Corrupt(format!("passages.{what}: {e}"));
    let gate: String = row.try_get("gate_key")?;
    let cluster: String = row.try_get("cluster")?;
    Ok(Passage {
        gate: GateKey::parse(&gate, None).map_err(|e| corrupt("gate_key", e.to_string()))?,
        commit: row.try_get("commit_sha")?,
        cluster: cluster.parse().map_err(|e| corrupt("cluster", e))?,
        at: row.try_get("passed_at")?,
    })
}

impl<'s> Passages<'s> {
    /// Records a passage with the change that made it; the first one stays.
    pub async fn record_passage(tx: &mut WriteTx<'_>, p: &Passage) -> Result<()> {
        sqlx::query(
            "INSERT INTO passages (gate_key, commit_sha, cluster, passed_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (gate_key, commit_sha, cluster) DO NOTHING",
        )
        .bind(p.gate.to_string())
        .bind(p.commit.clone())
        .bind(p.cluster.as_str().to_string())
        .bind(p.at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// The passages of one promote gate (every cluster, every commit kept).
    pub async fn passages_of(self, gate: &GateKey) -> Result<Vec<Passage>> {
        let rows = sqlx::query(
            "SELECT gate_key, commit_sha, cluster, passed_at FROM passages WHERE gate_key = $1",
        )
        .bind(gate.to_string())
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(passage).collect()
    }

    /// Every passage kept, newest first, at most `limit`.
    pub async fn all(self, limit: i64) -> Result<Vec<Passage>> {
        let rows = sqlx::query(
            "SELECT gate_key, commit_sha, cluster, passed_at FROM passages ORDER BY passed_at DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(passage).collect()
    }
}
