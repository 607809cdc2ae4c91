//! Change freezes, end to end over real HTTP on SQLite and PostgreSQL: a
//! freeze from Slack holds a pre-approved release until it is lifted, never a
//! rollback; the CLI freezes for a while; bad input and unauthorized people
//! change nothing.

use std::sync::Arc;
use std::time::Duration;

use gatebot::clock::{ManualClock, SharedClock};
use gatebot::github::verify::sign;
use gatebot::notify::WorkerSettings;
use gatebot::Options;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::{post_signed, FakeSlack};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::github_payloads::comment;
use gatebot_testkit::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

const SECRET: &str = "test-signing-secret";
/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const HOUR: i64 = 3_600_000;
const ALICE: &str = "UALICE";
const BOB: &str = "UBOB";
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

/// Bob may approve, but only Alice may freeze.
const POLICY: &str = r#"
[slack]
approvers = ["UALICE", "UBOB"]

[slack.commands.freeze]
approvers = ["UALICE"]

[slack.commands.unfreeze]
approvers = ["UALICE"]

[github.commands.freeze]
min_permission = "maintain"

[github.commands.unfreeze]
min_permission = "maintain"
"#;
const GITHUB_SECRET: &str = "github-secret";

struct Env {
    server: TestServer,
    slack: FakeSlack,
    github: FakeGithub,
    clock: Arc<ManualClock>,
    db: TestDb,
}

async fn env(backend: Backend) -> Env {
    let db = TestDb::new(backend).await;
    let slack = FakeSlack::start().await;
    let github = FakeGithub::start().await;
    github.set_permission("maria", "maintain");
    github.set_permission("walt", "write");
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
    Env {
        server,
        slack,
        github,
        clock,
        db,
    }
}

