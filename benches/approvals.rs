//! End-to-end approvals per second: a signed `/promote` comment is posted to
//! one replica, and the approval counts when Flagger's gate check on the
//! *other* replica answers 200. SQLite runs one replica (it is single-writer);
//! PostgreSQL runs two in this process, sharing one database.
//!
//!     cargo bench --bench approvals                                   # SQLite
//!     GATEBOT_BENCH_POSTGRES_URL=postgres://… cargo bench --bench approvals
//!
//! Knobs: APPROVALS_BENCH_COUNT (default 1,000), APPROVALS_BENCH_CONCURRENCY (16),
//! APPROVALS_BENCH_POLL_MS (5: how often an approver checks the gate).
//! It also times one durable commit on each store, the unit most of an
//! approval's time is spent in.

use std::time::{Duration, Instant};

use gatebot::testing::github::verify::sign;
use gatebot::{Config, Options};
use gatebot_testkit::{fake_github, harness};
use serde_json::json;
use sqlx::Connection;

const SECRET: &str = "bench-secret";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn poll_ms() -> u64 {
    env_usize("APPROVALS_BENCH_POLL_MS", 5) as u64
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Now, as GitHub writes times: commands are keyed by it and checked against closes.
fn written_at() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn payload(pr: u64, comment_id: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": "created",
        "issue": {
            "number": pr, "state": "open", "title": "Bench",
            "user": {"login": "kobzol", "type": "User"},
            "pull_request": {"url": format!("https://api.github.com/repos/acme/shop/pulls/{pr}"), "merged_at": null},
            "labels": [], "body": "A pull request body of ordinary size. ".repeat(20),
        },
        "comment": {
            "id": comment_id, "body": "/promote",
            "user": {"login": "alice", "id": 1, "type": "User"},
            "author_association": "MEMBER",
            "created_at": written_at(), "updated_at": written_at(),
            "html_url": format!("https://github.com/acme/shop/pull/{pr}#issuecomment-{comment_id}"),
        },
        "repository": {"id": 1, "name": "shop", "full_name": "acme/shop", "private": true,
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": {"login": "alice", "type": "User"},
        "installation": {"id": 1},
    }))
    .unwrap()
}

async fn replica(database_url: &str, github: &fake_github::FakeGithub) -> harness::TestServer {
    let mut config = Config::with_database(database_url);
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_bench".to_string().into());
    config.github.api_url = github.url.clone();
    config.github.repository = Some("acme/shop".parse().unwrap());
    harness::TestServer::start(config, Options::default()).await
}

/// One approval: (time to acknowledge, time until the other replica opens).
async fn approve(client: &reqwest::Client, bases: &[String], k: u64) -> (Duration, Duration) {
    let to = &bases[k as usize % bases.len()];
    let check = &bases[(k as usize + 1) % bases.len()];
    let body = payload(k, 1_000_000 + k);
    let started = Instant::now();
    let r = client
        .post(format!("{to}/webhooks/github"))
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", format!("approval-{k}"))
        .header("x-hub-signature-256", sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let acked = started.elapsed();
    let gate = format!("{check}/gates/promote/acme/shop/pr/{k}");
    while client.get(&gate).send().await.unwrap().status() != 200 {
        // Gentle enough that the polling does not starve the server it measures.
        tokio::time::sleep(Duration::from_millis(poll_ms())).await;
    }
    (acked, started.elapsed())
}

struct Report {
    replicas: usize,
    approvals: usize,
    per_second: f64,
    ack_p50: Duration,
    ack_p99: Duration,
    e2e_p50: Duration,
    e2e_p99: Duration,
}

/// Posts `/promote` deliveries round-robin and waits for each gate on the next replica.
async fn run(urls: &[String], count: usize, concurrency: usize) -> Report {
    let github = fake_github::FakeGithub::start().await;
    github.set_permission("alice", "write");
    let mut replicas = Vec::new();
    for url in urls {
        replicas.push(replica(url, &github).await);
    }
    let bases: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(2 * concurrency)
        .build()
        .unwrap();
    // Warm every replica's permission cache.
    for k in 0..bases.len() as u64 {
        approve(&client, &bases, k + 1).await;
    }
    let started = Instant::now();
    let per_task = count / concurrency;
    let tasks: Vec<_> = (0..concurrency)
        .map(|t| {
            let (client, bases) = (client.clone(), bases.clone());
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(per_task);
                for i in 0..per_task {
                    out.push(approve(&client, &bases, (100 + t * per_task + i) as u64).await);
                }
                out
            })
        })
        .collect();
    let mut acks = Vec::new();
    let mut e2e = Vec::new();
    for t in tasks {
        for (a, e) in t.await.unwrap() {
            acks.push(a);
            e2e.push(e);
        }
    }
    let elapsed = started.elapsed();
    acks.sort();
    e2e.sort();
    for r in replicas {
        r.stop().await;
    }
    Report {
        replicas: urls.len(),
        approvals: e2e.len(),
        per_second: e2e.len() as f64 / elapsed.as_secs_f64(),
        ack_p50: percentile(&acks, 0.5),
        ack_p99: percentile(&acks, 0.99),
        e2e_p50: percentile(&e2e, 0.5),
        e2e_p99: percentile(&e2e, 0.99),
    }
}

