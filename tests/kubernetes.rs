//! A canary's own gate (`/gates/{kind}`) answered as the gate of the PR that
//! brought its revision (`[kubernetes] lookup` in the policy file): the commit read from a
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
    start_with(db, github, kube, Duration::from_millis(100)).await
}

async fn start_with(
    db: &TestDb,
    github: &FakeGithub,
    kube: &FakeKube,
    backoff: Duration,
) -> TestServer {
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.webhook_secret = Some("test-webhook-secret".to_string().into());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.api_url = github.url.clone();
    config.kubernetes.lookup = true;
    config.kubernetes.kubeconfig = Some(kube.kubeconfig(db.dir.path(), "gatebot"));
    config.limits.kubernetes_lookup_backoff = backoff;
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
    check_of(server, "test", "podinfo", CHECKSUM).await
}

/// A check of canary `namespace/name` at `checksum`, on the canary's own gate.
async fn check_of(
    server: &TestServer,
    namespace: &str,
    name: &str,
    checksum: &str,
) -> (u16, String) {
    let body = json!({
        "name": name, "namespace": namespace, "phase": "Progressing",
        "checksum": checksum, "type": "confirm-promotion", "metadata": {}
    });
    let r = client()
        .post(server.at("/gates/promote"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// `test/podinfo` tied to PR 42 at CHECKSUM, PR 42 approved.
async fn tied_and_approved(env: &Env) {
    env.kube.podinfo(SHA, json!({}));
    env.github.set_commit_pulls(SHA, &[42]);
    eventually("the tie found", WAIT, || async {
        check(&env.server).await;
        lookups(&env.server, "found").await == 1.0
    })
    .await;
    env.server.open(PR_GATE).await;
    assert_eq!(check(&env.server).await.0, 200);
}

/// Sends `n` checks at once, each made by `body(i)`; waits for all.
async fn flood(server: &TestServer, n: usize, body: impl Fn(usize) -> (String, String, String)) {
    let mut sent = tokio::task::JoinSet::new();
    for i in 0..n {
        let (namespace, name, checksum) = body(i);
        let url = server.at("/gates/promote");
        sent.spawn(async move {
            let body = json!({"name": name, "namespace": namespace, "phase": "Progressing",
                              "checksum": checksum, "type": "confirm-promotion"});
            client()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        });
    }
    while let Some(status) = sent.join_next().await {
        assert_eq!(status.unwrap(), 403);
    }
}

/// The WARN lines the in-process gatebots of the test binary logged (captured
/// once; only this file's tests make up the names counted).
fn warn_lines(containing: &str) -> usize {
    static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    static INIT: std::sync::Once = std::sync::Once::new();
    struct Captured;
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            LOG.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(|| Captured)
            .try_init();
    });
    let log = LOG.lock().unwrap();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains(containing))
        .count()
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
/// real canary never replace its row, and the store keeps one row for it.
async fn made_up_revisions_keep_one_row_per_canary(backend: Backend) {
    let env = setup(backend).await;
    tied_and_approved(&env).await;
    for checksum in ["made-up-1", "made-up-2", "made-up-3"] {
        let (status, reason) = check_of(&env.server, "test", "podinfo", checksum).await;
        assert_eq!(status, 403, "{reason}");
    }
    sqlx::any::install_default_drivers();
    let mut db = sqlx::AnyConnection::connect(&env.db.url).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT checksum FROM canary_ties")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![CHECKSUM.to_string()],
        "one row per canary, its own revision's, however many revisions are sent"
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
    std::fs::write(
        dir.path().join("policy.toml"),
        "[kubernetes]\nlookup = true\napp_secret = \"gatebot-github-app\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .env_clear()
        .current_dir(dir.path())
        .arg("check-config")
        .env(
            "GATEBOT_DATABASE_URL",
            format!("sqlite://{}/gatebot.db", dir.path().display()),
        )
        .env("GATEBOT_POLICY", "policy.toml")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("kubernetes:      a canary's own gate is its PR's: the commit from the annotation gatebot.dev/commit, else the image tag of the first container; the repository from gatebot.dev/repository"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kubernetes:      /ui/setup/github writes the new App into the Secret gatebot-github-app"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[kubernetes] lookup needs GitHub credentials"),
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

/// Issue 41, B.12: 300 checksums made up for a real canary cost at most one
/// more read of its target (one an interval, however many arrive) and no
/// GitHub call (the commit read is the one known).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_checksums_cost_one_read_an_interval() {
    let env = setup(Backend::Sqlite).await;
    tied_and_approved(&env).await;
    let (reads, asked) = (
        env.kube.seen_at(CANARY).len(),
        env.github
            .requests_to(&format!("/commits/{SHA}/pulls"))
            .len(),
    );
    assert_eq!((reads, asked), (1, 1));
    for round in 0..3 {
        flood(&env.server, 100, |i| {
            (
                "test".into(),
                "podinfo".into(),
                format!("made-up-{round}-{i}"),
            )
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let reads = env.kube.seen_at(CANARY).len() + env.kube.seen_at(DEPLOYMENT).len();
    let asked = env
        .github
        .requests_to(&format!("/commits/{SHA}/pulls"))
        .len();
    eprintln!("300 made-up checksums: {reads} API reads in all, {asked} GitHub calls");
    assert!(
        reads <= 4,
        "at most one more read of Canary and Deployment: {reads}"
    );
    assert_eq!(asked, 1, "GitHub asked once for the commit");
}

/// Issue 41, B.12: 300 made-up canary names cost one read each, then nothing
/// while their miss is kept, and are warned about at most
/// WARNINGS_PER_MINUTE times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_names_cost_one_read_and_few_warnings() {
    warn_lines("");
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    let kube = FakeKube::start().await;
    // Misses kept 32 s: the three rounds below fall in it.
    let server = start_with(&db, &github, &kube, Duration::from_secs(1)).await;
    for _ in 0..3 {
        flood(&server, 300, |i| {
            ("test".into(), format!("ghost-{i}"), "c0ffee".into())
        })
        .await;
        // Each name looked up or refused (bounded: the counts are asserted below).
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < until {
            let done = lookups(&server, "failed").await;
            let refused = server
                .metric("gatebot_budget_refused_total{what=\"lookup\"}")
                .await;
            if done + refused >= 300.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    let seen = kube.seen_at("/canaries/ghost-");
    let mut per_name = std::collections::HashMap::new();
    for s in &seen {
        *per_name.entry(s.path.clone()).or_insert(0) += 1;
    }
    let refused = server
        .metric("gatebot_budget_refused_total{what=\"lookup\"}")
        .await;
    let warned = warn_lines("test/ghost-");
    eprintln!(
        "3 × 300 made-up names: {} API reads, {} names read, {refused} lookups refused, {warned} WARN lines",
        seen.len(),
        per_name.len()
    );
    assert!(
        per_name.values().all(|n| *n == 1),
        "a name read once: {per_name:?}"
    );
    assert!(seen.len() <= 300);
    // WARNINGS_PER_MINUTE (10); the rounds may span two minutes.
    assert!(warned <= 20, "{warned} WARN lines");
    assert_eq!(kube.seen_at("/deployments/").len(), 0);
}

/// Issue 41, B.12: while made-up checksums and names flood the lookup, each
/// of 15 checks of the real canary is answered at once as PR 42's approved gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_canary_is_answered_while_others_are_looked_up() {
    let env = setup(Backend::Sqlite).await;
    tied_and_approved(&env).await;
    let url = env.server.at("/gates/promote");
    let flooding = tokio::spawn(async move {
        for round in 0..20 {
            let mut sent = tokio::task::JoinSet::new();
            for i in 0..40 {
                let (name, checksum) = if i % 2 == 0 {
                    ("podinfo".to_string(), format!("made-up-{round}-{i}"))
                } else {
                    (format!("ghost-{round}-{i}"), CHECKSUM.to_string())
                };
                let body = json!({"name": name, "namespace": "test", "phase": "Progressing",
                                  "checksum": checksum, "type": "confirm-promotion"});
                let url = url.clone();
                sent.spawn(async move { client().post(url).json(&body).send().await });
            }
            while sent.join_next().await.is_some() {}
        }
    });
    let mut slowest = Duration::ZERO;
    for n in 0..15 {
        let started = std::time::Instant::now();
        let (status, reason) = check(&env.server).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(status, 200, "check {n}: {reason}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    flooding.await.unwrap();
    eprintln!("15 of 15 real checks answered 200 during the flood, the slowest in {slowest:?}");
    // Never behind a lookup (each may take the API server's 5 s timeout).
    assert!(slowest < Duration::from_secs(4), "{slowest:?}");
}

/// Issue 41, B.12: a Deployment in another namespace annotated with PR 42's
/// commit never rides on PR 42's approval: without a Canary there, or named
/// by a Canary elsewhere, or answered for another object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_counts_only_in_its_canarys_namespace() {
    let env = setup(Backend::Sqlite).await;
    tied_and_approved(&env).await;
    let mut elsewhere = gatebot_testkit::fake_kube::fixture("deployment.podinfo.json");
    elsewhere["metadata"]["namespace"] = json!("other");
    elsewhere["metadata"]["annotations"]["gatebot.dev/commit"] = json!(SHA);
    env.kube.put(
        "/apis/apps/v1/namespaces/other/deployments/podinfo",
        elsewhere.clone(),
    );
    // A Canary in test naming the Deployment in other.
    let mut across = gatebot_testkit::fake_kube::fixture("canary.podinfo.json");
    across["metadata"]["name"] = json!("across");
    across["spec"]["targetRef"]["namespace"] = json!("other");
    env.kube.put(
        "/apis/flagger.app/v1beta1/namespaces/test/canaries/across",
        across,
    );
    // An answer for test/mirror that is the object of other.
    let mut mirror = gatebot_testkit::fake_kube::fixture("canary.podinfo.json");
    mirror["metadata"]["name"] = json!("mirror");
    env.kube.put(
        "/apis/flagger.app/v1beta1/namespaces/test/canaries/mirror",
        mirror,
    );
    env.kube.put(
        "/apis/apps/v1/namespaces/test/deployments/podinfo-mirror",
        elsewhere,
    );
    let mut mirror = env
        .kube
        .object("/apis/flagger.app/v1beta1/namespaces/test/canaries/mirror")
        .unwrap();
    mirror["spec"]["targetRef"]["name"] = json!("podinfo-mirror");
    env.kube.put(
        "/apis/flagger.app/v1beta1/namespaces/test/canaries/mirror",
        mirror,
    );
    for (namespace, name) in [("other", "podinfo"), ("test", "across"), ("test", "mirror")] {
        eventually("the lookup failed", WAIT, || async {
            let (status, reason) = check_of(&env.server, namespace, name, CHECKSUM).await;
            assert_eq!(status, 403, "{namespace}/{name} rode on PR 42: {reason}");
            reason.contains("cannot find the pull request")
        })
        .await;
    }
    assert_eq!(
        lookups(&env.server, "found").await,
        1.0,
        "only test/podinfo"
    );
}
