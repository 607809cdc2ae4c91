//! A replica whose clock is wrong, on PostgreSQL: two real processes on one
//! database, the second with its clock moved by `GATEBOT_TEST_CLOCK_OFFSET`
//! (90 s behind, then 90 s ahead). Each corrects its clock to the database's
//! at every heartbeat, so the written-before-close rule, approval expiries and
//! leases hold as if the clocks agreed; the skewed one says so in
//! `gatebot_clock_offset_seconds` and `/readyz`. Needs GATEBOT_TEST_POSTGRES_URL.

use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::github_payloads::{comment_at, deliver_signed, now_ms};
use gatebot_testkit::harness::{client, eventually, postgres_url, Backend, TestDb, ADMIN_TOKEN};
use gatebot_testkit::served::{limits_policy, Served};
use serde_json::{json, Value};

const GITHUB_SECRET: &str = "clock-github-secret";
const WAIT: Duration = Duration::from_secs(20);
const TTL_SECS: i64 = 600;
/// How far apart two stamps of one moment may be: the offset is measured to
/// within half a round trip, and the test's own steps take some time.
const SLACK_MS: i64 = 2_000;

fn skip() -> bool {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return true;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_replica_90s_behind_orders_events_by_the_database_clock() {
    if skip() {
        return;
    }
    skewed_replica_keeps_the_rules("-90s", 90.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_replica_90s_ahead_orders_events_by_the_database_clock() {
    if skip() {
        return;
    }
    skewed_replica_keeps_the_rules("+90s", -90.0).await;
}

/// A replica's wall clock stepped while it runs (as libfaketime does, from a
/// file): its very next close is stamped in the database's time, not 120 s
/// early (a `/promote` written a minute before the close would then reopen the
/// gate) nor 120 s late (valid commands refused for two minutes). Before the
/// next heartbeat measures the step, as right after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_clock_stepped_while_running_stamps_the_next_close_right() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let offset = dir.path().join("offset");
    std::fs::write(&offset, "0s").unwrap();
    let (_db, p) = start_pair(&format!("file:{}", offset.display())).await;
    eventually("B measured its clock", WAIT, || async {
        readyz(&p.b.url).await.0 == 200 && p.b.logs().contains("GATEBOT_TEST_CLOCK_OFFSET")
    })
    .await;
    // Time for a first reading (every second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (n, step) in [(40, "-120s"), (41, "+120s")] {
        let gate = format!("/gates/promote/pr/{n}");
        change(&p.a.url, true, &gate).await;
        assert_eq!(check(&p.a.url, &gate, "shop", "rev1").await, 200, "pinned");
        std::fs::write(&offset, step).unwrap();
        let before = now_ms();
        let closed = change(&p.b.url, false, &gate).await;
        let after = now_ms();
        let at = closed["change"]["at"].as_i64().expect("the close's time");
        assert!(
            before - SLACK_MS <= at && at <= after + SLACK_MS,
            "right after a step of {step}, the close on B is stamped {} ms from the real time",
            at - before
        );
        deliver(
            &p.a.url,
            &format!("early-{n}"),
            &comment_at(n, 4000 + n, "alice", "/promote", before - 60_000),
        )
        .await;
        eventually("the refusal's reply", WAIT, || async {
            !p.github.replies(n).is_empty()
        })
        .await;
        let reply = p.github.replies(n).remove(0).body;
        assert!(
            reply.contains("written before the gate closed at"),
            "{reply}"
        );
        for url in [&p.a.url, &p.b.url] {
            assert_eq!(
                check(url, &gate, "shop", "rev2").await,
                403,
                "closed on {url}"
            );
        }
        std::fs::write(&offset, "0s").unwrap();
    }
}

struct Pair {
    a: Served,
    b: Served,
    github: FakeGithub,
    slack: FakeSlack,
}

async fn start_pair(skew: &str) -> (TestDb, Pair) {
    let db = TestDb::new(Backend::Postgres).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    // A send in flight for a while: a replica that took the other for dead
    // would send it a second time meanwhile.
    github.set_write_delay(Duration::from_millis(300));
    let slack = FakeSlack::start().await;
    let limits = limits_policy(db.dir.path(), &[("outbox_backoff", "200ms")]);
    let vars = |offset: Option<&str>| {
        let mut vars = vec![
            ("GATEBOT_GITHUB_TOKEN", "ghp_test".to_string()),
            ("GATEBOT_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET.to_string()),
            ("GATEBOT_GITHUB_API_URL", github.url.clone()),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop".to_string()),
            (
                "GATEBOT_SLACK_SIGNING_SECRET",
                "clock-slack-secret".to_string(),
            ),
            ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-test".to_string()),
            ("GATEBOT_SLACK_API_URL", slack.api_url()),
            ("GATEBOT_SLACK_CHANNEL", "#deploys".to_string()),
            ("GATEBOT_APPROVAL_TTL", format!("{TTL_SECS}s")),
            ("GATEBOT_POLICY", limits.clone()),
            ("RUST_LOG", "warn".to_string()),
        ];
        if let Some(offset) = offset {
            vars.push(("GATEBOT_TEST_CLOCK_OFFSET", offset.to_string()));
        }
        vars
    };
    let served = |offset: Option<&str>| {
        let vars = vars(offset);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Served::start(&db, &vars)
    };
    let a = served(None);
    let b = served(Some(skew));
    let pair = Pair {
        a,
        b,
        github,
        slack,
    };
    (db, pair)
}

async fn skewed_replica_keeps_the_rules(skew: &str, offset_secs: f64) {
    let (_db, p) = start_pair(skew).await;
    offset_is_exported_and_b_is_unready(&p, offset_secs).await;
    written_before_close_holds_across_replicas(&p).await;
    expiries_agree(&p).await;
    leases_hold(&p).await;
    assert!(
        p.b.logs().contains("behind the database's")
            || p.b.logs().contains("ahead of the database's"),
        "the skewed replica's log names its clock: {}",
        p.b.logs()
    );
}

async fn metric(url: &str, name: &str) -> f64 {
    let text = client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {text}"))
}

async fn readyz(url: &str) -> (u16, String) {
    let r = client().get(format!("{url}/readyz")).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn offset_is_exported_and_b_is_unready(p: &Pair, offset_secs: f64) {
    let b_offset = metric(&p.b.url, "gatebot_clock_offset_seconds").await;
    assert!(
        (b_offset - offset_secs).abs() < 1.0,
        "B's offset {b_offset}, not about {offset_secs}"
    );
    let a_offset = metric(&p.a.url, "gatebot_clock_offset_seconds").await;
    assert!(a_offset.abs() < 1.0, "A's offset {a_offset}");
    let (status, why) = readyz(&p.b.url).await;
    assert_eq!(status, 503, "B is unready: {why}");
    assert!(why.contains("clock") && why.contains("90"), "{why}");
    assert_eq!(readyz(&p.a.url).await.0, 200, "A is ready");
}

async fn change(url: &str, open: bool, gate: &str) -> Value {
    let verb = if open { "open" } else { "close" };
    let r = client()
        .post(format!("{url}/api/v1/gates/{verb}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": gate}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{verb} {gate} via {url}");
    r.json().await.unwrap()
}

async fn check(url: &str, gate: &str, canary: &str, rev: &str) -> u16 {
    client()
        .post(format!("{url}{gate}"))
        .json(
            &json!({"name": canary, "namespace": "test", "phase": "Progressing", "checksum": rev}),
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn deliver(url: &str, id: &str, payload: &Value) {
    let (status, _) = deliver_signed(url, GITHUB_SECRET, "issue_comment", id, payload).await;
    assert_eq!(status, 202, "delivery {id} stored");
}

/// A close on B, then a `/promote` written (by GitHub's clock, the real time)
/// 5 s before it, delivered to A: refused. One written 5 s after it opens the gate.
async fn written_before_close_holds_across_replicas(p: &Pair) {
    let gate = "/gates/promote/pr/30";
    change(&p.a.url, true, gate).await;
    assert_eq!(check(&p.a.url, gate, "shop", "rev1").await, 200, "pinned");
    let before = now_ms();
    let closed = change(&p.b.url, false, gate).await;
    let after = now_ms();
    let at = closed["change"]["at"].as_i64().expect("the close's time");
    assert!(
        before - SLACK_MS <= at && at <= after + SLACK_MS,
        "the close on B is stamped {} ms from the real time",
        at - before
    );

    deliver(
        &p.a.url,
        "early",
        &comment_at(30, 3001, "alice", "/promote", before - 5_000),
    )
    .await;
    eventually("the refusal's reply", WAIT, || async {
        !p.github.replies(30).is_empty()
    })
    .await;
    let reply = p.github.replies(30).remove(0).body;
    assert!(
        reply.contains("written before the gate closed at"),
        "{reply}"
    );
    for url in [&p.a.url, &p.b.url] {
        assert_eq!(
            check(url, gate, "shop", "rev2").await,
            403,
            "closed on {url}"
        );
    }

    // Written 5 s after the close (the comment's time may not be ahead of now).
    let wait = (after + 5_000 - now_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    deliver(
        &p.a.url,
        "late",
        &comment_at(30, 3002, "alice", "/promote", after + 5_000),
    )
    .await;
    for url in [&p.a.url, &p.b.url] {
        eventually(&format!("{gate} open on {url}"), WAIT, || async {
            check(url, gate, "shop", "rev2").await == 200
        })
        .await;
    }
}

/// An approval given on either replica expires at the same real time.
async fn expiries_agree(p: &Pair) {
    for (n, url) in [(31, &p.a.url), (32, &p.b.url)] {
        let gate = format!("/gates/promote/pr/{n}");
        let before = now_ms();
        let opened = change(url, true, &gate).await;
        let expires = opened["expires_at"].as_i64().expect("an expiry");
        let due = before + TTL_SECS * 1000;
        assert!(
            (expires - due).abs() <= SLACK_MS,
            "approval given via {url} expires {} ms from due",
            expires - due
        );
        for other in [&p.a.url, &p.b.url] {
            let shown = client()
                .get(format!("{other}/api/v1/gates/promote/acme/shop/pr/{n}"))
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap();
            assert_eq!(shown["expires_at"], expires, "{other}: {shown}");
        }
    }
}

/// Waits started on both replicas: each gets one Slack message and one status
/// comment, none sent twice by a replica that took the other for dead.
async fn leases_hold(p: &Pair) {
    const PRS: u64 = 12;
    for n in 1..=PRS {
        let url = if n % 2 == 0 { &p.a.url } else { &p.b.url };
        let r = client()
            .post(format!("{url}/gates/start/pr/{}", 100 + n))
            .json(&json!({"name": format!("app-{n}"), "namespace": "test", "phase": "Waiting", "checksum": "rev-a"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "closed until approved");
    }
    eventually("every job settled", Duration::from_secs(40), || async {
        let jobs = p.a.api("/api/v1/outbox?state=pending").await;
        let posted = p.slack.ok("chat.postMessage").len();
        jobs["jobs"].as_array().unwrap().is_empty()
            && (101..=100 + PRS).all(|n| !p.github.status_comments(n).is_empty())
            && posted >= PRS as usize
    })
    .await;
    // Time for a second send, if a replica were to make one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in 101..=100 + PRS {
        assert_eq!(
            p.github.status_comments(n).len(),
            1,
            "PR {n}: one status comment"
        );
    }
    let mut posted: Vec<String> = p
        .slack
        .attempts("chat.postMessage")
        .into_iter()
        .filter(|m| m.body.get("thread_ts").is_none())
        .map(|m| m.body.to_string())
        .filter(|m| m.contains("app-"))
        .collect();
    let all = posted.len();
    posted.sort();
    posted.dedup();
    assert_eq!(all, posted.len(), "no Slack message sent twice");
    let jobs = p.a.api("/api/v1/outbox").await;
    for job in jobs["jobs"].as_array().unwrap() {
        assert_eq!(job["attempts"], 1, "taken once: {job}");
    }
}

/// SQLite is one process: its clock is the only one, nothing to correct, and
/// a clock far off is no reason to be unready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_the_offset_is_zero_and_readiness_ignores_the_clock() {
    let db = TestDb::new(Backend::Sqlite).await;
    let one = Served::start(&db, &[("GATEBOT_TEST_CLOCK_OFFSET", "-90s")]);
    assert_eq!(metric(&one.url, "gatebot_clock_offset_seconds").await, 0.0);
    assert_eq!(readyz(&one.url).await, (200, "ready\n".to_string()));
}
