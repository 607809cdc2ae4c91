//! Instructions and heap allocations per request, counted under valgrind:
//! what a steady-state gate check costs against the same server's `/healthz`.
//! Wall-clock ratios drift on a shared machine; these counts do not.
//!
//!     cargo bench --bench instructions
//!
//! The release binary runs under `valgrind --tool=callgrind` (instructions)
//! and then `--tool=dhat` (allocations) on a fresh SQLite store, once with
//! only a case's setup (the baseline) and once with the setup and then
//! `GATEBOT_BENCH_REQUESTS` (6,000) sequential requests on one keep-alive
//! connection; a request's cost is the difference over the count. Cases:
//! `/healthz`; a check of an open gate pinned to the revision asked (200);
//! a check of a closed gate whose wait has started (403); the same open and
//! pinned check at one cluster's gate, with `[[environments]]` in the policy
//! and the check carrying that cluster's Flagger token. Background work that
//! runs by the clock (housekeeping every 5 s) lands in both runs of a case
//! only as often as the run lasts, so a few instructions per request of the
//! result are that. Without valgrind on the PATH it says so and exits.
//!
//! To see where a case's instructions go, keep the tools' output files:
//!
//!     GATEBOT_BENCH_PROFILES=/tmp/profiles cargo bench --bench instructions
//!     callgrind_annotate /tmp/profiles/callgrind.check-open-n6000.out | head -60
//!
//! (the bench binary must then be built with `CARGO_PROFILE_BENCH_STRIP=false`
//! for the functions to have names).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ADMIN: &str = "bench-admin-token";
const GATE: &str = "/gates/promote/acme/shop/pr/42";
const CHECK: &str =
    r#"{"name":"podinfo","namespace":"test","phase":"Progressing","checksum":"rev1"}"#;
const OTHER: &str =
    r#"{"name":"other","namespace":"test","phase":"Progressing","checksum":"rev1"}"#;
/// One environment of one cluster, no order: the check asks at prod-eu's gate.
const ENVIRONMENTS: &str = "[[environments]]\nname = \"production\"\nclusters = [\"prod-eu\"]\n";
/// prod-eu's Flagger token; the server holds its SHA-256.
const PROD_EU_TOKEN: &str = "bench-prod-eu-token";

#[derive(Clone, Copy, PartialEq)]
enum Tool {
    Callgrind,
    Dhat,
}

#[derive(Clone, Copy)]
enum Case {
    Healthz,
    OpenPinned,
    Closed,
    /// Open and pinned at prod-eu's gate, with `[[environments]]`.
    OpenPinnedCluster,
}

impl Case {
    /// A file name for the case's kept profiles.
    fn slug(self) -> &'static str {
        match self {
            Case::Healthz => "healthz",
            Case::OpenPinned => "check-open",
            Case::Closed => "check-closed",
            Case::OpenPinnedCluster => "check-open-cluster",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Case::Healthz => "/healthz",
            Case::OpenPinned => "check, open and pinned (200)",
            Case::Closed => "check, closed and waiting (403)",
            Case::OpenPinnedCluster => "check, open and pinned, prod-eu's gate (200)",
        }
    }

    /// Whether the case's server runs with `[[environments]]` and Flagger tokens.
    fn environments(self) -> bool {
        matches!(self, Case::OpenPinnedCluster)
    }
}

