//! Replays, over real HTTP on both stores: a captured GitHub delivery re-sent
//! under a new `X-GitHub-Delivery` header, or a captured Slack request re-sent
//! within its signature window, changes nothing; a command written before a
//! gate's last close (or the PR's last push) opens nothing; a click approves
//! only the revision its message showed.

use std::time::Duration;

use gatebot::testing::github::verify::sign;
use gatebot::testing::store::QueueName;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::{post_signed, FakeSlack, Request};
use gatebot_testkit::github_payloads::{comment, comment_at, fixture, github_time, now_ms};
use gatebot_testkit::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

const SECRET: &str = "test-webhook-secret";
const SLACK_SECRET: &str = "test-signing-secret";
const ALICE: &str = "UALICE";

fn options() -> gatebot::Options {
    gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    }
}

struct Env {
    server: TestServer,
    github: FakeGithub,
    slack: FakeSlack,
    _db: TestDb,
}

/// gatebot with GitHub and Slack set up, on the system clock (GitHub's and
/// Slack's signed times are compared with it).
async fn env(backend: Backend) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let slack = FakeSlack::start().await;
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    config.slack.signing_secret = Some(SLACK_SECRET.to_string().into());
    config.slack.bot_token = Some("xoxb-test-token".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    config.slack.approvers = vec![ALICE.to_string()];
    let server = TestServer::start(config, options()).await;
    Env {
        server,
        github,
        slack,
        _db: db,
    }
}

