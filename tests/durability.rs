//! Acknowledged means durable, on the real binary: a full disk acknowledges
//! nothing it does not keep and leaves the store usable once space is back;
//! `/readyz` says so; and a command acknowledged just before SIGKILL is applied
//! within seconds of a restart (SQLite) or by another replica (PostgreSQL);
//! and a `/hold` acknowledged while its gate's row is locked is tried again
//! until the lock goes, never given up (PostgreSQL).

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gatebot::testing::github::verify::sign;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::github_payloads::{comment, deliver_signed};
use gatebot_testkit::harness::{
    client, eventually, postgres_url, Backend, TestDb, TestServer, ADMIN_TOKEN,
};
use gatebot_testkit::row_lock::RowLock;
use gatebot_testkit::served::Served;

const WAIT: Duration = Duration::from_secs(20);
const SECRET: &str = "durability-webhook-secret";

// ---- a full disk ----

/// A small tmpfs, unmounted when dropped (declare it before anything using it).
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(megabytes: u32) -> Result<Self, String> {
        let parent = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dir = parent.path().join("disk");
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Self {
            dir,
            _parent: parent,
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).expect("filler");
    let chunk = vec![0x5a_u8; 16 * 1024];
    while file.write_all(&chunk).and_then(|()| file.flush()).is_ok() {}
    // What a chunk could not take, byte by byte.
    while file.write_all(&[0]).is_ok() {}
}

fn gate(n: u32) -> String {
    format!("/gates/promote/acme/shop/pr/{n}")
}

