//! A row lock held from a second PostgreSQL connection, as a client cut off
//! mid-transaction leaves it: `SELECT … FOR UPDATE` in a transaction that
//! stays open until the test lets it go.

use sqlx::{Connection, PgConnection};

pub struct RowLock {
    conn: PgConnection,
    /// How many rows it holds.
    pub rows: u64,
}

impl RowLock {
    /// Locks the `gates` rows whose key is LIKE `key` (`%` for any run of
    /// characters) on the database at `url`.
    pub async fn gates(url: &str, key: &str) -> Self {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        let locked = sqlx::query("SELECT key FROM gates WHERE key LIKE $1 FOR UPDATE")
            .bind(key)
            .execute(&mut conn)
            .await
            .unwrap();
        Self {
            conn,
            rows: locked.rows_affected(),
        }
    }

    /// Ends the transaction, and with it the lock.
    pub async fn release(mut self) {
        sqlx::query("ROLLBACK")
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}
