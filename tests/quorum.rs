//! N-of-M approvals and break glass, end to end over real HTTP on SQLite and
//! PostgreSQL, with the Flagger simulator: two distinct people open a gate
//! that needs two (one person from GitHub and Slack counts once, the PR's
//! author not at all); a hold or a new revision starts the count from zero;
//! break glass by the policy's role passes a freeze and a missing approval,
//! loudly, and nobody else may.

use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::{client, Backend};
use serde_json::{json, Value};

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

/// Carol opened acme/shop#42.
async fn env(backend: Backend) -> ChatOps {
    let env = ChatOps::start(
        backend,
        Setup {
            policy: POLICY,
            permissions: &[
                ("alice", "write"),
                ("carol", "write"),
                ("walt", "write"),
                ("maria", "admin"),
            ],
            clock: None,
        },
    )
    .await;
    env.github.set_author(42, "carol");
    env
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
    settings.add_filter(r"\|at \d\d:\d\d UTC", "|at [hh:mm] UTC");
    settings.add_filter(r"gatebot-wait-\d+", "gatebot-wait-[wait]");
    settings.add_filter(r#"\\"w\\":\d+"#, r#"\"w\":[wait]"#);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";

/// What the tests ask of the shared set-up, for PR 42.
trait Pr42 {
    async fn comment(&self, id: u64, user: &str, body: &str);
    fn all_replies(&self) -> String;
    fn status_comment(&self) -> String;
    fn promote_message(&self) -> Value;
    async fn click_approve(&self, user: &str, name: &str, trigger: &str);
    async fn slash_answer(&self, user: &str, text: &str, trigger: &str) -> String;
    async fn audit_actions(&self) -> Vec<String>;
}

impl Pr42 for ChatOps {
    async fn comment(&self, id: u64, user: &str, body: &str) {
        self.comment_by(42, "carol", id, user, body).await;
    }

    fn all_replies(&self) -> String {
        self.replies(42).join("\n---\n")
    }

    fn status_comment(&self) -> String {
        self.github
            .status_comments(42)
            .first()
            .map(|c| c.body.clone())
            .unwrap_or_default()
    }

    /// The latest version of the promote gate's waiting message.
    fn promote_message(&self) -> Value {
        let posted = self
            .waiting_message(PROMOTE)
            .expect("a waiting message for the promote gate");
        self.slack
            .ok("chat.update")
            .into_iter()
            .rfind(|r| r.body["blocks"].to_string().contains(PROMOTE))
            .map_or(posted.body, |r| r.body)
    }

    async fn click_approve(&self, user: &str, name: &str, trigger: &str) {
        let message = self.waiting_message(PROMOTE).expect("a waiting message");
        assert_eq!(
            self.click(user, name, "gatebot_approve", &message, trigger)
                .await,
            200
        );
        self.server.drained().await;
    }

    /// What gatebot answered, inline and later.
    async fn slash_answer(&self, user: &str, text: &str, trigger: &str) -> String {
        let (status, inline) = self
            .slash(user, &user.to_ascii_lowercase(), text, trigger)
            .await;
        assert_eq!(status, 200);
        format!("{inline} {}", self.answers(trigger).await.join(" "))
    }

    async fn audit_actions(&self) -> Vec<String> {
        let gate = self
            .server
            .api(&format!("/api/v1/gates{}", &PROMOTE[6..]))
            .await;
        gate["audit"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap().to_string())
            .collect()
    }
}

/// Flagger, waiting at the promote gate of PR 42 at revision `rev`.
async fn waiting_to_promote(env: &ChatOps, rev: &str) -> FlaggerSim {
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
    a_namespace_rule_is_judged_when_its_canary_asks,
    the_quorum_waits_for_someone_from_the_team,
    slack_user_groups_and_the_policys_groups_count_their_people,
);

/// Two approvals, one of them from the acme/sre GitHub team.
const SRE_AMONG_TWO: &str = r#"
[slack]
approvers = ["UALICE", "UBOB", "UDAVE", "UMAL"]

[users]
alice = "UALICE"
dave = "UDAVE"

[[approvals]]
kind = "promote"
required = 2
include = [{ team = "acme/sre", at_least = 1 }]
"#;

/// Two people are not enough when neither is from the team the rule names:
/// the answer says who is still needed, and only someone the team lists (by
/// GitHub, for a login GitHub or `[users]` vouches for) completes it. A Slack
/// user named like a member, or an API token named like one, is no member.
async fn the_quorum_waits_for_someone_from_the_team(backend: Backend) {
    let env = ChatOps::start(
        backend,
        Setup {
            policy: SRE_AMONG_TWO,
            permissions: &[("alice", "write"), ("carol", "write")],
            clock: None,
        },
    )
    .await;
    env.github.set_author(42, "carol");
    env.github.add_team_member("acme/sre", "dave");
    // Names that someone could take where gatebot does not check them.
    env.github.add_team_member("acme/sre", "mallory");
    env.github.add_team_member("acme/sre", "admin");
    let mut sim = waiting_to_promote(&env, "rev-b").await;

    env.comment(1, "alice", "/promote").await;
    assert!(
        env.all_replies().contains(
            "approval counted at /gates/promote/acme/shop/pr/42 (1 of 2 approvals: @alice; still needs someone from acme/sre)"
        ),
        "{}",
        env.all_replies()
    );
    env.click_approve(BOB, "bob", "T1").await;
    let reason = ask(&mut sim, "2 of 2 approvals").await;
    assert!(
        reason.contains(
            "2 of 2 approvals: @alice, @bob for revision rev-b; still needs someone from acme/sre"
        ),
        "{reason}"
    );
    // An unmapped Slack user calling themselves mallory, and the API's admin
    // token: counted as people, never as the team's.
    env.click_approve("UMAL", "mallory", "T2").await;
    env.server.open(PROMOTE).await;
    let reason = ask(&mut sim, "4 of 2 approvals").await;
    assert!(
        reason.contains("still needs someone from acme/sre"),
        "{reason}"
    );
    assert_eq!(sim.phase(), Phase::WaitingPromotion);
    env.server.drained().await;
    assert!(
        env.status_comment()
            .contains("still needs someone from acme/sre"),
        "{}",
        env.status_comment()
    );
    assert!(
        env.promote_message()["blocks"]
            .to_string()
            .contains("still needs someone from acme/sre"),
        "{}",
        env.promote_message()
    );

    // Dave, from Slack, is acme/sre's by his login in [users].
    env.click_approve("UDAVE", "dave", "T3").await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted once someone from acme/sre approved: {}",
        last_promote_reason(&sim)
    );
    assert!(
        last_promote_reason(&sim).contains("dave via slack"),
        "{}",
        last_promote_reason(&sim)
    );
}

/// A Slack user group and a `[groups]` list, each needed once.
const ONCALL_AND_RELEASE: &str = r#"
[slack]
approvers = ["UALICE", "UBOB", "UDAVE"]

[users]
alice = "UALICE"

[groups]
release = ["alice"]

[[approvals]]
kind = "promote"
required = 2
include = [{ slack_group = "SONCALL" }, { group = "release", at_least = 1 }]
"#;

/// Slack's user group is asked for the clicker's Slack user, and the
/// policy's `[groups]` for a login: each group's member completes its part;
/// one person in both counts once but fills both.
async fn slack_user_groups_and_the_policys_groups_count_their_people(backend: Backend) {
    let env = ChatOps::start(
        backend,
        Setup {
            policy: ONCALL_AND_RELEASE,
            permissions: &[("alice", "write"), ("carol", "write")],
            clock: None,
        },
    )
    .await;
    env.github.set_author(42, "carol");
    env.slack.set_group("SONCALL", &["UBOB", "UALICE"]);
    let mut sim = waiting_to_promote(&env, "rev-b").await;

    env.slash("UDAVE", "dave", "promote 42", "T1").await;
    env.server.drained().await;
    let reason = ask(&mut sim, "1 of 2 approvals").await;
    assert!(
        reason.contains("still needs someone from SONCALL and someone from release"),
        "{reason}"
    );
    env.slash("UBOB", "bob", "promote 42", "T2").await;
    env.server.drained().await;
    let reason = ask(&mut sim, "2 of 2 approvals").await;
    assert!(
        reason.contains(
            "2 of 2 approvals: @dave, @bob for revision rev-b; still needs someone from release"
        ),
        "{reason}"
    );
    // Alice is in both; from GitHub, Slack's group knows her by [users].
    env.comment(1, "alice", "/promote").await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted: {}",
        last_promote_reason(&sim)
    );
}

