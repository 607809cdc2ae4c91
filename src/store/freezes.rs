//! Change freezes as stored: every freeze and its lifting, kept.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::Freezes;
use super::{actor_from, Result, StoreError, WriteTx};
use crate::gate::freeze::{Freeze, FreezeScope};
use crate::gate::{Actor, Millis};

fn freeze_from_row(row: &AnyRow) -> Result<Freeze> {
    let scope: String = row.try_get("scope")?;
    Ok(Freeze {
        id: row.try_get("id")?,
        scope: scope
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("freeze scope {scope}: {e}")))?,
        reason: row.try_get("reason")?,
        by: actor_from(row, "actor", "source")?.unwrap_or_else(Actor::gatebot),
        at: row.try_get("started_at")?,
        until: row.try_get("until")?,
    })
}

impl<'s> Freezes<'s> {
    /// Freezes neither lifted nor run out at `now`, oldest first.
    pub async fn active_freezes(self, now: Millis) -> Result<Vec<Freeze>> {
        let rows = sqlx::query(
            "SELECT * FROM freezes WHERE lifted_at IS NULL AND (until IS NULL OR until > $1) ORDER BY id",
        )
        .bind(now)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(freeze_from_row).collect()
    }

    /// Inserts a freeze; None when `delivery` froze already (a retried command).
    pub async fn insert_freeze(
        tx: &mut WriteTx<'_>,
        scope: &FreezeScope,
        reason: &str,
        by: &Actor,
        at: Millis,
        until: Option<Millis>,
        delivery: Option<&str>,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "INSERT INTO freezes (scope, reason, actor, source, started_at, until, delivery) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (delivery) WHERE delivery IS NOT NULL DO NOTHING RETURNING id",
        )
        .bind(scope.to_string())
        .bind(reason.to_string())
        .bind(by.name.clone())
        .bind(by.source.as_str())
        .bind(at)
        .bind(until)
        .bind(delivery.map(str::to_string))
        .fetch_optional(tx.conn())
        .await?;
        Ok(row.map(|r| r.try_get("id")).transpose()?)
    }

    /// The freeze a delivery made.
    pub async fn freeze_of_delivery(
        tx: &mut WriteTx<'_>,
        delivery: &str,
    ) -> Result<Option<Freeze>> {
        let row = sqlx::query("SELECT * FROM freezes WHERE delivery = $1")
            .bind(delivery.to_string())
            .fetch_optional(tx.conn())
            .await?;
        row.as_ref().map(freeze_from_row).transpose()
    }

    /// Lifts the freezes of `scope` in force at `at`; returns them.
    pub async fn lift_freezes(
        tx: &mut WriteTx<'_>,
        scope: &FreezeScope,
        by: &Actor,
        at: Millis,
    ) -> Result<Vec<Freeze>> {
        let rows = sqlx::query(
            "UPDATE freezes SET lifted_at = $2, lifted_by = $3 \
             WHERE scope = $1 AND lifted_at IS NULL AND (until IS NULL OR until > $2) RETURNING *",
        )
        .bind(scope.to_string())
        .bind(at)
        .bind(format!("{} via {}", by.name, by.source))
        .fetch_all(tx.conn())
        .await?;
        rows.iter().map(freeze_from_row).collect()
    }
}
