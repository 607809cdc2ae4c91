//! One approval can be followed through the logs: the delivery's work and each
//! outbox job it causes log inside a span named by its id.

use std::time::Duration;

use gatebot::testing::github::verify::sign;
use gatebot_testkit::fake_github::{Failure, FakeGithub};
use gatebot_testkit::github_payloads::comment;
use gatebot_testkit::harness::{client, eventually, Backend, TestDb};
use gatebot_testkit::raw;
use gatebot_testkit::served::{limits_policy, Served};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};

const SECRET: &str = "tracing-webhook-secret";
const WAIT: Duration = Duration::from_secs(20);

fn lines(logs: &str) -> Vec<Value> {
    logs.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `item` span's id of a JSON log line, if it was logged inside one.
fn item_id(line: &Value) -> Option<&str> {
    line["spans"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "item")?["id"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_and_its_jobs_log_under_their_ids() {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    // The first write to GitHub fails once, so that its job logs a retry.
    github.fail_writes([Failure::server_error()]);
    let limits = limits_policy(db.dir.path(), &[("outbox_backoff", "50ms")]);
    let served = Served::start(
        &db,
        &[
            ("GATEBOT_LOG_FORMAT", "json"),
            ("RUST_LOG", "info"),
            ("GATEBOT_POLICY", &limits),
            ("GATEBOT_GITHUB_WEBHOOK_SECRET", SECRET),
            ("GATEBOT_GITHUB_TOKEN", "ghp_test"),
            ("GATEBOT_GITHUB_API_URL", &github.url),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
        ],
    );
    let body = serde_json::to_vec(&comment(42, 4201, "alice", "/promote")).unwrap();
    let r = client()
        .post(format!("{}/webhooks/github", served.url))
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "trace-1")
        .header("x-hub-signature-256", sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    eventually("the reactions to be sent", WAIT, || async {
        github.reactions_on(4201).len() == 2
    })
    .await;

    let logs = lines(&served.logs());
    let changed = logs
        .iter()
        .find(|l| l["message"] == "gate changed")
        .expect("the approval is logged");
    let delivery = item_id(changed).expect("the gate change is logged in the delivery's span");
    assert!(delivery.starts_with("github:"), "{changed}");
    let retried = logs
        .iter()
        .find(|l| l["message"] == "will retry")
        .expect("the failed reaction is logged");
    let job = item_id(retried).expect("a job's retry is logged in the job's span");
    assert_ne!(job, delivery, "a job has an id of its own");
    assert!(
        logs.iter().any(|l| l["message"] == "will retry"
            && l["spans"].as_array().is_some_and(|s| s
                .iter()
                .any(|s| s["queue"] == "outbox" && s["route"] == "github"))),
        "the job's span names its queue and sink"
    );
}

/// Flagger polls every gate at every interval: the same answer again logs
/// nothing at info, and each change logs one line, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_check_logs_nothing_and_a_change_one_line() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(
        &db,
        &[
            ("GATEBOT_LOG_FORMAT", "json"),
            ("RUST_LOG", "info"),
            ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
        ],
    );
    let gate = "/gates/promote/pr/42";
    let check = |checksum: &'static str| {
        let url = format!("{}{gate}", served.url);
        async move {
            let body = serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": checksum});
            let r = client().post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 403);
        }
    };
    // Lines about the gate's route, after a marker request (a page, logged at
    // info with the request id it was sent with) has shown that everything
    // before it was written.
    let mut markers = 0;
    let mut logged = || {
        markers += 1;
        let marker = format!("marker-{markers}");
        let url = format!("{}/ui/health", served.url);
        let served = &served;
        async move {
            client()
                .get(url)
                .header("x-request-id", &marker)
                .send()
                .await
                .unwrap();
            eventually("the marker's access line", WAIT, || async {
                lines(&served.logs())
                    .iter()
                    .any(|l| l["span"]["request_id"] == marker.as_str())
            })
            .await;
            lines(&served.logs())
                .into_iter()
                .filter(|l| l["span"]["path"] == gate)
                .collect::<Vec<_>>()
        }
    };

    check("r1").await;
    let first = logged().await;
    assert_eq!(first.len(), 1, "a new wait logs one line: {first:?}");
    assert_eq!(first[0]["level"], "INFO", "{}", first[0]);
    assert_eq!(first[0]["change"], "wait started", "{}", first[0]);
    assert_eq!(first[0]["status"], 403, "{}", first[0]);

    for _ in 0..5 {
        check("r1").await;
    }
    let steady = logged().await;
    assert_eq!(steady.len(), 1, "the steady state logs nothing: {steady:?}");

    check("r2").await;
    let restarted = logged().await;
    assert_eq!(
        restarted.len(),
        2,
        "a new revision logs one line: {restarted:?}"
    );
    assert_eq!(restarted[1]["change"], "wait restarted for a new revision");
}

