//! Several replicas on one PostgreSQL database, and PostgreSQL going away.
//! These need GATEBOT_TEST_POSTGRES_URL (and for the outage test the PostgreSQL
//! binaries named by GATEBOT_TEST_PG_CTL); `bash .ci/run` provides both.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Phase, Strategy};
use gatebot_testkit::github_payloads::{comment, deliver_signed};
use gatebot_testkit::harness::{
    client, eventually, options_with, postgres_url, Backend, RecordingSink, TestDb, TestServer,
    ADMIN_TOKEN,
};
use gatebot_testkit::row_lock::RowLock;
use gatebot_testkit::served::{limits_policy, Served};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

fn skip() -> bool {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return true;
    }
    false
}

fn replica_config(db: &TestDb) -> gatebot::Config {
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config
}

/// Forwards each request to the next replica in turn, as a Service would.
#[derive(Clone)]
struct RoundRobin {
    upstreams: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
}

async fn forward(
    State(rr): State<RoundRobin>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> (StatusCode, String) {
    let i = rr.next.fetch_add(1, Ordering::SeqCst) % rr.upstreams.len();
    let url = format!(
        "{}{}",
        rr.upstreams[i],
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let r = client()
        .request(method, url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (
        StatusCode::from_u16(r.status().as_u16()).unwrap(),
        r.text().await.unwrap(),
    )
}

async fn round_robin(upstreams: Vec<String>) -> (String, Arc<AtomicUsize>) {
    let next = Arc::new(AtomicUsize::new(0));
    let rr = RoundRobin {
        upstreams: Arc::new(upstreams),
        next: next.clone(),
    };
    let app = axum::Router::new().fallback(forward).with_state(rr);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), next)
}

/// Opens a gate through a replica's operator API.
async fn open_via(replica: &str, gate: &str) {
    let r = client()
        .post(format!("{replica}/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": gate}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "open {gate} via {replica}");
}

/// Two real gatebot processes on one database behind a round-robin proxy, so
/// Flagger's checks alternate between them, with GitHub and Slack configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn two_replicas_behind_flagger_agree() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    let slack = FakeSlack::start().await;
    let vars = [
        ("GATEBOT_GITHUB_TOKEN", "ghp_test".to_string()),
        ("GATEBOT_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET.to_string()),
        ("GATEBOT_GITHUB_API_URL", github.url.clone()),
        ("GATEBOT_GITHUB_REPOSITORY", "acme/shop".to_string()),
        ("GATEBOT_SLACK_SIGNING_SECRET", SLACK_SECRET.to_string()),
        ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-test".to_string()),
        ("GATEBOT_SLACK_API_URL", slack.api_url()),
        ("GATEBOT_SLACK_CHANNEL", "#deploys".to_string()),
        ("RUST_LOG", "warn".to_string()),
    ];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = Served::start(&db, &vars);
    let b = Served::start(&db, &vars);
    let (proxy, forwarded) = round_robin(vec![a.url.clone(), b.url.clone()]).await;

    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        pr_hooks(&proxy, 42),
    );
    sim.tick().await;
    sim.deploy("rev-b");
    for _ in 0..4 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::Waiting);

    // Opened through one replica: open there at once, and on the other as soon
    // as its memory hears of it (tests/cache.rs holds that to 100 ms).
    open_via(&a.url, "/gates/start/pr/42").await;
    let peek = |replica: String| async move {
        let r = client()
            .get(format!("{replica}/gates/start/pr/42"))
            .send()
            .await
            .unwrap();
        r.status()
    };
    assert_eq!(peek(a.url.clone()).await, 200, "peek on A");
    eventually(
        "the peek on B to answer 200",
        Duration::from_secs(1),
        || {
            let b = b.url.clone();
            async move { peek(b).await == 200 }
        },
    )
    .await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    for _ in 0..3 {
        sim.tick().await;
    }
    open_via(&b.url, "/gates/promote/pr/42").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 6).await, "promoted");
    assert!(
        forwarded.load(Ordering::SeqCst) > 10,
        "checks went to both replicas"
    );

    // Each wait was announced once across both replicas: one Slack message per
    // wait, one status comment for the PR.
    let waits = a.api("/api/v1/waits").await;
    assert_eq!(waits["waits"].as_array().unwrap().len(), 2, "{waits}");
    let posted = || {
        slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|m| m.body.get("thread_ts").is_none())
            .count()
    };
    eventually("both waiting messages", WAIT, || async { posted() == 2 }).await;
    eventually("the status comment", WAIT, || async {
        !github.status_comments(42).is_empty()
    })
    .await;
    let settled = || async {
        let jobs = b.api("/api/v1/outbox?state=pending").await;
        jobs["jobs"].as_array().unwrap().is_empty()
    };
    eventually("the outbox to drain", WAIT, settled).await;
    assert_eq!(posted(), 2, "one message per wait");
    assert_eq!(github.status_comments(42).len(), 1, "one status comment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn outbox_jobs_are_sent_once_across_replicas_and_survive_a_dead_worker() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let sink_a = RecordingSink::new();
    let sink_b = RecordingSink::new();
    let short_lease = |sink: &Arc<RecordingSink>| {
        let mut options = options_with(sink, None);
        if let Some(w) = options.worker.as_mut() {
            w.lease = Duration::from_millis(1500);
        }
        options
    };
    let a = TestServer::start(replica_config(&db), short_lease(&sink_a)).await;
    let b = TestServer::start(replica_config(&db), short_lease(&sink_b)).await;
    for n in 1..=40 {
        let server = if n % 2 == 0 { &a } else { &b };
        server.open(&format!("/gates/promote/pr/{n}")).await;
    }
    eventually("every job sent", Duration::from_secs(20), || async {
        sink_a.notices().len() + sink_b.notices().len() == 40
    })
    .await;
    let mut gates: Vec<String> = sink_a
        .notices()
        .into_iter()
        .chain(sink_b.notices())
        .map(|n| match n {
            gatebot::testing::notify::Notice::GateChanged { gate, .. } => gate.to_string(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    gates.sort();
    gates.dedup();
    assert_eq!(gates.len(), 40, "none sent twice");

    // A replica that dies holding a job: another takes it once the lease runs out.
    a.stop().await;
    b.stop().await;
    let store = gatebot::testing::store::Store::connect(&db.url)
        .await
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let notice = gatebot::testing::notify::Notice::GateChanged {
        gate: gatebot::testing::gate::GateKey::parse("/gates/promote/acme/shop/pr/99", None)
            .unwrap(),
        action: gatebot::testing::gate::AuditAction::Open,
        actor: gatebot::testing::gate::Actor::new("alice", gatebot::testing::gate::Source::Api),
        reason: None,
        at: now,
        pr: None,
    };
    let mut tx = store.begin().await.unwrap();
    gatebot::testing::store::Queues::enqueue(&mut tx, &notice.job("test").unwrap(), now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let taken = store
        .queues()
        .claim(
            gatebot::testing::store::QueueName::Outbox,
            "replica-that-died",
            now,
            1500,
        )
        .await
        .unwrap()
        .expect("the job");
    let sink_c = RecordingSink::new();
    let c = TestServer::start(replica_config(&db), short_lease(&sink_c)).await;
    eventually("the orphaned job", Duration::from_secs(10), || async {
        sink_c.notices() == vec![notice.clone()]
    })
    .await;
    // The sink hears the notice before the worker settles the job: let it finish.
    c.drained().await;
    let jobs = c.api("/api/v1/outbox").await;
    let job = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == taken.id.as_str())
        .unwrap()
        .clone();
    assert_eq!(job["state"], "done");
    assert_eq!(
        job["attempts"], 2,
        "one attempt by the dead replica, one by the living"
    );
}

const GITHUB_SECRET: &str = "replica-github-secret";
const SLACK_SECRET: &str = "replica-slack-secret";

/// Two real processes on one database, each with its own GitHub token so the
/// fake can tell their requests apart. GitHub applies every write at once but
/// answers after 300 ms, and never answers process A's; A is killed (SIGKILL)
/// while GitHub holds the writes it sent. Every wait still gets its status comment (nothing lost), and
/// no pull request gets two (nothing sent twice): the survivor takes the dead
/// process's job when its lease runs out and finds the comment by its marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn replica_killed_mid_send_loses_no_job_and_sends_none_twice() {
    if skip() {
        return;
    }
    // A's writes are held, so A is caught with writes applied but unanswered
    // however late the test's poll runs (a timed catch once missed on a busy
    // machine: B had sent everything else by then).
    const PRS: u64 = 48;
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    github.set_write_delay(Duration::from_millis(300));
    github.hold_writes_of("Bearer ghp_a");
    let limits = limits_policy(
        db.dir.path(),
        &[("outbox_lease", "2s"), ("outbox_backoff", "200ms")],
    );
    let env = |token: &'static str| {
        vec![
            ("GATEBOT_GITHUB_TOKEN", token.to_string()),
            ("GATEBOT_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET.to_string()),
            ("GATEBOT_GITHUB_API_URL", github.url.clone()),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop".to_string()),
            ("GATEBOT_POLICY", limits.clone()),
            ("RUST_LOG", "warn".to_string()),
        ]
    };
    let served = |token: &'static str| {
        let vars = env(token);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Served::start(&db, &vars)
    };
    let mut a = served("ghp_a");
    let b = served("ghp_b");

    // Flagger waits at the start gate of PRS pull requests, checks spread over both.
    for n in 1..=PRS {
        let url = if n % 2 == 0 { &a.url } else { &b.url };
        let r = client()
            .post(format!("{url}/gates/start/pr/{n}"))
            .json(&json!({"name": format!("app-{n}"), "namespace": "test", "phase": "Waiting", "checksum": "rev-a"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "closed until approved");
    }
    eventually(
        "process A to have a write applied but unanswered",
        Duration::from_secs(20),
        || async { github.in_flight("Bearer ghp_a") > 0 },
    )
    .await;
    assert!(github.in_flight("Bearer ghp_a") > 0, "A is killed mid-send");
    a.child.kill().expect("SIGKILL");
    a.child.wait().unwrap();

    let outbox = || async {
        let jobs = b.api("/api/v1/outbox").await;
        jobs["jobs"].as_array().unwrap().clone()
    };
    eventually(
        "every job settled by the survivor",
        Duration::from_secs(30),
        || async {
            let jobs = outbox().await;
            jobs.len() >= PRS as usize && jobs.iter().all(|j| j["state"] == "done")
        },
    )
    .await;
    for n in 1..=PRS {
        let comments = github.status_comments(n);
        assert_eq!(comments.len(), 1, "PR {n}: one status comment");
        assert!(
            comments[0].body.contains("start"),
            "PR {n}: {}",
            comments[0].body
        );
    }
    let jobs = outbox().await;
    assert!(
        jobs.iter().any(|j| j["attempts"].as_i64() >= Some(2)),
        "the dead process's job was taken over: {jobs:?}"
    );
}

/// Two replicas behind a load balancer that sends every GitHub delivery and
/// every Slack click and command to both at once (as a retry racing the
/// original would): each is applied once, answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn duplicate_deliveries_to_both_replicas_apply_once() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let slack = FakeSlack::start().await;
    let config = || {
        let mut config = replica_config(&db);
        config.github.webhook_secret = Some(GITHUB_SECRET.to_string().into());
        config.github.token = Some("ghp_test".to_string().into());
        config.github.api_url = github.url.clone();
        config.slack.signing_secret = Some(SLACK_SECRET.to_string().into());
        config.slack.bot_token = Some("xoxb-test".to_string().into());
        config.slack.api_url = slack.api_url();
        config.slack.channel = Some("#deploys".into());
        config.slack.approvers = vec!["UALICE".into()];
        config
    };
    let fast = || gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    };
    let a = TestServer::start(config(), fast()).await;
    let b = TestServer::start(config(), fast()).await;
    let both = |path: &'static str, headers: Vec<(&'static str, String)>, body: Vec<u8>| {
        let send = |server: &TestServer| {
            let mut req = client().post(server.at(path)).body(body.clone());
            for (k, v) in &headers {
                req = req.header(*k, v);
            }
            req.send()
        };
        let (ra, rb) = (send(&a), send(&b));
        async move {
            let (ra, rb) = tokio::join!(ra, rb);
            let mut codes = [ra.unwrap().status().as_u16(), rb.unwrap().status().as_u16()];
            codes.sort_unstable();
            codes
        }
    };

    // GitHub: the same /promote delivery to both.
    for n in 1..=8u64 {
        let body = serde_json::to_vec(&comment(n, 7000 + n, "alice", "/promote")).unwrap();
        let codes = both(
            "/webhooks/github",
            vec![
                ("x-github-event", "issue_comment".into()),
                ("x-github-delivery", format!("dup-{n}")),
                (
                    "x-hub-signature-256",
                    gatebot::testing::github::verify::sign(GITHUB_SECRET, &body),
                ),
            ],
            body,
        )
        .await;
        assert_eq!(codes, [200, 202], "stored once, the other a duplicate");
    }
    // Slack: the same slash command to both.
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string()
    };
    let slack_headers = |body: &[u8]| {
        let ts = now();
        let sig = gatebot::testing::slack::verify::sign(SLACK_SECRET.as_bytes(), &ts, body);
        vec![
            (
                "content-type",
                "application/x-www-form-urlencoded".to_string(),
            ),
            ("x-slack-request-timestamp", ts),
            ("x-slack-signature", sig),
        ]
    };
    for n in 11..=14u64 {
        let trigger = format!("trigger-{n}");
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("command", "/gatebot"),
                ("text", &format!("promote {n}")),
                ("user_id", "UALICE"),
                ("user_name", "alice"),
                ("response_url", &slack.response_url(&trigger)),
                ("trigger_id", &trigger),
            ])
            .finish()
            .into_bytes();
        let codes = both("/webhooks/slack/commands", slack_headers(&body), body).await;
        assert_eq!(codes, [200, 200]);
    }
    // Slack: the same Approve click to both.
    let r = client()
        .post(a.at("/gates/start/pr/21"))
        .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Waiting", "checksum": "rev-a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    eventually("the waiting message", WAIT, || async {
        !slack.ok("chat.postMessage").is_empty()
    })
    .await;
    let message = slack.ok("chat.postMessage").remove(0);
    let value = message.body["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().unwrap().clone())
        .find(|e| e["action_id"] == "gatebot_approve")
        .expect("an Approve button")["value"]
        .clone();
    let click = json!({
        "type": "block_actions",
        "team": {"id": "T0", "domain": "acme"},
        "user": {"id": "UALICE", "username": "alice", "name": "alice", "team_id": "T0"},
        "trigger_id": "click-1",
        "container": {"type": "message", "message_ts": "1714572120.000001", "channel_id": "CDEPLOYS"},
        "channel": {"id": "CDEPLOYS", "name": "deploys"},
        "response_url": slack.response_url("click-1"),
        "actions": [{"action_id": "gatebot_approve", "block_id": "b", "type": "button",
                     "value": value, "action_ts": "1714572121.000001"}],
    });
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &click.to_string())
        .finish()
        .into_bytes();
    let codes = both("/webhooks/slack/interactions", slack_headers(&body), body).await;
    assert_eq!(codes, [200, 200]);

    let gates: Vec<String> = (1..=8)
        .chain(11..=14)
        .map(|n| format!("/gates/promote/acme/shop/pr/{n}"))
        .chain(["/gates/start/acme/shop/pr/21".to_string()])
        .collect();
    for gate in &gates {
        eventually(&format!("{gate} open"), WAIT, || async {
            client().get(b.at(gate)).send().await.unwrap().status() == 200
        })
        .await;
    }
    eventually("both outboxes to drain", WAIT, || async {
        let mut drained = true;
        for server in [&a, &b] {
            let jobs = server.api("/api/v1/outbox?state=pending").await;
            drained &= jobs["jobs"].as_array().unwrap().is_empty();
        }
        drained
    })
    .await;
    for gate in &gates {
        let audit = a.api(&format!("/api/v1/audit?gate={gate}")).await;
        let opens = audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"] == "open")
            .count();
        assert_eq!(opens, 1, "{gate} opened once: {audit}");
    }
    for n in 1..=8u64 {
        let mut reactions = github.reactions_on(7000 + n);
        reactions.sort();
        assert_eq!(reactions, ["eyes", "rocket"], "comment {n}");
    }
    for n in 11..=14u64 {
        let answers: Vec<_> = slack
            .ok("respond")
            .into_iter()
            .filter(|r| r.body["_response_url_id"] == format!("trigger-{n}"))
            .collect();
        assert_eq!(answers.len(), 1, "one answer to command {n}");
    }
    assert_eq!(slack.ok("chat.update").len(), 1, "the message updated once");
}

