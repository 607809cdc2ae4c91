//! Check runs with buttons (issue 27, point 1): a GitHub App's run per waiting
//! gate of a PR on its head commit, clicks applied as a comment by the same
//! person would be, over real HTTP, the fake GitHub (which keeps the runs) and
//! the Flagger simulator, on both stores.

use std::time::Duration;

use gatebot_testkit::fake_github::{Failure, FakeCheckRun, FakeGithub};
use gatebot_testkit::flagger::{waiting_at_promote, HookType, Phase};
use gatebot_testkit::github_payloads::{
    check_run_click, deliver_signed, fixture, github_time, now_ms,
};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};

const SECRET: &str = "checks-secret";
const TEST_APP_KEY: &str = include_str!("fixtures/test-app-key.pem");
const HEAD: &str = "85d557f0c9a4e1d2b3c4d5e6f708192a3b4c5d6e";
const PUSHED: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";

struct Env {
    server: TestServer,
    github: FakeGithub,
    _db: TestDb,
}

async fn setup(backend: Backend) -> Env {
    setup_with(backend, None).await
}

/// With the policy file `policy`, when given.
async fn setup_with(backend: Backend, policy: Option<&str>) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    github.set_permission("rita", "read");
    github.set_head(42, HEAD);
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.app_id = Some(1);
    config.github.app_private_key = Some(TEST_APP_KEY.to_string().into());
    config.github.api_url = github.url.clone();
    config.github.check_runs = true;
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

async fn deliver_as(
    server: &TestServer,
    event: &str,
    guid: &str,
    payload: &Value,
) -> (u16, String) {
    deliver_signed(&server.url, SECRET, event, guid, payload).await
}

async fn deliver(server: &TestServer, event: &str, payload: &Value) -> (u16, String) {
    deliver_as(server, event, &uuid::Uuid::new_v4().to_string(), payload).await
}

/// The runs named `gatebot / promote`, oldest first.
fn promote_runs(github: &FakeGithub) -> Vec<FakeCheckRun> {
    github
        .check_runs()
        .into_iter()
        .filter(|r| r.name == "gatebot / promote")
        .collect()
}

fn only_run(github: &FakeGithub) -> FakeCheckRun {
    let runs = promote_runs(github);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    runs.into_iter().next().unwrap()
}

async fn audit(server: &TestServer) -> Vec<Value> {
    let v = server.api(&format!("/api/v1/audit?gate={PROMOTE}")).await;
    v["audit"].as_array().cloned().unwrap_or_default()
}

fn count(entries: &[Value], action: &str) -> usize {
    entries.iter().filter(|e| e["action"] == action).count()
}

/// What a person sees of a run, with the times that differ from run to run filtered.
fn snap(name: &str, run: &FakeCheckRun) {
    let shown = json!({
        "name": run.name, "status": run.status, "conclusion": run.conclusion,
        "title": run.output["title"], "summary": run.output["summary"], "actions": run.actions,
    });
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    settings.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[time]");
    settings.bind(|| insta::assert_json_snapshot!(name, shown));
}

gatebot_testkit::on_both_stores!(
    a_click_on_promote_opens_the_gate_and_flagger_promotes,
    a_readers_click_is_refused_and_the_run_says_why,
    a_push_supersedes_the_run_and_a_new_one_starts,
    a_rate_limited_creation_waits_and_creates_one_run,
    roll_back_rolls_the_canary_back_and_the_run_fails,
    the_authors_click_is_refused_under_four_eyes,
    a_click_on_a_pr_closed_without_merging_is_refused,
    a_late_click_does_not_reopen_a_closed_gate,
    a_click_is_held_to_the_reasons_and_the_teams_of_the_policy,
);

