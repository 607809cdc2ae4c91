//! Durable state in SQLite (default, embedded) or PostgreSQL (several replicas).
//!
//! One sqlx `Any` pool and runtime queries written in the dialect both backends
//! share (`$n` parameters, `ON CONFLICT`, `RETURNING`, partial unique indexes), so
//! there is one code path to test. Only migrations, BEGIN and job claiming differ.

mod checks;
mod deployments;
mod freezes;
mod gate_events;
mod gates;
mod history;
mod loading;
mod migrations;
mod named;
mod notify;
mod observations;
mod origins;
pub mod pages;
mod passages;
mod progress;
mod protection;
mod prs;
mod queue;
mod replicas;
mod retention;
mod rows;
mod sessions;
mod slack;
mod teams;
pub mod tickets;
mod tx;
#[cfg(test)]
mod tx_tests;
mod votes;
mod waits;
mod web;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::any::{AnyArguments, AnyPoolOptions, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, AnyPool, Row};
use tokio::sync::Mutex;

use crate::gate::{
    Actor, Answer, AuditAction, CanaryRef, Check, DeliveryId, Gate, GateKey, GateStatus, Millis,
    Source,
};

pub use checks::CheckRunRow;
pub use deployments::{DeploymentRow, Reserved};
pub use gate_events::{GateEvent, GateEvents, LISTENER_APPLICATION_NAME};
pub use named::{Link, NamedGate, NamedSpec};
pub use notify::WaitBrief;
pub use origins::CanaryTie;
pub use pages::CanarySeen;
pub use passages::Passage;
pub use protection::ProtectionRequest;
pub use prs::StatusComment;
pub use queue::{Claim, Delivery, Job, NewJob, QueueItem, QueueName};
pub use replicas::{DEAD_AFTER, HEARTBEAT_EVERY};
pub use retention::Retention;
pub use rows::{AuditEntry, EventRow, ObservationRow, WaitRow};
pub use slack::{SlackDecision, SlackEnding, SlackFinal, SlackMessage};
pub use teams::{TeamsCard, TeamsConversation};
pub use tx::{WriteHealth, WriteTx};
pub use waits::{NewWait, OpenWait, PAGE as WAIT_PAGE};
pub use web::AuditSearch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// Errors callers branch on. Everything else is the store being unavailable.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the store is unavailable: {0}")]
    Unavailable(sqlx::Error),
    /// A lock could not be had in time (PostgreSQL's `lock_timeout`, a
    /// deadlock): nothing was written, and trying again shortly may succeed.
    #[error("the store is busy: {0}")]
    Contended(sqlx::Error),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// A write shared with others (a group commit) failed or was not made.
    #[error("the store is unavailable: {0}")]
    Shared(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        // lock_not_available, deadlock_detected, serialization_failure.
        let contended = e
            .as_database_error()
            .and_then(|d| d.code())
            .is_some_and(|c| matches!(c.as_ref(), "55P03" | "40P01" | "40001"));
        if contended {
            Self::Contended(e)
        } else {
            Self::Unavailable(e)
        }
    }
}

impl StoreError {
    /// Whether the same write may succeed when tried again in a moment.
    pub fn contended(&self) -> bool {
        matches!(self, Self::Contended(_))
    }

    /// Whether the failure passes by itself: a lock or statement timeout, a
    /// deadlock or serialization failure, a lost or refused connection, the
    /// pool out of connections, SQLite busy or locked. Nothing was written and
    /// the same work applies once the store recovers, so a delivery failing
    /// so is tried again for as long as it takes; anything else (a constraint,
    /// unreadable data) would fail the same way every time.
    pub fn transient(&self) -> bool {
        match self {
            Self::Contended(_) | Self::Shared(_) => true,
            Self::Corrupt(_) => false,
            Self::Unavailable(e) => transient_sqlx(e),
        }
    }
}

fn transient_sqlx(e: &sqlx::Error) -> bool {
    use sqlx::Error as E;
    match e {
        E::PoolTimedOut | E::PoolClosed | E::Io(_) | E::Tls(_) | E::WorkerCrashed => true,
        E::Database(d) => d.code().is_some_and(|code| transient_code(&code)),
        _ => false,
    }
}

