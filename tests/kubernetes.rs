//! A canary's own gate (`/gates/{kind}`) answered as the gate of the PR that
//! brought its revision (`GATEBOT_KUBERNETES_LOOKUP`): the commit read from a
//! fake Kubernetes API server (Flagger's example Canary and its Deployment),
//! the PR from the fake GitHub, gatebot over real HTTP on both stores.

use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_kube::{FakeKube, CANARY, DEPLOYMENT};
use gatebot_testkit::harness::{client, eventually, Backend, TestDb, TestServer, ADMIN_TOKEN};
use gatebot_testkit::on_both_stores;
use gatebot_testkit::tls::{TestCa, TlsFront};
use serde_json::json;
use sqlx::Connection;

const WAIT: Duration = Duration::from_secs(15);
/// The commit the Deployment's image is tagged with.
const SHA: &str = "9c1e4f2a7b3d5e6f8a0b1c2d3e4f5a6b7c8d9e0f";
/// Flagger's checksum of the revision.
const CHECKSUM: &str = "5d8f6f7b9c";
const PR_GATE: &str = "/gates/promote/acme/shop/pr/42";

struct Env {
    server: TestServer,
    github: FakeGithub,
    kube: FakeKube,
    db: TestDb,
}

async fn start(db: &TestDb, github: &FakeGithub, kube: &FakeKube) -> TestServer {
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some("test-webhook-secret".to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    config.kubernetes.lookup = true;
    config.kubernetes.kubeconfig = Some(kube.kubeconfig(db.dir.path(), "gatebot"));
    config.kubernetes.lookup_backoff = Duration::from_millis(100);
    let options = gatebot::Options {
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Default::default()
    };
    TestServer::start(config, options).await
}

async fn setup(backend: Backend) -> Env {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    let kube = FakeKube::start().await;
    let server = start(&db, &github, &kube).await;
    Env {
        server,
        github,
        kube,
        db,
    }
}

/// Flagger's confirm-promotion call for `test/podinfo`, on the canary's own gate.
async fn check(server: &TestServer) -> (u16, String) {
    let body = json!({
        "name": "podinfo", "namespace": "test", "phase": "Progressing",
        "checksum": CHECKSUM, "type": "confirm-promotion", "metadata": {}
    });
    let r = client()
        .post(server.at("/gates/promote"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn lookups(server: &TestServer, result: &str) -> f64 {
    server
        .metric(&format!(
            "gatebot_canary_lookups_total{{result=\"{result}\"}}"
        ))
        .await
}

on_both_stores!(the_canary_gate_is_its_prs_gate);

async fn the_canary_gate_is_its_prs_gate(backend: Backend) {
    let env = setup(backend).await;
    env.kube.podinfo(SHA, json!({}));
    env.github.set_commit_pulls(SHA, &[42, 7]);

    // Unknown: closed at once, one lookup queued, however often Flagger asks.
    let (status, reason) = check(&env.server).await;
    assert_eq!(status, 403, "{reason}");
    assert!(reason.contains("finding the pull request"), "{reason}");
    eventually("the tie found", WAIT, || async {
        check(&env.server).await;
        lookups(&env.server, "found").await == 1.0
    })
    .await;
    // Answered as PR 42's gate: its wait, its status comment.
    let (status, reason) = check(&env.server).await;
    assert_eq!(status, 403, "{reason}");
    assert!(!reason.contains("finding"), "{reason}");
    eventually("PR 42's status comment", WAIT, || async {
        !env.github.status_comments(42).is_empty()
    })
    .await;
    assert!(env.github.status_comments(7).is_empty());
    assert_eq!(env.kube.seen_at(CANARY).len(), 1, "one lookup");
    assert_eq!(env.kube.seen_at(DEPLOYMENT).len(), 1, "one lookup");
    let asked = env.github.requests_to(&format!("/commits/{SHA}/pulls"));
    assert_eq!(asked.len(), 1, "{asked:?}");

    // The PR's approval opens the canary's check; the canary's own gate stays closed.
    env.server.open(PR_GATE).await;
    let (status, reason) = check(&env.server).await;
    assert_eq!(status, 200, "{reason}");
    let own = env
        .server
        .api("/api/v1/gates/promote/canary/test/podinfo")
        .await;
    assert_eq!(own["state"], "closed", "{own}");

    // The tie is kept: after a restart, with the cluster down, no lookup.
    let Env {
        server,
        github,
        kube,
        db,
    } = env;
    server.stop().await;
    kube.set_down(true);
    let server = start(&db, &github, &kube).await;
    let (status, reason) = check(&server).await;
    assert_eq!(status, 200, "{reason}");
    assert_eq!(kube.seen_at(CANARY).len(), 1, "no lookup after the restart");
}

on_both_stores!(made_up_revisions_keep_one_row_per_canary);

/// The checksum comes with an unauthenticated check: revisions made up for a
/// real canary are looked up, but the store keeps one row for the canary.
async fn made_up_revisions_keep_one_row_per_canary(backend: Backend) {
    let env = setup(backend).await;
    env.kube.podinfo(SHA, json!({}));
    env.github.set_commit_pulls(SHA, &[42]);
    for (n, checksum) in ["made-up-1", "made-up-2", "made-up-3"].iter().enumerate() {
        let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing",
                          "checksum": checksum});
        let url = env.server.at("/gates/promote");
        eventually("the made-up revision looked up", WAIT, || async {
            client().post(&url).json(&body).send().await.unwrap();
            lookups(&env.server, "found").await == (n + 1) as f64
        })
        .await;
    }
    sqlx::any::install_default_drivers();
    let mut db = sqlx::AnyConnection::connect(&env.db.url).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM canary_ties")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(
        rows, 1,
        "one row per canary, however many revisions are sent"
    );
}

on_both_stores!(a_failed_lookup_opens_nothing);

async fn a_failed_lookup_opens_nothing(backend: Backend) {
    let env = setup(backend).await;
    // The canary's own gate is open, but its PR is not known yet.
    env.server.open("/gates/promote/canary/test/podinfo").await;
    let (status, reason) = check(&env.server).await;
    assert_eq!(status, 403, "{reason}");
    eventually("the failure said", WAIT, || async {
        let (status, reason) = check(&env.server).await;
        assert_eq!(status, 403, "{reason}");
        reason.contains("cannot find the pull request") && reason.contains("not in the cluster")
    })
    .await;
    assert!(lookups(&env.server, "failed").await >= 1.0);

    // Retried with backoff: once the canary is there, its PR's gate answers.
    env.kube.podinfo(SHA, json!({}));
    env.github.set_commit_pulls(SHA, &[42]);
    eventually("the tie found on a retry", WAIT, || async {
        let (status, reason) = check(&env.server).await;
        assert_eq!(status, 403, "never the canary's own open gate: {reason}");
        lookups(&env.server, "found").await == 1.0
    })
    .await;
    env.server.open(PR_GATE).await;
    assert_eq!(check(&env.server).await.0, 200);
}

on_both_stores!(without_a_pr_the_canary_keeps_its_own_gate);

/// A commit no PR brought (a push to the branch), read from the annotation
/// on the Deployment: the canary's own gate answers.
async fn without_a_pr_the_canary_keeps_its_own_gate(backend: Backend) {
    let env = setup(backend).await;
    env.kube
        .podinfo("6.0.0", json!({"gatebot.dev/commit": "4f5a6b7"}));
    eventually("the lookup done", WAIT, || async {
        check(&env.server).await;
        lookups(&env.server, "no_pr").await == 1.0
    })
    .await;
    let asked = env.github.requests_to("/commits/4f5a6b7/pulls");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(check(&env.server).await.0, 403);
    env.server.open("/gates/promote/canary/test/podinfo").await;
    assert_eq!(check(&env.server).await.0, 200);
}

/// The loadtester's `/gate/check` is the gate `/gate/open` opens: never tied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loadtester_gate_is_never_tied() {
    let env = setup(Backend::Sqlite).await;
    env.kube.podinfo(SHA, json!({}));
    let body = json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": CHECKSUM});
    let post = |path: &str| {
        client()
            .post(env.server.at(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
    };
    assert_eq!(post("/gate/open").await.unwrap().status(), 202);
    assert_eq!(post("/gate/check").await.unwrap().status(), 200);
    assert!(env.kube.seen().is_empty());
}

/// `check-config` lists the settings, and refuses the lookup without GitHub
/// credentials (it could find no PR).
#[test]
fn check_config_shows_the_kubernetes_settings() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .env_clear()
        .current_dir(dir.path())
        .arg("check-config")
        .env(
            "GATEBOT_DATABASE_URL",
            format!("sqlite://{}/gatebot.db", dir.path().display()),
        )
        .env("GATEBOT_KUBERNETES_LOOKUP", "true")
        .env("GATEBOT_KUBERNETES_APP_SECRET", "gatebot-github-app")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    let line = |env: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(env))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("{env} not shown: {stdout}"))
    };
    assert_eq!(line("GATEBOT_KUBERNETES_LOOKUP"), "environment true");
    assert_eq!(
        line("GATEBOT_KUBERNETES_APP_SECRET"),
        "environment gatebot-github-app"
    );
    assert_eq!(
        line("GATEBOT_COMMIT_ANNOTATION"),
        "default gatebot.dev/commit"
    );
    assert_eq!(line("GATEBOT_KUBECONFIG"), "unset -");
    assert!(
        stdout.contains("GATEBOT_KUBERNETES_LOOKUP needs GitHub credentials"),
        "{stdout}"
    );
}