/// One HTTP/1.1 keep-alive connection, written and read by hand so that the
/// client costs the server nothing but the bytes.
struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn open(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    /// Sends one request and reads its answer; the status.
    fn request(&mut self, method: &str, path: &str, auth: bool, body: &str) -> u16 {
        let auth = if auth {
            format!("authorization: Bearer {ADMIN}\r\n")
        } else {
            String::new()
        };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\n\r\n{body}",
            body.len()
        );
        self.reader.get_mut().write_all(head.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {line:?}"));
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0u8; length];
        self.reader.read_exact(&mut body).unwrap();
        status
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The release binary under `tool`, on a fresh store in `dir`.
fn start(tool: Tool, case: Case, dir: &Path, port: u16) -> Child {
    let out = dir.join("tool.out");
    let mut cmd = Command::new("valgrind");
    match tool {
        Tool::Callgrind => cmd.args([
            "--tool=callgrind".to_string(),
            format!("--callgrind-out-file={}", out.display()),
        ]),
        Tool::Dhat => cmd.args([
            "--tool=dhat".to_string(),
            format!("--dhat-out-file={}", out.display()),
        ]),
    };
    cmd.arg(env!("CARGO_BIN_EXE_gatebot"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "GATEBOT_DATABASE_URL",
            format!("sqlite://{}/gatebot.db", dir.display()),
        )
        .env("GATEBOT_ADMIN_TOKEN", ADMIN)
        .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if case.environments() {
        let policy = dir.join("policy.toml");
        std::fs::write(&policy, ENVIRONMENTS).expect("the policy is written");
        let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(PROD_EU_TOKEN));
        cmd.env("GATEBOT_POLICY", policy)
            .env("GATEBOT_FLAGGER_TOKENS", format!("prod-eu={hash}"));
    }
    cmd.spawn().expect("valgrind starts")
}

/// Waits until the server accepts a connection (a connection only: no request
/// that would count).
fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "gatebot did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a case needs before its requests.
fn setup(case: Case, conn: &mut Conn) {
    match case {
        Case::Healthz => {}
        Case::OpenPinned => {
            let open = format!(r#"{{"gate":"{GATE}","reason":"bench"}}"#);
            assert_eq!(conn.request("POST", "/api/v1/gates/open", true, &open), 200);
            assert_eq!(conn.request("POST", GATE, false, CHECK), 200);
        }
        Case::Closed => {
            assert_eq!(conn.request("POST", GATE, false, OTHER), 403);
        }
        Case::OpenPinnedCluster => {
            let open = format!(r#"{{"gate":"{GATE}@prod-eu","reason":"bench"}}"#);
            assert_eq!(conn.request("POST", "/api/v1/gates/open", true, &open), 200);
            assert_eq!(conn.request("POST", &cluster_gate(), false, CHECK), 200);
        }
    }
}

/// [`GATE`] as prod-eu's Flagger asks it: with its token in the path.
fn cluster_gate() -> String {
    let scope = GATE.strip_prefix("/gates/").expect("a /gates/ path");
    format!("/gates/t/{PROD_EU_TOKEN}/{scope}")
}

fn one(case: Case, conn: &mut Conn) {
    let status = match case {
        Case::Healthz => conn.request("GET", "/healthz", false, ""),
        Case::OpenPinned => conn.request("POST", GATE, false, CHECK),
        Case::Closed => conn.request("POST", GATE, false, OTHER),
        Case::OpenPinnedCluster => conn.request("POST", &cluster_gate(), false, CHECK),
    };
    let expected = if matches!(case, Case::Closed) {
        403
    } else {
        200
    };
    assert_eq!(status, expected, "{}", case.name());
}

/// One run: start, set up, `n` requests, stop; the tool's total (instructions
/// or blocks allocated).
fn run(tool: Tool, case: Case, n: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start(tool, case, dir.path(), port);
    wait_listening(port);
    // Let the start-up work (migrations, the first retention pass) finish alike in every run.
    std::thread::sleep(Duration::from_secs(3));
    {
        let mut conn = Conn::open(port);
        setup(case, &mut conn);
        for _ in 0..n {
            one(case, &mut conn);
        }
    }
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    child.wait().unwrap();
    keep_profile(tool, case, n, &dir.path().join("tool.out"));
    match tool {
        Tool::Callgrind => callgrind_total(&dir.path().join("tool.out")),
        Tool::Dhat => dhat_blocks(&stderr),
    }
}

/// Copies the tool's output to `GATEBOT_BENCH_PROFILES`, when it is set.
fn keep_profile(tool: Tool, case: Case, n: u64, out: &Path) {
    let Ok(dir) = std::env::var("GATEBOT_BENCH_PROFILES") else {
        return;
    };
    std::fs::create_dir_all(&dir).expect("the profiles directory");
    let tool = match tool {
        Tool::Callgrind => "callgrind",
        Tool::Dhat => "dhat",
    };
    let to = Path::new(&dir).join(format!("{tool}.{}-n{n}.out", case.slug()));
    std::fs::copy(out, to).expect("the profile is kept");
}

/// `summary:` (or `totals:`) of a callgrind output file: instructions run.
fn callgrind_total(path: &PathBuf) -> u64 {
    let text = std::fs::read_to_string(path).expect("callgrind output");
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a summary line")
}

/// DHAT's `Total: N bytes in M blocks`: heap blocks allocated.
fn dhat_blocks(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            let rest = l.split_once("Total:")?.1;
            let blocks = rest.split_once(" in ")?.1;
            blocks
                .split_whitespace()
                .next()?
                .replace(',', "")
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no DHAT total in: {stderr}"))
}

/// Per request: (with `n` requests − setup only) / `n`.
fn per_request(tool: Tool, case: Case, n: u64) -> f64 {
    let base = run(tool, case, 0);
    let with = run(tool, case, n);
    (with.saturating_sub(base)) as f64 / n as f64
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs nothing here.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("instructions: skipped, valgrind is not installed (apt-get install valgrind)");
        return;
    }
    let n: u64 = std::env::var("GATEBOT_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6000);
    let cases = [
        Case::Healthz,
        Case::OpenPinned,
        Case::Closed,
        Case::OpenPinnedCluster,
    ];
    let mut rows = Vec::new();
    for case in cases {
        let instructions = per_request(Tool::Callgrind, case, n);
        let allocations = per_request(Tool::Dhat, case, n);
        eprintln!(
            "{}: {instructions:.0} instructions, {allocations:.1} allocations a request",
            case.name()
        );
        rows.push((case, instructions, allocations));
    }
    let (_, health_ir, health_alloc) = rows[0];
    println!("\n{n} requests a case, minus the case's setup alone");
    println!("| request | instructions | × /healthz | allocations | − /healthz |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (case, ir, alloc) in rows {
        println!(
            "| {} | {ir:.0} | {:.2} | {alloc:.1} | {:+.1} |",
            case.name(),
            ir / health_ir,
            alloc - health_alloc
        );
    }
}
