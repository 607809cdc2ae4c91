//! Operating gatebot: the real binary (serve, CLI, check-config, shutdown, logs),
//! the loadtester's API, the operator API's access rules, health and metrics.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use gatebot_testkit::harness::{client, status, Backend, TestDb, TestServer, ADMIN_TOKEN};
use gatebot_testkit::served::{bin, free_port, ChildGuard, Served};
use serde_json::json;

fn cli(server: &str, token: Option<&str>, args: &[&str]) -> Output {
    // A directory of its own: no `.env` of the checkout is read.
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .current_dir(dir.path())
        .env("GATEBOT_SERVER", server)
        .env("USER", "carol")
        .args(["gates"])
        .args(args);
    if let Some(t) = token {
        cmd.env("GATEBOT_ADMIN_TOKEN", t);
    }
    cmd.output().expect("cli runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_requests_and_logs_json() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(
        &db,
        &[
            ("GATEBOT_LOG_FORMAT", "json"),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
        ],
    );
    // A request whose body is still on its way when the signal arrives.
    let body =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"})
            .to_string();
    let mut conn = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    let head = format!(
        "POST /gates/promote/pr/42 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: req-123\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(&body.as_bytes()[..10]).unwrap();
    conn.flush().unwrap();
    // Make sure the server has the request before it is told to stop.
    std::thread::sleep(Duration::from_millis(300));
    served.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    conn.write_all(&body.as_bytes()[10..]).unwrap();
    let mut reader = BufReader::new(conn);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    if !status_line.starts_with("HTTP/1.1 403") {
        let (status, logs) = served.wait();
        panic!("no answer ({status_line:?}); gatebot exited {status}:\n{logs}");
    }
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    assert!(
        rest.to_ascii_lowercase().contains("x-request-id: req-123"),
        "{rest}"
    );
    assert!(
        rest.contains("waiting: run `gatebot gates open /gates/promote/acme/shop/pr/42`"),
        "{rest}"
    );

    let (status, logs) = served.wait();
    assert!(status.success(), "clean exit: {status}\n{logs}");
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["message"] == "gatebot listening"),
        "{logs}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["span"]["request_id"] == "req-123" && l["status"] == 403),
        "an access log line with the request id: {logs}"
    );
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .unwrap_or("")
            .contains("shutting down")),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_opens_lists_shows_and_closes_gates() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[("GATEBOT_GITHUB_REPOSITORY", "acme/shop")]);
    let url = served.url.clone();

    let o = cli(
        &url,
        Some(ADMIN_TOKEN),
        &[
            "open",
            "/gates/promote/pr/42",
            "--reason",
            "dashboards green",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "/gates/promote/acme/shop/pr/42 is open");

    // A check by Flagger shows up in the listing.
    let r = client()
        .post(format!("{url}/gates/promote/acme/shop/pr/42"))
        .json(&json!({"name": "podinfo", "namespace": "test", "checksum": "r1", "phase": "Progressing"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let o = cli(&url, Some(ADMIN_TOKEN), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("/gates/promote/acme/shop/pr/42")
            && out.contains("open")
            && out.contains("admin (api)"),
        "{out}"
    );
    assert!(out.contains("test/podinfo@r1"), "{out}");

    let o = cli(&url, Some(ADMIN_TOKEN), &["show", "promote/pr/42"]);
    let out = stdout(&o);
    assert!(
        out.contains("admin via api: claims carol via cli; dashboards green"),
        "the token is the person, the local user a claim: {out}"
    );
    assert!(out.contains("pin"), "{out}");

    let o = cli(&url, Some(ADMIN_TOKEN), &["close", "gates/promote/pr/42"]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        "/gates/promote/acme/shop/pr/42 is closed"
    );

    let o = cli(
        &url,
        Some(ADMIN_TOKEN),
        &["--json", "show", "/gates/promote/pr/42"],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["state"], "closed");

    // Errors are short and say what to do.
    let o = cli(&url, Some("wrong"), &["open", "/gates/promote/pr/42"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("401") && stderr(&o).contains("GATEBOT_ADMIN_TOKEN"),
        "{}",
        stderr(&o)
    );
    let o = cli(&url, Some(ADMIN_TOKEN), &["open", "/gates/deploy/pr/42"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown gate kind `deploy`"),
        "{}",
        stderr(&o)
    );
    let o = cli(
        &format!("http://127.0.0.1:{}", free_port()),
        Some(ADMIN_TOKEN),
        &["list"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is it running?"), "{}", stderr(&o));
}

/// A server on a free port that answers every request with `body` (200,
/// JSON), as another version of gatebot might. Its thread ends with the test.
fn answering(body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let mut reader = BufReader::new(conn);
            let mut line = String::new();
            // The request's head ends with an empty line; GET and DELETE send no body.
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(
                reader.get_mut(),
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn cli_refuses_an_answer_without_a_field_it_reads() {
    let cases: [(&str, &[&str], &str); 3] = [
        (
            r#"{"gates": [{"gate": "/gates/promote/acme/shop/pr/1"}], "next": null}"#,
            &["list"],
            "state",
        ),
        (
            r#"{"key": "/gates/promote/acme/shop/pr/1", "state": "closed", "change": null}"#,
            &["show", "promote/acme/shop/pr/1"],
            "observations",
        ),
        (r#"{"scope": "all"}"#, &[], "lifted"),
    ];
    for (body, args, field) in cases {
        let url = answering(body);
        let o = match args.is_empty() {
            true => unfreeze(&url),
            false => cli(&url, Some(ADMIN_TOKEN), args),
        };
        assert!(!o.status.success(), "{args:?}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(
            e.contains("not what this gatebot reads")
                && e.contains(&format!("missing field `{field}`")),
            "{args:?}: {e}"
        );
    }
}

fn unfreeze(server: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(bin())
        .env_clear()
        .current_dir(dir.path())
        .env("GATEBOT_SERVER", server)
        .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
        .arg("unfreeze")
        .output()
        .expect("cli runs")
}

#[test]
fn check_config_reports_problems() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/x/gatebot.db", dir.path().display());
    let run = |env: &[(&str, &str)]| {
        let mut cmd = Command::new(bin());
        cmd.env_clear()
            .current_dir(dir.path())
            .arg("check-config")
            .env("GATEBOT_DATABASE_URL", &db);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let ok = run(&[]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stdout(&ok).contains("store:           sqlite (reachable, migrated)"),
        "{}",
        stdout(&ok)
    );
    assert!(
        dir.path().join("x/gatebot.db").exists(),
        "the file and its directory are created"
    );

    let bad = run(&[("GATEBOT_GITHUB_APP_ID", "123")]);
    assert!(!bad.status.success());
    assert!(stdout(&bad)
        .contains("needs both GATEBOT_GITHUB_APP_ID and GATEBOT_GITHUB_APP_PRIVATE_KEY"));

    let bad = run(&[("GATEBOT_APPROVAL_TTL", "soon")]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("GATEBOT_APPROVAL_TTL") || stderr(&bad).contains("approval-ttl"),
        "{}",
        stderr(&bad)
    );

    // The policy's per-command rules name commands gatebot knows.
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[github.commands.promot]\nmin_permission = \"admin\"\n",
    )
    .unwrap();
    let bad = run(&[("GATEBOT_POLICY", policy.to_str().unwrap())]);
    assert!(!bad.status.success());
    let said = format!("{}{}", stdout(&bad), stderr(&bad));
    assert!(said.contains("unknown command `promot`"), "{said}");

    // A setting read once, at start: an unknown gate kind is named by
    // check-config, and `serve` refuses to start with it.
    let unknown = "[github] close_on_push: unknown gate kind \"deploy\"";
    std::fs::write(
        &policy,
        "[github]\nclose_on_push = [\"start\", \"deploy\"]\n",
    )
    .unwrap();
    let bad = run(&[("GATEBOT_POLICY", policy.to_str().unwrap())]);
    assert!(!bad.status.success());
    assert!(stdout(&bad).contains(unknown), "{}", stdout(&bad));
    let mut serve = ChildGuard::spawn(
        Command::new(bin())
            .env_clear()
            .current_dir(dir.path())
            .arg("serve")
            .env("GATEBOT_LISTEN", format!("127.0.0.1:{}", free_port()))
            .env("GATEBOT_DATABASE_URL", &db)
            .env("GATEBOT_POLICY", &policy)
            .stderr(Stdio::piped()),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = serve.try_wait().unwrap() {
            break exit;
        }
        assert!(std::time::Instant::now() < deadline, "serve started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut logs = String::new();
    serve
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(!exit.success());
    assert!(logs.contains(unknown), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_can_come_from_files_and_are_never_logged() {
    let db = TestDb::new(Backend::Sqlite).await;
    let token_file = db.dir.path().join("token");
    std::fs::write(&token_file, "from-a-file\n").unwrap();
    let mut served = Served::start(
        &db,
        &[("GATEBOT_ADMIN_TOKEN_FILE", token_file.to_str().unwrap())],
    );
    // The environment's token wins over the file; start without it.
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    drop(served);
    let port = free_port();
    let mut child = ChildGuard::spawn(
        Command::new(bin())
            .arg("serve")
            .env_clear()
            .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
            .env("GATEBOT_DATABASE_URL", &db.url)
            .env("GATEBOT_ADMIN_TOKEN_FILE", &token_file)
            .env("RUST_LOG", "debug")
            .current_dir(db.dir.path())
            .stderr(Stdio::piped()),
    );
    let url = format!("http://127.0.0.1:{port}");
    gatebot_testkit::harness::eventually("the server", Duration::from_secs(20), || async {
        client().get(format!("{url}/healthz")).send().await.is_ok()
    })
    .await;
    let r = client()
        .post(format!("{url}/api/v1/gates/open"))
        .bearer_auth("from-a-file")
        .json(&json!({"gate": "/gates/start/acme/shop/pr/1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    child.wait().unwrap();
    assert!(
        !logs.contains("from-a-file"),
        "the token leaked into the logs:\n{logs}"
    );
}

async fn local(configure: impl FnOnce(&mut gatebot::Config)) -> (TestServer, TestDb) {
    let db = TestDb::new(Backend::Sqlite).await;
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    configure(&mut config);
    (TestServer::start(config, Default::default()).await, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadtester_api_is_compatible_and_durable() {
    let (server, db) = local(|_| {}).await;
    let canary =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let check = |path: &str, body: &serde_json::Value| client().post(server.at(path)).json(body);
    let admin = |path: &str| {
        client()
            .post(server.at(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(&canary)
    };

    assert_eq!(
        status(check("/gate/check", &canary)).await,
        403,
        "unknown keys are closed"
    );
    assert_eq!(status(client().post(server.at("/gate/approve"))).await, 200);
    assert_eq!(status(client().post(server.at("/gate/halt"))).await, 403);
    let r = check("/gate/open", &canary).send().await.unwrap();
    assert_eq!(r.status(), 401, "opening needs the admin token");
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("[loadtester] open_access = true"));
    assert_eq!(status(admin("/gate/open")).await, 202);
    assert_eq!(status(check("/gate/check", &canary)).await, 200);
    // Open until closed, whatever the revision: the loadtester's semantics.
    let next =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r2"});
    assert_eq!(status(check("/gate/check", &next)).await, 200);
    // Another canary has its own key.
    let other = json!({"name": "backend", "namespace": "test"});
    assert_eq!(status(check("/gate/check", &other)).await, 403);
    // Rollback keys are separate from gate keys.
    assert_eq!(status(check("/rollback/check", &canary)).await, 403);
    assert_eq!(status(admin("/rollback/open")).await, 202);
    assert_eq!(status(check("/rollback/check", &canary)).await, 200);
    assert_eq!(status(admin("/rollback/close")).await, 202);
    assert_eq!(status(check("/rollback/check", &canary)).await, 403);
    assert_eq!(
        status(client().post(server.at("/gate/check")).body("{")).await,
        400
    );

    // Durable: a restart keeps the open gate.
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    server.stop().await;
    let server = TestServer::start(config, Default::default()).await;
    let check = |body: &serde_json::Value| client().post(server.at("/gate/check")).json(body);
    assert_eq!(status(check(&canary)).await, 200);
    let close = client()
        .post(server.at("/gate/close"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&canary);
    assert_eq!(status(close).await, 202);
    assert_eq!(status(check(&canary)).await, 403);
    let detail = server
        .api("/api/v1/gates/loadtester/gate/test/podinfo")
        .await;
    let actions: Vec<&str> = detail["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .filter(|a| *a != "wait")
        .collect();
    assert_eq!(actions, ["close", "open"], "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadtester_open_access_is_an_explicit_opt_out() {
    let (server, _db) = local(|c| {
        c.admin_token = None;
        c.loadtester_open_access = true;
    })
    .await;
    let canary = json!({"name": "podinfo", "namespace": "test"});
    let r = client()
        .post(server.at("/gate/open"))
        .json(&canary)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(
        client()
            .post(server.at("/gate/check"))
            .json(&canary)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let audit: serde_json::Value = client()
        .get(server.at("/api/v1/audit"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(audit["audit"][0]["actor"]["source"], "loadtester");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_api_writes_need_a_configured_token() {
    let (server, _db) = local(|c| c.admin_token = None).await;
    let r = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth("anything")
        .json(&json!({"gate": "/gates/promote/acme/shop/pr/1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // The fix is on the server, not in the request.
    assert_eq!(
        r.text().await.unwrap(),
        "the operator API is read-only: this server has no GATEBOT_ADMIN_TOKEN (nor GATEBOT_API_TOKENS); set one where `gatebot serve` runs and restart it\n"
    );
    // Reads stay available.
    let r = client()
        .get(server.at("/api/v1/gates"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.metric("gatebot_rejected_requests_total{route=\"/api/v1/gates/open\",reason=\"api_disabled\"}").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_scoped_gates_need_no_pull_request() {
    let (server, _db) = local(|_| {}).await;
    let canary =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let r = client()
        .post(server.at("/gates/promote"))
        .json(&canary)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("gatebot gates open /gates/promote/canary/test/podinfo"),
        "{text}"
    );
    server.open("/gates/promote/canary/test/podinfo").await;
    assert_eq!(
        client()
            .post(server.at("/gates/promote"))
            .json(&canary)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // A short PR key without a default repository is refused, saying what to set.
    let r = client()
        .post(server.at("/gates/promote/pr/5"))
        .json(&canary)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("GATEBOT_GITHUB_REPOSITORY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_peeks_without_recording() {
    let (server, _db) = local(|c| c.github.repository = Some("acme/shop".parse().unwrap())).await;
    let r = client()
        .get(server.at("/gates/promote/pr/3"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    server.open("/gates/promote/pr/3").await;
    let r = client()
        .get(server.at("/gates/promote/pr/3"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r
        .text()
        .await
        .unwrap()
        .starts_with("approved by admin via api"));
    let waits = server.api("/api/v1/waits").await;
    assert!(waits["waits"].as_array().unwrap().is_empty());
    // A GET carrying Flagger's body is a check like any other.
    let canary =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    let r = client()
        .get(server.at("/gates/start/pr/3"))
        .json(&canary)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        server.api("/api/v1/waits").await["waits"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let (server, _db) = local(|c| c.github.repository = Some("acme/shop".parse().unwrap())).await;
    assert_eq!(
        client()
            .get(server.at("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client()
            .get(server.at("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let canary =
        json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    for n in [1, 2, 3] {
        client()
            .post(server.at(&format!("/gates/promote/pr/{n}")))
            .json(&canary)
            .send()
            .await
            .unwrap();
    }
    let r = client().get(server.at("/metrics")).send().await.unwrap();
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .contains("text"));
    let text = r.text().await.unwrap();
    for series in [
        "gatebot_gate_checks_total{kind=\"promote\",result=\"closed\"} 3",
        "gatebot_waits_started_total{kind=\"promote\"} 3",
        "gatebot_http_requests_total{method=\"POST\",route=\"/gates/{kind}/{*scope}\",status=\"403\"} 3",
        "gatebot_audit_events_total{action=\"wait\"} 3",
    ] {
        assert!(text.contains(series), "{series} in\n{text}");
    }
    assert!(
        !text.contains("pr/1"),
        "route labels are matched routes, not paths"
    );
    let r = client()
        .get(server.at("/healthz"))
        .header("x-request-id", "abc")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "abc");
    let r = client().get(server.at("/healthz")).send().await.unwrap();
    assert_eq!(
        r.headers()["x-request-id"].len(),
        36,
        "a request id is made up when none is sent"
    );
}

/// `.env.example` lists every setting, and as written (empty values) it starts.
#[test]
fn env_example_lists_every_setting_and_works_as_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    let example = std::fs::read_to_string(format!("{root}/.env.example")).unwrap();
    let config = std::fs::read_to_string(format!("{root}/src/config.rs")).unwrap();
    let mut names: Vec<&str> = config
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() > 20, "{names:?}");
    for name in names {
        assert!(
            example.contains(&format!("\n{name}=")),
            "{name} is missing from .env.example"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.env_clear().current_dir(dir.path()).arg("check-config");
    for line in example
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
    {
        let (k, v) = line.split_once('=').unwrap();
        cmd.env(k, v);
    }
    cmd.env(
        "GATEBOT_DATABASE_URL",
        format!("sqlite://{}/g.db", dir.path().display()),
    );
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

/// A plain clone runs every test: nothing in the code, tests, benches or CI
/// reads a file outside the repository (fixtures live in tests/fixtures/).
#[test]
fn nothing_reads_outside_the_repository() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // Spelled in pieces so that this test does not find itself.
    let outside = [
        concat!("..", "/shared"),
        concat!("shared", "/fixtures"),
        concat!("MANIFEST_DIR\"), \"", "/.."),
        concat!("}", "/../"),
    ];
    let mut files = Vec::new();
    for dir in ["src", "tests", "testkit", "benches", ".ci"] {
        walk(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "{files:?}");
    let mut found = Vec::new();
    for file in files
        .iter()
        .filter(|f| !f.starts_with(root.join("tests/fixtures")))
    {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if outside.iter().any(|o| line.contains(o)) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "reads outside the repository:\n{}",
        found.join("\n")
    );
}

/// A test that panics while a child runs leaves no process behind: `Served`
/// and `ChildGuard` kill and reap their child when the panic unwinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_test_leaves_no_child_behind() {
    let db = TestDb::new(Backend::Sqlite).await;
    let db_url = db.url.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let served = Served::start(&db, &[]);
        let bare = ChildGuard::spawn(
            Command::new(bin())
                .arg("serve")
                .env_clear()
                .env("GATEBOT_LISTEN", format!("127.0.0.1:{}", free_port()))
                .env("GATEBOT_DATABASE_URL", &db_url)
                .current_dir(db.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        tx.send([served.child.id(), bare.id()]).unwrap();
        panic!("a failing assertion while gatebot runs");
    })
    .join();
    assert!(panicked.is_err(), "the thread panicked");
    let pids = rx.recv().unwrap();
    for pid in pids {
        // Reaped, not merely killed: a zombie would still have /proc/<pid>.
        let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        assert!(!proc_dir.exists(), "gatebot {pid} outlived its test");
    }
}

/// A test killed by a signal runs none of its guards: the servers it
/// started stop by themselves once their parent is gone
/// (`GATEBOT_TEST_EXIT_WITH_PARENT`, which `ChildGuard` sets).
#[test]
fn a_server_whose_test_process_died_stops_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The shell stands for the test process: it starts gatebot, then dies.
    let out = Command::new("sh")
        .args([
            "-c",
            "\"$0\" serve >/dev/null 2>&1 & echo $!; sleep 2",
            bin(),
        ])
        .env_clear()
        .current_dir(dir.path())
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
        .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
        .env("GATEBOT_TEST_EXIT_WITH_PARENT", "true")
        .output()
        .unwrap();
    let pid = stdout(&out).trim().to_string();
    assert!(!pid.is_empty(), "{}", stderr(&out));
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let still = alive();
    if still {
        let _ = Command::new("kill").args(["-9", &pid]).status();
    }
    assert!(!still, "gatebot {pid} outlived the process that started it");
}
