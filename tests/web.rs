//! The pages under /ui over real HTTP (the browser tests are tests/browser.rs):
//! what they show and escape, their headers, sign-in (admin token, GitHub's
//! OAuth flow against the fake GitHub, a trusted proxy's header), CSRF, the
//! confirmation step, refusals with reasons, and the change stream.

use std::time::Duration;

use gatebot::testing::config::UiMode;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::harness::{
    options_with, Backend, RecordingSink, TestDb, TestServer, ADMIN_TOKEN,
};
use reqwest::redirect::Policy;
use serde_json::json;

const TITLE: &str = "<script>alert('pwned')</script> & friends";

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

struct Setup {
    server: TestServer,
    github: FakeGithub,
    _db: TestDb,
}

async fn setup(backend: Backend, edit: impl FnOnce(&mut gatebot::Config)) -> Setup {
    let db = TestDb::new(backend).await;
    let github = FakeGithub::start().await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.token = Some("test-token".to_string().into());
    config.github.webhook_secret = Some("secret".to_string().into());
    config.github.api_url = github.url.clone();
    config.ui.github_client_id = Some("client-1".into());
    config.ui.github_client_secret = Some("client-secret".to_string().into());
    edit(&mut config);
    let sink = RecordingSink::new();
    let server = TestServer::start(config, options_with(&sink, None)).await;
    Setup {
        server,
        github,
        _db: db,
    }
}

/// A Flagger check of `gate` by test/podinfo at `checksum`; the status code.
/// Flagger's check. A store too busy to record it in time says so and is
/// asked again, as Flagger asks at its next poll.
async fn check(
    server: &TestServer,
    gate: &str,
    checksum: &str,
    metadata: serde_json::Value,
) -> u16 {
    for _ in 0..10 {
        let r = browser()
            .post(server.at(gate))
            .json(
                &json!({"name": "podinfo", "namespace": "test", "phase": "Progressing",
                          "checksum": checksum, "metadata": metadata}),
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        if r.text().await.unwrap() != gatebot::testing::core::STORE_BUSY {
            return status;
        }
    }
    panic!("the store stayed busy for ten checks of {gate}");
}

async fn get(url: &str, cookie: Option<&str>) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = browser().get(url);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    // minijinja writes `/` as `&#x2f;`; read it back as the text it is.
    (
        status,
        headers,
        r.text().await.unwrap().replace("&#x2f;", "/"),
    )
}

async fn post(
    url: &str,
    cookie: Option<&str>,
    form: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = browser().post(url).form(form);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    // minijinja writes `/` as `&#x2f;`; read it back as the text it is.
    (
        status,
        headers,
        r.text().await.unwrap().replace("&#x2f;", "/"),
    )
}

/// `name=value` of the Set-Cookie for `name`.
fn cookie_of(headers: &reqwest::header::HeaderMap, name: &str) -> Option<(String, String)> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| (v.split(';').next().unwrap().to_string(), v.to_string()))
}

/// The value of the hidden input `name` in `html`.
fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} in {html}"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn admin_session(server: &TestServer) -> (String, String) {
    let (_, _, page) = get(&server.at("/ui/signin"), None).await;
    let csrf = hidden(&page, "csrf");
    let (status, headers, _) = post(
        &server.at("/ui/signin/token"),
        None,
        &[("token", ADMIN_TOKEN), ("csrf", &csrf)],
    )
    .await;
    assert_eq!(status, 303);
    let (cookie, _) = cookie_of(&headers, "gatebot_session").expect("a session cookie");
    let (_, _, page) = get(&server.at("/ui"), Some(&cookie)).await;
    (cookie, hidden(&page, "csrf"))
}

gatebot_testkit::on_both_stores!(
    pages_show_waits_escaped_behind_strict_headers,
    audit_searches_by_person_repository_gate_and_time,
    admin_approves_after_confirming_with_csrf,
    a_reader_signed_in_with_github_sees_no_button_and_is_refused,
    oauth_state_must_match,
    forwarded_user_only_from_trusted_proxies,
    changes_stream_to_open_pages,
    the_page_asks_why_where_the_policy_does,
    the_page_holds_an_approval_to_its_change_and_its_team,
);

