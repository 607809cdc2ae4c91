//! N-of-M approvals and break glass, end to end over real HTTP on SQLite and
//! PostgreSQL, with the Flagger simulator: two distinct people open a gate
//! that needs two (one person from GitHub and Slack counts once, the PR's
//! author not at all); a hold or a new revision starts the count from zero;
//! break glass by the policy's role passes a freeze and a missing approval,
//! loudly, and nobody else may.

use std::time::Duration;

use gatebot::github::verify::sign;
use gatebot::notify::WorkerSettings;
use gatebot::Options;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::{post_signed, FakeSlack, Request};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::github_payloads::comment_at;
use gatebot_testkit::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

const SECRET: &str = "test-signing-secret";
const GITHUB_SECRET: &str = "github-secret";
/// Alice is on GitHub and in Slack (mapped by `[users]`); Bob only in Slack.
const ALICE: &str = "UALICE";
const BOB: &str = "UBOB";
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

const POLICY: &str = r#"
[github]
forbid_self_approval = true

[slack]
approvers = ["UALICE", "UBOB"]
forbid_self_approval = true

[slack.commands.freeze]
approvers = ["UALICE"]

[github.commands.force]
min_permission = "admin"

[slack.commands.force]
approvers = ["UBOB"]

[users]
alice = "UALICE"
carol = "UCAROL"

[[approvals]]
kind = "promote"
required = 2
"#;

struct Env {
    server: TestServer,
    slack: FakeSlack,
    github: FakeGithub,
    _db: TestDb,
}

async fn env(backend: Backend) -> Env {
    let db = TestDb::new(backend).await;
    let slack = FakeSlack::start().await;
    let github = FakeGithub::start().await;
    for (login, role) in [
        ("alice", "write"),
        ("carol", "write"),
        ("walt", "write"),
        ("maria", "admin"),
    ] {
        github.set_permission(login, role);
    }
    github.set_author(42, "carol");
    let mut config = db.config();
    config.github.token = Some("ghp_test".to_string().into());
    config.github.webhook_secret = Some(GITHUB_SECRET.to_string().into());
    config.github.api_url = github.url.clone();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.slack.signing_secret = Some(SECRET.to_string().into());
    config.slack.bot_token = Some("xoxb-test-token".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    config.policy = Some(policy);
    let options = Options {
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
        github,
        _db: db,
    }
}

/// The status comment without its timeline, whose events depend on how the
/// simulator's ticks fell.
fn gates_part(status: &str) -> String {
    status
        .split("<details>")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with("| `start`") && !l.starts_with("| `rollback`"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A rendered message, with the times that differ from run to run filtered.
fn snap(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    settings.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[time]");
    settings.add_filter(r"\^\d{10}\^", "^[secs]^");
    settings.add_filter(r"\|\d\d:\d\d UTC", "|[hh:mm] UTC");
    settings.add_filter(r"gatebot-wait-\d+", "gatebot-wait-[wait]");
    settings.add_filter(r#"\\"w\\":\d+"#, r#"\"w\":[wait]"#);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl Env {
    /// A signed comment on acme/shop#42 by `user`, applied.
    async fn comment(&self, id: u64, user: &str, body: &str) {
        let mut payload = comment_at(42, id, user, body, now_ms());
        payload["issue"]["user"]["login"] = json!("carol");
        let payload = serde_json::to_vec(&payload).unwrap();
        let r = client()
            .post(self.server.at("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", "issue_comment")
            .header("x-github-delivery", format!("delivery-{id}"))
            .header("x-hub-signature-256", sign(GITHUB_SECRET, &payload))
            .body(payload)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
        self.server.drained().await;
    }

    fn replies(&self) -> String {
        self.github
            .replies(42)
            .into_iter()
            .map(|c| c.body)
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    fn status_comment(&self) -> String {
        self.github
            .status_comments(42)
            .first()
            .map(|c| c.body.clone())
            .unwrap_or_default()
    }

    /// The latest version of the waiting message of the promote gate.
    fn promote_message(&self) -> Value {
        let posted = self
            .slack
            .ok("chat.postMessage")
            .into_iter()
            .rfind(|r| {
                r.body.get("thread_ts").is_none()
                    && r.body["blocks"].to_string().contains("/gates/promote/")
            })
            .expect("a waiting message for the promote gate");
        self.slack
            .ok("chat.update")
            .into_iter()
            .rfind(|r| r.body["blocks"].to_string().contains("/gates/promote/"))
            .map_or(posted.body, |r| r.body)
    }

    fn announcements(&self) -> Vec<String> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("blocks").is_none() && r.body.get("thread_ts").is_none())
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    async fn click_approve(&self, user: &str, name: &str, trigger: &str) {
        let message: Request = self
            .slack
            .ok("chat.postMessage")
            .into_iter()
            .rfind(|r| {
                r.body.get("thread_ts").is_none()
                    && r.body["blocks"].to_string().contains("/gates/promote/")
            })
            .expect("a waiting message");
        let value = message.body["blocks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "actions")
            .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
            .find(|b| b["action_id"] == "gatebot_approve")
            .and_then(|b| b["value"].as_str().map(str::to_string))
            .expect("an Approve button");
        let payload = json!({
            "type": "block_actions",
            "team": {"id": "T0", "domain": "acme"},
            "user": {"id": user, "username": name, "name": name, "team_id": "T0"},
            "api_app_id": "A0", "token": "legacy",
            "container": {"type": "message", "message_ts": "1714572120.000001", "channel_id": "CDEPLOYS", "is_ephemeral": false},
            "trigger_id": trigger,
            "channel": {"id": "CDEPLOYS", "name": "deploys"},
            "message": {"type": "message", "ts": "1714572120.000001", "text": "…"},
            "response_url": self.slack.response_url(trigger),
            "actions": [{"action_id": "gatebot_approve", "block_id": "b", "type": "button", "value": value,
                         "text": {"type": "plain_text", "text": "Approve"}, "action_ts": "1714572121.000001"}],
        });
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        let r = post_signed(
            &self.server.at("/webhooks/slack/interactions"),
            &body,
            now_ms() / 1000,
            SECRET,
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
        self.server.drained().await;
    }

    /// `/gatebot <text>` from `user`; what gatebot answered, inline or later.
    async fn slash(&self, user: &str, text: &str, trigger: &str) -> String {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("command", "/gatebot"),
                ("text", text),
                ("user_id", user),
                ("user_name", &user.to_ascii_lowercase()),
                ("team_id", "T0"),
                ("channel_id", "C0"),
                ("response_url", &self.slack.response_url(trigger)),
                ("trigger_id", trigger),
            ])
            .finish();
        let r = post_signed(
            &self.server.at("/webhooks/slack/commands"),
            &body,
            now_ms() / 1000,
            SECRET,
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
        let inline: Value = r.json().await.unwrap_or(Value::Null);
        self.server.drained().await;
        let later: Vec<String> = self
            .slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == trigger)
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
            .collect();
        format!(
            "{} {}",
            inline["text"].as_str().unwrap_or_default(),
            later.join(" ")
        )
    }

    async fn audit_actions(&self) -> Vec<String> {
        let audit = self
            .server
            .api("/api/v1/gates/promote/acme/shop/pr/42")
            .await;
        audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap().to_string())
            .collect()
    }
}

/// Flagger, waiting at the promote gate of PR 42 at revision `rev`.
async fn waiting_to_promote(env: &Env, rev: &str) -> FlaggerSim {
    env.server.open("/gates/start/pr/42").await;
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&env.server.url, 42));
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy(rev);
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 20)
            .await,
        "waits at the promote gate"
    );
    env.server.drained().await;
    sim
}