/// A Flagger token typed into the wrong path is a secret all the same: no
/// log line shows it, in text or JSON, whatever the path looks like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flagger_token_in_a_mistyped_path_is_never_logged() {
    const TOKEN: &str = "fl4gger-t0ken-in-the-path";
    let hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(TOKEN))
    };
    let setting = format!("prod={hash}");
    let paths = [
        format!("/gates/t/{TOKEN}/promote"),
        format!("//gates/t/{TOKEN}/promote"),
        format!("/Gates/t/{TOKEN}/promote"),
        format!("/gate/t/{TOKEN}/promote"),
        format!("/gates/T/{TOKEN}/promote/pr/42"),
        format!("/gates/t//{TOKEN}/promote"),
        format!("/gates/%74/{TOKEN}/promote"),
        format!("/gates/{TOKEN}/promote"),
        format!("/gates/promote/pr/{TOKEN}"),
        format!("/ui/{TOKEN}"),
        format!("/nowhere/t/{}", TOKEN.replace('-', "%2D")),
        // Typed a little wrong: no masking rule could find the token in these.
        format!("/gates/t:{TOKEN}/promote"),
        format!("/gates/t%2F{TOKEN}/promote"),
        format!("/gates/t={TOKEN}/promote/pr/42"),
        format!("/gates/token/{TOKEN}/promote"),
        format!("/gates/t/{TOKEN}%0A/promote"),
        format!("/gates/{TOKEN}./promote"),
        format!("/gates/promote/t%2F{TOKEN}"),
        format!("/gates/promote/pr/42;{TOKEN}"),
        format!("/{TOKEN}."),
        format!("/ui/gates/t:{TOKEN}"),
        format!("/api/v1/gates/promote/pr/42-{TOKEN}"),
        format!("/gates/promote/pr/42-{TOKEN}"),
    ];
    for format in ["text", "json"] {
        let db = TestDb::new(Backend::Sqlite).await;
        let served = Served::start(
            &db,
            &[
                ("GATEBOT_LOG_FORMAT", format),
                ("RUST_LOG", "debug"),
                ("GATEBOT_FLAGGER_TOKENS", &setting),
            ],
        );
        for path in &paths {
            for method in ["GET", "POST"] {
                let stream = raw::connect(served.port).await;
                let (read, mut write) = stream.into_split();
                let body = r#"{"name":"podinfo","namespace":"test","phase":"Progressing"}"#;
                let head = format!(
                    "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                write.write_all(head.as_bytes()).await.unwrap();
                let status = raw::response(&mut BufReader::new(read)).await.unwrap();
                assert!(status.starts_with("HTTP/1.1 "), "{path}: {status}");
            }
        }
        // A page, logged at info with the request id it was sent with, marks
        // that everything before it was written.
        let marker = "marker-after-the-tokens";
        client()
            .get(format!("{}/ui/health", served.url))
            .header("x-request-id", marker)
            .send()
            .await
            .unwrap();
        eventually("the marker's access line", WAIT, || async {
            served.logs().contains(marker)
        })
        .await;
        let logs = served.logs();
        for (n, line) in logs.lines().enumerate() {
            assert!(
                !line.contains(TOKEN) && !line.contains("t0ken-in"),
                "{format} log line {n} shows the token: {line}"
            );
        }
        assert!(
            logs.contains("<unmatched: ") && logs.contains("/gates/t/***/promote"),
            "the mistyped paths are logged by length, the checks redacted ({format}):\n{logs}"
        );
    }
}