/// Flagger's check of `gate` at `checksum`: the status and what gatebot said.
async fn check_said(server: &TestServer, gate: &str, checksum: &str) -> (u16, String) {
    let r = browser()
        .post(server.at(gate))
        .json(
            &json!({"name": "podinfo", "namespace": "test", "phase": "Progressing",
                      "checksum": checksum, "metadata": {}}),
        )
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Under `[change]` and `[[approvals]] include`, the page's Approve names
/// its change in the reason field, read from ServiceNow; a GitHub session
/// counts for a team by its login, an operator's token session for none.
async fn the_page_holds_an_approval_to_its_change_and_its_team(backend: Backend) {
    use gatebot_testkit::fake_servicenow::{Change, FakeServiceNow};
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let hour = 3_600_000;
    sn.put(Change::planned(
        "CHG0031337",
        "approved",
        now - hour,
        now + hour,
        "shop",
    ));
    sn.put(Change::planned(
        "CHG0000002",
        "rejected",
        now - hour,
        now + hour,
        "shop",
    ));
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[approvals]]\nkind = \"promote\"\nrequired = 2\ninclude = [{{ team = \"acme/sre\" }}]\n\
             [change]\nprovider = \"servicenow\"\nurl = \"{}\"\n",
            sn.url
        ),
    )
    .unwrap();
    let s = setup(backend, |c| {
        c.policy = Some(policy);
        c.change.user = Some("gatebot".into());
        c.change.password = Some("s3cret".to_string().into());
    })
    .await;
    s.github.set_permission("wanda", "write");
    s.github.set_permission("sam", "write");
    s.github.add_team_member("acme/sre", "sam");
    let gate = "/gates/promote/acme/shop/pr/9";
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 403);
    let approve = |cookie: String, csrf: String, reason: &'static str| {
        let at = s.server.at("/ui/act");
        async move {
            let form = [
                ("gate", gate),
                ("action", "approve"),
                ("csrf", csrf.as_str()),
                ("confirmed", "yes"),
                ("reason", reason),
            ];
            let (status, _, body) = post(&at, Some(&cookie), &form).await;
            (status, body)
        }
    };

    let (cookie, csrf) = oauth_sign_in(&s, "wanda").await;
    let (status, body) = approve(cookie.clone(), csrf.clone(), "looks fine").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("the policy ties promote to an approved change"),
        "{body}"
    );
    let (status, body) = approve(cookie.clone(), csrf.clone(), "CHG0000002").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("change CHG0000002 was rejected"), "{body}");
    let (status, body) = approve(cookie, csrf, "CHG0031337 looks fine").await;
    assert_eq!(status, 303, "{body}");
    // The operator's token session counts as a person, in no team.
    let (cookie, csrf) = admin_session(&s.server).await;
    let (status, body) = approve(cookie, csrf, "CHG0031337 agreed").await;
    assert_eq!(status, 303, "{body}");
    let (status, said) = check_said(&s.server, gate, "rev-a").await;
    assert_eq!(status, 403, "{said}");
    assert!(said.contains("still needs someone from acme/sre"), "{said}");

    let (cookie, csrf) = oauth_sign_in(&s, "sam").await;
    let (status, body) = approve(cookie, csrf, "CHG0031337 sre agrees").await;
    assert_eq!(status, 303, "{body}");
    let (status, said) = check_said(&s.server, gate, "rev-a").await;
    assert_eq!(status, 200, "sam is acme/sre's: {said}");
}

/// With a `[[reasons]]` rule, the page's Approve needs the confirmation's
/// reason: without one it is refused with what to write, and changes nothing.
async fn the_page_asks_why_where_the_policy_does(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[reasons]]\nkind = \"promote\"\nrequired = true\n",
    )
    .unwrap();
    let s = setup(backend, |c| c.policy = Some(policy)).await;
    let gate = "/gates/promote/acme/shop/pr/7";
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 403);
    let (cookie, csrf) = admin_session(&s.server).await;
    let act = |reason: &'static str| {
        let csrf: &'static str = Box::leak(csrf.clone().into_boxed_str());
        vec![
            ("gate", gate),
            ("action", "approve"),
            ("csrf", csrf),
            ("confirmed", "yes"),
            ("reason", reason),
        ]
    };
    for blank in ["", "   ", "because"] {
        let (status, _, body) = post(&s.server.at("/ui/act"), Some(&cookie), &act(blank)).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body.contains("the policy asks for a reason to promote: say why"),
            "{body}"
        );
    }
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 403);
    // The loadtester's routes carry no reason: a clear 400, not a 503 to retry.
    let canary = json!({"name": "podinfo", "namespace": "test"});
    let r = browser()
        .post(s.server.at("/gate/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&canary)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("these routes carry no reason"));
    let (status, _, body) = post(&s.server.at("/ui/act"), Some(&cookie), &act("fine")).await;
    assert_eq!(status, 303, "{body}");
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 200);
}

