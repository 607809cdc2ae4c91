//! Slack, end to end: the Flagger simulator and a fake Slack Web API against
//! gatebot over real HTTP, on SQLite and on PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{ManualClock, SharedClock};
use gatebot::testing::notify::WorkerSettings;
use gatebot::Options;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::{post_signed, FakeSlack, Request};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Hook, HookType, Phase, Strategy};
use gatebot_testkit::github_payloads::comment;
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);
const SECRET: &str = "test-signing-secret";
/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const ALICE: &str = "UALICE";
const BOB: &str = "UBOB";
const MALLORY: &str = "UMALLORY";
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/slack");

struct Env {
    server: TestServer,
    slack: FakeSlack,
    clock: Option<Arc<ManualClock>>,
    _db: TestDb,
}

struct Setup<'a> {
    approvers: &'a [&'a str],
    manual_clock: bool,
    secret: &'a str,
    templates_dir: Option<std::path::PathBuf>,
    /// A policy file's text, and a fake GitHub to learn PR authors from.
    policy: Option<(&'a str, &'a FakeGithub)>,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Self {
            approvers: &[ALICE, BOB],
            manual_clock: true,
            secret: SECRET,
            templates_dir: None,
            policy: None,
        }
    }
}

async fn env(backend: Backend, setup: Setup<'_>) -> Env {
    let db = TestDb::new(backend).await;
    let slack = FakeSlack::start().await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.slack.signing_secret = Some(setup.secret.to_string().into());
    config.slack.bot_token = Some("xoxb-test-token".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    config.slack.approvers = setup.approvers.iter().map(|s| s.to_string()).collect();
    config.templates_dir = setup.templates_dir;
    if let Some((policy, github)) = setup.policy {
        let path = db.dir.path().join("policy.toml");
        std::fs::write(&path, policy).unwrap();
        config.policy = Some(path);
        config.github.token = Some("ghp_test".to_string().into());
        config.github.webhook_secret = Some("github-secret".to_string().into());
        config.github.api_url = github.url.clone();
    }
    let clock = setup.manual_clock.then(|| ManualClock::new(NOW));
    let options = Options {
        clock: clock.clone().map(|c| c as SharedClock),
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    };
    let server = TestServer::start(config, options).await;
    Env {
        server,
        slack,
        clock,
        _db: db,
    }
}

/// A canary past its first deployment, with revision `rev-b` applied.
async fn released(hooks: Vec<Hook>) -> FlaggerSim {
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Initialized);
    sim.deploy("rev-b");
    sim
}

impl Env {
    fn now_secs(&self) -> i64 {
        match &self.clock {
            Some(c) => gatebot::testing::clock::Clock::now_secs(c.as_ref()),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64,
        }
    }

    async fn post_signed_at(
        &self,
        path: &str,
        body: &str,
        ts: i64,
        secret: &str,
    ) -> reqwest::Response {
        post_signed(&self.server.at(path), body, ts, secret).await
    }

    async fn post_signed(&self, path: &str, body: &str) -> reqwest::Response {
        self.post_signed_at(path, body, self.now_secs(), SECRET)
            .await
    }

    /// Posts an interaction payload as Slack does (`payload=<json>`).
    async fn interact(&self, payload: &Value) -> reqwest::Response {
        self.post_signed("/webhooks/slack/interactions", &form_payload(payload))
            .await
    }

    async fn click(&self, user: &str, action: &str, message: &Request, trigger: &str) -> u16 {
        let payload = click_payload(
            user,
            &user.to_ascii_lowercase(),
            action,
            &button_value(message, action),
            trigger,
            &self.slack.response_url(trigger),
        );
        self.interact(&payload).await.status().as_u16()
    }

    async fn command(&self, user: &str, text: &str, trigger: &str) -> (u16, Value) {
        let body = form(&[
            ("command", "/gatebot"),
            ("text", text),
            ("user_id", user),
            ("user_name", "someone-else"),
            ("team_id", "T0"),
            ("channel_id", "C0"),
            ("response_url", &self.slack.response_url(trigger)),
            ("trigger_id", trigger),
        ]);
        let r = self.post_signed("/webhooks/slack/commands", &body).await;
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Waiting messages posted (not thread replies).
    fn waiting_messages(&self) -> Vec<Request> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("thread_ts").is_none())
            .collect()
    }

    async fn waiting_message_for(&self, gate: &str) -> Request {
        self.server.drained().await;
        assert!(
            self.waiting_messages()
                .iter()
                .any(|m| text_of(m).contains(gate)),
            "drained, yet still waiting for a waiting message for {gate}"
        );
        self.waiting_messages()
            .into_iter()
            .find(|m| text_of(m).contains(gate))
            .unwrap()
    }

    /// The ts Slack gave a posted message (the fake numbers them in order).
    fn ts_of(&self, message: &Request) -> String {
        let posted = self.slack.ok("chat.postMessage");
        let n = posted
            .iter()
            .position(|r| r.body == message.body)
            .expect("posted")
            + 1;
        // Only successful posts take a ts; failed attempts are not numbered.
        format!("1714572120.{n:06}")
    }

    fn updates_of(&self, ts: &str) -> Vec<Request> {
        self.slack
            .ok("chat.update")
            .into_iter()
            .filter(|r| r.body["ts"] == ts)
            .collect()
    }

    fn responses(&self, trigger: &str) -> Vec<Value> {
        self.slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == trigger)
            .map(|r| r.body)
            .collect()
    }

    async fn response(&self, trigger: &str) -> Value {
        self.server.drained().await;
        assert!(
            !self.responses(trigger).is_empty(),
            "drained, yet still waiting for an answer on the response_url of {trigger}"
        );
        self.responses(trigger).remove(0)
    }

    async fn gate_state(&self, gate: &str) -> String {
        let path = gate.trim_start_matches("/gates");
        let detail = self.server.api(&format!("/api/v1/gates{path}")).await;
        detail["state"].as_str().unwrap_or_default().to_string()
    }

    async fn wait_gate(&self, gate: &str, state: &str) {
        self.server.drained().await;
        assert!(
            self.gate_state(gate).await == state,
            "drained, yet still waiting for {gate} {state}"
        );
    }

    async fn audit(&self, gate: &str) -> Vec<Value> {
        let a = self.server.api(&format!("/api/v1/audit?gate={gate}")).await;
        a["audit"].as_array().unwrap().clone()
    }

    /// Polls until no job is pending, retries included: for a test whose
    /// retries come due on the wall clock, which a drain does not wait for.
    async fn outbox_empty(&self) {
        eventually("the outbox to empty", WAIT, || async {
            let jobs = self.server.api("/api/v1/outbox?state=pending").await;
            jobs["jobs"].as_array().unwrap().is_empty()
        })
        .await;
    }

    async fn outbox_idle(&self) {
        self.server.drained().await;
        let jobs = self.server.api("/api/v1/outbox?state=pending").await;
        assert!(
            jobs["jobs"].as_array().unwrap().is_empty(),
            "drained, yet jobs are pending: {jobs}"
        );
    }
}

