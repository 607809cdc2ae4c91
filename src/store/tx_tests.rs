//! A write transaction that fails must leave its pooled connection clean: the
//! next write on the pool really commits. The pool has one connection, so the
//! next write gets the very connection the failure happened on.

use sqlx::{Connection, Executor, Row, SqliteConnection};

use super::Store;
use crate::gate::{PrNumber, RepoName};

struct Fixture {
    store: Store,
    url: String,
    _dir: tempfile::TempDir,
}

async fn one_connection_store() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}/gatebot.db", dir.path().display());
    let store = Store::open(&url, Some(1)).await.expect("store");
    Fixture {
        store,
        url,
        _dir: dir,
    }
}

impl Fixture {
    /// A connection of its own, outside the store's pool.
    async fn fresh(&self) -> SqliteConnection {
        SqliteConnection::connect(&self.url).await.expect("connect")
    }

    async fn setup(&self, sql: &str) {
        self.fresh().await.execute(sql).await.expect("setup");
    }

    /// A real write through the store, in a transaction of its own: a PR
    /// author row whose login is `login`.
    async fn write(&self, login: &str) -> super::Result<()> {
        let repo: RepoName = "acme/shop".parse().expect("repo");
        self.store
            .prs()
            .remember_pr_author(&repo, PrNumber(1), login, 1)
            .await
    }

    /// Whether a committed row with this login is visible to another connection.
    async fn stored(&self, login: &str) -> bool {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM pr_authors WHERE login = $1")
            .bind(login)
            .fetch_one(&mut self.fresh().await)
            .await
            .expect("read");
        row.get::<i64, _>("n") == 1
    }

    /// Whether another connection can write at once (nobody holds the write lock).
    async fn can_write_elsewhere(&self) -> bool {
        let mut conn = self.fresh().await;
        conn.execute("PRAGMA busy_timeout = 0")
            .await
            .expect("pragma");
        conn.execute(insert_author(90, "elsewhere").as_str())
            .await
            .is_ok()
    }
}

/// A raw insert of a PR author row, as a write inside a transaction.
fn insert_author(number: u32, login: &str) -> String {
    format!(
        "INSERT INTO pr_authors (repo, number, login, learned_at) \
         VALUES ('acme/raw', {number}, '{login}', 0)"
    )
}

/// COMMIT itself fails (a deferred foreign key), and SQLite keeps the
/// transaction open: it must be ended, not pooled mid-transaction.
#[tokio::test]
async fn failed_commit_returns_its_connection_clean() {
    let f = one_connection_store().await;
    f.setup(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY); \
         CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
    )
    .await;
    let mut tx = f.store.begin().await.unwrap();
    tx.conn()
        .execute("INSERT INTO child (p) VALUES (1)")
        .await
        .expect("deferred: accepted until COMMIT");
    let error = tx.commit().await.expect_err("COMMIT fails");
    assert!(error.to_string().contains("FOREIGN KEY"), "{error}");
    assert!(
        f.store
            .write_health()
            .recent_failure(std::time::Duration::from_secs(60))
            .is_some(),
        "the failure is recorded for readiness"
    );

    f.write("after").await.expect("the next write");
    assert!(f.stored("after").await, "the next write really committed");
    assert!(f.can_write_elsewhere().await, "no write lock left behind");
    assert!(
        f.store
            .write_health()
            .recent_failure(std::time::Duration::from_secs(60))
            .is_none(),
        "a later success clears it"
    );
}

/// SQLite rolls the whole transaction back by itself (as on a full disk), so
/// the ROLLBACK that follows fails. Then another transaction ends early. Neither
/// may leave the connection inside a transaction that never commits.
#[tokio::test]
async fn transaction_ended_by_sqlite_returns_its_connection_clean() {
    let f = one_connection_store().await;
    f.setup(
        "CREATE TRIGGER boom BEFORE INSERT ON pr_authors WHEN NEW.login = 'boom' \
         BEGIN SELECT RAISE(ROLLBACK, 'boom'); END",
    )
    .await;
    {
        let mut tx = f.store.begin().await.unwrap();
        let failed = tx.conn().execute(insert_author(2, "boom").as_str()).await;
        assert!(failed.is_err(), "the trigger rolls back");
        // Dropped here, as by `?`.
    }
    {
        let mut tx = f.store.begin().await.unwrap();
        tx.conn()
            .execute(insert_author(3, "dropped").as_str())
            .await
            .unwrap();
        // Dropped uncommitted, as by an early return or a cancelled future.
    }
    f.write("after").await.expect("the next write");
    assert!(f.stored("after").await, "the next write really committed");
    assert!(!f.stored("dropped").await, "the dropped one did not");
    assert!(f.can_write_elsewhere().await, "no write lock left behind");
}

/// A transaction with nothing to write ends cleanly and keeps its connection.
#[tokio::test]
async fn rollback_ends_the_transaction() {
    let f = one_connection_store().await;
    let mut tx = f.store.begin().await.unwrap();
    tx.conn()
        .execute(insert_author(4, "undone").as_str())
        .await
        .unwrap();
    tx.rollback().await;
    f.write("after").await.unwrap();
    assert!(f.stored("after").await);
    assert!(!f.stored("undone").await);
}
