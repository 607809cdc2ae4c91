//! PostgreSQL: replicas answer gate checks from memory. Every committed gate
//! change is announced with `NOTIFY` in its own transaction (the store does
//! it); each replica listens on a dedicated connection and re-reads the gate
//! that changed. Memory is trusted only while that connection is up, every
//! gate has been re-read since it (re)connected, and the listener has shown
//! within [`STALE_AFTER`] that it is keeping up; otherwise every check reads
//! the gate's row, as it did before there was a cache.
//!
//! Keeping up is shown by a heartbeat: every [`PING_EVERY`] the listener
//! announces a ping on the channel itself. Announcements arrive in commit
//! order, so once its ping is back every change committed before the ping was
//! sent is in memory. A listener held up (a re-read that cannot finish, a
//! connection that stalls) sends or hears no ping, and memory stops being
//! trusted within [`STALE_AFTER`].
//!
//! Re-reading takes the engine's `applying` turn, the same turn a local change
//! holds across its COMMIT and `remember`: so a re-read never lands between
//! another change's commit and its `remember`, and the last announcement of a
//! gate always leaves memory with the row as it stands. It never waits for the
//! write turn, which a write may hold while it waits for a row lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::GateCache;
use crate::gate::GateKey;
use crate::store::{Backend, GateEvent, GateEvents, StoreError};

/// How often the listener sends its heartbeat (a ping on the channel that must
/// come back, and a round trip on its connection).
const PING_EVERY: Duration = Duration::from_millis(500);
/// A ping's round trip may take this long before the connection counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// Memory is trusted only while every change committed this long ago is known
/// to be in it.
pub const STALE_AFTER: Duration = Duration::from_secs(2);
/// How often the trust gauge is brought up to date with the heartbeat.
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// Pings sent and not yet back that are remembered (older ones are forgotten).
const PINGS_KEPT: usize = 16;
/// Connecting and subscribing may take this long before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Waits between reconnections, doubling from the first to the last.
const FIRST_RETRY: Duration = Duration::from_secs(2);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// Since when every committed change is known to be in memory: milliseconds
/// after `origin`, plus one (0: not yet). An atomic, because every check on
/// PostgreSQL reads it.
#[derive(Debug)]
pub(super) struct Heard {
    origin: Instant,
    at: AtomicU64,
}

impl Default for Heard {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            at: AtomicU64::new(0),
        }
    }
}

impl Heard {
    fn set(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.origin).as_millis() as u64 + 1;
        self.at.fetch_max(ms, Ordering::AcqRel);
    }

    fn within(&self, limit: Duration) -> bool {
        let at = self.at.load(Ordering::Acquire);
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        at != 0 && now.saturating_sub(at) < limit.as_millis() as u64
    }
}

impl<'e> GateCache<'e> {
    /// Whether a check may answer from the gates in memory.
    pub(super) fn answers_from_memory(self) -> bool {
        self.engine.cache_trusted.load(Ordering::Acquire)
            && (self.engine.store.backend() == Backend::Sqlite
                || self.engine.heard.within(STALE_AFTER))
    }

    fn trust_memory(self, trusted: bool) {
        self.engine.cache_trusted.store(trusted, Ordering::Release);
        self.engine
            .metrics
            .gate_cache_trusted
            .set(i64::from(self.answers_from_memory()));
    }

    /// PostgreSQL: keeps the gates in memory current with every replica's
    /// changes, reconnecting with backoff when the listening connection is lost,
    /// and keeps `gatebot_gate_cache_trusted` saying whether checks answer from
    /// memory. Runs until dropped (at shutdown). `url` is the store's.
    pub async fn follow_gates(self, url: &str) {
        tokio::join!(self.follow(url), self.watch_trust());
    }

    /// Brings the trust gauge up to date as the heartbeat comes or stops,
    /// apart from the listener, which may be the one held up.
    async fn watch_trust(self) {
        let mut trusted = self.answers_from_memory();
        let mut tick = tokio::time::interval(WATCH_EVERY);
        loop {
            tick.tick().await;
            let now = self.answers_from_memory();
            self.engine.metrics.gate_cache_trusted.set(i64::from(now));
            if now != trusted && self.engine.cache_trusted.load(Ordering::Acquire) {
                if now {
                    tracing::info!("gate changes heard again: checks answer from memory");
                } else {
                    tracing::warn!(after = ?STALE_AFTER, "gate changes not applied in time: every check reads the store");
                }
            }
            trusted = now;
        }
    }

