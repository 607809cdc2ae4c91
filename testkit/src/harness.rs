use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatebot::testing::clock::SharedClock;
use gatebot::testing::notify::{
    BoxFuture, Drain, Handler, Lease, Notice, PayloadError, SendError, Settled, Sink,
};
use gatebot::testing::store::{NewJob, QueueItem, QueueName};
use gatebot::{AppState, Config, Gatebot, Options};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs an async test body once per store. The PostgreSQL run needs
/// GATEBOT_TEST_POSTGRES_URL (`.ci/run` starts a server and sets it); without it
/// that run says it skipped and passes.
#[macro_export]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::harness::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(
                not(gatebot_test_postgres),
                ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
            )]
            async fn postgres() {
                $crate::harness::require_postgres();
                super::$name($crate::harness::Backend::Postgres).await
            }
        }
    )*};
}

/// A PostgreSQL test run without GATEBOT_TEST_POSTGRES_URL (`--include-ignored`,
/// or a build that had it) fails saying so, rather than passing having done nothing.
pub fn require_postgres() {
    assert!(
        postgres_url().is_some(),
        "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)"
    );
}

pub fn postgres_url() -> Option<String> {
    std::env::var("GATEBOT_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// A fresh database: a file in a temporary directory, or a new PostgreSQL database.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl TestDb {
    pub async fn new(backend: Backend) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = match backend {
            Backend::Sqlite => format!("sqlite://{}/data/gatebot.db", dir.path().display()),
            Backend::Postgres => {
                use sqlx::Connection;
                let admin = postgres_url().expect("GATEBOT_TEST_POSTGRES_URL");
                let name = format!("gatebot_test_{}", uuid::Uuid::new_v4().simple());
                let mut conn = sqlx::PgConnection::connect(&admin)
                    .await
                    .expect("connect to PostgreSQL");
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create database");
                let base = admin
                    .rsplit_once('/')
                    .map_or(admin.as_str(), |(b, _)| b)
                    .to_string();
                format!("{base}/{name}")
            }
        };
        Self { backend, url, dir }
    }

    pub fn config(&self) -> Config {
        let mut config = Config::with_database(&self.url);
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.limits.shutdown_timeout = Duration::from_secs(5);
        config
    }
}

/// A PostgreSQL test database is dropped with its test (a developer's
/// cluster otherwise keeps every one), unless the test failed: then it is
/// kept to look at, and named. On its own thread and runtime, since `Drop`
/// cannot wait; `FORCE` ends the connections a server left open, and a
/// cluster that does not answer within seconds keeps the database.
impl Drop for TestDb {
    fn drop(&mut self) {
        if self.backend != Backend::Postgres {
            return;
        }
        if std::thread::panicking() {
            eprintln!("kept the failed test's database {}", self.url);
            return;
        }
        let (Some(admin), Some((_, name))) = (postgres_url(), self.url.rsplit_once('/')) else {
            return;
        };
        let name = name.to_string();
        let dropped = std::thread::spawn(move || {
            use sqlx::Connection;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), async {
                    let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
                    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await
                        .ok()
                })
                .await
                .ok()
                .flatten()
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(_))) {
            eprintln!("note: test database {} was not dropped", self.url);
        }
    }
}

/// gatebot serving on 127.0.0.1 with a random port.
pub struct TestServer {
    pub url: String,
    pub addr: SocketAddr,
    pub state: AppState,
    drain: Drain,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// How long [`TestServer::drained`] may take before the test fails.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(20);

impl TestServer {
    pub async fn start(config: Config, options: Options) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let gatebot = Gatebot::start_with(config, options)
            .await
            .expect("gatebot starts");
        let state = gatebot.state.clone();
        let drain = gatebot.drain();
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(gatebot.serve(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            url: format!("http://{addr}"),
            addr,
            state,
            drain,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// Waits until this gatebot's inbox and outbox have nothing due now and
    /// nothing in flight: every delivery stored so far is applied and every
    /// notification due is sent (or failed and rescheduled). Items scheduled
    /// for later (a backoff, a Retry-After) are not waited for. Fails the test
    /// after [`DRAIN_DEADLINE`] rather than hang.
    pub async fn drained(&self) {
        if tokio::time::timeout(DRAIN_DEADLINE, self.drain.settled())
            .await
            .is_err()
        {
            let store = &self.state.store;
            panic!(
                "gatebot's workers did not settle within {DRAIN_DEADLINE:?} \
                 (inbox pending: {:?}, outbox pending: {:?})",
                store.queues().pending(QueueName::Inbox).await,
                store.queues().pending(QueueName::Outbox).await,
            );
        }
    }

    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Shuts down as on SIGTERM and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            handle
                .await
                .expect("server task")
                .expect("server stops cleanly");
        }
    }

