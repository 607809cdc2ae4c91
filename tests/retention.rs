//! Retention over real HTTP on both stores, on a manual clock: what grows with
//! traffic (deliveries and notifications, Flagger's events, canaries' last
//! checks and PR ties, ended waits, audit entries) is pruned once it outlives its setting,
//! and nothing else is: an open wait stays, a gate still answers. Payloads go
//! before ids; the audit log goes last, counted. SQLite's file shrinks.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{Clock, ManualClock, SharedClock};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer};
use gatebot_testkit::row_lock::RowLock;
use serde_json::json;
use sqlx::{AnyConnection, Connection};

const HOUR: i64 = 3600 * 1000;
const DAY: i64 = 24 * HOUR;
const GATE: &str = "/gates/promote/acme/shop/pr/1";
const STUCK: &str = "/gates/promote/acme/shop/pr/2";
const WAIT: Duration = Duration::from_secs(60);
/// Flagger's events seeded to give the SQLite file something to give back.
const SEEDED_EVENTS: i64 = 20_000;

struct Env {
    server: TestServer,
    clock: Arc<ManualClock>,
    conn: AnyConnection,
    _db: TestDb,
}

async fn env(backend: Backend) -> Env {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.admin_token = Some(gatebot_testkit::harness::ADMIN_TOKEN.to_string().into());
    config.limits.retention_payloads = Duration::from_secs(3600);
    config.limits.retention_deliveries = Duration::from_secs(24 * 3600);
    config.limits.retention_history = Duration::from_secs(24 * 3600);
    config.limits.retention_audit = Duration::from_secs(3 * 24 * 3600);
    config.limits.retention_interval = Duration::from_secs(1);
    let clock = ManualClock::new(gatebot_testkit::github_payloads::now_ms());
    let options = gatebot::Options {
        clock: Some(clock.clone() as SharedClock),
        ..Default::default()
    };
    let server = TestServer::start(config, options).await;
    sqlx::any::install_default_drivers();
    let conn = AnyConnection::connect(&db.url).await.unwrap();
    Env {
        server,
        clock,
        conn,
        _db: db,
    }
}

impl Env {
    async fn check(&self, gate: &str, name: &str) -> u16 {
        let body =
            json!({"name": name, "namespace": "test", "phase": "Progressing", "checksum": "rev1"});
        let r = client()
            .post(self.server.at(gate))
            .json(&body)
            .send()
            .await
            .unwrap();
        r.status().as_u16()
    }

