//! Load benchmark for Flagger's hot path: gate checks per second and latency,
//! as a ratio to the same server's `/healthz`, with 100 and 100,000 gates stored.
//!
//!     cargo bench --bench gate_check            # SQLite
//!     GATEBOT_BENCH_POSTGRES_URL=postgres://… cargo bench --bench gate_check
//!
//! Server and load generator share this process (and the machine's cores), so
//! the ratio matters more than the absolute numbers. Logging is set up as the
//! server's `main` sets it up (`telemetry::init`, `RUST_LOG` or else `info`,
//! text to stderr), because what the check logs is part of what it costs;
//! send stderr to a file (`2>gate_check.log`) as a container runtime would.
//! `GATE_CHECK_ONLY=<case>` runs one case alone, for `perf record -p`;
//! `GATE_CHECK_EVIDENCE_ONLY=1` only the evidence comparison (issue 29). With
//! PostgreSQL it ends with SQLite and a PostgreSQL replica checked in turns:
//! the replica's rate as a share of SQLite's (issue 15's goal is 0.8).

use std::time::{Duration, Instant};

use gatebot::testing::telemetry;
use gatebot::{Config, Gatebot};
use gatebot_testkit::harness;
use serde_json::json;
use sqlx::Connection;

const CONCURRENCY: usize = 32;
/// Time per case, taken in `ROUNDS` slices that take turns with the other
/// cases, so that a neighbour's build slows them all alike.
const RUN: Duration = Duration::from_secs(4);
const ROUNDS: u32 = 4;
const WARMUP: Duration = Duration::from_millis(500);

struct Stats {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

/// One case: a URL asked by `CONCURRENCY` keep-alive connections.
struct Load {
    client: reqwest::Client,
    url: String,
    body: Option<String>,
}

impl Load {
    fn new(url: String, body: Option<String>) -> Self {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(CONCURRENCY)
            .build()
            .unwrap();
        Self { client, url, body }
    }

