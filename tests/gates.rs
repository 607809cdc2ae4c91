//! The gate server core, end to end: the Flagger simulator against gatebot over
//! real HTTP, on SQLite and on PostgreSQL.

use std::time::Duration;

use gatebot::testing::clock::ManualClock;
use gatebot::testing::notify::{Notice, SendError};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::{
    client, options_with, status, Backend, RecordingSink, TestDb, TestServer, ADMIN_TOKEN,
};
use serde_json::json;

async fn server(backend: Backend) -> (TestServer, std::sync::Arc<RecordingSink>, TestDb) {
    let db = TestDb::new(backend).await;
    let sink = RecordingSink::new();
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let server = TestServer::start(config, options_with(&sink, None)).await;
    (server, sink, db)
}

fn canary(server: &TestServer, pr: u32, strategy: Strategy) -> FlaggerSim {
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        strategy,
        pr_hooks(&server.url, pr.into()),
    );
    sim.deploy("rev-a");
    sim
}

const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

/// Runs the first deployment (no gates asked) and applies a new revision.
async fn new_release(sim: &mut FlaggerSim, checksum: &str) {
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Initialized);
    sim.deploy(checksum);
}

gatebot_testkit::on_both_stores!(
    start_gate_holds_until_opened,
    preapproved_promotion_never_waits,
    approval_while_waiting_promotes_next_tick,
    blue_green_promotes_after_two_checks_of_one_approval,
    new_revision_needs_new_approval,
    rollback_gate_rolls_back_once,
    state_survives_restart,
    concurrent_first_checks_start_one_wait,
    bad_input_changes_nothing,
    event_hook_records_timeline,
    a_failure_is_told_once_per_revision_across_restarts,
);

async fn start_gate_holds_until_opened(backend: Backend) {
    let (server, sink, _db) = server(backend).await;
    let mut sim = canary(&server, 42, CANARY);
    new_release(&mut sim, "rev-b").await;
    for _ in 0..4 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::Waiting);
    let starts = sim.calls_of(HookType::ConfirmRollout);
    assert_eq!(starts.len(), 4, "asked every tick");
    assert!(starts.iter().all(|c| c.status == Some(403)));
    assert_eq!(
        starts[0].response.trim(),
        "waiting: run `gatebot gates open /gates/start/acme/shop/pr/42`",
        "without GitHub or Slack, the CLI is the way to open it"
    );

    // One wait, announced once, however many polls.
    let waits = server.api("/api/v1/waits?open=true").await;
    assert_eq!(waits["waits"].as_array().unwrap().len(), 1, "{waits}");
    assert_eq!(waits["waits"][0]["gate"], "/gates/start/acme/shop/pr/42");
    server.drained().await;
    assert!(
        sink.waits_started().len() == 1,
        "drained, yet still waiting for the wait notification"
    );
    assert_eq!(
        server
            .metric("gatebot_waits_started_total{kind=\"start\"}")
            .await,
        1.0
    );

    server.open("/gates/start/pr/42").await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Progressing);
    let waits = server.api("/api/v1/waits?open=true").await;
    assert!(
        waits["waits"].as_array().unwrap().is_empty(),
        "the wait ended: {waits}"
    );
    assert_eq!(sink.waits_started().len(), 1, "still one announcement");
}

async fn preapproved_promotion_never_waits(backend: Backend) {
    let (server, _sink, _db) = server(backend).await;
    server.open("/gates/start/pr/7").await;
    server.open("/gates/promote/acme/shop/pr/7").await;
    let mut sim = canary(&server, 7, CANARY);
    new_release(&mut sim, "rev-b").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await, "promoted");
    assert!(
        sim.event_log()
            .iter()
            .all(|e| e.phase != Phase::WaitingPromotion),
        "never entered WaitingPromotion"
    );
}