/// An admin open; its status, or 0 when no answer came.
async fn open(base: &str, n: u32) -> u16 {
    client()
        .post(format!("{base}/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({ "gate": gate(n), "reason": "disk test" }))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

async fn readyz(base: &str) -> u16 {
    client()
        .get(format!("{base}/readyz"))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

async fn gate_status(base: &str, n: u32) -> u16 {
    client()
        .get(format!("{base}{}", gate(n)))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// A signed `/promote` delivery (the receipt path); its status, or 0.
async fn deliver(base: &str, n: u32) -> u16 {
    let body =
        serde_json::to_vec(&comment(u64::from(n), u64::from(n), "alice", "/promote")).unwrap();
    client()
        .post(format!("{base}/webhooks/github"))
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", format!("disk-{n}"))
        .header("x-hub-signature-256", sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// Which of these deliveries are stored in the inbox (keyed by the comment GitHub signed).
async fn stored_deliveries(db: &TestDb, ns: &[u32]) -> Vec<u32> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let mut stored = Vec::new();
    for &n in ns {
        let found: Option<String> = sqlx::query_scalar("SELECT id FROM inbox WHERE id LIKE $1")
            .bind(format!("github:comment:{n}:%"))
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        if found.is_some() {
            stored.push(n);
        }
    }
    let _ = conn.close().await;
    stored
}

/// The SQLite file on a 6 MB tmpfs. Admin opens and signed deliveries are sent
/// while a filler takes the space; only those acknowledged count, and the
/// others are answered 503. `/readyz` turns 503 while writes fail. Once the
/// filler is gone, `/readyz` is 200 again within seconds and writes succeed (no
/// `database is locked`). After SIGKILL and a restart on the same file, every
/// acknowledged open and delivery is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_acknowledges_only_what_it_keeps_and_recovers() {
    let disk = match Tmpfs::mount(6) {
        Ok(disk) => disk,
        Err(e) => {
            eprintln!("SKIPPED: cannot mount a tmpfs (needs root): {e}");
            return;
        }
    };
    let db = TestDb {
        backend: Backend::Sqlite,
        url: format!("sqlite://{}/gatebot.db", disk.dir.display()),
        dir: tempfile::tempdir().unwrap(),
    };
    // GitHub never answers: stored deliveries stay in the inbox, untouched.
    // No logs: every refusal is logged, and nothing reads the child's stderr.
    let (_hole, hole_url) = black_hole();
    let served = serve_quietly(&db, &hole_url);
    let base = served.url.clone();
    let mut opened = Vec::new();
    let mut received = Vec::new();
    let mut n = 0;
    for _ in 0..5 {
        n += 1;
        assert_eq!(
            open(&base, n).await,
            200,
            "opens work before the disk fills"
        );
        opened.push(n);
    }

    // Fill the disk while opens and deliveries keep coming.
    let filler = disk.dir.join("filler");
    let filling = {
        let filler = filler.clone();
        std::thread::spawn(move || fill(&filler))
    };
    let mut refused = Vec::new();
    let mut saw_unready = false;
    let deadline = Instant::now() + WAIT;
    while !(filling.is_finished() && refused.len() >= 10 && saw_unready) {
        assert!(
            Instant::now() < deadline,
            "while the disk is full: {} refused, /readyz 503 seen: {saw_unready}",
            refused.len()
        );
        n += 1;
        let full = filling.is_finished();
        match open(&base, n).await {
            s if (200..300).contains(&s) => opened.push(n),
            s if full => refused.push(s),
            _ => {}
        }
        match deliver(&base, n).await {
            202 => received.push(n),
            s if full => refused.push(s),
            _ => {}
        }
        if full && readyz(&base).await == 503 {
            saw_unready = true;
        }
    }
    filling.join().unwrap();
    let not_503: Vec<u16> = refused.iter().copied().filter(|&s| s != 503).collect();
    assert!(
        not_503.is_empty(),
        "a write that fails is answered 503, not {not_503:?}"
    );
    eprintln!(
        "disk full: {} opens and {} deliveries acknowledged in all, {} refused with 503, /readyz 503",
        opened.len(),
        received.len(),
        refused.len()
    );

    // Space is back: ready again, without a restart, and writes work.
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    eventually(
        "/readyz to be 200 after space is freed",
        Duration::from_secs(10),
        || async { readyz(&base).await == 200 },
    )
    .await;
    eprintln!(
        "/readyz 200 again {:?} after space was freed",
        freed.elapsed()
    );
    for _ in 0..10 {
        n += 1;
        assert_eq!(open(&base, n).await, 200, "open {n} after space was freed");
        opened.push(n);
        assert_eq!(
            deliver(&base, n).await,
            202,
            "delivery {n} after space was freed"
        );
        received.push(n);
    }

    served.signal("KILL");
    let _ = served.wait();
    let restarted = serve_quietly(&db, &hole_url);
    let mut lost = Vec::new();
    for &g in &opened {
        if gate_status(&restarted.url, g).await != 200 {
            lost.push(g);
        }
    }
    let kept = stored_deliveries(&db, &received).await;
    assert!(
        lost.is_empty() && kept.len() == received.len(),
        "lost after SIGKILL: {} of {} acknowledged opens ({lost:?}), {} of {} acknowledged deliveries",
        lost.len(),
        opened.len(),
        received.len() - kept.len(),
        received.len()
    );
    drop(restarted);
    drop(disk);
}

// ---- a restart right after an acknowledgement ----

/// A GitHub API that accepts connections and never answers: a process using it
/// holds the command it is applying until it dies.
fn black_hole() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    (l, url)
}

fn github_env(api_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GATEBOT_GITHUB_WEBHOOK_SECRET", SECRET.to_string()),
        ("GATEBOT_GITHUB_TOKEN", "ghp_test".to_string()),
        ("GATEBOT_GITHUB_API_URL", api_url.to_string()),
        ("GATEBOT_GITHUB_REPOSITORY", "acme/shop".to_string()),
    ]
}

fn serve(db: &TestDb, api_url: &str) -> Served {
    serve_logging(db, api_url, "error")
}

fn serve_quietly(db: &TestDb, api_url: &str) -> Served {
    serve_logging(db, api_url, "off")
}

fn serve_logging(db: &TestDb, api_url: &str, level: &str) -> Served {
    let mut env = github_env(api_url);
    env.push(("RUST_LOG", level.to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Served::start(db, &env)
}

async fn promote(base: &str, pr: u64, comment_id: u64) {
    let payload = comment(pr, comment_id, "alice", "/promote");
    let guid = format!("restart-{comment_id}");
    let (status, _) = deliver_signed(base, SECRET, "issue_comment", &guid, &payload).await;
    assert_eq!(status, 202, "acknowledged");
}

/// Who holds the lease on the stored delivery, if anyone.
async fn inbox_lease(db: &TestDb) -> Option<String> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let owner: Option<Option<String>> =
        sqlx::query_scalar("SELECT lease_owner FROM inbox WHERE state = 'pending'")
            .fetch_optional(&mut conn)
            .await
            .unwrap();
    let _ = conn.close().await;
    owner.flatten()
}

async fn promote_gate(base: &str, pr: u64) -> u16 {
    client()
        .get(format!("{base}/gates/promote/pr/{pr}"))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// Polls until the gate answers 200; how long that took.
async fn time_until_open(base: &str, pr: u64, within: Duration) -> Duration {
    let start = Instant::now();
    eventually("the acknowledged /promote to apply", within, || async {
        promote_gate(base, pr).await == 200
    })
    .await;
    start.elapsed()
}

/// SQLite: the process is killed (SIGKILL) while it holds the lease on an
/// acknowledged `/promote`; restarted on the same file, it applies it within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_applies_an_acknowledged_command_within_two_seconds() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let (_hole, hole_url) = black_hole();

    let first = serve(&db, &hole_url);
    promote(&first.url, 81, 8101).await;
    eventually("the first process to claim the command", WAIT, || async {
        inbox_lease(&db).await.is_some()
    })
    .await;
    first.signal("KILL");
    let _ = first.wait();

    let second = serve(&db, &github.url);
    let took = time_until_open(&second.url, 81, Duration::from_secs(2)).await;
    eprintln!("applied {took:?} after the restarted process answered");
}

/// PostgreSQL, two processes: the one that took the command is killed
/// (SIGKILL); the other notices its heartbeat stopped and applies the command
/// within seconds, not when the 60 s lease runs out. While the first is alive,
/// its command is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn another_replica_takes_a_dead_replicas_command_within_seconds() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let (_hole, hole_url) = black_hole();

    let first = serve(&db, &hole_url);
    promote(&first.url, 82, 8201).await;
    eventually("the first replica to claim the command", WAIT, || async {
        inbox_lease(&db).await.is_some()
    })
    .await;
    let second = serve(&db, &github.url);

    // Longer than a dead replica goes unnoticed, plus a worker's idle poll: the
    // live first replica keeps the command (the fixed wait is the point).
    let alive_for = gatebot::testing::store::DEAD_AFTER + Duration::from_secs(2);
    tokio::time::sleep(alive_for).await;
    assert_eq!(
        promote_gate(&second.url, 82).await,
        403,
        "the other replica leaves a live replica's command alone"
    );

    first.signal("KILL");
    let _ = first.wait();
    let took = time_until_open(&second.url, 82, Duration::from_secs(10)).await;
    eprintln!("the other replica applied it {took:?} after the SIGKILL");
}

// ---- a row lock held for as long as it takes ----

/// A session cut off mid-transaction holds the gate's row lock: every try of
/// an acknowledged `/hold` fails on the lock timeout. It is tried again past
/// the attempts a delivery has (here 2), never marked failed, and applies
/// once the lock is released: the check then answers 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn an_acknowledged_hold_outlasts_a_stuck_row_lock() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    const MAX_ATTEMPTS: i64 = 2;
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some(SECRET.to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    let options = gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            max_attempts: MAX_ATTEMPTS,
            ..Default::default()
        }),
        ..Default::default()
    };
    let server = TestServer::start(config, options).await;
    let check = || async {
        client()
            .get(server.at("/gates/promote/pr/42"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let opened = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"gate": "/gates/promote/acme/shop/pr/42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status().as_u16(), 200);
    assert_eq!(check().await, 200, "open before the hold");

    let stuck = RowLock::gates(&db.url, "%/acme/shop/pr/42").await;
    assert!(stuck.rows >= 1, "the PR's gate rows are locked");

    let hold = comment(42, 4101, "alice", "/hold the pager is ringing");
    let (status, _) =
        deliver_signed(&server.url, SECRET, "issue_comment", "stuck-hold", &hold).await;
    assert_eq!(status, 202, "acknowledged");
    let acknowledged = std::time::Instant::now();

    let retries = r#"gatebot_queue_jobs_total{queue="inbox",route="github",result="retry"}"#;
    let failed = r#"gatebot_queue_jobs_total{queue="inbox",route="github",result="failed"}"#;
    eventually(
        "more tries than the delivery's attempts",
        Duration::from_secs(60),
        || async { server.metric(retries).await > (MAX_ATTEMPTS + 1) as f64 },
    )
    .await;
    assert_eq!(server.metric(failed).await, 0.0, "never given up");
    assert_eq!(check().await, 200, "not applied while the lock is held");
    // Long enough for the reply to say it was applied late (10 s).
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(acknowledged.elapsed())).await;

    stuck.release().await;
    eventually("the hold to apply", Duration::from_secs(40), || async {
        check().await == 403
    })
    .await;
    assert_eq!(server.metric(failed).await, 0.0);
    eventually("the reply on the PR", Duration::from_secs(10), || async {
        !github.replies(42).is_empty()
    })
    .await;
    let reply = github.replies(42).remove(0).body;
    assert!(
        reply.contains("after it was received (the database was unavailable)"),
        "{reply}"
    );
    insta::with_settings!({filters => vec![
        (r"\d{2}:\d{2}:\d{2} UTC", "[time] UTC"),
        (r"\d+ s after", "[waited] after"),
        (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "[uuid]"),
    ]}, {
        insta::assert_snapshot!("hold_applied_late", reply);
    });
}

/// A Slack command acknowledged while the store could not apply it says, once
/// applied, that it was applied late, when and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_slack_hold_applied_late_says_so() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let env = ChatOps::start_with(Backend::Postgres, Setup::default(), |config| {
        config.slack.approvers = vec!["UALICE".to_string()];
    })
    .await;
    assert_eq!(open(&env.server.url, 42).await, 200);
    let stuck = RowLock::gates(&env.db.url, "%/acme/shop/pr/42").await;
    assert!(stuck.rows >= 1, "the PR's gate rows are locked");
    let (status, _) = env
        .slash(
            "UALICE",
            "alice",
            "hold 42 the pager is ringing",
            "late-hold",
        )
        .await;
    assert_eq!(status, 200, "acknowledged");
    let acknowledged = Instant::now();
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(acknowledged.elapsed())).await;
    assert_eq!(
        gate_status(&env.server.url, 42).await,
        200,
        "not applied while the lock is held"
    );
    stuck.release().await;
    eventually("the hold to apply", Duration::from_secs(40), || async {
        gate_status(&env.server.url, 42).await == 403
    })
    .await;
    let answers = env.answers("late-hold").await;
    let answer = answers.last().expect("an answer on the response_url");
    assert!(
        answer.contains("after it was received (the database was unavailable)"),
        "{answers:?}"
    );
    insta::with_settings!({filters => vec![
        (r"\d{2}:\d{2}:\d{2} UTC", "[time] UTC"),
        (r"\d+ s after", "[waited] after"),
    ]}, {
        insta::assert_snapshot!("slack_hold_applied_late", answer);
    });
}

