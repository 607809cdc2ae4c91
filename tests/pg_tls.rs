//! PostgreSQL over TLS, on a cluster of this test's own started with `ssl=on`
//! and a server certificate from a CA made in the test: `sslmode=verify-full`
//! and `verify-ca` with that CA as `sslrootcert` connect (and gatebot starts
//! on them), `require` encrypts without checking, and another CA is refused
//! with a message that says why. Needs GATEBOT_TEST_PG_CTL (initdb is next to
//! it) and, when running as root, GATEBOT_TEST_PG_OS_USER; `bash .ci/run`
//! sets both.

use gatebot_testkit::cluster::Cluster;
use gatebot_testkit::harness::{TestServer, ADMIN_TOKEN};
use gatebot_testkit::tls::TestCa;
use sqlx::Connection;

/// A cluster with TLS on, its certificate from `ca`.
fn tls_cluster(ca: &TestCa) -> Option<Cluster> {
    let cluster = Cluster::init()?;
    let server = ca.server_cert();
    let cert = cluster.write_private("server.crt", &server.cert_pem);
    let key = cluster.write_private("server.key", &server.key_pem);
    cluster.start(&format!(
        "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
        cert.display(),
        key.display()
    ));
    Some(cluster)
}

/// Whether the connection made with `url` is encrypted, as the server sees it.
async fn encrypted(url: &str) -> Result<bool, sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_pg_ctl),
    ignore = "needs clusters of its own: set GATEBOT_TEST_PG_CTL"
)]
async fn verify_full_connects_with_the_right_ca_and_refuses_another() {
    let ca = TestCa::new("gatebot test PostgreSQL CA");
    let Some(cluster) = tls_cluster(&ca) else {
        eprintln!(
            "SKIPPED: set GATEBOT_TEST_PG_CTL (and GATEBOT_TEST_PG_OS_USER as root) to run the PostgreSQL TLS test (bash .ci/run does)"
        );
        return;
    };
    let ca_file = ca.write(cluster.dir(), "root.crt");
    let other_file = TestCa::new("another CA").write(cluster.dir(), "other.crt");
    let full = cluster.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    ));

    // The modes that check the certificate, and the one that only encrypts.
    for query in [
        format!("sslmode=verify-full&sslrootcert={}", ca_file.display()),
        format!("sslmode=verify-ca&sslrootcert={}", ca_file.display()),
        "sslmode=require".to_string(),
    ] {
        let url = cluster.url(&query);
        assert!(
            encrypted(&url)
                .await
                .unwrap_or_else(|e| panic!("{query}: {e}")),
            "{query}: not encrypted"
        );
    }
    assert!(!encrypted(&cluster.url("sslmode=disable")).await.unwrap());

    // gatebot starts on it: migrations, and a gate changed and read back.
    let mut config = gatebot::Config::with_database(&full);
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    let server = TestServer::start(config, gatebot::Options::default()).await;
    server.open("/gates/promote/acme/shop/pr/7").await;
    let r = gatebot_testkit::harness::client()
        .get(server.at("/gates/promote/acme/shop/pr/7"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    server.stop().await;

    // Another CA: refused, saying it is the certificate.
    let wrong = cluster.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        other_file.display()
    ));
    let refused = match gatebot::Gatebot::start(gatebot::Config::with_database(&wrong)).await {
        Ok(_) => panic!("started with a CA that did not sign the server's certificate"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        refused.contains("cannot open the postgres store") && refused.contains("certificate"),
        "{refused}"
    );
    eprintln!("with another CA: {refused}");
}