impl Env {
    /// POSTs a GitHub delivery exactly as given: body, signature, delivery header.
    async fn github_raw(
        &self,
        event: &str,
        delivery: &str,
        body: &[u8],
        sig: &str,
    ) -> (u16, String) {
        let r = client()
            .post(self.server.at("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", sig)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn github(&self, event: &str, payload: &Value) -> (u16, String) {
        let body = serde_json::to_vec(payload).unwrap();
        let delivery = uuid::Uuid::new_v4().to_string();
        self.github_raw(event, &delivery, &body, &sign(SECRET, &body))
            .await
    }

    /// New commits on PR `pr`, pushed at `pushed_ms` by GitHub's clock.
    async fn push(&self, pr: u64, pushed_ms: i64) {
        let mut p = fixture("pull_request.synchronize.json");
        p["repository"]["full_name"] = json!("acme/shop");
        p["number"] = json!(pr);
        p["pull_request"]["number"] = json!(pr);
        p["pull_request"]["updated_at"] = json!(github_time(pushed_ms));
        assert_eq!(self.github("pull_request", &p).await.0, 202);
        self.inbox_idle().await;
    }

    /// What Flagger gets from `gate` for revision `checksum` of canary `pr<n>/podinfo`.
    async fn check(&self, gate: &str, namespace: &str, checksum: &str) -> u16 {
        let body = json!({"name": "podinfo", "namespace": namespace, "phase": "Progressing", "checksum": checksum});
        client()
            .post(self.server.at(gate))
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn state(&self, gate: &str) -> String {
        let path = gate.trim_start_matches("/gates");
        let detail = self.server.api(&format!("/api/v1/gates{path}")).await;
        detail["state"].as_str().unwrap_or_default().to_string()
    }

    async fn audit(&self, gate: &str) -> Vec<Value> {
        let a = self.server.api(&format!("/api/v1/audit?gate={gate}")).await;
        a["audit"].as_array().cloned().unwrap_or_default()
    }

    async fn count(&self, gate: &str, action: &str) -> usize {
        let audit = self.audit(gate).await;
        audit.iter().filter(|e| e["action"] == action).count()
    }

    /// Every stored delivery has been worked (the sync point for "changed nothing").
    async fn inbox_idle(&self) {
        self.server.drained().await;
        assert!(
            self.server
                .state
                .store
                .queues()
                .pending(QueueName::Inbox)
                .await
                .unwrap()
                == 0,
            "drained, yet still waiting for the inbox to drain"
        );
    }

    async fn slack_post(&self, path: &str, body: &str, ts: i64) -> (u16, String) {
        let r = post_signed(&self.server.at(path), body, ts, SLACK_SECRET).await;
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// The waiting message posted for `gate`.
    async fn message_for(&self, gate: &str, checksum: &str) -> Request {
        let find = || {
            self.slack.ok("chat.postMessage").into_iter().find(|m| {
                let text = m.body["blocks"].to_string();
                m.body.get("thread_ts").is_none() && text.contains(gate) && text.contains(checksum)
            })
        };
        self.server.drained().await;
        assert!(
            find().is_some(),
            "drained, yet still waiting for a waiting message for {gate}"
        );
        find().unwrap()
    }

    /// Every queued notification has been sent.
    async fn outbox_idle(&self) {
        self.server.drained().await;
        assert!(
            self.server
                .state
                .store
                .queues()
                .pending(QueueName::Outbox)
                .await
                .unwrap()
                == 0,
            "drained, yet still waiting for the outbox to drain"
        );
    }

    /// A click on a message's button, as Slack posts it (form body).
    fn click_body(&self, message: &Request, action: &str, trigger: &str) -> String {
        let value = message.body["blocks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "actions")
            .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
            .find(|b| b["action_id"] == action)
            .and_then(|b| b["value"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no {action} button in {}", message.body));
        let payload = json!({
            "type": "block_actions",
            "team": {"id": "T0"},
            "user": {"id": ALICE, "username": "alice", "team_id": "T0"},
            "trigger_id": trigger,
            "channel": {"id": "CDEPLOYS"},
            "response_url": self.slack.response_url(trigger),
            "actions": [{"action_id": action, "type": "button", "value": value, "action_ts": "1.2"}],
        });
        form(&[("payload", &payload.to_string())])
    }

    fn responses(&self, trigger: &str) -> Vec<Value> {
        self.slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == trigger)
            .map(|r| r.body)
            .collect()
    }
}

fn form(fields: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

fn now_secs() -> i64 {
    now_ms() / 1000
}

gatebot_testkit::on_both_stores!(
    promote_replayed_under_a_new_delivery_reopens_nothing,
    rollback_replayed_under_a_new_delivery_rolls_back_nothing,
    comment_written_before_a_close_opens_nothing,
    comment_written_before_a_push_opens_nothing,
    slack_click_and_command_replayed_after_a_close_change_nothing,
    click_on_an_older_message_opens_only_its_revision,
);

/// The attack: one signed `/promote`, captured, re-sent after a push.
async fn promote_replayed_under_a_new_delivery_reopens_nothing(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/pr/50";
    let key = "/gates/promote/acme/shop/pr/50";
    let body = serde_json::to_vec(&comment(50, 5001, "alice", "/promote")).unwrap();
    let sig = sign(SECRET, &body);
    let (status, text) = env.github_raw("issue_comment", "d-1", &body, &sig).await;
    assert_eq!(status, 202, "{text}");
    env.server.drained().await;
    assert!(
        env.check(gate, "pr50", "rev1").await == 200,
        "drained, yet still waiting for rev1 to be let through"
    );

    env.push(50, now_ms()).await;
    assert_eq!(env.state(key).await, "closed");
    assert_eq!(env.check(gate, "pr50", "rev2").await, 403);
    let before = env.audit(key).await.len();

    // The identical body and signature, under a new delivery header.
    let (status, text) = env.github_raw("issue_comment", "d-2", &body, &sig).await;
    assert_eq!((status, text.trim()), (200, "duplicate delivery"));
    env.inbox_idle().await;
    assert_eq!(
        env.check(gate, "pr50", "rev2").await,
        403,
        "rev2 stays closed"
    );
    let audit = env.audit(key).await;
    assert_eq!(audit.len(), before, "no new entry: {audit:?}");
    assert_eq!(env.count(key, "open").await, 1, "{audit:?}");
}

/// A captured `/rollback` re-sent later must not roll back the next revision.
async fn rollback_replayed_under_a_new_delivery_rolls_back_nothing(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/rollback/pr/51";
    let key = "/gates/rollback/acme/shop/pr/51";
    let body = serde_json::to_vec(&comment(51, 5101, "alice", "/rollback bad canary")).unwrap();
    let sig = sign(SECRET, &body);
    assert_eq!(
        env.github_raw("issue_comment", "r-1", &body, &sig).await.0,
        202
    );
    env.server.drained().await;
    assert!(
        env.check(gate, "pr51", "rev1").await == 200,
        "drained, yet still waiting for rev1 to be rolled back"
    );
    // Flagger rolled rev1 back; the next revision asks the rollback gate.
    assert_eq!(env.check(gate, "pr51", "rev2").await, 403);

    let (status, text) = env.github_raw("issue_comment", "r-2", &body, &sig).await;
    assert_eq!((status, text.trim()), (200, "duplicate delivery"));
    env.inbox_idle().await;
    assert_eq!(
        env.check(gate, "pr51", "rev2").await,
        403,
        "no second rollback"
    );
    assert_eq!(env.count(key, "open").await, 1);
}

/// A comment GitHub delivers late (a redelivery after an outage, or out of
/// order) does not reopen a gate closed after it was written, nor re-arm one
/// approved after it was written.
async fn comment_written_before_a_close_opens_nothing(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/pr/52";
    let key = "/gates/promote/acme/shop/pr/52";
    let written = now_ms() - 60_000;
    env.github("issue_comment", &comment(52, 5201, "alice", "/promote"))
        .await;
    env.server.drained().await;
    assert!(
        env.check(gate, "pr52", "rev1").await == 200,
        "drained, yet still waiting for rev1 to be let through"
    );

    // Older than the approval in force: it changes nothing (no fresh, unpinned approval).
    let old = comment_at(52, 5202, "alice", "/promote", written);
    assert_eq!(env.github("issue_comment", &old).await.0, 202);
    env.inbox_idle().await;
    assert_eq!(env.count(key, "open").await, 1);
    assert_eq!(
        env.check(gate, "pr52", "rev2").await,
        403,
        "still pinned to rev1"
    );

    // Older than the close: refused, audited, counted, and the person is told.
    env.server.close(gate).await;
    let refused =
        "gatebot_commands_total{source=\"github\",command=\"promote\",result=\"refused\"}";
    let refusals = env.server.metric(refused).await;
    let old = comment_at(52, 5203, "alice", "/promote", written + 1_000);
    assert_eq!(env.github("issue_comment", &old).await.0, 202);
    env.server.drained().await;
    assert!(
        !env.github.replies(52).is_empty(),
        "drained, yet still waiting for the reply"
    );
    let reply = env.github.replies(52).remove(0).body;
    assert!(
        reply.contains("written before the gate closed at") && reply.contains("comment again"),
        "{reply}"
    );
    assert_eq!(env.check(gate, "pr52", "rev2").await, 403);
    assert_eq!(env.count(key, "open").await, 1);
    assert_eq!(env.count(key, "refuse").await, 1);
    assert_eq!(env.server.metric(refused).await, refusals + 1.0);
}

/// A push that finds the gate closed changes no gate, yet a comment written
/// before it was about the earlier revision.
async fn comment_written_before_a_push_opens_nothing(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/pr/53";
    let key = "/gates/promote/acme/shop/pr/53";
    assert_eq!(env.check(gate, "pr53", "rev1").await, 403);
    let written = now_ms() - 10_000;
    env.push(53, written + 2_000).await;

    let late = comment_at(53, 5301, "alice", "/promote", written);
    assert_eq!(env.github("issue_comment", &late).await.0, 202);
    env.server.drained().await;
    assert!(
        !env.github.replies(53).is_empty(),
        "drained, yet still waiting for the reply"
    );
    let reply = env.github.replies(53).remove(0).body;
    assert!(reply.contains("written before the push at"), "{reply}");
    assert_eq!(env.check(gate, "pr53", "rev2").await, 403);
    assert_eq!(env.count(key, "open").await, 0);
    assert_eq!(env.count(key, "refuse").await, 1);

    // A push does not close the rollback gate ([github] close_on_push), so an
    // older /rollback still counts.
    let rollback = comment_at(53, 5303, "alice", "/rollback", written);
    assert_eq!(env.github("issue_comment", &rollback).await.0, 202);
    env.inbox_idle().await;
    assert_eq!(env.state("/gates/rollback/acme/shop/pr/53").await, "open");

    // Written after the push, it works.
    env.github("issue_comment", &comment(53, 5302, "alice", "/promote"))
        .await;
    env.server.drained().await;
    assert!(
        env.check(gate, "pr53", "rev2").await == 200,
        "drained, yet still waiting for rev2 to be let through"
    );
}

/// Within Slack's five minutes a captured click or command can be re-sent
/// with its valid signature: after a close it reopens nothing, and one sent
/// before the close but arriving after it is refused.
async fn slack_click_and_command_replayed_after_a_close_change_nothing(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/pr/54";
    let key = "/gates/promote/acme/shop/pr/54";
    assert_eq!(env.check(gate, "pr54", "rev1").await, 403);
    let message = env.message_for(key, "rev1").await;
    let click = env.click_body(&message, "gatebot_approve", "trig-1");
    let ts = now_secs();
    let path = "/webhooks/slack/interactions";
    assert_eq!(env.slack_post(path, &click, ts).await.0, 200);
    env.server.drained().await;
    assert!(
        env.state(key).await == "open",
        "drained, yet still waiting for the click to open the gate"
    );
    let command = form(&[
        ("command", "/gatebot"),
        ("text", "promote 54"),
        ("user_id", ALICE),
        ("response_url", &env.slack.response_url("trig-2")),
        ("trigger_id", "trig-2"),
    ]);
    let commands = "/webhooks/slack/commands";
    assert_eq!(env.slack_post(commands, &command, ts).await.0, 200);
    env.server.drained().await;
    assert!(
        !env.responses("trig-2").is_empty(),
        "drained, yet still waiting for the command's answer"
    );
    env.server.close(gate).await;
    env.inbox_idle().await;
    env.outbox_idle().await;
    let before = env.audit(key).await.len();
    let answered = env.responses("trig-1").len() + env.responses("trig-2").len();

    // Identical requests: same body, timestamp and signature.
    assert_eq!(env.slack_post(path, &click, ts).await.0, 200);
    assert_eq!(env.slack_post(commands, &command, ts).await.0, 200);
    env.inbox_idle().await;
    env.outbox_idle().await;
    assert_eq!(env.state(key).await, "closed");
    assert_eq!(env.audit(key).await.len(), before, "nothing worked again");
    let now_answered = env.responses("trig-1").len() + env.responses("trig-2").len();
    assert_eq!(now_answered, answered, "no second answer");

    // A command sent before the close (signed then) and worked after it.
    let late = form(&[
        ("command", "/gatebot"),
        ("text", "promote 54"),
        ("user_id", ALICE),
        ("response_url", &env.slack.response_url("trig-3")),
        ("trigger_id", "trig-3"),
    ]);
    assert_eq!(env.slack_post(commands, &late, ts - 60).await.0, 200);
    env.server.drained().await;
    assert!(
        !env.responses("trig-3").is_empty(),
        "drained, yet still waiting for the answer"
    );
    let text = env.responses("trig-3")[0]["text"].to_string();
    assert!(text.contains("after this was sent"), "{text}");
    assert_eq!(env.state(key).await, "closed");
    assert_eq!(env.count(key, "refuse").await, 1);

    // A click made before a close, worked after it, likewise.
    let gate = "/gates/promote/pr/58";
    let key = "/gates/promote/acme/shop/pr/58";
    assert_eq!(env.check(gate, "pr58", "rev1").await, 403);
    let message = env.message_for(key, "rev1").await;
    env.server.close(gate).await;
    let click = env.click_body(&message, "gatebot_approve", "trig-4");
    assert_eq!(env.slack_post(path, &click, now_secs() - 60).await.0, 200);
    env.server.drained().await;
    assert!(
        !env.responses("trig-4").is_empty(),
        "drained, yet still waiting for the answer"
    );
    let text = env.responses("trig-4")[0]["text"].to_string();
    assert!(text.contains("after this was sent"), "{text}");
    assert_eq!(env.state(key).await, "closed");
    assert_eq!(env.count(key, "refuse").await, 1);
    assert_eq!(env.check(gate, "pr58", "rev1").await, 403);
}

/// A waiting message shows one revision. Flagger may bring a newer one to the
/// gate before the old one asks again; a click on the old message must not
/// approve it. Once the newer one has asked, the old message's wait is over.
async fn click_on_an_older_message_opens_only_its_revision(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/pr/55";
    let key = "/gates/promote/acme/shop/pr/55";
    assert_eq!(env.check(gate, "pr55", "rev1").await, 403);
    let message = env.message_for(key, "rev1").await;
    // rev2 is deployed and in analysis; its first promote check comes after the click.
    let click = env.click_body(&message, "gatebot_approve", "trig-old");
    assert_eq!(
        env.slack_post("/webhooks/slack/interactions", &click, now_secs())
            .await
            .0,
        200
    );
    env.server.drained().await;
    assert!(
        env.state(key).await == "open",
        "drained, yet still waiting for the click to open the gate"
    );
    assert_eq!(
        env.check(gate, "pr55", "rev2").await,
        403,
        "rev2 was never shown"
    );
    assert_eq!(
        env.check(gate, "pr55", "rev1").await,
        200,
        "rev1 was approved"
    );

    // rev2's check ends rev1's wait: a click on rev1's message is then too late.
    let gate = "/gates/promote/pr/56";
    let key = "/gates/promote/acme/shop/pr/56";
    assert_eq!(env.check(gate, "pr56", "rev1").await, 403);
    let rev1 = env.message_for(key, "rev1").await;
    assert_eq!(env.check(gate, "pr56", "rev2").await, 403);
    let click = env.click_body(&rev1, "gatebot_approve", "trig-over");
    let path = "/webhooks/slack/interactions";
    assert_eq!(env.slack_post(path, &click, now_secs()).await.0, 200);
    env.server.drained().await;
    assert!(
        !env.responses("trig-over").is_empty(),
        "drained, yet still waiting for the answer"
    );
    let text = env.responses("trig-over")[0]["text"].to_string();
    assert!(text.contains("This wait is over"), "{text}");
    assert_eq!(env.state(key).await, "closed");
    assert_eq!(env.count(key, "open").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comment_without_githubs_time_is_refused() {
    let env = env(Backend::Sqlite).await;
    let mut p = comment(57, 5701, "alice", "/promote");
    p["comment"]["updated_at"] = json!("yesterday");
    let (status, text) = env.github("issue_comment", &p).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("updated_at"), "{text}");
    let rejected =
        "gatebot_rejected_requests_total{route=\"/webhooks/github\",reason=\"malformed_comment\"}";
    assert_eq!(env.server.metric(rejected).await, 1.0);
    env.inbox_idle().await;
    assert_eq!(env.check("/gates/promote/pr/57", "pr57", "rev1").await, 403);
}

/// Delivery ids are forgotten after [limits] retention_deliveries (30 days),
/// so what GitHub signed longer ago is refused at the door: a replay of it
/// cannot run again once its id is gone. A comment or push signed inside the
/// window is taken as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_github_signed_before_the_retention_window_is_refused() {
    let env = env(Backend::Sqlite).await;
    const DAY: i64 = 24 * 3600 * 1000;
    let old = comment_at(58, 5801, "alice", "/promote", now_ms() - 31 * DAY);
    let (status, text) = env.github("issue_comment", &old).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("[limits] retention_deliveries"), "{text}");
    let mut push = fixture("pull_request.synchronize.json");
    push["repository"]["full_name"] = json!("acme/shop");
    push["number"] = json!(58);
    push["pull_request"]["number"] = json!(58);
    push["pull_request"]["updated_at"] = json!(github_time(now_ms() - 31 * DAY));
    let (status, text) = env.github("pull_request", &push).await;
    assert_eq!(status, 422, "{text}");
    let rejected = "gatebot_rejected_requests_total{route=\"/webhooks/github\",reason=\"too_old\"}";
    assert_eq!(env.server.metric(rejected).await, 2.0);
    env.inbox_idle().await;
    assert_eq!(env.check("/gates/promote/pr/58", "pr58", "rev1").await, 403);

    let recent = comment_at(58, 5802, "alice", "/promote", now_ms() - 29 * DAY);
    let (status, text) = env.github("issue_comment", &recent).await;
    assert_eq!(status, 202, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_command_without_a_trigger_id_runs_once() {
    let env = env(Backend::Sqlite).await;
    let command = form(&[
        ("command", "/gatebot"),
        ("text", "promote 59"),
        ("user_id", ALICE),
        ("response_url", &env.slack.response_url("no-trigger")),
    ]);
    let ts = now_secs();
    let path = "/webhooks/slack/commands";
    assert_eq!(env.slack_post(path, &command, ts).await.0, 200);
    env.server.drained().await;
    assert!(
        !env.responses("no-trigger").is_empty(),
        "drained, yet still waiting for the answer"
    );
    assert_eq!(env.slack_post(path, &command, ts).await.0, 200);
    env.inbox_idle().await;
    env.outbox_idle().await;
    assert_eq!(env.responses("no-trigger").len(), 1, "worked once");
    assert_eq!(env.count("/gates/promote/acme/shop/pr/59", "open").await, 1);
}