async fn approval_while_waiting_promotes_next_tick(backend: Backend) {
    let (server, sink, _db) = server(backend).await;
    server.open("/gates/start/pr/8").await;
    let mut sim = canary(&server, 8, CANARY);
    new_release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    let asked = sim.calls_of(HookType::ConfirmPromotion).len();
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion, "still closed");
    assert_eq!(sim.calls_of(HookType::ConfirmPromotion).len(), asked + 1);
    server.drained().await;
    assert!(sink.waits_started()
            .iter()
            .any(|n| matches!(n, Notice::WaitStarted { gate, checksum, .. } if gate.to_string() == "/gates/promote/acme/shop/pr/8" && checksum == "rev-b")), "drained, yet still waiting for the promotion wait notice");

    server.open("/gates/promote/pr/8").await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Promoting, "promoting on the next tick");
    assert!(sim.run_until(|s| s.phase() == Phase::Succeeded, 3).await);
    let last = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(last.starts_with("approved by admin via api at "), "{last}");
    assert!(last.trim_end().ends_with("for revision rev-b"), "{last}");
}

async fn blue_green_promotes_after_two_checks_of_one_approval(backend: Backend) {
    let (server, _sink, _db) = server(backend).await;
    server.open("/gates/start/pr/9").await;
    let mut sim = canary(&server, 9, Strategy::BlueGreen { iterations: 2 });
    new_release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    server.open("/gates/promote/pr/9").await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 10).await,
        "B/G promotes"
    );
    let answers: Vec<Option<u16>> = sim
        .calls_of(HookType::ConfirmPromotion)
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(
        &answers[answers.len() - 2..],
        &[Some(200), Some(200)],
        "{answers:?}"
    );
    let detail = server.api("/api/v1/gates/promote/acme/shop/pr/9").await;
    let pins = detail["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "pin")
        .count();
    assert_eq!(pins, 1, "one approval, pinned once: {detail}");
}

async fn new_revision_needs_new_approval(backend: Backend) {
    let (server, _sink, _db) = server(backend).await;
    server.open("/gates/start/pr/10").await;
    server.open("/gates/promote/pr/10").await;
    let mut sim = canary(&server, 10, CANARY);
    new_release(&mut sim, "rev-b").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await);

    // The start approval was pinned to the revision it let through; the next one waits.
    sim.deploy("rev-c");
    sim.tick().await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Waiting);
    let last = sim
        .calls_of(HookType::ConfirmRollout)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(last.contains("was for revision"), "{last}");
    server.open("/gates/start/pr/10").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await,
        "promotion needs approval again"
    );
    let last = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(
        last.contains("approval by admin was for revision rev-b, this is revision rev-c"),
        "{last}"
    );
    server.open("/gates/promote/pr/10").await;
    assert!(sim.run_until(|s| s.promotions() == 2, 5).await);
}

async fn rollback_gate_rolls_back_once(backend: Backend) {
    let (server, _sink, _db) = server(backend).await;
    server.open("/gates/start/pr/11").await;
    let mut sim = canary(&server, 11, CANARY);
    new_release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    server.open("/gates/rollback/pr/11").await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Failed);
    assert_eq!(sim.rollbacks(), 1);

    // The next revision is not rolled back by the same approval.
    server.open("/gates/start/pr/11").await;
    server.open("/gates/promote/pr/11").await;
    sim.deploy("rev-c");
    assert!(
        sim.run_until(|s| s.promotions() == 1, 10).await,
        "rev-c promoted"
    );
    assert_eq!(sim.rollbacks(), 1);
    let rollback_answers: Vec<_> = sim
        .calls_of(HookType::Rollback)
        .iter()
        .filter(|c| c.checksum_sent == "rev-c")
        .map(|c| c.status)
        .collect();
    assert!(
        !rollback_answers.is_empty() && rollback_answers.iter().all(|s| *s == Some(403)),
        "{rollback_answers:?}"
    );
}

