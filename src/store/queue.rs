//! The two durable queues: the outbox (notification jobs) and the inbox
//! (webhook deliveries stored before they are acknowledged). Both are claimed
//! with a lease so a worker that dies mid-job leaves it to be taken again.

use std::time::Duration;

use serde::Serialize;
use sqlx::Row;

use super::replicas::millis;
use super::Queues;
use super::{Backend, Result, WriteTx};
use crate::gate::Millis;
use crate::metrics::Metrics;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueName {
    Outbox,
    Inbox,
}

impl QueueName {
    fn table(self) -> &'static str {
        self.label()
    }

    /// The queue's name in metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Outbox => "outbox",
            Self::Inbox => "inbox",
        }
    }

    /// Claiming an outbox job frees its dedupe key: a notice arriving while the
    /// job runs must queue a new job, or the change it reports would be lost.
    fn on_claim(self) -> &'static str {
        match self {
            Self::Outbox => ", dedupe_key = NULL",
            Self::Inbox => "",
        }
    }

    fn columns(self) -> &'static str {
        match self {
            Self::Outbox => {
                "id, sink AS route, topic, payload, attempts, created_at AS created_at, last_error"
            }
            Self::Inbox => {
                "id, source AS route, kind AS topic, payload, attempts, received_at AS created_at, \
                 last_error"
            }
        }
    }
}

/// A notification job to queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// Which sender runs it: `github`, `slack`, …
    pub sink: String,
    pub topic: String,
    pub payload: String,
    /// While a job with this key is pending, queuing another is a no-op.
    pub dedupe_key: Option<String>,
    /// Once a job with this key was queued, queuing another is a no-op (replays).
    pub once_key: Option<String>,
    /// Not before this time (0: at once).
    pub not_before: Millis,
}

/// A webhook delivery to store in the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub source: String,
    pub delivery: String,
    pub kind: String,
    pub payload: String,
}

/// A claimed item of either queue.
#[derive(Debug, Clone, Serialize)]
pub struct QueueItem {
    pub id: String,
    /// The outbox's sink or the inbox's source.
    pub route: String,
    /// The outbox's topic or the inbox's kind.
    pub topic: String,
    pub payload: String,
    /// Including this one. A try that failed for a passing store reason
    /// does not count (see `Store::retry`).
    pub attempts: i64,
    pub created_at: Millis,
    /// Why the last try failed, if one did.
    pub last_error: Option<String>,
}

/// An outbox job as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub id: String,
    pub sink: String,
    pub topic: String,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_at: Millis,
    pub last_error: Option<String>,
    pub created_at: Millis,
}