    async fn follow(self, url: &str) {
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
    async fn follow_once(self, url: &str, trusted: &mut bool) -> StoreError {
        // Listening first: a change committed during the reload is announced
        // after it and re-read then.
        let mut events = match GateEvents::connect(url, CONNECT_TIMEOUT).await {
            Ok(events) => events,
            Err(e) => return e,
        };
        let reloaded_from = Instant::now();
        if let Err(e) = self.reload_gates().await {
            return e;
        }
        self.engine.heard.set(reloaded_from);
        self.trust_memory(true);
        *trusted = true;
        tracing::info!("hearing gate changes: checks answer from memory");
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        let mut pings = Pings::new(self.engine.store.replica());
        loop {
            let failed = tokio::select! {
                event = events.next() => match event {
                    Ok(GateEvent::Changed(key)) => self.refresh_gate(&key).await.err(),
                    Ok(GateEvent::Ping(nonce)) => {
                        if let Some(sent) = pings.back(&nonce) {
                            self.engine.heard.set(sent);
                        }
                        None
                    }
                    Ok(GateEvent::Unreadable(payload)) => {
                        tracing::warn!(%payload, "ignored an announcement that names no gate");
                        None
                    }
                    Err(e) => Some(e),
                },
                _ = ping.tick() => {
                    let nonce = pings.send();
                    events.ping(&nonce, PING_TIMEOUT).await.err()
                }
            };
            // A gate that could not be re-read may be stale in memory: start over.
            if let Some(e) = failed {
                return e;
            }
        }
    }

    /// Reads every gate into memory.
    async fn reload_gates(self) -> Result<(), StoreError> {
        let _applying = self.engine.applying.lock().await;
        self.engine
            .store
            .loading()
            .each_gate(|gate| self.engine.memory().put_gate(&gate))
            .await?;
        self.engine.clusters().load_passages().await?;
        self.engine.metrics.gate_cache_reloads.inc();
        Ok(())
    }

    /// Reads one gate that another replica (or this one) changed.
    async fn refresh_gate(self, key: &GateKey) -> Result<(), StoreError> {
        let _applying = self.engine.applying.lock().await;
        if let Some(gate) = self.engine.store.gates().load_gate(key).await? {
            self.engine.memory().put_gate(&gate);
        }
        // A pin announces its gate; a passage may have come with it.
        self.engine.clusters().refresh_passages(key).await
    }
}

/// This listener's pings on their way: their nonces and when each was sent.
struct Pings<'a> {
    replica: &'a str,
    next: u64,
    sent: VecDeque<(u64, Instant)>,
}

impl<'a> Pings<'a> {
    fn new(replica: &'a str) -> Self {
        Self {
            replica,
            next: 0,
            sent: VecDeque::new(),
        }
    }

    /// A new ping's nonce: this replica's name and a number.
    fn send(&mut self) -> String {
        self.next += 1;
        if self.sent.len() == PINGS_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back((self.next, Instant::now()));
        format!("{} {}", self.replica, self.next)
    }

    /// When the ping `nonce` was sent, if it is one of this listener's (other
    /// replicas' pings come in too).
    fn back(&mut self, nonce: &str) -> Option<Instant> {
        let (replica, number) = nonce.rsplit_once(' ')?;
        let number: u64 = number.parse().ok().filter(|_| replica == self.replica)?;
        let sent = self.sent.iter().find(|(n, _)| *n == number).map(|s| s.1);
        self.sent.retain(|(n, _)| *n > number);
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_listeners_pings_count() {
        let mut pings = Pings::new("replica-a");
        let first = pings.send();
        let second = pings.send();
        assert!(pings.back("replica-b 1").is_none(), "another replica's");
        assert!(pings.back(&second).is_some());
        assert!(pings.back(&first).is_none(), "older than one back");
        for _ in 0..PINGS_KEPT * 2 {
            pings.send();
        }
        assert_eq!(pings.sent.len(), PINGS_KEPT, "bounded");
    }
}
