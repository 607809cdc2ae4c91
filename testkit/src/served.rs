//! The real `gatebot` binary as a child process, for tests that signal or kill it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::harness::{TestDb, ADMIN_TOKEN};

/// The `gatebot` binary that cargo built for the running test or bench.
///
/// `env!("CARGO_BIN_EXE_gatebot")` exists only in gatebot's own test targets,
/// not in this library, so it is found at run time: cargo 1.94 and later set
/// the variable for the test process too; before that, the binary sits in the
/// profile directory above the test executable's `deps/`.
pub fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let path = std::env::var_os("CARGO_BIN_EXE_gatebot")
            .map(PathBuf::from)
            .or_else(|| {
                let exe = std::env::current_exe().ok()?;
                let profile = exe.parent()?.parent()?;
                Some(profile.join(format!("gatebot{}", std::env::consts::EXE_SUFFIX)))
            })
            .filter(|p| p.is_file())
            .expect("the gatebot binary: run this from gatebot's tests or benches (cargo builds it for them)");
        path.to_str()
            .expect("the gatebot binary's path is UTF-8")
            .to_string()
    })
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process that is killed and reaped when the guard drops, so a test
/// that fails or panics leaves no process behind. A gatebot child also stops
/// by itself when the test's process is killed and no guard runs
/// (`GATEBOT_TEST_EXIT_WITH_PARENT`; other programs ignore it).
pub struct ChildGuard(Child);

impl ChildGuard {
    pub fn spawn(cmd: &mut Command) -> Self {
        cmd.env("GATEBOT_TEST_EXIT_WITH_PARENT", "true");
        Self(cmd.spawn().expect("the child starts"))
    }
}

impl Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gatebot serve` as a child process with a clean environment, in a
/// working directory of its own (so no `.env` of the checkout is read).
pub struct Served {
    pub child: ChildGuard,
    pub url: String,
    pub port: u16,
    logs: Arc<Mutex<String>>,
    drain: Option<JoinHandle<()>>,
}

impl Served {
    pub fn start(db: &TestDb, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
            .env("GATEBOT_DATABASE_URL", &db.url)
            .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
            .current_dir(db.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = ChildGuard::spawn(&mut cmd);
        // Read stderr as it comes: a full pipe would block a chatty child.
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let logs = Arc::new(Mutex::new(String::new()));
        let sink = logs.clone();
        let drain = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let served = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
            logs,
            drain: Some(drain),
        };
        // Ready when it answers, not merely when the port is bound.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !healthy(port) {
            assert!(
                Instant::now() < deadline,
                "gatebot did not answer on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    pub async fn api(&self, path: &str) -> serde_json::Value {
        crate::harness::api_get(&self.url, path).await
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// What the child wrote to stderr so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Waits for the child to exit; its status and everything it logged.
    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The pipe closes when the child exits, which ends the drain.
                if let Some(drain) = self.drain.take() {
                    let _ = drain.join();
                }
                return (status, self.logs());
            }
            assert!(Instant::now() < deadline, "gatebot did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn healthy(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    if conn
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Writes a policy file holding only a `[limits]` table with `limits`
/// (`("outbox_lease", "2s")`) into `dir`, and returns its path for
/// `GATEBOT_POLICY`. A value that is a whole number is written bare, any
/// other in quotes.
pub fn limits_policy(dir: &std::path::Path, limits: &[(&str, &str)]) -> String {
    let mut text = String::from("[limits]\n");
    for (key, value) in limits {
        match value.parse::<u64>() {
            Ok(n) => text.push_str(&format!("{key} = {n}\n")),
            Err(_) => text.push_str(&format!("{key} = \"{value}\"\n")),
        }
    }
    let path = dir.join("limits-policy.toml");
    std::fs::write(&path, text).expect("the policy file written");
    path.to_str().expect("a UTF-8 path").to_string()
}

/// Writes `text` as a policy file `name` into `dir`, and returns its path for
/// `GATEBOT_POLICY`.
pub fn policy_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the policy file written");
    path.to_str().expect("a UTF-8 path").to_string()
}

/// A policy file whose `[templates]` table names `templates`.
pub fn templates_policy(dir: &std::path::Path, templates: &std::path::Path) -> String {
    policy_file(
        dir,
        "templates-policy.toml",
        &format!("[templates]\ndir = {:?}\n", templates.display().to_string()),
    )
}
