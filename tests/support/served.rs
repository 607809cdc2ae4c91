//! The real `gatebot` binary as a child process, for tests that signal or kill it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::harness::{TestDb, ADMIN_TOKEN};

pub const BIN: &str = env!("CARGO_BIN_EXE_gatebot");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `gatebot serve` as a child process with a clean environment.
pub struct Served {
    pub child: Child,
    pub url: String,
    pub port: u16,
}

impl Served {
    pub fn start(db: &TestDb, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
            .env("GATEBOT_DATABASE_URL", &db.url)
            .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("gatebot starts");
        let served = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
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
        super::harness::api_get(&self.url, path).await
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut logs = String::new();
                self.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut logs)
                    .unwrap();
                return (status, logs);
            }
            assert!(Instant::now() < deadline, "gatebot did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