fn print(store: &str, r: &Report) {
    println!(
        "  {store}, {} replica(s): {:.0} approvals/s over {}; ack p50/p99 {:.1?}/{:.1?}; delivery -> gate 200 on the other replica p50/p99 {:.1?}/{:.1?}",
        r.replicas, r.per_second, r.approvals, r.ack_p50, r.ack_p99, r.e2e_p50, r.e2e_p99
    );
}

/// Median time of one single-row INSERT committed durably, in isolation.
async fn commit_time(url: &str) -> Duration {
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(url).await.unwrap();
    // gatebot's own SQLite settings: WAL, and a flush per commit.
    let setup: &[&str] = if url.starts_with("sqlite") {
        &["PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"]
    } else {
        &[]
    };
    for q in setup.iter().chain(&["CREATE TABLE t (v INTEGER)"]) {
        sqlx::query(q).execute(&mut c).await.unwrap();
    }
    let mut times = Vec::new();
    for i in 0..200 {
        let s = Instant::now();
        sqlx::query("INSERT INTO t VALUES ($1)")
            .bind(i)
            .execute(&mut c)
            .await
            .unwrap();
        times.push(s.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

async fn fresh_pg(admin: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    let name = format!("gatebot_bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
    format!("{base}/{name}")
}

fn main() {
    let count = env_usize("APPROVALS_BENCH_COUNT", 1_000);
    let concurrency = env_usize("APPROVALS_BENCH_CONCURRENCY", 16);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        println!(
            "approvals: {count} signed /promote deliveries, {concurrency} concurrent approvers"
        );
        let dir = tempfile::tempdir().unwrap();
        let sqlite = format!("sqlite://{}/gatebot.db", dir.path().display());
        let lite = run(&[sqlite], count, concurrency).await;
        print("SQLite", &lite);
        let probe = format!("sqlite://{}/probe.db?mode=rwc", dir.path().display());
        println!(
            "  one durable commit: SQLite {:.2?}",
            commit_time(&probe).await
        );
        if let Ok(admin) = std::env::var("GATEBOT_BENCH_POSTGRES_URL") {
            let db = fresh_pg(&admin).await;
            let pg = run(&[db.clone(), db], count, concurrency).await;
            print("PostgreSQL", &pg);
            println!(
                "  one durable commit: PostgreSQL {:.2?}",
                commit_time(&fresh_pg(&admin).await).await
            );
            println!(
                "  ratio PostgreSQL (2 replicas) / SQLite (1): {:.2}",
                pg.per_second / lite.per_second
            );
        }
    });
}
