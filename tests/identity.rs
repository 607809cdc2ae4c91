//! A token is one identity, and a session ends (issue points 3 and 4), over
//! real HTTP on SQLite and PostgreSQL: what a caller says about itself
//! (`X-Gatebot-Actor`, `X-Gatebot-Source`) is a claim kept in the reason and
//! never another person or source; several people behind the API are several
//! named tokens (`GATEBOT_API_TOKENS`); signing out ends a web session on every
//! replica; a session signed in with a token ends when that token is no longer
//! configured; an OAuth `state` signs in once.

use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::harness::{
    client, options_with, Backend, RecordingSink, TestDb, TestServer, ADMIN_TOKEN,
};
use reqwest::redirect::Policy;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const ALICE_TOKEN: &str = "alice-personal-token-7f3a";
const BOB_TOKEN: &str = "bob-personal-token-91c2";
const PIPELINE_TOKEN: &str = "pipeline-token-44d0";
const SESSION_KEY: &str = "a-session-key-of-at-least-32-characters";

const POLICY: &str = "[[approvals]]\nkind = \"promote\"\nrequired = 2\n";

fn sha256_hex(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn api_tokens(pairs: &[(&str, &str)]) -> gatebot::testing::config::ApiTokens {
    let text: Vec<String> = pairs
        .iter()
        .map(|(name, token)| format!("{name}={}", sha256_hex(token)))
        .collect();
    text.join(",").parse().expect("GATEBOT_API_TOKENS parses")
}

/// Two of two people open promote gates; the admin token, Alice's and Bob's
/// named tokens, and the pipeline token are configured; sessions are signed
/// with a fixed key, so that they cross restarts and replicas.
fn config(db: &TestDb, github: &FakeGithub) -> gatebot::Config {
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.api_tokens = api_tokens(&[("alice", ALICE_TOKEN), ("bob", BOB_TOKEN)]).into();
    config.pipeline_token = Some(PIPELINE_TOKEN.to_string().into());
    config.ui.session_key = Some(SESSION_KEY.to_string().into());
    config.ui.github_client_id = Some("client-1".into());
    config.ui.github_client_secret = Some("client-secret".to_string().into());
    config.github.api_url = github.url.clone();
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    config.policy = Some(policy);
    config
}

async fn start(config: gatebot::Config) -> TestServer {
    TestServer::start(config, options_with(&RecordingSink::new(), None)).await
}

/// Flagger's check of `gate` by test/podinfo at `checksum`: status and reason.
async fn check(server: &TestServer, gate: &str, checksum: &str) -> (u16, String) {
    for _ in 0..10 {
        let r = client()
            .post(server.at(gate))
            .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": checksum}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        // A store too busy to record the check in time is asked again, as Flagger would.
        if text != gatebot::testing::core::STORE_BUSY {
            return (status, text);
        }
    }
    panic!("the store stayed busy for ten checks of {gate}");
}

/// `POST /api/v1/gates/open` with `token` and what the CLI sends about itself.
async fn open(server: &TestServer, token: &str, gate: &str, claims: &str) -> (u16, Value) {
    let r = client()
        .post(server.at("/api/v1/gates/open"))
        .bearer_auth(token)
        .header("x-gatebot-actor", claims)
        .header("x-gatebot-source", "cli")
        .json(&json!({"gate": gate, "reason": "dashboards green"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The audit entries of `gate` with one of `actions`, oldest first (read
/// with Bob's token, which every server here has).
async fn audit(server: &TestServer, gate: &str, actions: &[&str]) -> Vec<Value> {
    let r = client()
        .get(server.at(&format!("/api/v1/audit?gate={gate}")))
        .bearer_auth(BOB_TOKEN)
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    let mut entries: Vec<Value> = body["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| actions.iter().any(|a| e["action"] == *a))
        .cloned()
        .collect();
    // The API lists the newest first.
    entries.reverse();
    entries
}

fn who(entry: &Value) -> (&str, &str) {
    (
        entry["actor"]["name"].as_str().unwrap_or("?"),
        entry["actor"]["source"].as_str().unwrap_or("?"),
    )
}

gatebot_testkit::on_both_stores!(
    one_token_is_one_person_whatever_it_claims,
    two_named_tokens_are_two_people,
    the_pipeline_token_names_nobody_else,
    signing_out_ends_the_session_on_every_replica,
    a_session_ends_when_its_token_is_no_longer_configured,
    an_oauth_state_signs_in_once,
);

async fn one_token_is_one_person_whatever_it_claims(backend: Backend) {
    let (db, github) = (TestDb::new(backend).await, FakeGithub::start().await);
    let server = start(config(&db, &github)).await;
    let gate = "/gates/promote/acme/shop/pr/5";
    assert_eq!(check(&server, gate, "r1").await.0, 403);
    for person in ["alice", "bob"] {
        let (status, body) = open(&server, ADMIN_TOKEN, gate, person).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, reason) = check(&server, gate, "r1").await;
    assert_eq!(status, 403, "one token is one person: {reason}");
    assert!(reason.contains("1 of 2 approvals"), "{reason}");
    assert!(
        !reason.contains("alice") && !reason.contains("bob"),
        "{reason}"
    );

    let opens = audit(&server, gate, &["approve", "open"]).await;
    assert_eq!(opens.len(), 2, "{opens:?}");
    for (entry, person) in opens.iter().zip(["alice", "bob"]) {
        assert_eq!(who(entry), ("admin", "api"), "{entry}");
        assert_eq!(
            entry["reason"],
            format!("claims {person} via cli; dashboards green"),
            "the claim is kept beside the identity: {entry}"
        );
    }
}

async fn two_named_tokens_are_two_people(backend: Backend) {
    let (db, github) = (TestDb::new(backend).await, FakeGithub::start().await);
    let server = start(config(&db, &github)).await;
    let gate = "/gates/promote/acme/shop/pr/6";
    assert_eq!(check(&server, gate, "r1").await.0, 403);
    // Alice's token, whatever her terminal says, is Alice.
    let (status, body) = open(&server, ALICE_TOKEN, gate, "root").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = open(&server, ALICE_TOKEN, gate, "bob").await;
    assert_eq!(status, 200, "{body}");
    let (status, reason) = check(&server, gate, "r1").await;
    assert_eq!(status, 403, "{reason}");
    assert!(reason.contains("1 of 2 approvals"), "{reason}");
    let (status, body) = open(&server, BOB_TOKEN, gate, "bob").await;
    assert_eq!(status, 200, "{body}");
    let (status, reason) = check(&server, gate, "r1").await;
    assert_eq!(status, 200, "{reason}");
    assert!(
        reason.starts_with("approved by alice via api and bob via api at "),
        "{reason}"
    );
    let opens = audit(&server, gate, &["approve", "open"]).await;
    let people: Vec<(&str, &str)> = opens.iter().map(who).collect();
    assert_eq!(
        people,
        [("alice", "api"), ("alice", "api"), ("bob", "api")],
        "{opens:?}"
    );
    assert_eq!(opens[0]["reason"], "claims root via cli; dashboards green");
    // A claim that is the token's own name adds only the source it claims.
    assert_eq!(opens[2]["reason"], "claims via cli; dashboards green");

    // A token nobody configured is nobody.
    let (status, _) = open(&server, "alice-old-token", gate, "alice").await;
    assert_eq!(status, 401);
}

async fn the_pipeline_token_names_nobody_else(backend: Backend) {
    let (db, github) = (TestDb::new(backend).await, FakeGithub::start().await);
    let server = start(config(&db, &github)).await;
    let r = client()
        .post(server.at("/api/v1/gates"))
        .bearer_auth(PIPELINE_TOKEN)
        .header("x-gatebot-actor", "alice")
        .header("x-gatebot-source", "cli")
        .json(&json!({"kind": "promote", "name": "release-7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap());
    let r = client()
        .delete(server.at("/api/v1/gates/promote/named/release-7"))
        .bearer_auth(PIPELINE_TOKEN)
        .header("x-gatebot-actor", "bob")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let gate = "/gates/promote/named/release-7";
    let created = audit(&server, gate, &["create"]).await;
    assert_eq!(who(&created[0]), ("pipeline", "api"), "{created:?}");
    assert_eq!(created[0]["reason"], "claims alice via cli");
    let held = audit(&server, gate, &["hold"]).await;
    assert_eq!(who(&held[0]), ("pipeline", "api"), "{held:?}");
    assert_eq!(held[0]["reason"], "retired: claims bob");
}

// ---- web sessions ----

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn get(url: &str, cookie: Option<&str>) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = browser().get(url);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.text().await.unwrap())
}

async fn post(url: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> (u16, String) {
    let mut req = browser().post(url).form(form);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// `name=value` of the Set-Cookie for `name`.
fn cookie_of(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap().to_string())
}

/// The value of the hidden input `name` in `html`.
fn hidden(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &html[at + name.len() + 15..];
    Some(rest[..rest.find('"')?].to_string())
}

/// Who `/ui` says is signed in with `cookie`, and the page's CSRF token.
async fn signed_in_as(server: &TestServer, cookie: &str) -> Option<(String, String)> {
    let (status, _, page) = get(&server.at("/ui"), Some(cookie)).await;
    assert_eq!(status, 200, "{page}");
    let at = page.find("Signed in as <strong>")? + "Signed in as <strong>".len();
    let login = page[at..].split('<').next()?.to_string();
    Some((login, hidden(&page, "csrf")?))
}

/// Signs in with `token` on the sign-in form: the session cookie and its CSRF token.
async fn token_session(server: &TestServer, token: &str) -> (String, String) {
    let (_, _, page) = get(&server.at("/ui/signin"), None).await;
    let csrf = hidden(&page, "csrf").expect("the sign-in form's csrf");
    let r = browser()
        .post(server.at("/ui/signin/token"))
        .form(&[("token", token), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cookie = cookie_of(r.headers(), "gatebot_session").expect("a session cookie");
    let (_, csrf) = signed_in_as(server, &cookie).await.expect("signed in");
    (cookie, csrf)
}

/// Approves `gate` for test/podinfo at r1 from the page, confirmed.
async fn approve(server: &TestServer, cookie: &str, csrf: &str, gate: &str) -> (u16, String) {
    post(
        &server.at("/ui/act"),
        Some(cookie),
        &[
            ("gate", gate),
            ("action", "approve"),
            ("canary", "test/podinfo"),
            ("revision", "r1"),
            ("csrf", csrf),
            ("confirmed", "yes"),
        ],
    )
    .await
}

/// A second replica on the same PostgreSQL database; SQLite has one.
async fn second_replica(backend: Backend, config: gatebot::Config) -> Option<TestServer> {
    (backend == Backend::Postgres).then_some(())?;
    Some(start(config).await)
}

async fn signing_out_ends_the_session_on_every_replica(backend: Backend) {
    let (db, github) = (TestDb::new(backend).await, FakeGithub::start().await);
    let a = start(config(&db, &github)).await;
    let b = second_replica(backend, config(&db, &github)).await;
    let replicas: Vec<&TestServer> = std::iter::once(&a).chain(b.as_ref()).collect();
    // A traffic gate needs one person, so one click would open it.
    let gate = "/gates/traffic/acme/shop/pr/7";
    assert_eq!(check(&a, gate, "r1").await.0, 403);

    let (cookie, csrf) = token_session(&a, ADMIN_TOKEN).await;
    for replica in &replicas {
        assert_eq!(
            signed_in_as(replica, &cookie).await,
            Some(("admin".to_string(), csrf.clone())),
            "every replica knows the session before it ends"
        );
    }
    let (status, body) = post(&a.at("/ui/signout"), Some(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(status, 303, "{body}");

    // The old cookie and its CSRF token, replayed anywhere, act as nobody.
    for replica in &replicas {
        assert_eq!(signed_in_as(replica, &cookie).await, None);
        let (status, body) = approve(replica, &cookie, &csrf, gate).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("sign in to act"), "{body}");
        let (status, body) = post(
            &replica.at("/ui/signout"),
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
        assert_eq!(status, 303, "signing out again is harmless: {body}");
    }
    let (status, reason) = check(&a, gate, "r1").await;
    assert_eq!(status, 403, "{reason}");
    assert!(audit(&a, gate, &["approve", "open"]).await.is_empty());

    // Signing in again is a new session, which acts.
    let last = replicas[replicas.len() - 1];
    let (cookie, csrf) = token_session(&a, ADMIN_TOKEN).await;
    let (status, body) = approve(last, &cookie, &csrf, gate).await;
    assert_eq!(status, 303, "{body}");
    assert_eq!(check(last, gate, "r1").await.0, 200);
}

async fn a_session_ends_when_its_token_is_no_longer_configured(backend: Backend) {
    let (db, github) = (TestDb::new(backend).await, FakeGithub::start().await);
    let server = start(config(&db, &github)).await;
    let gate = "/gates/traffic/acme/shop/pr/8";
    assert_eq!(check(&server, gate, "r1").await.0, 403);
    let (admin_cookie, admin_csrf) = token_session(&server, ADMIN_TOKEN).await;
    let (alice_cookie, alice_csrf) = token_session(&server, ALICE_TOKEN).await;
    assert_eq!(
        signed_in_as(&server, &alice_cookie).await.map(|s| s.0),
        Some("alice".into()),
        "a named token signs in as its name"
    );
    server.stop().await;

    // A restart with the same tokens keeps both sessions.
    let server = start(config(&db, &github)).await;
    assert!(signed_in_as(&server, &admin_cookie).await.is_some());
    assert!(signed_in_as(&server, &alice_cookie).await.is_some());
    server.stop().await;

    // A new admin token, and Alice's token replaced: both sessions end.
    let mut rotated = config(&db, &github);
    rotated.admin_token = Some("the-new-admin-token".to_string().into());
    rotated.api_tokens = api_tokens(&[("alice", "alice-new-token"), ("bob", BOB_TOKEN)]).into();
    let server = start(rotated).await;
    for (cookie, csrf) in [(&admin_cookie, &admin_csrf), (&alice_cookie, &alice_csrf)] {
        assert_eq!(signed_in_as(&server, cookie).await, None);
        let (status, body) = approve(&server, cookie, csrf, gate).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("sign in to act"), "{body}");
    }
    let (status, _) = open(&server, ADMIN_TOKEN, gate, "admin").await;
    assert_eq!(status, 401, "the API refuses the old token too");
    assert_eq!(check(&server, gate, "r1").await.0, 403);

    // The new token signs in, and acts as Alice.
    let (cookie, csrf) = token_session(&server, "alice-new-token").await;
    let (status, body) = approve(&server, &cookie, &csrf, gate).await;
    assert_eq!(status, 303, "{body}");
    let opens = audit(&server, gate, &["open"]).await;
    assert_eq!(who(&opens[0]), ("alice", "web"), "{opens:?}");
}

async fn an_oauth_state_signs_in_once(backend: Backend) {
    let (db, github) = (TestDb::new(backend).await, FakeGithub::start().await);
    let a = start(config(&db, &github)).await;
    let b = second_replica(backend, config(&db, &github)).await;
    github.set_oauth_login("wanda");
    let (status, headers, _) = get(&a.at("/ui/signin/github"), None).await;
    assert_eq!(status, 303);
    let oauth_cookie = cookie_of(&headers, "gatebot_oauth").unwrap();
    let authorize = headers["location"].to_str().unwrap().to_string();
    let (status, headers, _) = get(&authorize, None).await;
    assert_eq!(status, 302);
    let back = headers["location"].to_str().unwrap().to_string();
    let (status, headers, body) = get(&back, Some(&oauth_cookie)).await;
    assert_eq!(status, 303, "{body}");
    let session = cookie_of(&headers, "gatebot_session").expect("signed in");
    assert_eq!(
        signed_in_as(&a, &session).await.map(|s| s.0),
        Some("wanda".into())
    );

    // The same callback, with the same cookie and state, again: here, and on
    // another replica.
    let path = back.split_once("/ui/").map(|(_, p)| p).unwrap();
    let replicas: Vec<&TestServer> = std::iter::once(&a).chain(b.as_ref()).collect();
    for replica in replicas {
        let (status, headers, body) =
            get(&replica.at(&format!("/ui/{path}")), Some(&oauth_cookie)).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("this sign-in was used already"), "{body}");
        assert!(cookie_of(&headers, "gatebot_session").is_none());
    }
}

// ---- configuration ----

/// `gatebot check-config` with `env` (and nothing else): success, stdout, stderr.
fn check_config(env: &[(&str, &str)]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"));
    cmd.env_clear()
        .current_dir(dir.path())
        .arg("check-config")
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Named tokens come from the environment or a file, are shown by name, and
/// a value that is not name=<sha256> (a token pasted in place of its hash),
/// a reserved name, or a token shared with the admin token is refused
/// without repeating what was pasted.
#[test]
fn check_config_names_the_operators_and_refuses_tokens_that_are_not_one_person() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-tokens");
    // The hash as the docs say to make it.
    let hash = |token: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", "printf %s \"$TOKEN\" | sha256sum"])
            .env("TOKEN", token)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let hash = text.split_whitespace().next().unwrap().to_string();
        assert_eq!(hash, sha256_hex(token));
        hash
    };
    let tokens = format!("alice={},bob={}\n", hash(ALICE_TOKEN), hash(BOB_TOKEN));
    std::fs::write(&file, tokens).unwrap();
    let (ok, out, err) = check_config(&[
        ("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN),
        ("GATEBOT_API_TOKENS_FILE", file.to_str().unwrap()),
    ]);
    assert!(ok, "{out}{err}");
    assert!(
        out.lines().any(|l| l.starts_with("GATEBOT_API_TOKENS")
            && l.contains("file (<NAME>_FILE)")
            && l.trim_end().ends_with("alice, bob")),
        "{out}"
    );
    assert!(
        out.contains("operator API:    enabled for the admin token (one person, \"admin\"); named tokens: alice, bob"),
        "{out}"
    );
    assert!(!out.contains(&sha256_hex(ALICE_TOKEN)), "{out}");

    for (value, said) in [
        (format!("alice={ALICE_TOKEN}"), "not the token"),
        (
            ALICE_TOKEN.to_string(),
            "entry 1 is not name=<sha256 hex of the token>",
        ),
        (
            format!("admin={}", sha256_hex(ALICE_TOKEN)),
            "a name gatebot uses itself",
        ),
        (
            format!("alice={h},bob={h}", h = sha256_hex(ALICE_TOKEN)),
            "have the same token",
        ),
    ] {
        let (ok, out, err) = check_config(&[("GATEBOT_API_TOKENS", &value)]);
        assert!(!ok, "{value}: {out}");
        assert!(out.contains(said), "{value}: {out}{err}");
        assert!(
            !out.contains(ALICE_TOKEN) && !err.contains(ALICE_TOKEN),
            "a pasted token is never repeated: {out}{err}"
        );
    }
    let shared = format!("alice={}", sha256_hex(ADMIN_TOKEN));
    let (ok, out, _) = check_config(&[
        ("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN),
        ("GATEBOT_API_TOKENS", &shared),
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("`alice` has the same token as GATEBOT_ADMIN_TOKEN"),
        "{out}"
    );
}