/// A Slack click acknowledged while the store could not apply it: the
/// message shows the decision once applied, and the person who clicked is
/// told that it applied late, when and why (issue 41, point 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_slack_click_applied_late_says_so() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let env = ChatOps::start_with(Backend::Postgres, Setup::default(), |config| {
        config.slack.approvers = vec!["UALICE".to_string()];
    })
    .await;
    // A stored row to lock: the start gate, closed.
    env.server.close("/gates/start/pr/42").await;
    let start = || async {
        client()
            .post(env.server.at("/gates/start/pr/42"))
            .json(&serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "Initialized", "checksum": "r1"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(start().await, 403);
    env.server.drained().await;
    let message = env.waiting_message("pr/42").expect("the waiting message");
    let stuck = RowLock::gates(&env.db.url, "%/acme/shop/pr/42").await;
    assert!(stuck.rows >= 1, "the PR's gate rows are locked");
    // Slack signs whole seconds: a click in the close's second reads as
    // written before it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let acknowledged = Instant::now();
    assert_eq!(
        env.click("UALICE", "alice", "gatebot_approve", &message, "late-click")
            .await,
        200
    );
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(acknowledged.elapsed())).await;
    assert_eq!(start().await, 403, "not applied while the lock is held");
    stuck.release().await;
    eventually("the approval to apply", Duration::from_secs(40), || async {
        start().await == 200
    })
    .await;
    eventually("the late note", Duration::from_secs(10), || async {
        !env.answers("late-click").await.is_empty()
    })
    .await;
    let answers = env.answers("late-click").await;
    let answer = answers.last().unwrap();
    assert!(
        answer.contains("after it was received (the database was unavailable)"),
        "{answers:?}"
    );
    insta::with_settings!({filters => vec![
        (r"\d{2}:\d{2}:\d{2} UTC", "[time] UTC"),
        (r"\d+ s after", "[waited] after"),
    ]}, {
        insta::assert_snapshot!("slack_click_applied_late", answer);
    });
}
