//! Memory per gate, measured on the real binary: with SQLite gatebot keeps every
//! gate and the last check of every canary in memory, so its resident size grows
//! with history. 100,000 open, pinned gates (each with its observation) must fit
//! the whole process in 80 MB.

use std::time::Duration;

use gatebot_testkit::harness::{client, Backend, TestDb};
use gatebot_testkit::served::Served;
use sqlx::Connection;

const GATES: i64 = 100_000;
const LIMIT_BYTES: u64 = 80 * 1024 * 1024;

/// Resident set size of a process, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc status");
    kib * 1024
}

/// Asks a few gates as Flagger would, then reads the resident size.
async fn settled_rss(served: &Served, gates: [i64; 3], expect: u16) -> u64 {
    for i in gates {
        let r = client()
            .post(format!("{}/gates/promote/acme/shop/pr/{i}", served.url))
            .json(&serde_json::json!({
                "name": format!("svc-{i}"),
                "namespace": format!("team-{}", i % 100),
                "phase": "Progressing",
                "checksum": revision(i),
            }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_eq!(status, expect, "gate {i}: {body}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    rss_bytes(served.child.id())
}

fn revision(i: i64) -> String {
    format!("{:010x}", i.wrapping_mul(2_654_435_761) % 4_294_967_296)
}

/// Writes `n` open gates, each pinned by its own canary, with that canary's last
/// check, straight into the store in one transaction.
async fn seed(url: &str, n: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut conn = sqlx::SqliteConnection::connect(url).await.expect("open");
    let mut tx = conn.begin().await.unwrap();
    let numbers = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)";
    let canary = "'team-' || (i % 100) || '/svc-' || i";
    let checksum = "printf('%010x', (i * 2654435761) % 4294967296)";
    let statements = [
        format!(
            "{numbers} INSERT INTO gates (key, status, approval_id, actor, source, reason, changed_at, expires_at) \
             SELECT '/gates/promote/acme/shop/pr/' || i, 'open', printf('%08x-0000-4000-8000-%012x', i, i), \
             'user-' || (i % 50), 'github', NULL, $2, $2 + 86400000 FROM n"
        ),
        format!(
            "{numbers} INSERT INTO pins (approval_id, canary, gate_key, checksum, pinned_at) \
             SELECT printf('%08x-0000-4000-8000-%012x', i, i), {canary}, '/gates/promote/acme/shop/pr/' || i, \
             {checksum}, $2 FROM n"
        ),
        format!(
            "{numbers} INSERT INTO observations (gate_key, canary, checksum, phase, answer, reason, metadata, first_seen, last_seen) \
             SELECT '/gates/promote/acme/shop/pr/' || i, {canary}, {checksum}, 'Progressing', 'open', \
             'approved by user-' || (i % 50) || ' via github at 2025-12-01T00:00:00Z for revision ' || {checksum}, \
             '{{\"pr\":\"' || i || '\"}}', $2, $2 FROM n"
        ),
    ];
    for sql in &statements {
        sqlx::query(sql)
            .bind(n)
            .bind(now)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.unwrap();
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_pinned_gates_fit_in_80_mb() {
    let db = TestDb::new(Backend::Sqlite).await;
    // The empty store, migrated by gatebot itself: every gate is closed.
    let empty = {
        let served = Served::start(&db, &[]);
        settled_rss(&served, [GATES + 1, GATES + 2, GATES + 3], 403).await
    };
    seed(&db.url, GATES).await;
    let started = std::time::Instant::now();
    let served = Served::start(&db, &[]);
    let load = started.elapsed();
    // Each canary gets 200 for its pinned revision: the gates came back from the store.
    let full = settled_rss(&served, [1, GATES / 2, GATES], 200).await;
    let per_gate = full.saturating_sub(empty) / GATES as u64;
    eprintln!(
        "memory: empty store {} KiB, {GATES} pinned gates {} KiB ({per_gate} bytes per gate), started in {load:?}",
        empty / 1024,
        full / 1024
    );
    assert!(
        full < LIMIT_BYTES,
        "{GATES} pinned gates take {} MiB resident, over {} MiB",
        full / 1024 / 1024,
        LIMIT_BYTES / 1024 / 1024
    );
    assert!(per_gate < 512, "{per_gate} bytes per pinned gate, over 512");
}

/// `OPEN_WAITS` (src/core/bounds.rs): made-up waits open at once, in all.
const OPEN_WAITS: i64 = 2_000;
/// What 50,000 made-up waits may add to the resident set.
const WAITS_CEILING_BYTES: u64 = 48 * 1024 * 1024;

/// 50,000 made-up canaries, each asking once at one of 250 PR gates (200 a
/// gate, past the bound of 100), over 16 keep-alive connections: the open
/// waits stay at the bound and the resident set under its ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_made_up_waits_stay_bounded_in_store_and_memory() {
    const CANARIES: usize = 50_000;
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let before = settled_rss(&served, [1, 2, 3], 403).await;
    let http = client();
    let started = std::time::Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (http, url, next) = (http.clone(), served.url.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= CANARIES {
                    return;
                }
                let r = http
                    .post(format!(
                        "{url}/gates/promote/acme/shop/pr/{}",
                        1000 + i % 250
                    ))
                    .json(&serde_json::json!({
                        "name": format!("made-up-{i}"),
                        "namespace": "flood",
                        "phase": "Progressing",
                        "checksum": "x",
                    }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 403, "{}", r.text().await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = started.elapsed();
    let after = settled_rss(&served, [1, 2, 3], 403).await;
    let open = served.api("/api/v1/gates/promote/acme/shop/pr/1000").await;
    let metrics = client()
        .get(format!("{}/metrics", served.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = gatebot_testkit::harness::metric_value(
        &metrics,
        "gatebot_budget_refused_total{what=\"wait\",cluster=\"\"}",
    );
    let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    let waits: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM waits WHERE ended_at IS NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let at_gate: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM waits WHERE ended_at IS NULL AND gate_key = '/gates/promote/acme/shop/pr/1000'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let grew = after.saturating_sub(before);
    eprintln!(
        "waits: {CANARIES} made-up checks in {took:?}; open waits {waits}, at one gate {at_gate}; \
         refused {refused}; resident {} KiB before, {} KiB after (+{} KiB)",
        before / 1024,
        after / 1024,
        grew / 1024
    );
    assert!(waits <= OPEN_WAITS + 3, "{waits} open waits");
    assert!(at_gate <= 100, "{at_gate} open waits at one gate: {open}");
    assert!(
        refused >= (CANARIES as i64 - OPEN_WAITS) as f64,
        "{refused} refused"
    );
    assert!(
        grew < WAITS_CEILING_BYTES,
        "{CANARIES} made-up waits grew the resident set by {} MiB, over {} MiB",
        grew / 1024 / 1024,
        WAITS_CEILING_BYTES / 1024 / 1024
    );
}
