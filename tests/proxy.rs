//! Outbound calls through a corporate proxy: `HTTPS_PROXY`/`HTTP_PROXY`
//! (upper or lower case) are honoured by the GitHub and Slack clients and by
//! the CLI, and `NO_PROXY` hosts are reached directly. The proxy is a small
//! forward/CONNECT proxy started by the test that records what it carried.

use std::process::Command;
use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Phase, Strategy};
use gatebot_testkit::harness::{eventually, Backend, TestDb, ADMIN_TOKEN};
use gatebot_testkit::proxy::FakeProxy;
use gatebot_testkit::served::{bin, free_port, Served};

const WAIT: Duration = Duration::from_secs(10);

/// The host:port part of `http://host:port`.
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_goes_through_the_proxy_and_no_proxy_hosts_do_not() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    let slack = FakeSlack::start().await;
    let proxy = FakeProxy::start().await;
    // Slack by name, so that NO_PROXY=localhost exempts it and not GitHub.
    let slack_api = slack.api_url().replace("127.0.0.1", "localhost");
    let served = Served::start(
        &db,
        &[
            ("GATEBOT_GITHUB_TOKEN", "ghp_test"),
            ("GATEBOT_GITHUB_WEBHOOK_SECRET", "s3cret"),
            ("GATEBOT_SLACK_SIGNING_SECRET", "slack-s3cret"),
            ("GATEBOT_GITHUB_API_URL", &github.url),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
            ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-test"),
            ("GATEBOT_SLACK_API_URL", &slack_api),
            ("GATEBOT_SLACK_CHANNEL", "#deploys"),
            ("HTTP_PROXY", &proxy.url),
            ("HTTPS_PROXY", &proxy.url),
            ("NO_PROXY", "localhost"),
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
    eventually("the Slack message", WAIT, || async {
        !slack.ok("chat.postMessage").is_empty()
    })
    .await;

    // Every call GitHub saw came through the proxy, in absolute form.
    let via_proxy = proxy.seen_to(authority(&github.url));
    let at_github = github.requests();
    assert!(!at_github.is_empty());
    assert_eq!(
        via_proxy.len(),
        at_github.len(),
        "proxy {via_proxy:?}\ngithub {at_github:?}"
    );
    for (carried, seen) in via_proxy.iter().zip(&at_github) {
        let without_query = carried.target.split('?').next().unwrap();
        assert_eq!(without_query, format!("{}{}", github.url, seen.path));
    }
    // Slack is on NO_PROXY: reached directly.
    assert!(proxy.seen_to("localhost").is_empty(), "{:?}", proxy.seen());
}

/// The CLI reads the lower-case variables too, as curl does; https:// calls
/// are tunnelled with CONNECT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_goes_through_the_proxy() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let proxy = FakeProxy::start().await;
    let cli = |server: &str, var: &str| {
        let mut cmd = Command::new(bin());
        cmd.env_clear()
            .current_dir(db.dir.path())
            .args(["gates", "list", "--json"])
            .env("GATEBOT_SERVER", server)
            .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
            .env(var, &proxy.url);
        cmd.output().unwrap()
    };
    let out = cli(&served.url, "http_proxy");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = proxy.seen_to(&format!("{}/api/v1/gates", served.url));
    assert!(!listed.is_empty(), "{:?}", proxy.seen());
    assert!(listed.iter().all(|p| p.method == "GET"));

    // Nothing speaks TLS on this port, so the call fails after the tunnel
    // is asked for: what matters is that it was asked of the proxy.
    let port = free_port();
    let out = cli(&format!("https://127.0.0.1:{port}"), "https_proxy");
    assert!(!out.status.success());
    let connects = proxy.seen_to(&format!("127.0.0.1:{port}"));
    assert_eq!(connects.len(), 1, "{:?}", proxy.seen());
    assert_eq!(connects[0].method, "CONNECT");
    assert_eq!(connects[0].target, format!("127.0.0.1:{port}"));
}

/// check-config shows the proxies without their credentials, and refuses one
/// that is not a URL.
#[test]
fn check_config_shows_the_proxy_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let check = |proxy: &str| {
        Command::new(bin())
            .env_clear()
            .current_dir(dir.path())
            .arg("check-config")
            .env(
                "GATEBOT_DATABASE_URL",
                format!("sqlite://{}/g.db", dir.path().display()),
            )
            .env("HTTPS_PROXY", proxy)
            .env("no_proxy", ".corp.example")
            .output()
            .unwrap()
    };
    let out = check("http://alice:hunter2@proxy.corp.example:3128");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("https proxy http://proxy.corp.example:3128/, http proxy none, no proxy for .corp.example"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");

    let out = check("http://[not a host");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("problem:         HTTPS_PROXY"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}