impl<'s> Queues<'s> {
    /// Queues a job in the caller's transaction. False when deduplicated.
    pub async fn enqueue(tx: &mut WriteTx<'_>, job: &NewJob, now: Millis) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO outbox (id, sink, topic, payload, dedupe_key, once_key, created_at, next_attempt_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        )
        // Time-ordered ids: jobs due at the same moment go out in the order
        // they were queued (👀 before 🚀, a thread's replies in order).
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(job.sink.clone())
        .bind(job.topic.clone())
        .bind(job.payload.clone())
        .bind(job.dedupe_key.clone())
        .bind(job.once_key.clone())
        .bind(now)
        .bind(job.not_before.max(now))
        .execute(tx.conn())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Stores a delivery. False when this delivery id was stored before.
    pub async fn receive(
        self,
        source: &str,
        delivery: &str,
        kind: &str,
        payload: &str,
        now: Millis,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        tx.serves(QueueName::Inbox);
        let done = sqlx::query(
            "INSERT INTO inbox (id, source, kind, payload, received_at, next_attempt_at) \
             VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO NOTHING",
        )
        .bind(format!("{source}:{delivery}"))
        .bind(source.to_string())
        .bind(kind.to_string())
        .bind(payload.to_string())
        .bind(now)
        .execute(tx.conn())
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Stores several deliveries in one transaction, so concurrent webhooks
    /// share one disk flush. Per delivery: false when it was stored before.
    pub async fn receive_many(self, items: &[Delivery], now: Millis) -> Result<Vec<bool>> {
        let mut tx = self.store.begin().await?;
        tx.serves(QueueName::Inbox);
        let mut stored = Vec::with_capacity(items.len());
        for d in items {
            let done = sqlx::query(
                "INSERT INTO inbox (id, source, kind, payload, received_at, next_attempt_at) \
                 VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (id) DO NOTHING",
            )
            .bind(format!("{}:{}", d.source, d.delivery))
            .bind(d.source.clone())
            .bind(d.kind.clone())
            .bind(d.payload.clone())
            .bind(now)
            .execute(tx.conn())
            .await?;
            stored.push(done.rows_affected() == 1);
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// Whether a delivery could be stored now: a write transaction that takes
    /// the inbox's write lock, changes nothing and is rolled back. Not
    /// recorded for readiness; callers bound how long it may take.
    pub async fn inbox_writable(self) -> Result<()> {
        let mut tx = self.store.begin_recorded(None).await?;
        sqlx::query("UPDATE inbox SET state = state WHERE id = ''")
            .execute(tx.conn())
            .await?;
        tx.rollback().await;
        Ok(())
    }

    /// Takes up to `limit` due items for `lease_ms`, in due order, in one
    /// transaction. An item is free when its lease ran out or when its owner is
    /// another replica that has not been seen for [`super::DEAD_AFTER`] (a
    /// process that died holding it).
    pub async fn claim_many(
        self,
        queue: QueueName,
        owner: &str,
        now: Millis,
        lease_ms: i64,
        limit: usize,
    ) -> Result<Vec<QueueItem>> {
        let table = queue.table();
        let free = format!(
            "(lease_until IS NULL OR lease_until < $3 OR (lease_owner <> $2 AND NOT EXISTS \
             (SELECT 1 FROM replicas r WHERE r.owner = {table}.lease_owner AND r.seen_at >= $4)))"
        );
        // The outer conditions repeat the inner ones so that two claimers racing
        // for one row cannot both win: the loser's UPDATE re-checks and matches nothing.
        let lock = match self.store.backend {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        // MATERIALIZED: the pick runs once. As `id IN (subquery)`, PostgreSQL may
        // run the subquery again per row and take more than `limit`.
        let sql = format!(
            "WITH picked AS MATERIALIZED (SELECT id FROM {table} WHERE state = 'pending' \
                 AND next_attempt_at <= $3 AND {free} ORDER BY next_attempt_at, id LIMIT $5 {lock}) \
             UPDATE {table} SET lease_until = $1, lease_owner = $2, attempts = attempts + 1{} \
             WHERE id IN (SELECT id FROM picked) AND state = 'pending' AND {free} \
             RETURNING {}, next_attempt_at",
            queue.on_claim(),
            queue.columns()
        );
        let mut tx = self.store.begin().await?;
        tx.serves(queue);
        let rows = sqlx::query(&sql)
            .bind(now + lease_ms)
            .bind(owner.to_string())
            .bind(now)
            .bind(now - millis(super::DEAD_AFTER))
            .bind(i64::try_from(limit.max(1)).unwrap_or(i64::MAX))
            .fetch_all(tx.conn())
            .await?;
        if rows.is_empty() {
            // An idle poll: not a write worth counting.
            tx.wrote_nothing();
        }
        tx.commit().await?;
        let mut items = rows
            .iter()
            .map(|row| {
                let due: Millis = row.try_get("next_attempt_at")?;
                let item = QueueItem {
                    id: row.try_get("id")?,
                    route: row.try_get("route")?,
                    topic: row.try_get("topic")?,
                    payload: row.try_get("payload")?,
                    attempts: row.try_get("attempts")?,
                    created_at: row.try_get("created_at")?,
                    last_error: row.try_get("last_error")?,
                };
                Ok((due, item))
            })
            .collect::<Result<Vec<_>>>()?;
        // RETURNING keeps no order: restore the claim's.
        items.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.id.cmp(&y.id)));
        Ok(items.into_iter().map(|(_, item)| item).collect())
    }

    /// Takes the next due item for `lease_ms`, or None (see [`Store::claim_many`]).
    pub async fn claim(
        self,
        queue: QueueName,
        owner: &str,
        now: Millis,
        lease_ms: i64,
    ) -> Result<Option<QueueItem>> {
        Ok(self
            .claim_many(queue, owner, now, lease_ms, 1)
            .await?
            .into_iter()
            .next())
    }

    /// Renews the lease on a claimed item just before work that must not be
    /// done twice (a call out), so it stays ours for `lease_ms` more. False
    /// when it is no longer ours: it ran out, another worker (or a later claim
    /// of this one) took it, or it was settled. On PostgreSQL, others also
    /// take the leases of a replica they have not seen for [`super::DEAD_AFTER`]
    /// (see [`Store::claim_many`]): renewing says this replica is alive, as
    /// its heartbeat does, in the same transaction.
    pub async fn hold_lease(
        self,
        queue: QueueName,
        claim: &Claim<'_>,
        now: Millis,
        lease_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        tx.serves(queue);
        let sql = format!(
            "UPDATE {} SET lease_until = $4 WHERE id = $1 AND lease_owner = $2 AND attempts = $3 \
             AND state = 'pending' AND lease_until >= $5",
            queue.table()
        );
        let mut held = sqlx::query(&sql)
            .bind(claim.id.to_string())
            .bind(claim.owner.to_string())
            .bind(claim.attempts)
            .bind(now + lease_ms)
            .bind(now)
            .execute(tx.conn())
            .await?
            .rows_affected()
            == 1;
        if held && self.store.backend == Backend::Postgres {
            // No row: others count this replica dead, and its leases free.
            let seen =
                sqlx::query("UPDATE replicas SET seen_at = GREATEST(seen_at, $2) WHERE owner = $1")
                    .bind(claim.owner.to_string())
                    .bind(now)
                    .execute(tx.conn())
                    .await?;
            held = seen.rows_affected() == 1;
        }
        if held {
            tx.commit().await?;
        } else {
            tx.rollback().await;
        }
        Ok(held)
    }

    /// Marks a claimed item done. False when the lease was lost to another worker.
    pub async fn finish(self, queue: QueueName, claim: &Claim<'_>, now: Millis) -> Result<bool> {
        self.settle(queue, claim, Settlement::Done(now)).await
    }

    /// Puts a claimed item back, to be tried at `next_at`. Not `counted`: the
    /// attempt does not count towards giving up (a transient store error).
    pub async fn retry(
        self,
        queue: QueueName,
        claim: &Claim<'_>,
        next_at: Millis,
        error: &str,
        counted: bool,
    ) -> Result<bool> {
        let how = Settlement::Retry {
            next_at,
            error,
            counted,
        };
        self.settle(queue, claim, how).await
    }

    /// Gives up on a claimed item for good.
    pub async fn give_up(
        self,
        queue: QueueName,
        claim: &Claim<'_>,
        now: Millis,
        error: &str,
    ) -> Result<bool> {
        self.settle(queue, claim, Settlement::Failed { now, error })
            .await
    }

    /// Marks claimed items done in one transaction; for each, false when its
    /// lease was lost to another worker.
    pub async fn finish_many(
        self,
        queue: QueueName,
        items: &[(Claim<'_>, Millis)],
    ) -> Result<Vec<bool>> {
        let mut tx = self.store.begin().await?;
        let mut settled = Vec::with_capacity(items.len());
        for (claim, now) in items {
            settled.push(settle_in(&mut tx, queue, claim, Settlement::Done(*now)).await?);
        }
        tx.commit().await?;
        Ok(settled)
    }

    /// Marks a claimed item done inside `tx`, the transaction of its effects,
    /// so that the item and what it did commit together. False when the lease
    /// was lost (another replica took the item).
    pub async fn finish_in(
        tx: &mut WriteTx<'_>,
        queue: QueueName,
        claim: &Claim<'_>,
        now: Millis,
    ) -> Result<bool> {
        settle_in(tx, queue, claim, Settlement::Done(now)).await
    }

    async fn settle(
        self,
        queue: QueueName,
        claim: &Claim<'_>,
        how: Settlement<'_>,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        let done = settle_in(&mut tx, queue, claim, how).await?;
        tx.commit().await?;
        Ok(done)
    }

    pub async fn pending(self, queue: QueueName) -> Result<i64> {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM {} WHERE state = 'pending'",
            queue.table()
        );
        Ok(sqlx::query(&sql)
            .fetch_one(&self.store.pool)
            .await?
            .try_get("n")?)
    }

    /// The number of pending items, when the oldest was queued (received),
    /// and how many were queued before `overdue_before`.
    pub async fn depth(
        self,
        queue: QueueName,
        overdue_before: Millis,
    ) -> Result<(i64, Option<Millis>, i64)> {
        let created = match queue {
            QueueName::Outbox => "created_at",
            QueueName::Inbox => "received_at",
        };
        let sql = format!(
            "SELECT COUNT(*) AS n, MIN({created}) AS oldest, \
             COUNT(CASE WHEN {created} < $1 THEN 1 END) AS overdue \
             FROM {} WHERE state = 'pending'",
            queue.table()
        );
        let row = sqlx::query(&sql)
            .bind(overdue_before)
            .fetch_one(&self.store.pool)
            .await?;
        Ok((
            row.try_get("n")?,
            row.try_get("oldest")?,
            row.try_get("overdue")?,
        ))
    }

    /// Sets the queue gauges (pending items, the oldest one's age, overdue
    /// deliveries) from the store; a queue the store cannot count keeps its
    /// last values.
    pub async fn report_queues(self, metrics: &Metrics, now: Millis) {
        let overdue_before = now - millis(crate::metrics::OVERDUE_AFTER);
        for queue in [QueueName::Outbox, QueueName::Inbox] {
            let (n, oldest, overdue) = match self.depth(queue, overdue_before).await {
                Ok(depth) => depth,
                Err(e) => {
                    tracing::debug!(queue = queue.label(), error = %e, "cannot count the queue");
                    continue;
                }
            };
            match queue {
                QueueName::Outbox => metrics.outbox_pending.set(n),
                QueueName::Inbox => {
                    metrics.inbox_pending.set(n);
                    metrics.inbox_overdue.set(overdue)
                }
            };
            let age = oldest.map_or(0, |at| (now - at).max(0));
            metrics.queue_age(queue.label(), Duration::from_millis(age as u64));
        }
    }

    /// The earliest time a pending item is due, if any: how long a worker may
    /// sleep. Another replica's lease ends early when that replica stops
    /// being seen; this replica's own leases end when they run out.
    pub async fn next_due(self, queue: QueueName) -> Result<Option<Millis>> {
        let table = queue.table();
        let (greatest, least) = match self.store.backend {
            Backend::Postgres => ("GREATEST", "LEAST"),
            Backend::Sqlite => ("MAX", "MIN"),
        };
        let sql = format!(
            "SELECT MIN(CASE WHEN lease_until IS NULL THEN next_attempt_at \
                 WHEN lease_owner = $1 THEN {greatest}(next_attempt_at, lease_until) \
                 ELSE {greatest}(next_attempt_at, {least}(lease_until, COALESCE( \
                     (SELECT r.seen_at + $2 FROM replicas r WHERE r.owner = {table}.lease_owner), 0))) \
             END) AS t FROM {table} WHERE state = 'pending'"
        );
        Ok(sqlx::query(&sql)
            .bind(self.store.replica.to_string())
            .bind(millis(super::DEAD_AFTER))
            .fetch_one(&self.store.pool)
            .await?
            .try_get("t")?)
    }

    pub async fn jobs(self, state: Option<&str>, limit: i64) -> Result<Vec<Job>> {
        let rows = sqlx::query(
            "SELECT * FROM outbox WHERE ($1 IS NULL OR state = $1) ORDER BY created_at DESC, id LIMIT $2",
        )
        .bind(state.map(str::to_string))
        .bind(limit)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Job {
                    id: r.try_get("id")?,
                    sink: r.try_get("sink")?,
                    topic: r.try_get("topic")?,
                    state: r.try_get("state")?,
                    attempts: r.try_get("attempts")?,
                    next_attempt_at: r.try_get("next_attempt_at")?,
                    last_error: r.try_get("last_error")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }
}

/// One claim of an item: whose, and the item's attempts when claimed. Each
/// claim raises the attempts, so they tell this claim from any later one (by
/// another replica or by this one after its lease ran out): a fencing token.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub id: &'a str,
    pub owner: &'a str,
    pub attempts: i64,
}

/// How a claimed item leaves its lease.
#[derive(Clone, Copy)]
enum Settlement<'a> {
    /// Done at that time.
    Done(Millis),
    /// Pending again, to be tried at `next_at`; an attempt not `counted` is
    /// taken back from the attempts.
    Retry {
        next_at: Millis,
        error: &'a str,
        counted: bool,
    },
    /// Given up on for good.
    Failed { now: Millis, error: &'a str },
}

impl<'a> Settlement<'a> {
    /// The item's state, when it is next due, its error and when it was done.
    fn columns(self) -> (&'static str, Millis, Option<&'a str>, Option<Millis>) {
        match self {
            Self::Done(now) => ("done", now, None, Some(now)),
            Self::Retry { next_at, error, .. } => ("pending", next_at, Some(error), None),
            Self::Failed { now, error } => ("failed", now, Some(error), Some(now)),
        }
    }
}

async fn settle_in(
    tx: &mut WriteTx<'_>,
    queue: QueueName,
    claim: &Claim<'_>,
    how: Settlement<'_>,
) -> Result<bool> {
    tx.serves(queue);
    let (state, next_at, error, done_at) = how.columns();
    let uncounted = match how {
        Settlement::Retry { counted: false, .. } => 1,
        _ => 0,
    };
    let sql = format!(
        "UPDATE {} SET state = $3, next_attempt_at = $4, last_error = COALESCE($5, last_error), \
         done_at = $6, lease_until = NULL, lease_owner = NULL, attempts = attempts - $8 \
         WHERE id = $1 AND lease_owner = $2 AND attempts = $7",
        queue.table()
    );
    let done = sqlx::query(&sql)
        .bind(claim.id.to_string())
        .bind(claim.owner.to_string())
        .bind(state.to_string())
        .bind(next_at)
        .bind(error.map(str::to_string))
        .bind(done_at)
        .bind(claim.attempts)
        .bind(uncounted)
        .execute(tx.conn())
        .await?;
    Ok(done.rows_affected() == 1)
}
