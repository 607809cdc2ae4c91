//! Group commit for settling finished items: items of one worker that finish
//! together are marked done in one transaction, so they share one disk flush
//! instead of paying one each. Each item's task still waits for its commit.

use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use crate::gate::Millis;
use crate::store::{Claim, QueueName, Result, Store, StoreError};

/// Most items settled in one transaction.
const MAX_BATCH: usize = 64;

type Reply = oneshot::Sender<std::result::Result<bool, String>>;

/// An item to mark done: its id, its attempts when claimed (see [`Claim`]) and when.
type Done = (String, i64, Millis);

/// One per worker; its writer task starts on first use and ends with the worker.
#[derive(Clone, Default)]
pub struct Finisher {
    tx: Arc<OnceLock<mpsc::Sender<(Done, Reply)>>>,
}

impl Finisher {
    /// Marks the claimed item done; false when the lease was lost to another worker.
    pub async fn finish(
        &self,
        store: &Store,
        queue: QueueName,
        claim: &Claim<'_>,
        now: Millis,
    ) -> Result<bool> {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
            tokio::spawn(writer(store.clone(), queue, claim.owner.to_string(), rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Shared("the settling writer stopped".into());
        let done = (claim.id.to_string(), claim.attempts, now);
        tx.send((done, reply)).await.map_err(|_| stopped())?;
        answer
            .await
            .map_err(|_| stopped())?
            .map_err(StoreError::Shared)
    }
}

async fn writer(
    store: Store,
    queue: QueueName,
    owner: String,
    mut rx: mpsc::Receiver<(Done, Reply)>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (items, replies): (Vec<Done>, Vec<Reply>) = batch.drain(..).unzip();
        let claims: Vec<(Claim<'_>, Millis)> = items
            .iter()
            .map(|(id, attempts, at)| {
                let claim = Claim {
                    id,
                    owner: &owner,
                    attempts: *attempts,
                };
                (claim, *at)
            })
            .collect();
        match store.queues().finish_many(queue, &claims).await {
            Ok(settled) => {
                for (reply, ok) in replies.into_iter().zip(settled) {
                    let _ = reply.send(Ok(ok));
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
