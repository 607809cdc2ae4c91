//! PostgreSQL: replicas answer gate checks from memory. Every committed gate
//! change is announced with `NOTIFY` in its own transaction (the store does
//! it); each replica listens on a dedicated connection and re-reads the gate
//! that changed. Memory is trusted only while that connection is up and every
//! gate has been re-read since it (re)connected; until then every check reads
//! the gate's row, as it did before there was a cache.
//!
//! Re-reading takes the engine's write turn, the same turn a local change holds
//! from before its transaction until it is in memory: so a re-read never lands
//! between another change's commit and its `remember`, and the last announcement
//! of a gate always leaves memory with the row as it stands.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Engine;
use crate::gate::GateKey;
use crate::store::{GateEvent, GateEvents, StoreError};

/// How often the listening connection is asked for a round trip: a connection
/// that went silent is noticed within this plus [`PING_TIMEOUT`].
const PING_EVERY: Duration = Duration::from_secs(2);
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// Connecting and subscribing may take this long before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Waits between reconnections, doubling from the first to the last.
const FIRST_RETRY: Duration = Duration::from_secs(2);
const LAST_RETRY: Duration = Duration::from_secs(30);

impl Engine {
    /// Whether a check may answer from the gates in memory.
    pub(super) fn answers_from_memory(&self) -> bool {
        self.cache_trusted.load(Ordering::Acquire)
    }

    fn trust_memory(&self, trusted: bool) {
        self.cache_trusted.store(trusted, Ordering::Release);
        self.metrics.gate_cache_trusted.set(i64::from(trusted));
    }

    /// PostgreSQL: keeps the gates in memory current with every replica's
    /// changes, reconnecting with backoff when the listening connection is lost.
    /// Runs until dropped (at shutdown). `url` is the store's.
    pub async fn follow_gates(&self, url: &str) {
        let mut retry = FIRST_RETRY;
        loop {
            let mut trusted = false;
            let lost = self.follow_once(url, &mut trusted).await;
            self.trust_memory(false);
            if trusted {
                retry = FIRST_RETRY;
            }
            tracing::warn!(error = %lost, ?retry, "not hearing gate changes: every check reads the store until reconnected");
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(LAST_RETRY);
        }
    }

    /// Listens, reloads every gate, trusts memory, and applies announcements
    /// until the connection is lost. Returns why it stopped.
    async fn follow_once(&self, url: &str, trusted: &mut bool) -> StoreError {
        // Listening first: a change committed during the reload is announced
        // after it and re-read then.
        let mut events = match GateEvents::connect(url, CONNECT_TIMEOUT).await {
            Ok(events) => events,
            Err(e) => return e,
        };
        if let Err(e) = self.reload_gates().await {
            return e;
        }
        self.trust_memory(true);
        *trusted = true;
        tracing::info!("hearing gate changes: checks answer from memory");
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            let failed = tokio::select! {
                event = events.next() => match event {
                    Ok(GateEvent::Changed(key)) => self.refresh_gate(&key).await.err(),
                    Ok(GateEvent::Unreadable(payload)) => {
                        tracing::warn!(%payload, "ignored an announcement that names no gate");
                        None
                    }
                    Err(e) => Some(e),
                },
                _ = ping.tick() => events.ping(PING_TIMEOUT).await.err(),
            };
            // A gate that could not be re-read may be stale in memory: start over.
            if let Some(e) = failed {
                return e;
            }
        }
    }

    /// Reads every gate into memory.
    async fn reload_gates(&self) -> Result<(), StoreError> {
        let _turn = self.write.lock().await;
        self.store
            .each_gate(|gate| self.memory().put_gate(&gate))
            .await?;
        self.metrics.gate_cache_reloads.inc();
        Ok(())
    }

    /// Reads one gate that another replica (or this one) changed.
    async fn refresh_gate(&self, key: &GateKey) -> Result<(), StoreError> {
        let _turn = self.write.lock().await;
        if let Some(gate) = self.store.load_gate(key).await? {
            self.memory().put_gate(&gate);
        }
        Ok(())
    }
}
