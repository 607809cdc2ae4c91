//! A year in production, compressed. The real binary runs day after simulated
//! day: each day starts a new process whose clock is moved on by a day
//! (`GATEBOT_TEST_CLOCK_OFFSET`), takes a day's traffic (canaries waiting on
//! their PRs, approvals, closes, freezes, named gates, Flagger's events), is
//! killed (SIGKILL every third day, else SIGTERM) and started again, and must
//! still give every approval it acknowledged, each applied once, checked
//! against a model of what should be open that this test keeps itself. Every
//! simulated week it measures the process's resident memory, the store's size
//! and rows, the queues and the check's p99, prints a row, and asserts that
//! none of them grows with time once retention has reached its steady state.
//!
//! `.ci/run` runs the short form (6 weeks); `GATEBOT_SOAK=long cargo test
//! --release --test suite soak:: -- --nocapture` runs a year (BENCHMARKS.md has its table).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gatebot_testkit::harness::{client, metric_value, Backend, TestDb, ADMIN_TOKEN};
use gatebot_testkit::raw::memory_kb;
use gatebot_testkit::served::{limits_policy, Served};
use serde_json::{json, Value};
use sqlx::Connection;

const PIPELINE_TOKEN: &str = "soak-pipeline-token";
const CANARIES: u64 = 200;
const NAMESPACES: u64 = 5;
/// Retention scaled to the run: a steady state within three weeks.
const RETENTION: [(&str, &str); 6] = [
    ("retention_payloads", "1d"),
    ("retention_deliveries", "2d"),
    ("retention_history", "7d"),
    ("retention_audit", "14d"),
    ("retention_interval", "1s"),
    ("named_gate_retention", "7d"),
];
/// The tables that grow with traffic.
const TABLES: &[&str] = &[
    "gates",
    "pins",
    "observations",
    "waits",
    "audit",
    "events",
    "outbox",
    "inbox",
    "named_gates",
    "votes",
    "freezes",
    "slack_messages",
    "status_comments",
];
/// From this week on nothing may grow: history (7d) and audit (14d) have
/// reached their steady state.
const STEADY_FROM_WEEK: usize = 3;

struct Plan {
    weeks: u64,
    prs_per_day: u64,
}

fn plan() -> Plan {
    match std::env::var("GATEBOT_SOAK").as_deref() {
        Ok("long") => Plan {
            weeks: 52,
            prs_per_day: 24,
        },
        _ => Plan {
            weeks: 6,
            prs_per_day: 12,
        },
    }
}

/// What should be true of one PR's promote gate, by this test's own account.
struct Expected {
    gate: String,
    canary: String,
    namespace: String,
    revision: String,
    opens: usize,
}

/// One simulated week's measurements.
#[derive(Debug, Clone, Copy)]
struct Week {
    rss_kb: u64,
    store_bytes: f64,
    rows: f64,
    pending: f64,
    p99_ms: f64,
}

struct Soak {
    db: TestDb,
    /// One on SQLite; two on PostgreSQL, taking requests in turn.
    replicas: Vec<Option<Served>>,
    turn: AtomicUsize,
    /// Answers that said "try again" (a check past its deadline, a 503): a
    /// replica just restarted, or the machine is loaded. Flagger and pipelines
    /// try again; so does the soak, and it says how often.
    busy: AtomicUsize,
    day: u64,
    prs_per_day: u64,
    http: reqwest::Client,
}

impl Soak {
    fn env(&self) -> Vec<(&'static str, String)> {
        let dir = self.db.dir.path();
        let mut env: Vec<(&str, String)> = vec![
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop".into()),
            ("GATEBOT_PIPELINE_TOKEN", PIPELINE_TOKEN.into()),
            ("RUST_LOG", "warn".into()),
            (
                "GATEBOT_TEST_CLOCK_OFFSET",
                format!("{}s", self.day * 24 * 3600),
            ),
            // The simulated date, not corrected to PostgreSQL's clock.
            ("GATEBOT_TEST_CLOCK_SIMULATED", "true".into()),
        ];
        if std::env::var("GATEBOT_SOAK_RETENTION").as_deref() == Ok("off") {
            // For the comparison only: everything kept (as long as settings allow).
            let kept: Vec<(&str, &str)> = RETENTION
                .iter()
                .map(|(k, _)| {
                    let v = match *k {
                        "retention_interval" => "1s",
                        "retention_audit" => "0",
                        "retention_payloads" => "365d",
                        _ => "3650d",
                    };
                    (*k, v)
                })
                .collect();
            env.push(("GATEBOT_POLICY", limits_policy(dir, &kept)));
        } else {
            env.push(("GATEBOT_POLICY", limits_policy(dir, &RETENTION)));
        }
        env
    }

