//! What an operator scrapes from /metrics, over real HTTP: the build, every
//! call to GitHub and Slack by result (rate-limited ones too) with its latency,
//! the outbox's depth and the age of its oldest notification, how long waits
//! lasted until a decision, and whether the store is ready. SQLite and
//! PostgreSQL; the build info also from the real binary.

use std::collections::BTreeMap;
use std::time::Duration;

use gatebot::testing::clock::{ManualClock, SharedClock};
use gatebot::testing::notify::WorkerSettings;
use gatebot::Options;
use gatebot_testkit::fake_github::{Failure, FakeGithub};
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use gatebot_testkit::served::Served;
use serde_json::json;

/// 2024-05-01T14:02:00Z.
const NOW: i64 = 1_714_572_120_000;

/// Every sample of a scrape, `name{labels}` → value.
type Samples = BTreeMap<String, f64>;

async fn scrape(base: &str) -> Samples {
    let text = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("a body");
    parse(&text)
}

fn parse(text: &str) -> Samples {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The value of the one series named exactly `series` (labels in export order).
fn value(samples: &Samples, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

fn options(clock: &std::sync::Arc<ManualClock>) -> Options {
    Options {
        clock: Some(clock.clone() as SharedClock),
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    }
}

async fn check(server: &TestServer, gate: &str) -> u16 {
    client()
        .post(server.at(gate))
        .json(
            &json!({"name": "podinfo", "namespace": "test", "phase": "Progressing",
                      "checksum": "rev-1"}),
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A wait's announcement is rate limited by both GitHub and Slack: both calls
/// are counted as `rate_limited` and timed; the notifications stay pending and
/// /metrics tells how many and how old the oldest is. Once both services take
/// them, the calls count as `ok` and the outbox is empty again.
async fn outbound_calls_and_the_outbox(backend: Backend) {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    let slack = FakeSlack::start().await;
    github.fail_writes([Failure::retry_after(3600)]);
    slack.rate_limit_next("chat.postMessage", 3600);
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.webhook_secret = Some("whsec".to_string().into());
    config.github.api_url = github.url.clone();
    config.slack.signing_secret = Some("secret".to_string().into());
    config.slack.bot_token = Some("xoxb-test".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    let clock = ManualClock::new(NOW);
    let server = TestServer::start(config, options(&clock)).await;
    let base = server.at("");
    let base = base.trim_end_matches('/');

    assert_eq!(check(&server, "/gates/promote/pr/42").await, 403);
    eventually(
        "both services were called once",
        Duration::from_secs(20),
        || async {
            !slack.attempts("chat.postMessage").is_empty()
                && github.requests().iter().any(|r| r.method == "POST")
        },
    )
    .await;
    server.drained().await;
    clock.advance(90_000);

    let m = scrape(base).await;
    let limited = |service: &str, endpoint: &str| {
        format!("gatebot_outbound_requests_total{{service=\"{service}\",endpoint=\"{endpoint}\",result=\"rate_limited\"}}")
    };
    assert_eq!(value(&m, &limited("slack", "chat.postMessage")), 1.0);
    assert_eq!(value(&m, &limited("github", "create_comment")), 1.0);
    let timed = "gatebot_outbound_request_duration_seconds_count{service=\"slack\",endpoint=\"chat.postMessage\"}";
    assert_eq!(value(&m, timed), 1.0);
    let slowest = "gatebot_outbound_request_duration_seconds_bucket{le=\"10.0\",service=\"slack\",endpoint=\"chat.postMessage\"}";
    assert_eq!(value(&m, slowest), 1.0, "the call is in the histogram");
    assert!(
        value(&m, "gatebot_outbox_pending") >= 2.0,
        "both announcements wait: {m:#?}"
    );
    let age = value(
        &m,
        "gatebot_queue_oldest_pending_age_seconds{queue=\"outbox\"}",
    );
    assert!((90.0..91.0).contains(&age), "the oldest waited 90 s: {age}");
    assert_eq!(
        value(
            &m,
            "gatebot_queue_oldest_pending_age_seconds{queue=\"inbox\"}"
        ),
        0.0
    );

    // Past the Retry-After both services take the notifications.
    clock.advance(3_600_000);
    eventually(
        "the retries went through",
        Duration::from_secs(20),
        || async { !slack.ok("chat.postMessage").is_empty() && !github.comments_on(42).is_empty() },
    )
    .await;
    server.drained().await;
    let m = scrape(base).await;
    let ok = |service: &str, endpoint: &str| {
        format!("gatebot_outbound_requests_total{{service=\"{service}\",endpoint=\"{endpoint}\",result=\"ok\"}}")
    };
    assert_eq!(value(&m, &ok("slack", "chat.postMessage")), 1.0);
    assert_eq!(value(&m, &ok("github", "create_comment")), 1.0);
    assert_eq!(value(&m, "gatebot_outbox_pending"), 0.0);
    assert_eq!(
        value(
            &m,
            "gatebot_queue_oldest_pending_age_seconds{queue=\"outbox\"}"
        ),
        0.0
    );
}

/// A wait that someone approves after two minutes: the time to that decision is
/// in `gatebot_wait_duration_seconds{outcome="opened"}`; a readiness probe sets
/// `gatebot_store_ready`.
async fn time_to_decision_and_readiness(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let clock = ManualClock::new(NOW);
    let server = TestServer::start(config, options(&clock)).await;
    let base = server.at("");
    let base = base.trim_end_matches('/');

    let m = scrape(base).await;
    assert_eq!(
        value(&m, "gatebot_store_ready"),
        0.0,
        "no probe has passed yet"
    );
    let r = client().get(server.at("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(value(&scrape(base).await, "gatebot_store_ready"), 1.0);

    assert_eq!(check(&server, "/gates/promote/pr/7").await, 403);
    clock.advance(120_000);
    let opened = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/7", "reason": "looked fine"}))
        .send()
        .await
        .unwrap();
    assert!(opened.status().is_success(), "{}", opened.status());
    assert_eq!(check(&server, "/gates/promote/pr/7").await, 200);

    let m = scrape(base).await;
    let series = |s: &str| {
        format!("gatebot_wait_duration_seconds_{s}{{kind=\"promote\",outcome=\"opened\"}}")
    };
    assert_eq!(value(&m, &series("count")), 1.0, "{m:#?}");
    assert_eq!(value(&m, &series("sum")), 120.0);
}

gatebot_testkit::on_both_stores!(
    outbound_calls_and_the_outbox,
    time_to_decision_and_readiness
);

/// The real binary says which build it is: the crate's version, the commit it
/// was built from (`unknown` outside a git checkout) and the compiler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_info_names_version_commit_and_compiler() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let m = scrape(&served.url).await;
    let (series, v) = m
        .iter()
        .find(|(k, _)| k.starts_with("gatebot_build_info{"))
        .unwrap_or_else(|| panic!("no gatebot_build_info in {m:#?}"));
    assert_eq!(*v, 1.0);
    let commit = std::env::var("GATEBOT_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            let out = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let want = format!(
        "gatebot_build_info{{version=\"{}\",commit=\"{commit}\",rustc=\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(series.starts_with(&want), "{series} starts with {want}");
    let rustc = series[want.len()..].trim_end_matches("\"}");
    // Families with no series yet are described too, so the chart's alerts and
    // dashboard can be checked against a fresh process (.ci/deploy_check.py).
    let text = client()
        .get(format!("{}/metrics", served.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for described in [
        "# TYPE gatebot_outbound_requests counter\n",
        "# TYPE gatebot_wait_duration_seconds histogram\n",
        "# TYPE gatebot_notifications_dropped counter\n",
    ] {
        assert!(text.contains(described), "{described} in {text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        rustc.split('.').count() == 3 && rustc.split('.').all(|p| p.parse::<u32>().is_ok()),
        "rustc version {rustc}"
    );
}
