//! Template overrides, with the real binary: a file under the policy file's `[templates] dir`
//! that overrides no built-in template is refused at start (and by
//! `check-config`) with the list of valid names; hidden entries, such as the
//! `..data` links of a mounted ConfigMap, are skipped; the repository's own
//! `templates/`, which the image ships, is accepted.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gatebot_testkit::harness::{client, Backend, TestDb};
use gatebot_testkit::served::{bin, free_port, templates_policy, ChildGuard, Served};

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `gatebot <args>` with only `env`, in `cwd`; its exit code and stderr, or a
/// failure if it still runs after 20 s.
fn run(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_clear()
        .env("GATEBOT_LISTEN", format!("127.0.0.1:{}", free_port()))
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = ChildGuard::spawn(&mut cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "gatebot {args:?} still runs: it should have refused to start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Both pipes are read once it has exited: what it says fits in them.
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).unwrap();
    }
    if let Some(mut stderr) = child.stderr.take() {
        stderr.read_to_string(&mut out).unwrap();
    }
    (status.code(), out)
}

#[test]
fn an_override_of_no_template_is_refused_with_the_valid_names() {
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("templates");
    // The name the chart's docs used to give; the template is slack/wait.j2.
    write(&templates, "slack/wait.json.j2", "{\"blocks\": []}\n");
    write(&templates, "github/status.md.j2", "Gate {{ gate }}\n");
    let db = format!("sqlite://{}/gatebot.db", dir.path().display());
    let policy = templates_policy(dir.path(), &templates);
    let env = [
        ("GATEBOT_POLICY", policy.as_str()),
        ("GATEBOT_DATABASE_URL", db.as_str()),
    ];

    let (code, out) = run(dir.path(), &["serve"], &env);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("overrides no template: slack/wait.json.j2 "),
        "names the file: {out}"
    );
    for valid in ["slack/wait.j2", "github/status.md.j2", "slack/digest.j2"] {
        assert!(out.contains(valid), "lists {valid}: {out}");
    }
    assert!(
        !out.contains("overrides no template: github/status.md.j2"),
        "a real override is not refused: {out}"
    );

    let (code, out) = run(dir.path(), &["check-config"], &env);
    assert_ne!(code, Some(0), "check-config fails too: {out}");
    assert!(out.contains("slack/wait.json.j2"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_overrides_and_configmap_links_start() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path();
    write(templates, "slack/wait.j2", "{\"blocks\": []}\n");
    // What a ConfigMap volume holds beside the files it projects.
    write(templates, "..2026_12_01_00_00_00.1/slack/wait.j2", "x\n");
    write(templates, ".hidden", "x\n");
    let policy = templates_policy(db.dir.path(), templates);
    let served = Served::start(&db, &[("GATEBOT_POLICY", &policy)]);
    let r = client()
        .get(format!("{}/healthz", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // The repository's templates/ as overrides: every file there is a template's name.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
    let db2 = TestDb::new(Backend::Sqlite).await;
    let policy = templates_policy(db2.dir.path(), &shipped);
    let served = Served::start(&db2, &[("GATEBOT_POLICY", &policy)]);
    let r = client()
        .get(format!("{}/healthz", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
