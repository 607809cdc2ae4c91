//! The canary's numbers beside the buttons (issue 29, docs/evidence.md):
//! with GATEBOT_PROMETHEUS_URL, gatebot asks a fake Prometheus (real answer
//! shapes from tests/fixtures/prometheus/) Flagger's own built-in queries
//! for the canary and its primary, and shows the line in the Slack message,
//! the PR's status comment and the gate's page, over real HTTP on both stores.

use std::time::{Duration, Instant};

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::fake_prometheus::{Answer, FakePrometheus};
use gatebot_testkit::flagger::FlaggerSim;
use gatebot_testkit::harness::{client, eventually, Backend};

const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";
const POLICY: &str = "[evidence]\nprovider = \"istio\"\ninterval = \"1m\"\n";

const NOW: i64 = 1_714_572_120_000;

struct Env {
    chat: ChatOps,
    prometheus: FakePrometheus,
    clock: Arc<ManualClock>,
}

async fn setup(backend: Backend, policy: &str) -> Env {
    let prometheus = FakePrometheus::start().await;
    let url = prometheus.url.clone();
    let clock = ManualClock::new(NOW);
    let chat = ChatOps::start_with(
        backend,
        Setup {
            policy,
            clock: Some(clock.clone()),
            ..Setup::default()
        },
        |config| {
            config.prometheus.url = Some(url);
            config.limits.evidence_refresh = Duration::from_millis(100);
            config.limits.prometheus_timeout = Duration::from_millis(300);
            config.public_url = Some("https://gatebot.example.com".into());
        },
    )
    .await;
    Env {
        chat,
        prometheus,
        clock,
    }
}

/// The istio numbers of test/podinfo: the canary's success rate and p99,
/// and the primary's.
fn podinfo_numbers(prometheus: &FakePrometheus, success: &str, p99: &str) {
    let rate = "istio_requests_total";
    let latency = "istio_request_duration_milliseconds_bucket";
    let canary = "destination_workload=~\"podinfo\"";
    let primary = "destination_workload=~\"podinfo-primary\"";
    prometheus.answer(&[rate, canary], Answer::Value(success.into()));
    prometheus.answer(&[rate, primary], Answer::Value("99.8".into()));
    prometheus.answer(&[latency, canary], Answer::Value(p99.into()));
    prometheus.answer(&[latency, primary], Answer::Value("95".into()));
}

/// PR 42's canary waiting at the promote gate.
async fn waiting_at_promote(chat: &ChatOps) -> FlaggerSim {
    gatebot_testkit::flagger::waiting_at_promote(&chat.server).await
}

/// The text of the promote gate's waiting message as last posted or updated.
fn slack_text(chat: &ChatOps) -> String {
    let posted = chat.waiting_message(PROMOTE).map(|r| r.body);
    let updated = chat
        .slack
        .ok("chat.update")
        .into_iter()
        .rfind(|r| r.body["blocks"].to_string().contains(PROMOTE))
        .map(|r| r.body);
    updated
        .or(posted)
        .map_or_else(String::new, |b| b["blocks"].to_string())
}

fn status_comment(chat: &ChatOps) -> String {
    chat.github
        .status_comments(42)
        .last()
        .map_or_else(String::new, |c| c.body.clone())
}

