//! The first ten minutes with gatebot, on the real binary: README.md's laptop
//! quickstart run as written, `.env` and `check-config`, and refusals that say
//! where the fix goes.

use std::process::{Command, Stdio};
use std::time::Duration;

use gatebot_testkit::harness::{Backend, TestDb};
use gatebot_testkit::served::{bin, free_port, ChildGuard, Served};

const README: &str = include_str!("../README.md");
const RELEASE_BIN: &str = "./target/release/gatebot";

/// One command of the block and the lines it must print.
struct Step {
    command: String,
    expected: Vec<String>,
}

fn quickstart() -> Vec<Step> {
    let section = README
        .split_once("\n## Try it on a laptop\n")
        .expect("README.md has a \"Try it on a laptop\" section")
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("the quickstart is a ```sh block")
        .0;
    let mut steps: Vec<Step> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("# ") {
            Some(out) => steps
                .last_mut()
                .expect("output follows a command")
                .expected
                .push(out.to_string()),
            None => steps.push(Step {
                command: line.to_string(),
                expected: Vec::new(),
            }),
        }
    }
    steps
}

/// `expected` with `…` standing for any text.
fn matches(expected: &str, got: &str) -> bool {
    let mut parts = expected.split('…');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

#[test]
fn readme_quickstart_works_as_written() {
    assert!(
        Command::new("curl").arg("--version").output().is_ok(),
        "the quickstart uses curl: install it (Debian: apt-get install curl)"
    );
    let steps = quickstart();
    assert!(steps.len() >= 5, "about five commands");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let env = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("USER", "alice".to_string()),
        ("GATEBOT_LISTEN", format!("127.0.0.1:{port}")),
        ("GATEBOT_SERVER", format!("http://127.0.0.1:{port}")),
    ];
    let mut exported: Vec<(String, String)> = Vec::new();
    let mut server: Option<ChildGuard> = None;
    for step in steps {
        let line = step.command.trim();
        if line.starts_with("cargo build") {
            // The test already has the binary the build makes.
            continue;
        }
        if let Some(vars) = line.strip_prefix("export ") {
            for pair in vars.split_whitespace() {
                let (k, v) = pair.split_once('=').expect("export NAME=value");
                exported.push((k.to_string(), v.to_string()));
            }
            continue;
        }
        let script = line
            .replace(RELEASE_BIN, bin())
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
        let mut cmd = Command::new("bash");
        cmd.env_clear()
            .current_dir(dir.path())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .envs(exported.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if let Some(background) = script.strip_suffix('&') {
            assert!(server.is_none(), "one server");
            cmd.arg("-c")
                .arg(format!("exec {}", background.trim()))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            server = Some(ChildGuard::spawn(&mut cmd));
            continue;
        }
        // Bounded: curl retries at most 10 times, the CLI times out after 15 s.
        let out = cmd.arg("-c").arg(&script).output().expect("bash runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let got: Vec<&str> = stdout.lines().collect();
        assert!(
            out.status.success(),
            "`{line}` failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            got.len(),
            step.expected.len(),
            "`{line}` printed {got:?}, README.md says {:?}",
            step.expected
        );
        for (want, got) in step.expected.iter().zip(&got) {
            assert!(
                matches(want, got),
                "`{line}` printed\n  {got}\nREADME.md says\n  {want}"
            );
        }
    }
    assert!(server.is_some(), "the quickstart starts a server");
}

#[test]
fn ellipsis_matches_any_text() {
    assert!(matches(
        "approved by … at … for r1",
        "approved by bob at T for r1"
    ));
    assert!(matches("403", "403"));
    assert!(!matches("403", "200"));
    assert!(!matches("approved by … for r1", "approved by bob for r2"));
}

/// `gatebot` run in `dir` with only `env` set.
fn gatebot(dir: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .env_clear()
        .current_dir(dir)
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("gatebot runs")
}

/// The longest setting's name, which sets the width of the name column.
const WIDEST: usize = "GATEBOT_GITHUB_ALLOWED_REPOSITORIES".len();

/// One line of check-config's settings table.
fn setting(name: &str, origin: &str, value: &str) -> String {
    format!("{name:<WIDEST$} {origin:<12} {value}")
}

/// check-config's settings table: every line before the meanings of unset settings.
fn settings_rows(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("listen:"))
        .filter(|l| !l.contains(" unset: ") && !l.starts_with("# "))
        .collect()
}

#[test]
fn dotenv_is_read_and_check_config_says_where_each_setting_came_from() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "from-a-file\n").unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "# a copy of .env.example, filled in\n\
         GATEBOT_LISTEN=127.0.0.1:9999\n\
         GATEBOT_APPROVAL_TTL=1h\n\
         GATEBOT_DATABASE_URL=sqlite://db/gatebot.db\n\
         GATEBOT_ADMIN_TOKEN_FILE=token\n\
         GATEBOT_SLACK_CHANNEL=\n",
    )
    .unwrap();
    // The environment wins over .env.
    let out = gatebot(
        dir.path(),
        &[("GATEBOT_APPROVAL_TTL", "2h"), ("HTTPS_PROXY", "")],
        &["check-config"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Under the headings of .env.example, in its order (the CLI's own setting is not serve's).
    let headings: Vec<&str> = text.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(
        headings,
        [
            "# gatebot itself",
            "# Who may call it",
            "# GitHub",
            "# Slack",
            "# Microsoft Teams",
            "# The web pages",
            "# Outbound calls and the cluster",
            "# The canaries' numbers",
            "# Change requests"
        ],
        "{text}"
    );
    for line in [
        setting("GATEBOT_LISTEN", ".env", "127.0.0.1:9999"),
        setting("GATEBOT_APPROVAL_TTL", "environment", "2h"),
        setting("GATEBOT_UI", "default", "on"),
        // The store's URL is shown: a SQLite URL holds no password.
        setting("GATEBOT_DATABASE_URL", ".env", "sqlite://db/gatebot.db"),
        // Empty is empty, not a secret that is set.
        setting("HTTPS_PROXY", "environment", "(empty)"),
        setting("GATEBOT_FLAGGER_TOKENS", "default", "(empty)"),
        // Durations as they are written everywhere else.
        "approval TTL:    2h (an approval expires 2h after it is given)".to_string(),
        setting("GATEBOT_ADMIN_TOKEN", "file (<NAME>_FILE)", "(secret, set)"),
        setting("GATEBOT_GITHUB_REPOSITORY", "unset", "-"),
        setting("GATEBOT_SLACK_CHANNEL", "unset", "-"),
        "GATEBOT_GITHUB_REPOSITORY unset: short keys like pr/42 are refused (write /gates/<kind>/<owner>/<repo>/pr/<n>)".to_string(),
        "GATEBOT_SLACK_BOT_TOKEN unset: nothing is posted to Slack".to_string(),
    ] {
        assert!(
            text.lines().any(|l| l.trim_end() == line.trim_end()),
            "no line `{line}` in:\n{text}"
        );
    }
    assert!(
        !text.contains("from-a-file"),
        "a secret was printed:\n{text}"
    );
    let rows = settings_rows(&text);
    assert!(rows.len() > 30, "the settings table:\n{text}");
    for row in &rows {
        // Every origin starts in the same column, after the longest name.
        assert!(
            row.len() > WIDEST + 1
                && row.as_bytes()[WIDEST] == b' '
                && row.as_bytes()[WIDEST + 1] != b' ',
            "misaligned: `{row}` in:\n{text}"
        );
    }
    assert!(
        dir.path().join("db/gatebot.db").exists(),
        "the database named in .env was opened"
    );
    assert!(
        !text.contains("GATEBOT_ADMIN_TOKEN unset"),
        "the token is set:\n{text}"
    );

    let bare = tempfile::tempdir().unwrap();
    let out = gatebot(
        bare.path(),
        &[("GATEBOT_DATABASE_URL", "sqlite://g.db")],
        &["check-config"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l
            == "GATEBOT_ADMIN_TOKEN unset: the operator API is read-only (`gatebot gates open` and /api/v1 writes are refused)"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_dotenv_and_the_environment_wins() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join(".env"),
        format!(
            "GATEBOT_LISTEN=127.0.0.1:{port}\nGATEBOT_ADMIN_TOKEN=from-dotenv\nGATEBOT_GITHUB_REPOSITORY=acme/shop\n"
        ),
    )
    .unwrap();
    let _server = ChildGuard::spawn(
        Command::new(bin())
            .arg("serve")
            .env_clear()
            .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
            .env("GATEBOT_GITHUB_REPOSITORY", "acme/web")
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    gatebot_testkit::harness::eventually(
        "gatebot to listen on the .env port",
        Duration::from_secs(20),
        || async { gatebot_testkit::served::healthy(port) },
    )
    .await;
    let r = gatebot_testkit::harness::client()
        .post(format!("http://127.0.0.1:{port}/api/v1/gates/open"))
        .bearer_auth("from-dotenv")
        .json(&serde_json::json!({"gate": "/gates/promote/pr/7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the token from .env is the server's");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["key"], "/gates/promote/acme/web/pr/7",
        "the environment's repository wins over .env's"
    );
}

/// An admin-token refusal says which side lacks the token: this command, or the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_refusals_say_whether_the_server_or_the_cli_lacks_it() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let dir = tempfile::tempdir().unwrap();
    let open = |server: &str, token: Option<&str>| {
        let mut env = vec![("GATEBOT_SERVER", server)];
        if let Some(t) = token {
            env.push(("GATEBOT_ADMIN_TOKEN", t));
        }
        let out = gatebot(
            dir.path(),
            &env,
            &["gates", "open", "/gates/promote/acme/shop/pr/1"],
        );
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert_eq!(
        open(&served.url, None),
        "gatebot: could not open the gate: 401 missing bearer token: send Authorization: Bearer <this server's GATEBOT_ADMIN_TOKEN, or your own token from its GATEBOT_API_TOKENS> (this command has no token: set GATEBOT_ADMIN_TOKEN for this command to the server's token or your own)\n"
    );
    assert_eq!(
        open(&served.url, Some("not-the-servers")),
        "gatebot: could not open the gate: 401 wrong bearer token: the token sent is neither this server's GATEBOT_ADMIN_TOKEN nor one of its GATEBOT_API_TOKENS (this command's GATEBOT_ADMIN_TOKEN is not the server's: use the token `gatebot serve` runs with, or your own)\n"
    );
    drop(served);

    // A server started without a token: the fix is where it runs, and a restart.
    let tokenless = Served::start(&db, &[("GATEBOT_ADMIN_TOKEN", "")]);
    assert_eq!(
        open(&tokenless.url, Some("anything")),
        "gatebot: could not open the gate: 403 the operator API is read-only: this server has no GATEBOT_ADMIN_TOKEN (nor GATEBOT_API_TOKENS); set one where `gatebot serve` runs and restart it\n"
    );
    assert_eq!(
        open(&tokenless.url, None),
        "gatebot: could not open the gate: 403 the operator API is read-only: this server has no GATEBOT_ADMIN_TOKEN (nor GATEBOT_API_TOKENS); set one where `gatebot serve` runs and restart it (this command has no token either: set GATEBOT_ADMIN_TOKEN for it too)\n"
    );
}

/// A database URL's password never shows; the rest of it does.
#[test]
fn check_config_shows_the_store_url_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let out = gatebot(
        dir.path(),
        &[(
            "GATEBOT_DATABASE_URL",
            "postgres://gatebot:hunter2@127.0.0.1:1/gatebot?sslmode=disable&password=hunter3",
        )],
        &["check-config"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("hunter"), "a password was printed:\n{text}");
    let line = setting(
        "GATEBOT_DATABASE_URL",
        "environment",
        "postgres://***:***@127.0.0.1:1/gatebot?sslmode=disable&password=***",
    );
    assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
}

/// Every URL-valued setting is shown without its password, however it is
/// given (user part or query), and wherever check-config prints it.
#[test]
fn check_config_shows_no_url_password() {
    let dir = tempfile::tempdir().unwrap();
    let out = gatebot(
        dir.path(),
        &[
            ("GATEBOT_DATABASE_URL", "sqlite://g.db"),
            // Nothing listens on port 1: check-config says so, with the URL.
            ("GATEBOT_PROMETHEUS_URL", "http://prom:hunter2@127.0.0.1:1"),
            (
                "GATEBOT_GITHUB_API_URL",
                "https://ghe:hunter3@ghe.example/api/v3",
            ),
            // A token as the user name, as any query value or the fragment.
            (
                "GATEBOT_SLACK_API_URL",
                "https://hunter4@slack.example/api?password=hunter5&sig=hunter6&mode=x#hunter7",
            ),
            ("GATEBOT_PUBLIC_URL", "https://gatebot.example"),
            // One slash, a bare query key, a plain key's value that is not plain.
            (
                "GATEBOT_TEAMS_LOGIN_URL",
                "http:/u:hunter8@login.example/x?hunter9&mode=a;password=hunter10",
            ),
        ],
        &["check-config"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("hunter"), "a password was printed:\n{text}");
    for line in [
        setting(
            "GATEBOT_PROMETHEUS_URL",
            "environment",
            "http://***:***@127.0.0.1:1/",
        ),
        setting(
            "GATEBOT_GITHUB_API_URL",
            "environment",
            "https://***:***@ghe.example/api/v3",
        ),
        setting(
            "GATEBOT_SLACK_API_URL",
            "environment",
            "https://***@slack.example/api?password=***&sig=***&mode=x#***",
        ),
        setting(
            "GATEBOT_TEAMS_LOGIN_URL",
            "environment",
            "http://***:***@login.example/x?***=&mode=***",
        ),
        // A URL without a password is shown as written.
        setting(
            "GATEBOT_PUBLIC_URL",
            "environment",
            "https://gatebot.example",
        ),
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    assert!(
        text.contains("prometheus:      http://***:***@127.0.0.1:1/: "),
        "{text}"
    );
}

/// check-config takes serve's settings, but its help does not list them all again.
#[test]
fn check_config_help_points_to_serve_and_its_flags_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let help = gatebot(dir.path(), &[], &["check-config", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    assert!(text.lines().count() < 15, "check-config --help:\n{text}");
    assert!(text.contains("`gatebot serve --help`"), "{text}");
    let out = gatebot(
        dir.path(),
        &[("GATEBOT_DATABASE_URL", "sqlite://g.db")],
        &["check-config", "--approval-ttl", "3h"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&setting("GATEBOT_APPROVAL_TTL", "flag", "3h")),
        "{text}"
    );
}

/// `<GATE>` and `--reason` say what they take.
#[test]
fn gate_and_reason_have_help() {
    let dir = tempfile::tempdir().unwrap();
    for verb in ["open", "close"] {
        let out = gatebot(dir.path(), &[], &["gates", verb, "--help"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("<GATE>  The gate's URL path, e.g. /gates/promote/pr/42"),
            "{text}"
        );
        assert!(
            text.contains("--reason <REASON>  Why, kept in the audit log"),
            "{text}"
        );
    }
}

/// During a change freeze, a freeze that silently did nothing would be worse than none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeze_without_a_reason_refuses_and_exits_non_zero() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[]);
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("GATEBOT_SERVER", served.url.as_str()),
        ("GATEBOT_ADMIN_TOKEN", gatebot_testkit::harness::ADMIN_TOKEN),
    ];
    for args in [
        &["freeze", "acme/shop", "--for", "2h"][..],
        &["freeze", "acme/shop"],
        &["freeze", "--until", "2030-01-01T00:00:00Z"],
    ] {
        let out = gatebot(dir.path(), &env, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains("--reason <REASON>"), "{args:?}: {stderr}");
    }
    let list = gatebot(dir.path(), &env, &["freeze"]);
    assert!(list.status.success());
    assert_eq!(String::from_utf8_lossy(&list.stdout), "nothing is frozen\n");
    let frozen = gatebot(
        dir.path(),
        &env,
        &[
            "freeze",
            "acme/shop",
            "--for",
            "2h",
            "--reason",
            "end of year",
        ],
    );
    assert!(frozen.status.success(), "{frozen:?}");
}

/// `gates show` on an open gate whose canary is answered closed says why in the state line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_show_explains_a_closed_canary_on_an_open_gate() {
    let db = TestDb::new(Backend::Sqlite).await;
    let served = Served::start(&db, &[("GATEBOT_GITHUB_REPOSITORY", "acme/shop")]);
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("GATEBOT_SERVER", served.url.as_str()),
        ("GATEBOT_ADMIN_TOKEN", gatebot_testkit::harness::ADMIN_TOKEN),
    ];
    let check = |revision: &str| {
        let url = format!("{}/gates/promote/pr/42", served.url);
        let body = serde_json::json!({"name": "podinfo", "namespace": "test",
            "phase": "Progressing", "checksum": revision});
        async move {
            gatebot_testkit::harness::client()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(check("r1").await, 403);
    let open = gatebot(dir.path(), &env, &["gates", "open", "promote/pr/42"]);
    assert!(open.status.success(), "{open:?}");
    assert_eq!(check("r1").await, 200);
    let show = || {
        let out = gatebot(dir.path(), &env, &["gates", "show", "promote/pr/42"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = show();
    assert!(text.contains("\nstate: open\n"), "{text}");
    assert_eq!(check("r2").await, 403);
    let text = show();
    assert!(
        text.contains("\nstate: open, but closed for test/podinfo: it is at revision r2, and the approval is pinned to its revision r1\n"),
        "{text}"
    );
}

/// The approval TTL means one thing wherever it is described.
#[test]
fn the_approval_ttl_is_described_one_way() {
    let dir = tempfile::tempdir().unwrap();
    let help = gatebot(dir.path(), &[], &["serve", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let said = "expires this long after it is given, whether or not Flagger has used it";
    assert!(help.contains(&format!("An approval {said}")), "{help}");
    let example = include_str!("../.env.example").replace("\n# ", " ");
    assert!(
        example.contains(&format!("An approval {said}")),
        "{example}"
    );
    assert!(README.replace('\n', " ").contains(
        "An approval expires `GATEBOT_APPROVAL_TTL` after it is given, whether or not Flagger has used it"
    ));
}

/// `gatebot serve` in `dir` with only `env` set, its stderr in `dir/serve-<port>.log`.
fn serve(dir: &std::path::Path, port: u16, env: &[(&str, &str)]) -> ChildGuard {
    let log = std::fs::File::create(dir.join(format!("serve-{port}.log"))).unwrap();
    ChildGuard::spawn(
        Command::new(bin())
            .arg("serve")
            .env_clear()
            .env("GATEBOT_LISTEN", format!("127.0.0.1:{port}"))
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(log),
    )
}

/// A misspelt setting is named, with the one it is closest to, wherever it
/// was written; variables tests set for themselves (GATEBOT_TEST_*) are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misspelt_settings_are_named_with_the_closest_known_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "GATEBOT_SLAK_CHANNEL=C0123DEPLOY\n",
    )
    .unwrap();
    let env = [
        ("GATEBOT_DATABASE_URL", "sqlite://g.db"),
        ("GATEBOT_APROVAL_TTL", "2h"),
        ("GATEBOT_WHATEVER", "1"),
        ("GATEBOT_TEST_ANYTHING", "1"),
        // What Kubernetes adds for a Service named gatebot.
        ("GATEBOT_SERVICE_HOST", "10.0.0.1"),
        ("GATEBOT_PORT_8080_TCP_ADDR", "10.0.0.1"),
    ];
    let out = gatebot(dir.path(), &env, &["check-config"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a misspelt name passed:\n{text}");
    for line in [
        "problem:         GATEBOT_APROVAL_TTL (from the environment) is not a setting gatebot reads: did you mean GATEBOT_APPROVAL_TTL?",
        "problem:         GATEBOT_SLAK_CHANNEL (from .env) is not a setting gatebot reads: did you mean GATEBOT_SLACK_CHANNEL?",
        "problem:         GATEBOT_WHATEVER (from the environment) is not a setting gatebot reads (the settings are listed in .env.example)",
        "configuration has problems",
    ] {
        assert!(text.lines().any(|l| l == line), "no line `{line}` in:\n{text}");
    }
    for not_a_mistake in [
        "GATEBOT_TEST_ANYTHING",
        "GATEBOT_SERVICE_HOST",
        "GATEBOT_PORT_",
    ] {
        assert!(!text.contains(not_a_mistake), "{not_a_mistake}:\n{text}");
    }

    // serve warns and starts: the environment may carry other names.
    let port = free_port();
    let _server = serve(dir.path(), port, &env);
    gatebot_testkit::harness::eventually(
        "gatebot to start despite unknown names",
        Duration::from_secs(20),
        || async { gatebot_testkit::served::healthy(port) },
    )
    .await;
    let log = std::fs::read_to_string(dir.path().join(format!("serve-{port}.log"))).unwrap();
    assert!(
        log.contains("GATEBOT_APROVAL_TTL (from the environment) is not a setting gatebot reads: did you mean GATEBOT_APPROVAL_TTL?")
            && log.contains("WARN"),
        "{log}"
    );
}

/// A value clap refuses is named as it was written: the variable, and where
/// it came from, with the format expected; a flag stays a flag.
#[test]
fn a_bad_value_names_the_variable_that_was_set() {
    let dir = tempfile::tempdir().unwrap();
    let db = ("GATEBOT_DATABASE_URL", "sqlite://g.db");
    let stderr = |env: &[(&str, &str)], args: &[&str]| {
        let out = gatebot(dir.path(), env, args);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for args in [&["check-config"][..], &["serve"][..]] {
        let said = stderr(&[db, ("GATEBOT_APPROVAL_TTL", "2x")], args);
        assert!(
            said.starts_with("gatebot: GATEBOT_APPROVAL_TTL=2x (from the environment): ")
                && said.contains("(write e.g. 30s, 15m, 24h)")
                && !said.contains("--approval-ttl"),
            "{said}"
        );
    }
    let said = stderr(&[db, ("GATEBOT_LOG_FORMAT", "yaml")], &["serve"]);
    assert_eq!(
        said,
        "gatebot: GATEBOT_LOG_FORMAT=yaml (from the environment): write one of: text, json\n"
    );
    std::fs::write(dir.path().join(".env"), "GATEBOT_APPROVAL_TTL=2x\n").unwrap();
    let said = stderr(&[db], &["check-config"]);
    assert!(
        said.starts_with("gatebot: GATEBOT_APPROVAL_TTL=2x (from .env): "),
        "{said}"
    );
    // Given as a flag, the flag is what was written.
    let said = stderr(&[db], &["serve", "--approval-ttl", "3x"]);
    assert!(
        said.contains("'--approval-ttl <APPROVAL_TTL>'") || said.contains("--approval-ttl"),
        "{said}"
    );
    assert!(!said.contains("GATEBOT_APPROVAL_TTL="), "{said}");
}

/// Two servers on one SQLite file: the second refuses to start and says
/// why; once the first is gone, a server starts on it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_one_sqlite_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("GATEBOT_DATABASE_URL", "sqlite://data/gatebot.db")];
    let first_port = free_port();
    let first = serve(dir.path(), first_port, &env);
    gatebot_testkit::harness::eventually(
        "the first server to listen",
        Duration::from_secs(20),
        || async { gatebot_testkit::served::healthy(first_port) },
    )
    .await;
    let second_port = free_port();
    let mut second = serve(dir.path(), second_port, &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr =
        std::fs::read_to_string(dir.path().join(format!("serve-{second_port}.log"))).unwrap();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the second server started: {stderr}"
    );
    assert!(
        stderr.contains("gatebot: another gatebot serves the SQLite file data/gatebot.db (it holds data/gatebot.db.lock): two servers on one SQLite file would disagree; stop the other one, or run several on PostgreSQL"),
        "{stderr}"
    );
    assert!(
        gatebot_testkit::served::healthy(first_port),
        "the first one still serves"
    );
    // check-config reads the same file while a server runs.
    let out = gatebot(dir.path(), &env, &["check-config"]);
    assert!(out.status.success(), "{out:?}");
    drop(first);
    let again = free_port();
    let _second = serve(dir.path(), again, &env);
    gatebot_testkit::harness::eventually(
        "a server to start once the first is gone",
        Duration::from_secs(20),
        || async { gatebot_testkit::served::healthy(again) },
    )
    .await;
}

/// A Teams approver written as an email is refused, as a wrong Slack id is;
/// Workflows cards without GATEBOT_PUBLIC_URL, which would carry no way to
/// act, are warned of.
#[test]
fn teams_approvers_are_object_ids_and_workflow_cards_need_the_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let teams = [
        ("GATEBOT_DATABASE_URL", "sqlite://g.db"),
        (
            "GATEBOT_TEAMS_APP_ID",
            "00000000-0000-4000-8000-000000000001",
        ),
        (
            "GATEBOT_TEAMS_TENANTS",
            "00000000-0000-4000-8000-000000000002",
        ),
    ];
    let run = |extra: &[(&str, &str)]| {
        let env: Vec<(&str, &str)> = teams.iter().chain(extra).copied().collect();
        let out = gatebot(dir.path(), &env, &["check-config"]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[teams]\napprovers = [\"alice@example.com\", \"b15a9416-0ad3-4172-9210-7beb711d3f70\"]\n",
    )
    .unwrap();
    let (ok, text) = run(&[("GATEBOT_POLICY", policy.to_str().unwrap())]);
    assert!(!ok, "{text}");
    assert!(text.lines().any(|l| l.ends_with("[teams] approvers: \"alice@example.com\" is an email or sign-in name: write the person's Entra object id (a GUID like 5a7c0e0b-…, shown as \"Object ID\" on their page in the Entra admin center)")), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("problem:") && l.contains("b15a9416")),
        "an object id is fine:\n{text}"
    );

    let warned = "warning:         GATEBOT_TEAMS_WORKFLOW_URL without GATEBOT_PUBLIC_URL";
    let url = (
        "GATEBOT_TEAMS_WORKFLOW_URL",
        "https://example.com/workflows/1",
    );
    let (ok, text) = run(&[url]);
    assert!(ok && text.contains(warned), "{text}");
    let (ok, text) = run(&[url, ("GATEBOT_PUBLIC_URL", "https://gatebot.example.com")]);
    assert!(ok && !text.contains(warned), "{text}");
}

/// `check-config --probe` makes one read-only call to each configured
/// service with the credentials given (issue 42, point 5): placeholders are
/// refused, each with what to fix, and working credentials say who they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_probe_tries_each_services_credentials() {
    use gatebot_testkit::fake_github::FakeGithub;
    use gatebot_testkit::fake_kube::FakeKube;
    use gatebot_testkit::fake_slack::FakeSlack;
    use gatebot_testkit::fake_teams::FakeBotFramework;

    let github = FakeGithub::start().await;
    let slack = FakeSlack::start().await;
    let teams = FakeBotFramework::start(&[]).await;
    let kube = FakeKube::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kube.kubeconfig(dir.path(), "flagger-system");
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[kubernetes]\nlookup = true\n").unwrap();
    let policy = policy.to_string_lossy().into_owned();
    teams.accept_only_secret("the-client-secret");
    github.refuse_token("ghp_your_token");
    slack.refuse_token("xoxb-your-token");
    let slack_api = slack.api_url();
    let common = [
        ("GATEBOT_DATABASE_URL", "sqlite://g.db"),
        ("GATEBOT_GITHUB_API_URL", github.url.as_str()),
        ("GATEBOT_GITHUB_REPOSITORY", "acme/shop"),
        ("GATEBOT_GITHUB_WEBHOOK_SECRET", "s"),
        ("GATEBOT_SLACK_API_URL", slack_api.as_str()),
        ("GATEBOT_SLACK_SIGNING_SECRET", "s"),
        (
            "GATEBOT_TEAMS_APP_ID",
            "00000000-0000-0000-0000-000000000001",
        ),
        (
            "GATEBOT_TEAMS_TENANTS",
            "72f988bf-86f1-41af-91ab-2d7cd011db47",
        ),
        ("GATEBOT_TEAMS_LOGIN_URL", teams.url.as_str()),
        ("GATEBOT_POLICY", policy.as_str()),
        ("GATEBOT_KUBECONFIG", kubeconfig.as_str()),
    ];
    let probe = |secrets: Vec<(&'static str, &'static str)>| {
        let mut env: Vec<(String, String)> = common
            .iter()
            .filter(|(k, _)| !secrets.iter().any(|(s, _)| s == k))
            .chain(secrets.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push(("NO_COLOR".into(), "1".into()));
        let dir = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let out = gatebot(&dir, &env, &["check-config", "--probe"]);
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        })
    };

    // The placeholders of README's install: each refused, with the fix.
    let (ok, text) = probe(vec![
        ("GATEBOT_GITHUB_TOKEN", "ghp_your_token"),
        ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-your-token"),
        ("GATEBOT_TEAMS_APP_PASSWORD", "the-secret-id"),
    ])
    .await
    .unwrap();
    assert!(!ok, "{text}");
    for want in [
        "problem:         github:          ",
        "refused the sign-in",
        "set GATEBOT_GITHUB_TOKEN to valid ones",
        "problem:         slack:           ",
        "invalid_auth",
        "copy the Bot User OAuth Token",
        "problem:         teams:           ",
        "GATEBOT_TEAMS_APP_PASSWORD (the client secret, not its id)",
        // The lookup's cluster answers: the kubeconfig's token is the fake's.
        "kubernetes:      may read canaries (tried flagger-system/gatebot-check-config-probe)",
        "configuration has problems",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    assert!(
        !text.contains("ghp_your_token") && !text.contains("xoxb-your-token"),
        "{text}"
    );

    // Working credentials: each says who it is, and the configuration is OK.
    let (ok, text) = probe(vec![
        ("GATEBOT_GITHUB_TOKEN", "ghp_working"),
        ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-working"),
        ("GATEBOT_TEAMS_APP_PASSWORD", "the-client-secret"),
    ])
    .await
    .unwrap();
    assert!(ok, "{text}");
    for want in [
        "github:          ",
        ": signed in as gatebot-test",
        "github:          can read acme/shop",
        "the bot token is grace (Subarachnoid Workspace)",
        "a token was issued for app 00000000-0000-0000-0000-000000000001",
        "configuration OK",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    // An error that names the URL shows it as check-config shows URLs.
    let (ok, text) = probe(vec![
        ("GATEBOT_GITHUB_TOKEN", "ghp_working"),
        ("GATEBOT_SLACK_BOT_TOKEN", "xoxb-working"),
        ("GATEBOT_TEAMS_APP_PASSWORD", "the-client-secret"),
        (
            "GATEBOT_SLACK_API_URL",
            "http://127.0.0.1:9/api?token=hunter11#hunter12",
        ),
    ])
    .await
    .unwrap();
    assert!(!ok, "{text}");
    assert!(text.contains("problem:         slack:"), "{text}");
    assert!(!text.contains("hunter"), "{text}");
    // Nothing written: every call was a read (or the token's form post).
    let writes: Vec<_> = github
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}
