//! GitHub end to end: signed deliveries built from real payloads, gatebot over
//! real HTTP, a fake GitHub API, and the Flagger simulator.

use std::time::Duration;

use gatebot::testing::github::verify::sign;
use gatebot_testkit::fake_github::{Failure, FakeGithub};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::github_payloads::{comment, fixture, github_time, now_ms};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use gatebot_testkit::served::ChildGuard;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);
const SECRET: &str = "test-webhook-secret";
/// The PR author in the fixture.
const AUTHOR: &str = "Kobzol";

struct Env {
    server: TestServer,
    github: FakeGithub,
    db: TestDb,
}

fn fast_worker() -> gatebot::Options {
    gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn setup_with(backend: Backend, tweak: impl FnOnce(&mut gatebot::Config, &TestDb)) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    github.set_permission("rita", "read");
    github.set_permission(AUTHOR, "admin");
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(format!("old-secret,{SECRET}").into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    tweak(&mut config, &db);
    let server = TestServer::start(config, fast_worker()).await;
    Env { server, github, db }
}

async fn setup(backend: Backend) -> Env {
    setup_with(backend, |_, _| {}).await
}

fn pull_request_event(name: &str, pr: u64) -> Value {
    let mut p = fixture(name);
    p["repository"]["full_name"] = json!("acme/shop");
    p["number"] = json!(pr);
    p["pull_request"]["number"] = json!(pr);
    // GitHub stamps the event when it happens.
    p["pull_request"]["updated_at"] = json!(github_time(now_ms()));
    p
}

fn new_delivery() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn post_raw(
    server: &TestServer,
    event: &str,
    delivery: &str,
    body: &[u8],
    signature: Option<String>,
) -> (u16, String) {
    let mut req = client()
        .post(server.at("/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .body(body.to_vec());
    if let Some(sig) = signature {
        req = req.header("x-hub-signature-256", sig);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn deliver_as(
    server: &TestServer,
    event: &str,
    delivery: &str,
    payload: &Value,
) -> (u16, String) {
    let body = serde_json::to_vec(payload).unwrap();
    post_raw(server, event, delivery, &body, Some(sign(SECRET, &body))).await
}

async fn deliver(server: &TestServer, event: &str, payload: &Value) -> (u16, String) {
    deliver_as(server, event, &new_delivery(), payload).await
}

/// Whether Flagger would be let through right now (a peek, no canary).
async fn gate_open(server: &TestServer, gate: &str) -> bool {
    client().get(server.at(gate)).send().await.unwrap().status() == 200
}

async fn audit(server: &TestServer, gate: &str) -> Vec<Value> {
    let v = server.api(&format!("/api/v1/audit?gate={gate}")).await;
    v["audit"].as_array().cloned().unwrap_or_default()
}

fn actions(entries: &[Value], action: &str) -> usize {
    entries.iter().filter(|e| e["action"] == action).count()
}

/// A canary of PR `pr` with a new revision applied, before its first gate.
async fn canary(server: &TestServer, pr: u64) -> FlaggerSim {
    let mut sim = FlaggerSim::new(
        "podinfo",
        &format!("pr{pr}"),
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        pr_hooks(&server.url, pr),
    );
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    sim
}

gatebot_testkit::on_both_stores!(
    a_reply_is_stored_as_what_was_decided_and_worded_when_sent,
    a_flood_of_lines_is_answered_briefly_and_the_real_refusal_is_kept,
    a_permission_github_will_not_tell_refuses_and_says_so,
    writer_promotes_and_flagger_promotes,
    refusals_change_nothing_and_say_why,
    redelivery_applies_once,
    push_and_close_close_the_gates,
    github_failures_delay_replies_but_send_them_once,
    one_status_comment_per_pr_edited_in_place,
    edited_comments_run_only_new_commands,
    help_status_and_unknown_commands_are_answered,
    closed_and_merged_pull_requests,
);

async fn writer_promotes_and_flagger_promotes(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    server.open("/gates/start/pr/42").await;
    let mut sim = canary(server, 42).await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );

    let (status, text) = deliver(
        server,
        "issue_comment",
        &comment(42, 1001, "alice", "/promote looks good"),
    )
    .await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/42").await,
        "drained, yet still waiting for the promote gate to open"
    );
    assert!(
        sim.run_until(|s| s.promotions() == 1, 5).await,
        "Flagger promoted"
    );
    let last = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(last.starts_with("approved by alice via github"), "{last}");

    server.drained().await;
    assert!(
        github.reactions_on(1001) == vec!["eyes".to_string(), "rocket".to_string()],
        "drained, yet still waiting for 👀 and 🚀 on the comment"
    );
    let entries = audit(server, "/gates/promote/acme/shop/pr/42").await;
    let open = entries
        .iter()
        .find(|e| e["action"] == "open")
        .expect("an open entry");
    assert_eq!(open["actor"]["name"], "alice");
    assert_eq!(open["actor"]["source"], "github");
    assert_eq!(open["reason"], "looks good");
    assert!(open["delivery"].is_string(), "{open}");
    assert!(
        github.replies(42).is_empty(),
        "an applied command needs no reply"
    );
    let auth = &github.requests_to("/reactions")[0].authorization;
    assert_eq!(auth.as_deref(), Some("Bearer ghp_test"));
}

async fn refusals_change_nothing_and_say_why(backend: Backend) {
    let env = setup_with(backend, |config, db| {
        let path = db.dir.path().join("policy.toml");
        std::fs::write(&path, "[github]\nforbid_self_approval = true\n").unwrap();
        config.policy = Some(path);
    })
    .await;
    let (server, github) = (&env.server, &env.github);
    let gate = "/gates/promote/pr/43";

    // A reader.
    deliver(
        server,
        "issue_comment",
        &comment(43, 2001, "rita", "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        github.replies(43).len() == 1,
        "drained, yet still waiting for the reply to the reader"
    );
    let reply = &github.replies(43)[0].body;
    assert!(reply.contains("@rita"), "{reply}");
    assert!(
        reply.contains("needs write permission on acme/shop and you have read"),
        "{reply}"
    );
    server.drained().await;
    assert!(
        github.reactions_on(2001) == vec!["eyes".to_string(), "confused".to_string()],
        "drained, yet still waiting for 👀 and 😕"
    );

    // The PR's author under four eyes (an admin, so only the policy stops them).
    deliver(
        server,
        "issue_comment",
        &comment(43, 2002, AUTHOR, "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        github.replies(43).len() == 2,
        "drained, yet still waiting for the reply to the author"
    );
    let reply = &github.replies(43)[1].body;
    assert!(reply.contains("you opened this pull request"), "{reply}");
    assert!(reply.contains("four eyes"), "{reply}");

    // A bot.
    let mut bot = comment(43, 2003, "renovate[bot]", "/promote");
    bot["comment"]["user"]["type"] = json!("Bot");
    deliver(server, "issue_comment", &bot).await;
    server.drained().await;
    assert!(
        github.replies(43).len() == 3,
        "drained, yet still waiting for the reply to the bot"
    );
    assert!(github.replies(43)[2]
        .body
        .contains("bots are never run as commands"));

    // Quoted and fenced commands, by a writer.
    for (id, body) in [
        (2004, "> /promote\n\nnot yet"),
        (2005, "```\n/promote\n```"),
    ] {
        deliver(server, "issue_comment", &comment(43, id, "alice", body)).await;
    }
    server.drained().await;
    assert!(
        github.replies(43).len() == 5,
        "drained, yet still waiting for the replies to the quotes"
    );
    for reply in &github.replies(43)[3..] {
        assert!(
            reply.body.contains("inside quotes or code are not run"),
            "{}",
            reply.body
        );
    }

    assert!(!gate_open(server, gate).await, "nothing opened");
    let entries = audit(server, "/gates/promote/acme/shop/pr/43").await;
    assert_eq!(actions(&entries, "open"), 0, "{entries:?}");
    assert_eq!(
        actions(&entries, "refuse"),
        2,
        "reader and author refusals are audited: {entries:?}"
    );
    assert!(github.reactions_on(2003).is_empty() && github.reactions_on(2004).is_empty());
}

async fn redelivery_applies_once(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let delivery = new_delivery();
    let payload = comment(44, 3001, "alice", "/promote");
    assert_eq!(
        deliver_as(server, "issue_comment", &delivery, &payload)
            .await
            .0,
        202
    );
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/44").await,
        "drained, yet still waiting for the gate to open"
    );
    server.drained().await;
    assert!(
        github.reactions_on(3001).len() == 2,
        "drained, yet still waiting for 🚀"
    );

    // Someone closes it; GitHub redelivers the old comment.
    server.close("/gates/promote/pr/44").await;
    let (status, text) = deliver_as(server, "issue_comment", &delivery, &payload).await;
    assert_eq!((status, text.trim()), (200, "duplicate delivery"));
    let entries = audit(server, "/gates/promote/acme/shop/pr/44").await;
    assert_eq!(actions(&entries, "open"), 1, "{entries:?}");
    assert!(
        !gate_open(server, "/gates/promote/pr/44").await,
        "the redelivery reopened nothing"
    );
    assert_eq!(github.reactions_on(3001), vec!["eyes", "rocket"]);
}

async fn push_and_close_close_the_gates(backend: Backend) {
    let env = setup(backend).await;
    let server = &env.server;
    for kind in ["start", "promote", "rollback"] {
        server.open(&format!("/gates/{kind}/pr/45")).await;
    }
    let push = pull_request_event("pull_request.synchronize.json", 45);
    assert_eq!(deliver(server, "pull_request", &push).await.0, 202);
    server.drained().await;
    assert!(
        !gate_open(server, "/gates/start/pr/45").await
            && !gate_open(server, "/gates/promote/pr/45").await,
        "drained, yet still waiting for start and promote to close"
    );
    assert!(
        gate_open(server, "/gates/rollback/pr/45").await,
        "a push does not close rollback by default"
    );
    let closed = audit(server, "/gates/promote/acme/shop/pr/45").await;
    let entry = closed.iter().find(|e| e["action"] == "close").unwrap();
    assert_eq!(entry["reason"], "new commits pushed (ec26c3e)");

    // Merged: nothing closes.
    let mut merged = pull_request_event("pull_request.closed.json", 45);
    merged["pull_request"]["merged"] = json!(true);
    assert_eq!(deliver(server, "pull_request", &merged).await.0, 202);
    // Closed without merge (later: GitHub's updated_at tells the two apart): everything closes.
    let mut closed = pull_request_event("pull_request.closed.json", 45);
    closed["pull_request"]["updated_at"] = json!(github_time(now_ms() + 1000));
    assert_eq!(deliver(server, "pull_request", &closed).await.0, 202);
    server.drained().await;
    assert!(
        !gate_open(server, "/gates/rollback/pr/45").await,
        "drained, yet still waiting for the rollback gate to close"
    );
    let entries = audit(server, "/gates/rollback/acme/shop/pr/45").await;
    assert_eq!(
        actions(&entries, "close"),
        1,
        "only the unmerged close closed it: {entries:?}"
    );

    // Events gatebot does not use are acknowledged and ignored.
    let opened = pull_request_event("pull_request.opened.json", 45);
    let (status, text) = deliver(server, "pull_request", &opened).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("ignored"), "{text}");
}

async fn github_failures_delay_replies_but_send_them_once(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    github.fail_writes([
        Failure::server_error(),
        Failure::rate_limited(1),
        Failure::retry_after(1),
    ]);
    deliver(
        server,
        "issue_comment",
        &comment(46, 4001, "alice", "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/46").await,
        "drained, yet still waiting for the gate to open"
    );
    // Polled: the retries come due on the wall clock (Retry-After), which a drain does not wait for.
    eventually("both reactions despite the failures", WAIT, || async {
        github.reactions_on(4001).len() == 2
    })
    .await;
    let mut sent = github.reactions_on(4001);
    sent.sort();
    assert_eq!(sent, vec!["eyes", "rocket"], "each sent once");
    let requests = github.requests_to("/reactions");
    let attempts: Vec<u16> = requests.iter().map(|r| r.status).collect();
    assert_eq!(&attempts[..3], &[500, 403, 403], "{attempts:?}");
    // After the rate-limited answers every job waited as GitHub said (about 1 s),
    // not the 50 ms backoff.
    let gap = requests[3].at - requests[2].at;
    assert!(gap >= Duration::from_millis(900), "retried after {gap:?}");
    assert_eq!(
        attempts.iter().filter(|s| **s == 201).count(),
        2,
        "{attempts:?}"
    );
    let jobs = server.api("/api/v1/outbox").await;
    assert!(
        jobs.to_string().contains("rate limit"),
        "the wait is recorded: {jobs}"
    );
}

async fn one_status_comment_per_pr_edited_in_place(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let mut sim = canary(server, 47).await;
    sim.tick().await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Waiting);
    server.drained().await;
    assert!(
        github.status_comments(47).len() == 1,
        "drained, yet still waiting for the status comment"
    );
    let first = github.status_comments(47)[0].clone();
    assert!(
        first.body.contains("Flagger gates for acme/shop#47"),
        "{}",
        first.body
    );
    assert!(first.body.contains("comment `/start`"), "{}", first.body);

    deliver(
        server,
        "issue_comment",
        &comment(47, 5001, "alice", "/start"),
    )
    .await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/start/pr/47").await,
        "drained, yet still waiting for the start gate"
    );
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    server.drained().await;
    assert!(
        github
            .status_comments(47)
            .first()
            .is_some_and(|c| c.body.contains("comment `/promote`")),
        "drained, yet still waiting for the comment to show the promotion wait"
    );
    let comments = github.status_comments(47);
    assert_eq!(comments.len(), 1, "still one status comment");
    assert_eq!(comments[0].id, first.id);
    assert!(comments[0].edits >= 1);
    assert!(
        comments[0].body.contains("`alice` via github"),
        "{}",
        comments[0].body
    );

    // A PR where Flagger never waited gets no status comment.
    deliver(
        server,
        "issue_comment",
        &comment(48, 5002, "alice", "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        github.reactions_on(5002).len() == 2,
        "drained, yet still waiting for 🚀 on PR 48"
    );
    server.drained().await;
    assert!(
        server
            .api("/api/v1/outbox")
            .await
            .to_string()
            .matches("\"pending\"")
            .count()
            == 0,
        "drained, yet still waiting for the outbox to drain"
    );
    assert!(
        github.comments_on(48).is_empty(),
        "{:?}",
        github.comments_on(48)
    );
}

async fn edited_comments_run_only_new_commands(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    deliver(
        server,
        "issue_comment",
        &comment(49, 6001, "alice", "/start"),
    )
    .await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/start/pr/49").await,
        "drained, yet still waiting for start"
    );
    server.close("/gates/start/pr/49").await;

    let mut edited = comment(49, 6001, "alice", "/start\n/promote");
    edited["action"] = json!("edited");
    edited["changes"] = json!({"body": {"from": "/start"}});
    assert_eq!(deliver(server, "issue_comment", &edited).await.0, 202);
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/49").await,
        "drained, yet still waiting for promote"
    );
    assert!(
        !gate_open(server, "/gates/start/pr/49").await,
        "/start was in the old body"
    );

    // Another person's edit of alice's comment runs nothing as alice, and
    // is told why (anyone with write access may edit another's comment).
    server.close("/gates/promote/pr/49").await;
    let mut by_bob = comment(49, 6001, "alice", "/start\n/promote\n/promote because now");
    by_bob["action"] = json!("edited");
    by_bob["changes"] = json!({"body": {"from": "/start\n/promote"}});
    by_bob["sender"]["login"] = json!("bob");
    assert_eq!(deliver(server, "issue_comment", &by_bob).await.0, 202);
    server.drained().await;
    assert!(!gate_open(server, "/gates/promote/pr/49").await);
    let told = github
        .comments_on(49)
        .iter()
        .map(|c| c.body.clone())
        .collect::<Vec<_>>();
    assert!(
        told.iter()
            .any(|b| b.contains("commands added to another person's comment are not run")),
        "{told:?}"
    );

    // Deleted comments and comments on plain issues are ignored.
    let mut deleted = comment(49, 6001, "alice", "/start");
    deleted["action"] = json!("deleted");
    let (status, text) = deliver(server, "issue_comment", &deleted).await;
    assert_eq!(status, 200, "{text}");
    let mut on_issue = fixture("issue_comment.created.with-installation.json");
    on_issue["comment"]["body"] = json!("/start");
    let (status, text) = deliver(server, "issue_comment", &on_issue).await;
    assert_eq!(
        (status, text.trim()),
        (200, "ignored: comment on an issue, not a pull request")
    );
    assert!(!gate_open(server, "/gates/start/pr/49").await);
    assert_eq!(
        github
            .reactions_on(6001)
            .iter()
            .filter(|r| *r == "eyes")
            .count(),
        1
    );
}

