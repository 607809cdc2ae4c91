//! PostgreSQL going away and coming back, on a cluster of this test's own (so
//! other tests keep theirs). Needs GATEBOT_TEST_PG_CTL (path to pg_ctl) and,
//! when running as root, GATEBOT_TEST_PG_OS_USER; `bash .ci/run` sets both.

use std::time::Duration;

use gatebot_testkit::cluster::Cluster;
use gatebot_testkit::harness::{client, eventually, TestServer, ADMIN_TOKEN};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_pg_ctl),
    ignore = "needs clusters of its own: set GATEBOT_TEST_PG_CTL"
)]
async fn losing_postgres_closes_gates_and_recovers_by_itself() {
    let Some(cluster) = Cluster::init() else {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_PG_CTL to run the outage test (bash .ci/run does)");
        return;
    };
    cluster.start("");
    let mut config = gatebot::Config::with_database(&cluster.url(""));
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let server = TestServer::start(config, Default::default()).await;
    server.open("/gates/promote/pr/1").await;
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let check = || async {
        let r = client()
            .post(server.at("/gates/promote/pr/1"))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(check().await.0, 200);

    // Flagger keeps polling while the database is away.
    let url = server.at("/gates/promote/pr/1");
    let load_body = body.clone();
    let (stop_load, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let load = tokio::spawn(async move {
        let mut answers = Vec::new();
        loop {
            if stopped.try_recv().is_ok() {
                return answers;
            }
            let r = client().post(&url).json(&load_body).send().await.unwrap();
            answers.push(r.status().as_u16());
        }
    });

    cluster.stop();
    // Memory is trusted until the listening connection is seen to drop, which
    // takes a moment on a loaded machine: poll with a deadline.
    eventually(
        "closed once the store is gone",
        Duration::from_secs(5),
        || async {
            let (status, text) = check().await;
            status == 403 && text.contains("cannot read its store")
        },
    )
    .await;
    assert_eq!(
        client()
            .get(server.at("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    let r = client()
        .post(server.at("/api/v1/gates/close"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "a change that cannot be stored is refused");

    cluster.start("");
    eventually("recovery", Duration::from_secs(30), || async {
        check().await.0 == 200
    })
    .await;
    // Readiness stays 503 up to 5 s after the last failed write (a small probe
    // write can succeed where a real one does not), then must come back by itself.
    eventually(
        "readiness after recovery",
        Duration::from_secs(10),
        || async {
            client()
                .get(server.at("/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    let _ = stop_load.send(());
    let answers = load.await.unwrap();
    assert!(
        answers.iter().all(|s| *s == 200 || *s == 403),
        "only 200 or 403, never 5xx: {answers:?}"
    );
    assert!(
        answers.contains(&403) && answers.contains(&200),
        "{answers:?}"
    );
    let detail = server.api("/api/v1/gates/promote/pr/1").await;
    assert_eq!(
        detail["state"], "open",
        "the refused close left nothing behind"
    );
}
