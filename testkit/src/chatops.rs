//! gatebot with GitHub and Slack both set up against their fakes, and a policy
//! file: what the release-policy tests share. People act as the real
//! channels carry them: signed PR comments, signed slash commands and clicks.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{Clock, ManualClock, SharedClock};
use gatebot::testing::github::verify::sign;
use gatebot::testing::notify::WorkerSettings;
use gatebot::{Config, Options};
use serde_json::{json, Value};

use crate::fake_github::FakeGithub;
use crate::fake_slack::{post_signed, FakeSlack, Request};
use crate::github_payloads::{comment_at, fixture, github_time};
use crate::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};

pub const SLACK_SECRET: &str = "test-signing-secret";
pub const GITHUB_SECRET: &str = "github-secret";

pub struct ChatOps {
    pub server: TestServer,
    pub slack: FakeSlack,
    pub github: FakeGithub,
    /// Set when the test drives time; else requests are signed at the wall clock's now.
    pub clock: Option<Arc<ManualClock>>,
    pub db: TestDb,
    /// What the server was started with, for another replica of it.
    pub config: Config,
}

/// How a test sets up its gatebot.
#[derive(Default)]
pub struct Setup<'a> {
    pub policy: &'a str,
    /// GitHub logins and their repository permission on the fake.
    pub permissions: &'a [(&'a str, &'a str)],
    pub clock: Option<Arc<ManualClock>>,
}

fn options(clock: Option<Arc<ManualClock>>) -> Options {
    Options {
        clock: clock.map(|c| c as SharedClock),
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    }
}

impl ChatOps {
    pub async fn start(backend: Backend, setup: Setup<'_>) -> Self {
        Self::start_with(backend, setup, |_| {}).await
    }

    /// [`ChatOps::start`], with the configuration edited last.
    pub async fn start_with(
        backend: Backend,
        setup: Setup<'_>,
        edit: impl FnOnce(&mut Config),
    ) -> Self {
        let db = TestDb::new(backend).await;
        let slack = FakeSlack::start().await;
        let github = FakeGithub::start().await;
        for (login, role) in setup.permissions {
            github.set_permission(login, role);
        }
        let mut config = db.config();
        config.github.token = Some("ghp_test".to_string().into());
        config.github.webhook_secret = Some(GITHUB_SECRET.to_string().into());
        config.github.api_url = github.url.clone();
        config.github.repository = Some("acme/shop".parse().unwrap());
        config.admin_token = Some(ADMIN_TOKEN.to_string().into());
        config.slack.signing_secret = Some(SLACK_SECRET.to_string().into());
        config.slack.bot_token = Some("xoxb-test-token".to_string().into());
        config.slack.channel = Some("#deploys".into());
        config.slack.api_url = slack.api_url();
        let policy = db.dir.path().join("policy.toml");
        std::fs::write(&policy, setup.policy).unwrap();
        config.policy = Some(policy);
        edit(&mut config);
        let server = TestServer::start(config.clone(), options(setup.clock.clone())).await;
        Self {
            server,
            slack,
            github,
            clock: setup.clock,
            db,
            config,
        }
    }

    /// Another replica of the server, on the same store and fakes.
    pub async fn replica(&self) -> TestServer {
        TestServer::start(self.config.clone(), options(self.clock.clone())).await
    }

    /// Now, as the requests are signed.
    pub fn now_ms(&self) -> i64 {
        match &self.clock {
            Some(clock) => clock.now_ms(),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64,
        }
    }

    /// A signed comment by `user` on acme/shop#`pr`, whose author is
    /// `author`, applied.
    pub async fn comment_by(&self, pr: u64, author: &str, id: u64, user: &str, body: &str) {
        let mut payload = comment_at(pr, id, user, body, self.now_ms());
        payload["issue"]["user"]["login"] = json!(author);
        self.delivered("issue_comment", &format!("delivery-{id}"), &payload)
            .await;
    }

    /// GitHub says acme/shop#`pr`'s head is now `commit` (a push), applied.
    pub async fn pushed(&self, pr: u64, commit: &str) {
        let mut push = fixture("pull_request.synchronize.json");
        push["repository"]["full_name"] = json!("acme/shop");
        push["number"] = json!(pr);
        push["pull_request"]["number"] = json!(pr);
        push["pull_request"]["head"]["sha"] = json!(commit);
        push["pull_request"]["updated_at"] = json!(github_time(self.now_ms()));
        push["after"] = json!(commit);
        self.delivered("pull_request", &format!("push-{commit}"), &push)
            .await;
    }

