//! Approving reviews (issue 27, point 2): with `[github] approving_review =
//! "promote"` an approving review is the reviewer's `/promote`, pinned to the
//! commit reviewed; a dismissed review takes the vote back while unused. Over
//! real HTTP, the fake GitHub and the Flagger simulator, on both stores.

use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::flagger::{waiting_at_promote, FlaggerSim, HookType};
use gatebot_testkit::github_payloads::{deliver_signed, fixture, github_time, now_ms};
use gatebot_testkit::harness::{
    check_config_of_policy, client, Backend, TestDb, TestServer, ADMIN_TOKEN,
};
use serde_json::{json, Value};

const SECRET: &str = "reviews-secret";
const HEAD: &str = "85d557f0c9a4e1d2b3c4d5e6f708192a3b4c5d6e";
const OLDER: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";
const ON: &str = "[github]\napproving_review = \"promote\"\n";
const TWO: &str =
    "[github]\napproving_review = \"promote\"\n\n[[approvals]]\nkind = \"promote\"\nrequired = 2\n";

struct Env {
    server: TestServer,
    github: FakeGithub,
    _db: TestDb,
}

/// With the policy file `policy`, when given (none: reviews are off).
async fn setup(backend: Backend, policy: Option<&str>) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    for login in ["alice", "bob"] {
        github.set_permission(login, "write");
    }
    github.set_permission("rita", "read");
    github.set_head(42, HEAD);
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    if policy.is_some_and(|p| p.contains("[change]")) {
        config.change.user = Some("gatebot".into());
        config.change.password = Some("s3cret".to_string().into());
    }
    if let Some(policy) = policy {
        let path = db.dir.path().join("policy.toml");
        std::fs::write(&path, policy).unwrap();
        config.policy = Some(path);
    }
    let options = gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    };
    let server = TestServer::start(config, options).await;
    Env {
        server,
        github,
        _db: db,
    }
}

async fn deliver(server: &TestServer, payload: &Value) -> (u16, String) {
    let guid = uuid::Uuid::new_v4().to_string();
    deliver_signed(&server.url, SECRET, "pull_request_review", &guid, payload).await
}

/// Review `id` of PR 42 by `user` of `commit`, from the real payload, submitted now.
fn review(id: u64, user: &str, commit: &str) -> Value {
    let mut p = fixture("pull_request_review.submitted.json");
    p["repository"]["full_name"] = json!("acme/shop");
    p["pull_request"]["number"] = json!(42);
    p["review"]["id"] = json!(id);
    p["review"]["state"] = json!("approved");
    p["review"]["commit_id"] = json!(commit);
    p["review"]["submitted_at"] = json!(github_time(now_ms()));
    p["review"]["user"]["login"] = json!(user);
    p["sender"]["login"] = json!(user);
    p
}

/// The dismissal of `approval` by `by`, from the real payload.
fn dismissal(approval: &Value, by: &str) -> Value {
    let mut p = fixture("pull_request_review.dismissed.json");
    p["repository"]["full_name"] = json!("acme/shop");
    p["pull_request"]["number"] = json!(42);
    for field in ["id", "commit_id", "submitted_at", "user"] {
        p["review"][field] = approval["review"][field].clone();
    }
    p["sender"]["login"] = json!(by);
    p
}

async fn promote_open(server: &TestServer) -> bool {
    let r = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    r.status() == 200
}

async fn audit(server: &TestServer) -> Vec<Value> {
    let v = server.api(&format!("/api/v1/audit?gate={PROMOTE}")).await;
    v["audit"].as_array().cloned().unwrap_or_default()
}

fn count(entries: &[Value], action: &str) -> usize {
    entries.iter().filter(|e| e["action"] == action).count()
}

/// Alice's approving review `id` with `body`: Flagger promotes, and the
/// audit's open entry is returned.
async fn promoted_by(server: &TestServer, sim: &mut FlaggerSim, id: u64, body: &str) -> Value {
    let mut approved = review(id, "alice", HEAD);
    approved["review"]["body"] = json!(body);
    deliver(server, &approved).await;
    server.drained().await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
    let entries = audit(server).await;
    entries
        .into_iter()
        .find(|e| e["action"] == "open")
        .expect("an open")
}

/// gatebot's replies on PR 42, oldest first.
fn replies(github: &FakeGithub) -> Vec<String> {
    let mut replies = github.replies(42);
    replies.sort_by_key(|c| c.id);
    replies.into_iter().map(|c| c.body).collect()
}

fn snap(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    settings.add_filter(
        r"<!-- gatebot:job:[0-9a-f-]+ -->",
        "<!-- gatebot:job:[id] -->",
    );
    settings.bind(|| insta::assert_snapshot!(name, text));
}

