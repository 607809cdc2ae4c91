//! Several replicas on one PostgreSQL database, and PostgreSQL going away.
//! These need GATEBOT_TEST_POSTGRES_URL (and for the outage test the PostgreSQL
//! binaries named by GATEBOT_TEST_PG_CTL); `bash .ci/run` provides both.

pub mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use serde_json::json;
use support::flagger::{FlaggerSim, Hook, HookType, Phase, Strategy};
use support::harness::{
    client, eventually, options_with, postgres_url, Backend, RecordingSink, TestDb, TestServer,
    ADMIN_TOKEN,
};

fn skip() -> bool {
    if postgres_url().is_none() {
        eprintln!("SKIPPED: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behind_flagger_agree() {
    if skip() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let sink_a = RecordingSink::new();
    let sink_b = RecordingSink::new();
    let a = TestServer::start(replica_config(&db), options_with(&sink_a, None)).await;
    let b = TestServer::start(replica_config(&db), options_with(&sink_b, None)).await;
    let (proxy, forwarded) = round_robin(vec![a.url.clone(), b.url.clone()]).await;

    let hooks = vec![
        Hook::new(
            "start-gate",
            HookType::ConfirmRollout,
            format!("{proxy}/gates/start/pr/42"),
        ),
        Hook::new(
            "promote-gate",
            HookType::ConfirmPromotion,
            format!("{proxy}/gates/promote/pr/42"),
        ),
        Hook::new(
            "rollback-gate",
            HookType::Rollback,
            format!("{proxy}/gates/rollback/pr/42"),
        ),
        Hook::new(
            "timeline",
            HookType::Event,
            format!("{proxy}/flagger/events"),
        )
        .with_metadata("pr", "42"),
    ];
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        hooks,
    );
    sim.tick().await;
    sim.deploy("rev-b");
    for _ in 0..4 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::Waiting);

    // Opened through one replica, open on both at once.
    a.open("/gates/start/pr/42").await;
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Waiting", "checksum": "rev-0000"});
    for server in [&a, &b] {
        let r = client()
            .get(server.at("/gates/start/pr/42"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "peek on {}", server.url);
        let _ = &body;
    }
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    for _ in 0..3 {
        sim.tick().await;
    }
    b.open("/gates/promote/pr/42").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 6).await, "promoted");
    assert!(
        forwarded.load(Ordering::SeqCst) > 10,
        "checks went to both replicas"
    );

    // Each wait was announced once across both replicas.
    eventually("both notices", Duration::from_secs(10), || async {
        sink_a.waits_started().len() + sink_b.waits_started().len() == 2
    })
    .await;
    let waits = a.api("/api/v1/waits").await;
    assert_eq!(waits["waits"].as_array().unwrap().len(), 2, "{waits}");
    let jobs = b.api("/api/v1/outbox").await;
    let wait_jobs = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["topic"] == "wait_started")
        .count();
    assert_eq!(wait_jobs, 2, "one job per wait: {jobs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
            gatebot::notify::Notice::GateChanged { gate, .. } => gate,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    gates.sort();
    gates.dedup();
    assert_eq!(gates.len(), 40, "none sent twice");

    // A replica that dies holding a job: another takes it once the lease runs out.
    a.stop().await;
    b.stop().await;
    let store = gatebot::store::Store::connect(&db.url).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let notice = gatebot::notify::Notice::GateChanged {
        gate: "/gates/promote/acme/shop/pr/99".into(),
        action: "open".into(),
        actor: gatebot::gate::Actor::new("alice", gatebot::gate::Source::Api),
        reason: None,
        at: now,
    };
    let mut tx = store.begin().await.unwrap();
    gatebot::store::Store::enqueue(&mut tx, &notice.job("test"), now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let taken = store
        .claim(
            gatebot::store::QueueName::Outbox,
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
