//! Replicas answer gate checks from memory (PostgreSQL): a gate change on one
//! replica reaches the others' memory by LISTEN/NOTIFY, and while a replica
//! cannot hear those announcements it reads the store on every check.
//! These need GATEBOT_TEST_POSTGRES_URL (`bash .ci/run` provides it).

use std::time::{Duration, Instant};

use gatebot_testkit::harness::{
    client, eventually, postgres_url, Backend, TestDb, TestServer, ADMIN_TOKEN,
};
use serde_json::json;
use sqlx::Connection;

/// The promise: a change made on one replica is seen by another within this.
const SEEN_WITHIN: Duration = Duration::from_millis(100);
const WAIT: Duration = Duration::from_secs(10);

fn skip() -> bool {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return true;
    }
    false
}

async fn replica(db: &TestDb) -> TestServer {
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    TestServer::start(config, gatebot::Options::default()).await
}

fn trusted(server: &TestServer) -> bool {
    server.state.metrics.gate_cache_trusted.get() == 1
}

async fn until_trusted(servers: &[&TestServer]) {
    eventually("every replica to answer from memory", WAIT, || async {
        servers.iter().all(|s| trusted(s))
    })
    .await;
}

/// Flagger's check of `gate` by one canary at one revision: the status code.
async fn check(server: &TestServer, gate: &str) -> u16 {
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b"});
    client()
        .post(format!("{}{gate}", server.url))
        .json(&body)
        .send()
        .await
        .expect("check answers")
        .status()
        .as_u16()
}

/// A look at `gate` without a canary (what a person or a dashboard asks): the
/// status code. It writes nothing, so it times what B knows, not B's own writes.
async fn peek(server: &TestServer, gate: &str) -> u16 {
    client()
        .get(format!("{}{gate}", server.url))
        .send()
        .await
        .expect("peek answers")
        .status()
        .as_u16()
}

async fn change(server: &TestServer, action: &str, gate: &str) {
    let r = client()
        .post(format!("{}/api/v1/gates/{action}", server.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": gate}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{action} {gate}");
}

/// Polls `server`'s answer for `gate` until it is `status`, then checks that
/// Flagger's check agrees; how long the answer took to change.
async fn seen(server: &TestServer, gate: &str, status: u16, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if peek(server, gate).await == status {
            let took = started.elapsed();
            assert_eq!(
                check(server, gate).await,
                status,
                "Flagger's check of {gate}"
            );
            return took;
        }
        assert!(
            started.elapsed() < within,
            "{gate} did not answer {status} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Ends the replicas' listening connections, as a failover or a proxy would.
async fn cut_listeners(db: &TestDb) -> u64 {
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = $1",
    )
    .bind(gatebot::testing::store::LISTENER_APPLICATION_NAME)
    .execute(&mut conn)
    .await
    .unwrap()
    .rows_affected()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_change_on_one_replica_is_in_the_others_memory_within_100ms() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let (a, b) = (replica(&db).await, replica(&db).await);
    until_trusted(&[&a, &b]).await;
    let gate = "/gates/promote/pr/42";
    // B settles into the steady state: the closed gate, answered from memory.
    assert_eq!(check(&b, gate).await, 403);
    assert_eq!(check(&b, gate).await, 403);

    for (action, status) in [("open", 200), ("close", 403), ("open", 200)] {
        change(&a, action, gate).await;
        let took = seen(&b, gate, status, WAIT).await;
        eprintln!("{action} on A seen by B after {took:?}");
        assert!(took < SEEN_WITHIN, "{action} on A took {took:?} to reach B");
    }
    assert!(trusted(&b), "B answered from memory throughout");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn without_its_listener_a_replica_reads_the_store_until_it_is_back() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let (a, b) = (replica(&db).await, replica(&db).await);
    until_trusted(&[&a, &b]).await;
    let reloads = b.state.metrics.gate_cache_reloads.get();
    let (gate, unseen) = ("/gates/promote/pr/7", "/gates/promote/pr/8");
    for g in [gate, gate, unseen, unseen] {
        assert_eq!(check(&b, g).await, 403);
    }

    assert!(cut_listeners(&db).await >= 2, "both listeners were found");
    eventually(
        "B to stop trusting its memory",
        Duration::from_secs(1),
        || async { !trusted(&b) },
    )
    .await;
    // Made while B cannot hear it: B still sees it, from the store.
    change(&a, "open", unseen).await;
    change(&a, "open", gate).await;
    let took = seen(&b, gate, 200, Duration::from_secs(1)).await;
    assert!(
        !trusted(&b),
        "the open was seen (after {took:?}) while B was not listening"
    );

    eventually("B to listen again and reload", WAIT, || async {
        trusted(&b)
    })
    .await;
    assert!(b.state.metrics.gate_cache_reloads.get() > reloads);
    // A change B missed and never checked while down is in its memory again.
    assert_eq!(check(&b, unseen).await, 200, "reloaded before trusted");
    // Listening again: a change on A reaches B's memory in time.
    change(&a, "close", gate).await;
    let took = seen(&b, gate, 403, WAIT).await;
    assert!(took < SEEN_WITHIN, "close on A took {took:?} to reach B");
    change(&a, "open", gate).await;
    seen(&b, gate, 200, WAIT).await;
    assert_eq!(check(&b, gate).await, 200);
    // And B answers from memory again: a row changed behind every replica's
    // back (no announcement) is not what B answers.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let changed =
        sqlx::query("UPDATE gates SET status = 'closed', approval_id = NULL WHERE key = $1")
            .bind("/gates/promote/acme/shop/pr/7")
            .execute(&mut conn)
            .await
            .unwrap()
            .rows_affected();
    assert_eq!(changed, 1);
    assert_eq!(check(&b, gate).await, 200, "B answered from memory");
    a.stop().await;
    b.stop().await;
}