    fn start(&mut self, which: usize) {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.replicas[which] = Some(Served::start(&self.db, &env));
    }

    fn start_all(&mut self) {
        for which in 0..self.replicas.len() {
            self.start(which);
        }
    }

    fn stop_all(&mut self) {
        for which in 0..self.replicas.len() {
            self.stop(which, false);
        }
    }

    /// Ends a process: SIGKILL (nothing flushed, nothing said) or SIGTERM.
    fn stop(&mut self, which: usize, kill: bool) {
        let served = self.replicas[which].take().expect("running");
        served.signal(if kill { "KILL" } else { "TERM" });
        let (status, logs) = served.wait();
        assert!(
            kill || status.success(),
            "day {}: gatebot exited {status}: {logs}",
            self.day
        );
    }

    /// `path` on the next replica in turn.
    fn url(&self, path: &str) -> String {
        let which = self.turn.fetch_add(1, Ordering::Relaxed) % self.replicas.len();
        let served = self.replicas[which].as_ref().expect("running");
        format!("{}{path}", served.url)
    }

    fn first(&self) -> &Served {
        self.replicas[0].as_ref().expect("running")
    }

    async fn check(&self, gate: &str, e: &Expected) -> u16 {
        let body = json!({"name": e.canary, "namespace": e.namespace,
                          "phase": "Progressing", "checksum": e.revision});
        self.post(gate, None, &body).await.0
    }

