//! GitHub Deployments (issue 27, point 3): with [github] deployments a
//! canary revision tied to a PR gets a deployment on the PR's head commit,
//! whose statuses follow Flagger's phases, over real HTTP, the fake GitHub
//! (which keeps deployments and statuses) and the Flagger simulator, on both
//! stores. A check is unauthenticated (issue 41, point 7): a deployment is
//! made only for a revision known to be real (a person's approval was used
//! by it, or a Flagger token vouched for it), to an environment the policy
//! names, and for at most 8 canaries per PR. The Flagger here has a token
//! (as the chart's default), but where a test sends checks no Flagger sent.

use std::time::Duration;

use gatebot_testkit::fake_github::{Failure, FakeDeployment, FakeGithub};
use gatebot_testkit::flagger::{flagger_tokens, pr_hooks, with_token, FlaggerSim, Phase, Strategy};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

const HEAD: &str = "85d557f0c9a4e1d2b3c4d5e6f708192a3b4c5d6e";

struct Env {
    server: TestServer,
    github: FakeGithub,
    /// The Flagger token, when checks need one.
    token: Option<&'static str>,
    _db: TestDb,
}

/// The token of the cluster the Flagger simulator runs in.
const TOKEN: &str = "deployments-flagger-token";

/// The policy that names the environment of namespace `test`'s canaries.
const PRODUCTION: &str =
    "[[github.environments]]\nnamespace = \"test\"\nenvironment = \"production\"\n";

async fn setup(backend: Backend, on: bool) -> Env {
    setup_with(backend, on, Some(PRODUCTION)).await
}

/// Without Flagger tokens: anyone's check is taken, as without the chart.
async fn setup_open(backend: Backend) -> Env {
    setup_as(backend, true, Some(PRODUCTION), None).await
}

/// `deployments::MAX_CANARIES`: the most canaries with deployments on one PR.
const MAX_CANARIES: usize = 8;

/// A check no Flagger sent: `namespace/name` at revision `checksum`, at
/// PR 42's gate of `kind`; its status.
async fn made_up(
    server: &TestServer,
    kind: &str,
    namespace: &str,
    name: &str,
    checksum: &str,
) -> u16 {
    let body = json!({
        "name": name, "namespace": namespace, "phase": "Progressing", "checksum": checksum,
    });
    let r = client()
        .post(server.at(&format!("/gates/{kind}/pr/42")))
        .json(&body)
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

async fn setup_with(backend: Backend, on: bool, policy: Option<&str>) -> Env {
    setup_as(backend, on, policy, Some(TOKEN)).await
}

async fn setup_as(
    backend: Backend,
    on: bool,
    policy: Option<&str>,
    token: Option<&'static str>,
) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_head(42, HEAD);
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.public_url = Some("https://gatebot.example.com".into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some("deployments-secret".to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    config.github.deployments = on;
    if let Some(token) = token {
        config.flagger_tokens = flagger_tokens(&[("prod", token)]).into();
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
        token,
        _db: db,
    }
}

/// PR 42's hooks, with the token when the server takes checks only with one.
fn hooks(env: &Env) -> Vec<gatebot_testkit::flagger::Hook> {
    let hooks = pr_hooks(&env.server.url, 42);
    match env.token {
        Some(token) => with_token(hooks, token),
        None => hooks,
    }
}

/// PR 42's canary, started by the admin, waiting at the promote gate.
async fn waiting_at_promote(env: &Env) -> FlaggerSim {
    let server = &env.server;
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        hooks(env),
    );
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    sim.tick().await;
    server.drained().await;
    server.open("/gates/start/pr/42").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    server.drained().await;
    sim
}

/// What a person sees of the deployment of the revision that ran (rev-b):
/// its environment, revision and statuses. Whether rev-a got one too depends
/// on which revision Flagger's start gate asked with last when the approval
/// was used; if it did, it must have been superseded.
fn shown(deployments: &[FakeDeployment]) -> Value {
    for older in deployments
        .iter()
        .filter(|d| d.payload["checksum"] != "rev-b")
    {
        assert_eq!(
            states(older).last().map(String::as_str),
            Some("inactive"),
            "an older revision's deployment is superseded: {older:#?}"
        );
    }
    let list: Vec<Value> = deployments
        .iter()
        .filter(|d| d.payload["checksum"] == "rev-b")
        .map(|d| {
            let statuses: Vec<Value> = d
                .statuses
                .iter()
                .map(|s| {
                    json!({"state": s["state"], "description": s["description"], "log_url": s["log_url"]})
                })
                .collect();
            json!({
                "sha": d.sha, "environment": d.environment, "payload": d.payload,
                "statuses": statuses,
            })
        })
        .collect();
    json!(list)
}

fn states(d: &FakeDeployment) -> Vec<String> {
    d.statuses
        .iter()
        .map(|s| s["state"].as_str().unwrap_or("").to_string())
        .collect()
}

fn snap(name: &str, value: &Value) {
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_json_snapshot!(name, value));
}