async fn a_click_on_promote_opens_the_gate_and_flagger_promotes(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(server).await;
    let run = only_run(github);
    assert_eq!(run.head_sha, HEAD);
    assert_eq!(run.external_id, PROMOTE);
    assert_eq!(run.status, "in_progress");
    if backend == Backend::Sqlite {
        snap("check_run_waiting", &run);
    }

    let click = check_run_click(&run.to_json(), "open", "alice");
    let (status, text) = deliver(server, "check_run", &click).await;
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
    server.drained().await;
    let run = only_run(github);
    assert_eq!(
        (run.status.as_str(), run.conclusion.as_deref()),
        ("completed", Some("success")),
        "{run:#?}"
    );
    let summary = run.output["summary"].as_str().unwrap();
    assert!(summary.contains("alice"), "who did it: {summary}");
    if backend == Backend::Sqlite {
        snap("check_run_promoted", &run);
    }

    // The same click again, under a new X-GitHub-Delivery: nothing more.
    let (status, text) = deliver(server, "check_run", &click).await;
    assert_eq!((status, text.trim()), (200, "duplicate delivery"));
    server.drained().await;
    assert_eq!(count(&audit(server).await, "open"), 1);
}

async fn a_readers_click_is_refused_and_the_run_says_why(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    let run = only_run(github);
    let (status, text) = deliver(
        server,
        "check_run",
        &check_run_click(&run.to_json(), "open", "rita"),
    )
    .await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    let gate = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gate.status(), 403, "still closed");
    let run = only_run(github);
    assert_eq!(run.status, "in_progress");
    let summary = run.output["summary"].as_str().unwrap();
    assert!(
        summary.contains("needs write permission on acme/shop and you have read"),
        "{summary}"
    );
    assert!(summary.contains("rita"), "{summary}");
    let entries = audit(server).await;
    assert_eq!(
        (count(&entries, "open"), count(&entries, "refuse")),
        (0, 1),
        "{entries:?}"
    );
}

async fn a_push_supersedes_the_run_and_a_new_one_starts(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    let old = only_run(github);

    let mut push = fixture("pull_request.synchronize.json");
    push["repository"]["full_name"] = json!("acme/shop");
    push["number"] = json!(42);
    push["pull_request"]["number"] = json!(42);
    push["pull_request"]["updated_at"] = json!(github_time(now_ms()));
    push["after"] = json!(PUSHED);
    let (status, text) = deliver(server, "pull_request", &push).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;

    let runs = promote_runs(github);
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(runs[0].id, old.id);
    assert_eq!(
        (runs[0].status.as_str(), runs[0].conclusion.as_deref()),
        ("completed", Some("neutral"))
    );
    assert!(runs[0].actions.as_array().is_some_and(Vec::is_empty));
    assert_eq!(
        (runs[1].head_sha.as_str(), runs[1].status.as_str()),
        (PUSHED, "in_progress")
    );

    // A click on the superseded run opens nothing.
    let click = check_run_click(&runs[0].to_json(), "open", "alice");
    deliver(server, "check_run", &click).await;
    server.drained().await;
    let gate = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gate.status(), 403);
    let entries = audit(server).await;
    assert_eq!(count(&entries, "open"), 0, "{entries:?}");
}

async fn a_rate_limited_creation_waits_and_creates_one_run(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    github.fail_check_runs([Failure::retry_after(1)]);
    let _sim = waiting_at_promote(server).await;
    eventually(
        "the run created after Retry-After",
        Duration::from_secs(15),
        || async { !promote_runs(github).is_empty() },
    )
    .await;
    server.drained().await;
    assert_eq!(only_run(github).status, "in_progress");
    let limited = r#"gatebot_outbound_requests_total{service="github",endpoint="create_check_run",result="rate_limited"}"#;
    assert_eq!(server.metric(limited).await, 1.0);
}

async fn roll_back_rolls_the_canary_back_and_the_run_fails(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = waiting_at_promote(server).await;
    let run = only_run(github);
    let (status, text) = deliver(
        server,
        "check_run",
        &check_run_click(&run.to_json(), "reject", "alice"),
    )
    .await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::Failed, 10).await,
        "Flagger rolled back"
    );
    assert_eq!(sim.promotions(), 0);
    server.drained().await;
    let run = only_run(github);
    assert_eq!(
        (run.status.as_str(), run.conclusion.as_deref()),
        ("completed", Some("failure")),
        "{run:#?}"
    );
    assert!(
        run.output["title"]
            .as_str()
            .unwrap()
            .starts_with("Rolled back"),
        "{run:#?}"
    );
}

