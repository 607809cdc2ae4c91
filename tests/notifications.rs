//! Notifications stay bounded and are never empty. Anyone who can reach the gate
//! URLs can start waits, each announced in Slack and on a PR: past
//! [limits] notify_burst new waits a minute per channel the rest get one digest,
//! and a PR GitHub says does not exist costs one call, not one per notification.
//! A job whose payload cannot be encoded is counted and reported, never stored
//! empty. SQLite and PostgreSQL.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatebot::testing::clock::{ManualClock, SharedClock};
use gatebot::testing::github::verify::sign;
use gatebot::testing::notify::{
    encode_job, BoxFuture, Handler, Lease, Notice, PayloadError, SendError, Settled, Sink,
    WorkerSettings,
};
use gatebot::testing::store::{NewJob, QueueItem};
use gatebot::Options;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::github_payloads::comment;
use gatebot_testkit::harness::{client, Backend, RecordingSink, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

/// 2024-05-01T14:02:00Z, the start of a minute.
const NOW: i64 = 1_714_572_120_000;
const BURST: u32 = 10;

fn options(clock: Option<SharedClock>) -> Options {
    Options {
        clock,
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    }
}

/// A check by canary `test/<name>`, as Flagger sends it; answers the status.
async fn check(server: &TestServer, gate: &str, name: &str, metadata: Value) -> u16 {
    let r = client()
        .post(server.at(gate))
        .json(&json!({
            "name": name, "namespace": "test", "phase": "Progressing",
            "checksum": "rev-1", "metadata": metadata,
        }))
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

fn posts_to(slack: &FakeSlack, channel: &str) -> Vec<Value> {
    slack
        .ok("chat.postMessage")
        .into_iter()
        .filter(|r| r.body["channel"] == channel)
        .map(|r| r.body)
        .collect()
}

async fn burst_of_waits_gets_one_digest(backend: Backend) {
    let db = TestDb::new(backend).await;
    let slack = FakeSlack::start().await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.slack.signing_secret = Some("secret".to_string().into());
    config.slack.bot_token = Some("xoxb-test".to_string().into());
    config.slack.channel = Some("#deploys".into());
    // The other channel is bound to the one check that names it.
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[slack.channels]]\nchannel = \"#other\"\ncanary = \"test/elsewhere\"\n",
    )
    .unwrap();
    config.policy = Some(policy);
    config.slack.api_url = slack.api_url();
    config.limits.notify_burst = BURST;
    let clock = ManualClock::new(NOW);
    let server = TestServer::start(config, options(Some(clock.clone() as SharedClock))).await;

    // 200 canaries start waiting within a fraction of the minute.
    for i in 0..200 {
        clock.set(NOW + i);
        let status = check(
            &server,
            &format!("/gates/promote/pr/{}", 1000 + i),
            &format!("flood-{i}"),
            json!({}),
        )
        .await;
        assert_eq!(status, 403);
    }
    // A wait for another channel, queued after the flood: once it is posted,
    // everything the flood queued to be sent at once has been sent.
    clock.set(NOW + 500);
    let other = json!({"slack_channel": "#other"});
    assert_eq!(
        check(&server, "/gates/promote/pr/7", "elsewhere", other).await,
        403
    );
    server.drained().await;
    assert!(
        posts_to(&slack, "#other").len() == 1,
        "drained, yet still waiting for the other channel's message"
    );
    let announced = posts_to(&slack, "#deploys");
    assert_eq!(announced.len(), BURST as usize, "{announced:#?}");
    assert!(
        announced.iter().all(|m| m["blocks"].is_array()),
        "waits come with buttons"
    );
    assert_eq!(
        server
            .metric(r#"gatebot_notifications_dropped_total{sink="slack",reason="digest"}"#)
            .await,
        190.0
    );

    // When the minute is over, one message tells of the other 190.
    clock.set(NOW + 62_000);
    server.drained().await;
    assert!(
        posts_to(&slack, "#deploys").len() > BURST as usize,
        "drained, yet still waiting for the digest"
    );
    let posts = posts_to(&slack, "#deploys");
    let digest = posts[BURST as usize]["text"].as_str().unwrap().to_string();
    assert!(
        digest.contains("190 more canaries started waiting"),
        "{digest}"
    );
    assert!(digest.contains("test/flood-10"), "{digest}");
    assert!(digest.contains("gatebot gates list"), "{digest}");

    // A wait in the next minute is announced on its own, at once.
    clock.set(NOW + 63_000);
    assert_eq!(
        check(&server, "/gates/promote/pr/8", "later", json!({})).await,
        403
    );
    server.drained().await;
    assert!(
        posts_to(&slack, "#deploys").len() == BURST as usize + 2,
        "drained, yet still waiting for the later wait's message"
    );
    let later = posts_to(&slack, "#deploys").pop().unwrap();
    assert!(later["blocks"].is_array(), "{later:#}");
    assert!(later.to_string().contains("test/later"), "{later:#}");
    assert_eq!(posts_to(&slack, "#deploys").len(), BURST as usize + 2);
    server.stop().await;
}

async fn burst_on_one_pr_gets_one_edit(backend: Backend) {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some("secret".to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    config.limits.notify_burst = BURST;
    let clock = ManualClock::new(NOW);
    let server = TestServer::start(config, options(Some(clock.clone() as SharedClock))).await;
    let outbox_idle = || async {
        server
            .state
            .store
            .queues()
            .pending(gatebot::testing::store::QueueName::Outbox)
            .await
            .unwrap()
            == 0
    };

    for i in 0..BURST as i64 {
        clock.set(NOW + i);
        assert_eq!(
            check(
                &server,
                "/gates/promote/pr/42",
                &format!("flood-{i}"),
                json!({})
            )
            .await,
            403
        );
    }
    server.drained().await;
    assert!(
        github
            .status_comments(42)
            .first()
            .is_some_and(|c| c.body.contains(&format!("test/flood-{}", BURST - 1)))
            && outbox_idle().await,
        "drained, yet still waiting for the status comment with the first waits"
    );
    let edits = github.status_comments(42)[0].edits;
    // 20 more in the same minute, then a wait at another PR, queued after them.
    for i in BURST as i64..30 {
        clock.set(NOW + i);
        assert_eq!(
            check(
                &server,
                "/gates/promote/pr/42",
                &format!("flood-{i}"),
                json!({})
            )
            .await,
            403
        );
    }
    clock.set(NOW + 500);
    assert_eq!(
        check(&server, "/gates/promote/pr/43", "elsewhere", json!({})).await,
        403
    );
    server.drained().await;
    assert!(
        github.status_comments(43).len() == 1,
        "drained, yet still waiting for the other PR's status comment"
    );
    let comment = github.status_comments(42).remove(0);
    assert_eq!(
        comment.edits, edits,
        "edited during the burst: {}",
        comment.body
    );
    assert!(!comment.body.contains("test/flood-29"), "{}", comment.body);

    // When the minute is over, one edit shows them all.
    clock.set(NOW + 61_000);
    server.drained().await;
    assert!(
        github.status_comments(42)[0].body.contains("test/flood-29") && outbox_idle().await,
        "drained, yet still waiting for the edit after the minute"
    );
    assert_eq!(github.status_comments(42)[0].edits, edits + 1);
    server.stop().await;
}

async fn missing_pr_costs_one_call(backend: Backend) {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_missing(404);
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some("secret".to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    let server = TestServer::start(config, options(None)).await;
    let dropped = r#"gatebot_notifications_dropped_total{sink="github",reason="missing_pr"}"#;

    assert_eq!(
        check(&server, "/gates/promote/pr/404", "first", json!({})).await,
        403
    );
    server.drained().await;
    assert!(
        github.requests_to("/issues/404/").len() == 1 && server.metric(dropped).await == 1.0,
        "drained, yet still waiting for GitHub's 404"
    );
    // More notices for that PR, and a wait at a real one.
    assert_eq!(
        check(&server, "/gates/promote/pr/404", "second", json!({})).await,
        403
    );
    assert_eq!(
        check(&server, "/gates/start/pr/404", "third", json!({})).await,
        403
    );
    assert_eq!(
        check(&server, "/gates/promote/pr/42", "real", json!({})).await,
        403
    );
    server.drained().await;
    assert!(
        github.status_comments(42).len() == 1 && server.metric(dropped).await >= 2.0,
        "drained, yet still waiting for the real PR's status comment and the drops"
    );
    let calls = github.requests_to("/issues/404/");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert!(github.status_comments(42)[0].body.contains("test/real"));

    // A command from the PR proves it exists: the reply goes out, and the PR's
    // notifications flow again.
    github.set_found(404);
    let body = serde_json::to_vec(&comment(404, 77, "alice", "/help")).unwrap();
    let r = client()
        .post(server.at("/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "d-404-help")
        .header("x-hub-signature-256", sign("secret", &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    server.drained().await;
    assert!(
        github.replies(404).len() == 1,
        "drained, yet still waiting for the reply on the PR"
    );
    assert_eq!(
        check(&server, "/gates/traffic/pr/404", "fourth", json!({})).await,
        403
    );
    server.drained().await;
    assert!(
        github.status_comments(404).len() == 1,
        "drained, yet still waiting for the PR's status comment"
    );
    server.stop().await;
}

/// A sink whose payloads cannot be encoded (a map with non-string keys).
#[derive(Default)]
struct Unencodable {
    received: Mutex<Vec<QueueItem>>,
}

impl Handler for Unencodable {
    fn handle<'a>(
        &'a self,
        item: &'a QueueItem,
        _lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            self.received.lock().unwrap().push(item.clone());
            Ok(Settled::NotYet)
        })
    }
}

impl Sink for Unencodable {
    fn name(&self) -> &'static str {
        "unencodable"
    }

    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        let payload = BTreeMap::from([((1, 2), notice.topic())]);
        Ok(vec![encode_job(self.name(), &notice.topic(), &payload)?])
    }
}

async fn unencodable_job_is_reported_not_stored_empty(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let recording = RecordingSink::new();
    let bad = Arc::new(Unencodable::default());
    let mut options = options(None);
    options.sinks = vec![
        recording.clone() as Arc<dyn Sink>,
        bad.clone() as Arc<dyn Sink>,
    ];
    let server = TestServer::start(config, options).await;
    let metric = r#"gatebot_notifications_dropped_total{sink="unencodable",reason="unencodable"}"#;

    // The change happens (and is acknowledged) although one sink cannot say so.
    server.open("/gates/promote/acme/shop/pr/5").await;
    server.drained().await;
    assert!(
        recording.notices().len() == 1 && server.metric(metric).await == 1.0,
        "drained, yet still waiting for the other sink's notice and the count"
    );
    assert_eq!(
        check(
            &server,
            "/gates/promote/acme/shop/pr/5",
            "podinfo",
            json!({})
        )
        .await,
        200
    );
    assert!(
        bad.received.lock().unwrap().is_empty(),
        "an empty job was queued"
    );
    server.stop().await;
}

gatebot_testkit::on_both_stores!(
    burst_of_waits_gets_one_digest,
    burst_on_one_pr_gets_one_edit,
    missing_pr_costs_one_call,
    unencodable_job_is_reported_not_stored_empty
);
