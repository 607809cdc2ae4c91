//! Runs a durable queue: claims due items with a lease, hands each to its
//! route's handler, and settles it (done, retry with backoff, or given up).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Handler, SendError};
use crate::clock::SharedClock;
use crate::metrics::{JobLabels, Metrics};
use crate::store::{QueueItem, QueueName, Store};

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    pub max_attempts: i64,
    /// How long a claimed item is ours; after that another worker may take it.
    pub lease: Duration,
    /// The longest sleep between looks at the queue (other replicas add work too).
    pub idle_poll: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            base_backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(600),
            max_attempts: 12,
            lease: Duration::from_secs(60),
            idle_poll: Duration::from_secs(2),
        }
    }
}

pub struct Worker {
    pub queue: QueueName,
    pub store: Store,
    pub clock: SharedClock,
    pub metrics: Arc<Metrics>,
    pub handlers: HashMap<String, Arc<dyn Handler>>,
    pub settings: WorkerSettings,
    pub wake: Arc<Notify>,
    pub owner: String,
}

impl Worker {
    fn label(&self) -> &'static str {
        match self.queue {
            QueueName::Outbox => "outbox",
            QueueName::Inbox => "inbox",
        }
    }

    /// Exponential backoff for the attempt that just failed (1-based).
    pub fn backoff(&self, attempts: i64) -> Duration {
        let exp = attempts.clamp(1, 30) as u32 - 1;
        self.settings
            .base_backoff
            .saturating_mul(2u32.saturating_pow(exp))
            .min(self.settings.max_backoff)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            match self.drain(&shutdown).await {
                Ok(()) => {}
                Err(e) => tracing::warn!(queue = self.label(), error = %e, "queue unavailable"),
            }
            let sleep = self.idle_sleep().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(sleep) => {}
            }
        }
    }

    async fn idle_sleep(&self) -> Duration {
        let now = self.clock.now_ms();
        match self.store.next_due(self.queue).await {
            Ok(Some(due)) if due > now => {
                Duration::from_millis((due - now) as u64).min(self.settings.idle_poll)
            }
            Ok(Some(_)) => Duration::from_millis(10),
            _ => self.settings.idle_poll,
        }
    }

    /// Runs every due item, one at a time (commands apply in the order received).
    pub async fn drain(&self, shutdown: &CancellationToken) -> crate::store::Result<()> {
        while !shutdown.is_cancelled() {
            let now = self.clock.now_ms();
            let lease = self.settings.lease.as_millis() as i64;
            let Some(item) = self
                .store
                .claim(self.queue, &self.owner, now, lease)
                .await?
            else {
                return Ok(());
            };
            self.run_one(&item).await?;
        }
        Ok(())
    }

    async fn run_one(&self, item: &QueueItem) -> crate::store::Result<()> {
        let result = match self.handlers.get(&item.route) {
            None => Err(SendError::Permanent(format!(
                "nothing handles `{}` here: is it configured?",
                item.route
            ))),
            Some(handler) => {
                let limit = self.settings.lease.mul_f32(0.8);
                match tokio::time::timeout(limit, handler.handle(item)).await {
                    Ok(result) => result,
                    Err(_) => Err(SendError::retry(format!("timed out after {limit:?}"))),
                }
            }
        };
        let now = self.clock.now_ms();
        let (outcome, settled) = match result {
            Ok(()) => (
                "done",
                self.store
                    .finish(self.queue, &item.id, &self.owner, now)
                    .await?,
            ),
            Err(SendError::Retry { after, message })
                if item.attempts < self.settings.max_attempts =>
            {
                let delay = after.unwrap_or_else(|| self.backoff(item.attempts));
                tracing::info!(queue = self.label(), route = %item.route, topic = %item.topic,
                    attempts = item.attempts, retry_in = ?delay, error = %message, "will retry");
                let next = now + delay.as_millis() as i64;
                (
                    "retry",
                    self.store
                        .retry(self.queue, &item.id, &self.owner, next, &message)
                        .await?,
                )
            }
            Err(e) => {
                tracing::warn!(queue = self.label(), route = %item.route, topic = %item.topic,
                    attempts = item.attempts, error = %e, "giving up");
                (
                    "failed",
                    self.store
                        .give_up(self.queue, &item.id, &self.owner, now, e.message())
                        .await?,
                )
            }
        };
        if !settled {
            tracing::warn!(queue = self.label(), id = %item.id, "lease expired before the item was settled");
        }
        self.metrics
            .jobs
            .get_or_create(&JobLabels {
                queue: self.label(),
                route: item.route.clone(),
                result: outcome,
            })
            .inc();
        Ok(())
    }
}
