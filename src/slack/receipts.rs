//! Durable receipt of Slack deliveries with group commit: requests that arrive
//! while a commit is in flight are written together in the next one, so each is
//! stored before it is acknowledged and a burst of clicks costs a few commits.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Notify};

use crate::clock::SharedClock;
use crate::store::Store;

/// Deliveries written per commit at most.
const MAX_BATCH: usize = 256;

struct Pending {
    id: String,
    kind: &'static str,
    payload: String,
    done: oneshot::Sender<Result<(), String>>,
}

pub struct Receipts {
    tx: mpsc::Sender<Pending>,
}

impl Receipts {
    /// Starts the writer; it ends when the last `Receipts` handle is dropped.
    pub fn spawn(store: Store, clock: SharedClock, wake: Arc<Notify>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Pending>(4 * MAX_BATCH);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                let items: Vec<crate::store::Delivery> = batch
                    .iter()
                    .map(|p| crate::store::Delivery {
                        source: "slack".into(),
                        delivery: p.id.clone(),
                        kind: p.kind.to_string(),
                        payload: p.payload.clone(),
                    })
                    .collect();
                let result = store
                    .receive_many(&items, clock.now_ms())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                if result.is_ok() {
                    wake.notify_one();
                }
                for p in batch {
                    let _ = p.done.send(result.clone());
                }
            }
        });
        Self { tx }
    }

    /// Returns once the delivery is committed (a replayed id is a success too).
    pub async fn receive(
        &self,
        id: String,
        kind: &'static str,
        payload: String,
    ) -> Result<(), String> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Pending {
                id,
                kind,
                payload,
                done,
            })
            .await
            .map_err(|_| "the receipt writer stopped".to_string())?;
        wait.await
            .map_err(|_| "the receipt writer stopped".to_string())?
    }
}