async fn state_survives_restart(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let first = TestServer::start(config.clone(), Default::default()).await;
    first.open("/gates/promote/pr/12").await;
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let r = client()
        .post(first.at("/gates/promote/pr/12"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    first.stop().await;

    let second = TestServer::start(config, Default::default()).await;
    let r = client()
        .post(second.at("/gates/promote/pr/12"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "approval survived the restart");
    let other =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r2"});
    let r = client()
        .post(second.at("/gates/promote/pr/12"))
        .json(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "and so did its pin");
}

async fn concurrent_first_checks_start_one_wait(backend: Backend) {
    let (server, sink, _db) = server(backend).await;
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let url = server.at("/gates/promote/pr/13");
    let checks = (0..20).map(|_| {
        let (url, body) = (url.clone(), body.clone());
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        })
    });
    for check in checks {
        assert_eq!(check.await.unwrap(), 403);
    }
    let waits = server.api("/api/v1/waits?gate=/gates/promote/pr/13").await;
    assert_eq!(waits["waits"].as_array().unwrap().len(), 1, "{waits}");
    server.drained().await;
    assert!(
        sink.waits_started().len() == 1,
        "drained, yet still waiting for the notice"
    );
    let jobs = server.api("/api/v1/outbox").await;
    let wait_jobs = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["topic"] == "wait_started")
        .count();
    assert_eq!(wait_jobs, 1);
}

async fn bad_input_changes_nothing(backend: Backend) {
    let (server, _sink, _db) = server(backend).await;
    let before = server.api("/api/v1/gates").await;
    let c = client();
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            c.post(server.at("/gates/promote/pr/1")).body("{not json"),
            400,
            "malformed JSON",
        ),
        (
            c.post(server.at("/gates/promote/pr/1")).body("[1,2]"),
            400,
            "malformed JSON",
        ),
        (
            c.post(server.at("/gates/deploy/pr/1")).body("{}"),
            404,
            "unknown gate kind `deploy`",
        ),
        (
            c.post(server.at("/gates/promote/pr/abc")).body("{}"),
            400,
            "not a pull request number",
        ),
        (
            c.post(server.at("/gates/promote/a/b/c/d")).body("{}"),
            400,
            "is not a gate",
        ),
        (
            c.post(server.at("/gates/promote/pr/1"))
                .body(json!({"name": "Bad_Name", "namespace": "test"}).to_string()),
            400,
            "not a canary",
        ),
        (
            c.post(server.at("/gates/promote")).body("{}"),
            400,
            "names none",
        ),
        (
            c.post(server.at("/gates/promote/pr/1"))
                .body(vec![b' '; 100 * 1024]),
            413,
            "",
        ),
        (
            c.post(server.at("/api/v1/gates/open"))
                .json(&json!({"gate": "/gates/promote/pr/1"})),
            401,
            "bearer",
        ),
        (
            c.post(server.at("/api/v1/gates/open"))
                .bearer_auth("wrong")
                .json(&json!({"gate": "/gates/promote/pr/1"})),
            401,
            "wrong bearer token",
        ),
        (
            c.post(server.at("/api/v1/gates/open"))
                .bearer_auth(ADMIN_TOKEN)
                .json(&json!({"gate": "/gates/promote/pr/1", "reasn": "typo"})),
            400,
            "unknown field",
        ),
        (
            c.post(server.at("/flagger/events")).body("{"),
            400,
            "malformed JSON",
        ),
        (
            c.post(server.at("/gate/check")).body("nope"),
            400,
            "malformed JSON",
        ),
        (c.get(server.at("/no/such/route")), 404, "no such route"),
    ];
    for (request, status, message) in cases {
        let r = request.send().await.unwrap();
        let got = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(got, status, "{text}");
        assert!(text.contains(message), "{message:?} in {text:?}");
    }
    assert_eq!(server.api("/api/v1/gates").await, before, "nothing changed");
    let metrics = server.metrics().await;
    for series in [
        "gatebot_rejected_requests_total{route=\"/gates/{kind}/{*scope}\",reason=\"malformed_json\"} 2",
        "gatebot_rejected_requests_total{route=\"/gates/{kind}/{*scope}\",reason=\"body_too_large\"} 1",
        "gatebot_rejected_requests_total{route=\"/api/v1/gates/open\",reason=\"unauthorized\"} 2",
        "gatebot_rejected_requests_total{route=\"unmatched\",reason=\"not_found\"} 1",
    ] {
        assert!(metrics.contains(series), "{series} in\n{metrics}");
    }
}

