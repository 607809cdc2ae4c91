//! Which servers outbound calls trust: the OS roots (no bundled roots) and
//! `GATEBOT_EXTRA_CA_FILE`. The servers here present certificates from a CA
//! made in the test, which no OS store holds, so only the extra CA file makes
//! them trusted.

use std::process::{Command, Output};
use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Phase, Strategy};
use gatebot_testkit::harness::{eventually, Backend, TestDb, ADMIN_TOKEN};
use gatebot_testkit::proxy::FakeProxy;
use gatebot_testkit::served::{bin, Served};
use gatebot_testkit::tls::{TestCa, TlsFront};

const WAIT: Duration = Duration::from_secs(10);

fn cli(db: &TestDb, server: &str, extra: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .current_dir(db.dir.path())
        .args(["gates", "list", "--json"])
        .env("GATEBOT_SERVER", server)
        .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extra_ca_is_trusted_and_an_unknown_ca_is_not() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let ca = TestCa::new("gatebot test CA");
    let front = TlsFront::start(&ca.server_cert(), format!("127.0.0.1:{}", served.port)).await;
    let https = format!("https://localhost:{}", front.port);
    let ca_file = ca.write(db.dir.path(), "ca.pem");
    let ca_file = ca_file.to_str().unwrap();

    let out = cli(&db, &https, &[("GATEBOT_EXTRA_CA_FILE", ca_file)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"gates\""));

    // Neither the OS roots nor bundled ones know the test CA.
    let out = cli(&db, &https, &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );

    // Another CA is no better.
    let other = TestCa::new("another CA").write(db.dir.path(), "other.pem");
    let out = cli(
        &db,
        &https,
        &[("GATEBOT_EXTRA_CA_FILE", other.to_str().unwrap())],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).to_lowercase().contains("certificate"),
        "{}",
        stderr(&out)
    );

    // A file that holds no certificate is refused, not ignored.
    let empty = db.dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let out = cli(
        &db,
        &https,
        &[("GATEBOT_EXTRA_CA_FILE", empty.to_str().unwrap())],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("holds no PEM certificate"),
        "{}",
        stderr(&out)
    );
}

/// GitHub over TLS with a private CA, through the proxy with CONNECT: the
/// server's client takes both settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_over_tls_through_the_proxy_with_the_extra_ca() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    let ca = TestCa::new("gatebot test CA");
    let upstream = github.url.trim_start_matches("http://").to_string();
    let front = TlsFront::start(&ca.server_cert(), upstream).await;
    let proxy = FakeProxy::start().await;
    let ca_file = ca.write(db.dir.path(), "ca.pem");
    let api = format!("https://localhost:{}", front.port);
    let served = Served::start(
        &db,
        &[
            ("GATEBOT_GITHUB_TOKEN", "ghp_test"),
            ("GATEBOT_GITHUB_WEBHOOK_SECRET", "s3cret"),
            ("GATEBOT_GITHUB_API_URL", &api),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
            ("GATEBOT_EXTRA_CA_FILE", ca_file.to_str().unwrap()),
            ("HTTPS_PROXY", &proxy.url),
        ],
    );
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        pr_hooks(&served.url, 42),
    );
    sim.tick().await;
    sim.deploy("rev-b");
    assert!(sim.run_until(|s| s.phase() == Phase::Waiting, 6).await);
    eventually("the status comment", WAIT, || async {
        !github.status_comments(42).is_empty()
    })
    .await;
    let tunnels = proxy.seen_to(&format!("localhost:{}", front.port));
    assert!(!tunnels.is_empty(), "{:?}", proxy.seen());
    assert!(tunnels.iter().all(|p| p.method == "CONNECT"), "{tunnels:?}");
}

/// Slack Socket Mode from a private cluster: `apps.connections.open` and the
/// WebSocket both go through the proxy with CONNECT, over TLS from the private
/// CA, and a slash command comes back over the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_socket_mode_through_the_proxy_with_the_extra_ca() {
    let db = TestDb::new(Backend::Sqlite).await;
    let slack = FakeSlack::start().await;
    let ca = TestCa::new("gatebot test CA");
    let upstream = slack.url.trim_start_matches("http://").to_string();
    let front = TlsFront::start(&ca.server_cert(), upstream).await;
    slack.socket_urls_at(&format!("wss://localhost:{}", front.port));
    let proxy = FakeProxy::start().await;
    let ca_file = ca.write(db.dir.path(), "ca.pem");
    let api = format!("https://localhost:{}/api", front.port);
    let _served = Served::start(
        &db,
        &[
            ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-test"),
            ("GATEBOT_SLACK_APP_TOKEN", "xapp-1-A0FAKE-1-test"),
            ("GATEBOT_SLACK_API_URL", &api),
            ("GATEBOT_EXTRA_CA_FILE", ca_file.to_str().unwrap()),
            ("HTTPS_PROXY", &proxy.url),
        ],
    );
    eventually("a Socket Mode connection", WAIT, || async {
        slack.socket().open().len() == 1
    })
    .await;
    let tunnels = proxy.seen_to(&format!("localhost:{}", front.port));
    assert!(!tunnels.is_empty(), "{:?}", proxy.seen());
    assert!(tunnels.iter().all(|p| p.method == "CONNECT"), "{tunnels:?}");
    let help = serde_json::json!({
        "command": "/gatebot", "text": "help", "user_id": "U1", "user_name": "u",
        "team_id": "T1", "channel_id": "C1", "trigger_id": "t1",
        "response_url": slack.response_url("t1"),
    });
    let envelope = slack
        .socket()
        .send_to(slack.socket().open()[0], "slash_commands", help);
    eventually("the command acknowledged", WAIT, || async {
        !slack.socket().acks_of(&envelope).is_empty()
    })
    .await;
    let ack = slack.socket().acks_of(&envelope).remove(0);
    assert!(ack.payload.unwrap()["text"]
        .as_str()
        .unwrap()
        .contains("promote"));
}
