//! A write transaction that fails must leave its pooled connection clean: the
//! next write on the pool really commits. The pool has one connection, so the
//! next write gets the very connection the failure happened on.

use sqlx::{Connection, Executor, Row, SqliteConnection};

use super::Store;

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

    /// Whether a committed kv row is visible to another connection.
    async fn stored(&self, k: &str) -> bool {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM kv WHERE k = $1")
            .bind(k)
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
        conn.execute("INSERT INTO kv (k, v, updated_at) VALUES ('elsewhere', 'x', 0)")
            .await
            .is_ok()
    }
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

    f.store
        .kv_put("after", "1", 1)
        .await
        .expect("the next write");
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
        "CREATE TRIGGER boom BEFORE INSERT ON kv WHEN NEW.k = 'boom' \
         BEGIN SELECT RAISE(ROLLBACK, 'boom'); END",
    )
    .await;
    {
        let mut tx = f.store.begin().await.unwrap();
        let failed = tx
            .conn()
            .execute("INSERT INTO kv (k, v, updated_at) VALUES ('boom', 'x', 0)")
            .await;
        assert!(failed.is_err(), "the trigger rolls back");
        // Dropped here, as by `?`.
    }
    {
        let mut tx = f.store.begin().await.unwrap();
        tx.conn()
            .execute("INSERT INTO kv (k, v, updated_at) VALUES ('dropped', 'x', 0)")
            .await
            .unwrap();
        // Dropped uncommitted, as by an early return or a cancelled future.
    }
    f.store
        .kv_put("after", "1", 1)
        .await
        .expect("the next write");
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
        .execute("INSERT INTO kv (k, v, updated_at) VALUES ('undone', 'x', 0)")
        .await
        .unwrap();
    tx.rollback().await;
    f.store.kv_put("after", "1", 1).await.unwrap();
    assert!(f.stored("after").await);
    assert!(!f.stored("undone").await);
}
