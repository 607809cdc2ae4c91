//! Each canary's progress as its events tell it (`canary_progress`): one row
//! per canary, written with the event that changed it.

use std::collections::BTreeSet;

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Progress, Result, StoreError, WriteTx};
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

impl<'s> Progress<'s> {
    /// The canary's progress, if any event of it was stored.
    pub async fn canary_progress(self, canary: &CanaryRef) -> Result<Option<CanaryProgress>> {
        let row = sqlx::query("SELECT * FROM canary_progress WHERE canary = $1")
            .bind(canary.to_string())
            .fetch_optional(&self.store.pool)
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

    /// PostgreSQL: [`Self::canary_progress_in`], after taking the canary's
    /// lock for the rest of `tx`, so that two replicas folding events of one
    /// canary take turns instead of one overwriting the other's fold. The
    /// row may not exist yet, so the lock is by the canary's name.
    pub async fn lock_canary_progress(
        tx: &mut WriteTx<'_>,
        canary: &CanaryRef,
    ) -> Result<Option<CanaryProgress>> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0)) IS NULL AS locked")
            .bind(format!("gatebot progress {canary}"))
            .execute(tx.conn())
            .await?;
        Self::canary_progress_in(tx, canary).await
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

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor};

    use super::*;
    use crate::gate::progress::Seen;
    use crate::gate::Millis;
    use crate::store::Store;

    /// A database of its own on GATEBOT_TEST_POSTGRES_URL's server.
    async fn fresh_database() -> String {
        let url = std::env::var("GATEBOT_TEST_POSTGRES_URL").expect("GATEBOT_TEST_POSTGRES_URL");
        sqlx::any::install_default_drivers();
        let name = format!("gatebot_progress_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::AnyConnection::connect(&url).await.expect("connect");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create database");
        let (base, _) = url.rsplit_once('/').expect("a database in the URL");
        format!("{base}/{name}")
    }

    fn folded(prev: Option<CanaryProgress>, message: &str, at: Millis) -> CanaryProgress {
        let seen = Seen {
            checksum: "c1",
            message,
            threshold: None,
            at,
        };
        CanaryProgress::after(prev, seen).0
    }

    /// Two replicas fold events of one canary at once: the second waits for
    /// the first's commit and folds onto it, so neither event is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(gatebot_test_postgres),
        ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
    )]
    async fn two_replicas_folding_one_canary_take_turns_on_postgres() {
        let url = fresh_database().await;
        let one = Store::open(&url, Some(2)).await.expect("replica one");
        let two = Store::open(&url, Some(2)).await.expect("replica two");
        let canary: CanaryRef = "test/podinfo".parse().expect("canary");

        let mut first = one.begin().await.expect("begin");
        let prev = Progress::lock_canary_progress(&mut first, &canary)
            .await
            .expect("lock");
        let second = {
            let canary = canary.clone();
            tokio::spawn(async move {
                let mut tx = two.begin().await.expect("begin");
                let prev = Progress::lock_canary_progress(&mut tx, &canary)
                    .await
                    .expect("lock");
                let seen = prev.as_ref().map(|p| p.last.at);
                let next = folded(prev, "Advance podinfo.test canary weight 20", 2);
                Progress::put_canary_progress(&mut tx, &canary, &next)
                    .await
                    .expect("put");
                tx.commit().await.expect("commit");
                seen
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!second.is_finished(), "the second fold waits for the first");
        let next = folded(prev, "Advance podinfo.test canary weight 10", 1);
        Progress::put_canary_progress(&mut first, &canary, &next)
            .await
            .expect("put");
        first.commit().await.expect("commit");
        let seen = second.await.expect("the second fold");
        assert_eq!(seen, Some(1), "the second fold read the first's commit");

        let stored = one
            .progress()
            .canary_progress(&canary)
            .await
            .expect("read")
            .expect("a row");
        assert_eq!(stored.weight, Some(20));
        assert_eq!(
            stored.last.at, 2,
            "the second folded onto the first: {stored:?}"
        );
    }
}