/// PostgreSQL's SQLSTATE (five characters) or SQLite's result code (a
/// number, often extended) of a failure that passes.
fn transient_code(code: &str) -> bool {
    if code.len() == 5 {
        // 08: connection exceptions; 55P03 lock_not_available; 57014
        // query_canceled (statement_timeout); 57P01-57P03 the server shutting
        // down or starting; 53300 too_many_connections; 40001
        // serialization_failure; 40P01 deadlock_detected.
        return code.starts_with("08")
            || matches!(
                code,
                "55P03" | "57014" | "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01"
            );
    }
    // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6), in any extended form.
    code.parse::<i64>().is_ok_and(|n| matches!(n & 0xff, 5 | 6))
}

/// PostgreSQL: how long a statement may wait for a row lock, and run at all,
/// before it fails. A gate row locked by a session that went away must not
/// stall a write (and what waits behind it) for longer than this; both stay
/// far below Flagger's interval.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(1);
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// SQLite has one writer; taking turns here avoids SQLITE_BUSY on lock upgrades.
    write_lock: Option<Arc<Mutex<()>>>,
    /// How the latest real write went, for readiness.
    writes: Arc<WriteHealth>,
    /// This process's name as a lease owner and in the `replicas` table.
    replica: Arc<str>,
    /// The latest write probe, shared so that a flood of `/readyz` costs one write a second.
    probe: Arc<Mutex<Option<replicas::Probe>>>,
}

/// SQLite frees pages that retention empties only with `auto_vacuum`
/// incremental; a file made without it is rewritten once (`VACUUM`).
async fn incremental_vacuum_on(pool: &AnyPool) -> anyhow::Result<()> {
    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
        .fetch_one(pool)
        .await?;
    if mode == 2 {
        return Ok(());
    }
    let mut conn = pool.acquire().await?;
    let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&mut *conn)
        .await?;
    if pages > 8 {
        tracing::info!(
            pages,
            "rewriting the SQLite file once so that it can shrink"
        );
    }
    sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
        .execute(&mut *conn)
        .await?;
    sqlx::query("VACUUM").execute(&mut *conn).await?;
    Ok(())
}

/// The store's parts, each named for what it keeps and written in one file.
/// Each is a view of the one [`Store`], which keeps only the connection.
macro_rules! parts {
    ($( $(#[$doc:meta])* $module:ident::$part:ident by $name:ident; )*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy)]
            pub struct $part<'s> {
                store: &'s Store,
            }
        )*
        impl Store {
            $(
                pub fn $name(&self) -> $part<'_> {
                    $part { store: self }
                }
            )*
        }
    };
}

parts! {
    /// Gates as stored: read, locked, written, announced, pinned, expired.
    gates::Gates by gates;
    /// The last check of every canary at every gate.
    observations::Observations by observations;
    /// Waits: started, ended, listed, and their timers.
    waits::Waits by waits;
    /// The audit log, Flagger's events, and what a delivery changed.
    history::History by history;
    /// Every gate and last check, read once at start.
    loading::Loading by loading;
    /// GitHub: PR heads and the check run per PR gate.
    checks::CheckRuns by check_runs;
    /// GitHub: Deployments per canary revision of a PR.
    deployments::Deployments by deployments;
    /// Freezes: made, lifted, in force.
    freezes::Freezes by freezes;
    /// Gates pipelines create by name, and their announcements.
    named::NamedGates by named;
    /// What the notifier remembers: PRs GitHub no longer knows, waits not yet announced.
    notify::Notices by notices;
    /// Canaries tied to the PRs that brought their revisions.
    origins::Origins by origins;
    /// Gates and canaries read by key range, a page at a time.
    pages::Pages by pages;
    /// Where a commit was promoted, cluster by cluster.
    passages::Passages by passages;
    /// A canary's progress from its events.
    progress::Progress by progress;
    /// GitHub: deployment protection requests.
    protection::Protection by protection;
    /// Per PR: its author, last push and status comment.
    prs::Prs by prs;
    /// The durable inbox and outbox: leases, retries, settling.
    queue::Queues by queues;
    /// Replicas: heartbeats, the clock, write probes, leases given back.
    replicas::Replicas by replicas;
    /// Retention: old rows pruned in batches, and the store's size.
    retention::Pruning by retention;
    /// The pages' sign-outs and OAuth states used.
    sessions::Sessions by sessions;
    /// Slack: each message's post, decision, ending and final state.
    slack::SlackRows by slack;
    /// Teams: conversations and cards.
    teams::TeamsRows by teams;
    /// The change requests opened for waiting canaries, followed and closed.
    tickets::Tickets by tickets;
    /// Quorum votes.
    votes::Votes by votes;
    /// The pages' reads: open waits by page, audit search.
    web::WebReads by web;
}