async fn help_status_and_unknown_commands_are_answered(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    server.open("/gates/rollback/pr/50").await;
    deliver(
        server,
        "issue_comment",
        &comment(50, 7001, "rita", "/help\n/status\n/frobnicate"),
    )
    .await;
    server.drained().await;
    assert!(
        github.replies(50).len() == 3,
        "drained, yet still waiting for three replies"
    );
    let bodies: Vec<String> = github.replies(50).into_iter().map(|c| c.body).collect();
    assert!(
        bodies.iter().any(|b| b.contains("| `/promote` |")),
        "{bodies:?}"
    );
    assert!(
        bodies.iter().any(|b| b.contains("`rollback` | ✅ open")),
        "{bodies:?}"
    );
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("`/frobnicate`: is not a gatebot command: comment `/help`")),
        "{bodies:?}"
    );
    server.drained().await;
    assert!(
        github.reactions_on(7001) == vec!["eyes".to_string(), "confused".to_string()],
        "drained, yet still waiting for 😕 for the unknown command"
    );
}

async fn closed_and_merged_pull_requests(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let mut closed = comment(51, 8001, "alice", "/promote");
    closed["issue"]["state"] = json!("closed");
    deliver(server, "issue_comment", &closed).await;
    server.drained().await;
    assert!(
        github.replies(51).len() == 1,
        "drained, yet still waiting for the refusal"
    );
    assert!(github.replies(51)[0]
        .body
        .contains("closed without merging"));
    assert!(!gate_open(server, "/gates/promote/pr/51").await);

    let mut merged = comment(51, 8002, "alice", "/promote");
    merged["issue"]["state"] = json!("closed");
    merged["issue"]["pull_request"]["merged_at"] = json!("2024-05-01T10:00:00Z");
    deliver(server, "issue_comment", &merged).await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/51").await,
        "drained, yet still waiting for a merged PR takes commands"
    );

    // A server that leaves merged_at out: gatebot asks for the PR.
    github.set_merged(52, true);
    let mut asked = comment(52, 8003, "alice", "/promote");
    asked["issue"]["state"] = json!("closed");
    asked["issue"]["pull_request"]
        .as_object_mut()
        .unwrap()
        .remove("merged_at");
    deliver(server, "issue_comment", &asked).await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/52").await,
        "drained, yet still waiting for the merged PR's gate"
    );
    assert_eq!(github.requests_to("/pulls/52").len(), 1);
}