    /// `payload` delivered as GitHub's signed `event`, accepted and applied.
    async fn delivered(&self, event: &str, delivery: &str, payload: &Value) {
        let payload = serde_json::to_vec(payload).unwrap();
        let r = client()
            .post(self.server.at("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", sign(GITHUB_SECRET, &payload))
            .body(payload)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
        self.server.drained().await;
    }

    /// gatebot's replies on acme/shop#`pr`, one after another.
    pub fn replies(&self, pr: u64) -> Vec<String> {
        self.github
            .replies(pr)
            .into_iter()
            .map(|c| c.body)
            .collect()
    }

    /// `/gatebot <text>` from `user` (named `name`); the inline answer's
    /// status and text.
    pub async fn slash(&self, user: &str, name: &str, text: &str, trigger: &str) -> (u16, String) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("command", "/gatebot"),
                ("text", text),
                ("user_id", user),
                ("user_name", name),
                ("team_id", "T0"),
                ("channel_id", "C0"),
                ("response_url", &self.slack.response_url(trigger)),
                ("trigger_id", trigger),
            ])
            .finish();
        let r = post_signed(
            &self.server.at("/webhooks/slack/commands"),
            &body,
            self.now_ms() / 1000,
            SLACK_SECRET,
        )
        .await;
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        (
            status,
            body["text"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// What gatebot answered later on a command's response_url, once drained.
    pub async fn answers(&self, trigger: &str) -> Vec<String> {
        self.server.drained().await;
        self.slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == trigger)
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// A signed click of `action` on a posted message by `user` (named
    /// `name`) over HTTP, as [`ChatOps::click_payload`]; the status.
    pub async fn click(
        &self,
        user: &str,
        name: &str,
        action: &str,
        message: &Request,
        trigger: &str,
    ) -> u16 {
        let payload = self.click_payload(user, name, action, message, trigger);
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        post_signed(
            &self.server.at("/webhooks/slack/interactions"),
            &body,
            self.now_ms() / 1000,
            SLACK_SECRET,
        )
        .await
        .status()
        .as_u16()
    }

    /// `user` submits the reason modal `view` (as `views.open` showed it)
    /// with `reason`: Slack's `view_submission`, signed.
    pub async fn submit_reason(
        &self,
        view: &Value,
        user: &str,
        trigger: &str,
        reason: &str,
    ) -> u16 {
        let mut p = fixture_json("slack/view_submission_payload.all-fields-sample.json");
        p["user"] = json!({"id": user, "username": user.to_ascii_lowercase(), "name": user.to_ascii_lowercase(), "team_id": "T9TK3CUKW"});
        p["trigger_id"] = json!(trigger);
        p["view"]["type"] = json!("modal");
        p["view"]["callback_id"] = view["callback_id"].clone();
        p["view"]["private_metadata"] = view["private_metadata"].clone();
        p["view"]["state"] = json!({"values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}});
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &p.to_string())
            .finish();
        post_signed(
            &self.server.at("/webhooks/slack/interactions"),
            &body,
            self.now_ms() / 1000,
            SLACK_SECRET,
        )
        .await
        .status()
        .as_u16()
    }

    /// The interaction Slack sends for a click of `action` on a posted
    /// message by `user` (named `name`): Slack's documented example with
    /// this button, person and trigger. Socket Mode carries it as JSON.
    pub fn click_payload(
        &self,
        user: &str,
        name: &str,
        action: &str,
        message: &Request,
        trigger: &str,
    ) -> Value {
        let button = button(message, action);
        let mut payload = fixture_json("slack/block_actions.docs-example.json");
        payload["user"] =
            json!({"id": user, "username": name, "name": name, "team_id": "T9TK3CUKW"});
        payload["trigger_id"] = json!(trigger);
        payload["response_url"] = json!(self.slack.response_url(trigger));
        payload["message"]["ts"] = json!("1714572120.000001");
        payload["container"]["message_ts"] = json!("1714572120.000001");
        payload["channel"] = json!({"id": "CDEPLOYS", "name": "deploys"});
        payload["container"]["channel_id"] = json!("CDEPLOYS");
        let action_ts = format!("{:.6}", self.now_ms() as f64 / 1000.0);
        payload["actions"] = json!([{
            "action_id": action, "block_id": "b", "type": "button",
            "value": button["value"], "text": button["text"], "action_ts": action_ts,
        }]);
        payload
    }

    /// The slash command Slack sends over Socket Mode: the fields of Slack's
    /// signing example as a JSON object, with this person, text and trigger.
    pub fn slash_payload(&self, user: &str, name: &str, text: &str, trigger: &str) -> Value {
        let path = crate::repository()
            .join("tests/fixtures/slack/slash_command.signing-docs-example.body");
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut fields: serde_json::Map<String, Value> = form_urlencoded::parse(&body)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
        for (k, v) in [
            ("command", "/gatebot"),
            ("text", text),
            ("user_id", user),
            ("user_name", name),
            ("response_url", &self.slack.response_url(trigger)),
            ("trigger_id", trigger),
        ] {
            fields.insert(k.into(), json!(v));
        }
        fields.insert("is_enterprise_install".into(), json!(false));
        Value::Object(fields)
    }

    /// Posted messages that are neither thread replies nor waiting messages.
    pub fn announcements(&self) -> Vec<String> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("blocks").is_none() && r.body.get("thread_ts").is_none())
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The latest waiting message posted for the gate `key`.
    pub fn waiting_message(&self, key: &str) -> Option<Request> {
        self.slack.ok("chat.postMessage").into_iter().rfind(|r| {
            r.body.get("thread_ts").is_none() && r.body["blocks"].to_string().contains(key)
        })
    }
}

/// The button `action` of a posted message.
fn button(message: &Request, action: &str) -> Value {
    message.body["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .find(|b| b["action_id"] == action)
        .unwrap_or_else(|| panic!("no {action} button in {}", message.body))
}

/// A JSON file under tests/fixtures/.
fn fixture_json(name: &str) -> Value {
    let path = crate::repository().join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
