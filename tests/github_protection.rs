//! gatebot as a deployment protection rule (issue 27, point 4): a workflow
//! run's deployment to a protected environment waits for the PR's promote
//! gate, announced in every channel; it is approved at GitHub's callback when
//! the gate opens (a Slack click, a `/promote`), rejected by a Reject or the
//! wait's deadline. Over real HTTP, the fake GitHub (which records callback
//! POSTs) and the fake Slack, on both stores. A run no longer waiting (an
//! earlier attempt's review reached GitHub) is not reviewed again (issue 41).

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot::testing::github::verify::sign;
use gatebot_testkit::chatops::{ChatOps, Setup, GITHUB_SECRET};
use gatebot_testkit::fake_github::{Failure, FakeProtectionReview};
use gatebot_testkit::github_payloads::{fixture, github_time};
use gatebot_testkit::harness::{check_config_of_policy, client, eventually, Backend, ADMIN_TOKEN};
use serde_json::{json, Value};

const TEST_APP_KEY: &str = include_str!("fixtures/test-app-key.pem");
const NOW: i64 = 1_714_572_120_000;
const HOUR: i64 = 3_600_000;
const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";
const ALICE: &str = "UALICE";

const POLICY: &str = r#"
[[github.protection]]
environment = "production"
gate = "promote"

[[deadlines]]
kind = "promote"
after = "2h"
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

/// GitHub as an App (protection rules are App-only) and Slack, with the policy.
async fn env(backend: Backend) -> Env {
    let clock = ManualClock::new(NOW);
    let setup = Setup {
        policy: POLICY,
        permissions: &[("alice", "write")],
        clock: Some(clock.clone()),
    };
    let chat = ChatOps::start_with(backend, setup, |config| {
        config.github.token = None;
        config.github.app_id = Some(1);
        config.github.app_private_key = Some(TEST_APP_KEY.to_string().into());
        config.slack.approvers = vec![ALICE.into()];
    })
    .await;
    Env { chat, clock }
}

impl Env {
    /// The request GitHub sends for workflow run `run`'s deployment of PR 42
    /// to production, its callback on `host` (the fake GitHub's by default);
    /// the fake GitHub lists the run as waiting for production from now on.
    fn request(&self, run: u64, host: Option<&str>) -> Value {
        self.github.await_deployment("acme/shop", run, "production");
        let mut p = fixture("deployment_protection_rule.requested.json");
        p["repository"]["full_name"] = json!("acme/shop");
        p["repository"]["name"] = json!("shop");
        p["pull_requests"][0]["number"] = json!(42);
        p["deployment"]["id"] = json!(run * 10);
        p["deployment"]["created_at"] = json!(github_time(self.now_ms()));
        let host = host.map_or_else(|| self.github.url.clone(), str::to_string);
        p["deployment_callback_url"] = json!(format!(
            "{host}/repos/acme/shop/actions/runs/{run}/deployment_protection_rule"
        ));
        p
    }

    /// Delivers `payload` signed, under a new delivery id; status and text.
    async fn deliver(&self, payload: &Value) -> (u16, String) {
        let body = serde_json::to_vec(payload).unwrap();
        let r = client()
            .post(self.server.at("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", "deployment_protection_rule")
            .header("x-github-delivery", uuid::Uuid::new_v4().to_string())
            .header("x-hub-signature-256", sign(GITHUB_SECRET, &body))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.text().await.unwrap())
    }

    /// Run `run`'s request, stored and worked.
    async fn requested(&self, run: u64) {
        let (status, text) = self.deliver(&self.request(run, None)).await;
        assert_eq!(status, 202, "{text}");
        self.server.drained().await;
    }

    async fn reviews(&self, n: usize) -> Vec<FakeProtectionReview> {
        let github = &self.github;
        eventually(
            "the callback reviews",
            std::time::Duration::from_secs(10),
            || async { github.protection_reviews().len() >= n },
        )
        .await;
        self.server.drained().await;
        self.github.protection_reviews()
    }