impl Env {
    /// `/gatebot <text>`; the inline answer's text.
    async fn slash(&self, user: &str, text: &str, trigger: &str) -> (u16, String) {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("command", "/gatebot"),
                ("text", text),
                ("user_id", user),
                ("user_name", "someone"),
                ("team_id", "T0"),
                ("channel_id", "C0"),
                ("response_url", &self.slack.response_url(trigger)),
                ("trigger_id", trigger),
            ])
            .finish();
        let r = post_signed(
            &self.server.at("/webhooks/slack/commands"),
            &body,
            NOW / 1000,
            SECRET,
        )
        .await;
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        (
            status,
            body["text"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// What gatebot answered later on a command's response_url.
    async fn answer(&self, trigger: &str) -> String {
        self.server.drained().await;
        self.slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == trigger)
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
            .next()
            .unwrap_or_else(|| panic!("drained, yet no answer on {trigger}'s response_url"))
    }

    async fn freezes(&self) -> Vec<Value> {
        self.server.api("/api/v1/freezes").await["freezes"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Posted messages that are not thread replies or waiting messages.
    fn announcements(&self) -> Vec<String> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("blocks").is_none() && r.body.get("thread_ts").is_none())
            .map(|r| r.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// A signed PR comment on acme/shop#42, applied.
    async fn comment(&self, id: u64, user: &str, body: &str) {
        let payload = serde_json::to_vec(&comment(42, id, user, body)).unwrap();
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

    fn replies(&self) -> Vec<String> {
        self.github
            .replies(42)
            .into_iter()
            .map(|c| c.body)
            .collect()
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
            .args(args)
            .current_dir(self.db.dir.path())
            .env_clear()
            .env("GATEBOT_SERVER", &self.server.url)
            .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("USER", "ops")
            .output()
            .unwrap()
    }
}

async fn check(env: &Env, gate: &str, canary: (&str, &str)) -> (u16, String) {
    let r = client()
        .post(env.server.at(gate))
        .json(&json!({"name": canary.1, "namespace": canary.0, "phase": "Progressing", "checksum": "rev-b"}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

gatebot_testkit::on_both_stores!(
    a_pr_comment_freezes_its_repository_by_the_policy,
    a_slack_freeze_holds_a_preapproved_release_until_lifted,
    a_cli_freeze_for_a_while_ends_by_itself,
    bad_freezes_and_unauthorized_people_change_nothing,
);

async fn a_slack_freeze_holds_a_preapproved_release_until_lifted(backend: Backend) {
    let env = env(backend).await;
    env.server.open("/gates/start/pr/42").await;
    env.server.open("/gates/promote/pr/42").await;
    let (status, text) = env.slash(ALICE, "freeze acme/shop end of year", "T1").await;
    assert_eq!(status, 200);
    assert!(text.contains("freeze"), "{text}");
    let answer = env.answer("T1").await;
    assert!(
        answer.contains(
            "frozen (acme/shop) by someone via slack since 2024-05-01T14:02:00Z: end of year"
        ),
        "{answer}"
    );
    // A retried command is one freeze; Slack is told once.
    env.slash(ALICE, "freeze acme/shop end of year", "T1").await;
    env.server.drained().await;
    assert_eq!(env.freezes().await.len(), 1);
    let announced = env.announcements();
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(
        announced[0].starts_with(":snowflake: Changes are frozen (acme/shop)"),
        "{announced:?}"
    );

    // The pre-approved release waits at the start gate, told why.
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&env.server.url, 42));
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    for _ in 0..3 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::Waiting, "frozen");
    let last = sim
        .calls_of(HookType::ConfirmRollout)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(
        last.contains("frozen (acme/shop) by someone via slack"),
        "{last}"
    );
    // Rollback gates are never frozen; other repositories are not either.
    env.server.open("/gates/rollback/pr/42").await;
    let (status, _) = check(&env, "/gates/rollback/pr/42", ("test", "podinfo")).await;
    assert_eq!(status, 200, "a rollback is never frozen");
    env.server.close("/gates/rollback/pr/42").await;
    env.server.open("/gates/start/acme/web/pr/1").await;
    let (status, _) = check(&env, "/gates/start/acme/web/pr/1", ("test", "web")).await;
    assert_eq!(status, 200, "another repository is not frozen");

    // Listed by /gatebot status.
    let (_, status_text) = env.slash(BOB, "status", "T2").await;
    assert!(
        status_text.contains(":snowflake: Changes are frozen (acme/shop)"),
        "{status_text}"
    );

    // Bob may approve but not lift it.
    env.slash(BOB, "unfreeze acme/shop", "T3").await;
    assert!(env.answer("T3").await.contains("may not unfreeze"));
    assert_eq!(env.freezes().await.len(), 1);

    env.slash(ALICE, "unfreeze acme/shop", "T4").await;
    assert!(env
        .answer("T4")
        .await
        .contains("lifted 1 freeze(s) of acme/shop"));
    assert!(env.freezes().await.is_empty());
    assert!(env
        .announcements()
        .iter()
        .any(|a| a.contains("was lifted by someone via slack")));
    assert!(
        sim.run_until(|s| s.promotions() == 1, 10).await,
        "released once lifted"
    );
}

async fn a_cli_freeze_for_a_while_ends_by_itself(backend: Backend) {
    let env = env(backend).await;
    env.server.open("/gates/promote/canary/prod/podinfo").await;
    let out = env.cli(&["freeze", "ns/prod", "--for", "1h", "--reason", "incident 7"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("frozen (ns/prod) by ops via cli"),
        "{stdout}"
    );
    assert!(
        stdout.contains("until 2024-05-01T15:02:00Z: incident 7"),
        "{stdout}"
    );
    let out = env.cli(&["freeze"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("incident 7"));

    let (status, reason) = check(
        &env,
        "/gates/promote/canary/prod/podinfo",
        ("prod", "podinfo"),
    )
    .await;
    assert_eq!(status, 403, "{reason}");
    assert!(reason.contains("frozen (ns/prod)"), "{reason}");
    env.clock.advance(HOUR);
    let (status, reason) = check(
        &env,
        "/gates/promote/canary/prod/podinfo",
        ("prod", "podinfo"),
    )
    .await;
    assert_eq!(status, 200, "the freeze ended by itself: {reason}");
    let out = env.cli(&["unfreeze", "ns/prod"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing was frozen in ns/prod"));
    let out = env.cli(&["freeze"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing is frozen"));
}

async fn bad_freezes_and_unauthorized_people_change_nothing(backend: Backend) {
    let env = env(backend).await;
    for (text, says) in [
        ("freeze", "a freeze needs a reason"),
        ("freeze acme/shop for 2h", "a freeze needs a reason"),
        ("freeze ns/Prod oops", "not a Kubernetes namespace"),
        ("freeze for soon oops", "for `soon`"),
        ("freeze until yesterday oops", "until `yesterday`"),
        ("unfreeze bad/repo/name", "not a repository"),
    ] {
        let (status, answer) = env.slash(ALICE, text, "T9").await;
        assert_eq!(status, 200);
        assert!(answer.contains(says), "{text}: {answer}");
    }
    env.slash(BOB, "freeze all nope", "T10").await;
    assert!(env.answer("T10").await.contains("may not freeze"));
    for body in [
        json!({"reason": ""}),
        json!({"reason": "x", "for": "2h", "until": "2030-01-01T00:00:00Z"}),
        json!({"reason": "x", "until": "2020-01-01T00:00:00Z"}),
        json!({"scope": "ns/", "reason": "x"}),
        json!({"reason": "x", "extra": true}),
    ] {
        let r = client()
            .post(env.server.at("/api/v1/freezes"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
    }
    let r = client()
        .post(env.server.at("/api/v1/freezes"))
        .json(&json!({"reason": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    env.server.drained().await;
    assert!(env.freezes().await.is_empty());
    assert!(env.announcements().is_empty());
}

async fn a_pr_comment_freezes_its_repository_by_the_policy(backend: Backend) {
    let env = env(backend).await;
    env.comment(1, "walt", "/freeze release week").await;
    assert!(
        env.freezes().await.is_empty(),
        "write permission is not enough"
    );
    let replies = env.replies();
    assert!(
        replies
            .iter()
            .any(|r| r.contains("`/freeze`: not done: `/freeze` needs maintain permission")),
        "{replies:?}"
    );

    env.comment(2, "maria", "/freeze all of it").await;
    assert!(env.freezes().await.is_empty());
    assert!(env
        .replies()
        .iter()
        .any(|r| r.contains("on a pull request `/freeze` is for acme/shop")));

    env.comment(3, "maria", "/freeze for 2h release week").await;
    let freezes = env.freezes().await;
    assert_eq!(freezes.len(), 1, "{freezes:?}");
    assert_eq!(freezes[0]["scope"], "acme/shop");
    assert_eq!(freezes[0]["until"], NOW + 2 * HOUR);
    assert!(
        env.replies()
            .iter()
            .any(|r| r.contains("changes are frozen (acme/shop) by maria via github")),
        "{:?}",
        env.replies()
    );
    assert!(env.github.reactions_on(3).contains(&"rocket".to_string()));
    env.server.open("/gates/promote/pr/42").await;
    let (status, reason) = check(&env, "/gates/promote/pr/42", ("test", "podinfo")).await;
    assert_eq!(status, 403);
    assert!(
        reason.contains("frozen (acme/shop) by maria via github"),
        "{reason}"
    );

    env.comment(4, "maria", "/unfreeze").await;
    assert!(env.freezes().await.is_empty());
    let (status, _) = check(&env, "/gates/promote/pr/42", ("test", "podinfo")).await;
    assert_eq!(status, 200);
}