/// A check's checksum is the caller's text: a newline or an ANSI escape in
/// it forges no log line, in text or JSON (issue 41: the warning "no
/// deployment for this revision" logged it raw).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_with_a_newline_forges_no_log_line() {
    let forged = "abc\n2026-12-05T14:00:00.000000Z  INFO gatebot::core: FORGED gate opened by alice\u{1b}[2K";
    for format in ["text", "json"] {
        let db = TestDb::new(Backend::Sqlite).await;
        let github = FakeGithub::start().await;
        github.set_head(42, "85d557f0c9a4e1d2b3c4d5e6f708192a3b4c5d6e");
        let policy = db.dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            "[github]\ndeployments = true\n\n[[github.environments]]\nnamespace = \"test\"\nenvironment = \"production\"\n",
        )
        .unwrap();
        let served = Served::start(
            &db,
            &[
                ("GATEBOT_LOG_FORMAT", format),
                ("NO_COLOR", "1"),
                ("RUST_LOG", "info"),
                ("GATEBOT_ADMIN_TOKEN", "admin-token"),
                ("GATEBOT_GITHUB_WEBHOOK_SECRET", "s"),
                ("GATEBOT_GITHUB_TOKEN", "ghp_test"),
                ("GATEBOT_GITHUB_API_URL", &github.url),
                ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
                ("GATEBOT_POLICY", policy.to_str().unwrap()),
            ],
        );
        let opened = client()
            .post(format!("{}/api/v1/gates/open", served.url))
            .bearer_auth("admin-token")
            .json(&serde_json::json!({"gate": "/gates/start/pr/42", "reason": "go"}))
            .send()
            .await
            .unwrap();
        assert!(opened.status().is_success(), "{}", opened.status());
        let check = serde_json::json!({"name": "app", "namespace": "elsewhere",
            "phase": "Progressing", "checksum": forged});
        for kind in ["start", "promote"] {
            client()
                .post(format!("{}/gates/{kind}/pr/42", served.url))
                .json(&check)
                .send()
                .await
                .unwrap();
        }
        let seen = tokio::time::timeout(WAIT, async {
            while !served.logs().contains("no deployment for this revision") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(seen.is_ok(), "no warning ({format}):\n{}", served.logs());
        let logs = served.logs();
        assert!(
            logs.contains("FORGED"),
            "the checksum is logged ({format}):\n{logs}"
        );
        for line in logs.lines() {
            assert!(
                !line.starts_with("2026-12-05T14:00:00") && !line.contains('\u{1b}'),
                "a check's checksum forged a log line ({format}): {line:?}"
            );
            if format == "json" {
                assert!(serde_json::from_str::<Value>(line).is_ok(), "{line:?}");
            }
        }
    }
}

/// Flagger-side text (checksums, revisions, commits, metadata values) is
/// logged with `?` (escaped), never `%` (as is): a newline in it would forge
/// a line. Canary names and namespaces are checked Kubernetes names.
#[test]
fn flagger_side_text_is_never_logged_as_is() {
    let flagger_side = ["checksum", "revision", "commit", "metadata", "hook"];
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(root)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (at, _) in text.match_indices("tracing::") {
                // The macro's arguments, up to its closing `);`.
                let call = &text[at..];
                let call = &call[..call.find(");").unwrap_or(call.len())];
                for field in flagger_side {
                    let raw = [format!("%{field}"), format!("{field} = %")];
                    if raw.iter().any(|r| call.contains(r.as_str())) {
                        found.push(format!("{}: {field}", path.display()));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "logged as is: {found:#?}");
}