    async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, String) {
        self.post_to(&self.url(path), token, body).await
    }

    async fn post_to(&self, url: &str, token: Option<&str>, body: &Value) -> (u16, String) {
        self.send(|| {
            let request = self.http.post(url).json(body);
            match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            }
        })
        .await
    }

    async fn delete(&self, path: &str, token: &str) -> (u16, String) {
        let url = self.url(path);
        self.send(|| self.http.delete(&url).bearer_auth(token))
            .await
    }

    /// Sends a request, again on the same replica while it says "try again",
    /// for at most 10 s: what Flagger's next poll and a pipeline's retry do.
    async fn send(&self, request: impl Fn() -> reqwest::RequestBuilder) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = request().send().await.expect("gatebot answers");
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            let busy =
                status == 503 || (status == 403 && text == gatebot::testing::core::STORE_BUSY);
            if !busy || Instant::now() > deadline {
                return (status, text);
            }
            self.busy.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn admin(&self, path: &str, body: Value) -> (u16, String) {
        self.post(path, Some(ADMIN_TOKEN), &body).await
    }

    async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.first().url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn opens(&self, gate: &str) -> usize {
        let path = format!("/api/v1/gates{}", &gate["/gates".len()..]);
        let v: Value = self
            .http
            .get(self.url(&path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["audit"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|e| e["action"] == "open").count())
    }

    /// One PR's life in a day: its canary waits, people decide, Flagger passes.
    async fn pull_request(&self, id: u64) -> Expected {
        let e = Expected {
            gate: format!("/gates/promote/acme/shop/pr/{}", id + 1),
            canary: format!("svc-{}", id % CANARIES),
            namespace: format!("team-{}", id % NAMESPACES),
            revision: format!("r{id}"),
            opens: 1,
        };
        assert_eq!(self.check(&e.gate, &e).await, 403, "{} waits", e.gate);
        let event = json!({"name": e.canary, "namespace": e.namespace, "phase": "Progressing",
            "checksum": e.revision, "metadata": {"eventMessage": "Advance svc canary weight 10",
            "eventType": "Normal", "pr": (id + 1).to_string()}});
        let (status, _) = self.post("/flagger/events", None, &event).await;
        assert!(status < 300, "event: {status}");
        let open = json!({"gate": e.gate, "reason": "soak"});
        let e = match id % 10 {
            6 | 7 => {
                assert_eq!(self.admin("/api/v1/gates/open", open.clone()).await.0, 200);
                let close = json!({"gate": e.gate, "reason": "second thoughts"});
                assert_eq!(self.admin("/api/v1/gates/close", close).await.0, 200);
                Expected { opens: 2, ..e }
            }
            8 => {
                // Approved during a freeze: held back until it is lifted.
                let scope = format!("ns/{}", e.namespace);
                let freeze = json!({"scope": scope, "reason": "soak freeze", "for": "1h"});
                assert_eq!(self.admin("/api/v1/freezes", freeze).await.0, 201);
                assert_eq!(self.admin("/api/v1/gates/open", open.clone()).await.0, 200);
                if self.replicas.len() == 1 {
                    // Another replica sees a freeze within seconds (docs/policy.md).
                    assert_eq!(self.check(&e.gate, &e).await, 403, "frozen");
                }
                let lift = format!("/api/v1/freezes?scope={scope}");
                assert_eq!(self.delete(&lift, ADMIN_TOKEN).await.0, 200);
                self.passes(&e).await;
                return e;
            }
            9 => {
                self.named_gate(id).await;
                e
            }
            _ => e,
        };
        let (status, text) = self.admin("/api/v1/gates/open", open).await;
        assert_eq!(status, 200, "{}: {text}", e.gate);
        self.passes(&e).await;
        e
    }

    /// Flagger passes `e`'s gate: at once on one replica, within the few
    /// seconds another replica takes to see a lifted freeze.
    async fn passes(&self, e: &Expected) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let body = json!({"name": e.canary, "namespace": e.namespace,
                          "phase": "Progressing", "checksum": e.revision});
        loop {
            let (status, text) = self.post(&e.gate, None, &body).await;
            if status == 200 {
                return;
            }
            assert!(
                self.replicas.len() > 1 && Instant::now() < deadline,
                "{} passes: {status} {text}",
                e.gate
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A pipeline's named gate: created, approved, passed, retired.
    async fn named_gate(&self, id: u64) {
        let name = format!("release-{id}");
        let spec = json!({"kind": "promote", "name": name, "title": "soak release"});
        let (status, text) = self
            .post("/api/v1/gates", Some(PIPELINE_TOKEN), &spec)
            .await;
        assert_eq!(status, 201, "{text}");
        let gate = format!("/gates/promote/named/{name}");
        let open = json!({"gate": gate, "reason": "soak"});
        assert_eq!(self.admin("/api/v1/gates/open", open).await.0, 200);
        let retire = format!("/api/v1/gates/promote/named/{name}");
        let (status, text) = self.delete(&retire, PIPELINE_TOKEN).await;
        assert!((200..300).contains(&status), "retire: {status} {text}");
    }

    /// Every approval acknowledged today still answers 200, applied once, and
    /// no wait is left open: every canary passed, whichever replica answered.
    async fn verify(&self, today: &[Expected]) {
        sqlx::any::install_default_drivers();
        let mut db = sqlx::AnyConnection::connect(&self.db.url).await.unwrap();
        let open: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM waits WHERE ended_at IS NULL")
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert_eq!(
            open, 0,
            "day {}: waits left open after their canaries passed",
            self.day
        );
        for e in today {
            let body = json!({"name": e.canary, "namespace": e.namespace,
                              "phase": "Progressing", "checksum": e.revision});
            let url = self.url(&e.gate);
            let (status, text) = self.post_to(&url, None, &body).await;
            assert_eq!(
                status, 200,
                "day {}: the approval of {} was lost ({url}: {text})",
                self.day, e.gate
            );
            assert_eq!(
                self.opens(&e.gate).await,
                e.opens,
                "day {}: {} opened a different number of times",
                self.day,
                e.gate
            );
        }
    }

    /// PostgreSQL: a simulated week passes in seconds here, while autovacuum
    /// wakes once a minute (`autovacuum_naptime`), so the dead rows of a
    /// week's updates and pruning were never vacuumed and the database grew
    /// with them. A real week has thousands of autovacuum passes: one
    /// `VACUUM` per simulated week stands in for them.
    async fn vacuum_as_a_week_would(&self) {
        if self.db.backend != Backend::Postgres {
            return;
        }
        sqlx::any::install_default_drivers();
        let mut db = sqlx::AnyConnection::connect(&self.db.url).await.unwrap();
        sqlx::query("VACUUM").execute(&mut db).await.unwrap();
    }

    /// Rows in every table that grows with traffic, and the store's size.
    async fn store_size(&self) -> (f64, f64) {
        sqlx::any::install_default_drivers();
        let mut db = sqlx::AnyConnection::connect(&self.db.url).await.unwrap();
        let mut rows = 0i64;
        for table in TABLES {
            let sql = format!("SELECT COUNT(*) FROM {table}");
            rows += sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&mut db)
                .await
                .unwrap();
        }
        let size = match self.db.backend {
            Backend::Sqlite => {
                "SELECT (SELECT page_count FROM pragma_page_count()) * \
                 (SELECT page_size FROM pragma_page_size())"
            }
            Backend::Postgres => "SELECT pg_database_size(current_database())",
        };
        let bytes: i64 = sqlx::query_scalar(size).fetch_one(&mut db).await.unwrap();
        (rows as f64, bytes as f64)
    }

    /// The week's row: measured after a retention pass of a fresh process.
    async fn measure(&self, sample: &Expected) -> Week {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.vacuum_as_a_week_would().await;
        let text = self.metrics().await;
        // Counted here, not taken from gatebot's own metrics: a retention
        // that stopped would stop reporting too.
        let (rows, store_bytes) = self.store_size().await;
        // The best of three rounds: a shared machine's hiccup is not the check's.
        let mut p99 = Duration::MAX;
        for _ in 0..3 {
            let mut times: Vec<Duration> = Vec::with_capacity(200);
            for _ in 0..200 {
                let at = Instant::now();
                assert_eq!(self.check(&sample.gate, sample).await, 200);
                times.push(at.elapsed());
            }
            times.sort();
            p99 = p99.min(times[times.len() * 99 / 100]);
        }
        let pid = self.first().child.id();
        Week {
            rss_kb: memory_kb(pid, "VmRSS"),
            store_bytes,
            rows,
            pending: metric_value(&text, "gatebot_inbox_pending")
                + metric_value(&text, "gatebot_outbox_pending"),
            p99_ms: p99.as_secs_f64() * 1000.0,
        }
    }
}

fn print_row(week: usize, w: &Week) {
    eprintln!(
        "| {week:>4} | {:>8} | {:>10.0} | {:>6.0} | {:>7.0} | {:>7.2} |",
        w.rss_kb, w.store_bytes, w.rows, w.pending, w.p99_ms
    );
}

/// Nothing measured in the steady state grows past the first steady week by
/// more than `slack`.
fn assert_flat(weeks: &BTreeMap<usize, Week>) {
    let Some(base) = weeks.get(&STEADY_FROM_WEEK).copied() else {
        return;
    };
    for (n, w) in weeks.range(STEADY_FROM_WEEK..) {
        assert!(
            w.store_bytes <= base.store_bytes * 1.3,
            "week {n}: the store grew to {} bytes from {}",
            w.store_bytes,
            base.store_bytes
        );
        assert!(
            w.rows <= base.rows * 1.3,
            "week {n}: {} rows, from {}",
            w.rows,
            base.rows
        );
        assert!(
            w.rss_kb <= base.rss_kb * 13 / 10 + 4096,
            "week {n}: resident {} kB, from {}",
            w.rss_kb,
            base.rss_kb
        );
    }
    let p99s: Vec<f64> = weeks.values().map(|w| w.p99_ms).collect();
    let mut sorted = p99s.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    for (n, w) in weeks {
        assert!(
            w.p99_ms <= median * 3.0 + 10.0,
            "week {n}: check p99 {:.2} ms against a median of {median:.2} ms",
            w.p99_ms
        );
    }
}

/// Days of traffic on `replicas` processes sharing `backend`'s store; the
/// last replica is the one killed mid-day.
async fn soak(backend: Backend, replicas: usize) {
    let plan = plan();
    let mut soak = Soak {
        db: TestDb::new(backend).await,
        replicas: (0..replicas).map(|_| None).collect(),
        turn: AtomicUsize::new(0),
        busy: AtomicUsize::new(0),
        day: 0,
        prs_per_day: plan.prs_per_day,
        http: client(),
    };
    let mut weeks = BTreeMap::new();
    eprintln!("{backend:?}, {replicas} replica(s), {} weeks", plan.weeks);
    eprintln!("| week | RSS (kB) | store (B) |   rows | pending | p99 (ms) |");
    eprintln!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    let victim = replicas - 1;
    for day in 0..plan.weeks * 7 {
        soak.day = day;
        soak.start_all();
        let mut today = Vec::with_capacity(soak.prs_per_day as usize);
        for p in 0..soak.prs_per_day {
            today.push(soak.pull_request(day * soak.prs_per_day + p).await);
        }
        // A crash or a restart mid-day loses nothing acknowledged.
        soak.stop(victim, day % 3 == 1);
        soak.start(victim);
        soak.verify(&today).await;
        if day % 7 == 6 {
            let week = (day / 7 + 1) as usize;
            let w = soak.measure(&today[0]).await;
            assert_eq!(w.pending, 0.0, "week {week}: queues drained");
            print_row(week, &w);
            weeks.insert(week, w);
        }
        soak.stop_all();
    }
    eprintln!(
        "answers that said \"try again\", tried again: {}",
        soak.busy.load(Ordering::Relaxed)
    );
    if std::env::var("GATEBOT_SOAK_RETENTION").as_deref() != Ok("off") {
        assert_flat(&weeks);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_year_compressed_on_sqlite_keeps_every_approval_and_grows_nothing() {
    soak(Backend::Sqlite, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_year_compressed_on_two_postgres_replicas_keeps_every_approval_and_grows_nothing() {
    soak(Backend::Postgres, 2).await;
}