async fn page(chat: &ChatOps) -> String {
    let r = client()
        .get(chat.server.at(&format!("/ui{PROMOTE}")))
        .bearer_auth(gatebot_testkit::harness::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    r.text().await.unwrap()
}

const WORSE_LINE: &str =
    "⚠ success 97.1 % (primary 99.8 %) · ⚠ p99 310 ms (primary 95 ms) · last 1m";

gatebot_testkit::on_both_stores!(
    numbers_appear_in_slack_the_status_comment_and_the_page,
    prometheus_down_says_why_and_is_counted,
    new_numbers_are_shown_at_most_once_a_minute_and_reminders_carry_them,
);

async fn numbers_appear_in_slack_the_status_comment_and_the_page(backend: Backend) {
    let env = setup(backend, POLICY).await;
    let chat = &env.chat;
    podinfo_numbers(&env.prometheus, "97.1", "310");
    let _sim = waiting_at_promote(chat).await;
    eventually(
        "the numbers in Slack and on the PR",
        Duration::from_secs(15),
        || async {
            slack_text(chat).contains("success 97.1") && status_comment(chat).contains("97.1")
        },
    )
    .await;
    chat.server.drained().await;
    assert!(
        slack_text(chat).contains(WORSE_LINE),
        "{}",
        slack_text(chat)
    );
    let comment = status_comment(chat);
    let line = comment
        .lines()
        .find(|l| l.starts_with("- 📈"))
        .unwrap_or_else(|| panic!("no numbers in {comment}"));
    assert_eq!(line, format!("- 📈 `test/podinfo`: {WORSE_LINE}"));
    let html = page(chat).await;
    assert!(
        html.contains("⚠ success 97.1 % (primary 99.8 %)"),
        "the page shows the numbers: {html}"
    );
    assert_eq!(
        html.matches("<polyline").count(),
        4,
        "two charts, canary and primary each: {html}"
    );
    assert!(
        html.contains(">50 %</text>"),
        "the weight step is marked: {html}"
    );
    let queries = env.prometheus.queries();
    assert!(
        queries
            .iter()
            .any(|q| q.contains("destination_workload_namespace=\"test\"")),
        "Flagger's istio query for the canary: {queries:#?}"
    );
    if backend == Backend::Sqlite {
        insta::assert_snapshot!("evidence_status_comment", comment);
        let blocks: serde_json::Value = serde_json::from_str(&slack_text(chat)).unwrap();
        insta::assert_json_snapshot!("evidence_slack_message", blocks);
    }
}

async fn prometheus_down_says_why_and_is_counted(backend: Backend) {
    let env = setup(backend, POLICY).await;
    let chat = &env.chat;
    env.prometheus.down(true);
    let _sim = waiting_at_promote(chat).await;
    eventually("the reason in Slack", Duration::from_secs(15), || async {
        slack_text(chat).contains("metrics unavailable")
    })
    .await;
    assert!(
        slack_text(chat).contains("metrics unavailable: Prometheus answered HTTP 503"),
        "{}",
        slack_text(chat)
    );
    let counted = r#"gatebot_evidence_unavailable_total{reason="error"}"#;
    assert!(chat.server.metric(counted).await >= 1.0);
}

async fn new_numbers_are_shown_at_most_once_a_minute_and_reminders_carry_them(backend: Backend) {
    let policy = format!("{POLICY}[reminders]\nat = [\"30m\"]\n");
    let env = setup(backend, &policy).await;
    let chat = &env.chat;
    podinfo_numbers(&env.prometheus, "99.7", "90");
    let mut sim = waiting_at_promote(chat).await;
    eventually("the first numbers", Duration::from_secs(15), || async {
        slack_text(chat).contains("success 99.7 %")
    })
    .await;
    chat.server.drained().await;
    let updates = chat.slack.ok("chat.update").len();

    // Worse numbers within the minute: read, not yet shown.
    podinfo_numbers(&env.prometheus, "96.0", "90");
    let asked = env.prometheus.queries().len();
    eventually(
        "the numbers read again",
        Duration::from_secs(15),
        || async { env.prometheus.queries().len() >= asked + 8 },
    )
    .await;
    chat.server.drained().await;
    assert_eq!(
        chat.slack.ok("chat.update").len(),
        updates,
        "not within the minute"
    );
    assert!(slack_text(chat).contains("success 99.7 %"));

    env.clock.advance(60_000);
    eventually(
        "the new numbers after the minute",
        Duration::from_secs(15),
        || async {
            slack_text(chat).contains("⚠ success 96.0 %")
                && status_comment(chat).contains("⚠ success 96.0 %")
        },
    )
    .await;

    // Flagger asks at every interval: a wait whose canary went silent for
    // 30 minutes would be abandoned.
    env.clock.advance(20 * 60_000);
    sim.tick().await;
    env.clock.advance(10 * 60_000);
    eventually(
        "the reminder with the numbers",
        Duration::from_secs(15),
        || async {
            chat.slack.ok("chat.postMessage").iter().any(|r| {
                r.body.get("thread_ts").is_some()
                    && r.body["text"].to_string().contains("⚠ success 96.0 %")
            })
        },
    )
    .await;
}

/// A slow Prometheus (1 s per query, past the timeout) does not slow the
/// gate check: Flagger's answer comes as fast as with evidence off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_prometheus_leaves_the_gate_check_alone() {
    let env = setup(Backend::Sqlite, POLICY).await;
    let chat = &env.chat;
    env.prometheus.slow(Duration::from_secs(1));
    let _sim = waiting_at_promote(chat).await;
    eventually("the timeout shown", Duration::from_secs(15), || async {
        slack_text(chat).contains("metrics unavailable: Prometheus did not answer in time")
    })
    .await;
    let url = chat.server.at("/gates/promote/pr/42");
    let body = serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "WaitingPromotion", "checksum": "rev-b"});
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        let r = client().post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 403);
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(250),
        "a check took {slowest:?} while Prometheus hangs"
    );
}