gatebot_testkit::on_both_stores!(
    an_approving_review_opens_the_gate_and_flagger_promotes,
    a_review_of_an_older_commit_is_stale_and_the_reply_says_why,
    with_the_setting_off_a_review_changes_nothing,
    a_dismissed_review_withdraws_the_vote_before_quorum,
    a_dismissal_takes_back_only_the_vote_its_review_cast,
    under_a_reasons_rule_a_review_says_why_in_its_body,
    a_readers_review_is_refused_as_their_comment_would_be,
    a_reviewer_counts_for_the_team_github_lists_them_in,
    under_a_change_rule_a_review_names_its_change_in_its_body,
);

/// Under `[change]` (mode `reference`), an approving review names its
/// change in the first line of its body, read from ServiceNow.
async fn under_a_change_rule_a_review_names_its_change_in_its_body(backend: Backend) {
    use gatebot_testkit::fake_servicenow::{Change, FakeServiceNow};
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let (now, hour) = (now_ms(), 3_600_000);
    sn.put(Change::planned(
        "CHG0031337",
        "approved",
        now - hour,
        now + hour,
        "shop",
    ));
    sn.put(Change::planned(
        "CHG0000001",
        "requested",
        now - hour,
        now + hour,
        "shop",
    ));
    let policy = format!(
        "{ON}\n[change]\nprovider = \"servicenow\"\nurl = \"{}\"\n",
        sn.url
    );
    let env = setup(backend, Some(&policy)).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(server).await;
    let mut pending = review(9201, "alice", HEAD);
    pending["review"]["body"] = json!("CHG0000001 looks good");
    deliver(server, &pending).await;
    server.drained().await;
    assert!(!promote_open(server).await);
    let replies = replies(github);
    assert!(
        replies
            .iter()
            .any(|r| r.contains("change CHG0000001 is not approved yet")),
        "{replies:?}"
    );

    let open = promoted_by(
        server,
        &mut sim,
        9202,
        "CHG0031337 looks good\nthe numbers are green",
    )
    .await;
    assert!(
        open["reason"].as_str().is_some_and(|r| r.starts_with(
            "approving review 9202 of 85d557f; CHG0031337 looks good; change CHG0031337 ("
        )),
        "{open}"
    );
}

/// A quorum's group from approving reviews: the reviewer's login, as GitHub
/// signed it, is asked of the team.
async fn a_reviewer_counts_for_the_team_github_lists_them_in(backend: Backend) {
    let policy = format!(
        "{ON}\n[[approvals]]\nkind = \"promote\"\nrequired = 1\ninclude = [{{ team = \"acme/sre\" }}]\n"
    );
    let env = setup(backend, Some(&policy)).await;
    let (server, github) = (&env.server, &env.github);
    github.add_team_member("acme/sre", "bob");
    let mut sim = waiting_at_promote(server).await;
    deliver(server, &review(9201, "alice", HEAD)).await;
    server.drained().await;
    assert!(!promote_open(server).await, "alice is not acme/sre's");
    assert!(
        replies(github)
            .iter()
            .any(|r| r.contains("still needs someone from acme/sre")),
        "{:?}",
        replies(github)
    );
    deliver(server, &review(9202, "bob", HEAD)).await;
    server.drained().await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
}

async fn an_approving_review_opens_the_gate_and_flagger_promotes(backend: Backend) {
    let env = setup(backend, Some(ON)).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(server).await;
    let approval = review(9001, "alice", HEAD);
    let (status, text) = deliver(server, &approval).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 10).await,
        "Flagger promoted"
    );
    let answer = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(
        answer.starts_with("approved by alice via github"),
        "{answer}"
    );
    assert!(replies(github).is_empty(), "{:?}", replies(github));

    // The same delivery again, under a new X-GitHub-Delivery: nothing more.
    let (status, text) = deliver(server, &approval).await;
    assert_eq!((status, text.trim()), (200, "duplicate delivery"));
    server.drained().await;
    assert_eq!(count(&audit(server).await, "open"), 1);

    // Dismissed once it was used: the approval stands, and the reply says so.
    deliver(server, &dismissal(&approval, "bob")).await;
    server.drained().await;
    let entries = audit(server).await;
    assert_eq!(count(&entries, "withdraw"), 0, "{entries:?}");
    let replies = replies(github);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].contains("had already opened the gate"),
        "{}",
        replies[0]
    );
}

/// `check-config` says when approving reviews count, and names a wrong value.
#[test]
fn check_config_shows_the_setting_and_refuses_a_wrong_value() {
    let run = |policy: &str| check_config_of_policy(env!("CARGO_BIN_EXE_gatebot"), policy);
    let (ok, on) = run(ON);
    assert!(ok, "{on}");
    assert!(
        on.contains("reviews:         an approving review counts as /promote"),
        "{on}"
    );
    let (ok, off) = run("[github]\napproving_review = \"off\"\n");
    assert!(ok && !off.contains("reviews:"), "{off}");
    let (ok, wrong) = run("[github]\napproving_review = \"start\"\n");
    assert!(!ok, "{wrong}");
    assert!(
        wrong.contains("approving_review") && wrong.contains("promote"),
        "{wrong}"
    );
}

