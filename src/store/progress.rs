//! Each canary's progress as its events tell it (`canary_progress`): one row
//! per canary, written with the event that changed it.

use std::collections::BTreeSet;

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Result, Store, StoreError, WriteTx};
use crate::gate::progress::{CanaryProgress, Failure, LastEvent};
use crate::gate::CanaryRef;

fn number(row: &AnyRow, column: &str) -> Result<Option<u32>> {
    let n: Option<i64> = row.try_get(column)?;
    n.map(|n| {
        u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("canary progress {column} {n}")))
    })
    .transpose()
}

fn from_row(row: &AnyRow) -> Result<CanaryProgress> {
    let told: String = row.try_get("told")?;
    let told = told
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            Failure::parse(t)
                .ok_or_else(|| StoreError::Corrupt(format!("canary progress told {t:?}")))
        })
        .collect::<Result<BTreeSet<_>>>()?;
    let iteration = match (number(row, "iteration")?, number(row, "iterations")?) {
        (Some(n), Some(of)) => Some((n, of)),
        _ => None,
    };
    Ok(CanaryProgress {
        checksum: row.try_get("checksum")?,
        weight: number(row, "weight")?,
        iteration,
        failed_checks: number(row, "failed_checks")?.unwrap_or(0),
        threshold: number(row, "threshold")?,
        last: LastEvent {
            message: row.try_get("last_message")?,
            at: row.try_get("last_at")?,
        },
        told,
    })
}

impl Store {
    /// The canary's progress, if any event of it was stored.
    pub async fn canary_progress(&self, canary: &CanaryRef) -> Result<Option<CanaryProgress>> {
        let row = sqlx::query("SELECT * FROM canary_progress WHERE canary = $1")
            .bind(canary.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// The progress as the transaction sees it (the one writer of events reads
    /// and writes it in the event's own transaction).
    pub async fn canary_progress_in(
        tx: &mut WriteTx<'_>,
        canary: &CanaryRef,
    ) -> Result<Option<CanaryProgress>> {
        let row = sqlx::query("SELECT * FROM canary_progress WHERE canary = $1")
            .bind(canary.to_string())
            .fetch_optional(tx.conn())
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    pub async fn put_canary_progress(
        tx: &mut WriteTx<'_>,
        canary: &CanaryRef,
        p: &CanaryProgress,
    ) -> Result<()> {
        let told: Vec<&str> = p.told.iter().map(|f| f.as_str()).collect();
        sqlx::query(
            "INSERT INTO canary_progress (canary, checksum, weight, iteration, iterations, \
             failed_checks, threshold, last_message, last_at, told) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (canary) DO UPDATE SET checksum = excluded.checksum, \
             weight = excluded.weight, iteration = excluded.iteration, \
             iterations = excluded.iterations, failed_checks = excluded.failed_checks, \
             threshold = excluded.threshold, last_message = excluded.last_message, \
             last_at = excluded.last_at, told = excluded.told",
        )
        .bind(canary.to_string())
        .bind(p.checksum.clone())
        .bind(p.weight.map(i64::from))
        .bind(p.iteration.map(|(n, _)| i64::from(n)))
        .bind(p.iteration.map(|(_, of)| i64::from(of)))
        .bind(i64::from(p.failed_checks))
        .bind(p.threshold.map(i64::from))
        .bind(p.last.message.clone())
        .bind(p.last.at)
        .bind(told.join(","))
        .execute(tx.conn())
        .await?;
        Ok(())
    }
}