async fn event_hook_records_timeline(backend: Backend) {
    let (server, sink, _db) = server(backend).await;
    server.open("/gates/start/pr/14").await;
    let mut sim = canary(&server, 14, CANARY);
    new_release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    server.open("/gates/promote/pr/14").await;
    assert!(sim.run_until(|s| s.phase() == Phase::Succeeded, 5).await);
    let events = server.api("/api/v1/events?canary=test/podinfo").await;
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "new_revision",
        "waiting_for_promotion_approval",
        "promotion_completed",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let first = &events["events"].as_array().unwrap().last().unwrap();
    assert_eq!(first["canary"], "test/podinfo");
    assert!(first["flagger_at"].as_i64().unwrap() > 0);
    // Milestones reach the sinks, tied to the canary's PR gates.
    server.drained().await;
    assert!(sink.notices().iter().any(|n| matches!(n, Notice::CanaryEvent { kind, gates, .. }
            if kind == "promotion_completed" && gates.iter().any(|g| g.to_string() == "/gates/promote/acme/shop/pr/14"))), "drained, yet still waiting for the completion notice");
}

// ---- SQLite-only and clock-driven behaviour ----

#[tokio::test]
async fn steady_state_checks_do_not_write() {
    let (server, sink, db) = server(Backend::Sqlite).await;
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let url = server.at("/gates/promote/pr/15");
    assert_eq!(status(client().post(&url).json(&body)).await, 403);
    // The wait's notification is written and sent first, so that only the polls are measured.
    server.drained().await;
    assert!(
        sink.waits_started().len() == 1,
        "drained, yet still waiting for the wait notice"
    );
    server.drained().await;
    assert!(
        server.api("/api/v1/outbox?state=pending").await["jobs"]
            .as_array()
            .unwrap()
            .is_empty(),
        "drained, yet still waiting for the outbox to settle"
    );
    let wal = db.dir.path().join("data/gatebot.db-wal");
    let size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let before = size();
    for _ in 0..50 {
        assert_eq!(status(client().post(&url).json(&body)).await, 403);
    }
    // The housekeeping flush may write last-seen times once; 50 polls must not write 50 times.
    let growth = size() - before;
    assert!(
        growth < 4 * 4096 + 100,
        "WAL grew by {growth} bytes over 50 identical polls"
    );
    // A change is written.
    let changed =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r2"});
    assert_eq!(
        client()
            .post(&url)
            .json(&changed)
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    assert!(size() > before + growth, "a new revision is recorded");
}

#[tokio::test]
async fn approvals_expire() {
    let db = TestDb::new(Backend::Sqlite).await;
    let clock = ManualClock::new(1_780_000_000_000);
    let sink = RecordingSink::new();
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.approval_ttl = Duration::from_secs(3600);
    let server = TestServer::start(config, options_with(&sink, Some(clock.clone()))).await;
    server.open("/gates/promote/pr/16").await;
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    clock.advance(3_599_000);
    let other =
        json!({"name": "backend", "namespace": "test", "phase": "Progressing", "checksum": "b1"});
    assert_eq!(
        client()
            .post(server.at("/gates/promote/pr/16"))
            .json(&other)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    clock.advance(1_000);
    let r = client()
        .post(server.at("/gates/promote/pr/16"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let text = r.text().await.unwrap();
    assert!(text.contains("the approval by admin expired at"), "{text}");
    let detail = server.api("/api/v1/gates/promote/pr/16").await;
    assert_eq!(detail["state"], "closed");
    assert!(
        detail["audit"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action"] == "expire"),
        "{detail}"
    );
}

#[tokio::test]
async fn outbox_retries_with_backoff_and_honours_retry_after() {
    let db = TestDb::new(Backend::Sqlite).await;
    let clock = ManualClock::new(1_780_000_000_000);
    let sink = RecordingSink::new();
    sink.fail_next(SendError::Retry {
        after: Some(Duration::from_secs(30)),
        message: "429 slow down".into(),
    });
    sink.fail_next(SendError::retry("500 oops"));
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let server = TestServer::start(config, options_with(&sink, Some(clock.clone()))).await;
    server.open("/gates/promote/acme/shop/pr/17").await;

    server.drained().await;
    assert!(
        sink.attempts() == 1
            && !server.api("/api/v1/outbox").await["jobs"][0]["last_error"].is_null(),
        "drained, yet still waiting for the first attempt to be settled"
    );
    let job = &server.api("/api/v1/outbox").await["jobs"][0];
    assert_eq!(job["attempts"], 1);
    assert_eq!(job["last_error"], "429 slow down");
    assert_eq!(
        job["next_attempt_at"],
        1_780_000_000_000i64 + 30_000,
        "Retry-After honoured"
    );
    clock.advance(29_999);
    assert_eq!(sink.attempts(), 1);
    clock.advance(1);
    server.drained().await;
    assert!(
        sink.attempts() == 2
            && server.api("/api/v1/outbox").await["jobs"][0]["last_error"] == "500 oops",
        "drained, yet still waiting for the second attempt to be settled"
    );
    let job = &server.api("/api/v1/outbox").await["jobs"][0];
    assert_eq!(
        job["next_attempt_at"],
        1_780_000_030_000i64 + 100,
        "exponential backoff: 50ms * 2"
    );
    clock.advance(100);
    server.drained().await;
    assert!(
        sink.notices().len() == 1,
        "drained, yet still waiting for delivery"
    );
    server.drained().await;
    assert!(
        server.api("/api/v1/outbox").await["jobs"][0]["state"] == "done",
        "drained, yet still waiting for the job to be done"
    );
    let job = &server.api("/api/v1/outbox").await["jobs"][0];
    assert_eq!(job["attempts"], 3);
    assert_eq!(sink.notices().len(), 1, "sent once");
}

#[tokio::test]
async fn outbox_gives_up_on_permanent_errors() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sink = RecordingSink::new();
    sink.fail_next(SendError::Permanent("404 no such PR".into()));
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let server = TestServer::start(config, options_with(&sink, None)).await;
    server.open("/gates/promote/acme/shop/pr/18").await;
    server.drained().await;
    assert!(
        server.api("/api/v1/outbox?state=failed").await["jobs"]
            .as_array()
            .unwrap()
            .len()
            == 1,
        "drained, yet still waiting for the job to fail"
    );
    assert_eq!(sink.attempts(), 1);
    assert_eq!(
        server
            .metric("gatebot_queue_jobs_total{queue=\"outbox\",route=\"test\",result=\"failed\"}")
            .await,
        1.0
    );
}

/// Flagger repeats a failed pre-rollout check at every interval: the failure
/// is told once per revision, also after a restart; a new revision that
/// fails the same way is told again.
async fn a_failure_is_told_once_per_revision_across_restarts(backend: Backend) {
    let db = TestDb::new(backend).await;
    let halt = |checksum: &str| {
        json!({
            "name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": checksum,
            "metadata": {
                "eventMessage": "Halt podinfo.test advancement pre-rollout check smoke failed 500",
                "eventType": "Warning", "timestamp": "1578607635167", "pr": "14",
            },
        })
    };
    // (the revision of each run's two retries, failures told in that run)
    for (checksum, told) in [("rev-a", 1), ("rev-a", 0), ("rev-b", 1)] {
        let sink = RecordingSink::new();
        let mut config = db.config();
        config.github.repository = Some("acme/shop".parse().unwrap());
        let server = TestServer::start(config, options_with(&sink, None)).await;
        for _ in 0..2 {
            let r = client()
                .post(server.at("/flagger/events"))
                .json(&halt(checksum))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
        }
        server.drained().await;
        let failures: Vec<Notice> = sink
            .notices()
            .into_iter()
            .filter(
                |n| matches!(n, Notice::CanaryFailure { failure, .. } if failure == "pre_rollout"),
            )
            .collect();
        assert_eq!(failures.len(), told, "{checksum}: {failures:#?}");
        server.stop().await;
    }
}