    async fn count(&mut self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&mut self.conn)
            .await
            .unwrap()
    }

    /// Waits until `sql` counts `n`.
    async fn until(&mut self, what: &str, sql: &str, n: i64) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let got = self.count(sql).await;
            if got == n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {got}, not {n}, within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Rows that only the prune can have left behind: a done inbox and outbox
    /// row with a payload, and many of Flagger's events, all of now.
    async fn seed(&mut self) {
        let now = self.clock.now_ms();
        let big = "x".repeat(1000);
        sqlx::query(
            "INSERT INTO inbox (id, source, kind, payload, received_at, next_attempt_at, state, done_at) \
             VALUES ('github:seeded', 'github', 'issue_comment', $1, $2, $2, 'done', $2)",
        )
        .bind(&big)
        .bind(now)
        .execute(&mut self.conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO outbox (id, sink, topic, payload, created_at, next_attempt_at, state, done_at) \
             VALUES ('seeded', 'github', 'status', $1, $2, $2, 'done', $2)",
        )
        .bind(&big)
        .bind(now)
        .execute(&mut self.conn)
        .await
        .unwrap();
        // A hold is a person's word: kept however old.
        sqlx::query(
            "INSERT INTO gates (key, status, actor, source, reason, changed_at) \
             VALUES ('/gates/promote/acme/shop/pr/3', 'held', 'alice', 'api', 'hold', $1)",
        )
        .bind(now)
        .execute(&mut self.conn)
        .await
        .unwrap();
        // A canary's revision tied to its PR now, and another's found later.
        for (canary, at) in [("test/podinfo", now), ("test/later", now + 3 * DAY)] {
            sqlx::query(
                "INSERT INTO canary_ties (canary, checksum, commit_sha, repo, number, found_at) \
                 VALUES ($1, 'rev1', '9c1e4f2', 'acme/shop', 1, $2)",
            )
            .bind(canary)
            .bind(at)
            .execute(&mut self.conn)
            .await
            .unwrap();
        }
        // PR heads and check runs: one left alone since, one touched later.
        for (number, at) in [(1, now), (2, now + 3 * DAY)] {
            sqlx::query(
                "INSERT INTO pr_heads (repo, number, head_sha, pushed_at) VALUES ('acme/shop', $1, '9c1e4f2', $2)",
            )
            .bind(number)
            .bind(at)
            .execute(&mut self.conn)
            .await
            .unwrap();
            sqlx::query(
                "INSERT INTO check_runs (repo, number, kind, head_sha, run_id, digest, updated_at) \
                 VALUES ('acme/shop', $1, 'promote', '9c1e4f2', 7, 'd', $2)",
            )
            .bind(number)
            .bind(at)
            .execute(&mut self.conn)
            .await
            .unwrap();
        }
        // A revision's GitHub deployment, last sent to now.
        sqlx::query(
            "INSERT INTO github_deployments (repo, number, canary, checksum, deployment_id, state, updated_at) \
             VALUES ('acme/shop', 1, 'test/podinfo', 'rev1', 7, 'success', $1)",
        )
        .bind(now)
        .execute(&mut self.conn)
        .await
        .unwrap();
        // Protected deployments: one decided now (goes), one still pending
        // but asked about later (kept).
        let decided = [
            (1, now, Some(now), Some("approved")),
            (2, now + 3 * DAY, None, None),
        ];
        for (run, at, decided, state) in decided {
            sqlx::query(
                "INSERT INTO github_protection_requests (repo, run_id, environment, number, gate_key, \
                 callback_url, installation, requested_at, decided_at, state) VALUES ('acme/shop', $1, \
                 'production', 1, '/gates/promote/acme/shop/pr/1', 'https://api.github.com/', 7, $2, $3, $4)",
            )
            .bind(run)
            .bind(at)
            .bind(decided)
            .bind(state)
            .execute(&mut self.conn)
            .await
            .unwrap();
        }
        // A Teams card of a wait that is over (gone).
        sqlx::query(
            "INSERT INTO teams_cards (wait_id, gate, canary, conversation_id, service_url, activity_id, posted_at) \
             VALUES (9001, '/gates/promote/acme/shop/pr/1', 'test/podinfo', '19:c@thread.tacv2', 'https://smba.example/', '1:a', $1)",
        )
        .bind(now)
        .execute(&mut self.conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO canary_progress (canary, checksum, failed_checks, last_message, last_at, told) \
             VALUES ('test/seeded-0', 'rev1', 0, 'Advance seeded-0.test canary weight 10', $1, '')",
        )
        .bind(now)
        .execute(&mut self.conn)
        .await
        .unwrap();
        let mut tx = self.conn.begin().await.unwrap();
        for i in 0..SEEDED_EVENTS {
            sqlx::query(
                "INSERT INTO events (received_at, canary, phase, checksum, event_type, kind, message) \
                 VALUES ($1, $2, 'Progressing', 'rev1', 'Normal', 'other', $3)",
            )
            .bind(now)
            .bind(format!("test/seeded-{}", i % 50))
            .bind(&big)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }

    async fn sqlite_pages(&mut self) -> i64 {
        self.count("SELECT page_count FROM pragma_page_count()")
            .await
    }
}

gatebot_testkit::on_both_stores!(what_outlives_its_retention_is_pruned_and_nothing_else);