    /// Every request's latency, for `duration`.
    async fn run(&self, duration: Duration) -> Vec<Duration> {
        let tasks: Vec<_> = (0..CONCURRENCY)
            .map(|_| {
                let (client, url, body) =
                    (self.client.clone(), self.url.clone(), self.body.clone());
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(1 << 16);
                    let end = Instant::now() + duration;
                    while Instant::now() < end {
                        let started = Instant::now();
                        let req = match &body {
                            Some(b) => client
                                .post(&url)
                                .header("content-type", "application/json")
                                .body(b.clone()),
                            None => client.get(&url),
                        };
                        let r = req.send().await.expect("request");
                        assert!(
                            r.status().as_u16() == 200 || r.status().as_u16() == 403,
                            "{}",
                            r.status()
                        );
                        r.bytes().await.unwrap();
                        latencies.push(started.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    }
}

/// Runs the cases in turns and sums each one's slices.
async fn measure(cases: &[Load]) -> Vec<Stats> {
    for case in cases {
        case.run(WARMUP).await;
    }
    let mut taken: Vec<(Vec<Duration>, Duration)> =
        cases.iter().map(|_| Default::default()).collect();
    for _ in 0..ROUNDS {
        for (case, (latencies, elapsed)) in cases.iter().zip(&mut taken) {
            let started = Instant::now();
            latencies.extend(case.run(RUN / ROUNDS).await);
            *elapsed += started.elapsed();
        }
    }
    taken
        .into_iter()
        .map(|(mut latencies, elapsed)| {
            latencies.sort();
            Stats {
                rps: latencies.len() as f64 / elapsed.as_secs_f64(),
                p50: latencies[latencies.len() / 2],
                p99: latencies[latencies.len() * 99 / 100],
            }
        })
        .collect()
}

/// Stores `n` open gates straight into the database, as if people had approved them.
async fn seed(url: &str, n: usize) {
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    for i in 0..n {
        sqlx::query(
            "INSERT INTO gates (key, status, approval_id, actor, source, reason, changed_at, expires_at) \
             VALUES ($1, 'open', $2, 'seed', 'api', NULL, 0, NULL) ON CONFLICT DO NOTHING",
        )
        .bind(format!("/gates/promote/seed/repo/pr/{}", i + 1))
        .bind(format!("approval-{i}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

async fn scenario(database_url: &str, gates: usize) {
    sqlx::any::install_default_drivers();
    // Create the schema, then seed, then start the server that serves it.
    let mut config = Config::with_database(database_url);
    config.github.repository = Some("acme/shop".parse().unwrap());
    Gatebot::start(config.clone()).await.unwrap().stop().await;
    let seeding = Instant::now();
    seed(database_url, gates).await;
    let seeded = seeding.elapsed();

    let server = harness::TestServer::start(config, gatebot::Options::default()).await;
    let base = server.url.clone();
    // The steady state: one canary polling one gate with the same revision.
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b"}).to_string();
    let cases = [
        Load::new(format!("{base}/healthz"), None),
        Load::new(format!("{base}/gates/promote/pr/42"), Some(body.clone())),
        Load::new(
            format!("{base}/gates/promote/seed/repo/pr/{}", gates / 2 + 1),
            Some(body),
        ),
        // The same closed gate looked at without a body: the check's work
        // without the cost of sending and reading Flagger's body.
        Load::new(format!("{base}/gates/promote/pr/42"), None),
    ];
    // For a profiler: `GATE_CHECK_ONLY=1` runs the closed gate alone for 10 s
    // (0 `/healthz`, 1 closed, 2 open, 3 GET without a body).
    if let Some(i) = std::env::var("GATE_CHECK_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let taken = cases[i].run(Duration::from_secs(10)).await.len();
        println!("case {i} alone: {:.0} req/s", taken as f64 / 10.0);
        server.stop().await;
        return;
    }
    let stats = measure(&cases).await;
    let [health, closed, open, peek] = &stats[..] else {
        unreachable!("four cases")
    };
    server.stop().await;
    report(database_url, gates, seeded, health, closed, open, peek);
}

fn report(
    database_url: &str,
    gates: usize,
    seeded: Duration,
    health: &Stats,
    closed: &Stats,
    open: &Stats,
    peek: &Stats,
) {
    let backend = database_url.split(':').next().unwrap_or("?");
    println!("{backend}, {gates} gates stored (seeded in {seeded:.1?}), {CONCURRENCY} connections, {RUN:?} each in {ROUNDS} turns:");
    for (name, s) in [
        ("/healthz", health),
        ("gate check, closed", closed),
        ("gate check, open+pinned", open),
        ("GET gate, no body", peek),
    ] {
        println!(
            "  {name:<26} {:>8.0} req/s  p50 {:>7.2?}  p99 {:>7.2?}  ratio to /healthz {:.2}",
            s.rps,
            s.p50,
            s.p99,
            s.rps / health.rps
        );
    }
    // Issue 32's figures: the slower of the two steady-state checks.
    let (name, check) = if closed.rps <= open.rps {
        ("closed", closed)
    } else {
        ("open+pinned", open)
    };
    let ratio = check.rps / health.rps;
    println!("  => gate check ({name}): {:.0} req/s; /healthz: {:.0} req/s; ratio {ratio:.2} (goal >= 0.90); check p99 {:.2?} (goal <= 2 ms on an idle machine)",
        check.rps, health.rps, check.p99);
}

/// A policy of 100 rules: deadlines, reminders, per-command rules, freezes',
/// approvals by several people, break glass and release windows (one of them
/// covering the promote gate, open all day).
fn hundred_rules() -> String {
    let mut p = String::from(
        "holidays = [\"2030-12-25\"]\n\n[reminders]\nat = [\"30m\", \"2h\", \"8h\"]\n\n",
    );
    for c in [
        "start", "promote", "traffic", "rollback", "hold", "unhold", "freeze", "unfreeze",
    ] {
        p += &format!("[github.commands.{c}]\nmin_permission = \"write\"\n\n[slack.commands.{c}]\napprovers = [\"U0\", \"S0\"]\n\n");
    }
    for i in 0..60 {
        let kind = ["start", "promote", "traffic"][i % 3];
        p += &format!("[[deadlines]]\nkind = \"{kind}\"\nafter = \"{}h\"\nnamespace = \"ns{i}\"\non_deadline = \"nothing\"\n\n", i + 1);
    }
    // Approvals by several people, in namespaces the bench's gates are not in
    // (its gates are opened by one API call).
    for i in 60..70 {
        let kind = ["start", "promote", "traffic"][i % 3];
        p += &format!("[[approvals]]\nkind = \"{kind}\"\nrequired = 2\nnamespace = \"ns{i}\"\n\n");
    }
    p += "[github.commands.force]\nmin_permission = \"admin\"\n\n";
    for kind in ["promote", "start", "traffic"] {
        p += &format!("[[windows]]\nkind = \"{kind}\"\nfrom = \"00:00\"\nto = \"23:59:59\"\ntimezone = \"Europe/Berlin\"\n\n");
    }
    p += "[users]\n";
    for i in 0..11 {
        p += &format!("user{i} = \"U{i}\"\n");
    }
    p
}

/// The same steady-state checks on two servers, one without a policy and one
/// with 100 rules, measured in turns: the policy must cost under 10 %.
async fn policy_scenario() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let policy = dirs[1].path().join("policy.toml");
    std::fs::write(&policy, hundred_rules()).unwrap();
    let mut servers = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let url = format!("sqlite://{}/gatebot.db", dir.path().display());
        let mut config = Config::with_database(&url);
        config.github.repository = Some("acme/shop".parse().unwrap());
        if i == 1 {
            config.policy = Some(policy.clone());
        }
        Gatebot::start(config.clone()).await.unwrap().stop().await;
        seed(&url, 100).await;
        servers.push(harness::TestServer::start(config, gatebot::Options::default()).await);
    }
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b"}).to_string();
    let check = |s: &harness::TestServer| {
        Load::new(format!("{}/gates/promote/pr/42", s.url), Some(body.clone()))
    };
    let open = |s: &harness::TestServer| {
        Load::new(
            format!("{}/gates/promote/seed/repo/pr/51", s.url),
            Some(body.clone()),
        )
    };
    let cases = [
        check(&servers[0]),
        check(&servers[1]),
        open(&servers[0]),
        open(&servers[1]),
    ];
    let stats = measure(&cases).await;
    for s in servers {
        s.stop().await;
    }
    println!("sqlite, 100 gates, without a policy and with 100 rules, in turns:");
    for (name, without, with) in [
        ("closed", &stats[0], &stats[1]),
        ("open+pinned", &stats[2], &stats[3]),
    ] {
        println!(
            "  => gate check ({name}): {:.0} req/s without a policy, {:.0} with 100 rules; ratio {:.2} (goal >= 0.90); p99 {:.2?} / {:.2?}",
            without.rps, with.rps, with.rps / without.rps, without.p99, with.p99
        );
    }
}

/// Issue 29: the same steady-state checks on two servers, one without
/// Prometheus and one whose Prometheus takes a second per query (its numbers
/// read every second, each query timing out): the evidence never touches
/// the check, so the ratio is the noise between runs.
async fn evidence_scenario() {
    let prometheus = gatebot_testkit::fake_prometheus::FakePrometheus::start().await;
    prometheus.slow(Duration::from_secs(1));
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut servers = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let url = format!("sqlite://{}/gatebot.db", dir.path().display());
        let mut config = Config::with_database(&url);
        config.github.repository = Some("acme/shop".parse().unwrap());
        if i == 1 {
            config.prometheus.url = Some(prometheus.url.clone());
            config.limits.evidence_refresh = Duration::from_secs(1);
            config.limits.prometheus_timeout = Duration::from_millis(900);
        }
        Gatebot::start(config.clone()).await.unwrap().stop().await;
        seed(&url, 100).await;
        servers.push(harness::TestServer::start(config, gatebot::Options::default()).await);
    }
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b"}).to_string();
    let check = |s: &harness::TestServer| {
        Load::new(format!("{}/gates/promote/pr/42", s.url), Some(body.clone()))
    };
    let cases = [check(&servers[0]), check(&servers[1])];
    let stats = measure(&cases).await;
    for s in servers {
        s.stop().await;
    }
    println!(
        "sqlite, 100 gates, evidence off and on with a Prometheus that takes 1 s ({} queries asked), in turns:",
        prometheus.queries().len()
    );
    let (off, on) = (&stats[0], &stats[1]);
    println!(
        "  => gate check (closed, waiting): {:.0} req/s evidence off, {:.0} on; ratio {:.2} (goal: the noise, >= 0.90); p99 {:.2?} / {:.2?}",
        off.rps, on.rps, on.rps / off.rps, off.p99, on.p99
    );
}

/// Issue 15: the same steady-state checks on a SQLite server and on a
/// PostgreSQL replica (once it answers from memory), in turns, so that a
/// neighbour's build slows both alike: PostgreSQL's share of SQLite's rate.
async fn replica_scenario(pg_database: &str) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}/gatebot.db", dir.path().display());
    let mut servers = Vec::new();
    for url in [sqlite.as_str(), pg_database] {
        let mut config = Config::with_database(url);
        config.github.repository = Some("acme/shop".parse().unwrap());
        Gatebot::start(config.clone()).await.unwrap().stop().await;
        seed(url, 100).await;
        servers.push(harness::TestServer::start(config, gatebot::Options::default()).await);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while servers[1].state.metrics.gate_cache_trusted.get() != 1 {
        assert!(
            Instant::now() < deadline,
            "the replica never answered from memory"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b"}).to_string();
    let check = |s: &harness::TestServer, path: &str| {
        Load::new(format!("{}{path}", s.url), Some(body.clone()))
    };
    let (closed, open) = ("/gates/promote/pr/42", "/gates/promote/seed/repo/pr/51");
    let cases = [
        check(&servers[0], closed),
        check(&servers[1], closed),
        check(&servers[0], open),
        check(&servers[1], open),
    ];
    let stats = measure(&cases).await;
    for s in servers {
        s.stop().await;
    }
    println!("sqlite and a postgres replica, 100 gates each, in turns:");
    for (name, sqlite, pg) in [
        ("closed", &stats[0], &stats[1]),
        ("open+pinned", &stats[2], &stats[3]),
    ] {
        println!(
            "  => gate check ({name}): {:.0} req/s on SQLite, {:.0} on a PostgreSQL replica; ratio {:.2} (goal >= 0.80); p99 {:.2?} / {:.2?}",
            sqlite.rps, pg.rps, pg.rps / sqlite.rps, sqlite.p99, pg.p99
        );
    }
}

fn main() {
    // As `main` does: RUST_LOG, or `info` when it is unset.
    telemetry::init(Config::with_database("sqlite::memory:").log_format);
    println!(
        "RUST_LOG={}",
        std::env::var("RUST_LOG").unwrap_or_else(|_| "(unset: info)".into())
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if std::env::var("GATE_CHECK_POLICY_ONLY").is_ok() {
            policy_scenario().await;
            return;
        }
        if std::env::var("GATE_CHECK_EVIDENCE_ONLY").is_ok() {
            evidence_scenario().await;
            return;
        }
        for gates in [100, 100_000] {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}/gatebot.db", dir.path().display());
            scenario(&url, gates).await;
        }
        policy_scenario().await;
        evidence_scenario().await;
        if let Ok(pg) = std::env::var("GATEBOT_BENCH_POSTGRES_URL") {
            for gates in [100, 100_000] {
                let mut admin = sqlx::PgConnection::connect(&pg).await.unwrap();
                let name = format!("gatebot_bench_{}", uuid::Uuid::new_v4().simple());
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                let base = pg.rsplit_once('/').map_or(pg.as_str(), |(b, _)| b);
                let database = format!("{base}/{name}");
                scenario(&database, gates).await;
                if gates == 100 {
                    replica_scenario(&database).await;
                }
            }
        }
    });
}
