//! Snapshots of every message gatebot renders, taken from what it really sends:
//! the Flagger simulator, signed GitHub deliveries and signed Slack clicks and
//! slash commands drive gatebot over real HTTP, and the snapshots are the
//! bodies the fake GitHub and Slack APIs received and the answers gatebot gave
//! inline. SQLite and PostgreSQL share one set of snapshots in tests/snapshots/.
//!
//! The clock is a manual one, so times in messages are fixed and stay in the
//! snapshots (their format is part of what is checked); only what differs per
//! run is filtered: uuids (job markers), wait ids, ports and the temporary
//! directory. How to review and update them: docs/testing.md, "Snapshots of messages".

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use gatebot::testing::clock::{Clock, ManualClock, SharedClock};
use gatebot::testing::notify::WorkerSettings;
use gatebot::testing::store::QueueName;
use gatebot::Options;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::{post_signed, FakeSlack, Request};
use gatebot_testkit::flagger::{
    failing_webhook, pr_hooks, FlaggerSim, Hook, HookType, Phase, Strategy,
};
use gatebot_testkit::github_payloads::{comment_at, fixture, github_time};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(20);
/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
/// How far the clock moves for one analysis interval of the simulator.
const INTERVAL: i64 = 30_000;
const SLACK_SECRET: &str = "snapshot-slack-secret";
const GITHUB_SECRET: &str = "snapshot-github-secret";
const ALICE: &str = "UALICE";
const BOB: &str = "UBOB";
const MALLORY: &str = "UMALLORY";
/// The author of every PR in the comment fixture.
const AUTHOR: &str = "Kobzol";
/// PR whose author maps to ALICE in the policy (four eyes in Slack).
const ALICES_PR: u64 = 77;
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

/// Four eyes on both channels, a team for `/traffic` on GitHub, and nobody
/// allowed to approve traffic from Slack: every refusal has a way to happen.
const POLICY: &str = r#"
[github]
forbid_self_approval = true

[github.commands.traffic]
teams = ["acme/release-managers"]

[slack]
forbid_self_approval = true

[slack.commands.traffic]
approvers = []

[users]
alice-gh = "UALICE"

[[slack.channels]]
channel = '#team-a'
canary = "test/podinfo"
"#;

struct Env {
    server: TestServer,
    /// Where the simulator's event hook points: see [`event_relay`].
    events_url: String,
    github: FakeGithub,
    slack: FakeSlack,
    clock: Arc<ManualClock>,
    db: TestDb,
}

#[derive(Default)]
struct Setup {
    approval_ttl: Option<Duration>,
    burst: Option<u32>,
    public_url: Option<String>,
}