async fn the_authors_click_is_refused_under_four_eyes(backend: Backend) {
    let env = setup_with(backend, Some("[github]\nforbid_self_approval = true\n")).await;
    let (server, github) = (&env.server, &env.github);
    // The fake's PR author; an admin, so only four eyes stops them.
    github.set_permission("kobzol", "admin");
    let _sim = waiting_at_promote(server).await;
    let run = only_run(github);
    deliver(
        server,
        "check_run",
        &check_run_click(&run.to_json(), "open", "kobzol"),
    )
    .await;
    server.drained().await;
    let gate = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gate.status(), 403, "still closed");
    let summary = only_run(github).output["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        summary.contains("you opened this pull request"),
        "{summary}"
    );
}

async fn a_click_on_a_pr_closed_without_merging_is_refused(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    github.set_merged(42, false);
    let run = only_run(github);
    deliver(
        server,
        "check_run",
        &check_run_click(&run.to_json(), "open", "alice"),
    )
    .await;
    server.drained().await;
    let gate = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gate.status(), 403, "still closed");
    let summary = only_run(github).output["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(summary.contains("closed without merging"), "{summary}");
}

/// A click on what the run showed before an operator closed the gate,
/// delivered after the close, is refused as a comment written before the
/// close is: the gate stays closed and the run says why. A click on the run
/// as it was edited after the close still opens it.
async fn a_late_click_does_not_reopen_a_closed_gate(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let _sim = waiting_at_promote(server).await;
    let before = only_run(github);
    let late = check_run_click(&before.to_json(), "open", "alice");

    server.open(PROMOTE).await;
    server.close(PROMOTE).await;
    server.drained().await;
    let closed = only_run(github);
    assert_ne!(
        closed.output, before.output,
        "the run was edited: {closed:#?}"
    );

    let (status, text) = deliver(server, "check_run", &late).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    let gate = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gate.status(), 403, "still closed");
    let entries = audit(server).await;
    assert_eq!(
        (count(&entries, "open"), count(&entries, "refuse")),
        (1, 1),
        "only the operator's open: {entries:?}"
    );
    let summary = only_run(github).output["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(summary.contains("after this was sent"), "{summary}");

    // What the run shows now was written after the close.
    let informed = check_run_click(&only_run(github).to_json(), "open", "alice");
    let (status, text) = deliver(server, "check_run", &informed).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    let gate = client()
        .get(server.at("/gates/promote/pr/42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gate.status(), 200, "opened by a click on the edited run");
}

/// The summary of the only promote run, once the queue has drained.
async fn summary(env: &Env) -> String {
    env.server.drained().await;
    only_run(&env.github).output["summary"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A button carries no words: under a `[[reasons]]` rule a click is refused
/// with where to say why; under `[[approvals]] include` the clicker's signed
/// login is asked of the team, and only a member's click fills it.
async fn a_click_is_held_to_the_reasons_and_the_teams_of_the_policy(backend: Backend) {
    let policy = "[[reasons]]\nkind = \"rollback\"\nrequired = true\n\
                  [[approvals]]\nkind = \"promote\"\nrequired = 1\ninclude = [{ team = \"acme/sre\" }]\n";
    let env = setup_with(backend, Some(policy)).await;
    env.github.set_permission("dave", "write");
    env.github.add_team_member("acme/sre", "dave");
    let mut sim = waiting_at_promote(&env.server).await;

    let run = only_run(&env.github);
    let (status, text) = deliver(
        &env.server,
        "check_run",
        &check_run_click(&run.to_json(), "reject", "alice"),
    )
    .await;
    assert_eq!(status, 202, "{text}");
    let said = summary(&env).await;
    assert!(
        said.contains("the policy asks for a reason to rollback, and a button carries no words")
            && said.contains("comment `/rollback because ‹why›` on the pull request"),
        "{said}"
    );
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion, "no rollback");

    let run = only_run(&env.github);
    let click = check_run_click(&run.to_json(), "open", "alice");
    assert_eq!(deliver(&env.server, "check_run", &click).await.0, 202);
    let said = summary(&env).await;
    assert!(said.contains("still needs someone from acme/sre"), "{said}");
    if backend == Backend::Sqlite {
        snap("check_run_still_needs", &only_run(&env.github));
    }
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion, "not by alice alone");

    let run = only_run(&env.github);
    let click = check_run_click(&run.to_json(), "open", "dave");
    assert_eq!(deliver(&env.server, "check_run", &click).await.0, 202);
    env.server.drained().await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 10).await,
        "dave is acme/sre's: {}",
        summary(&env).await
    );
}
