//! The SQLite and PostgreSQL migrations build the same schema: the same tables,
//! columns (name and NOT NULL) and named indexes, since one set of queries runs on both.

use std::collections::BTreeSet;

use gatebot_testkit::harness::{postgres_url, Backend, TestDb};
use sqlx::{AnyConnection, Connection, Row};

/// (table, column, not null) and (table, index) as each store reports them.
#[derive(Debug, PartialEq, Eq)]
struct Schema {
    columns: BTreeSet<(String, String, bool)>,
    indexes: BTreeSet<(String, String)>,
}

async fn migrated(backend: Backend) -> (TestDb, AnyConnection) {
    let db = TestDb::new(backend).await;
    gatebot::testing::store::Store::connect(&db.url)
        .await
        .expect("migrates")
        .close()
        .await;
    sqlx::any::install_default_drivers();
    let conn = AnyConnection::connect(&db.url).await.unwrap();
    (db, conn)
}

async fn sqlite_schema(conn: &mut AnyConnection) -> Schema {
    let rows = sqlx::query(
        "SELECT m.name AS t, c.name AS c, c.\"notnull\" OR c.pk AS nn FROM sqlite_master m \
         JOIN pragma_table_info(m.name) c WHERE m.type = 'table' \
         AND m.name NOT LIKE 'sqlite_%' AND m.name NOT LIKE '_sqlx_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let columns = rows
        .iter()
        .map(|r| (r.get("t"), r.get("c"), r.get::<i64, _>("nn") != 0))
        .collect();
    let rows = sqlx::query(
        "SELECT tbl_name AS t, name AS i FROM sqlite_master WHERE type = 'index' \
         AND name NOT LIKE 'sqlite_autoindex_%' AND tbl_name NOT LIKE '_sqlx_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let indexes = rows.iter().map(|r| (r.get("t"), r.get("i"))).collect();
    Schema { columns, indexes }
}

async fn postgres_schema(conn: &mut AnyConnection) -> Schema {
    let rows = sqlx::query(
        "SELECT table_name::text AS t, column_name::text AS c, \
         (is_nullable = 'NO')::int AS nn FROM information_schema.columns \
         WHERE table_schema = 'public' AND table_name NOT LIKE '\\_sqlx\\_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let columns = rows
        .iter()
        .map(|r| (r.get("t"), r.get("c"), r.get::<i32, _>("nn") != 0))
        .collect();
    // Primary keys and UNIQUE columns are implicit indexes in SQLite too.
    let rows = sqlx::query(
        "SELECT tablename::text AS t, indexname::text AS i FROM pg_indexes \
         WHERE schemaname = 'public' AND tablename NOT LIKE '\\_sqlx\\_%' \
         AND indexname NOT LIKE '%\\_pkey' AND indexname NOT LIKE '%\\_key'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let indexes = rows.iter().map(|r| (r.get("t"), r.get("i"))).collect();
    Schema { columns, indexes }
}

fn only<T: Ord + Clone>(a: &BTreeSet<T>, b: &BTreeSet<T>) -> Vec<T> {
    a.difference(b).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn sqlite_and_postgres_schemas_are_the_same() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let (_lite_db, mut lite) = migrated(Backend::Sqlite).await;
    let (_pg_db, mut pg) = migrated(Backend::Postgres).await;
    let lite = sqlite_schema(&mut lite).await;
    let pg = postgres_schema(&mut pg).await;
    assert!(
        lite == pg,
        "columns only in SQLite: {:?}\ncolumns only in PostgreSQL: {:?}\n\
         indexes only in SQLite: {:?}\nindexes only in PostgreSQL: {:?}",
        only(&lite.columns, &pg.columns),
        only(&pg.columns, &lite.columns),
        only(&lite.indexes, &pg.indexes),
        only(&pg.indexes, &lite.indexes),
    );
    assert!(lite
        .columns
        .iter()
        .any(|(t, c, _)| t == "replicas" && c == "seen_at"));
}