/// Flagger's names come over an unauthenticated webhook: a canary whose
/// `target` metadata would break out of the label matcher gets no query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_target_makes_no_query() {
    let env = setup(Backend::Sqlite, POLICY).await;
    let chat = &env.chat;
    let server = &chat.server;
    let url = server.at("/gates/promote/pr/42");
    // A person's approval was used by it: a real canary, whose numbers are read.
    pinned_at_start(server, "podinfo").await;
    let body = serde_json::json!({
        "name": "podinfo", "namespace": "test", "phase": "WaitingPromotion", "checksum": "rev-b",
        "metadata": {"target": "x\"}[1m]) or vector(1) #"}
    });
    let r = client().post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    eventually("the refusal in Slack", Duration::from_secs(15), || async {
        slack_text(chat).contains("metrics unavailable")
    })
    .await;
    assert!(slack_text(chat).contains("do not make a safe query"));
    assert!(
        env.prometheus
            .queries()
            .iter()
            .all(|q| !q.contains("vector(1)")),
        "{:#?}",
        env.prometheus.queries()
    );
}

/// PR 42's start gate opened through the API and used by `test/{name}`: a pin.
async fn pinned_at_start(server: &gatebot_testkit::harness::TestServer, name: &str) {
    let r = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth(gatebot_testkit::harness::ADMIN_TOKEN)
        .json(&serde_json::json!({"gate": "/gates/start/pr/42", "reason": "go"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let check = serde_json::json!({
        "name": name, "namespace": "test", "phase": "Progressing", "checksum": "rev-b",
    });
    let r = client()
        .post(server.at("/gates/start/pr/42"))
        .json(&check)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
}

/// An event as Flagger's event hook posts it, for `test/{name}`.
async fn flagger_event(server: &gatebot_testkit::harness::TestServer, name: &str) {
    let event = serde_json::json!({
        "name": name, "namespace": "test", "phase": "Progressing", "checksum": "rev-b",
        "metadata": {"eventMessage": "New revision detected! Scaling up", "eventType": "Normal"}
    });
    let r = client()
        .post(server.at("/flagger/events"))
        .json(&event)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

/// A check alone is a claim, and so is an event without a Flagger token:
/// made-up canaries waiting cost no query, one a person's approval was used
/// by is asked about, and its `interval` claim reaches
/// PromQL only held to an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_real_canaries_are_queried_and_the_interval_is_bounded() {
    let env = setup(Backend::Sqlite, POLICY).await;
    let server = &env.chat.server;
    let url = server.at("/gates/promote/pr/42");
    let check = |name: String| {
        let body = serde_json::json!({
            "name": name, "namespace": "test", "phase": "WaitingPromotion", "checksum": "rev-b",
            "metadata": {"interval": "99999999999y"}
        });
        client().post(&url).json(&body).send()
    };
    for i in 0..30 {
        assert_eq!(
            check(format!("made-up-{i}"))
                .await
                .unwrap()
                .status()
                .as_u16(),
            403
        );
    }
    // Without Flagger tokens an event is anyone's word: it makes no canary real.
    flagger_event(server, "made-up-0").await;
    pinned_at_start(server, "podinfo").await;
    assert_eq!(
        check("podinfo".into()).await.unwrap().status().as_u16(),
        403
    );
    eventually("podinfo asked about", Duration::from_secs(15), || async {
        env.prometheus
            .queries()
            .iter()
            .any(|q| q.contains("podinfo"))
    })
    .await;
    // A few more passes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queries = env.prometheus.queries();
    assert!(
        queries.iter().all(|q| !q.contains("made-up")),
        "{queries:#?}"
    );
    assert!(
        queries.iter().all(|q| !q.contains("99999999999y")),
        "{queries:#?}"
    );
    assert!(queries.iter().any(|q| q.contains("[1h]")), "{queries:#?}");
}

/// `gatebot check-config` says whether Prometheus answers and which
/// provider's queries each waiting canary gets, and why that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_says_whether_prometheus_answers_and_each_canarys_provider() {
    let prometheus = FakePrometheus::start().await;
    prometheus.answer(&["vector(1)"], Answer::Value("1".into()));
    let db = gatebot_testkit::harness::TestDb::new(Backend::Sqlite).await;
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[evidence]\nprovider = \"nginx\"\n[limits]\nprometheus_timeout = \"500ms\"\n",
    )
    .unwrap();
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    let server = gatebot_testkit::harness::TestServer::start(config, Default::default()).await;
    for (name, metadata) in [
        ("podinfo", serde_json::json!({"provider": "linkerd"})),
        ("frontend", serde_json::json!({})),
    ] {
        let body = serde_json::json!({"name": name, "namespace": "test", "phase": "Progressing", "checksum": "rev-a", "metadata": metadata});
        let r = client()
            .post(server.at("/gates/promote/pr/7"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403);
    }
    server.stop().await;
    let check = |url: String| {
        let (database, policy) = (db.url.clone(), policy.clone());
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
                .env_clear()
                .env("GATEBOT_DATABASE_URL", database)
                .env("GATEBOT_POLICY", policy)
                .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop")
                .env("GATEBOT_PROMETHEUS_URL", url)
                .arg("check-config")
                .output()
                .expect("gatebot runs");
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    };
    let text = check(prometheus.url.clone()).await.unwrap();
    assert!(
        text.contains(&format!("prometheus:      {} answers", prometheus.url)),
        "{text}"
    );
    assert!(
        text.contains("evidence:        test/podinfo uses linkerd's queries (from its metadata)"),
        "{text}"
    );
    assert!(
        text.contains("evidence:        test/frontend uses nginx's queries (from the policy)"),
        "{text}"
    );

    prometheus.down(true);
    let text = check(prometheus.url.clone()).await.unwrap();
    assert!(text.contains("Prometheus answered HTTP 503"), "{text}");
}

/// `[[evidence.queries]]`: the policy's own query, with Flagger's template
/// variables, is shown after the built-in ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_query_is_shown_after_the_built_in_ones() {
    let policy = format!(
        "{POLICY}[[evidence.queries]]\nname = \"errors\"\nunit = \"/s\"\n\
         query = 'sum(rate(http_errors_total{{namespace=\"{{{{ namespace }}}}\",app=\"{{{{ target }}}}\"}}[{{{{ interval }}}}]))'\n"
    );
    let env = setup(Backend::Sqlite, &policy).await;
    let chat = &env.chat;
    podinfo_numbers(&env.prometheus, "99.9", "90");
    let rendered = "sum(rate(http_errors_total{namespace=\"test\",app=\"podinfo\"}[1m]))";
    env.prometheus
        .answer(&[rendered], Answer::Value("0.4".into()));
    let _sim = waiting_at_promote(chat).await;
    eventually("the policy's number", Duration::from_secs(15), || async {
        slack_text(chat).contains("· errors 0.4 /s · last 1m")
    })
    .await;
}

/// A Prometheus behind an auth proxy: the bearer token file is read at
/// each refresh (a rotated token is used from the next one), and basic
/// auth is sent when set instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_file_is_read_again_and_basic_auth_is_sent() {
    let prometheus = FakePrometheus::start().await;
    podinfo_numbers(&prometheus, "99.9", "90");
    prometheus.require_token("token-1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "token-1\n").unwrap();
    let url = prometheus.url.clone();
    let (token_file, clock) = (file.clone(), ManualClock::new(NOW));
    let chat = ChatOps::start_with(
        Backend::Sqlite,
        Setup {
            policy: POLICY,
            clock: Some(clock.clone()),
            ..Setup::default()
        },
        |config| {
            config.prometheus.url = Some(url);
            config.prometheus.bearer_token_file = Some(token_file);
            config.limits.evidence_refresh = Duration::from_millis(100);
        },
    )
    .await;
    let _sim = waiting_at_promote(&chat).await;
    eventually(
        "the numbers with the token",
        Duration::from_secs(15),
        || async { slack_text(&chat).contains("success 99.9 %") },
    )
    .await;
    // The token rotates: the file's new one is sent from the next refresh.
    prometheus.require_token("token-2");
    std::fs::write(&file, "token-2\n").unwrap();
    podinfo_numbers(&prometheus, "98.0", "90");
    clock.advance(60_000);
    eventually(
        "the numbers with the rotated token",
        Duration::from_secs(15),
        || async { slack_text(&chat).contains("success 98.0 %") },
    )
    .await;

    let basic = FakePrometheus::start().await;
    podinfo_numbers(&basic, "99.9", "90");
    // "gatebot:s3cret", as RFC 7617 encodes it.
    basic.require_authorization("Basic Z2F0ZWJvdDpzM2NyZXQ=");
    let url = basic.url.clone();
    let chat = ChatOps::start_with(
        Backend::Sqlite,
        Setup {
            policy: POLICY,
            ..Setup::default()
        },
        |config| {
            // The user is the URL's user part.
            config.prometheus.url = Some(url.replacen("://", "://gatebot@", 1));
            config.prometheus.password = Some("s3cret".to_string().into());
            config.limits.evidence_refresh = Duration::from_millis(100);
        },
    )
    .await;
    let _sim = waiting_at_promote(&chat).await;
    eventually(
        "the numbers with basic auth",
        Duration::from_secs(15),
        || async { slack_text(&chat).contains("success 99.9 %") },
    )
    .await;
}