/// Sends a signed GitHub comment delivery to one replica.
async fn deliver_comment(replica: &str, pr: u64, id: u64, user: &str, text: &str) -> u16 {
    let payload = comment(pr, id, user, text);
    let guid = format!("race-{id}");
    deliver_signed(replica, GITHUB_SECRET, "issue_comment", &guid, &payload)
        .await
        .0
}

/// The actions on `gate`'s audit, oldest first.
async fn audit_actions(replica: &Served, gate: &str) -> Vec<String> {
    let audit = replica.api(&format!("/api/v1/audit?gate={gate}")).await;
    let mut actions: Vec<String> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("?").to_string())
        .collect();
    actions.reverse();
    actions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn promote_and_hold_racing_on_two_replicas_end_as_in_some_serial_order() {
    if skip() {
        return;
    }
    const PRS: u64 = 200;
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    github.set_permission("bob", "write");
    let vars = [
        ("GATEBOT_GITHUB_TOKEN", "ghp_test".to_string()),
        ("GATEBOT_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET.to_string()),
        ("GATEBOT_GITHUB_API_URL", github.url.clone()),
        ("GATEBOT_GITHUB_REPOSITORY", "acme/shop".to_string()),
        ("RUST_LOG", "warn".to_string()),
    ];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = Served::start(&db, &vars);
    let b = Served::start(&db, &vars);

    // Each PR: alice's /promote to A and bob's /hold to B at the same instant.
    let sends = (1..=PRS).map(|pr| {
        let (a, b) = (a.url.clone(), b.url.clone());
        async move {
            let promote = deliver_comment(&a, pr, 10_000 + pr, "alice", "/promote");
            let hold = deliver_comment(&b, pr, 20_000 + pr, "bob", "/hold");
            let (p, h) = tokio::join!(promote, hold);
            assert_eq!((p, h), (202, 202), "PR {pr} stored");
        }
    });
    // As many at once as a replica reads webhook bodies (the rest would be
    // turned away), so that the pairs race each other as well.
    use futures_util::StreamExt;
    futures_util::stream::iter(sends)
        .buffer_unordered(gatebot::testing::http::limits::GITHUB_BODY_READERS)
        .collect::<Vec<()>>()
        .await;

    // Whichever came first, a serial order ends held: promote then hold, or
    // hold then a promote refused. The audit must tell the same story.
    for pr in 1..=PRS {
        let gate = format!("/gates/promote/acme/shop/pr/{pr}");
        eventually(&format!("both commands on PR {pr}"), WAIT, || async {
            let now = audit_actions(&a, &gate).await;
            now.len() >= 2 && now.iter().any(|x| x == "hold")
        })
        .await;
        let actions = audit_actions(&a, &gate).await;
        assert!(
            actions == ["open", "hold"] || actions == ["hold", "refuse"],
            "PR {pr}: {actions:?}"
        );
        for replica in [&a, &b] {
            let state = replica
                .api(&format!("/api/v1/gates/promote/acme/shop/pr/{pr}"))
                .await;
            assert_eq!(
                state["state"], "held",
                "PR {pr} on {}: {state}",
                replica.url
            );
        }
    }
}

/// Posts an operator change (`open` or `close`) of `gate` to a replica.
async fn change_via(replica: &str, verb: &str, gate: &str) -> u16 {
    client()
        .post(format!("{replica}/api/v1/gates/{verb}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": gate}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_stuck_row_lock_neither_hangs_a_write_nor_keeps_memory_stale() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let vars = [
        ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
        ("RUST_LOG", "warn"),
    ];
    let a = Served::start(&db, &vars);
    let b = Served::start(&db, &vars);
    let (x, y) = ("/gates/start/pr/1", "/gates/start/pr/2");
    open_via(&a.url, x).await;
    open_via(&a.url, y).await;
    let check = |replica: String| async move {
        client()
            .get(format!("{replica}{y}"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    eventually("B to hear Y opened", WAIT, || async {
        check(b.url.clone()).await == 200
    })
    .await;

    // A client cut off mid-transaction: X's row stays locked.
    let stuck = RowLock::gates(&db.url, "/gates/start/acme/shop/pr/1").await;
    assert_eq!(stuck.rows, 1, "X's row is locked");

    // A write on B that touches X, and meanwhile A closes Y.
    let started = std::time::Instant::now();
    let write_x = tokio::spawn({
        let b = b.url.clone();
        async move { (change_via(&b, "close", x).await, started.elapsed()) }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(change_via(&a.url, "close", y).await, 200, "close Y on A");
    eventually("B to answer 403 for Y", Duration::from_secs(3), || async {
        check(b.url.clone()).await == 403
    })
    .await;
    let (code, took) = write_x.await.unwrap();
    // Tried a few times, each failing within the lock timeout, then refused.
    assert_eq!(code, 503, "X's write cannot have its lock");
    assert!(
        took < Duration::from_secs(5),
        "X's write answered in {took:?}"
    );
    assert!(
        took >= Duration::from_secs(2),
        "X's write was tried again before it was refused: answered in {took:?}"
    );
    stuck.release().await;
    assert_eq!(
        change_via(&b.url, "close", x).await,
        200,
        "X once the lock is gone"
    );
}
