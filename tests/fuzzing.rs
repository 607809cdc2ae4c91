//! The fuzz targets' properties (src/fuzzing.rs), checked on every `cargo test`
//! with the real payloads the seed corpora start from, and with every input
//! the fuzzers found to break one (each with the fix it led to).

use std::path::Path;

use gatebot::fuzzing;

fn fixtures(dir: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x != "md"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

#[test]
fn github_payloads_keep_the_properties() {
    let payloads = fixtures("github");
    assert!(payloads.len() >= 5);
    for p in &payloads {
        fuzzing::github(p);
        let v: serde_json::Value = serde_json::from_slice(p).expect("JSON");
        if let Some(body) = v["comment"]["body"].as_str() {
            fuzzing::comment(body);
        }
    }
}

#[test]
fn slack_payloads_keep_the_properties() {
    fuzzing::slack(&fixtures("slack").concat());
    for body in fixtures("slack") {
        fuzzing::slack(&body);
        let form = format!(
            "payload={}",
            form_urlencoded::byte_serialize(&body).collect::<String>()
        );
        fuzzing::slack(form.as_bytes());
    }
    for frame in fixtures("slack/socket_mode") {
        fuzzing::socket_frame(std::str::from_utf8(&frame).expect("UTF-8"));
    }
}

#[test]
fn flagger_bodies_keep_the_properties() {
    for body in fixtures("flagger") {
        fuzzing::flagger(&body);
    }
}

#[test]
fn written_commands_keep_the_properties() {
    fuzzing::comment("LGTM\n/hold cancel the fix is out\n\n/Status\n/freeze for 2h release\n");
    for text in [
        "promote 42 looks good",
        "hold cancel acme/shop#7",
        "rollback <https://github.com/acme/shop/pull/42|#42> broken",
        "traffic /gates/traffic/acme/shop/pr/42",
        "freeze ns/test for 2h release day",
    ] {
        fuzzing::slash(text);
    }
    for key in [
        "promote/pr/42",
        "/loadtester/gate/test/podinfo",
        "/gates/start/test",
    ] {
        fuzzing::gate_key(key);
    }
    fuzzing::session("octocat.github.1900000000000.0123abcd.id1.-");
    fuzzing::web_form(b"gate=promote%2Fpr%2F42&since=2026-12-01&until=nonsense&action=approve");
    for query in [
        &b"env=production&before=5"[..],
        b"env=production&cluster=prod-us",
        b"env=staging&cluster=prod-eu",
        b"cluster=%3Cscript%3E",
    ] {
        fuzzing::web_form(query);
    }
    let policy = include_str!("../docs/policy.md");
    let example = policy.split("```toml\n").nth(1).expect("an example");
    fuzzing::policy(example.split("```").next().expect("its end"));
}