fn form(fields: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

fn form_payload(payload: &Value) -> String {
    form(&[("payload", &payload.to_string())])
}

fn click_payload(
    user: &str,
    username: &str,
    action: &str,
    value: &str,
    trigger: &str,
    response_url: &str,
) -> Value {
    json!({
        "type": "block_actions",
        "team": {"id": "T0", "domain": "acme"},
        "user": {"id": user, "username": username, "name": username, "team_id": "T0"},
        "api_app_id": "A0", "token": "legacy",
        "container": {"type": "message", "message_ts": "1714572120.000001", "channel_id": "CDEPLOYS", "is_ephemeral": false},
        "trigger_id": trigger,
        "channel": {"id": "CDEPLOYS", "name": "deploys"},
        "message": {"type": "message", "ts": "1714572120.000001", "text": "…"},
        "response_url": response_url,
        "actions": [{"action_id": action, "block_id": "b", "type": "button", "value": value,
                     "text": {"type": "plain_text", "text": "Approve"}, "action_ts": "1714572121.000001"}],
    })
}

fn text_of(message: &Request) -> String {
    message.body["blocks"].to_string()
}

fn buttons(message: &Request) -> Vec<Value> {
    message.body["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn button_value(message: &Request, action: &str) -> String {
    buttons(message)
        .into_iter()
        .find(|b| b["action_id"] == action)
        .and_then(|b| b["value"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no {action} button in {}", message.body))
}

fn fixture(name: &str) -> String {
    let path = format!("{FIXTURES}/{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

// ---- the main flows, on both stores ----

gatebot_testkit::on_both_stores!(
    wait_posts_one_message_with_both_buttons,
    approve_click_opens_gate_and_simulator_promotes,
    reject_on_promotion_makes_simulator_roll_back,
    late_second_click_and_slack_retry_change_nothing,
    disallowed_user_gets_ephemeral_refusal,
    a_button_asks_why_in_a_modal_where_the_policy_does,
);

/// The reason modal's submission, as Slack sends it: its sample payload
/// with this modal's `private_metadata`, by `user`, who typed `reason`.
fn submission(view: &Value, user: &str, trigger: &str, reason: &str) -> Value {
    let mut p: Value =
        serde_json::from_str(&fixture("view_submission_payload.all-fields-sample.json")).unwrap();
    p["user"] = json!({"id": user, "username": user.to_ascii_lowercase(), "name": user.to_ascii_lowercase(), "team_id": "T9TK3CUKW"});
    p["trigger_id"] = json!(trigger);
    p["view"]["type"] = json!("modal");
    p["view"]["callback_id"] = view["callback_id"].clone();
    p["view"]["private_metadata"] = view["private_metadata"].clone();
    p["view"]["state"] =
        json!({"values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}});
    p
}

/// Under a `[[reasons]]` rule, a button opens a modal that asks why (with
/// the click's trigger, at once); its submission is that click, with the
/// reason. A submission without one keeps the modal open and takes nothing.
async fn a_button_asks_why_in_a_modal_where_the_policy_does(backend: Backend) {
    let github = FakeGithub::start().await;
    let policy = "[[reasons]]\nkind = \"start\"\nrequired = true\n";
    let setup = Setup {
        policy: Some((policy, &github)),
        ..Setup::default()
    };
    let env = env(backend, setup).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let gate = "/gates/start/acme/shop/pr/42";
    let start = env.waiting_message_for(gate).await;
    // One who may not act is told so at once: no modal asks them why.
    let clicked = env.click(MALLORY, "gatebot_approve", &start, "trig-mallory");
    assert_eq!(clicked.await, 200);
    let refused = env.response("trig-mallory").await.to_string();
    assert!(refused.contains("not an approver"), "{refused}");
    assert!(env.slack.ok("views.open").is_empty());
    let clicked = env.click(ALICE, "gatebot_approve", &start, "trig-why");
    assert_eq!(clicked.await, 200);
    env.server.drained().await;
    let opened = env.slack.ok("views.open");
    assert_eq!(opened.len(), 1, "{opened:#?}");
    assert_eq!(opened[0].body["trigger_id"], "trig-why");
    let view = opened[0].body["view"].clone();
    assert_eq!(env.gate_state(gate).await, "closed");
    assert!(
        env.responses("trig-why").is_empty(),
        "the modal asks; nothing else is said"
    );
    if backend == Backend::Sqlite {
        let mut shown = view.clone();
        shown["private_metadata"] = json!("[the button and the click's response_url]");
        insta::assert_json_snapshot!("slack_reason_modal", shown);
    }

    // Submitted with spaces or a bare "because" (Slack's min_length counts
    // spaces): the modal stays open, saying why under its field; nothing is taken.
    for typed in ["   ", "because"] {
        let blank = submission(&view, ALICE, "trig-blank", typed);
        let answer = env.interact(&blank).await;
        assert_eq!(answer.status(), 200);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["response_action"], "errors", "{body}");
        assert_eq!(
            body["errors"]["reason"],
            "Write why in words: it is recorded with your decision."
        );
    }
    env.server.drained().await;
    assert!(env.responses("trig-why").is_empty());
    assert_eq!(env.gate_state(gate).await, "closed");
    let metrics = env.server.metrics().await;
    assert!(
        metrics.contains(
            "gatebot_rejected_requests_total{route=\"/webhooks/slack/interactions\",reason=\"reason_missing\"} 2"
        ),
        "{metrics}"
    );

    let said = submission(&view, ALICE, "trig-said", "smoke tests passed <!channel>");
    assert_eq!(env.interact(&said).await.status(), 200);
    env.wait_gate(gate, "open").await;
    let detail = env.server.api("/api/v1/gates/start/acme/shop/pr/42").await;
    assert_eq!(
        detail["reason"], "smoke tests passed <!channel>",
        "{detail}"
    );
    // The message shows the decision with its reason, escaped.
    let updated = env.slack.ok("chat.update");
    let last = updated
        .last()
        .expect("the message was updated")
        .body
        .to_string();
    assert!(
        last.contains("smoke tests passed &lt;!channel&gt;"),
        "{last}"
    );
    assert!(!last.contains("<!channel>"), "{last}");
    assert_eq!(
        env.slack.ok("views.open").len(),
        1,
        "a submission opens no modal"
    );
}

async fn wait_posts_one_message_with_both_buttons(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    for _ in 0..4 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::Waiting);
    let message = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    env.outbox_idle().await;
    assert_eq!(
        env.waiting_messages().len(),
        1,
        "one message per wait, not per poll"
    );
    assert_eq!(message.body["channel"], "#deploys");
    assert_eq!(message.auth.as_deref(), Some("Bearer xoxb-test-token"));
    let text = text_of(&message);
    for part in [
        "test/podinfo",
        "start",
        "https://github.com/acme/shop/pull/42",
        "acme/shop#42",
        &format!("`{}`", sim.checksum()),
        "14:02",
    ] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    let b = buttons(&message);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0]["action_id"], "gatebot_approve");
    assert_eq!(b[0]["style"], "primary");
    assert_eq!(b[1]["action_id"], "gatebot_reject");
    assert_eq!(b[1]["style"], "danger");
    assert!(
        b.iter().all(|b| b["confirm"]["title"].is_object()),
        "confirm dialogs"
    );
    let value: Value = serde_json::from_str(b[0]["value"].as_str().unwrap()).unwrap();
    assert_eq!(value["g"], "/gates/start/acme/shop/pr/42");
    assert!(value["w"].as_i64().unwrap() > 0, "carries the wait id");
}

async fn approve_click_opens_gate_and_simulator_promotes(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let start_ts = env.ts_of(&start);
    let revision = sim.checksum().to_string();

    assert_eq!(
        env.click(ALICE, "gatebot_approve", &start, "trig-1").await,
        200
    );
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
    env.server.drained().await;
    assert!(
        !env.updates_of(&start_ts).is_empty(),
        "drained, yet still waiting for the start message updated"
    );
    let updated = env.updates_of(&start_ts).remove(0);
    assert!(
        buttons(&updated).is_empty(),
        "buttons gone: {}",
        updated.body
    );
    let text = text_of(&updated);
    assert!(
        text.contains(&format!(
            "Approved by <@{ALICE}> at 14:02 (revision {revision})"
        )),
        "{text}"
    );
    let audit = env.audit("/gates/start/acme/shop/pr/42").await;
    let open = audit.iter().find(|a| a["action"] == "open").unwrap();
    assert_eq!(open["actor"]["source"], "slack");
    assert_eq!(open["actor"]["name"], "ualice");
    assert_eq!(open["delivery"], "slack:trig-1");

    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Progressing);
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    let promote = env
        .waiting_message_for("/gates/promote/acme/shop/pr/42")
        .await;
    let promote_ts = env.ts_of(&promote);
    assert_eq!(
        env.click(BOB, "gatebot_approve", &promote, "trig-2").await,
        200
    );
    env.wait_gate("/gates/promote/acme/shop/pr/42", "open")
        .await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::Succeeded, 5).await,
        "promoted"
    );
    assert_eq!(sim.promotions(), 1);

    // Progress goes to the thread; the main message shows the final state.
    env.server.drained().await;
    let replies: Vec<String> = env
        .slack
        .ok("chat.postMessage")
        .iter()
        .filter(|r| r.body["thread_ts"] == promote_ts)
        .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    let last = env
        .updates_of(&promote_ts)
        .last()
        .map(text_of)
        .unwrap_or_default();
    assert!(
        replies.iter().any(|t| t.contains("Promotion started"))
            && replies.iter().any(|t| t.contains("Promotion completed"))
            && last.contains("Promoted")
            && last.contains(&format!("Approved by <@{BOB}>")),
        "drained, yet still waiting for thread replies and the final state"
    );
    assert!(env
        .updates_of(&promote_ts)
        .iter()
        .all(|u| buttons(u).is_empty()));
}

async fn reject_on_promotion_makes_simulator_roll_back(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    env.server.open("/gates/start/pr/42").await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    let promote = env
        .waiting_message_for("/gates/promote/acme/shop/pr/42")
        .await;
    let ts = env.ts_of(&promote);
    assert_eq!(
        env.click(ALICE, "gatebot_reject", &promote, "trig-r").await,
        200
    );
    env.wait_gate("/gates/rollback/acme/shop/pr/42", "open")
        .await;
    assert_eq!(
        env.gate_state("/gates/promote/acme/shop/pr/42").await,
        "closed"
    );
    assert!(
        sim.run_until(|s| s.rollbacks() == 1, 3).await,
        "rolled back"
    );
    assert_eq!(sim.phase(), Phase::Failed);
    assert_eq!(sim.promotions(), 0);
    env.server.drained().await;
    assert!(
        env.updates_of(&ts).iter().any(|u| {
            let t = text_of(u);
            buttons(u).is_empty()
                && t.contains(&format!("Rejected by <@{ALICE}> at 14:02"))
                && t.contains("/gates/rollback/acme/shop/pr/42")
        }),
        "drained, yet still waiting for the message shows the rejection"
    );
}

async fn late_second_click_and_slack_retry_change_nothing(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    assert_eq!(
        env.click(ALICE, "gatebot_approve", &start, "trig-a").await,
        200
    );
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;

    // Slack retries the same click (same trigger id).
    let payload = click_payload(
        ALICE,
        "ualice",
        "gatebot_approve",
        &button_value(&start, "gatebot_approve"),
        "trig-a",
        &env.slack.response_url("trig-a"),
    );
    let body = form_payload(&payload);
    let ts = env.now_secs().to_string();
    let r = client()
        .post(env.server.at("/webhooks/slack/interactions"))
        .header("x-slack-request-timestamp", &ts)
        .header("x-slack-retry-num", "1")
        .header("x-slack-retry-reason", "http_timeout")
        .header(
            "x-slack-signature",
            gatebot::testing::slack::verify::sign(SECRET.as_bytes(), &ts, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Bob clicks Reject after Alice approved.
    assert_eq!(
        env.click(BOB, "gatebot_reject", &start, "trig-b").await,
        200
    );
    let answer = env.response("trig-b").await;
    assert_eq!(answer["response_type"], "ephemeral");
    let text = answer["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("Already approved by <@{ALICE}>")),
        "{text}"
    );
    assert_eq!(env.gate_state("/gates/start/acme/shop/pr/42").await, "open");
    let audit = env.audit("/gates/start/acme/shop/pr/42").await;
    assert_eq!(
        audit.iter().filter(|a| a["action"] == "open").count(),
        1,
        "{audit:?}"
    );
    assert!(
        audit
            .iter()
            .any(|a| a["action"] == "refuse" && a["actor"]["name"] == "ubob"),
        "the late click is audited: {audit:?}"
    );
    assert!(
        env.responses("trig-a").is_empty(),
        "the retry was not worked again"
    );
}

async fn disallowed_user_gets_ephemeral_refusal(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let ts = env.ts_of(&start);
    assert_eq!(
        env.click(MALLORY, "gatebot_approve", &start, "trig-m")
            .await,
        200
    );
    let answer = env.response("trig-m").await;
    assert_eq!(answer["response_type"], "ephemeral");
    let text = answer["text"].as_str().unwrap();
    assert!(text.contains("you are not an approver"), "{text}");
    assert!(text.contains("[slack] approvers"), "{text}");
    assert!(
        text.contains(&format!("<@{ALICE}>")),
        "names who to ask: {text}"
    );
    assert_eq!(
        env.gate_state("/gates/start/acme/shop/pr/42").await,
        "closed"
    );
    let audit = env.audit("/gates/start/acme/shop/pr/42").await;
    assert!(audit
        .iter()
        .any(|a| a["action"] == "refuse"
            && a["reason"].as_str().unwrap_or_default().contains(MALLORY)));
    env.outbox_idle().await;
    assert!(env.updates_of(&ts).is_empty(), "the message is unchanged");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Waiting);
}

// ---- edges ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_author_may_not_approve_own_pr_from_slack() {
    let github = FakeGithub::start().await;
    github.set_author(42, "Alice-GH");
    github.set_author(43, "bob-gh");
    let policy = format!(
        "[slack]\nforbid_self_approval = true\n[users]\nalice-gh = \"{ALICE}\"\nbob-gh = \"{BOB}\"\n"
    );
    let env = env(
        Backend::Sqlite,
        Setup {
            policy: Some((&policy, &github)),
            ..Setup::default()
        },
    )
    .await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let ts = env.ts_of(&start);

    // Alice opened PR 42 (by the mapping, case aside): her click is refused.
    assert_eq!(
        env.click(ALICE, "gatebot_approve", &start, "trig-self")
            .await,
        200
    );
    let text = env.response("trig-self").await["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("opened acme/shop#42") && text.contains("four eyes"),
        "{text}"
    );
    assert_eq!(
        env.gate_state("/gates/start/acme/shop/pr/42").await,
        "closed"
    );
    assert!(env
        .audit("/gates/start/acme/shop/pr/42")
        .await
        .iter()
        .any(|a| a["action"] == "refuse"
            && a["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("four eyes")));
    env.outbox_idle().await;
    assert!(env.updates_of(&ts).is_empty(), "the message is unchanged");
    // The author was asked of GitHub once and remembered.
    assert_eq!(github.requests_to("/pulls/42").len(), 1);

    // The slash command is held to the same rule.
    env.command(ALICE, "promote 42", "cmd-self").await;
    assert!(env.response("cmd-self").await["text"]
        .as_str()
        .unwrap()
        .contains("four eyes"));
    assert_eq!(
        env.gate_state("/gates/promote/acme/shop/pr/42").await,
        "closed"
    );
    assert_eq!(github.requests_to("/pulls/42").len(), 1, "remembered");

    // Someone else's PR, or someone else approving: allowed.
    env.command(ALICE, "promote 43", "cmd-other").await;
    env.wait_gate("/gates/promote/acme/shop/pr/43", "open")
        .await;
    assert_eq!(
        env.click(BOB, "gatebot_approve", &start, "trig-bob").await,
        200
    );
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
    // An author seen in a GitHub delivery needs no API call.
    let mut comment = comment(44, 4401, "carol", "/hold until the freeze ends");
    comment["issue"]["user"]["login"] = json!("alice-gh");
    github.set_permission("carol", "write");
    let body = serde_json::to_vec(&comment).unwrap();
    let r = client()
        .post(env.server.at("/webhooks/github"))
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "d-44")
        .header(
            "x-hub-signature-256",
            gatebot::testing::github::verify::sign("github-secret", &body),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    env.wait_gate("/gates/promote/acme/shop/pr/44", "held")
        .await;
    env.command(ALICE, "promote 44", "cmd-44").await;
    assert!(env.response("cmd-44").await["text"]
        .as_str()
        .unwrap()
        .contains("opened acme/shop#44"));
    assert!(github.requests_to("/pulls/44").is_empty());

    // Rejecting (rolling back) one's own PR stays allowed: it is the safe way.
    env.command(ALICE, "rollback 42", "cmd-rb").await;
    env.wait_gate("/gates/rollback/acme/shop/pr/42", "open")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_approvers_means_nobody_and_names_the_setting() {
    let env = env(
        Backend::Sqlite,
        Setup {
            approvers: &[],
            ..Setup::default()
        },
    )
    .await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    assert_eq!(
        env.click(ALICE, "gatebot_approve", &start, "trig-n").await,
        200
    );
    let text = env.response("trig-n").await["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("Nobody may") && text.contains("[slack] approvers"),
        "{text}"
    );
    assert_eq!(
        env.gate_state("/gates/start/acme/shop/pr/42").await,
        "closed"
    );
    let (status, body) = env.command(ALICE, "promote 42", "cmd-n").await;
    assert_eq!(status, 200);
    assert!(
        body["text"].as_str().unwrap().contains("[slack] approvers"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_on_start_keeps_gate_closed_and_records_why() {
    let env = env(Backend::Sqlite, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let ts = env.ts_of(&start);
    assert_eq!(
        env.click(ALICE, "gatebot_reject", &start, "trig-s").await,
        200
    );
    env.server.drained().await;
    assert!(
        env.audit("/gates/start/acme/shop/pr/42")
            .await
            .iter()
            .any(|a| {
                a["action"] == "close"
                    && a["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("rejected in Slack")
            }),
        "drained, yet still waiting for the rejection recorded"
    );
    assert_eq!(
        env.gate_state("/gates/start/acme/shop/pr/42").await,
        "closed"
    );
    assert_eq!(
        env.gate_state("/gates/rollback/acme/shop/pr/42").await,
        "closed"
    );
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Waiting);
    env.server.drained().await;
    assert!(
        env.updates_of(&ts)
            .iter()
            .any(|u| buttons(u).is_empty() && text_of(u).contains("Rejected by")),
        "drained, yet still waiting for the message shows the rejection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_timestamp_and_forged_signature_are_refused_and_store_nothing() {
    let env = env(Backend::Sqlite, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let payload = click_payload(
        ALICE,
        "ualice",
        "gatebot_approve",
        &button_value(&start, "gatebot_approve"),
        "trig-x",
        &env.slack.response_url("trig-x"),
    );
    let body = form_payload(&payload);
    let path = "/webhooks/slack/interactions";
    let stale = env
        .post_signed_at(path, &body, env.now_secs() - 301, SECRET)
        .await;
    assert_eq!(stale.status(), 401);
    assert!(stale.text().await.unwrap().contains("5 minutes"));
    let forged = env
        .post_signed_at(path, &body, env.now_secs(), "not-the-secret")
        .await;
    assert_eq!(forged.status(), 401);
    assert!(forged.text().await.unwrap().contains("does not match"));
    let unsigned = client()
        .post(env.server.at(path))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    // The same click, signed now, still works: nothing of the refused ones was kept.
    let route = "route=\"/webhooks/slack/interactions\"";
    assert_eq!(
        env.server
            .metric(&format!(
                "gatebot_rejected_requests_total{{{route},reason=\"stale_timestamp\"}}"
            ))
            .await,
        1.0
    );
    assert_eq!(
        env.server
            .metric(&format!(
                "gatebot_rejected_requests_total{{{route},reason=\"bad_signature\"}}"
            ))
            .await,
        1.0
    );
    assert_eq!(
        env.gate_state("/gates/start/acme/shop/pr/42").await,
        "closed"
    );
    assert!(env.responses("trig-x").is_empty());
    assert_eq!(env.interact(&payload).await.status(), 200);
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn org_wide_click_with_team_null_is_worked() {
    let env = env(
        Backend::Sqlite,
        Setup {
            approvers: &["W0ORGUSER"],
            ..Setup::default()
        },
    )
    .await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let mut payload = click_payload(
        "W0ORGUSER",
        "grid-user",
        "gatebot_approve",
        &button_value(&start, "gatebot_approve"),
        "trig-w",
        &env.slack.response_url("trig-w"),
    );
    payload["team"] = Value::Null;
    payload["user"]["team_id"] = Value::Null;
    payload["enterprise"] = json!({"id": "E0GRID", "name": "Grid"});
    payload["is_enterprise_install"] = json!(true);
    payload["container"] = json!({"type": "message", "message_ts": "1.2", "channel_id": "CDEPLOYS", "thread_ts": null, "new_field": [1, 2]});
    assert_eq!(env.interact(&payload).await.status(), 200);
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_are_acknowledged_and_change_nothing() {
    let env = env(Backend::Sqlite, Setup::default()).await;
    for name in [
        "block_actions.docs-example.json",
        "block_actions_payload.all-fields-sample.json",
    ] {
        let payload: Value = serde_json::from_str(&fixture(name)).unwrap();
        let r = env.interact(&payload).await;
        assert_eq!(
            r.status(),
            200,
            "{name}: someone else's button is acknowledged"
        );
    }
    // Slash command sample (JSON in the fixture; form-encoded on the wire).
    let sample: Value =
        serde_json::from_str(&fixture("slash_command_payload.all-fields-sample.json")).unwrap();
    let fields: Vec<(String, String)> = sample
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().map_or_else(|| v.to_string(), str::to_string),
            )
        })
        .collect();
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let r = env.post_signed("/webhooks/slack/commands", &body).await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["response_type"], "ephemeral");
    assert!(
        answer["text"].as_str().unwrap().contains("promote"),
        "empty text is help"
    );
    let gates = env.server.api("/api/v1/gates").await;
    assert_eq!(gates["gates"].as_array().map_or(0, Vec::len), 0, "{gates}");
    let audit = env.server.api("/api/v1/audit").await;
    assert!(audit["audit"].as_array().unwrap().is_empty(), "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_documented_signing_example_verifies() {
    let env = env(
        Backend::Sqlite,
        Setup {
            secret: "8f742231b10e8888abcd99yyyzzz85a5",
            ..Setup::default()
        },
    )
    .await;
    env.clock.as_ref().unwrap().set(1_531_420_618_000 + 42_000);
    let body = fixture("slash_command.signing-docs-example.body");
    assert_eq!(body.len(), 362);
    let r = client()
        .post(env.server.at("/webhooks/slack/commands"))
        .header("x-slack-request-timestamp", "1531420618")
        .header(
            "x-slack-signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        )
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["response_type"], "ephemeral");
    assert!(answer["text"]
        .as_str()
        .unwrap()
        .contains("/webhook-collect promote"));
    // Six minutes later the same request is a possible replay.
    env.clock.as_ref().unwrap().set(1_531_420_618_000 + 360_000);
    let r = client()
        .post(env.server.at("/webhooks/slack/commands"))
        .header("x-slack-request-timestamp", "1531420618")
        .header(
            "x-slack-signature",
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_message_is_delayed_and_sent_once() {
    let env = env(
        Backend::Sqlite,
        Setup {
            manual_clock: false,
            ..Setup::default()
        },
    )
    .await;
    env.slack.rate_limit_next("chat.postMessage", 1);
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    // The retry comes due on the wall clock, which a drain does not wait for.
    eventually("the waiting message after a 429", WAIT, || async {
        !env.waiting_messages().is_empty()
    })
    .await;
    sim.tick().await;
    env.outbox_empty().await;
    let attempts = env.slack.attempts("chat.postMessage");
    assert_eq!(attempts.len(), 2, "one refused, one sent");
    assert_eq!(attempts[0].status, 429);
    assert_eq!(attempts[1].status, 200);
    let gap = attempts[1].at - attempts[0].at;
    assert!(
        gap >= Duration::from_millis(900),
        "Retry-After honoured: {gap:?}"
    );
    assert_eq!(env.waiting_messages().len(), 1);

    // ok:false "ratelimited" on a 200 is retried too.
    env.slack
        .fail_next("chat.update", 200, None, Some("ratelimited"));
    let start = env.waiting_messages().remove(0);
    assert_eq!(
        env.click(ALICE, "gatebot_approve", &start, "trig-rl").await,
        200
    );
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
    eventually("the update after a ratelimited answer", WAIT, || async {
        env.slack.ok("chat.update").len() == 1
    })
    .await;
    env.outbox_empty().await;
    let attempts: Vec<bool> = env
        .slack
        .attempts("chat.update")
        .iter()
        .map(|r| r.failed)
        .collect();
    assert_eq!(
        attempts,
        vec![true, false],
        "the first answered ok:false, then one update"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_commands_open_gates_and_answer_ephemerally() {
    let env = env(Backend::Sqlite, Setup::default()).await;
    // Gate changes are stored, acknowledged at once, answered on the response_url.
    let (status, body) = env.command(ALICE, "promote 42 looks good", "cmd-1").await;
    assert_eq!(status, 200);
    assert_eq!(body["response_type"], "ephemeral");
    assert!(
        body["text"].as_str().unwrap().contains("acme/shop#42"),
        "{body}"
    );
    env.wait_gate("/gates/promote/acme/shop/pr/42", "open")
        .await;
    let answer = env.response("cmd-1").await;
    assert_eq!(answer["response_type"], "ephemeral");
    assert!(answer["text"]
        .as_str()
        .unwrap()
        .contains("opened /gates/promote/acme/shop/pr/42"));
    let audit = env.audit("/gates/promote/acme/shop/pr/42").await;
    let open = audit.iter().find(|a| a["action"] == "open").unwrap();
    assert_eq!(open["reason"], "looks good");
    assert_eq!(open["actor"]["source"], "slack");

    let (status, _) = env.command(BOB, "promote acme/shop#43", "cmd-2").await;
    assert_eq!(status, 200);
    env.wait_gate("/gates/promote/acme/shop/pr/43", "open")
        .await;
    let (_, _) = env
        .command(BOB, "traffic canary/test/podinfo", "cmd-3")
        .await;
    env.wait_gate("/gates/traffic/canary/test/podinfo", "open")
        .await;
    let (_, _) = env.command(ALICE, "hold 43 freeze", "cmd-4").await;
    env.wait_gate("/gates/promote/acme/shop/pr/43", "held")
        .await;
    let (_, _) = env.command(ALICE, "promote 43", "cmd-5").await;
    assert!(env.response("cmd-5").await["text"]
        .as_str()
        .unwrap()
        .contains("held"));
    let (_, _) = env.command(ALICE, "unhold 43", "cmd-6").await;
    env.wait_gate("/gates/promote/acme/shop/pr/43", "closed")
        .await;

    // Refused at once, on user_id (user_name is ignored), and audited.
    let (status, body) = env.command(MALLORY, "promote 44", "cmd-m").await;
    assert_eq!(status, 200);
    assert!(
        body["text"].as_str().unwrap().contains("not an approver"),
        "{body}"
    );
    assert_eq!(
        env.gate_state("/gates/promote/acme/shop/pr/44").await,
        "closed"
    );
    assert!(env
        .audit("/gates/promote/acme/shop/pr/44")
        .await
        .iter()
        .any(|a| a["action"] == "refuse"));

    // Answered synchronously.
    let (_, body) = env.command(MALLORY, "status 42", "cmd-s").await;
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("/gates/promote/acme/shop/pr/42") && text.contains("open"),
        "{text}"
    );
    let (_, body) = env.command(MALLORY, "help", "cmd-h").await;
    assert!(body["text"].as_str().unwrap().contains("/gatebot promote"));
    let (_, body) = env.command(ALICE, "promot 42", "cmd-u").await;
    assert!(body["text"].as_str().unwrap().contains("unknown command"));
    let (_, body) = env.command(ALICE, "promote", "cmd-t").await;
    assert!(body["text"]
        .as_str()
        .unwrap()
        .contains("needs a pull request"));

    // Slack's certificate check.
    let r = client()
        .post(env.server.at("/webhooks/slack/commands"))
        .body("ssl_check=1&token=legacy")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_group_approvers_are_expanded_and_cached() {
    let env = env(
        Backend::Sqlite,
        Setup {
            approvers: &["S0RELEASE"],
            ..Setup::default()
        },
    )
    .await;
    env.slack.set_group("S0RELEASE", &["UCAROL", "UDAVE"]);
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    assert_eq!(
        env.click(MALLORY, "gatebot_approve", &start, "g-1").await,
        200
    );
    assert!(env.response("g-1").await["text"]
        .as_str()
        .unwrap()
        .contains("<!subteam^S0RELEASE>"));
    assert_eq!(
        env.click("UCAROL", "gatebot_approve", &start, "g-2").await,
        200
    );
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
    let (status, _) = env.command("UDAVE", "promote 42", "g-3").await;
    assert_eq!(status, 200);
    env.wait_gate("/gates/promote/acme/shop/pr/42", "open")
        .await;
    let calls = env.slack.ok("usergroups.users.list");
    assert_eq!(calls.len(), 1, "membership is cached: {calls:?}");
    assert_eq!(calls[0].body["usergroup"], "S0RELEASE");
}

/// A user group Slack would not list now: the click waits as Slack said
/// (Retry-After) and is then decided, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_waits_for_a_rate_limited_user_group() {
    let env = env(
        Backend::Sqlite,
        Setup {
            approvers: &["S0RELEASE"],
            manual_clock: false,
            ..Setup::default()
        },
    )
    .await;
    env.slack.set_group("S0RELEASE", &["UCAROL"]);
    env.slack.rate_limit_next("usergroups.users.list", 1);
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    assert_eq!(
        env.click("UCAROL", "gatebot_approve", &start, "rl-1").await,
        200
    );
    // Polled: the retry comes due on the wall clock, which a drain does not wait for.
    eventually("the click decided after the 429", WAIT, || async {
        env.gate_state("/gates/start/acme/shop/pr/42").await == "open"
    })
    .await;
    let asked: Vec<Request> = env
        .slack
        .requests()
        .into_iter()
        .filter(|r| r.method == "usergroups.users.list")
        .collect();
    let statuses: Vec<u16> = asked.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429, 200], "{statuses:?}");
    let gap = asked[1].at - asked[0].at;
    assert!(
        gap >= Duration::from_millis(900),
        "asked again after {gap:?}"
    );
}

/// A check's metadata is anyone's word: `slack_channel` naming a channel
/// `[[slack.channels]]` does not bind to the canary does not take the
/// Approve buttons there (issue 41, B.9 for Slack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_channel_goes_only_where_the_policy_binds_it() {
    let github = FakeGithub::start().await;
    let policy = "[[slack.channels]]\nchannel = \"#billing\"\nnamespace = \"billing\"\n";
    let env = env(
        Backend::Sqlite,
        Setup {
            policy: Some((policy, &github)),
            ..Setup::default()
        },
    )
    .await;
    // Bound, but to another namespace: test/podinfo's check may not name it either.
    for (channel, pr) in [("C0PRIVATEEXEC", 43), ("#billing", 42)] {
        let hooks = vec![Hook::new(
            "start-gate",
            HookType::ConfirmRollout,
            env.server.at(&format!("/gates/start/acme/shop/pr/{pr}")),
        )
        .with_metadata("slack_channel", channel)];
        let mut sim = released(hooks).await;
        sim.tick().await;
    }
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/43")
        .await;
    env.waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let channels: Vec<_> = env
        .waiting_messages()
        .iter()
        .map(|m| m.body["channel"].clone())
        .collect();
    assert_eq!(start.body["channel"], "#deploys", "{channels:?}");
    assert!(
        channels.iter().all(|c| c == "#deploys"),
        "not bound to test/podinfo nor to acme/shop: {channels:?}"
    );
    let dropped =
        r#"gatebot_notifications_dropped_total{sink="slack",reason="slack_channel_not_bound"}"#;
    assert_eq!(env.server.metric(dropped).await, 2.0);
    env.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_scoped_and_loadtester_waits_are_announced() {
    let github = FakeGithub::start().await;
    let policy = "[[slack.channels]]\nchannel = \"#team-a\"\ncanary = \"test/podinfo\"\n";
    let env = env(
        Backend::Sqlite,
        Setup {
            policy: Some((policy, &github)),
            ..Setup::default()
        },
    )
    .await;
    let hooks = vec![
        Hook::new(
            "start-gate",
            HookType::ConfirmRollout,
            env.server.at("/gates/start"),
        )
        .with_metadata("slack_channel", "#team-a"),
        Hook::new(
            "promote-gate",
            HookType::ConfirmPromotion,
            env.server.at("/gate/check"),
        ),
        Hook::new(
            "rollback",
            HookType::Rollback,
            env.server.at("/rollback/check"),
        ),
    ];
    let mut sim = released(hooks).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/canary/test/podinfo")
        .await;
    assert_eq!(
        start.body["channel"], "#team-a",
        "the canary's metadata picks the channel [[slack.channels]] binds to it"
    );
    assert!(!text_of(&start).contains("github.com"), "no PR, no link");
    assert_eq!(
        env.click(ALICE, "gatebot_approve", &start, "c-1").await,
        200
    );
    env.wait_gate("/gates/start/canary/test/podinfo", "open")
        .await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    let legacy = env
        .waiting_message_for("/loadtester/gate/test/podinfo")
        .await;
    assert_eq!(legacy.body["channel"], "#deploys");
    assert_eq!(buttons(&legacy).len(), 2);
    assert_eq!(
        env.click(ALICE, "gatebot_reject", &legacy, "c-2").await,
        200
    );
    env.server.drained().await;
    let g = env.server.api("/api/v1/gates").await;
    assert!(
        g["gates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["gate"] == "/loadtester/rollback/test/podinfo" && g["state"] == "open"),
        "drained, yet still waiting for the loadtester rollback gate opened"
    );
    assert!(sim.run_until(|s| s.rollbacks() == 1, 3).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_slack_settings_the_routes_answer_a_clear_4xx() {
    let db = TestDb::new(Backend::Sqlite).await;
    let server = TestServer::start(db.config(), Options::default()).await;
    for path in ["/webhooks/slack/interactions", "/webhooks/slack/commands"] {
        let r = client()
            .post(server.at(path))
            .body("payload=%7B%7D")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("Slack is not configured")
                && text.contains("GATEBOT_SLACK_SIGNING_SECRET"),
            "{text}"
        );
    }
    // The rest of gatebot works.
    let r = client()
        .post(server.at("/gates/promote/acme/shop/pr/1"))
        .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_override_message_templates() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("slack")).unwrap();
    std::fs::write(
        dir.path().join("slack/wait.j2"),
        "Custom: {{ canary }} needs a look at {{ gate }}",
    )
    .unwrap();
    let env = env(
        Backend::Sqlite,
        Setup {
            templates_dir: Some(dir.path().to_path_buf()),
            ..Setup::default()
        },
    )
    .await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let message = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let text = text_of(&message);
    assert!(
        text.contains("Custom: test/podinfo needs a look at /gates/start/acme/shop/pr/42"),
        "{text}"
    );
    assert_eq!(buttons(&message).len(), 2, "the buttons stay");
}

/// Approve on a held gate changes nothing and tells the clicker why, in the
/// words the core's refusal carries (`Told`), worded when the answer is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_a_held_gate_is_answered_with_the_hold() {
    let env = env(Backend::Sqlite, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let (status, _) = env.command(ALICE, "hold 42 incident", "cmd-hold").await;
    assert_eq!(status, 200);
    env.wait_gate("/gates/start/acme/shop/pr/42", "held").await;
    assert_eq!(
        env.click(BOB, "gatebot_approve", &start, "trig-held").await,
        200
    );
    let text = env.response("trig-held").await["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.starts_with(":warning: /gates/start/acme/shop/pr/42 is held by")
            && text.ends_with("via slack: lift the hold first"),
        "{text}"
    );
    assert_eq!(env.gate_state("/gates/start/acme/shop/pr/42").await, "held");
}

/// A signed click whose button names another gate than its message's wait
/// (PR 42's start message, carrying the promote gate) opens nothing and
/// decides nothing: the clicker is told, the delivery is given up, and the
/// start message's own Approve still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_acts_only_at_its_own_waits_gate() {
    let env = env(Backend::Sqlite, Setup::default()).await;
    let mut sim = released(pr_hooks(&env.server.url, 42)).await;
    sim.tick().await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    let mut value: Value = serde_json::from_str(&button_value(&start, "gatebot_approve")).unwrap();
    value["g"] = json!("/gates/promote/acme/shop/pr/42");
    let payload = click_payload(
        ALICE,
        "alice",
        "gatebot_approve",
        &value.to_string(),
        "trig-other",
        &env.slack.response_url("trig-other"),
    );
    assert_eq!(env.interact(&payload).await.status(), 200);
    let text = env.response("trig-other").await["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("this button names /gates/promote/acme/shop/pr/42")
            && text.contains("nothing was done"),
        "{text}"
    );
    env.server.drained().await;
    for gate in [
        "/gates/promote/acme/shop/pr/42",
        "/gates/start/acme/shop/pr/42",
    ] {
        assert_eq!(env.gate_state(gate).await, "closed", "{gate}");
    }
    assert_eq!(
        env.click(BOB, "gatebot_approve", &start, "trig-own").await,
        200
    );
    env.wait_gate("/gates/start/acme/shop/pr/42", "open").await;
}