async fn what_outlives_its_retention_is_pruned_and_nothing_else(backend: Backend) {
    let mut env = env(backend).await;
    // A canary waits, is approved and passes; another keeps waiting.
    assert_eq!(env.check(GATE, "podinfo").await, 403);
    env.server.open(GATE).await;
    assert_eq!(env.check(GATE, "podinfo").await, 200);
    assert_eq!(env.check(STUCK, "stuck").await, 403);
    env.server.drained().await;
    env.seed().await;
    let pages_before = match backend {
        Backend::Sqlite => env.sqlite_pages().await,
        Backend::Postgres => 0,
    };
    // The entries of now; an approval's expiry may add one later, at its date.
    let t0 = env.clock.now_ms();
    let old_audit = format!("SELECT COUNT(*) FROM audit WHERE at <= {t0}");
    let audit_before = env.count(&old_audit).await;
    assert!(audit_before >= 2, "an open and a pin at least");

    // Past [limits] retention_payloads: payloads go, ids stay.
    env.clock.advance(2 * HOUR);
    env.until(
        "payloads left",
        "SELECT COUNT(*) FROM inbox WHERE id = 'github:seeded' AND payload <> ''",
        0,
    )
    .await;
    env.until(
        "outbox payloads left",
        "SELECT COUNT(*) FROM outbox WHERE id = 'seeded' AND payload <> ''",
        0,
    )
    .await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM inbox WHERE id = 'github:seeded'")
            .await,
        1,
        "the id is kept: it still stops a replay"
    );

    // Past [limits] retention_deliveries and _HISTORY.
    env.clock.advance(2 * DAY);
    env.until("events", "SELECT COUNT(*) FROM events", 0).await;
    env.until("progress", "SELECT COUNT(*) FROM canary_progress", 0)
        .await;
    env.until(
        "done deliveries",
        "SELECT COUNT(*) FROM inbox WHERE state <> 'pending'",
        0,
    )
    .await;
    env.until(
        "done notifications",
        "SELECT COUNT(*) FROM outbox WHERE state <> 'pending'",
        0,
    )
    .await;
    env.until(
        "ended waits",
        "SELECT COUNT(*) FROM waits WHERE ended_at IS NOT NULL",
        0,
    )
    .await;
    env.until("observations", "SELECT COUNT(*) FROM observations", 0)
        .await;
    env.until(
        "canary ties found before the history",
        "SELECT COUNT(*) FROM canary_ties WHERE canary = 'test/podinfo'",
        0,
    )
    .await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM canary_ties").await,
        1,
        "a tie found within the history is kept"
    );
    env.until(
        "PR heads and check runs untouched since before the history",
        "SELECT (SELECT COUNT(*) FROM pr_heads WHERE number = 1) + (SELECT COUNT(*) FROM check_runs WHERE number = 1)",
        0,
    )
    .await;
    assert_eq!(
        env.count("SELECT (SELECT COUNT(*) FROM pr_heads) + (SELECT COUNT(*) FROM check_runs)")
            .await,
        2,
        "a PR head and a check run touched within the history are kept"
    );
    env.until(
        "protected deployments decided before the history",
        "SELECT COUNT(*) FROM github_protection_requests WHERE run_id = 1",
        0,
    )
    .await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM github_protection_requests")
            .await,
        1,
        "a request made within the history is kept"
    );
    env.until(
        "deployments not sent to within the history",
        "SELECT COUNT(*) FROM github_deployments",
        0,
    )
    .await;
    env.until(
        "the Teams card of a wait that is over",
        "SELECT COUNT(*) FROM teams_cards",
        0,
    )
    .await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM gates WHERE status = 'held'")
            .await,
        1,
        "a held gate is kept"
    );
    assert_eq!(
        env.count("SELECT COUNT(*) FROM waits WHERE ended_at IS NULL")
            .await,
        1,
        "the wait that is still open is kept"
    );

    assert_eq!(
        env.count(&old_audit).await,
        audit_before,
        "the audit log is kept longer"
    );
    if backend == Backend::Sqlite {
        // The pages freed go back to the file system at the end of the pass.
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let pages_after = env.sqlite_pages().await;
            if pages_after * 2 < pages_before {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the file gives back what was pruned: {pages_before} pages, then {pages_after}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Past [limits] retention_audit: the audit entries go, counted.
    env.clock.advance(2 * DAY);
    env.until("audit entries", &old_audit, 0).await;
    let left = env.count("SELECT COUNT(*) FROM audit").await as f64;
    let pruned = r#"gatebot_store_pruned_rows_total{table="audit"}"#;
    eventually("audit pruning counted", WAIT, || async {
        env.server.metric(pruned).await >= audit_before as f64
    })
    .await;
    eventually("rows reported", WAIT, || async {
        env.server
            .metric(r#"gatebot_store_rows{table="audit"}"#)
            .await
            == left
            && env
                .server
                .metric(r#"gatebot_store_rows{table="waits"}"#)
                .await
                == 1.0
            && env.server.metric("gatebot_store_size_bytes").await > 0.0
    })
    .await;

    // The gate whose approval expired: closed by the expiry (which may come
    // first, stamping the close at the later date) and then pruned.
    env.until(
        "the gate whose approval expired long ago",
        "SELECT COUNT(*) FROM gates WHERE key = '/gates/promote/acme/shop/pr/1'",
        0,
    )
    .await;
    assert_eq!(
        env.count("SELECT COUNT(*) FROM gates WHERE status = 'held'")
            .await,
        1,
        "a held gate is kept"
    );

    // What is left still works, and a pruned gate answers closed.
    assert_eq!(env.check(STUCK, "stuck").await, 403);
    assert_eq!(env.check(GATE, "podinfo").await, 403);
    let ready = client().get(env.server.at("/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
}

/// Old closed gates that a command opens while a prune is choosing them.
const RACED: usize = 40;

fn raced_gate(i: usize) -> String {
    format!("/gates/promote/acme/shop/pr/{}", 100 + i)
}

/// The reproduction of a prune that deleted approvals made while it waited:
/// a second connection holds a row lock on one old gate (what a client cut off
/// mid-transaction leaves), the prune runs into it, and meanwhile 40 other old
/// gates are opened through the API. Every approval answered 200 must stand,
/// in the store and at Flagger's check. (SQLite has one writer at a time, so
/// no prune can run beside a command there; `retention.rs`'s unit test checks
/// that both stores' statements re-check their rule.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_prune_never_deletes_a_gate_changed_while_it_runs() {
    gatebot_testkit::harness::require_postgres();
    let mut env = env(Backend::Postgres).await;
    // Retention is off until the rows are in place: the clock says "now".
    let old = env.clock.now_ms() - 2 * DAY;
    let locked = "/gates/promote/acme/shop/pr/99";
    for key in (0..RACED).map(raced_gate).chain([locked.to_string()]) {
        sqlx::query(
            "INSERT INTO gates (key, status, actor, source, reason, changed_at) \
             VALUES ($1, 'closed', 'alice', 'api', 'closed', $2)",
        )
        .bind(&key)
        .bind(old)
        .execute(&mut env.conn)
        .await
        .unwrap();
    }
    let lock = RowLock::gates(&env._db.url, locked).await;
    // A prune pass must reach the locked row: the next one starts within a
    // second ([limits] retention_interval) and either takes the others around
    // the lock or waits for it.
    let prune_waits = "SELECT COUNT(*) FROM pg_stat_activity \
        WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM gates%'";
    let others_gone = format!(
        "SELECT COUNT(*) FROM gates WHERE key LIKE '/gates/promote/acme/shop/pr/1%' AND changed_at = {old}"
    );
    let deadline = std::time::Instant::now() + WAIT;
    while env.count(prune_waits).await == 0 && env.count(&others_gone).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no prune reached the old gates"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Approvals while the prune is at it, answered 200 (some may wait for the
    // prune's own row locks: they are sent together and awaited after).
    let opens = (0..RACED).map(|i| {
        let (url, gate) = (env.server.url.clone(), raced_gate(i));
        tokio::spawn(async move {
            let r = client()
                .post(format!("{url}/api/v1/gates/open"))
                .bearer_auth(gatebot_testkit::harness::ADMIN_TOKEN)
                .json(&json!({"gate": gate, "reason": "raced"}))
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        })
    });
    let opens: Vec<_> = opens.collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    lock.release().await;
    for open in opens {
        assert_eq!(open.await.unwrap(), 200, "the approval is acknowledged");
    }
    // Passes after the lock is gone find nothing more of these to delete.
    env.clock.advance(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.until(
        "approvals kept",
        "SELECT COUNT(*) FROM gates WHERE key LIKE '/gates/promote/acme/shop/pr/1%' AND status = 'open'",
        RACED as i64,
    )
    .await;
    for i in 0..RACED {
        assert_eq!(
            env.check(&raced_gate(i), &format!("raced-{i}")).await,
            200,
            "{} answers as approved",
            raced_gate(i)
        );
    }
}