/// A repository annotation may name only an allowed repository: another one
/// is a failed lookup, asked nothing on GitHub, and opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_allowed_repository_is_asked() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    let kube = FakeKube::start().await;
    let mut config = db.config();
    config.github.token = Some("ghp_test".to_string().into());
    config.github.webhook_secret = Some("test-webhook-secret".to_string().into());
    config.github.api_url = github.url.clone();
    config.github.allowed_repositories = vec!["acme/shop".parse().unwrap()];
    config.kubernetes.lookup = true;
    config.kubernetes.kubeconfig = Some(kube.kubeconfig(db.dir.path(), "gatebot"));
    let server = TestServer::start(config, gatebot::Options::default()).await;
    kube.podinfo(SHA, json!({"gatebot.dev/repository": "evil/elsewhere"}));
    github.set_commit_pulls(SHA, &[42]);
    eventually("the refusal said", WAIT, || async {
        let (status, reason) = check(&server).await;
        assert_eq!(status, 403, "{reason}");
        reason.contains("evil/elsewhere is not in GATEBOT_GITHUB_ALLOWED_REPOSITORIES")
    })
    .await;
    assert!(github.requests_to("/pulls").is_empty());
}

/// The API server over TLS, trusted by the kubeconfig's CA (as in a cluster,
/// where the service account's CA is the one trusted): the lookup works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_reached_over_tls() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    let kube = FakeKube::start().await;
    let ca = TestCa::new("fake cluster CA");
    let front = TlsFront::start(
        &ca.server_cert(),
        kube.url.trim_start_matches("http://").to_string(),
    )
    .await;
    let ca_file = ca.write(db.dir.path(), "ca.crt");
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.webhook_secret = Some("test-webhook-secret".to_string().into());
    config.github.api_url = github.url.clone();
    config.kubernetes.lookup = true;
    config.kubernetes.kubeconfig = Some(kube.kubeconfig_tls(
        db.dir.path(),
        "gatebot",
        &format!("https://127.0.0.1:{}", front.port),
        &ca_file,
    ));
    let server = TestServer::start(config, gatebot::Options::default()).await;
    kube.podinfo(SHA, json!({}));
    github.set_commit_pulls(SHA, &[42]);
    eventually("the tie found over TLS", WAIT, || async {
        check(&server).await;
        lookups(&server, "found").await == 1.0
    })
    .await;
}
