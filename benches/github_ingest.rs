//! Load benchmark for `POST /webhooks/github`: signed `issue_comment`
//! deliveries per second, time to acknowledge, and time from the
//! acknowledgement to the gate answering 200.
//!
//! `cargo bench --bench github_ingest` (release profile). gatebot runs
//! in-process on a SQLite file with a fake GitHub API on loopback; the load
//! generator shares the machine's cores with it. Knobs: GITHUB_BENCH_DELIVERIES,
//! GITHUB_BENCH_CONCURRENCY, GITHUB_BENCH_OPEN_SAMPLES.

use std::time::{Duration, Instant};

use gatebot::testing::github::verify::sign;
use gatebot::{Config, Options};
use gatebot_testkit::{fake_github, harness};
use serde_json::json;

const SECRET: &str = "bench-secret";

#[derive(Debug, Clone)]
pub struct Report {
    pub deliveries: usize,
    pub concurrency: usize,
    pub per_second: f64,
    pub ack_p50: Duration,
    pub ack_p99: Duration,
    pub ack_max: Duration,
    /// Commands applied per second by the inbox worker, backlog included.
    pub applied_per_second: f64,
    pub open_samples: usize,
    pub open_p50: Duration,
    pub open_p99: Duration,
    pub open_max: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Now, as GitHub writes times: commands are keyed by it and checked against closes.
fn written_at() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn payload(pr: u64, comment_id: u64, body: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": "created",
        "issue": {
            "number": pr, "state": "open", "title": "Bench",
            "user": {"login": "kobzol", "type": "User"},
            "pull_request": {"url": format!("https://api.github.com/repos/acme/shop/pulls/{pr}"), "merged_at": null},
            "labels": [], "body": "A pull request body of ordinary size. ".repeat(20),
        },
        "comment": {
            "id": comment_id, "body": body,
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

async fn send(
    client: &reqwest::Client,
    url: &str,
    delivery: &str,
    body: Vec<u8>,
) -> Result<(u16, Duration), reqwest::Error> {
    let sig = sign(SECRET, &body);
    let started = Instant::now();
    let r = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", sig)
        .body(body)
        .send()
        .await?;
    let status = r.status().as_u16();
    let _ = r.bytes().await?;
    Ok((status, started.elapsed()))
}

/// Runs the benchmark against a fresh in-process gatebot.
pub async fn run(deliveries: usize, concurrency: usize, open_samples: usize) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let github = fake_github::FakeGithub::start().await;
    github.set_permission("alice", "write");
    let mut config =
        Config::with_database(&format!("sqlite://{}/gatebot.db", dir.path().display()));
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_bench".to_string().into());
    config.github.api_url = github.url.clone();
    config.github.repository = Some("acme/shop".parse().unwrap());
    let server = harness::TestServer::start(config, Options::default()).await;
    let base = server.url.clone();
    let url = format!("{base}/webhooks/github");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();

    // Warm up: the permission answer is cached from here on.
    let (status, _) = send(&client, &url, "warmup", payload(1, 1, "/promote"))
        .await
        .unwrap();
    assert_eq!(status, 202);
    let warm = format!("{base}/gates/promote/acme/shop/pr/1");
    while client.get(&warm).send().await.unwrap().status() != 200 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // Throughput and time to acknowledge: `concurrency` senders, each its own PR.
    let started = Instant::now();
    let mut tasks = Vec::new();
    let per_task = deliveries / concurrency;
    for t in 0..concurrency {
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_task);
            for i in 0..per_task {
                let n = (t * per_task + i) as u64;
                let pr = 10_000 + n;
                let body = payload(pr, 100_000 + n, "/promote ship it");
                let (status, took) = send(&client, &url, &format!("load-{n}"), body)
                    .await
                    .unwrap();
                assert_eq!(status, 202);
                lat.push(took);
            }
            lat
        }));
    }
    let mut acks = Vec::new();
    for t in tasks {
        acks.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    acks.sort();
    let sent = acks.len();
    eprintln!("  acknowledged {sent} in {elapsed:?}; waiting for the inbox to apply them");

    // Let the inbox catch up before measuring acknowledgement-to-open on a quiet server.
    let last = format!(
        "{base}/gates/promote/acme/shop/pr/{}",
        10_000 + sent as u64 - 1
    );
    while client.get(&last).send().await.unwrap().status() != 200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let applied_per_second = sent as f64 / started.elapsed().as_secs_f64();
    eprintln!("  all applied after {:?}", started.elapsed());
    let mut opens = Vec::new();
    for i in 0..open_samples as u64 {
        let pr = 500_000 + i;
        let gate = format!("{base}/gates/promote/acme/shop/pr/{pr}");
        let (status, _) = send(
            &client,
            &url,
            &format!("open-{i}"),
            payload(pr, 900_000 + i, "/promote"),
        )
        .await
        .unwrap();
        assert_eq!(status, 202);
        let acked = Instant::now();
        loop {
            if client.get(&gate).send().await.unwrap().status() == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        opens.push(acked.elapsed());
    }
    opens.sort();
    server.stop().await;
    Report {
        deliveries: sent,
        concurrency,
        per_second: sent as f64 / elapsed.as_secs_f64(),
        applied_per_second,
        ack_p50: percentile(&acks, 0.50),
        ack_p99: percentile(&acks, 0.99),
        ack_max: acks.last().copied().unwrap_or_default(),
        open_samples,
        open_p50: percentile(&opens, 0.50),
        open_p99: percentile(&opens, 0.99),
        open_max: opens.last().copied().unwrap_or_default(),
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (deliveries, concurrency, samples) = if quick {
        (200, 8, 10)
    } else {
        (
            env_usize("GITHUB_BENCH_DELIVERIES", 5_000),
            env_usize("GITHUB_BENCH_CONCURRENCY", 32),
            env_usize("GITHUB_BENCH_OPEN_SAMPLES", 200),
        )
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let r = runtime.block_on(run(deliveries, concurrency, samples));
    println!(
        "github_ingest: {} signed issue_comment deliveries, {} concurrent senders",
        r.deliveries, r.concurrency
    );
    println!("  throughput        {:>10.0} deliveries/s", r.per_second);
    println!(
        "  ack p50 / p99 / max  {:?} / {:?} / {:?}",
        r.ack_p50, r.ack_p99, r.ack_max
    );
    println!(
        "  ack -> gate 200 ({} samples) p50 / p99 / max  {:?} / {:?} / {:?}",
        r.open_samples, r.open_p50, r.open_p99, r.open_max
    );
}