#[tokio::test]
async fn signatures_are_checked_and_counted() {
    let env = setup(Backend::Sqlite).await;
    let server = &env.server;
    let body = serde_json::to_vec(&comment(60, 9001, "alice", "/promote")).unwrap();
    let forged = sign("not-the-secret", &body);
    let wrong_prefix = sign(SECRET, &body).replace("sha256=", "sha1=");
    for (sig, reason) in [
        (Some(forged), "bad_signature"),
        (None, "missing_signature"),
        (Some(wrong_prefix), "bad_signature"),
    ] {
        let (status, text) = post_raw(server, "issue_comment", &new_delivery(), &body, sig).await;
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("X-Hub-Signature-256"), "{text}");
        let _ = reason;
    }
    let metric = |reason: &str| {
        format!("gatebot_rejected_requests_total{{route=\"/webhooks/github\",reason=\"{reason}\"}}")
    };
    assert_eq!(server.metric(&metric("bad_signature")).await, 2.0);
    assert_eq!(server.metric(&metric("missing_signature")).await, 1.0);
    // A body changed after signing fails too.
    let sig = sign(SECRET, &body);
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    assert_eq!(
        post_raw(
            server,
            "issue_comment",
            &new_delivery(),
            &tampered,
            Some(sig)
        )
        .await
        .0,
        401
    );
    assert_eq!(server.metric(&metric("bad_signature")).await, 3.0);

    assert!(!gate_open(server, "/gates/promote/pr/60").await);
    assert!(server.api("/api/v1/audit").await["audit"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(env.github.requests().is_empty(), "nothing reached GitHub");
}

/// GitHub's hook form defaults to `application/x-www-form-urlencoded`: the
/// JSON comes in `payload=`, signed over the form's bytes as received
/// (issue 42, point 4: every comment got 400 `malformed JSON`).
#[tokio::test]
async fn form_encoded_deliveries_are_taken() {
    let env = setup(Backend::Sqlite).await;
    let server = &env.server;
    server.open("/gates/start/pr/61").await;
    let mut sim = canary(server, 61).await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    let post_form = |body: Vec<u8>, sig: String| async move {
        let r = client()
            .post(server.at("/webhooks/github"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-github-event", "issue_comment")
            .header("x-github-delivery", new_delivery())
            .header("x-hub-signature-256", sig)
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    let json = serde_json::to_string(&comment(61, 6101, "alice", "/promote")).unwrap();
    let form: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &json)
        .finish();
    // Signed over the JSON, not the form's bytes: refused.
    let (status, text) = post_form(form.clone().into_bytes(), sign(SECRET, json.as_bytes())).await;
    assert_eq!(status, 401, "{text}");
    // A form without `payload`.
    let other = "zen=hello".to_string();
    let (status, text) =
        post_form(other.clone().into_bytes(), sign(SECRET, other.as_bytes())).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("payload"), "{text}");
    assert!(!gate_open(server, "/gates/promote/pr/61").await);
    // A signed JSON delivery whose comment carries `&payload=<forged JSON>&`,
    // sent again as a form (the content type is not signed): refused, not
    // read as the forged event.
    let forged = serde_json::to_string(&comment(61, 6102, "alice", "/promote")).unwrap();
    let smuggled = format!(
        "&payload={}&",
        form_urlencoded::byte_serialize(forged.as_bytes()).collect::<String>()
    );
    let carrier = serde_json::to_string(&comment(61, 6103, "mallory", &smuggled)).unwrap();
    let (status, text) = post_form(
        carrier.clone().into_bytes(),
        sign(SECRET, carrier.as_bytes()),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    server.drained().await;
    assert!(!gate_open(server, "/gates/promote/pr/61").await);

    let (status, text) = post_form(form.clone().into_bytes(), sign(SECRET, form.as_bytes())).await;
    assert_eq!(status, 202, "{text}");
    server.drained().await;
    assert!(gate_open(server, "/gates/promote/pr/61").await);
    assert!(sim.run_until(|s| s.promotions() == 1, 5).await);
}

#[tokio::test]
async fn ping_and_ignored_events_are_answered() {
    let env = setup(Backend::Sqlite).await;
    let (status, text) = deliver(&env.server, "ping", &fixture("ping.json")).await;
    assert_eq!((status, text.trim()), (200, "pong"));
    let (status, text) = deliver(
        &env.server,
        "installation",
        &fixture("installation.created.json"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("ignored"), "{text}");
    let (status, _) = deliver(
        &env.server,
        "pull_request_review",
        &fixture("pull_request_review.submitted.json"),
    )
    .await;
    assert_eq!(status, 200);
    // The largest comment GitHub allows (65,536 characters), in three-byte
    // characters: about 200 KB, well inside the webhook's 1 MB limit.
    let big = comment(
        65,
        9501,
        "alice",
        &format!("/start\n\n{}", "€".repeat(65_536 - 8)),
    );
    let (status, text) = deliver(&env.server, "issue_comment", &big).await;
    assert_eq!(status, 202, "{text}");
    env.server.drained().await;
    assert!(
        gate_open(&env.server, "/gates/start/pr/65").await,
        "drained, yet still waiting for the large comment's command"
    );
}

#[tokio::test]
async fn repositories_outside_the_allow_list_are_ignored() {
    let env = setup_with(Backend::Sqlite, |config, _| {
        config.github.allowed_repositories = vec!["acme/other".parse().unwrap()];
    })
    .await;
    let (status, text) = deliver(
        &env.server,
        "issue_comment",
        &comment(61, 9101, "alice", "/promote"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("not in GATEBOT_GITHUB_ALLOWED_REPOSITORIES"),
        "{text}"
    );
    assert!(!gate_open(&env.server, "/gates/promote/pr/61").await);
}

#[tokio::test]
async fn without_github_settings_the_webhook_is_a_clear_4xx() {
    let db = TestDb::new(Backend::Sqlite).await;
    let server = TestServer::start(db.config(), Default::default()).await;
    let body = b"{}";
    let (status, text) = post_raw(&server, "ping", "d1", body, Some(sign(SECRET, body))).await;
    assert_eq!(status, 404, "{text}");
    assert!(
        text.contains("GitHub is not configured here: set GATEBOT_GITHUB_WEBHOOK_SECRET"),
        "{text}"
    );
    // The rest still works.
    let r = client()
        .get(server.at("/gates/promote/acme/shop/pr/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn team_rules_ask_github_and_cache_the_answers() {
    let env = setup_with(Backend::Sqlite, |config, db| {
        let path = db.dir.path().join("policy.toml");
        std::fs::write(
            &path,
            "[github.commands.promote]\nteams = [\"acme/release\"]\n",
        )
        .unwrap();
        config.policy = Some(path);
    })
    .await;
    let (server, github) = (&env.server, &env.github);
    github.set_permission("bob", "maintain");
    deliver(
        server,
        "issue_comment",
        &comment(62, 9201, "bob", "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        github.replies(62).len() == 1,
        "drained, yet still waiting for the refusal"
    );
    assert!(github.replies(62)[0]
        .body
        .contains("needs membership in @acme/release"));
    github.add_team_member("acme/release", "alice");
    deliver(
        server,
        "issue_comment",
        &comment(62, 9202, "alice", "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/62").await,
        "drained, yet still waiting for alice opens it"
    );
    deliver(
        server,
        "issue_comment",
        &comment(62, 9203, "alice", "/start"),
    )
    .await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/start/pr/62").await,
        "drained, yet still waiting for start"
    );
    assert_eq!(
        github.requests_to("/collaborators/alice/permission").len(),
        1,
        "the permission answer is cached"
    );
}

/// A GitHub App: installation tokens are minted per installation and used.
#[tokio::test]
async fn github_app_uses_installation_tokens() {
    let env = setup_with(Backend::Sqlite, |config, _| {
        config.github.token = None;
        config.github.app_id = Some(1);
        config.github.app_private_key = Some(TEST_APP_KEY.to_string().into());
    })
    .await;
    let (server, github) = (&env.server, &env.github);
    deliver(
        server,
        "issue_comment",
        &comment(63, 9301, "alice", "/promote"),
    )
    .await;
    server.drained().await;
    assert!(
        gate_open(server, "/gates/promote/pr/63").await,
        "drained, yet still waiting for the gate"
    );
    server.drained().await;
    assert!(
        github.reactions_on(9301).len() == 2,
        "drained, yet still waiting for 🚀"
    );
    let minted = github.requests_to("/app/installations/32739733/access_tokens");
    assert!(!minted.is_empty(), "the installation from the delivery");
    let reaction = &github.requests_to("/reactions")[0];
    assert_eq!(
        reaction.authorization.as_deref(),
        Some("Bearer ghs_installation32739733")
    );
}

/// GitHub applies a reply but answers too late (the sender gave up, as one
/// that died would): the retry finds the reply by its job marker instead of
/// posting it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_posted_by_an_attempt_that_never_heard_back_is_not_posted_again() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    github.set_permission("rita", "read");
    // Longer than the send timeout (80% of the lease).
    github.set_write_delay(Duration::from_millis(800));
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    let mut options = fast_worker();
    if let Some(w) = options.worker.as_mut() {
        w.lease = Duration::from_millis(500);
    }
    let server = TestServer::start(config, options).await;
    let (status, _) = deliver(
        &server,
        "issue_comment",
        &comment(71, 7101, "rita", "/promote"),
    )
    .await;
    assert_eq!(status, 202);
    // Polled: the retry waits for the lease to run out on the wall clock.
    eventually("the refusal to be posted", WAIT, || async {
        !github.replies(71).is_empty()
    })
    .await;
    eventually("the reply job to be settled", WAIT, || async {
        let jobs = server.api("/api/v1/outbox").await;
        jobs["jobs"].as_array().unwrap().iter().any(|j| {
            j["topic"] == "reply" && j["state"] == "done" && j["attempts"].as_i64() >= Some(2)
        })
    })
    .await;
    let replies = github.replies(71);
    assert_eq!(replies.len(), 1, "posted once: {replies:?}");
    assert!(replies[0].body.contains("read"), "{}", replies[0].body);
}

/// A comment's reply is queued as what the core decided, as data, in the
/// command's own transaction, and worded by the GitHub sender when it posts
/// it: the stored job holds no rendered text, so nothing between the
/// decision and its commit runs the channel's code.
async fn a_reply_is_stored_as_what_was_decided_and_worded_when_sent(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    deliver(
        server,
        "issue_comment",
        &comment(44, 4401, "rita", "/promote\n/promot **now**"),
    )
    .await;
    server.drained().await;
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&env.db.url).await.unwrap();
    let payload: String = sqlx::query_scalar("SELECT payload FROM outbox WHERE topic = 'reply'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let job: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(job["author"], "rita", "{job}");
    assert!(
        job.get("body").is_none(),
        "rendered before it was sent: {job}"
    );
    let lines = job["lines"].as_array().unwrap();
    assert_eq!(lines[0]["told"], "refused", "{job}");
    assert_eq!(lines[0]["command"], "promote", "{job}");
    assert_eq!(lines[0]["why"]["refusal"], "denied", "{job}");
    assert_eq!(
        lines[1],
        json!({"told": "unknown", "word": "promot"}),
        "{job}"
    );
    let replies = github.replies(44);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].body.contains("`/promote`: not done: ")
            && replies[0].body.contains("and you have read"),
        "{}",
        replies[0].body
    );
    assert!(
        replies[0]
            .body
            .contains("`/promot`: is not a gatebot command"),
        "{}",
        replies[0].body
    );
}

/// A comment of thousands of command lines, or of one very long word, is
/// answered in a reply GitHub accepts (under its 65,536 characters) that
/// still says what came of the real command: at most twenty lines run, the
/// rest are counted and named, and a word is quoted back briefly.
async fn a_flood_of_lines_is_answered_briefly_and_the_real_refusal_is_kept(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    let long = format!("/{}", "a".repeat(70_000));
    let flood = ["/x"; 3000].join("\n");
    let body = format!("/promote\n{long}\n{flood}");
    deliver(server, "issue_comment", &comment(45, 4501, "rita", &body)).await;
    server.drained().await;
    let replies = github.replies(45);
    assert_eq!(replies.len(), 1, "{replies:?}");
    let reply = &replies[0].body;
    assert!(reply.len() < 65_536, "{} characters", reply.len());
    assert!(reply.contains("and you have read"), "{reply}");
    assert!(
        reply.contains("2982 more command line(s) not run: a comment runs at most 20"),
        "{reply}"
    );
    assert!(reply.contains("aaa…`"), "the long word cut short: {reply}");
    assert_eq!(
        github.reactions_on(4501),
        vec!["eyes".to_string(), "confused".to_string()]
    );
}

/// GitHub refusing to say what a person may do (a plain 403: gatebot's token
/// cannot read the repository's collaborators) refuses the command with a
/// reply that says so, a 😕 and an audit entry, instead of dropping the
/// comment unanswered.
async fn a_permission_github_will_not_tell_refuses_and_says_so(backend: Backend) {
    let env = setup(backend).await;
    let (server, github) = (&env.server, &env.github);
    github.refuse_permission("olga");
    deliver(
        server,
        "issue_comment",
        &comment(46, 4601, "olga", "/hold db migration"),
    )
    .await;
    server.drained().await;
    let replies = github.replies(46);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0]
            .body
            .contains("GitHub would not tell gatebot who may act on acme/shop"),
        "{}",
        replies[0].body
    );
    assert!(
        !replies[0].body.contains("Resource not accessible"),
        "GitHub's words stay in the log: {}",
        replies[0].body
    );
    assert_eq!(
        github.reactions_on(4601),
        vec!["eyes".to_string(), "confused".to_string()]
    );
    let entries = audit(server, "/gates/promote/acme/shop/pr/46").await;
    assert!(
        entries.iter().any(|e| e["action"] == "refuse"),
        "{entries:?}"
    );
}

/// The real binary, killed right after it acknowledged a delivery, applies the
/// command once restarted on the same database.
#[tokio::test]
async fn crash_after_acknowledgement_loses_nothing() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let spawn = |delay: &str| {
        ChildGuard::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
                .arg("serve")
                .env_clear()
                .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
                .env("GATEBOT_DATABASE_URL", &db.url)
                .env("GATEBOT_GITHUB_WEBHOOK_SECRET", SECRET)
                .env("GATEBOT_GITHUB_TOKEN", "ghp_test")
                .env("GATEBOT_GITHUB_API_URL", &github.url)
                .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop")
                .env("GATEBOT_INBOX_START_DELAY", delay)
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .current_dir(db.dir.path()),
        )
    };
    let ready = || async {
        client()
            .get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    };

    let mut first = spawn("1h");
    eventually("the first process to listen", WAIT, ready).await;
    let body = serde_json::to_vec(&comment(64, 9401, "alice", "/promote")).unwrap();
    let r = client()
        .post(format!("{url}/webhooks/github"))
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "crash-1")
        .header("x-hub-signature-256", sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    first.kill().expect("SIGKILL");
    assert_eq!(r.status(), 202);
    first.wait().unwrap();
    assert!(github.reactions().is_empty(), "killed before any work");

    let mut second = spawn("0s");
    eventually("the second process to listen", WAIT, ready).await;
    let gate = format!("{url}/gates/promote/pr/64");
    eventually("the command to apply after the restart", WAIT, || async {
        client()
            .get(&gate)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    eventually("the reactions", WAIT, || async {
        github.reactions_on(9401).len() == 2
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();
}

/// A throwaway RSA key for the App test only (never used anywhere else).
const TEST_APP_KEY: &str = include_str!("fixtures/test-app-key.pem");
