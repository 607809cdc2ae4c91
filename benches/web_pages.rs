//! The waiting page with 10 and with 10,000 open waits in the store: server
//! time and size (the budget is 50 ms and 100 KB: the page lists 50 and pages
//! the rest); then Flagger's steady-state check with no page open and with
//! open pages listening for changes (each refetching the waiting page on every
//! change, as the browser does) while gates keep changing.
//!
//!     cargo bench --bench web_pages
//!
//! Server and clients share this process and the machine's cores: compare the
//! two check runs with each other, not with other machines.

use std::time::{Duration, Instant};

use gatebot::{Config, Gatebot};
use gatebot_testkit::harness::{TestServer, ADMIN_TOKEN};
use serde_json::json;
use sqlx::Connection;

const PAGE_BUDGET: Duration = Duration::from_millis(50);
const SIZE_BUDGET: usize = 100 * 1024;
const PAGE_RUNS: usize = 200;
const CHECKERS: usize = 16;
const LIVE_PAGES: usize = 8;
const CHECK_RUN: Duration = Duration::from_secs(4);

/// `n` canaries waiting at `n` promote gates, as Flagger would have left them.
async fn seed(url: &str, n: usize) {
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    for i in 0..n {
        let key = format!("/gates/promote/seed/repo/pr/{}", i + 1);
        let meta = json!({"title": format!("Release {i}: faster <checkout> & more")}).to_string();
        sqlx::query(
            "INSERT INTO observations (gate_key, canary, checksum, phase, answer, reason, metadata, first_seen, last_seen) \
             VALUES ($1, $2, 'rev-a', 'Progressing', 'closed', 'waiting', $3, $4, $4)",
        )
        .bind(key.clone())
        .bind(format!("apps/app-{i}"))
        .bind(meta.clone())
        .bind(1_700_000_000_000_i64 + i as i64)
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO waits (gate_key, canary, checksum, phase, metadata, started_at) \
             VALUES ($1, $2, 'rev-a', 'Progressing', $3, $4)",
        )
        .bind(key)
        .bind(format!("apps/app-{i}"))
        .bind(meta)
        .bind(1_700_000_000_000_i64 + i as i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

async fn server(waits: usize) -> (TestServer, tempfile::TempDir) {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/gatebot.db", dir.path().display());
    let mut config = Config::with_database(&url);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    Gatebot::start(config.clone()).await.unwrap().stop().await;
    seed(&url, waits).await;
    (
        TestServer::start(config, gatebot::Options::default()).await,
        dir,
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn waiting_page(waits: usize) {
    let (server, _dir) = server(waits).await;
    let client = reqwest::Client::new();
    let url = server.at("/ui");
    let mut times = Vec::with_capacity(PAGE_RUNS);
    let mut size = 0;
    for _ in 0..PAGE_RUNS {
        let started = Instant::now();
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        size = r.bytes().await.unwrap().len();
        times.push(started.elapsed());
    }
    times.sort();
    let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
    let verdict = if p99 < PAGE_BUDGET && size < SIZE_BUDGET {
        "within budget"
    } else {
        "OVER BUDGET"
    };
    println!(
        "waiting page, {waits:>6} open waits: p50 {p50:>8.2?}  p99 {p99:>8.2?}  {:>6.1} KB  ({verdict}: 50 ms, 100 KB)",
        size as f64 / 1024.0
    );
    server.stop().await;
}

/// Steady-state checks per second and p99 over `CHECK_RUN`, with `pages`
/// open event streams while a gate is opened and closed every 50 ms. With
/// `refetch`, each page fetches /ui after a change, at most once per that
/// interval (zero: after every change; 700 ms: as the browser's script does).
async fn checks_with_pages(pages: usize, refetch: Option<Duration>) -> (f64, Duration, usize) {
    let (server, _dir) = server(1000).await;
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b"}).to_string();
    let check_url = server.at("/gates/promote/pr/42");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let end = Instant::now() + CHECK_RUN;

    let mut listeners = Vec::new();
    for _ in 0..pages {
        let (client, events, page) = (client.clone(), server.at("/ui/events"), server.at("/ui"));
        listeners.push(tokio::spawn(async move {
            let mut refreshed = 0;
            let mut last: Option<Instant> = None;
            let mut stream = client.get(&events).send().await.unwrap();
            while let Ok(Ok(Some(chunk))) =
                tokio::time::timeout_at(end.into(), stream.chunk()).await
            {
                if !String::from_utf8_lossy(&chunk).contains("event: change") {
                    continue;
                }
                let Some(every) = refetch else { continue };
                // Changes that arrive meanwhile are covered by the next fetch.
                if let Some(at) = last {
                    let due = at + every;
                    if Instant::now() < due {
                        tokio::time::sleep_until(due.into()).await;
                    }
                }
                client
                    .get(&page)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
                last = Some(Instant::now());
                refreshed += 1;
            }
            refreshed
        }));
    }
    let changer = {
        let (client, base) = (client.clone(), server.url.clone());
        tokio::spawn(async move {
            let mut open = true;
            while Instant::now() < end {
                let action = if open { "open" } else { "close" };
                client
                    .post(format!("{base}/api/v1/gates/{action}"))
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&json!({"gate": "/gates/promote/pr/7", "reason": "bench"}))
                    .send()
                    .await
                    .unwrap();
                open = !open;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let checkers: Vec<_> = (0..CHECKERS)
        .map(|_| {
            let (client, url, body) = (client.clone(), check_url.clone(), body.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < end {
                    let started = Instant::now();
                    let r = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 403);
                    r.bytes().await.unwrap();
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in checkers {
        all.extend(c.await.unwrap());
    }
    changer.await.unwrap();
    let mut refreshes = 0;
    for l in listeners {
        refreshes += l.await.unwrap();
    }
    server.stop().await;
    all.sort();
    (
        all.len() as f64 / CHECK_RUN.as_secs_f64(),
        percentile(&all, 0.99),
        refreshes,
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // A page lists 50: from 100 waits on, the same work whatever the store holds.
    for waits in [10, 100, 10_000] {
        waiting_page(waits).await;
    }
    for (pages, refetch, what) in [
        (0, None, "no page open"),
        (LIVE_PAGES, None, "pages listening"),
        (
            LIVE_PAGES,
            Some(Duration::ZERO),
            "pages refetching on each change",
        ),
        (
            LIVE_PAGES,
            Some(Duration::from_millis(700)),
            "pages refetching as the browser does (at most every 700 ms)",
        ),
    ] {
        let (rps, p99, refreshes) = checks_with_pages(pages, refetch).await;
        println!(
            "gate checks ({CHECKERS} connections), {pages} {what}: {rps:>8.0} checks/s  p99 {p99:>8.2?}  ({refreshes} refreshes)"
        );
    }
}
