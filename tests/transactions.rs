//! What one `/promote` costs in write transactions, counted by the store
//! (`gatebot_store_write_transactions_total{queue}`): issue #12's budget is at
//! most 3 on the inbox side (the receipt, the claim, and one transaction with
//! the gate change, its audit entry, every job and the delivery's settlement).

use std::time::Duration;

use gatebot::testing::github::verify::sign;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::github_payloads::comment;
use gatebot_testkit::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};

const SECRET: &str = "test-webhook-secret";
const GATE: &str = "/gates/promote/acme/shop/pr/42";

gatebot_testkit::on_both_stores!(one_promote_costs_three_inbox_transactions);

/// Committed write transactions so far, by queue.
async fn writes(server: &TestServer) -> (f64, f64, f64) {
    let text = server.metrics().await;
    let of = |queue: &str| {
        gatebot_testkit::harness::metric_value(
            &text,
            &format!("gatebot_store_write_transactions_total{{queue=\"{queue}\"}}"),
        )
    };
    (of("inbox"), of("outbox"), of("none"))
}

async fn one_promote_costs_three_inbox_transactions(backend: Backend) {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    let options = gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    };
    let server = TestServer::start(config, options).await;
    server.drained().await;
    let (inbox0, outbox0, other0) = writes(&server).await;

    let body = serde_json::to_vec(&comment(42, 1001, "alice", "/promote looks good")).unwrap();
    let r = client()
        .post(server.at("/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", uuid::Uuid::new_v4().to_string())
        .header("x-hub-signature-256", sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    server.drained().await;
    let audit = server.api(&format!("/api/v1/audit?gate={GATE}")).await;
    let opened = audit["audit"]
        .as_array()
        .is_some_and(|a| a.iter().any(|e| e["action"] == "open"));
    assert!(opened, "the /promote applied: {audit}");
    assert_eq!(
        github.reactions_on(1001),
        ["eyes", "rocket"],
        "its jobs ran"
    );

    let (inbox, outbox, other) = writes(&server).await;
    let (inbox, outbox, other) = (inbox - inbox0, outbox - outbox0, other - other0);
    // Everything that is not the outbox's is the command's: transactions that
    // touch no queue (a gate change committed apart from its delivery) count too.
    let command = inbox + other;
    // The outbox side (claiming the jobs, settling them) is reported, not
    // budgeted: it depends on how the jobs batch (4 on both stores at this commit).
    let report = format!(
        "{backend:?}: {command} write transactions for one /promote on the inbox side \
         ({inbox} inbox, {other} other), {outbox} on the outbox side"
    );
    eprintln!("{report}");
    assert!(command <= 3.0, "over budget: {report}");
    assert!(
        inbox >= 3.0,
        "the receipt, claim and unit were not all counted: {report}"
    );
    assert!(outbox >= 2.0, "the jobs were claimed and settled: {report}");
}
