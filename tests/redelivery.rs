//! GitHub never delivers a webhook again on its own (issue 24, point 10):
//! deliveries gatebot had to refuse while the store could not take receipts
//! are asked for again once it can, through the App's own record of its
//! deliveries on the fake GitHub (`GET /app/hook/deliveries`, `POST
//! /app/hook/deliveries/{id}/attempts`), once each; a delivery that got
//! through is never asked for, and what a previous process refused is asked
//! for by the next one at start.

use std::time::Duration;

use gatebot::testing::notify::WorkerSettings;
use gatebot::{Config, Options};
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::github_payloads::comment_at;
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::Value;
use sqlx::Connection;

const SECRET: &str = "github-secret";
const TEST_APP_KEY: &str = include_str!("fixtures/test-app-key.pem");
const WAIT: Duration = Duration::from_secs(30);

fn config(db: &TestDb, github: &FakeGithub) -> Config {
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.app_id = Some(1);
    config.github.app_private_key = Some(TEST_APP_KEY.to_string().into());
    config.github.api_url = github.url.clone();
    config
}

fn options() -> Options {
    Options {
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// gatebot with a GitHub App whose webhook the fake delivers to it.
async fn start(db: &TestDb, github: &FakeGithub) -> TestServer {
    let server = TestServer::start(config(db, github), options()).await;
    github.set_webhook(&server.at("/webhooks/github"), SECRET);
    server
}

/// Another connection that holds the store so that no receipt is stored.
struct InboxLock(sqlx::AnyConnection);

impl InboxLock {
    async fn take(db: &TestDb) -> Self {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
        let sql = match db.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN; LOCK TABLE inbox IN EXCLUSIVE MODE",
        };
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        Self(conn)
    }

    async fn release(mut self) {
        sqlx::raw_sql("COMMIT").execute(&mut self.0).await.unwrap();
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn promote(github: &FakeGithub, pr: u64, comment: u64) -> u16 {
    github
        .deliver(
            "issue_comment",
            &comment_at(pr, comment, "alice", "/promote", now_ms()),
        )
        .await
}

async fn open(server: &TestServer, gate: &str) -> bool {
    client().get(server.at(gate)).send().await.unwrap().status() == 200
}

/// The attempts of the delivery whose first attempt had id `id`.
fn attempts(github: &FakeGithub, id: u64) -> Vec<(bool, u16)> {
    let all = github.deliveries();
    let guid = all.iter().find(|d| d.id == id).unwrap().guid.clone();
    all.iter()
        .filter(|d| d.guid == guid)
        .map(|d| (d.redelivery, d.status_code))
        .collect()
}

gatebot_testkit::on_both_stores!(refused_deliveries_are_asked_for_again_once_the_store_is_back);

async fn refused_deliveries_are_asked_for_again_once_the_store_is_back(backend: Backend) {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let server = start(&db, &github).await;
    assert_eq!(promote(&github, 61, 9401).await, 202, "before the outage");
    let through = github.deliveries()[0].id;

    let lock = InboxLock::take(&db).await;
    assert_eq!(promote(&github, 62, 9402).await, 503);
    assert_eq!(promote(&github, 63, 9403).await, 503);
    let refused: Vec<u64> = github.deliveries()[1..].iter().map(|d| d.id).collect();
    assert!(
        github.redelivery_requests().is_empty(),
        "not while the store is down"
    );
    lock.release().await;

    eventually("both refused deliveries asked for", WAIT, || async {
        github.redelivery_requests().len() >= 2
    })
    .await;
    let mut asked = github.redelivery_requests();
    asked.sort_unstable();
    assert_eq!(
        asked, refused,
        "each refused delivery, once; never {through}"
    );
    for id in &refused {
        eventually("the redelivery answered", WAIT, || async {
            attempts(&github, *id).len() == 2
        })
        .await;
        let tries = attempts(&github, *id);
        assert_eq!(tries[0], (false, 503));
        assert!(tries[1].0 && (200..300).contains(&tries[1].1), "{tries:?}");
    }
    for gate in ["/gates/promote/pr/62", "/gates/promote/pr/63"] {
        eventually(gate, WAIT, || async { open(&server, gate).await }).await;
    }
    // Asked with the App's JWT, and counted.
    let lists = github.requests_to("/app/hook/deliveries");
    assert!(lists.iter().all(|r| r
        .authorization
        .as_deref()
        .is_some_and(|a| a.starts_with("Bearer ey"))));
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"endpoint="redeliver""#),
        "redelivery requests are counted: {}",
        metrics
            .lines()
            .filter(|l| l.contains("outbound"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    server.drained().await;
    let reactions = github.reactions_on(9402);
    assert_eq!(reactions.len(), 2, "applied once: {reactions:?}");
}

/// A process refused a delivery and stopped before the store came back: the
/// next one asks for it at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_refused_by_a_previous_process_is_asked_for_at_start() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let first = start(&db, &github).await;
    let lock = InboxLock::take(&db).await;
    assert_eq!(promote(&github, 64, 9404).await, 503);
    first.stop().await;
    lock.release().await;
    assert!(github.redelivery_requests().is_empty());

    let next = start(&db, &github).await;
    eventually("the refused delivery asked for", WAIT, || async {
        github.redelivery_requests().len() == 1
    })
    .await;
    eventually("the gate opened", WAIT, || async {
        open(&next, "/gates/promote/pr/64").await
    })
    .await;
    let detail: Value = next.api("/api/v1/gates/promote/pr/64").await;
    assert_eq!(detail["by"]["name"], "alice", "{detail}");
}