async fn pages_show_waits_escaped_behind_strict_headers(backend: Backend) {
    let s = setup(backend, |_| {}).await;
    let meta = json!({"title": TITLE});
    assert_eq!(
        check(&s.server, "/gates/promote/pr/42", "rev-a", meta).await,
        403
    );

    let (status, headers, _) = get(&s.server.at("/"), None).await;
    assert_eq!(
        (status, headers["location"].to_str().unwrap()),
        (303, "/ui")
    );

    let (status, headers, page) = get(&s.server.at("/ui"), None).await;
    assert_eq!(status, 200);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(page.contains("test/podinfo"), "{page}");
    assert!(page.contains("acme/shop#42"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt; &amp; friends"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(!page.contains("<script>"), "no inline script: {page}");
    assert!(
        !page.contains("data-action=\"approve\""),
        "no buttons without sign-in"
    );

    let (status, _, gate) = get(&s.server.at("/ui/gates/promote/acme/shop/pr/42"), None).await;
    assert_eq!(status, 200);
    assert!(
        gate.contains("rev-a") && gate.contains("&lt;script&gt;"),
        "{gate}"
    );
    let (status, _, pr) = get(&s.server.at("/ui/prs/acme/shop/42"), None).await;
    assert_eq!(status, 200);
    assert!(pr.contains("/ui/gates/promote/acme/shop/pr/42"), "{pr}");
    let (status, _, health) = get(&s.server.at("/ui/health"), None).await;
    assert_eq!(status, 200, "{health}");
    let (status, headers, js) = get(&s.server.at("/ui/assets/ui.js"), None).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert!(js.contains("EventSource"));
    let (status, _, bad) = get(&s.server.at("/ui/gates/nonsense/x"), None).await;
    assert_eq!(status, 400, "{bad}");

    // Turned off: no pages at all.
    let off = setup(backend, |c| c.ui.mode = UiMode::Off).await;
    assert_eq!(get(&off.server.at("/ui"), None).await.0, 404);
    assert_eq!(get(&off.server.at("/"), None).await.0, 404);
}

async fn audit_searches_by_person_repository_gate_and_time(backend: Backend) {
    let s = setup(backend, |_| {}).await;
    s.server.open("/gates/promote/acme/shop/pr/1").await;
    s.server.open("/gates/promote/acme/other/pr/2").await;
    check(&s.server, "/gates/start/acme/shop/pr/3", "rev-a", json!({})).await;
    let find = |q: &str| {
        let url = s.server.at(&format!("/ui/audit?{q}"));
        async move { get(&url, None).await }
    };
    let (status, _, all) = find("").await;
    assert_eq!(status, 200);
    assert!(
        all.contains("acme/other/pr/2") && all.contains("acme/shop/pr/3"),
        "{all}"
    );
    let (_, _, shop) = find("repo=acme/shop").await;
    assert!(
        shop.contains("acme/shop/pr/1") && !shop.contains("acme/other/pr/2"),
        "{shop}"
    );
    let (_, _, person) = find("actor=admin").await;
    assert!(
        person.contains("acme/other/pr/2") && !person.contains("acme/shop/pr/3"),
        "{person}"
    );
    let (_, _, gate) = find("gate=promote/pr/1").await;
    assert!(
        gate.contains("acme/shop/pr/1") && !gate.contains("acme/other"),
        "{gate}"
    );
    let (_, _, future) = find("since=2999-01-01").await;
    assert!(future.contains("Nothing recorded"), "{future}");
    let (status, _, bad) = find("since=yesterday").await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.contains("is not a time"), "{bad}");
}

async fn admin_approves_after_confirming_with_csrf(backend: Backend) {
    let s = setup(backend, |_| {}).await;
    assert_eq!(
        check(&s.server, "/gates/promote/pr/7", "rev-a", json!({})).await,
        403
    );
    let (cookie, csrf) = admin_session(&s.server).await;
    let (_, headers, _) = get(&s.server.at("/ui/signin"), None).await;
    assert!(headers.get("set-cookie").is_none());
    let (_, _, page) = get(&s.server.at("/ui"), Some(&cookie)).await;
    assert!(page.contains("data-action=\"approve\""), "{page}");
    assert!(
        page.contains("Signed in as <strong>admin</strong>"),
        "{page}"
    );

    let gate = "/gates/promote/acme/shop/pr/7";
    let form = |csrf: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("gate", gate),
            ("action", "approve"),
            ("canary", "test/podinfo"),
            ("revision", "rev-a"),
            ("csrf", csrf),
        ]
    };
    // No token, a wrong token: refused with the reason, nothing changes.
    let (status, _, body) = post(&s.server.at("/ui/act"), Some(&cookie), &form("")).await;
    assert_eq!(status, 403);
    assert!(body.contains("no CSRF token"), "{body}");
    let (status, _, body) = post(&s.server.at("/ui/act"), Some(&cookie), &form("0123")).await;
    assert_eq!(status, 403, "{body}");
    // The first press asks for a confirmation.
    let csrf: &'static str = Box::leak(csrf.into_boxed_str());
    let (status, _, confirm) = post(&s.server.at("/ui/act"), Some(&cookie), &form(csrf)).await;
    assert_eq!(status, 200);
    assert!(
        confirm.contains("name=\"confirmed\" value=\"yes\""),
        "{confirm}"
    );
    assert_eq!(
        check(&s.server, gate, "rev-a", json!({})).await,
        403,
        "not yet"
    );
    let mut confirmed = form(csrf);
    confirmed.push(("confirmed", "yes"));
    confirmed.push(("reason", "looks good"));
    let (status, headers, body) = post(&s.server.at("/ui/act"), Some(&cookie), &confirmed).await;
    assert_eq!(status, 303, "{body}");
    assert_eq!(headers["location"], "/ui/gates/promote/acme/shop/pr/7");
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 200);
    assert_eq!(
        check(&s.server, gate, "rev-b", json!({})).await,
        403,
        "pinned to rev-a"
    );
    let audit = s.server.api("/api/v1/audit").await["audit"].clone();
    let open = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "open")
        .expect("an open");
    assert_eq!(
        (
            open["actor"]["source"].as_str(),
            open["actor"]["name"].as_str()
        ),
        (Some("web"), Some("admin")),
        "{open}"
    );

    // Signed out: the cookie is removed.
    let (status, headers, _) = post(
        &s.server.at("/ui/signout"),
        Some(&cookie),
        &[("csrf", csrf)],
    )
    .await;
    assert_eq!(status, 303);
    assert!(cookie_of(&headers, "gatebot_session")
        .unwrap()
        .1
        .contains("Max-Age=0"));
}