async fn a_review_of_an_older_commit_is_stale_and_the_reply_says_why(backend: Backend) {
    let env = setup(backend, Some(ON)).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    let (status, text) = deliver(server, &review(9002, "alice", OLDER)).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    assert!(!promote_open(server).await, "a stale review opens nothing");
    let entries = audit(server).await;
    assert_eq!(count(&entries, "open"), 0, "{entries:?}");
    let replies = replies(github);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0].contains("stale"), "{}", replies[0]);
    if backend == Backend::Sqlite {
        snap("review_stale_reply", &replies[0]);
    }
}

async fn with_the_setting_off_a_review_changes_nothing(backend: Backend) {
    let env = setup(backend, None).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    let (status, text) = deliver(server, &review(9003, "alice", HEAD)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("approving_review is off"), "{text}");
    server.drained().await;
    assert!(!promote_open(server).await);
    assert_eq!(count(&audit(server).await, "open"), 0);
    assert!(replies(github).is_empty());
    let ignored = r#"gatebot_commands_total{source="github",command="review",result="ignored"}"#;
    assert_eq!(server.metric(ignored).await, 1.0);
}

async fn a_dismissed_review_withdraws_the_vote_before_quorum(backend: Backend) {
    let env = setup(backend, Some(TWO)).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(server).await;
    let alices = review(9004, "alice", HEAD);
    deliver(server, &alices).await;
    server.drained().await;
    assert_eq!(count(&audit(server).await, "approve"), 1);

    let (status, text) = deliver(server, &dismissal(&alices, "bob")).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    assert_eq!(count(&audit(server).await, "withdraw"), 1);

    // Bob's approval is now the only one: still one short.
    deliver(server, &review(9005, "bob", HEAD)).await;
    server.drained().await;
    assert!(!promote_open(server).await, "alice's vote was taken back");
    // Alice approves again: two people, the gate opens.
    deliver(server, &review(9006, "alice", HEAD)).await;
    server.drained().await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
    let replies = replies(github);
    assert_eq!(replies.len(), 3, "{replies:#?}");
    if backend == Backend::Sqlite {
        snap("review_counted_reply", &replies[0]);
        snap("review_dismissed_reply", &replies[1]);
    }
}

/// Alice's vote came from her review of the head: dismissing her stale
/// review, or a review of hers that approved nothing, leaves it counted.
async fn a_dismissal_takes_back_only_the_vote_its_review_cast(backend: Backend) {
    let env = setup(backend, Some(TWO)).await;
    let server = &env.server;
    let mut sim = waiting_at_promote(server).await;
    let stale = review(9001, "alice", OLDER);
    let mut remark = review(9003, "alice", HEAD);
    remark["review"]["state"] = json!("changes_requested");
    for r in [&stale, &review(9002, "alice", HEAD), &remark] {
        deliver(server, r).await;
        server.drained().await;
    }
    assert_eq!(count(&audit(server).await, "approve"), 1);
    for r in [&stale, &remark] {
        let (status, text) = deliver(server, &dismissal(r, "bob")).await;
        assert_eq!(status, 202, "{text}");
        server.drained().await;
    }
    assert_eq!(count(&audit(server).await, "withdraw"), 0);
    // Bob's approval is the second: the gate opens.
    deliver(server, &review(9004, "bob", HEAD)).await;
    server.drained().await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
}

/// Under a `[[reasons]]` rule, an approving review says why in its body;
/// which review cast the vote is recorded before it, never taken for it.
async fn under_a_reasons_rule_a_review_says_why_in_its_body(backend: Backend) {
    let policy = format!("{ON}\n[[reasons]]\nkind = \"promote\"\nrequired = true\n");
    let env = setup(backend, Some(&policy)).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(server).await;
    deliver(server, &review(9101, "alice", HEAD)).await;
    server.drained().await;
    assert!(
        !promote_open(server).await,
        "a review that says nothing opens nothing"
    );
    let replies = replies(github);
    assert!(
        replies[0].contains("the policy asks for a reason to promote: say why")
            && replies[0]
                .contains("needs a reason: write it as the first line of the review's body"),
        "{replies:?}"
    );

    let body = "\n  the canary's numbers are green\nmore detail";
    let open = promoted_by(server, &mut sim, 9102, body).await;
    assert_eq!(
        open["reason"], "approving review 9102 of 85d557f; the canary's numbers are green",
        "{open}"
    );
}

async fn a_readers_review_is_refused_as_their_comment_would_be(backend: Backend) {
    let env = setup(backend, Some(ON)).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    deliver(server, &review(9007, "rita", HEAD)).await;
    server.drained().await;
    assert!(!promote_open(server).await);
    let entries = audit(server).await;
    assert_eq!(
        (count(&entries, "open"), count(&entries, "refuse")),
        (0, 1),
        "{entries:?}"
    );
    let replies = replies(github);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].contains("needs write permission on acme/shop and you have read"),
        "{}",
        replies[0]
    );
    if backend == Backend::Sqlite {
        snap("review_refused_reply", &replies[0]);
    }
}
