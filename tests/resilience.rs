//! Flagger gets an answer in time whatever the store does, and a slow GitHub
//! holds up only the pull request that waits on it.

use std::time::{Duration, Instant};

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::github_payloads::{comment, deliver_signed};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use gatebot_testkit::served::Served;
use serde_json::{json, Value};
use sqlx::Connection;

const SECRET: &str = "test-webhook-secret";

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

fn promote_from(pr: u64, id: u64, user: &str, body: &str) -> Value {
    let mut c = comment(pr, id, user, body);
    c["issue"]["user"]["login"] = json!("author");
    c
}

async fn deliver(server: &TestServer, payload: &Value) {
    let guid = uuid::Uuid::new_v4().to_string();
    let (status, body) = deliver_signed(&server.url, SECRET, "issue_comment", &guid, payload).await;
    assert_eq!(status, 202, "{body}");
}

async fn state(server: &TestServer, gate: &str) -> String {
    let v = server
        .api(&format!("/api/v1/gates{}", &gate["/gates".len()..]))
        .await;
    v["state"].as_str().unwrap_or("?").to_string()
}

/// gatebot with a fake GitHub where alice's permission lookup is quick and
/// slowpoke's takes `delay`.
async fn with_slow_github(delay: Duration) -> (TestServer, FakeGithub, TestDb) {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    github.set_permission("slowpoke", "write");
    github.delay_permission("slowpoke", delay);
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    let server = TestServer::start(config, Default::default()).await;
    (server, github, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_github_call_delays_only_its_own_pull_request() {
    // Longer than one call may take: the lookup times out and is retried later.
    let (server, _github, _db) = with_slow_github(Duration::from_secs(30)).await;

    deliver(&server, &promote_from(1, 101, "slowpoke", "/promote")).await;
    let started = Instant::now();
    for pr in 2..6 {
        deliver(
            &server,
            &promote_from(pr, 100 + pr * 10, "alice", "/promote"),
        )
        .await;
    }
    for pr in 2..6 {
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        eventually(
            &format!("PR {pr} opens"),
            Duration::from_secs(2),
            || async { state(&server, &gate).await == "open" },
        )
        .await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "other PRs waited {:?} behind one slow lookup",
        started.elapsed()
    );
    assert_eq!(
        state(&server, "/gates/promote/acme/shop/pr/1").await,
        "closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pull_requests_commands_apply_in_order() {
    // Slow, but within one call's time limit.
    let (server, _github, _db) = with_slow_github(Duration::from_millis(1500)).await;

    // Hold first (slow), then unhold: in order, the gate ends closed, not held.
    deliver(&server, &promote_from(9, 901, "slowpoke", "/hold")).await;
    deliver(&server, &promote_from(9, 902, "alice", "/unhold")).await;
    let gate = "/gates/promote/acme/shop/pr/9";
    eventually("the unhold applies", Duration::from_secs(10), || async {
        let audit = server
            .api(&format!("/api/v1/audit?gate={gate}"))
            .await
            .to_string();
        audit.contains("\"unhold\"")
    })
    .await;
    assert_eq!(state(&server, gate).await, "closed");
}