/// gatebot with GitHub (a token) and Slack both configured against fakes.
async fn env(backend: Backend, setup: Setup) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    github.set_permission("rita", "read");
    github.set_permission(AUTHOR, "admin");
    github.set_author(ALICES_PR, "alice-gh");
    let slack = FakeSlack::start().await;
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(GITHUB_SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    config.slack.signing_secret = Some(SLACK_SECRET.to_string().into());
    config.slack.bot_token = Some("xoxb-test-token".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    config.slack.approvers = vec![ALICE.into(), BOB.into()];
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    config.policy = Some(policy);
    if let Some(ttl) = setup.approval_ttl {
        config.approval_ttl = ttl;
    }
    if let Some(burst) = setup.burst {
        config.limits.notify_burst = burst;
    }
    config.public_url = setup.public_url;
    let clock = ManualClock::new(NOW);
    let options = Options {
        clock: Some(clock.clone() as SharedClock),
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    };
    let server = TestServer::start(config, options).await;
    let events_url = event_relay(&server.url, clock.clone()).await;
    Env {
        server,
        events_url,
        github,
        slack,
        clock,
        db,
    }
}

/// Flagger's event hook, relayed to gatebot after the clock moved a
/// millisecond, as real calls take time. Without it two events of one tick
/// share a millisecond, and gatebot sends the jobs of one lane (one Slack
/// channel's messages) that are due at the same millisecond in the order of
/// their random ids: the thread replies, and the final state on the message,
/// would differ from run to run.
async fn event_relay(gatebot: &str, clock: Arc<ManualClock>) -> String {
    let target = format!("{gatebot}/flagger/events");
    let relay = move |body: Bytes| {
        let (target, clock) = (target.clone(), clock.clone());
        async move {
            clock.advance(1);
            let r = client()
                .post(&target)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
            (status, r.text().await.unwrap())
        }
    };
    let app = Router::new().route("/flagger/events", post(relay));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/flagger/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// `s` as a regular expression that matches only itself.
fn literal(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

// ---- snapshots ----

impl Env {
    /// Filters for what differs from run to run; `what` heads the snapshot file.
    fn settings(&self, what: &str) -> insta::Settings {
        let mut s = insta::Settings::clone_current();
        s.set_description(what);
        s.set_omit_expression(true);
        s.add_filter(
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[uuid]",
        );
        // Wait ids: a block id, and the button value (JSON in a JSON string).
        s.add_filter(r"gatebot-wait-\d+", "gatebot-wait-[wait]");
        s.add_filter(r#"\\"w\\":\d+"#, r#"\"w\":[wait]"#);
        s.add_filter(r"127\.0\.0\.1:\d+", "127.0.0.1:[port]");
        let dir = self.db.dir.path().display().to_string();
        s.add_filter(&literal(&dir), "[tmp]");
        s
    }

    fn snap(&self, name: &str, what: &str, text: &str) {
        self.settings(what)
            .bind(|| insta::assert_snapshot!(name, text));
    }

    fn snap_json(&self, name: &str, what: &str, value: &Value) {
        self.settings(what)
            .bind(|| insta::assert_json_snapshot!(name, value));
    }
}

// ---- driving gatebot ----

impl Env {
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Waits until every delivery is worked and every notification sent.
    async fn settle(&self) {
        let store = &self.server.state.store;
        eventually("the inbox and outbox to drain", WAIT, || async {
            store.queues().pending(QueueName::Inbox).await.unwrap() == 0
                && store.queues().pending(QueueName::Outbox).await.unwrap() == 0
        })
        .await;
    }

    /// A canary of PR `pr` past its first deployment, with `rev-b` applied.
    async fn canary(&self, namespace: &str, pr: u64, extra: Vec<Hook>) -> FlaggerSim {
        let mut hooks = pr_hooks(&self.server.url, pr);
        for hook in &mut hooks {
            if hook.hook_type == HookType::Event {
                hook.url = self.events_url.clone();
            }
        }
        hooks.extend(extra);
        let mut sim = FlaggerSim::new("podinfo", namespace, CANARY, hooks);
        sim.deploy("rev-a");
        self.step(&mut sim).await;
        assert_eq!(sim.phase(), Phase::Initialized);
        sim.deploy("rev-b");
        sim
    }

    /// One analysis interval: the clock moves, then Flagger runs. Everything
    /// is sent first: a jump of the clock past a job's lease while it is being
    /// sent would let the worker send it again (it delivers at least once).
    async fn step(&self, sim: &mut FlaggerSim) -> Phase {
        self.settle().await;
        self.clock.advance(INTERVAL);
        sim.tick().await
    }

    async fn run_until(&self, sim: &mut FlaggerSim, phase: Phase, max: u32) {
        for _ in 0..max {
            if sim.phase() == phase {
                return;
            }
            self.step(sim).await;
        }
        assert_eq!(sim.phase(), phase, "Flagger events: {:#?}", sim.events());
    }

    // ---- GitHub ----

    async fn deliver(&self, event: &str, delivery: &str, payload: &Value) {
        let body = serde_json::to_vec(payload).unwrap();
        let r = client()
            .post(self.server.at("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header(
                "x-hub-signature-256",
                gatebot::testing::github::verify::sign(GITHUB_SECRET, &body),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    }

    /// Delivers a comment written now, and returns what gatebot answered: the
    /// reactions on it and the comments it posted in reply.
    async fn say(&self, pr: u64, id: u64, user: &str, body: &str) -> String {
        let payload = comment_at(pr, id, user, body, self.now());
        self.say_payload(pr, id, payload).await
    }

    async fn say_payload(&self, pr: u64, id: u64, payload: Value) -> String {
        let before = self.github.replies(pr).len();
        self.deliver("issue_comment", &format!("d-{id}"), &payload)
            .await;
        self.settle().await;
        // Reactions are sent independently of each other: their order is not kept.
        let mut reactions = self.github.reactions_on(id);
        reactions.sort();
        let mut out = format!(
            "reactions: {}\n",
            if reactions.is_empty() {
                "none".to_string()
            } else {
                reactions.join(", ")
            }
        );
        let replies = self.github.replies(pr);
        if replies.len() == before {
            out.push_str("no reply\n");
        }
        for reply in &replies[before..] {
            out.push_str("----\n");
            out.push_str(&reply.body);
            out.push('\n');
        }
        out
    }

    /// The body of the PR's status comment once everything is sent.
    async fn status_comment(&self, pr: u64) -> String {
        self.settle().await;
        let comments = self.github.status_comments(pr);
        assert_eq!(comments.len(), 1, "one status comment: {comments:#?}");
        comments[0].body.clone()
    }

    fn pull_request_event(&self, name: &str, pr: u64) -> Value {
        let mut p = fixture(name);
        p["repository"]["full_name"] = json!("acme/shop");
        p["number"] = json!(pr);
        p["pull_request"]["number"] = json!(pr);
        p["pull_request"]["updated_at"] = json!(github_time(self.now()));
        p
    }

    // ---- Slack ----

    async fn post_slack(&self, path: &str, body: &str) -> reqwest::Response {
        post_signed(
            &self.server.at(path),
            body,
            self.clock.now_secs(),
            SLACK_SECRET,
        )
        .await
    }

    async fn click(&self, user: &str, action: &str, message: &Request, trigger: &str) {
        let payload = click_payload(
            user,
            action,
            &button_value(message, action),
            trigger,
            &self.slack.response_url(trigger),
        );
        let body = form(&[("payload", &payload.to_string())]);
        let r = self.post_slack("/webhooks/slack/interactions", &body).await;
        assert_eq!(r.status().as_u16(), 200);
        // Worked before the clock moves on, so its times are the click's.
        self.settle().await;
    }

    /// A slash command; returns gatebot's inline answer.
    async fn command(&self, user: &str, text: &str, trigger: &str) -> Value {
        let name = user.to_ascii_lowercase();
        let body = form(&[
            ("token", "legacy"),
            ("team_id", "T0"),
            ("team_domain", "acme"),
            ("channel_id", "CDEPLOYS"),
            ("channel_name", "deploys"),
            ("user_id", user),
            ("user_name", &name),
            ("command", "/gatebot"),
            ("text", text),
            ("api_app_id", "A0"),
            ("response_url", &self.slack.response_url(trigger)),
            ("trigger_id", trigger),
        ]);
        let r = self.post_slack("/webhooks/slack/commands", &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let answer = r.json().await.unwrap();
        self.settle().await;
        answer
    }

    /// What gatebot posted on the response_url of `trigger`, once sent.
    async fn response(&self, trigger: &str) -> Value {
        self.settle().await;
        let mut answers: Vec<Value> = self
            .slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == trigger)
            .map(|r| r.body)
            .collect();
        assert_eq!(answers.len(), 1, "one answer to {trigger}: {answers:#?}");
        let mut answer = answers.remove(0);
        // Added by the fake, not sent by gatebot.
        answer.as_object_mut().unwrap().remove("_response_url_id");
        answer
    }

    /// Waiting messages posted (not thread replies), in order.
    fn waiting_messages(&self) -> Vec<Request> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("thread_ts").is_none() && r.body.get("blocks").is_some())
            .collect()
    }

    /// The newest waiting message for `gate`, once everything is sent.
    async fn waiting_message_for(&self, gate: &str) -> Request {
        self.settle().await;
        self.waiting_messages()
            .into_iter()
            .rfind(|m| m.body["blocks"].to_string().contains(gate))
            .unwrap_or_else(|| panic!("no waiting message for {gate}"))
    }

    /// The ts Slack gave a posted message (the fake numbers posts in order).
    fn ts_of(&self, message: &Request) -> String {
        let n = self
            .slack
            .ok("chat.postMessage")
            .iter()
            .position(|r| r.body == message.body)
            .expect("posted")
            + 1;
        format!("1714572120.{n:06}")
    }

    /// The message as its last update left it, once everything is sent.
    async fn updated(&self, message: &Request) -> Value {
        self.settle().await;
        let ts = self.ts_of(message);
        self.slack
            .ok("chat.update")
            .into_iter()
            .rfind(|r| r.body["ts"] == ts)
            .unwrap_or_else(|| panic!("{ts} was never updated"))
            .body
    }

    /// Replies in the message's thread, in order.
    async fn thread(&self, message: &Request) -> Value {
        self.settle().await;
        let ts = self.ts_of(message);
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body["thread_ts"] == ts)
            .map(|r| r.body)
            .collect()
    }
}

fn form(fields: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

/// A `block_actions` payload as Slack sends it for a button click.
fn click_payload(
    user: &str,
    action: &str,
    value: &str,
    trigger: &str,
    response_url: &str,
) -> Value {
    let name = user.to_ascii_lowercase();
    json!({
        "type": "block_actions",
        "team": {"id": "T0", "domain": "acme"},
        "user": {"id": user, "username": name, "name": name, "team_id": "T0"},
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

fn button_value(message: &Request, action: &str) -> String {
    message.body["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .find(|b| b["action_id"] == action)
        .and_then(|b| b["value"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no {action} button in {}", message.body))
}

gatebot_testkit::on_both_stores!(
    github_status_comment_follows_the_rollout,
    github_status_comment_of_expired_and_closed_gates,
    github_replies_and_refusals,
    slack_messages_of_an_approved_rollout,
    slack_messages_of_a_rejected_rollout,
    slack_slash_commands_and_refusals,
    slack_burst_digest,
    slack_canary_scoped_and_loadtester_waits,
    messages_link_to_the_gate_page_with_a_public_url,
    hostile_flagger_strings_are_escaped,
    progress_is_shown_where_people_decide,
    a_failed_pre_rollout_check_is_told_once,
);

/// With GATEBOT_PUBLIC_URL the waiting message and the status comment link to
/// the gate's page; without it (every other snapshot) they do not.
async fn messages_link_to_the_gate_page_with_a_public_url(backend: Backend) {
    let env = env(
        backend,
        Setup {
            public_url: Some("https://gatebot.example.com/".into()),
            ..Setup::default()
        },
    )
    .await;
    let mut sim = env.canary("test", 42, vec![]).await;
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_wait_start_linked",
        "chat.postMessage of the waiting message, linking to the gate page",
        &start.body,
    );
    env.snap(
        "github_status_new_wait_linked",
        "the PR status comment, each gate linking to its page",
        &env.status_comment(42).await,
    );
    env.server.stop().await;
}

// ---- GitHub ----

async fn github_status_comment_follows_the_rollout(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = env.canary("test", 42, vec![]).await;
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    env.snap(
        "github_status_new_wait",
        "the PR status comment when Flagger starts waiting at the start gate",
        &env.status_comment(42).await,
    );

    env.snap(
        "github_reply_applied",
        "a command that was applied: reactions only, no reply",
        &env.say(42, 4201, "alice", "/start").await,
    );
    env.step(&mut sim).await;
    env.snap(
        "github_status_after_approval",
        "the status comment once Flagger passed the approved start gate",
        &env.status_comment(42).await,
    );

    env.run_until(&mut sim, Phase::WaitingPromotion, 10).await;
    env.snap(
        "github_status_waiting_promotion",
        "the status comment while Flagger waits at the promote gate",
        &env.status_comment(42).await,
    );
    env.say(42, 4202, "alice", "/promote looks good").await;
    env.run_until(&mut sim, Phase::Succeeded, 10).await;
    env.snap(
        "github_status_promoted",
        "the status comment after the promotion, Flagger's events in its timeline",
        &env.status_comment(42).await,
    );

    // A new revision: the start approval was pinned to the old one.
    sim.deploy("rev-c");
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    env.snap(
        "github_status_pinned",
        "the status comment when the start approval was for an earlier revision",
        &env.status_comment(42).await,
    );

    env.say(42, 4203, "alice", "/hold release freeze").await;
    env.snap(
        "github_status_held",
        "the status comment of held gates",
        &env.status_comment(42).await,
    );
    env.snap(
        "github_reply_refused_held",
        "a command refused because the gate is held",
        &env.say(42, 4204, "alice", "/promote").await,
    );
    env.snap(
        "github_status_reply",
        "the answer to /status",
        &env.say(42, 4205, "carol", "/status").await,
    );
    env.snap(
        "github_help",
        "the answer to /help",
        &env.say(42, 4206, "carol", "/help").await,
    );
    env.server.stop().await;
}

async fn github_status_comment_of_expired_and_closed_gates(backend: Backend) {
    let setup = Setup {
        approval_ttl: Some(Duration::from_secs(3600)),
        ..Setup::default()
    };
    let env = env(backend, setup).await;
    let mut sim = env.canary("test", 42, vec![]).await;
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    env.say(42, 4301, "alice", "/start").await;
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_message_opened_on_github",
        "chat.update of a waiting message whose gate a PR comment opened",
        &env.updated(&start).await,
    );
    // Flagger asks again only after the approval ran out.
    env.clock.advance(2 * 3600 * 1000);
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    env.snap(
        "github_status_expired",
        "the status comment after an approval expired unused",
        &env.status_comment(42).await,
    );

    // An approval that is still open when the PR is closed.
    env.say(42, 4302, "alice", "/promote").await;
    env.clock.advance(60_000);
    let closed = env.pull_request_event("pull_request.closed.json", 42);
    env.deliver("pull_request", "d-close-42", &closed).await;
    env.snap(
        "github_status_closed",
        "the status comment after the PR was closed without merging",
        &env.status_comment(42).await,
    );

    env.clock.advance(60_000);
    let mut late = comment_at(42, 4303, "alice", "/start", env.now());
    late["issue"]["state"] = json!("closed");
    env.snap(
        "github_reply_refused_closed",
        "a command on a PR closed without merging",
        &env.say_payload(42, 4303, late).await,
    );
    env.server.stop().await;
}

async fn github_replies_and_refusals(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let pr = 43;
    env.snap(
        "github_reply_refused_permission",
        "a command by someone with too little permission",
        &env.say(pr, 4401, "rita", "/promote").await,
    );
    env.snap(
        "github_reply_refused_four_eyes",
        "/promote by the PR's author under four eyes",
        &env.say(pr, 4402, AUTHOR, "/promote").await,
    );
    env.snap(
        "github_reply_refused_team",
        "a command that needs a team the commenter is not in",
        &env.say(pr, 4403, "alice", "/traffic").await,
    );
    env.snap(
        "github_reply_unknown_command",
        "a command word gatebot does not know",
        &env.say(pr, 4404, "alice", "/promot now").await,
    );
    env.snap(
        "github_reply_quoted_command",
        "a command in a quote, which is not run",
        &env.say(pr, 4405, "alice", "> /promote\n\nShould we?").await,
    );
    let mut bot = comment_at(pr, 4406, "dependabot[bot]", "/promote", env.now());
    bot["comment"]["user"]["type"] = json!("Bot");
    env.snap(
        "github_reply_bot_comment",
        "a command in a bot's comment",
        &env.say_payload(pr, 4406, bot).await,
    );
    env.snap(
        "github_reply_several_lines",
        "one reply for several refused commands of one comment",
        &env.say(pr, 4407, "rita", "/start\n/frobnicate\n/rollback")
            .await,
    );

    env.snap(
        "github_status_reply_no_gates",
        "the answer to /status on a PR without gates",
        &env.say(pr, 4409, "carol", "/status").await,
    );

    // Written before the gate's last close, delivered after it.
    let written = env.now();
    env.clock.advance(10_000);
    env.server.open("/gates/promote/pr/43").await;
    env.clock.advance(10_000);
    env.server.close("/gates/promote/pr/43").await;
    let late = comment_at(pr, 4410, "alice", "/promote", written);
    env.snap(
        "github_reply_refused_written_before_close",
        "a command written before the gate's last close",
        &env.say_payload(pr, 4410, late).await,
    );

    // Written before a push that GitHub delivers first.
    let written = env.now();
    env.clock.advance(60_000);
    let push = env.pull_request_event("pull_request.synchronize.json", pr);
    env.deliver("pull_request", "d-push-43", &push).await;
    env.settle().await;
    let stale = comment_at(pr, 4408, "alice", "/promote", written);
    env.snap(
        "github_reply_refused_stale_push",
        "a command written before the PR's last push",
        &env.say_payload(pr, 4408, stale).await,
    );
    env.server.stop().await;
}

// ---- Slack ----

async fn slack_messages_of_an_approved_rollout(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = env.canary("test", 42, vec![]).await;
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_wait_start",
        "chat.postMessage of the waiting message at the start gate",
        &start.body,
    );

    env.click(MALLORY, "gatebot_approve", &start, "t-mallory")
        .await;
    env.snap_json(
        "slack_reply_not_approver",
        "the ephemeral answer to a click by someone who is no approver",
        &env.response("t-mallory").await,
    );
    env.clock.advance(60_000);
    env.click(ALICE, "gatebot_approve", &start, "t-approve")
        .await;
    env.snap_json(
        "slack_message_after_approve",
        "chat.update of the waiting message after Approve",
        &env.updated(&start).await,
    );
    env.click(BOB, "gatebot_reject", &start, "t-late").await;
    env.snap_json(
        "slack_reply_already",
        "the ephemeral answer to a click on a message decided already",
        &env.response("t-late").await,
    );

    env.run_until(&mut sim, Phase::WaitingPromotion, 10).await;
    let promote = env
        .waiting_message_for("/gates/promote/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_wait_promote",
        "chat.postMessage of the waiting message at the promote gate",
        &promote.body,
    );
    env.click(BOB, "gatebot_approve", &promote, "t-promote")
        .await;
    env.run_until(&mut sim, Phase::Succeeded, 10).await;
    env.snap_json(
        "slack_thread_promotion",
        "the event replies in the promote message's thread",
        &env.thread(&promote).await,
    );
    env.snap_json(
        "slack_message_promoted",
        "chat.update of the promote message once promoted",
        &env.updated(&promote).await,
    );
    env.server.stop().await;
}

async fn slack_messages_of_a_rejected_rollout(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    env.server.open("/gates/start/pr/42").await;
    let mut sim = env.canary("test", 42, vec![]).await;
    env.run_until(&mut sim, Phase::WaitingPromotion, 10).await;
    let first = env
        .waiting_message_for("/gates/promote/acme/shop/pr/42")
        .await;

    // A new revision restarts the analysis: the first wait is over.
    sim.deploy("rev-c");
    env.step(&mut sim).await;
    env.run_until(&mut sim, Phase::WaitingPromotion, 10).await;
    env.snap_json(
        "slack_message_superseded",
        "chat.update of a waiting message whose wait a new revision ended",
        &env.updated(&first).await,
    );
    env.click(ALICE, "gatebot_approve", &first, "t-over").await;
    env.snap_json(
        "slack_reply_over",
        "the ephemeral answer to a click on a wait that is over",
        &env.response("t-over").await,
    );

    let second = env
        .waiting_message_for("/gates/promote/acme/shop/pr/42")
        .await;
    assert_ne!(env.ts_of(&first), env.ts_of(&second));
    env.clock.advance(60_000);
    env.click(ALICE, "gatebot_reject", &second, "t-reject")
        .await;
    env.snap_json(
        "slack_message_after_reject",
        "chat.update of the waiting message after Reject",
        &env.updated(&second).await,
    );
    env.run_until(&mut sim, Phase::Failed, 5).await;
    env.snap_json(
        "slack_thread_rollback",
        "the event replies in the thread of a rejected promotion",
        &env.thread(&second).await,
    );
    env.snap_json(
        "slack_message_rolled_back",
        "chat.update of the rejected message once rolled back",
        &env.updated(&second).await,
    );
    env.server.stop().await;
}

async fn slack_slash_commands_and_refusals(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    env.snap_json(
        "slack_help",
        "the inline answer to /gatebot help",
        &env.command(MALLORY, "help", "c-help").await,
    );
    env.snap_json(
        "slack_status_nothing",
        "the inline answer to /gatebot status 42 before anything happened",
        &env.command(MALLORY, "status 42", "c-status-0").await,
    );
    let traffic = Hook::new(
        "traffic-gate",
        HookType::ConfirmTrafficIncrease,
        env.server.at("/gates/traffic/pr/42"),
    );
    let mut sim = env.canary("test", 42, vec![traffic]).await;
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_status_waiting",
        "the inline answer to /gatebot status: every gate with a canary waiting",
        &env.command(MALLORY, "status", "c-status-1").await,
    );

    env.clock.advance(60_000);
    env.snap_json(
        "slack_reply_received",
        "the inline answer to a slash command that changes a gate",
        &env.command(BOB, "start 42 ship it", "c-start").await,
    );
    env.snap_json(
        "slack_reply_done",
        "the answer on the response_url once the command is done",
        &env.response("c-start").await,
    );
    env.snap_json(
        "slack_message_opened_elsewhere",
        "chat.update of a waiting message whose gate a slash command opened",
        &env.updated(&start).await,
    );
    env.snap_json(
        "slack_status_pr",
        "the inline answer to /gatebot status 42",
        &env.command(MALLORY, "status 42", "c-status-2").await,
    );
    env.snap_json(
        "slack_reply_not_approver_inline",
        "the inline answer to a slash command by someone who is no approver",
        &env.command(MALLORY, "promote 42", "c-mallory").await,
    );

    // Nobody may approve traffic from Slack (the policy says so).
    env.run_until(&mut sim, Phase::Progressing, 3).await;
    env.step(&mut sim).await;
    let traffic = env
        .waiting_message_for("/gates/traffic/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_wait_traffic",
        "chat.postMessage of the waiting message at the traffic gate",
        &traffic.body,
    );
    env.click(ALICE, "gatebot_approve", &traffic, "t-nobody")
        .await;
    env.snap_json(
        "slack_reply_nobody",
        "the ephemeral answer to a click nobody may make from Slack",
        &env.response("t-nobody").await,
    );
    env.snap_json(
        "slack_reply_nobody_inline",
        "the inline answer to a slash command nobody may run from Slack",
        &env.command(ALICE, "traffic 42", "c-nobody").await,
    );

    // Held on GitHub: Slack says why nothing happened.
    env.say(42, 4501, "alice", "/hold incident").await;
    env.command(ALICE, "promote 42", "c-held").await;
    env.snap_json(
        "slack_reply_error",
        "the answer on the response_url when the command could not be done",
        &env.response("c-held").await,
    );

    // Four eyes: Alice opened PR 77 (by the policy's user mapping).
    let mut own = env.canary("own", ALICES_PR, vec![]).await;
    assert_eq!(env.step(&mut own).await, Phase::Waiting);
    let start77 = env
        .waiting_message_for("/gates/start/acme/shop/pr/77")
        .await;
    env.click(ALICE, "gatebot_approve", &start77, "t-self")
        .await;
    env.snap_json(
        "slack_reply_self",
        "the ephemeral answer to the PR author's own approval (four eyes)",
        &env.response("t-self").await,
    );
    env.command(ALICE, "promote 77", "c-self").await;
    env.snap_json(
        "slack_reply_self_slash",
        "the answer on the response_url to the PR author's own /gatebot promote",
        &env.response("c-self").await,
    );

    env.snap_json(
        "slack_reply_unknown_command",
        "the inline answer to a slash command gatebot does not know",
        &env.command(ALICE, "promot 42", "c-unknown").await,
    );
    env.snap_json(
        "slack_reply_needs_target",
        "the inline answer to a slash command without its target",
        &env.command(ALICE, "promote", "c-target").await,
    );
    env.server.stop().await;
}

async fn slack_burst_digest(backend: Backend) {
    let env = env(
        backend,
        Setup {
            burst: Some(2),
            ..Setup::default()
        },
    )
    .await;
    // Fourteen canaries start waiting within one minute; two are announced,
    // the digest names ten of the others and counts the rest.
    let mut sims = Vec::new();
    for pr in 101..115 {
        let namespace = format!("team{pr}");
        let mut hooks = pr_hooks(&env.server.url, pr);
        hooks.retain(|h| h.hook_type != HookType::Event);
        let mut sim = FlaggerSim::new("podinfo", &namespace, CANARY, hooks);
        sim.deploy("rev-a");
        sim.tick().await;
        sim.deploy("rev-b");
        env.clock.advance(1000);
        assert_eq!(sim.tick().await, Phase::Waiting);
        sims.push(sim);
    }
    eventually("two waiting messages", WAIT, || async {
        env.waiting_messages().len() == 2
    })
    .await;
    env.clock.set(NOW + 65_000);
    env.settle().await;
    let digest: Vec<Value> = env
        .slack
        .ok("chat.postMessage")
        .into_iter()
        .filter(|r| r.body.get("blocks").is_none())
        .map(|r| r.body)
        .collect();
    assert_eq!(digest.len(), 1, "{digest:#?}");
    env.snap_json(
        "slack_digest",
        "chat.postMessage of the digest of the waits over [limits] notify_burst",
        &digest[0],
    );
    env.server.stop().await;
}

async fn slack_canary_scoped_and_loadtester_waits(backend: Backend) {
    let env = env(backend, Setup::default()).await;
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
    ];
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    env.step(&mut sim).await;
    sim.deploy("rev-b");
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    let start = env
        .waiting_message_for("/gates/start/canary/test/podinfo")
        .await;
    env.snap_json(
        "slack_wait_canary_scoped",
        "chat.postMessage of a wait at a canary's gate (no PR), in the canary's channel",
        &start.body,
    );
    env.click(ALICE, "gatebot_approve", &start, "t-canary")
        .await;
    env.run_until(&mut sim, Phase::WaitingPromotion, 10).await;
    let legacy = env
        .waiting_message_for("/loadtester/gate/test/podinfo")
        .await;
    env.snap_json(
        "slack_wait_loadtester",
        "chat.postMessage of a wait at the loadtester's /gate/check",
        &legacy.body,
    );
    env.server.stop().await;
}

/// A checksum and an event message written to ping, link and hide a marker:
/// what Slack and GitHub receive carries none of it as markup.
const HOSTILE_CHECKSUM: &str = "abc` <!channel> <https://evil/login|Approve here> `";
const HOSTILE_EVENT: &str =
    "Rolling back <!channel> @acme/sre [Approve](https://evil) <!-- gatebot:status -->";

async fn hostile_flagger_strings_are_escaped(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&env.server.url, 60));
    sim.deploy(HOSTILE_CHECKSUM);
    env.step(&mut sim).await;
    sim.deploy("rev-b");
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/60")
        .await;
    env.snap_json(
        "slack_wait_hostile",
        "the waiting message of a canary whose checksum is written as Slack markup",
        &start.body,
    );
    let event = json!({
        "name": "podinfo", "namespace": "test", "phase": "Progressing",
        "checksum": HOSTILE_CHECKSUM,
        "metadata": {"eventMessage": HOSTILE_EVENT, "eventType": "Warning",
                     "timestamp": NOW.to_string(), "pr": "60"},
    });
    let r = client()
        .post(env.server.at("/flagger/events"))
        .json(&event)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let thread = env.thread(&start).await;
    env.snap_json(
        "slack_thread_hostile",
        "an event line whose message is written as Slack and GitHub markup",
        &thread,
    );
    let comment = env.status_comment(60).await;
    env.snap(
        "github_status_hostile",
        "the status comment showing a hostile checksum's canary and event",
        &comment,
    );
    // Slack's mrkdwn has no `[text](url)` links; GitHub's markdown has.
    let slack = env.slack.ok("chat.postMessage").into_iter();
    let github = env.github.status_comments(60).into_iter();
    let bodies = slack
        .map(|r| (r.body.to_string(), false))
        .chain(github.map(|c| (c.body, true)));
    for (body, markdown) in bodies {
        for bad in ["<!channel>", "<https://evil"] {
            assert!(!body.contains(bad), "{bad} in {body}");
        }
        assert!(
            !markdown || !outside_code(&body).contains("](https://evil)"),
            "a link in {body}"
        );
        assert!(
            body.matches("<!-- gatebot:").count() <= 1,
            "a second marker in {body}"
        );
    }
    env.server.stop().await;
}

/// `markdown` without its code spans of single backticks, where nothing is a link.
fn outside_code(markdown: &str) -> String {
    markdown.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

// ---- the canary's progress, and failures outside the analysis ----

/// An event message written as markup for every surface: Slack's mentions and
/// links, GitHub's mentions, links and markers, HTML. A Flagger metric halt,
/// so that it counts as a failed check.
const HOSTILE_HALT: &str = "Halt podinfo.test advancement request duration <script>alert(1)</script> @channel <!channel> <@U999> @acme/sre [Approve](https://evil) <!-- gatebot:status --> > 500ms";

/// The simulator's hooks for PR `pr` with the event hook through the relay,
/// telling gatebot the analysis threshold in its metadata as a user would.
fn hooks_with_threshold(env: &Env, pr: u64, threshold: &str) -> Vec<Hook> {
    let mut hooks = pr_hooks(&env.server.url, pr);
    for hook in &mut hooks {
        if hook.hook_type == HookType::Event {
            hook.url = env.events_url.clone();
            hook.metadata
                .insert("threshold".to_string(), threshold.to_string());
        }
    }
    hooks
}

async fn progress_is_shown_where_people_decide(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let hooks = hooks_with_threshold(&env, 42, "5");
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    env.step(&mut sim).await;
    sim.deploy("rev-b");
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    env.say(42, 4211, "alice", "/start").await;
    env.run_until(&mut sim, Phase::Progressing, 3).await;
    // Flagger advances the weight; then a check fails with hostile text.
    env.step(&mut sim).await;
    assert_eq!(sim.canary_weight(), 50, "{:#?}", sim.events());
    env.settle().await;
    let event = json!({
        "name": "podinfo", "namespace": "test", "phase": "Progressing",
        "checksum": sim.checksum(),
        "metadata": {"eventMessage": HOSTILE_HALT, "eventType": "Warning",
                     "timestamp": NOW.to_string(), "pr": "42", "threshold": "5"},
    });
    let r = client()
        .post(env.server.at("/flagger/events"))
        .json(&event)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    env.clock.advance(90_000);
    env.run_until(&mut sim, Phase::WaitingPromotion, 3).await;

    let wait = env
        .waiting_message_for("/gates/promote/acme/shop/pr/42")
        .await;
    env.snap_json(
        "slack_wait_progress",
        "the promote gate's waiting message with the canary's progress, the last event hostile",
        &wait.body,
    );
    let text = wait.body["blocks"].to_string();
    assert!(text.contains("weight 50 % · failed checks 1/5"), "{text}");
    let comment = env.status_comment(42).await;
    env.snap(
        "github_status_progress",
        "the status comment while Flagger waits at the promote gate, with the canary's progress",
        &comment,
    );
    assert!(
        comment.contains("weight 50 % · failed checks 1/5"),
        "{comment}"
    );
    let (status, _, page) = get_page(&env, "/ui/gates/promote/acme/shop/pr/42").await;
    assert_eq!(status, 200, "{page}");
    let line = page
        .lines()
        .find(|l| l.contains("id=\"progress\""))
        .unwrap_or_else(|| panic!("no progress on the page: {page}"));
    let line = &line[line.find("<p id=\"progress\">").unwrap()..];
    let line = &line[..line.find("</p>").unwrap() + 4];
    env.snap("web_gate_progress", "the gate page's progress line", line);
    assert!(
        line.contains("weight 50 % · failed checks 1&#x2f;5"),
        "{line}"
    );

    let slack = env.slack.ok("chat.postMessage").into_iter();
    let bodies = slack
        .map(|r| (r.body.to_string(), false))
        .chain([(comment, true)]);
    for (body, markdown) in bodies {
        for bad in ["<!channel>", "<@U999>", "<script>", "<https://evil"] {
            assert!(!body.contains(bad), "{bad} in {body}");
        }
        assert!(
            !markdown || !outside_code(&body).contains("@acme/sre"),
            "a mention in {body}"
        );
        assert!(
            !markdown || !outside_code(&body).contains("](https://evil)"),
            "a link in {body}"
        );
        assert!(
            body.matches("<!-- gatebot:").count() <= 1,
            "a second marker in {body}"
        );
    }
    assert!(!page.contains("<script>alert"), "{page}");
    env.server.stop().await;
}

async fn get_page(env: &Env, path: &str) -> (u16, (), String) {
    let r = client().get(env.server.at(path)).send().await.unwrap();
    (r.status().as_u16(), (), r.text().await.unwrap())
}

/// What a pre-rollout webhook answers when it fails: Flagger puts it in its
/// event message as it came.
const HOSTILE_WEBHOOK_ANSWER: &str =
    "smoke test failed <!channel> <@U999> @acme/sre [logs](https://evil) <script>x</script>";

async fn a_failed_pre_rollout_check_is_told_once(backend: Backend) {
    let env = env(backend, Setup::default()).await;
    let mut hooks = hooks_with_threshold(&env, 43, "5");
    hooks.push(Hook::new(
        "smoke",
        HookType::PreRollout,
        failing_webhook(HOSTILE_WEBHOOK_ANSWER).await,
    ));
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    env.step(&mut sim).await;
    sim.deploy("rev-b");
    assert_eq!(env.step(&mut sim).await, Phase::Waiting);
    let start = env
        .waiting_message_for("/gates/start/acme/shop/pr/43")
        .await;
    env.say(43, 4301, "alice", "/start").await;
    // Past the start gate, then three intervals whose pre-rollout check fails.
    env.run_until(&mut sim, Phase::Progressing, 3).await;
    for _ in 0..3 {
        env.step(&mut sim).await;
    }
    env.settle().await;
    assert_eq!(sim.failed_checks(), 3, "{:#?}", sim.events());
    let halts = sim
        .events()
        .into_iter()
        .filter(|m| m.contains("pre-rollout check smoke failed"))
        .count();
    assert_eq!(halts, 3, "Flagger halted three times: {:#?}", sim.events());

    let told: Vec<_> = env
        .github
        .replies(43)
        .into_iter()
        .filter(|c| c.body.contains("pre-rollout webhook failed"))
        .collect();
    assert_eq!(told.len(), 1, "one comment, not one per retry: {told:#?}");
    env.snap(
        "github_failure_pre_rollout",
        "the PR comment when a pre-rollout webhook failed (with hostile text from the webhook)",
        &told[0].body,
    );
    let thread = env.thread(&start).await;
    let replies: Vec<&Value> = thread
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["text"].as_str().unwrap_or("").contains("pre-rollout"))
        .collect();
    assert_eq!(
        replies.len(),
        1,
        "one Slack reply, not one per retry: {thread:#}"
    );
    env.snap_json(
        "slack_failure_pre_rollout",
        "the thread reply when a pre-rollout webhook failed (with hostile text from the webhook)",
        replies[0],
    );
    let slack = env
        .slack
        .ok("chat.postMessage")
        .into_iter()
        .map(|r| r.body.to_string());
    for body in slack.chain([told[0].body.clone()]) {
        for bad in ["<!channel>", "<@U999>", "<script>", "<https://evil"] {
            assert!(!body.contains(bad), "{bad} in {body}");
        }
    }
    assert!(
        !outside_code(&told[0].body).contains("@acme/sre"),
        "{}",
        told[0].body
    );
    assert!(
        !outside_code(&told[0].body).contains("](https://evil)"),
        "{}",
        told[0].body
    );
    env.server.stop().await;
}