    async fn audit(&self, action: &str) -> usize {
        let v = self
            .server
            .api(&format!("/api/v1/audit?gate={PROMOTE}"))
            .await;
        let entries = v["audit"].as_array().cloned().unwrap_or_default();
        entries.iter().filter(|e| e["action"] == action).count()
    }
}

fn snap(name: &str, reviews: &[FakeProtectionReview]) {
    let shown: Vec<Value> = reviews
        .iter()
        .map(|r| json!({"repo": r.repo, "run": r.run_id, "body": r.body}))
        .collect();
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_json_snapshot!(name, shown));
}

gatebot_testkit::on_both_stores!(
    approved_after_a_slack_click,
    approved_after_a_promote_comment_and_at_once_while_open,
    rejected_after_a_reject,
    rejected_at_the_deadline,
    a_replayed_delivery_changes_nothing,
    a_second_request_waits_once_and_a_rerun_waits_again,
    a_callback_on_another_host_is_refused,
    a_deployment_no_longer_waiting_is_not_reviewed_again,
    a_freeze_holds_the_approval_until_it_is_lifted,
    a_hold_after_the_approval_was_queued_stops_it,
    a_deployment_of_a_commit_pushed_since_waits_for_its_push,
);

async fn approved_after_a_slack_click(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    assert_eq!(env.audit("wait").await, 1, "the wait started in the core");
    let message = env
        .waiting_message(PROMOTE)
        .expect("the wait is announced in Slack");
    assert!(env.github.protection_reviews().is_empty(), "not yet");
    assert!(!env.github.status_comments(42).is_empty(), "and on the PR");

    assert_eq!(
        env.click(ALICE, "alice", "gatebot_approve", &message, "trig-1")
            .await,
        200
    );
    let reviews = env.reviews(1).await;
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    let r = &reviews[0];
    assert_eq!((r.repo.as_str(), r.run_id), ("acme/shop", 7));
    assert_eq!(r.body["state"], "approved");
    let token = r.authorization.as_deref().unwrap_or("");
    assert!(token.contains("ghs_"), "the installation's token: {token}");
    if backend == Backend::Sqlite {
        snap("approved_by_slack", &reviews);
    }
}

async fn approved_after_a_promote_comment_and_at_once_while_open(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    let reviews = env.reviews(1).await;
    assert_eq!(reviews[0].body["state"], "approved");
    // The gate is open: the next run's deployment is approved at once.
    env.requested(8).await;
    let reviews = env.reviews(2).await;
    assert_eq!(reviews.len(), 2, "{reviews:#?}");
    assert_eq!(reviews[1].run_id, 8);
    assert_eq!(reviews[1].body["state"], "approved");
    if backend == Backend::Sqlite {
        snap("approved_by_comment", &reviews);
    }
}

async fn rejected_after_a_reject(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    let message = env.waiting_message(PROMOTE).unwrap();
    assert_eq!(
        env.click(ALICE, "alice", "gatebot_reject", &message, "trig-r")
            .await,
        200
    );
    let reviews = env.reviews(1).await;
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(reviews[0].body["state"], "rejected");
    if backend == Backend::Sqlite {
        snap("rejected_by_slack", &reviews);
    }
}

async fn rejected_at_the_deadline(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    let engine = &env.server.state.engine;
    env.clock.advance(2 * HOUR - 1000);
    assert_eq!(
        engine.deadlines().enforce_deadlines().await.unwrap(),
        0,
        "not yet"
    );
    env.clock.advance(2000);
    let (a, b) = tokio::join!(
        engine.deadlines().enforce_deadlines(),
        engine.deadlines().enforce_deadlines()
    );
    assert_eq!(a.unwrap() + b.unwrap(), 1, "acted on once");
    let reviews = env.reviews(1).await;
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(reviews[0].body["state"], "rejected");
    assert_eq!(env.audit("deadline").await, 1);
    if backend == Backend::Sqlite {
        snap("rejected_at_the_deadline", &reviews);
    }
}

