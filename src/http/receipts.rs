//! Group commit for webhook receipts (GitHub deliveries, Slack clicks and
//! commands): deliveries that arrive together are stored in one transaction, so
//! they share one disk flush instead of paying one each. Every caller still gets
//! its answer only after the commit, and the inbox worker is woken by it.
//! A receipt the store cannot take within [`RECEIPT_WITHIN`] is refused (503),
//! well inside GitHub's 10 s and Slack's 3 s, so that the sender retries
//! rather than gives up on a connection that hangs.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use tokio::sync::Notify;

use crate::clock::SharedClock;
use crate::store::{Delivery, Store};

/// Most deliveries written in one transaction.
const MAX_BATCH: usize = 256;

/// How long a caller waits for its receipt to be stored before it is told
/// the store is unavailable. A write still under way may yet store it; a
/// redelivery of it is then a duplicate.
pub const RECEIPT_WITHIN: Duration = Duration::from_millis(1500);

type Reply = oneshot::Sender<Result<bool, String>>;

/// One per server, shared by the webhook routes and Slack Socket Mode; its
/// writer task starts on first use and ends when the last clone is dropped.
#[derive(Clone)]
pub struct Receipts {
    tx: Arc<OnceLock<mpsc::Sender<(Delivery, Reply)>>>,
    target: Target,
}

/// Where receipts go, and whom a new one wakes.
#[derive(Clone)]
struct Target {
    store: Store,
    clock: SharedClock,
    inbox_wake: Arc<Notify>,
}

impl Receipts {
    pub fn new(store: Store, clock: SharedClock, inbox_wake: Arc<Notify>) -> Self {
        Self {
            tx: Arc::default(),
            target: Target {
                store,
                clock,
                inbox_wake,
            },
        }
    }

    /// Stores the delivery; false when it was stored before (a redelivery).
    /// Err when the store did not take it within [`RECEIPT_WITHIN`].
    pub async fn store(&self, delivery: Delivery) -> Result<bool, String> {
        tokio::time::timeout(RECEIPT_WITHIN, self.store_unbounded(delivery))
            .await
            .map_err(|_| {
                format!(
                    "the store did not take the receipt within {}: try again",
                    humantime::format_duration(RECEIPT_WITHIN)
                )
            })?
    }

    async fn store_unbounded(&self, delivery: Delivery) -> Result<bool, String> {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
            tokio::spawn(writer(self.target.clone(), rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        tx.send((delivery, reply))
            .await
            .map_err(|_| "the receipt writer stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the receipt writer stopped".to_string())?
    }
}

async fn writer(state: Target, mut rx: mpsc::Receiver<(Delivery, Reply)>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (items, replies): (Vec<Delivery>, Vec<Reply>) = batch.drain(..).unzip();
        let now = state.clock.now_ms();
        match state.store.queues().receive_many(&items, now).await {
            Ok(stored) => {
                if stored.iter().any(|new| *new) {
                    state.inbox_wake.notify_one();
                }
                for (reply, new) in replies.into_iter().zip(stored) {
                    let _ = reply.send(Ok(new));
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.to_string()));
                }
            }
        }
    }
}