gatebot_testkit::on_both_stores!(
    statuses_follow_a_canary_to_its_promotion,
    statuses_follow_a_canary_to_its_rollback,
    with_the_setting_off_no_deployment_is_made,
    a_rate_limited_creation_is_counted_and_one_deployment_each_is_made,
    a_creation_whose_answer_was_lost_is_found_not_made_again,
    a_check_alone_makes_no_deployment_in_any_environment,
    a_made_up_revision_of_an_approved_canary_makes_no_deployment,
    a_pull_requests_deployments_name_a_bounded_number_of_canaries,
);

async fn statuses_follow_a_canary_to_its_promotion(backend: Backend) {
    let env = setup_with(backend, true, Some(PRODUCTION)).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(&env).await;
    let latest = github.deployments().last().cloned().unwrap();
    assert_eq!(latest.sha, HEAD);
    assert_eq!(latest.environment, "production", "as the policy names it");
    assert_eq!(latest.payload["checksum"], "rev-b");
    assert_eq!(
        states(&latest).last().map(String::as_str),
        Some("in_progress")
    );

    let opened = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42", "reason": "the error budget is fine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status().as_u16(), 200);
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
    server.drained().await;
    let all = github.deployments();
    let latest = all.last().unwrap();
    assert_eq!(states(latest).last().map(String::as_str), Some("success"));
    // The status says who approved and why.
    assert_eq!(
        latest.statuses.last().unwrap()["description"],
        "promoted; approved by admin via api: the error budget is fine"
    );
    for older in &all[..all.len() - 1] {
        let last = states(older).last().cloned();
        assert!(
            matches!(last.as_deref(), Some("inactive" | "success" | "failure")),
            "{older:#?}"
        );
    }
    if backend == Backend::Sqlite {
        snap("deployments_promoted", &shown(&all));
    }
}

async fn statuses_follow_a_canary_to_its_rollback(backend: Backend) {
    let env = setup(backend, true).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(&env).await;
    server.open("/gates/rollback/pr/42").await;
    assert!(sim.run_until(|s| s.phase() == Phase::Failed, 10).await);
    server.drained().await;
    let all = github.deployments();
    let latest = all.last().unwrap();
    assert_eq!(latest.environment, "production", "as the policy names it");
    assert_eq!(latest.payload["checksum"], "rev-b");
    assert_eq!(states(latest).last().map(String::as_str), Some("failure"));
    if backend == Backend::Sqlite {
        snap("deployments_rolled_back", &shown(&all));
    }
}

async fn with_the_setting_off_no_deployment_is_made(backend: Backend) {
    let env = setup(backend, false).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(&env).await;
    server.open("/gates/promote/pr/42").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
    server.drained().await;
    assert!(github.deployments().is_empty());
}

/// The first creation is refused with Retry-After; it is made once after
/// it, and no other call goes out before (the status jobs that arrive
/// meanwhile wait too).
async fn a_rate_limited_creation_is_counted_and_one_deployment_each_is_made(backend: Backend) {
    let env = setup(backend, true).await;
    let (server, github) = (&env.server, &env.github);
    github.fail_deployments([Failure::retry_after(1)]);
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        hooks(&env),
    );
    let made = |github: &FakeGithub| -> Vec<Value> {
        let all = github.deployments();
        all.iter().map(|d| d.payload["checksum"].clone()).collect()
    };
    // Flagger's start gate first sees the revision it last applied (rev-a);
    // rev-b asks the promote gate once the start gate is open, and its
    // token vouches for it.
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    sim.tick().await;
    server.open("/gates/start/pr/42").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    // The worker waits out Retry-After before trying again: no drain to await.
    eventually("rev-b's deployment", Duration::from_secs(15), || async {
        made(github).contains(&json!("rev-b"))
    })
    .await;
    server.drained().await;
    let rev_b = |github: &FakeGithub| made(github).iter().filter(|c| **c == "rev-b").count();
    assert_eq!(rev_b(github), 1, "made once, after Retry-After");
    let requests = github.requests();
    let limited = requests.iter().position(|r| r.status == 403).unwrap();
    let next = &requests[limited + 1];
    assert!(
        next.at.duration_since(requests[limited].at) >= Duration::from_millis(950),
        "no call while GitHub asked for quiet: {} {} came {:?} after",
        next.method,
        next.path,
        next.at.duration_since(requests[limited].at)
    );
    sim.tick().await;
    server.drained().await;
    assert_eq!(rev_b(github), 1, "one");
    let limited = r#"gatebot_outbound_requests_total{service="github",endpoint="create_deployment",result="rate_limited"}"#;
    assert_eq!(server.metric(limited).await, 1.0);
}