/// Flagger's promote checks, tick after tick, until one answers with `want`
/// (a check may answer "store busy" on a loaded machine, and is asked again
/// at the next tick, as Flagger does); the last answer.
async fn ask(sim: &mut FlaggerSim, want: &str) -> String {
    for _ in 0..10 {
        sim.tick().await;
        if last_promote_reason(sim).contains(want) {
            break;
        }
    }
    last_promote_reason(sim)
}

fn last_promote_reason(sim: &FlaggerSim) -> String {
    sim.calls_of(HookType::ConfirmPromotion)
        .last()
        .expect("a promote check")
        .response
        .clone()
}

gatebot_testkit::on_both_stores!(
    two_people_open_a_gate_that_needs_two_and_the_author_does_not_count,
    a_hold_or_a_new_revision_starts_the_count_from_zero,
    break_glass_passes_a_freeze_and_a_missing_approval_loudly,
);

async fn two_people_open_a_gate_that_needs_two_and_the_author_does_not_count(backend: Backend) {
    let env = env(backend).await;
    let mut sim = waiting_to_promote(&env, "rev-b").await;

    // The author's approval does not count (four eyes), from GitHub or Slack.
    env.comment(1, "carol", "/promote").await;
    assert!(
        env.replies().contains("someone else must"),
        "{}",
        env.replies()
    );
    assert!(!env.audit_actions().await.contains(&"approve".to_string()));

    // Alice, from GitHub: one of two.
    env.comment(2, "alice", "/promote").await;
    assert!(
        env.replies().contains(
            "approval counted at /gates/promote/acme/shop/pr/42 (1 of 2 approvals: @alice)"
        ),
        "{}",
        env.replies()
    );
    let reason = ask(&mut sim, "1 of 2 approvals").await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion);
    assert!(
        reason.contains("1 of 2 approvals: @alice for revision rev-b; 1 more approval needed, from someone other than @alice"),
        "{reason}"
    );
    env.server.drained().await;
    assert!(
        env.status_comment().contains("1 of 2 approvals: @alice"),
        "{}",
        env.status_comment()
    );
    let message = env.promote_message();
    assert!(
        message["blocks"]
            .to_string()
            .contains("1 of 2 approvals: @alice"),
        "{message}"
    );
    if backend == Backend::Sqlite {
        snap(
            "status_comment_one_of_two",
            &gates_part(&env.status_comment()),
        );
        snap(
            "slack_message_one_of_two",
            &serde_json::to_string_pretty(&message["blocks"]).unwrap(),
        );
    }

    // Alice again, from Slack (mapped to her login): still one person.
    env.click_approve(ALICE, "alice.slack", "T1").await;
    sim.tick().await;
    assert_eq!(
        sim.phase(),
        Phase::WaitingPromotion,
        "one person counts once"
    );
    let message = env.promote_message();
    assert!(
        message["blocks"].to_string().contains("gatebot_approve"),
        "the buttons stay for the second person: {message}"
    );

    // Bob, from Slack: two of two; Flagger promotes.
    env.click_approve(BOB, "bob", "T2").await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted by two people: {}",
        last_promote_reason(&sim)
    );
    let reason = last_promote_reason(&sim);
    assert!(
        reason.contains("approved by alice via github and bob via slack"),
        "{reason}"
    );
    let actions = env.audit_actions().await;
    assert!(
        actions.contains(&"approve".to_string()) && actions.contains(&"open".to_string()),
        "{actions:?}"
    );
}