impl Store {
    /// Connects and migrates. `url` is `sqlite://path` (file and directory created
    /// when missing) or `postgres://…`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::open(url, None).await
    }

    /// `connect` with a pool of at most `pool_size` connections (tests).
    async fn open(url: &str, pool_size: Option<u32>) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let (backend, url) = normalise_url(url)?;
        if let Some(dir) = sqlite_dir(&url) {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the directory {}", dir.display()))?;
        }
        let options = AnyPoolOptions::new()
            .acquire_timeout(Duration::from_secs(3))
            .max_connections(pool_size.unwrap_or(match backend {
                Backend::Sqlite => 8,
                Backend::Postgres => 16,
            }))
            .min_connections(1)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    let settings = match backend {
                        Backend::Sqlite => [
                            "PRAGMA journal_mode = WAL",
                            "PRAGMA busy_timeout = 5000",
                            "PRAGMA foreign_keys = ON",
                            // 512 KiB of pages per connection, not SQLite's 2 MiB:
                            // the gates are read from the engine's memory, so this
                            // cache serves only writes and the start-up load, with
                            // the kernel's page cache behind it. At 8 connections
                            // the default kept up to 16 MiB of the load's pages.
                            "PRAGMA cache_size = -512",
                        ]
                        .map(String::from)
                        .to_vec(),
                        Backend::Postgres => timeouts(LOCK_TIMEOUT, STATEMENT_TIMEOUT),
                    };
                    for setting in &settings {
                        sqlx::query(setting).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            });
        let pool = options
            .connect(&url)
            .await
            .with_context(|| format!("cannot open the {} store", backend.as_str()))?;
        if backend == Backend::Sqlite {
            incremental_vacuum_on(&pool)
                .await
                .context("cannot set SQLite's auto_vacuum")?;
        }
        migrate(&pool, backend)
            .await
            .context("cannot migrate the store")?;
        Ok(Self {
            pool,
            backend,
            write_lock: (backend == Backend::Sqlite).then(|| Arc::new(Mutex::new(()))),
            writes: Arc::default(),
            replica: replicas::new_replica_name().into(),
            probe: Arc::default(),
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Starts a write transaction. Every write goes through here.
    pub async fn begin(&self) -> Result<WriteTx<'_>> {
        self.begin_recorded(Some(&self.writes)).await
    }

    /// `begin`, recording the outcome for readiness only when `writes` is given.
    async fn begin_recorded<'a>(&'a self, writes: Option<&'a WriteHealth>) -> Result<WriteTx<'a>> {
        let turn = match &self.write_lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        let conn = match self.pool.acquire().await {
            Ok(conn) => conn,
            Err(e) => {
                if let Some(w) = writes {
                    w.record(Err(&e));
                }
                return Err(e.into());
            }
        };
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        WriteTx::start(conn, begin, writes, turn).await
    }

    /// How the latest real writes went.
    pub fn write_health(&self) -> &WriteHealth {
        &self.writes
    }

    /// This process's name as a lease owner.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Runs one statement in a transaction of its own.
    pub(super) async fn execute_alone<'q>(
        &self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        query.execute(tx.conn()).await?;
        tx.commit().await
    }

    /// The first column of the first row `query` finds, if it finds one.
    pub(super) async fn first_value<'q, T>(
        &self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<Option<T>>
    where
        T: for<'r> sqlx::Decode<'r, Any> + sqlx::Type<Any>,
    {
        let row = query.fetch_optional(&self.pool).await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }
}

/// One gate with its votes and pins, read on `conn`; `lock` follows the
/// gate's SELECT (" FOR UPDATE" or "").
async fn read_gate(conn: &mut AnyConnection, key: &GateKey, lock: &str) -> Result<Option<Gate>> {
    let Some(row) = sqlx::query(&format!("SELECT * FROM gates WHERE key = $1{lock}"))
        .bind(key.to_string())
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let mut gate = rows::gate_from_row(&row)?;
    if votes::has_votes(&row)? {
        let v = votes::votes_on(conn, key).await?;
        votes::attach(&mut gate, v);
    }
    if let Some(id) = gate.status.pins_id().map(str::to_string) {
        let pins = sqlx::query("SELECT canary, checksum FROM pins WHERE approval_id = $1")
            .bind(id)
            .fetch_all(&mut *conn)
            .await?;
        if let Some(mine) = gate.status.pins_mut() {
            for pin in pins {
                mine.insert(pin.try_get("canary")?, pin.try_get("checksum")?);
            }
        }
    }
    Ok(Some(gate))
}