    pub async fn metrics(&self) -> String {
        client()
            .get(self.at("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of one metric sample (0 when absent).
    pub async fn metric(&self, name_and_labels: &str) -> f64 {
        metric_value(&self.metrics().await, name_and_labels)
    }

    pub async fn api(&self, path: &str) -> serde_json::Value {
        api_get(&self.url, path).await
    }

    pub async fn open(&self, gate: &str) {
        self.change("open", gate).await
    }

    pub async fn close(&self, gate: &str) {
        self.change("close", gate).await
    }

    async fn change(&self, action: &str, gate: &str) {
        let r = client()
            .post(self.at(&format!("/api/v1/gates/{action}")))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({ "gate": gate, "reason": format!("test {action}") }))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert!(
            status.is_success(),
            "{action} {gate}: {status} {}",
            r.text().await.unwrap()
        );
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

pub fn metric_value(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            (series == name_and_labels)
                .then(|| value.parse().ok())
                .flatten()
        })
        .unwrap_or(0.0)
}

/// GET on the operator API of the gatebot at `base`, with the admin token.
pub async fn api_get(base: &str, path: &str) -> serde_json::Value {
    let r = client()
        .get(format!("{base}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "GET {path}: {}", r.status());
    r.json().await.unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Sends a request and returns its status code.
pub async fn status(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.expect("request").status().as_u16()
}

/// Polls `check` until it holds, failing the test after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A notification sink that records what it is asked to send, and can be told
/// to fail the next attempts.
#[derive(Default)]
pub struct RecordingSink {
    pub sent: Mutex<Vec<(QueueItem, Notice)>>,
    pub attempts: Mutex<Vec<QueueItem>>,
    pub failures: Mutex<VecDeque<SendError>>,
}

impl RecordingSink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn fail_next(&self, error: SendError) {
        self.failures.lock().unwrap().push_back(error);
    }

    pub fn notices(&self) -> Vec<Notice> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, n)| n.clone())
            .collect()
    }

    pub fn waits_started(&self) -> Vec<Notice> {
        self.notices()
            .into_iter()
            .filter(|n| matches!(n, Notice::WaitStarted { .. }))
            .collect()
    }

    pub fn attempts(&self) -> usize {
        self.attempts.lock().unwrap().len()
    }
}

impl Handler for RecordingSink {
    fn handle<'a>(
        &'a self,
        item: &'a QueueItem,
        _lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            self.attempts.lock().unwrap().push(item.clone());
            if let Some(e) = self.failures.lock().unwrap().pop_front() {
                return Err(e);
            }
            let notice: Notice = serde_json::from_str(&item.payload)
                .map_err(|e| SendError::Permanent(e.to_string()))?;
            self.sent.lock().unwrap().push((item.clone(), notice));
            Ok(Settled::NotYet)
        })
    }
}

impl Sink for RecordingSink {
    fn name(&self) -> &'static str {
        "test"
    }

    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        Ok(vec![notice.job("test")?])
    }
}

pub fn options_with(sink: &Arc<RecordingSink>, clock: Option<SharedClock>) -> Options {
    Options {
        clock,
        sinks: vec![sink.clone() as Arc<dyn Sink>],
        worker: Some(gatebot::testing::notify::WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    }
}

/// `gatebot check-config` (the binary at `bin`, from the test's
/// `env!("CARGO_BIN_EXE_gatebot")`) with `policy` as its only policy and an
/// empty environment otherwise: whether it passed, and all it printed.
pub fn check_config_of_policy(bin: &str, policy: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("policy.toml"), policy).expect("the policy written");
    let out = std::process::Command::new(bin)
        .arg("check-config")
        .current_dir(dir.path())
        .env_clear()
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
        .env("GATEBOT_POLICY", "policy.toml")
        .output()
        .expect("gatebot check-config runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}
