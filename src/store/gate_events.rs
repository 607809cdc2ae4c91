//! PostgreSQL only: every committed gate change is announced on a channel, so
//! that each replica can keep its gates in memory and re-read the one that
//! changed. `NOTIFY` is transactional: the announcement goes out at COMMIT and
//! never for a rollback, and it reaches every listener after the change is
//! visible to their reads.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use super::{Result, StoreError};
use crate::gate::GateKey;

/// The channel gate changes are announced on; the payload is the gate's key.
pub const GATES_CHANNEL: &str = "gatebot_gates";

/// The listening connection's `application_name`, so an operator can tell it
/// apart in `pg_stat_activity`.
pub const LISTENER_APPLICATION_NAME: &str = "gatebot gate events";

/// How a listener's own heartbeat on the channel begins (no gate key does).
const PING_PREFIX: &str = "ping ";

/// What came in on the channel.
pub enum GateEvent {
    Changed(GateKey),
    /// A heartbeat sent with [`GateEvents::ping`]: every change committed
    /// before it was sent has come in before it.
    Ping(String),
    /// A payload that is no gate key (someone else's NOTIFY on the channel).
    Unreadable(String),
}

/// A dedicated connection that listens on [`GATES_CHANNEL`]. It does not
/// reconnect by itself: a lost connection is an error, so that the caller knows
/// notifications may have been missed.
pub struct GateEvents {
    listener: PgListener,
}

impl GateEvents {
    /// Connects to `url` (the store's PostgreSQL URL) and starts listening,
    /// within `limit`.
    pub async fn connect(url: &str, limit: Duration) -> Result<Self> {
        tokio::time::timeout(limit, Self::listen(url))
            .await
            .unwrap_or_else(|_| Err(timed_out("connecting to listen for gate changes")))
    }

    async fn listen(url: &str) -> Result<Self> {
        let lock = super::LOCK_TIMEOUT.as_millis().to_string();
        let statement = super::STATEMENT_TIMEOUT.as_millis().to_string();
        let options = PgConnectOptions::from_str(url)?
            .application_name(LISTENER_APPLICATION_NAME)
            .options([("lock_timeout", &lock), ("statement_timeout", &statement)]);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.eager_reconnect(false);
        listener.listen(GATES_CHANNEL).await?;
        Ok(Self { listener })
    }

    /// The next announcement. An error (or the connection closing) means the
    /// connection is gone and announcements may have been missed.
    pub async fn next(&mut self) -> Result<GateEvent> {
        match self.listener.try_recv().await? {
            Some(n) => Ok(match n.payload().strip_prefix(PING_PREFIX) {
                Some(nonce) => GateEvent::Ping(nonce.to_string()),
                None => match GateKey::parse(n.payload(), None) {
                    Ok(key) => GateEvent::Changed(key),
                    Err(_) => GateEvent::Unreadable(n.payload().to_string()),
                },
            }),
            None => Err(lost(
                std::io::ErrorKind::ConnectionAborted,
                "the connection listening for gate changes was lost".into(),
            )),
        }
    }

    /// Announces a heartbeat `nonce` on the channel, from the listening
    /// connection, within `limit`: it comes back as [`GateEvent::Ping`] after
    /// every change committed before it. The round trip also notices a
    /// connection that went silent (a partition, a failover) without waiting
    /// for TCP to give up.
    pub async fn ping(&mut self, nonce: &str, limit: Duration) -> Result<()> {
        let trip = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(GATES_CHANNEL)
            .bind(format!("{PING_PREFIX}{nonce}"))
            .execute(&mut self.listener);
        match tokio::time::timeout(limit, trip).await {
            Ok(done) => done.map(drop).map_err(Into::into),
            Err(_) => Err(timed_out("a round trip on the gate-change listener")),
        }
    }
}

fn lost(kind: std::io::ErrorKind, what: String) -> StoreError {
    StoreError::Unavailable(sqlx::Error::Io(std::io::Error::new(kind, what)))
}

fn timed_out(what: &str) -> StoreError {
    lost(std::io::ErrorKind::TimedOut, format!("{what} timed out"))
}
