//! Change freezes, end to end over real HTTP on SQLite and PostgreSQL: a
//! freeze from Slack holds a pre-approved release until it is lifted, never a
//! rollback; the CLI freezes for a while; bad input and unauthorized people
//! change nothing.

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::{client, Backend, ADMIN_TOKEN};
use serde_json::{json, Value};

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

struct Env {
    chat: ChatOps,
    clock: Arc<ManualClock>,
}

impl std::ops::Deref for Env {
    type Target = ChatOps;
    fn deref(&self) -> &ChatOps {
        &self.chat
    }
}

async fn env(backend: Backend) -> Env {
    let clock = ManualClock::new(NOW);
    let chat = ChatOps::start(
        backend,
        Setup {
            policy: POLICY,
            permissions: &[("maria", "maintain"), ("walt", "write")],
            clock: Some(clock.clone()),
        },
    )
    .await;
    Env { chat, clock }
}

impl Env {
    /// `/gatebot <text>`; the inline answer's status and text.
    async fn slash(&self, user: &str, text: &str, trigger: &str) -> (u16, String) {
        self.chat.slash(user, "someone", text, trigger).await
    }

    /// What gatebot answered later on a command's response_url.
    async fn answer(&self, trigger: &str) -> String {
        self.answers(trigger)
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("drained, yet no answer on {trigger}'s response_url"))
    }

    async fn freezes(&self) -> Vec<Value> {
        self.server.api("/api/v1/freezes").await["freezes"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// A signed PR comment on acme/shop#42, applied.
    async fn comment(&self, id: u64, user: &str, body: &str) {
        self.comment_by(42, "Kobzol", id, user, body).await;
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

/// Flagger's check of `gate`. A check that the store could not answer in
/// time ("store busy", on a loaded machine) is asked again, as Flagger asks
/// at its next poll.
async fn check(env: &Env, gate: &str, canary: (&str, &str)) -> (u16, String) {
    let mut answer = (0, String::new());
    for _ in 0..5 {
        let r = client()
            .post(env.server.at(gate))
            .json(&json!({"name": canary.1, "namespace": canary.0, "phase": "Progressing", "checksum": "rev-b"}))
            .send()
            .await
            .unwrap();
        answer = (r.status().as_u16(), r.text().await.unwrap());
        if !answer.1.contains("store busy") {
            break;
        }
    }
    answer
}

gatebot_testkit::on_both_stores!(
    a_pr_comment_freezes_its_repository_by_the_policy,
    a_slack_freeze_holds_a_preapproved_release_until_lifted,
    a_cli_freeze_for_a_while_ends_by_itself,
    bad_freezes_and_unauthorized_people_change_nothing,
    a_freeze_reason_pings_no_one_in_slack,
);

/// A freeze's reason is a person's words: in the channel's announcement and
/// the answer, Slack's `<!channel>` and `<@U…>` stay text.
async fn a_freeze_reason_pings_no_one_in_slack(backend: Backend) {
    let env = env(backend).await;
    let reason = "<!channel> & <@U0ADMIN> see <https://evil.example|this>";
    env.slash(ALICE, &format!("freeze acme/shop {reason}"), "T1")
        .await;
    env.server.drained().await;
    let answer = env.answer("T1").await;
    let announced = env.announcements();
    let escaped = "&lt;!channel&gt; &amp; &lt;@U0ADMIN&gt; see &lt;https://evil.example|this&gt;";
    for text in announced.iter().chain([&answer]) {
        assert!(text.contains(escaped), "{text}");
        assert!(
            !text.contains("<!channel>") && !text.contains("<@U0ADMIN>"),
            "{text}"
        );
    }
    assert_eq!(announced.len(), 1, "{announced:?}");
    // Kept as written.
    assert_eq!(env.freezes().await[0]["reason"], reason);
}

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
        stdout.contains("frozen (ns/prod) by admin via api"),
        "{stdout}"
    );
    assert!(
        stdout.contains("until 2024-05-01T15:02:00Z: claims ops via cli; incident 7"),
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
    let replies = env.replies(42);
    assert!(
        replies
            .iter()
            .any(|r| r.contains("`/freeze`: not done: `/freeze` needs maintain permission")),
        "{replies:?}"
    );

    env.comment(2, "maria", "/freeze all of it").await;
    assert!(env.freezes().await.is_empty());
    assert!(env
        .replies(42)
        .iter()
        .any(|r| r.contains("on a pull request `/freeze` is for acme/shop")));

    env.comment(3, "maria", "/freeze for 2h release week").await;
    let freezes = env.freezes().await;
    assert_eq!(freezes.len(), 1, "{freezes:?}");
    assert_eq!(freezes[0]["scope"], "acme/shop");
    assert_eq!(freezes[0]["until"], NOW + 2 * HOUR);
    assert!(
        env.replies(42)
            .iter()
            .any(|r| r.contains("changes are frozen (acme/shop) by maria via github")),
        "{:?}",
        env.replies(42)
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
