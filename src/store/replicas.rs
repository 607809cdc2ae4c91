//! Who is alive: one `replicas` row per running process, so that a lease held
//! by a process that died is taken back in seconds instead of when it runs out.
//!
//! On PostgreSQL each replica writes its row every [`HEARTBEAT_EVERY`]; claiming
//! treats a lease whose owner has not been seen for [`DEAD_AFTER`] as free. A
//! heartbeat row was chosen over a session advisory lock: it notices a dead
//! node or a partition (where PostgreSQL keeps the dead session, and its lock,
//! until TCP keepalive gives up, often hours later), works through connection
//! poolers that do not keep sessions, and is the same SQL on both stores.
//! On SQLite the process is the only one, so it takes every lease back at start.

use std::time::{Duration, Instant};

use super::Replicas;
use super::{Backend, Result};
use crate::clock::Clock;
use crate::gate::Millis;

/// How often a PostgreSQL replica says it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// A replica not seen for this long is dead: its leases are free. Several
/// heartbeats, so a slow write or a short pause does not hand work over.
pub const DEAD_AFTER: Duration = Duration::from_secs(5);

/// Rows of replicas gone this long are deleted (they mean the same as no row).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// How long one write probe's outcome answers every `/readyz`.
const PROBE_REUSE: Duration = Duration::from_secs(1);

/// A reading of the database's clock: the offset to it, and how sure it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// Database time minus local time, at the midpoint of the round trip.
    pub offset_ms: Millis,
    /// The round trip; the offset is right to within half of it.
    pub round_trip_ms: Millis,
    /// The database's time at the midpoint, and when that was on this
    /// process's monotonic clock (which no step of the wall clock moves).
    pub db_ms: Millis,
    pub at: Instant,
}

pub(super) struct Probe {
    at: Instant,
    result: std::result::Result<(), String>,
}

pub(super) fn new_replica_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "gatebot".into());
    format!("{host}-{}", uuid::Uuid::new_v4().simple())
}

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl<'s> Replicas<'s> {
    /// Records that this replica is alive at `now`, and forgets replicas long gone.
    /// Not counted as a real write for readiness.
    pub async fn heartbeat(self, now: Millis) -> Result<()> {
        let mut tx = self.store.begin_recorded(None).await?;
        sqlx::query(
            "INSERT INTO replicas (owner, started_at, seen_at) VALUES ($1, $2, $2) \
             ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at",
        )
        .bind(self.store.replica.to_string())
        .bind(now)
        .execute(tx.conn())
        .await?;
        sqlx::query("DELETE FROM replicas WHERE seen_at < $1")
            .bind(now - millis(FORGET_AFTER))
            .execute(tx.conn())
            .await?;
        tx.commit().await
    }

    /// PostgreSQL: reads the database's clock (`clock_timestamp()`) and compares
    /// it with `local` at the midpoint of the round trip. None on SQLite, whose
    /// clock is this process's.
    pub async fn clock_reading(self, local: &dyn Clock) -> Result<Option<ClockReading>> {
        if self.store.backend != Backend::Postgres {
            return Ok(None);
        }
        // Connected first, so the round trip is the query's alone.
        let mut conn = self.store.pool.acquire().await?;
        let (sent, steady_sent) = (local.now_ms(), Instant::now());
        let db: i64 = sqlx::query_scalar(
            "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)",
        )
        .fetch_one(&mut *conn)
        .await?;
        let back = local.now_ms();
        let steady_trip = steady_sent.elapsed();
        Ok(Some(ClockReading {
            offset_ms: db - (sent + (back - sent) / 2),
            round_trip_ms: Millis::try_from(steady_trip.as_millis()).unwrap_or(Millis::MAX),
            db_ms: db,
            at: steady_sent + steady_trip / 2,
        }))
    }

    /// A real write (this replica's heartbeat row), for readiness. Concurrent
    /// callers share one probe, and its outcome is reused for a second.
    pub async fn probe_write(self, now: Millis) -> std::result::Result<(), String> {
        let mut last = self.store.probe.lock().await;
        if let Some(p) = last.as_ref().filter(|p| p.at.elapsed() < PROBE_REUSE) {
            return p.result.clone();
        }
        let result = self.heartbeat(now).await.map_err(|e| e.to_string());
        *last = Some(Probe {
            at: Instant::now(),
            result: result.clone(),
        });
        result
    }

    /// Removes this replica's row on a clean stop, so its leases are free at once.
    pub async fn leave(self) -> Result<()> {
        let mut tx = self.store.begin_recorded(None).await?;
        sqlx::query("DELETE FROM replicas WHERE owner = $1")
            .bind(self.store.replica.to_string())
            .execute(tx.conn())
            .await?;
        tx.commit().await
    }

    /// SQLite only (one process): at start, every lease is a dead process's, so
    /// take them all back. Returns how many items were leased.
    pub async fn release_leases(self) -> Result<u64> {
        let mut tx = self.store.begin().await?;
        let mut released = 0;
        for table in ["inbox", "outbox"] {
            let sql = format!(
                "UPDATE {table} SET lease_until = NULL, lease_owner = NULL \
                 WHERE state = 'pending' AND lease_owner IS NOT NULL"
            );
            released += sqlx::query(&sql).execute(tx.conn()).await?.rows_affected();
        }
        sqlx::query("DELETE FROM replicas")
            .execute(tx.conn())
            .await?;
        tx.commit().await?;
        Ok(released)
    }
}