/// The statements that set a PostgreSQL connection's timeouts (0: none).
fn timeouts(lock: Duration, statement: Duration) -> Vec<String> {
    vec![
        format!("SET lock_timeout = {}", lock.as_millis()),
        format!("SET statement_timeout = {}", statement.as_millis()),
    ]
}

/// Runs the migrations. On PostgreSQL on a connection without the timeouts: a
/// migration may rightly take long, and a replica starting beside another waits
/// for its migration lock. The connection is closed after, not pooled.
async fn migrate(pool: &AnyPool, backend: Backend) -> Result<(), sqlx::migrate::MigrateError> {
    let mut conn = pool.acquire().await?;
    conn.close_on_drop();
    if backend == Backend::Postgres {
        for setting in timeouts(Duration::ZERO, Duration::ZERO) {
            sqlx::query(&setting).execute(&mut *conn).await?;
        }
    }
    migrations::migrator(backend).await?.run(&mut *conn).await
}

fn actor_from(row: &AnyRow, name: &str, source: &str) -> Result<Option<Actor>> {
    let name: Option<String> = row.try_get(name)?;
    let source: Option<String> = row.try_get(source)?;
    Ok(name.map(|n| Actor::new(n, Source::parse(source.as_deref().unwrap_or("api")))))
}

fn normalise_url(url: &str) -> anyhow::Result<(Backend, String)> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((Backend::Postgres, url.to_string()));
    }
    let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    else {
        anyhow::bail!("GATEBOT_DATABASE_URL must start with sqlite:// or postgres://");
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() {
        anyhow::bail!("GATEBOT_DATABASE_URL names no SQLite file: write sqlite://data/gatebot.db");
    }
    let query = if query.contains("mode=") {
        query.to_string()
    } else if query.is_empty() {
        "mode=rwc".to_string()
    } else {
        format!("{query}&mode=rwc")
    };
    Ok((Backend::Sqlite, format!("sqlite://{path}?{query}")))
}

/// One server per SQLite file: an exclusive advisory lock on `<file>.lock`,
/// held while the returned file is (keep it for the process's life; the OS
/// lets go when the process ends, however it ends). Two servers on one file
/// would each trust their own memory and disagree for seconds. `None` for
/// PostgreSQL, where replicas are made to share the store.
pub fn lock_sqlite_file(url: &str) -> anyhow::Result<Option<std::fs::File>> {
    let (backend, url) = normalise_url(url)?;
    if backend != Backend::Sqlite {
        return Ok(None);
    }
    let Some(path) = url
        .strip_prefix("sqlite://")
        .and_then(|rest| rest.split('?').next())
        .filter(|p| *p != ":memory:" && !url.contains("mode=memory"))
    else {
        return Ok(None);
    };
    if let Some(dir) = sqlite_dir(&url) {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    let lock_path = format!("{path}.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open the lock file {lock_path}"))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another gatebot serves the SQLite file {path} (it holds {lock_path}): two servers on one SQLite file would disagree; stop the other one, or run several on PostgreSQL (GATEBOT_DATABASE_URL=postgres://…)"
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {lock_path}"))
        }
    }
}

fn sqlite_dir(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite://")?.split('?').next()?;
    std::path::Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_store_errors_are_told_from_lasting_ones() {
        for code in [
            "55P03", "57014", "40001", "40P01", "08006", "08001", "57P01", "53300", "5", "6",
            "517", "262",
        ] {
            assert!(transient_code(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02", "19", "2067", "1", "11"] {
            assert!(!transient_code(code), "{code}");
        }
        let unavailable = StoreError::Unavailable;
        assert!(unavailable(sqlx::Error::PoolTimedOut).transient());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(unavailable(sqlx::Error::Io(io)).transient());
        assert!(StoreError::Shared("the group commit failed".into()).transient());
        assert!(!unavailable(sqlx::Error::RowNotFound).transient());
        assert!(!StoreError::Corrupt("a bad key".into()).transient());
    }

    #[test]
    fn sqlite_urls_create_files() {
        let (b, u) = normalise_url("sqlite://data/gatebot.db").unwrap();
        assert_eq!(b, Backend::Sqlite);
        assert_eq!(u, "sqlite://data/gatebot.db?mode=rwc");
        assert_eq!(sqlite_dir(&u), Some("data".into()));
        assert!(normalise_url("mysql://x").is_err());
        assert_eq!(
            normalise_url("postgres://u@h/db").unwrap().0,
            Backend::Postgres
        );
    }
}
