//! Write transactions that gatebot runs itself (`BEGIN IMMEDIATE` / `COMMIT` /
//! `ROLLBACK` on one pooled connection), and the record of how writes went.
//!
//! sqlx's own `Transaction` counts nesting per connection and does not reset the
//! count when COMMIT or ROLLBACK fails (a full disk, where SQLite has already
//! rolled back). The next "transaction" on that pooled connection is then a
//! SAVEPOINT inside a transaction that never commits: it is acknowledged and
//! lost, and it keeps SQLite's write lock. Here a connection whose transaction
//! did not end cleanly is never returned to the pool: it is closed.

use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, Executor};
use tokio::sync::MutexGuard;

use super::{QueueName, Result};
use crate::gate::{GateKind, Millis};
use crate::metrics::{DecisionLabels, WriteLabels};

/// How long ending a failed transaction may take before its connection is
/// simply closed (closing rolls back too).
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(1);

/// A write transaction. It holds SQLite's writer turn while it lives. Dropped
/// without `commit` or `rollback` (an early `?`, a cancelled future) it closes
/// its connection, which rolls the transaction back.
pub struct WriteTx<'a> {
    conn: PoolConnection<Any>,
    /// True once COMMIT or ROLLBACK succeeded: only then may the connection go
    /// back to the pool.
    ended: bool,
    /// Where a real write's outcome is recorded (None for probes and heartbeats,
    /// which must not mask a failing real write).
    writes: Option<&'a WriteHealth>,
    /// The queue whose items this transaction stored, claimed or settled.
    queue: Option<QueueName>,
    /// False when it turned out to write nothing (a claim that found nothing due).
    counted: bool,
    /// Waits this transaction ended: (gate kind, outcome, how long they lasted),
    /// observed once it commits.
    ended_waits: Vec<(GateKind, String, Millis)>,
    _turn: Option<MutexGuard<'a, ()>>,
}

impl<'a> WriteTx<'a> {
    /// Starts a transaction on `conn`. `begin` is `BEGIN IMMEDIATE` on SQLite (take
    /// the write lock now, not at the first write) and `BEGIN` on PostgreSQL.
    pub(super) async fn start(
        conn: PoolConnection<Any>,
        begin: &str,
        writes: Option<&'a WriteHealth>,
        turn: Option<MutexGuard<'a, ()>>,
    ) -> Result<Self> {
        // Built before BEGIN runs, so a future cancelled during BEGIN still
        // closes the connection instead of pooling it mid-transaction.
        let mut tx = Self {
            conn,
            ended: false,
            writes,
            queue: None,
            counted: true,
            ended_waits: Vec::new(),
            _turn: turn,
        };
        if let Err(e) = tx.conn.execute(begin).await {
            tx.record(Err(&e));
            return Err(e.into());
        }
        Ok(tx)
    }

    /// The connection to run this transaction's statements on.
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }

    /// Marks this transaction as one that works `queue` (for the count of
    /// write transactions by queue).
    pub(super) fn serves(&mut self, queue: QueueName) {
        self.queue = Some(queue);
    }

    /// Marks this transaction as having written nothing: it is not counted.
    pub(super) fn wrote_nothing(&mut self) {
        self.counted = false;
    }

    /// Notes a wait this transaction ended, for `gatebot_wait_duration_seconds`.
    pub(super) fn ended_wait(&mut self, kind: GateKind, outcome: &str, lasted: Millis) {
        self.ended_waits
            .push((kind, outcome.to_string(), lasted.max(0)));
    }

    /// Commits. An error means nothing of this transaction is stored.
    pub async fn commit(mut self) -> Result<()> {
        match self.conn.execute("COMMIT").await {
            Ok(_) => {
                self.ended = true;
                self.record(Ok(()));
                if let Some(writes) = self.writes.filter(|_| self.counted) {
                    writes.count(self.queue);
                }
                if let Some(writes) = self.writes {
                    for (kind, outcome, lasted) in std::mem::take(&mut self.ended_waits) {
                        writes.decided(kind, outcome, lasted);
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.record(Err(&e));
                // End it now so SQLite's write lock is free before the writer
                // turn passes on; the connection is closed on drop regardless,
                // since its state after a failed COMMIT is not to be trusted.
                let _ = tokio::time::timeout(ROLLBACK_TIMEOUT, self.conn.execute("ROLLBACK")).await;
                Err(e.into())
            }
        }
    }

    /// Ends a transaction that turned out to have nothing to write. When the
    /// ROLLBACK fails the connection is closed instead; either way nothing was
    /// written, so there is nothing to report.
    pub async fn rollback(mut self) {
        match tokio::time::timeout(ROLLBACK_TIMEOUT, self.conn.execute("ROLLBACK")).await {
            Ok(Ok(_)) => self.ended = true,
            Ok(Err(e)) => tracing::debug!(error = %e, "rollback failed; closing the connection"),
            Err(_) => tracing::debug!("rollback timed out; closing the connection"),
        }
    }

    fn record(&self, outcome: std::result::Result<(), &sqlx::Error>) {
        if let Some(writes) = self.writes {
            writes.record(outcome);
        }
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}

/// The outcome of the latest real write (a transaction that began or
/// committed, or failed to), for readiness.
#[derive(Debug)]
pub struct WriteHealth {
    last: StdMutex<Last>,
    /// Real write transactions committed, by the queue they worked
    /// (`gatebot_store_write_transactions_total`).
    committed: Family<WriteLabels, Counter>,
    /// How long the waits that committed transactions ended had lasted
    /// (`gatebot_wait_duration_seconds`).
    decisions: Family<DecisionLabels, Histogram>,
}

impl Default for WriteHealth {
    fn default() -> Self {
        Self {
            last: StdMutex::default(),
            committed: Family::default(),
            decisions: crate::metrics::decision_family(),
        }
    }
}

#[derive(Debug, Default)]
struct Last {
    ok_at: Option<Instant>,
    failed: Option<(Instant, String)>,
}

impl WriteHealth {
    pub(super) fn record(&self, outcome: std::result::Result<(), &sqlx::Error>) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(()) => last.ok_at = Some(Instant::now()),
            Err(e) => last.failed = Some((Instant::now(), e.to_string())),
        }
    }

    fn count(&self, queue: Option<QueueName>) {
        let queue = queue.map_or("none", QueueName::label);
        self.committed.get_or_create(&WriteLabels { queue }).inc();
    }

    fn decided(&self, kind: GateKind, outcome: String, lasted: Millis) {
        let labels = DecisionLabels {
            kind: kind.to_string(),
            outcome,
        };
        self.decisions
            .get_or_create(&labels)
            .observe(lasted as f64 / 1000.0);
    }

    /// How long ended waits lasted, to register with the other metrics.
    pub fn decisions(&self) -> &Family<DecisionLabels, Histogram> {
        &self.decisions
    }

    /// The count of committed write transactions, to register with the other metrics.
    pub fn committed(&self) -> &Family<WriteLabels, Counter> {
        &self.committed
    }

    /// The error of a real write that failed within `window` and that no real
    /// write has succeeded since.
    pub fn recent_failure(&self, window: Duration) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (at, error) = last.failed.as_ref()?;
        let superseded = last.ok_at.is_some_and(|ok| ok > *at);
        (!superseded && at.elapsed() < window).then(|| error.clone())
    }
}