async fn a_hold_or_a_new_revision_starts_the_count_from_zero(backend: Backend) {
    let env = env(backend).await;
    let mut sim = waiting_to_promote(&env, "rev-b").await;
    env.comment(1, "alice", "/promote").await;
    let reason = ask(&mut sim, "1 of 2 approvals").await;
    assert!(reason.contains("1 of 2 approvals: @alice"), "{reason}");

    // A hold resets the count; lifted, the gate starts from zero.
    env.comment(2, "walt", "/hold").await;
    env.comment(3, "walt", "/unhold").await;
    env.comment(4, "walt", "/promote").await;
    let reason = ask(&mut sim, "1 of 2 approvals").await;
    assert!(reason.contains("1 of 2 approvals: @walt"), "{reason}");
    assert!(
        !reason.contains("@alice"),
        "the hold reset alice's: {reason}"
    );

    // A new revision starts from zero: walt's was for rev-b.
    sim.deploy("rev-c");
    assert!(
        sim.run_until(
            |s| s.phase() == Phase::WaitingPromotion && s.checksum() == "rev-c",
            20
        )
        .await
    );
    let reason = ask(&mut sim, "of 2 approvals").await;
    assert!(
        reason.contains("0 of 2 approvals for revision rev-c; 2 more approvals needed"),
        "{reason}"
    );
    env.server.drained().await;
    env.comment(5, "alice", "/promote").await;
    let reason = ask(&mut sim, "1 of 2 approvals").await;
    assert!(
        reason.contains("1 of 2 approvals: @alice for revision rev-c"),
        "{reason}"
    );
    assert_eq!(sim.promotions(), 0);
}

async fn break_glass_passes_a_freeze_and_a_missing_approval_loudly(backend: Backend) {
    let env = env(backend).await;
    let mut sim = waiting_to_promote(&env, "rev-b").await;
    let frozen = env.slash(ALICE, "freeze acme/shop incident 12", "T0").await;
    assert!(frozen.contains("frozen"), "{frozen}");

    // Nobody but the policy's role, and never without a reason.
    env.comment(1, "walt", "/promote --force payments are down")
        .await;
    env.comment(2, "maria", "/promote --force").await;
    let replies = env.replies();
    assert!(
        replies
            .contains("`/promote --force` needs admin permission on acme/shop and you have write"),
        "{replies}"
    );
    assert!(
        replies.contains("break glass needs a reason: `/promote --force <reason>`"),
        "{replies}"
    );
    let refused = env
        .slash(ALICE, "promote 42 --force payments are down", "T1")
        .await;
    assert!(
        refused.contains("slack.commands.force.approvers"),
        "{refused}"
    );
    let rollback = env.slash(BOB, "rollback 42 --force because", "T2").await;
    assert!(rollback.contains("not `rollback`"), "{rollback}");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion);
    assert!(!env.audit_actions().await.contains(&"force".to_string()));

    // Maria may: the gate opens past the freeze and the missing approval.
    env.comment(3, "maria", "/promote --force payments are down")
        .await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "forced: {}",
        last_promote_reason(&sim)
    );
    let reason = last_promote_reason(&sim);
    assert!(
        reason.contains("forced open by maria via github") && reason.contains("payments are down"),
        "{reason}"
    );
    env.server.drained().await;
    assert!(env.audit_actions().await.contains(&"force".to_string()));
    let announced = env.announcements();
    assert!(
        announced.iter().any(|a| a.starts_with(":rotating_light: *Break glass:* maria forced `/gates/promote/acme/shop/pr/42` open via github: payments are down")),
        "{announced:?}"
    );
    let status = env.status_comment();
    assert!(
        status.contains(
            "🚨 **Break glass:** `promote` was forced open by maria via github: payments are down"
        ),
        "{status}"
    );
    if backend == Backend::Sqlite {
        snap("status_comment_break_glass", &gates_part(&status));
    }
    // Other gates stay frozen.
    let r = client()
        .post(env.server.at("/gates/traffic/pr/42"))
        .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "rev-b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
}