async fn a_replayed_delivery_changes_nothing(backend: Backend) {
    let env = env(backend).await;
    let request = env.request(7, None);
    env.requested(7).await;
    let posted = env.slack.ok("chat.postMessage").len();
    let (status, text) = env.deliver(&request).await;
    assert_eq!((status, text.trim()), (200, "duplicate delivery"));
    env.server.drained().await;
    assert_eq!(env.slack.ok("chat.postMessage").len(), posted);
    assert_eq!(env.audit("wait").await, 1);
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    let reviews = env.reviews(1).await;
    let (status, _) = env.deliver(&request).await;
    assert_eq!(status, 200);
    env.server.drained().await;
    assert_eq!(env.github.protection_reviews().len(), reviews.len());
    assert_eq!(reviews.len(), 1, "one review: {reviews:#?}");
}

/// GitHub asks again for the same run and environment when a job is re-run
/// (same run id, a new deployment): while the first waits this changes
/// nothing; once it was decided, the run waits again.
async fn a_second_request_waits_once_and_a_rerun_waits_again(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    let mut again = env.request(7, None);
    again["deployment"]["id"] = json!(71);
    let (status, text) = env.deliver(&again).await;
    assert_eq!(status, 202, "a new deployment id is a new delivery: {text}");
    env.server.drained().await;
    assert_eq!(env.audit("wait").await, 1, "still one wait");
    env.clock.advance(2 * HOUR + 1000);
    env.server
        .state
        .engine
        .deadlines()
        .enforce_deadlines()
        .await
        .unwrap();
    assert_eq!(env.reviews(1).await[0].body["state"], "rejected");

    let mut rerun = env.request(7, None);
    rerun["deployment"]["id"] = json!(72);
    let (status, text) = env.deliver(&rerun).await;
    assert_eq!(status, 202, "{text}");
    env.server.drained().await;
    assert_eq!(env.audit("wait").await, 2, "the re-run waits again");
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    let reviews = env.reviews(2).await;
    assert_eq!(reviews.len(), 2, "{reviews:#?}");
    assert_eq!(
        (reviews[1].run_id, &reviews[1].body["state"]),
        (7, &json!("approved"))
    );
}

async fn a_callback_on_another_host_is_refused(backend: Backend) {
    let env = env(backend).await;
    let request = env.request(7, Some("https://evil.example"));
    let (status, text) = env.deliver(&request).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("deployment_callback_url refused"), "{text}");
    let refused =
        r#"gatebot_rejected_requests_total{route="/webhooks/github",reason="foreign_callback"}"#;
    assert_eq!(env.server.metric(refused).await, 1.0);
    env.server.drained().await;
    assert_eq!(env.audit("wait").await, 0, "no wait");
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    assert!(env.github.protection_reviews().is_empty());
}

/// An earlier attempt's approval reached GitHub, but its answer was lost (a
/// replica killed or cut off mid-call): the run no longer waits for
/// production. The job asks GitHub first, sends nothing, and is done.
async fn a_deployment_no_longer_waiting_is_not_reviewed_again(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    let earlier = client()
        .post(format!(
            "{}/repos/acme/shop/actions/runs/7/deployment_protection_rule",
            env.github.url
        ))
        .json(&json!({"environment_name": "production", "state": "approved", "comment": "an earlier attempt"}))
        .send()
        .await
        .unwrap();
    assert_eq!(earlier.status().as_u16(), 204);
    assert!(env.github.pending_deployments("acme/shop", 7).is_empty());
    let reads = env.github.pending_deployment_reads();

    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    env.server.drained().await;
    assert!(
        env.github.pending_deployment_reads() > reads,
        "GitHub was asked whether the run still waits"
    );
    let reviews = env.github.protection_reviews();
    assert_eq!(reviews.len(), 1, "only the earlier attempt's: {reviews:#?}");
    let jobs = env.server.api("/api/v1/outbox").await;
    let protection: Vec<&Value> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["topic"] == "protection")
        .collect();
    assert_eq!(protection.len(), 1, "{jobs:#}");
    assert_eq!(protection[0]["state"], "done", "{jobs:#}");
}

