//! A PostgreSQL cluster of a test's own (so other tests keep theirs), made
//! with the `initdb` next to `GATEBOT_TEST_PG_CTL` and run as
//! `GATEBOT_TEST_PG_OS_USER` when that is set (PostgreSQL refuses root).
//! Stopped, immediately, when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    pub port: u16,
    user: Option<String>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// A new, initialised and stopped cluster; None without `GATEBOT_TEST_PG_CTL`.
    pub fn init() -> Option<Self> {
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
        Some(cluster)
    }

    /// The directory beside the data: sockets, the log, files the server reads.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

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
    pub fn write_private(&self, name: &str, contents: &str) -> PathBuf {
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

    /// Starts the server on 127.0.0.1 and waits for it; `settings` are more
    /// `-c name=value` options.
    pub fn start(&self, settings: &str) {
        let opts = format!(
            "-o '-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off {settings}'",
            self.port,
            self.dir.path().display()
        );
        assert!(self.run(
            "pg_ctl",
            &format!(
                "-D {} -l {}/log -w {opts} start >/dev/null",
                self.data.display(),
                self.dir.path().display()
            )
        ));
    }

    /// Stops the server as an operator would, and waits for it.
    pub fn stop(&self) {
        assert!(self.run(
            "pg_ctl",
            &format!("-D {} -m fast -w stop", self.data.display())
        ));
    }

    pub fn url(&self, query: &str) -> String {
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres{query}",
            self.port
        )
    }
}

impl Drop for Cluster {
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
