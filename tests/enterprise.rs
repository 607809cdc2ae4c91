//! GitHub Enterprise Server: the REST API lives under `https://HOST/api/v3`,
//! so `GATEBOT_GITHUB_API_URL` carries a path prefix that every call keeps,
//! App authentication (installation lookup and token minting) included. The
//! fake GitHub here serves only under `/api/v3`: a call without the prefix
//! would answer 404.

use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::github_payloads::{comment, deliver_signed};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(15);
const SECRET: &str = "test-webhook-secret";
const TEST_APP_KEY: &str = include_str!("fixtures/test-app-key.pem");

struct Env {
    server: TestServer,
    github: FakeGithub,
    _db: TestDb,
}

async fn enterprise(app: bool) -> Env {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start_with_prefix("/api/v3").await;
    github.set_permission("alice", "write");
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    // As an operator writes it, with a trailing slash.
    config.github.api_url = format!("{}/", github.url);
    if app {
        config.github.app_id = Some(1);
        config.github.app_private_key = Some(TEST_APP_KEY.to_string().into());
    } else {
        config.github.token = Some("ghp_test".to_string().into());
    }
    let options = gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    };
    let server = TestServer::start(config, options).await;
    Env {
        server,
        github,
        _db: db,
    }
}

async fn deliver(server: &TestServer, payload: &Value) -> u16 {
    let guid = uuid::Uuid::new_v4().to_string();
    deliver_signed(&server.url, SECRET, "issue_comment", &guid, payload)
        .await
        .0
}

async fn gate_open(server: &TestServer, gate: &str) -> bool {
    client().get(server.at(gate)).send().await.unwrap().status() == 200
}

/// Every call went to `/api/v3/…` and none was answered 404.
fn all_under_the_prefix(github: &FakeGithub) {
    let requests = github.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert!(r.path.starts_with("/api/v3/"), "{r:?}");
        assert_ne!(r.status, 404, "{r:?}");
    }
}

/// A `/promote` comment: the permission lookup, the gate, and the 👀 and 🚀
/// reactions, all through the prefix.
#[tokio::test]
async fn promote_comment_round_trip_under_api_v3() {
    let env = enterprise(false).await;
    let (server, github) = (&env.server, &env.github);
    assert_eq!(
        deliver(server, &comment(63, 9301, "alice", "/promote")).await,
        202
    );
    eventually("the gate to open", WAIT, || async {
        gate_open(server, "/gates/promote/pr/63").await
    })
    .await;
    eventually("both reactions", WAIT, || async {
        github.reactions_on(9301).len() == 2
    })
    .await;
    assert_eq!(
        github
            .requests_to("/api/v3/repos/acme/shop/collaborators/alice/permission")
            .len(),
        1
    );
    all_under_the_prefix(github);
}

/// A GitHub App on Enterprise: the installation token is minted at
/// `/api/v3/app/installations/{id}/access_tokens` and then used.
#[tokio::test]
async fn app_authentication_under_api_v3() {
    let env = enterprise(true).await;
    let (server, github) = (&env.server, &env.github);
    assert_eq!(
        deliver(server, &comment(63, 9302, "alice", "/promote")).await,
        202
    );
    eventually("the gate to open", WAIT, || async {
        gate_open(server, "/gates/promote/pr/63").await
    })
    .await;
    eventually("both reactions", WAIT, || async {
        github.reactions_on(9302).len() == 2
    })
    .await;
    let minted = github.requests_to("/api/v3/app/installations/32739733/access_tokens");
    assert!(!minted.is_empty(), "{:?}", github.requests());
    assert!(
        minted[0]
            .authorization
            .as_deref()
            .is_some_and(|a| a.starts_with("Bearer ey")),
        "minted with the App's JWT: {:?}",
        minted[0].authorization
    );
    let reaction = &github.requests_to("/reactions")[0];
    assert_eq!(
        reaction.authorization.as_deref(),
        Some("Bearer ghs_installation32739733")
    );
    all_under_the_prefix(github);
}