async fn oauth_sign_in(s: &Setup, login: &str) -> (String, String) {
    s.github.set_oauth_login(login);
    let (status, headers, _) = get(&s.server.at("/ui/signin/github"), None).await;
    assert_eq!(status, 303);
    let (oauth_cookie, _) = cookie_of(&headers, "gatebot_oauth").unwrap();
    let authorize = headers["location"].to_str().unwrap().to_string();
    assert!(
        authorize.starts_with(&format!(
            "{}/login/oauth/authorize?client_id=client-1",
            s.github.url
        )),
        "{authorize}"
    );
    let (status, headers, _) = get(&authorize, None).await;
    assert_eq!(status, 302);
    let back = headers["location"].to_str().unwrap().to_string();
    let (status, headers, body) = get(&back, Some(&oauth_cookie)).await;
    assert_eq!(status, 303, "{body}");
    let (cookie, raw) = cookie_of(&headers, "gatebot_session").unwrap();
    for attr in [
        "HttpOnly",
        "Secure",
        "SameSite=Lax",
        "Max-Age=43200",
        "Path=/ui",
    ] {
        assert!(raw.contains(attr), "{raw}");
    }
    let (_, _, page) = get(&s.server.at("/ui"), Some(&cookie)).await;
    (cookie, hidden(&page, "csrf"))
}

