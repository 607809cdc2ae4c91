//! PostgreSQL over TLS, on a cluster of this test's own started with `ssl=on`
//! and a server certificate from a CA made in the test: `sslmode=verify-full`
//! and `verify-ca` with that CA as `sslrootcert` connect (and gatebot starts
//! on them), `require` encrypts without checking, and another CA is refused
//! with a message that says why. Needs GATEBOT_TEST_PG_CTL (initdb is next to
//! it) and, when running as root, GATEBOT_TEST_PG_OS_USER; `bash .ci/run`
//! sets both.

use std::path::{Path, PathBuf};
use std::process::Command;

use gatebot_testkit::harness::{TestServer, ADMIN_TOKEN};
use gatebot_testkit::tls::TestCa;
use sqlx::Connection;

/// A cluster with TLS on, stopped (immediately) when dropped.
struct TlsCluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    user: Option<String>,
    dir: tempfile::TempDir,
}

impl TlsCluster {
    fn run(&self, program: &str, args: &str) -> bool {
        let cmd = format!("{} {args}", self.bin.join(program).display());
        let status = match &self.user {
            Some(user) => Command::new("su")
                .args([user.as_str(), "-s", "/bin/sh", "-c", &cmd])
                .status(),
            None => Command::new("sh").args(["-c", &cmd]).status(),
        };
        status.map(|s| s.success()).unwrap_or(false)
    }

    /// A file the server reads: owned by its OS user, readable only by it
    /// (PostgreSQL refuses a key others can read).
    fn write_private(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        Command::new("chmod")
            .args(["600", path.to_str().unwrap()])
            .status()
            .unwrap();
        if let Some(user) = &self.user {
            Command::new("chown")
                .args([user.as_str(), path.to_str().unwrap()])
                .status()
                .unwrap();
        }
        path
    }

    fn new(ca: &TestCa) -> Option<Self> {
        let pg_ctl = std::env::var("GATEBOT_TEST_PG_CTL").ok()?;
        let bin = Path::new(&pg_ctl).parent()?.to_path_buf();
        let user = std::env::var("GATEBOT_TEST_PG_OS_USER")
            .ok()
            .filter(|u| !u.is_empty());
        let dir = tempfile::tempdir().ok()?;
        if let Some(user) = &user {
            Command::new("chown")
                .args([user.as_str(), dir.path().to_str()?])
                .status()
                .ok()?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let cluster = Self {
            bin,
            data: dir.path().join("data"),
            port,
            user,
            dir,
        };
        assert!(cluster.run(
            "initdb",
            &format!(
                "-D {} -A trust -U postgres --no-sync >/dev/null",
                cluster.data.display()
            )
        ));
        let server = ca.server_cert();
        let cert = cluster.write_private("server.crt", &server.cert_pem);
        let key = cluster.write_private("server.key", &server.key_pem);
        let opts = format!(
            "-o '-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}'",
            cluster.port,
            cluster.dir.path().display(),
            cert.display(),
            key.display()
        );
        assert!(cluster.run(
            "pg_ctl",
            &format!(
                "-D {} -l {}/log -w {opts} start >/dev/null",
                cluster.data.display(),
                cluster.dir.path().display()
            )
        ));
        Some(cluster)
    }

    fn url(&self, query: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?{query}",
            self.port
        )
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        self.run(
            "pg_ctl",
            &format!(
                "-D {} -m immediate stop >/dev/null 2>&1",
                self.data.display()
            ),
        );
    }
}

/// Whether the connection made with `url` is encrypted, as the server sees it.
async fn encrypted(url: &str) -> Result<bool, sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_connects_with_the_right_ca_and_refuses_another() {
    let ca = TestCa::new("gatebot test PostgreSQL CA");
    let Some(cluster) = TlsCluster::new(&ca) else {
        eprintln!(
            "SKIPPED: set GATEBOT_TEST_PG_CTL (and GATEBOT_TEST_PG_OS_USER as root) to run the PostgreSQL TLS test (bash .ci/run does)"
        );
        return;
    };
    let ca_file = ca.write(cluster.dir.path(), "root.crt");
    let other_file = TestCa::new("another CA").write(cluster.dir.path(), "other.crt");
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