/// GitHub made the deployment but its answer never came back (a 502 after
/// the write, as a timeout or a crash before the id is stored leaves it):
/// the retry finds it by its payload and posts the statuses there.
async fn a_creation_whose_answer_was_lost_is_found_not_made_again(backend: Backend) {
    let env = setup(backend, true).await;
    let (server, github) = (&env.server, &env.github);
    github.lose_deployment_answers([Failure::server_error()]);
    let _sim = waiting_at_promote(&env).await;
    eventually(
        "rev-b's deployment with a status",
        Duration::from_secs(15),
        || async {
            let all = github.deployments();
            all.iter()
                .any(|d| d.payload["checksum"] == "rev-b" && !d.statuses.is_empty())
        },
    )
    .await;
    server.drained().await;
    let all = github.deployments();
    let made = all
        .iter()
        .filter(|d| d.payload["checksum"] == "rev-b")
        .count();
    assert_eq!(made, 1, "rev-b's made once: {all:#?}");
}

/// Checks from canaries no Flagger runs, in namespaces such as `production`,
/// make no deployment: before an approval none is made at all, and after
/// one only a canary the policy names gets one. The others are counted once.
async fn a_check_alone_makes_no_deployment_in_any_environment(backend: Backend) {
    let env = setup_open(backend).await;
    let (server, github) = (&env.server, &env.github);
    let mut namespaces = vec!["production".to_string(), "prod".into()];
    namespaces.extend((0..10).map(|n| format!("env-{n}")));
    for kind in ["start", "promote"] {
        for ns in &namespaces {
            assert_eq!(made_up(server, kind, ns, "app", "rev-x").await, 403);
        }
        // Even in the namespace the policy names.
        assert_eq!(made_up(server, kind, "test", "fake", "rev-x").await, 403);
    }
    server.drained().await;
    assert!(
        github.deployments().is_empty(),
        "{:#?}",
        github.deployments()
    );

    // A person approves the start gate; the real canary uses it.
    let mut sim = waiting_at_promote(&env).await;
    // Made-up canaries use the open start gate too, twice each; they are
    // in no namespace the policy names.
    for _ in 0..2 {
        for ns in &namespaces {
            assert_eq!(made_up(server, "start", ns, "app", "rev-y").await, 200);
        }
    }
    // The PR's next news (the real canary promoted) runs the job.
    server.open("/gates/promote/pr/42").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
    server.drained().await;
    let all = github.deployments();
    // One canary's (rev-a's too, if the start gate asked with it last).
    let mut made: Vec<(&str, &Value)> = all
        .iter()
        .map(|d| (d.environment.as_str(), &d.payload["canary"]))
        .collect();
    made.dedup();
    assert_eq!(made, [("production", &json!("test/podinfo"))], "{all:#?}");
    let told =
        r#"gatebot_notifications_dropped_total{sink="github",reason="deployment_no_environment"}"#;
    assert_eq!(
        server.metric(told).await,
        namespaces.len() as f64,
        "once each"
    );
}

/// Canaries of a namespace the policy names, each using the open start
/// gate: the PR's deployments name at most [`MAX_CANARIES`] of them.
async fn a_pull_requests_deployments_name_a_bounded_number_of_canaries(backend: Backend) {
    let env = setup_open(backend).await;
    let (server, github) = (&env.server, &env.github);
    server.open("/gates/start/pr/42").await;
    let extra = 3;
    for n in 0..MAX_CANARIES + extra {
        let name = format!("app-{n}");
        assert_eq!(made_up(server, "start", "test", &name, "rev-1").await, 200);
        // Its wait at the promote gate is the news that runs the job.
        assert_eq!(
            made_up(server, "promote", "test", &name, "rev-1").await,
            403
        );
        server.drained().await;
    }
    let all = github.deployments();
    assert_eq!(all.len(), MAX_CANARIES, "{all:#?}");
    let limit = r#"gatebot_notifications_dropped_total{sink="github",reason="deployment_limit"}"#;
    assert_eq!(server.metric(limit).await, extra as f64);
}

/// Made-up checksums of a real canary that a person approved (issue 41,
/// point 7: each made a production deployment once the canary was approved)
/// make none, and the real revision's deployment is not superseded.
async fn a_made_up_revision_of_an_approved_canary_makes_no_deployment(backend: Backend) {
    let env = setup_open(backend).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(&env).await;
    server.open("/gates/promote/pr/42").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);
    server.drained().await;
    let before: Vec<(Value, Vec<String>)> = github
        .deployments()
        .iter()
        .map(|d| (d.payload["checksum"].clone(), states(d)))
        .collect();
    assert!(
        before
            .iter()
            .any(|(c, s)| *c == "rev-b" && s.last().map(String::as_str) == Some("success")),
        "{before:?}"
    );
    for n in 0..20 {
        for kind in ["start", "promote", "traffic"] {
            made_up(server, kind, "test", "podinfo", &format!("rev-x{n}")).await;
        }
    }
    server.drained().await;
    let after: Vec<(Value, Vec<String>)> = github
        .deployments()
        .iter()
        .map(|d| (d.payload["checksum"].clone(), states(d)))
        .collect();
    assert_eq!(after, before, "made-up revisions changed the deployments");
}
