//! Flagger gets an answer in time whatever the store does.

pub mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection;
use support::harness::{client, Backend, TestDb, ADMIN_TOKEN};
use support::served::Served;

async fn check(url: &str, gate: &str, canary: &str, checksum: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let r = client()
        .post(format!("{url}{gate}"))
        .json(&json!({"name": canary, "namespace": "shop", "phase": "Progressing", "checksum": checksum}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_store_still_answers_flagger_within_two_seconds() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let gate = "/gates/promote/acme/shop/pr/7";
    let r = client()
        .post(format!("{}/api/v1/gates/open", served.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": gate, "reason": "ship it"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, _, _) = check(&served.url, gate, "known", "rev1").await;
    assert_eq!(status, 200, "the first check pins the approval");

    // Another process takes SQLite's write lock and keeps it.
    let path = db.url.trim_start_matches("sqlite://");
    let mut locker = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
        .await
        .unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut locker)
        .await
        .unwrap();
    sqlx::query("UPDATE gates SET reason = reason")
        .execute(&mut locker)
        .await
        .unwrap();

    // A known canary keeps answering from memory.
    let (status, _, took) = check(&served.url, gate, "known", "rev1").await;
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(1), "known canary took {took:?}");

    // New canaries need a write; they all get 403 with a reason, in time.
    let mut asks = Vec::new();
    for i in 0..6 {
        let url = served.url.clone();
        asks.push(tokio::spawn(async move {
            check(&url, gate, &format!("new{i}"), "rev1").await
        }));
    }
    for ask in asks {
        let (status, reason, took) = ask.await.unwrap();
        assert_eq!(status, 403, "{reason}");
        assert!(reason.contains("store busy"), "{reason}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }

    // Once the lock is gone, the next poll records what the busy one could not.
    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
    let (status, reason, took) = check(&served.url, gate, "new0", "rev1").await;
    assert_eq!(status, 200, "{reason}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let pins = served
        .api(&format!("/api/v1/gates{}", &gate["/gates".len()..]))
        .await
        .to_string();
    assert!(pins.contains("new0"), "new0 is pinned: {pins}");
}