/// A freeze holds the deployment as it holds Flagger: the approval of an
/// open gate waits until the freeze is lifted.
async fn a_freeze_holds_the_approval_until_it_is_lifted(backend: Backend) {
    let env = env(backend).await;
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    let r = client()
        .post(env.server.at("/api/v1/freezes"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"scope": "acme/shop", "reason": "end of year"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());
    env.requested(7).await;
    env.clock.advance(HOUR);
    env.server.drained().await;
    assert!(
        env.github.protection_reviews().is_empty(),
        "approved through a freeze"
    );

    let r = client()
        .delete(env.server.at("/api/v1/freezes?scope=acme/shop"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    env.clock.advance(HOUR);
    let reviews = env.reviews(1).await;
    assert_eq!(reviews[0].run_id, 7);
    assert_eq!(reviews[0].body["state"], "approved");
}

/// A gate held while its approval's callback is being tried again: the
/// approval is not sent, and the deployment waits for the next opening.
async fn a_hold_after_the_approval_was_queued_stops_it(backend: Backend) {
    let env = env(backend).await;
    env.requested(7).await;
    env.github
        .fail_protection_reviews([Failure::server_error()]);
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    env.comment_by(42, "kobzol", 502, "alice", "/hold stop the deploy")
        .await;
    env.clock.advance(HOUR);
    env.server.drained().await;
    assert!(
        env.github.protection_reviews().is_empty(),
        "approved while held"
    );

    env.comment_by(42, "kobzol", 503, "alice", "/unhold").await;
    env.comment_by(42, "kobzol", 504, "alice", "/promote").await;
    let reviews = env.reviews(1).await;
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(reviews[0].body["state"], "approved");
}

/// The gate's approvals are of the head gatebot knows: a deployment of a
/// commit pushed since (its push not delivered yet) is not approved by them;
/// the push closes the gate, and the next approval lets it go.
async fn a_deployment_of_a_commit_pushed_since_waits_for_its_push(backend: Backend) {
    let env = env(backend).await;
    let request = env.request(7, None);
    let deployed = request["deployment"]["sha"].as_str().unwrap().to_string();
    env.pushed(42, "85d557f0c3b1e2a4d6f8091a2b3c4d5e6f708192")
        .await;
    env.comment_by(42, "kobzol", 501, "alice", "/promote").await;
    let (status, text) = env.deliver(&request).await;
    assert_eq!(status, 202, "{text}");
    env.server.drained().await;
    env.clock.advance(HOUR);
    env.server.drained().await;
    assert!(
        env.github.protection_reviews().is_empty(),
        "approved by an approval of the commit before"
    );

    env.pushed(42, &deployed).await;
    env.clock.advance(HOUR);
    env.server.drained().await;
    assert!(env.github.protection_reviews().is_empty());
    env.comment_by(42, "kobzol", 502, "alice", "/promote").await;
    let reviews = env.reviews(1).await;
    assert_eq!(reviews.len(), 1, "{reviews:#?}");
    assert_eq!(reviews[0].body["state"], "approved");
}

/// `check-config` shows each protected environment's gate, and refuses a
/// gate people do not decide.
#[test]
fn check_config_shows_the_protection_and_refuses_a_wrong_gate() {
    let run = |policy: &str| check_config_of_policy(env!("CARGO_BIN_EXE_gatebot"), policy);
    let (ok, on) = run(POLICY);
    assert!(ok, "{on}");
    let line = "protection:      a deployment to `production` waits for the PR's promote gate ([[github.protection]])";
    assert!(on.contains(line), "{on}");
    let wrong = "[[github.protection]]\nenvironment = \"production\"\ngate = \"rollback\"\n";
    let (ok, text) = run(wrong);
    assert!(!ok, "{text}");
    assert!(text.contains("start, promote or traffic"), "{text}");
}