/// `prod` needs two people; every other namespace one.
const PROD_NEEDS_TWO: &str = r#"
[[approvals]]
kind = "promote"
namespace = "prod"
required = 2
"#;

/// The count is judged when a canary asks, by its own rule: one approval,
/// given before any canary waits or while only `dev` waits, opens the PR's
/// gate for `dev` and leaves `prod` at 1 of 2 until a second person approves.
async fn a_namespace_rule_is_judged_when_its_canary_asks(backend: Backend) {
    let env = ChatOps::start(
        backend,
        Setup {
            policy: PROD_NEEDS_TWO,
            permissions: &[("alice", "write"), ("bob", "write")],
            clock: None,
        },
    )
    .await;
    let check = |pr: u64, ns: &'static str, checksum: &'static str| {
        let url = env.server.at(&format!("/gates/promote/pr/{pr}"));
        async move {
            let body = json!({"name": "podinfo", "namespace": ns, "phase": "WaitingPromotion", "checksum": checksum});
            let r = client().post(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // Opened with the API before any canary waits.
    env.server.open("/gates/promote/pr/80").await;
    let (status, prod) = check(80, "prod", "p1").await;
    assert_eq!(status, 403, "{prod}");
    assert!(
        prod.starts_with(
            "waiting: 1 of 2 approvals: @admin for revision p1; 1 more approval needed"
        ),
        "{prod}"
    );
    let (status, dev) = check(80, "dev", "d1").await;
    assert_eq!(status, 200, "{dev}");
    assert!(dev.starts_with("approved by admin via api at "), "{dev}");
    // Pinned for dev: its next revision waits again.
    assert_eq!(check(80, "dev", "d2").await.0, 403);
    // A second person opens prod.
    env.github.set_author(80, "carol");
    env.comment_by(80, "carol", 1, "alice", "/promote").await;
    let (status, prod) = check(80, "prod", "p1").await;
    assert_eq!(status, 200, "{prod}");
    assert!(
        prod.starts_with("approved by admin via api and alice via github at "),
        "{prod}"
    );
    assert_eq!(check(80, "dev", "d1").await.0, 200, "dev keeps its pin");

    // One signed /promote while only a dev canary waits.
    env.github.set_author(81, "carol");
    assert_eq!(check(81, "dev", "d1").await.0, 403);
    env.comment_by(81, "carol", 2, "bob", "/promote").await;
    assert_eq!(check(81, "dev", "d1").await.0, 200);
    let (status, prod) = check(81, "prod", "p1").await;
    assert_eq!(status, 403, "{prod}");
    assert!(
        prod.contains("1 of 2 approvals: @bob for revision p1"),
        "{prod}"
    );
}

async fn two_people_open_a_gate_that_needs_two_and_the_author_does_not_count(backend: Backend) {
    let env = env(backend).await;
    let mut sim = waiting_to_promote(&env, "rev-b").await;

    // The author's approval does not count (four eyes), from GitHub or Slack.
    env.comment(1, "carol", "/promote").await;
    assert!(
        env.all_replies().contains("someone else must"),
        "{}",
        env.all_replies()
    );
    assert!(!env.audit_actions().await.contains(&"approve".to_string()));

    // Alice, from GitHub: one of two.
    env.comment(2, "alice", "/promote").await;
    assert!(
        env.all_replies().contains(
            "approval counted at /gates/promote/acme/shop/pr/42 (1 of 2 approvals: @alice)"
        ),
        "{}",
        env.all_replies()
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
    let frozen = env
        .slash_answer(ALICE, "freeze acme/shop incident 12", "T0")
        .await;
    assert!(frozen.contains("frozen"), "{frozen}");

    // Nobody but the policy's role, and never without a reason.
    env.comment(1, "walt", "/promote --force payments are down")
        .await;
    env.comment(2, "maria", "/promote --force").await;
    let replies = env.all_replies();
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
        .slash_answer(ALICE, "promote 42 --force payments are down", "T1")
        .await;
    assert!(
        refused.contains("slack.commands.force.approvers"),
        "{refused}"
    );
    let rollback = env
        .slash_answer(BOB, "rollback 42 --force because", "T2")
        .await;
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
            "🚨 **Break glass:** `promote` was forced open by `maria` via github: `payments are down`"
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
