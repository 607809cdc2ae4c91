//! Smaller holes (issue 24, point 10), each over real HTTP or the real binary:
//! the pipeline token reads only named gates; break glass keeps four eyes when
//! the force rule asks for it, from GitHub and from Slack; with the store
//! locked, GitHub and Slack get 503 within 2 s and Flagger's events are
//! answered at once and recorded once it is free; settings out of range are
//! refused at start and by `check-config`, dangerous ones warned about.

use std::time::{Duration, Instant};

use gatebot::testing::github::verify::sign;
use gatebot_testkit::chatops::{ChatOps, Setup, GITHUB_SECRET, SLACK_SECRET};
use gatebot_testkit::fake_slack::post_signed;
use gatebot_testkit::github_payloads::comment_at;
use gatebot_testkit::harness::check_config_of_policy;
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, ADMIN_TOKEN};
use gatebot_testkit::served::{bin, policy_file, Served};
use serde_json::{json, Value};
use sqlx::Connection;

const PIPELINE_TOKEN: &str = "test-pipeline-token";
/// Within GitHub's 10 s and Slack's 3 s, with room to spare.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

async fn get(url: String, token: &str) -> (u16, String) {
    let r = client().get(url).bearer_auth(token).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_token_reads_only_named_gates() {
    let env = ChatOps::start_with(Backend::Sqlite, Setup::default(), |config| {
        config.pipeline_token = Some(PIPELINE_TOKEN.to_string().into());
    })
    .await;
    env.server.open("/gates/promote/pr/60").await;
    let r = client()
        .post(env.server.at("/api/v1/gates"))
        .bearer_auth(PIPELINE_TOKEN)
        .json(&json!({"kind": "promote", "name": "r1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);

    let (status, text) = get(env.server.at("/api/v1/gates/promote/pr/60"), PIPELINE_TOKEN).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("reads only named gates"), "{text}");
    assert!(!text.contains("admin via api"), "no history leaks: {text}");
    for path in [
        "/api/v1/gates/promote/named/r1",
        "/api/v1/gates/promote/named/never",
    ] {
        let (status, text) = get(env.server.at(path), PIPELINE_TOKEN).await;
        assert_eq!(status, 200, "{path}: {text}");
    }
    let (status, text) = get(env.server.at("/api/v1/gates/promote/pr/60"), ADMIN_TOKEN).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        env.server
            .metric(r#"gatebot_rejected_requests_total{route="/api/v1/gates/{*key}",reason="not_named"}"#)
            .await,
        1.0
    );
}

const FOUR_EYES_FORCE: &str = r#"
[slack]
approvers = ["UCAROL", "UMARIA"]

[github.commands.force]
min_permission = "write"
forbid_self_approval = true

[slack.commands.force]
approvers = ["UCAROL", "UMARIA"]
forbid_self_approval = true

[users]
carol = "UCAROL"
maria = "UMARIA"
"#;

/// Carol opened acme/shop#42; the force rule forbids self-approval on both
/// channels: her break glass is refused, Maria's passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_glass_by_the_prs_author_is_refused_when_the_force_rule_says_four_eyes() {
    let env = ChatOps::start(
        Backend::Sqlite,
        Setup {
            policy: FOUR_EYES_FORCE,
            permissions: &[("carol", "write"), ("maria", "write")],
            clock: None,
        },
    )
    .await;
    env.github.set_author(42, "carol");
    let gate = || async { env.server.api("/api/v1/gates/promote/pr/42").await };

    env.comment_by(42, "carol", 1, "carol", "/promote --force prod is down")
        .await;
    let replies = env.replies(42).join("\n");
    assert!(replies.contains("four eyes"), "{replies}");
    let (status, text) = env
        .slash("UCAROL", "carol", "promote 42 --force prod is down", "T1")
        .await;
    assert_eq!(status, 200, "{text}");
    let answers = env.answers("T1").await.join("\n");
    assert!(
        answers.contains("(@carol) opened acme/shop#42: someone else must approve (four eyes)"),
        "{answers}"
    );
    let now = gate().await;
    assert_eq!(now["state"], "closed", "{now}");
    let actions: Vec<&str> = now["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["refuse", "refuse"], "{now}");

    env.slash("UMARIA", "maria", "promote 42 --force prod is down", "T2")
        .await;
    env.server.drained().await;
    let now = gate().await;
    assert_eq!(now["state"], "open", "{now}");
    assert_eq!(now["forced"], true, "{now}");
    assert_eq!(now["by"]["name"], "maria", "{now}");
}

/// Another connection on the store that holds it locked: SQLite's write lock;
/// on PostgreSQL the tables receipts, events and refusals are written to.
struct StoreLock(sqlx::AnyConnection);

impl StoreLock {
    async fn take(db: &TestDb) -> Self {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
        let sql = match db.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN; LOCK TABLE inbox, events, audit IN EXCLUSIVE MODE",
        };
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        Self(conn)
    }

    async fn release(mut self) {
        sqlx::raw_sql("COMMIT").execute(&mut self.0).await.unwrap();
    }
}

/// A request's status and how long its answer took.
async fn timed(request: reqwest::RequestBuilder) -> (u16, Duration, String) {
    let started = Instant::now();
    let r = request.send().await.expect("an answer");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, started.elapsed(), text)
}

gatebot_testkit::on_both_stores!(with_the_store_locked_every_sender_is_answered_within_2_s);

async fn with_the_store_locked_every_sender_is_answered_within_2_s(backend: Backend) {
    let env = ChatOps::start_with(backend, Setup::default(), |config| {
        config.slack.approvers = vec!["UALICE".into()];
    })
    .await;
    // A waiting message to click on.
    let check = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "rev-1"});
    let r = client()
        .post(env.server.at("/gates/promote/pr/42"))
        .json(&check)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    env.server.drained().await;
    let message = env
        .waiting_message("/gates/promote/acme/shop/pr/42")
        .expect("a waiting message");

    let lock = StoreLock::take(&env.db).await;
    let payload =
        serde_json::to_vec(&comment_at(42, 77, "alice", "/promote", env.now_ms())).unwrap();
    let github = client()
        .post(env.server.at("/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "d-locked")
        .header("x-hub-signature-256", sign(GITHUB_SECRET, &payload))
        .body(payload);
    let (status, took, text) = timed(github).await;
    assert_eq!(status, 503, "GitHub: {text}");
    assert!(took < ANSWER_WITHIN, "GitHub waited {took:?}");

    let started = Instant::now();
    let status = env
        .click("UALICE", "alice", "gatebot_approve", &message, "trig-1")
        .await;
    let took = started.elapsed();
    assert_eq!(status, 503, "a Slack click");
    assert!(took < ANSWER_WITHIN, "the click waited {took:?}");

    let started = Instant::now();
    let (status, text) = env.slash("UALICE", "alice", "promote 42", "trig-2").await;
    let took = started.elapsed();
    assert_eq!(status, 503, "a slash command: {text}");
    assert!(took < ANSWER_WITHIN, "the command waited {took:?}");
    // Refused, so written to the audit log: as bounded.
    let started = Instant::now();
    let (status, _) = env
        .slash("UMALLORY", "mallory", "promote 42", "trig-3")
        .await;
    assert_eq!(status, 503, "a refused slash command");
    assert!(started.elapsed() < ANSWER_WITHIN, "{:?}", started.elapsed());

    let event = json!({
        "name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "rev-1",
        "metadata": {"eventMessage": "Advance podinfo.test canary weight 50", "eventType": "Normal"},
    });
    let (status, took, text) =
        timed(client().post(env.server.at("/flagger/events")).json(&event)).await;
    assert_eq!(status, 202, "{text}");
    assert!(took < Duration::from_secs(1), "the event waited {took:?}");
    assert!(text.contains("recorded in order as soon as"), "{text}");

    lock.release().await;
    eventually(
        "the event recorded once the store is free",
        Duration::from_secs(15),
        || async {
            let events = env.server.api("/api/v1/events").await;
            events["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["message"] == "Advance podinfo.test canary weight 50")
        },
    )
    .await;
    let r = post_signed(
        &env.server.at("/webhooks/slack/commands"),
        "command=%2Fgatebot&text=help&user_id=UALICE&trigger_id=t9",
        env.now_ms() / 1000,
        SLACK_SECRET,
    )
    .await;
    assert_eq!(r.status().as_u16(), 200, "answered again");
}

/// `gatebot check-config` in an empty directory with `env`: success and output.
fn check_config(env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin())
        .env_clear()
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .arg("check-config")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `gatebot serve` with `env` in `dir`: it must refuse to start, saying `says`.
fn serve_refuses(dir: &std::path::Path, env: &[(&str, &str)], says: &str) {
    let out = std::process::Command::new(bin())
        .env_clear()
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
        .env("GATEBOT_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .current_dir(dir)
        .arg("serve")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started with {env:?}");
    assert!(stderr.contains(says), "{env:?}: {stderr}");
}

#[test]
fn settings_out_of_range_are_refused_by_check_config_and_at_start() {
    let ttl = [("GATEBOT_APPROVAL_TTL", "400000000y")];
    let says = "GATEBOT_APPROVAL_TTL must be from 1m to 365d, or 0 for approvals that never expire, not 400000000years";
    let (ok, text) = check_config(&ttl);
    assert!(!ok, "{ttl:?} passed:\n{text}");
    assert!(text.contains(&format!("problem:         {says}")), "{text}");
    serve_refuses(tempfile::tempdir().unwrap().path(), &ttl, says);
    let (ok, text) = check_config(&[("GATEBOT_APPROVAL_TTL", "0")]);
    assert!(ok, "0 means approvals never expire:\n{text}");
}

#[test]
fn limits_out_of_range_or_not_a_table_are_refused_by_check_config_and_at_start() {
    for (limits, says) in [
        (
            "[limits]\noutbox_max_attempts = 0",
            "[limits] outbox_max_attempts must be from 1 to 100, not 0",
        ),
        (
            "[limits]\noutbox_lease = \"0s\"",
            "[limits] outbox_lease must be from 1s to 1h, not 0s",
        ),
        (
            "[limits]\nrequest_timeout = \"2days\"",
            "[limits] request_timeout must be from 100ms to 10m, not 2d",
        ),
        (
            "[limits]\nnamed_gates_live = 0",
            "[limits] named_gates_live must be from 1 to 100000, not 0",
        ),
        (
            "[limits]\nnamed_gate_retention = \"1m\"",
            "[limits] named_gate_retention must be from 1h to 3650d, not 1m",
        ),
        (
            "[limits]\nmax_connections = 18446744073709551615",
            "max_connections",
        ),
        ("[limits]\nidle_timeout = 90", "90 has no unit"),
        (
            "[limits]\nidle_timout = \"90s\"",
            "unknown field `idle_timout`",
        ),
        (
            "[templates]\ndir = \"no-such-dir\"",
            "[templates] dir: \"no-such-dir\" is not a directory",
        ),
        (
            "[kubernetes]\napp_secret = \"../../kube-system/x\"",
            "is not a Secret's name",
        ),
        (
            "[kubernetes]\ncommit_annotation = \"\"",
            "is not an annotation key",
        ),
        (
            "kubernetes = [true]",
            "kubernetes must be a table ([kubernetes]), not a array",
        ),
        (
            "loadtester = [true]",
            "loadtester must be a table ([loadtester]), not a array",
        ),
        // An array would set the first limits in order without a word.
        (
            "limits = [\"1s\", \"2s\"]",
            "limits must be a table ([limits]), not a array",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, limits).unwrap();
        let env = [("GATEBOT_POLICY", policy.to_str().unwrap())];
        let (ok, text) = check_config(&env);
        assert!(!ok, "{limits} passed:\n{text}");
        assert!(text.contains(says), "{limits}:\n{text}");
        serve_refuses(dir.path(), &env, says);
    }
}

/// A templates directory of links to itself, or of too many files, is
/// refused at once, not walked for ever; what is printed of a path escapes
/// its control characters.
#[test]
fn a_templates_dir_of_loops_or_many_files_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let looped = dir.path().join("looped");
    std::fs::create_dir(&looped).unwrap();
    for name in ["a", "b", "c"] {
        std::os::unix::fs::symlink(".", looped.join(name)).unwrap();
    }
    let many = dir.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..1001 {
        std::fs::write(many.join(format!("f{i}")), "").unwrap();
    }
    for (templates, says) in [
        ("looped", "no template: a/a, a/b"),
        ("many", "holds more than 1000 entries"),
        ("nope\u{1b}[2K\rconfiguration OK", "is not a directory"),
    ] {
        let policy = dir.path().join("policy.toml");
        // TOML's escapes, not Rust's (`\u001b`, not `\u{1b}`).
        let path = dir.path().join(templates).display().to_string();
        let path = path.replace('\u{1b}', "\\u001b").replace('\r', "\\r");
        let text = format!("[templates]\ndir = \"{path}\"\n");
        std::fs::write(&policy, text).unwrap();
        let started = std::time::Instant::now();
        let (ok, text) = check_config(&[("GATEBOT_POLICY", policy.to_str().unwrap())]);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert!(!ok && text.contains(says), "{templates}: {text}");
        assert!(!text.contains('\u{1b}'), "a raw escape: {text:?}");
    }
}

#[test]
fn a_setting_that_moved_to_limits_is_named_with_its_new_place() {
    for (name, says) in [
        ("GATEBOT_OUTBOX_LEASE", "is no longer read: it is `outbox_lease` in the [limits] table of the policy file now"),
        ("GATEBOT_KUBERNETES_APP_SECRET", "is no longer read: it is `app_secret` in the [kubernetes] table of the policy file now"),
        ("GATEBOT_UI_GITHUB_OAUTH_URL", "is no longer read: GitHub's sign-in pages are found from GATEBOT_GITHUB_API_URL now"),
        ("GATEBOT_PROMETHEUS_USERNAME", "is no longer read: the user is the user part of GATEBOT_PROMETHEUS_URL now"),
    ] {
        let (ok, text) = check_config(&[(name, "x")]);
        assert!(!ok, "check-config passed {name}:\n{text}");
        let said = format!("{name} (from the environment) {says}");
        assert!(text.contains(&said), "{text}");
        // Left where it was, its value would be dropped: serve refuses too.
        serve_refuses(tempfile::tempdir().unwrap().path(), &[(name, "x")], &said);
    }
    // Misspelt, it is pointed at the setting it was, not at one still read.
    let (_, text) = check_config(&[("GATEBOT_UI_SESION_TTL", "1h")]);
    assert!(
        text.contains("did you mean GATEBOT_UI_SESSION_TTL? That one is no longer read: it is `ui_session_ttl` in the [limits] table"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangerous_settings_are_warned_about_by_check_config_and_at_start() {
    let proxies = "[ui] trusted_proxies: \"0.0.0.0/0\" trusts every address";
    let (ok, text) = check_config_of_policy(
        bin(),
        "[ui]\ntrusted_proxies = [\"10.0.0.0/8\", \"0.0.0.0/0\"]\n",
    );
    assert!(ok, "a warning, not a problem:\n{text}");
    assert!(
        text.contains(&format!("warning:         {proxies}")),
        "{text}"
    );
    let (_, text) = check_config_of_policy(bin(), "[ui]\ntrusted_proxies = [\"10.0.0.0/8\"]\n");
    assert!(!text.contains("warning:"), "{text}");
    // Judged by what an entry covers, not how it is written.
    let (ok, text) = check_config_of_policy(
        bin(),
        "[ui]\ntrusted_proxies = [\"0.0.0.0/1\", \"128.0.0.0/1\"]\n",
    );
    assert!(
        ok && text.contains("\"0.0.0.0/1\" trusts 2^31 addresses"),
        "{text}"
    );
    // What serve would refuse, check-config refuses too.
    for sneaky in ["0.0.0.0/+0", "0.0.0.0/00", "proxy.internal", "10.0.0.0/8/8"] {
        let (ok, text) =
            check_config_of_policy(bin(), &format!("[ui]\ntrusted_proxies = [\"{sneaky}\"]\n"));
        assert!(
            !ok && text.contains("is not an address or CIDR"),
            "{sneaky}: {text}"
        );
    }

    let db = TestDb::new(Backend::Sqlite).await;
    let policy = policy_file(
        db.dir.path(),
        "policy.toml",
        "[ui]\ntrusted_proxies = [\"::/0\"]\n[loadtester]\nopen_access = true\n",
    );
    let served = Served::start(&db, &[("GATEBOT_POLICY", &policy)]);
    let logs = served.logs();
    assert!(
        logs.contains("[ui] trusted_proxies: \"::/0\" trusts every address"),
        "{logs}"
    );
    assert!(
        logs.contains("[loadtester] open_access = true: anyone"),
        "{logs}"
    );
    let _: Value = served.api("/api/v1/gates").await;
}

gatebot_testkit::on_both_stores!(a_reason_with_a_nul_byte_is_kept);

/// A person's reason may hold any character, NUL among them, which
/// PostgreSQL's text refuses: the command still applies on both stores, with
/// the character kept as U+FFFD, rather than failing until given up.
async fn a_reason_with_a_nul_byte_is_kept(backend: Backend) {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let server = gatebot_testkit::harness::TestServer::start(config, Default::default()).await;
    let r = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/acme/shop/pr/7", "reason": "incident\u{0}ongoing"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let audit = server.api("/api/v1/audit").await;
    let reason = &audit["audit"][0]["reason"];
    assert_eq!(reason, "incident\u{FFFD}ongoing", "{audit}");
}