async fn a_reader_signed_in_with_github_sees_no_button_and_is_refused(backend: Backend) {
    let s = setup(backend, |_| {}).await;
    s.github.set_permission("rita", "read");
    s.github.set_permission("wanda", "write");
    assert_eq!(
        check(&s.server, "/gates/promote/pr/9", "rev-a", json!({})).await,
        403
    );
    let (cookie, csrf) = oauth_sign_in(&s, "rita").await;
    let (_, _, page) = get(&s.server.at("/ui"), Some(&cookie)).await;
    assert!(
        page.contains("Signed in as <strong>rita</strong>"),
        "{page}"
    );
    assert!(
        !page.contains("data-action=\"approve\""),
        "a reader gets no button: {page}"
    );
    let gate = "/gates/promote/acme/shop/pr/9";
    let (status, _, body) = post(
        &s.server.at("/ui/act"),
        Some(&cookie),
        &[
            ("gate", gate),
            ("action", "approve"),
            ("csrf", &csrf),
            ("confirmed", "yes"),
        ],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("needs write permission on acme/shop and you have read"),
        "{body}"
    );
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 403);
    let audit = s.server.api("/api/v1/audit").await["audit"].clone();
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "refuse" && e["actor"]["source"] == "web"),
        "{audit}"
    );

    // A writer gets the button and opens the gate.
    let (cookie, csrf) = oauth_sign_in(&s, "wanda").await;
    let (_, _, page) = get(&s.server.at("/ui"), Some(&cookie)).await;
    assert!(page.contains("data-action=\"approve\""), "{page}");
    let (status, _, body) = post(
        &s.server.at("/ui/act"),
        Some(&cookie),
        &[
            ("gate", gate),
            ("action", "approve"),
            ("csrf", &csrf),
            ("confirmed", "yes"),
        ],
    )
    .await;
    assert_eq!(status, 303, "{body}");
    assert_eq!(check(&s.server, gate, "rev-a", json!({})).await, 200);
}

async fn oauth_state_must_match(backend: Backend) {
    let s = setup(backend, |_| {}).await;
    s.github.set_oauth_login("wanda");
    let (_, headers, _) = get(&s.server.at("/ui/signin/github"), None).await;
    let (oauth_cookie, _) = cookie_of(&headers, "gatebot_oauth").unwrap();
    let forged = s
        .server
        .at("/ui/signin/github/callback?code=code-wanda&state=forged");
    let (status, headers, body) = get(&forged, Some(&oauth_cookie)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("state does not match"), "{body}");
    assert!(cookie_of(&headers, "gatebot_session").is_none());
    let (status, _, body) = get(&forged, None).await;
    assert_eq!(status, 403);
    assert!(body.contains("no state to check"), "{body}");
}

async fn forwarded_user_only_from_trusted_proxies(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[users]\nwanda = \"U111\"\n").unwrap();
    let untrusted = setup(backend, |c| {
        c.policy = Some(policy.clone());
        c.ui.trusted_proxies = vec!["10.0.0.0/8".into()];
    })
    .await;
    let page = |s: &TestServer, user: &str| {
        let req = browser()
            .get(s.at("/ui"))
            .header("x-forwarded-user", user.to_string());
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    assert!(
        !page(&untrusted.server, "wanda")
            .await
            .contains("Signed in as"),
        "not from a trusted proxy"
    );
    let trusted = setup(backend, |c| {
        c.policy = Some(policy.clone());
        c.ui.trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    assert!(page(&trusted.server, "wanda")
        .await
        .contains("Signed in as <strong>wanda</strong> (proxy)"));
    assert!(
        !page(&trusted.server, "mallory")
            .await
            .contains("Signed in as"),
        "not in [users]"
    );
}

async fn changes_stream_to_open_pages(backend: Backend) {
    let s = setup(backend, |_| {}).await;
    let mut events = browser()
        .get(s.server.at("/ui/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: ready") {
        let chunk = tokio::time::timeout_at(deadline, events.chunk())
            .await
            .expect("ready in time");
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
    }
    assert_eq!(
        check(&s.server, "/gates/promote/pr/5", "rev-a", json!({})).await,
        403
    );
    while !seen.contains("\"action\":\"wait\"") {
        let chunk = tokio::time::timeout_at(deadline, events.chunk())
            .await
            .expect("the wait in time");
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
    }
    assert!(
        seen.contains("event: change") && seen.contains("/gates/promote/acme/shop/pr/5"),
        "{seen}"
    );
    s.server.open("/gates/promote/pr/5").await;
    while !seen.contains("\"action\":\"open\"") {
        let chunk = tokio::time::timeout_at(deadline, events.chunk())
            .await
            .expect("the open in time");
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
    }
}
