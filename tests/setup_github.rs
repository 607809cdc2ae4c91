//! `/ui/setup/github`: the GitHub App from GitHub's manifest flow, against the
//! fake GitHub: the form to GitHub with the manifest, GitHub's way back with a
//! code, the operator's confirmation, and the code traded for the App's id,
//! key and webhook secret, shown once (or written into the Secret). A `state`
//! works once, for the sign-in that made it; nothing else replaces the
//! credentials.

use std::time::Duration;

use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_kube::FakeKube;
use gatebot_testkit::harness::{
    options_with, Backend, RecordingSink, TestDb, TestServer, ADMIN_TOKEN,
};
use reqwest::header::HeaderMap;
use reqwest::redirect::Policy;

/// Where GitHub and people reach gatebot; an ingress would route it to the server.
const PUBLIC: &str = "https://gatebot.acme.test";

struct Setup {
    server: TestServer,
    github: FakeGithub,
    _db: TestDb,
}

async fn setup(public_url: Option<&str>) -> Setup {
    setup_with(public_url, |_, _| {}).await
}

async fn setup_with(
    public_url: Option<&str>,
    tweak: impl FnOnce(&mut gatebot::Config, &TestDb),
) -> Setup {
    let db = TestDb::new(Backend::Sqlite).await;
    let github = FakeGithub::start().await;
    let mut config = db.config();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.github.api_url = github.url.clone();
    config.public_url = public_url.map(str::to_string);
    tweak(&mut config, &db);
    let sink = RecordingSink::new();
    let server = TestServer::start(config, options_with(&sink, None)).await;
    Setup {
        server,
        github,
        _db: db,
    }
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// An HTML attribute or text back to what it says.
fn unescape(html: &str) -> String {
    html.replace("&#x2f;", "/")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

async fn send(req: reqwest::RequestBuilder, cookie: Option<&str>) -> (u16, HeaderMap, String) {
    let req = match cookie {
        Some(c) => req.header("cookie", c),
        None => req,
    };
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.text().await.unwrap())
}

/// The value of attribute `attr` of the element that has `marker` before it.
fn attribute(html: &str, marker: &str, attr: &str) -> String {
    let from = html
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in {html}"));
    let rest = &html[from..];
    let at = rest
        .find(&format!("{attr}=\""))
        .unwrap_or_else(|| panic!("no {attr} after {marker} in {rest}"))
        + attr.len()
        + 2;
    unescape(&rest[at..at + rest[at..].find('"').unwrap()])
}

async fn admin_session(server: &TestServer) -> String {
    let (_, _, page) = send(browser().get(server.at("/ui/signin")), None).await;
    let csrf = attribute(&page, "name=\"csrf\"", "value");
    let (status, headers, _) = send(
        browser()
            .post(server.at("/ui/signin/token"))
            .form(&[("token", ADMIN_TOKEN), ("csrf", &csrf)]),
        None,
    )
    .await;
    assert_eq!(status, 303);
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("gatebot_session="))
        .map(|v| v.split(';').next().unwrap().to_string())
        .expect("a session cookie")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_creates_the_github_app_from_the_manifest() {
    let s = setup(Some(PUBLIC)).await;
    let (status, _, page) = send(browser().get(s.server.at("/ui/setup/github")), None).await;
    assert_eq!(status, 403, "{page}");
    assert!(
        unescape(&page).contains("sign in with the admin token"),
        "{page}"
    );
    let cookie = admin_session(&s.server).await;

    // The page: a form to the organization's "new App" page on GitHub's host.
    let (status, headers, page) = send(
        browser().get(s.server.at("/ui/setup/github?org=acme&name=gatebot-acme")),
        Some(&cookie),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let csp = headers["content-security-policy"].to_str().unwrap();
    let github_origin = s.github.url.trim_end_matches('/');
    assert!(
        csp.contains(&format!("form-action 'self' {github_origin};")),
        "{csp}"
    );
    assert!(
        csp.contains("script-src 'self';") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let (_, other, _) = send(browser().get(s.server.at("/ui")), Some(&cookie)).await;
    assert!(
        other["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("form-action 'self';"),
        "other pages keep forms at home"
    );
    let action = attribute(&page, "id=\"manifest-form\"", "action");
    assert!(
        action.starts_with(&format!(
            "{github_origin}/organizations/acme/settings/apps/new?state="
        )),
        "{action}"
    );
    let manifest = attribute(&page, "name=\"manifest\"", "value");
    // The page lists what the manifest it sends asks for.
    let sent: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    for (name, access) in sent["default_permissions"].as_object().unwrap() {
        let shown = format!("<code>{name}: {}</code>", access.as_str().unwrap());
        assert!(page.contains(&shown), "{shown} not on the page");
    }
    for event in sent["default_events"].as_array().unwrap() {
        let shown = format!("<code>{}</code>", event.as_str().unwrap());
        assert!(page.contains(&shown), "{shown} not on the page");
    }

    // GitHub takes the form and sends the browser back with a code.
    let (status, headers, body) = send(
        browser()
            .post(&action)
            .form(&[("manifest", manifest.as_str())]),
        None,
    )
    .await;
    assert_eq!(status, 302, "{body}");
    let back = headers["location"].to_str().unwrap().to_string();
    let created = s.github.app_manifests();
    assert_eq!(created.len(), 1);
    let (org, m) = &created[0];
    assert_eq!(org.as_deref(), Some("acme"));
    assert_eq!(m["name"], "gatebot-acme");
    assert_eq!(
        m["hook_attributes"]["url"],
        format!("{PUBLIC}/webhooks/github")
    );
    assert_eq!(
        m["redirect_url"],
        format!("{PUBLIC}/ui/setup/github/callback")
    );
    let shipped: serde_json::Value =
        serde_json::from_str(include_str!("../deploy/github-app-manifest.json")).unwrap();
    assert_eq!(m["default_permissions"], shipped["default_permissions"]);
    assert_eq!(m["default_events"], shipped["default_events"]);
    assert!(
        back.starts_with(&format!("{PUBLIC}/ui/setup/github/callback?code=")),
        "{back}"
    );

    // The ingress routes the public URL to gatebot; the way back only asks.
    let back = back.replace(PUBLIC, s.server.at("").trim_end_matches('/'));
    let (status, _, asked) = send(browser().get(&back), Some(&cookie)).await;
    assert_eq!(status, 200, "{asked}");
    assert!(
        unescape(&asked).contains("fetches its credentials from GitHub and shows them once"),
        "{asked}"
    );
    assert!(!unescape(&asked).contains("webhook-secret-"), "{asked}");
    assert!(
        s.github.app_conversions().is_empty(),
        "the code is not traded before the operator confirms"
    );

    // Confirmed: the code becomes the App's credentials.
    let form = confirmation(&asked);
    let (status, headers, page) = confirm(&s, &cookie, &form).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(headers["cache-control"], "no-store");
    let id = page
        .split("id=\"app-id\">")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap();
    assert!(id.parse::<u64>().is_ok(), "the App's id: {id}");
    for shown in [
        "webhook-secret-",
        "key-of-app-",
        "-----BEGIN RSA PRIVATE KEY-----",
        "Iv1.",
        "client-secret-",
    ] {
        assert!(unescape(&page).contains(shown), "{shown} not shown: {page}");
    }
    assert!(
        unescape(&page).contains("https://github.com/apps/gatebot-acme/installations/new"),
        "{page}"
    );

    // Shown once: the state does not work twice, and the page says to start again.
    for (status, page) in [
        send(browser().get(&back), Some(&cookie)).await,
        confirm(&s, &cookie, &form).await,
    ]
    .map(|(status, _, page)| (status, unescape(&page)))
    {
        assert_eq!(status, 409, "{page}");
        assert!(page.contains("its state works once"), "{page}");
        assert!(!page.contains("webhook-secret-"), "{page}");
    }
    assert_eq!(s.github.app_conversions().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_way_back_needs_the_state_the_operator_and_a_public_url() {
    let s = setup(Some(PUBLIC)).await;
    let cookie = admin_session(&s.server).await;
    let (_, _, page) = send(
        browser().get(s.server.at("/ui/setup/github")),
        Some(&cookie),
    )
    .await;
    let action = attribute(&page, "id=\"manifest-form\"", "action");
    assert!(
        action.contains("/settings/apps/new?state="),
        "a user's App: {action}"
    );
    let manifest = attribute(&page, "name=\"manifest\"", "value");
    let (_, headers, _) = send(
        browser()
            .post(&action)
            .form(&[("manifest", manifest.as_str())]),
        None,
    )
    .await;
    let back = headers["location"]
        .to_str()
        .unwrap()
        .replace(PUBLIC, s.server.at("").trim_end_matches('/'));

    // A forged state, and nobody signed in: refused, and the code is not spent.
    let forged = format!("{}x", &back);
    let (status, _, page) = send(browser().get(&forged), Some(&cookie)).await;
    assert_eq!(status, 403, "{page}");
    assert!(unescape(&page).contains("no valid state"), "{page}");
    let (status, _, page) = send(browser().get(&back), None).await;
    assert_eq!(status, 403, "{page}");
    let (status, _, page) = send(browser().get(&back), Some(&cookie)).await;
    assert_eq!(status, 200, "the state still works: {page}");
    let form = confirmation(&page);
    let (status, _, page) = confirm(&s, "", &form).await;
    assert_eq!(status, 403, "nobody signed in: {page}");
    let (status, _, page) = confirm(&s, &cookie, &form).await;
    assert_eq!(status, 200, "the code still works: {page}");

    // Without GATEBOT_PUBLIC_URL there is no webhook URL to give GitHub.
    let bare = setup(None).await;
    let cookie = admin_session(&bare.server).await;
    let (status, _, page) = send(
        browser().get(bare.server.at("/ui/setup/github")),
        Some(&cookie),
    )
    .await;
    assert_eq!(status, 400, "{page}");
    assert!(unescape(&page).contains("set GATEBOT_PUBLIC_URL"), "{page}");
}

/// Whatever answers at GitHub's address, the conversion's answer is read up to a bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_answer_from_github_is_refused() {
    let s = setup(Some(PUBLIC)).await;
    s.github.pad_conversions(4 * 1024 * 1024);
    let cookie = admin_session(&s.server).await;
    let (_, _, page) = send(
        browser().get(s.server.at("/ui/setup/github")),
        Some(&cookie),
    )
    .await;
    let action = attribute(&page, "id=\"manifest-form\"", "action");
    let manifest = attribute(&page, "name=\"manifest\"", "value");
    let (_, headers, _) = send(
        browser()
            .post(&action)
            .form(&[("manifest", manifest.as_str())]),
        None,
    )
    .await;
    let back = headers["location"]
        .to_str()
        .unwrap()
        .replace(PUBLIC, s.server.at("").trim_end_matches('/'));
    let (_, _, asked) = send(browser().get(&back), Some(&cookie)).await;
    let (status, _, page) = confirm(&s, &cookie, &confirmation(&asked)).await;
    assert_eq!(status, 502, "{page}");
    assert!(unescape(&page).contains("too large to be an App"), "{page}");
}

/// The confirmation form's fields (csrf, code, state), from the page GitHub's
/// way back shows.
fn confirmation(page: &str) -> Vec<(String, String)> {
    ["csrf", "code", "state"]
        .iter()
        .map(|name| {
            let value = attribute(page, &format!("name=\"{name}\""), "value");
            (name.to_string(), value)
        })
        .collect()
}

/// The operator's confirmation, from gatebot's own page as a browser sends it.
async fn confirm(s: &Setup, cookie: &str, form: &[(String, String)]) -> (u16, HeaderMap, String) {
    let cookie = Some(cookie).filter(|c| !c.is_empty());
    send(
        browser()
            .post(s.server.at("/ui/setup/github/confirm"))
            .header("sec-fetch-site", "same-origin")
            .header("origin", PUBLIC)
            .form(form),
        cookie,
    )
    .await
}

/// GitHub's form, to GitHub's way back: the way back's URL, at the server.
async fn to_github(s: &Setup, cookie: &str) -> String {
    let (_, _, page) = send(browser().get(s.server.at("/ui/setup/github")), Some(cookie)).await;
    let action = attribute(&page, "id=\"manifest-form\"", "action");
    back_from_github(s, &action, &attribute(&page, "name=\"manifest\"", "value")).await
}

/// GitHub takes the manifest (to `action`, with its `state`) and sends the
/// browser back with a new code.
async fn back_from_github(s: &Setup, action: &str, manifest: &str) -> String {
    let (_, headers, _) = send(browser().post(action).form(&[("manifest", manifest)]), None).await;
    headers["location"]
        .to_str()
        .unwrap()
        .replace(PUBLIC, s.server.at("").trim_end_matches('/'))
}

/// GitHub's form, its way back and the confirmation, to the done page: (status, page).
async fn create_app(s: &Setup, cookie: &str) -> (u16, String) {
    let back = to_github(s, cookie).await;
    let (status, _, asked) = send(browser().get(&back), Some(cookie)).await;
    assert_eq!(status, 200, "{asked}");
    let (status, _, page) = confirm(s, cookie, &confirmation(&asked)).await;
    (status, unescape(&page))
}

const APP_SECRET: &str = "/api/v1/namespaces/gatebot/secrets/gatebot-github-app";

/// With `[kubernetes] app_secret`, the App's credentials go into that
/// Secret (a merge patch of its `data`) and the page does not show them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credentials_go_into_the_secret_when_gatebot_may_write_it() {
    let kube = FakeKube::start().await;
    // The chart's empty Secret.
    kube.put(
        APP_SECRET,
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "gatebot-github-app", "namespace": "gatebot",
                "uid": "0b7c1e2d-4f3a-4e5b-9c6d-7e8f9a0b1c2d", "resourceVersion": "9120",
                "creationTimestamp": "2026-12-03T09:00:00Z"}}),
    );
    let s = setup_with(Some(PUBLIC), |config, db| {
        config.kubernetes.kubeconfig = Some(kube.kubeconfig(db.dir.path(), "gatebot"));
        config.kubernetes.app_secret = Some("gatebot-github-app".into());
    })
    .await;
    let cookie = admin_session(&s.server).await;
    let (status, page) = create_app(&s, &cookie).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Written into the Secret <code>gatebot/gatebot-github-app</code>"),
        "{page}"
    );
    for hidden in ["webhook-secret-", "key-of-app-", "client-secret-"] {
        assert!(!page.contains(hidden), "{hidden} shown: {page}");
    }
    let patches: Vec<_> = kube
        .seen_at("/secrets/gatebot-github-app")
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect();
    assert_eq!(patches.len(), 1, "{patches:?}");
    let secret = kube.object(APP_SECRET).unwrap();
    let value = |key: &str| {
        use base64::Engine as _;
        let b64 = secret["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("no {key}: {secret}"));
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    };
    let id = value("github-app-id");
    assert!(id.parse::<u64>().is_ok(), "{id}");
    assert!(page.contains(&format!("id=\"app-id\">{id}<")), "{page}");
    assert_eq!(
        value("github-webhook-secret"),
        format!("webhook-secret-{id}")
    );
    assert!(value("github-app-private-key").contains(&format!("key-of-app-{id}")));
    assert_eq!(value("ui-github-client-id"), format!("Iv1.{id}"));
    assert_eq!(
        value("ui-github-client-secret"),
        format!("client-secret-{id}")
    );
}

/// Without the rights (no such Secret, or the cluster away), the page says
/// why and shows the credentials once, as without a Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_secret_the_page_shows_them_once() {
    let kube = FakeKube::start().await;
    let s = setup_with(Some(PUBLIC), |config, db| {
        config.kubernetes.kubeconfig = Some(kube.kubeconfig(db.dir.path(), "gatebot"));
        config.kubernetes.app_secret = Some("gatebot-github-app".into());
    })
    .await;
    let cookie = admin_session(&s.server).await;
    let (status, page) = create_app(&s, &cookie).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(
            "Not written into the Secret: Secret gatebot/gatebot-github-app is not in the cluster"
        ),
        "{page}"
    );
    for shown in ["webhook-secret-", "key-of-app-", "client-secret-"] {
        assert!(page.contains(shown), "{shown} not shown: {page}");
    }
}

/// A server whose set-up page writes into the chart's (empty) Secret.
async fn with_secret() -> (Setup, FakeKube) {
    let kube = FakeKube::start().await;
    kube.put(
        APP_SECRET,
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "gatebot-github-app", "namespace": "gatebot",
                "uid": "0b7c1e2d-4f3a-4e5b-9c6d-7e8f9a0b1c2d", "resourceVersion": "9120",
                "creationTimestamp": "2026-12-03T09:00:00Z"}}),
    );
    let s = setup_with(Some(PUBLIC), |config, db| {
        config.kubernetes.kubeconfig = Some(kube.kubeconfig(db.dir.path(), "gatebot"));
        config.kubernetes.app_secret = Some("gatebot-github-app".into());
    })
    .await;
    (s, kube)
}

/// The writes to the Secret so far.
fn patches(kube: &FakeKube) -> usize {
    kube.seen_at("/secrets/gatebot-github-app")
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .count()
}

/// A form's fields with `name` set to `value`.
fn with(form: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    form.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k == name {
                    value.to_string()
                } else {
                    v.clone()
                },
            )
        })
        .collect()
}

/// GitHub's way back only asks; the confirmation writes; the same `state`
/// again, with another code GitHub gave for it, changes nothing and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_replaces_the_credentials_once_and_only_when_confirmed() {
    let (s, kube) = with_secret().await;
    let cookie = admin_session(&s.server).await;
    let (_, _, page) = send(
        browser().get(s.server.at("/ui/setup/github")),
        Some(&cookie),
    )
    .await;
    let action = attribute(&page, "id=\"manifest-form\"", "action");
    let manifest = attribute(&page, "name=\"manifest\"", "value");
    let back = back_from_github(&s, &action, &manifest).await;

    let (status, _, asked) = send(browser().get(&back), Some(&cookie)).await;
    assert_eq!(status, 200, "{asked}");
    assert!(
        unescape(&asked).contains("replacing the GitHub App credentials there"),
        "{asked}"
    );
    assert_eq!(patches(&kube), 0, "the way back alone writes nothing");
    assert!(s.github.app_conversions().is_empty());

    let form = confirmation(&asked);
    let (status, _, page) = confirm(&s, &cookie, &form).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        unescape(&page).contains("Written into the Secret"),
        "{page}"
    );
    assert_eq!(patches(&kube), 1);
    let written = kube.object(APP_SECRET).unwrap()["data"].clone();

    // GitHub gives another code for the same state (the form sent again, or
    // an attacker's App): the state is spent, whatever the code.
    let again = back_from_github(&s, &action, &manifest).await;
    let (status, _, page) = send(browser().get(&again), Some(&cookie)).await;
    assert_eq!(status, 409, "{page}");
    assert!(unescape(&page).contains("its state works once"), "{page}");
    let code = again
        .split("code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let (status, _, page) = confirm(&s, &cookie, &with(&form, "code", code)).await;
    assert_eq!(status, 409, "{page}");
    assert!(unescape(&page).contains("its state works once"), "{page}");
    assert_eq!(patches(&kube), 1, "the Secret is not written again");
    assert_eq!(kube.object(APP_SECRET).unwrap()["data"], written);
    assert_eq!(
        s.github.app_conversions().len(),
        1,
        "the second code is not traded"
    );
}

/// A `state` is the sign-in's that started the set-up: another operator's
/// session (or a link to it sent to them) can neither see it asked nor confirm it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_from_another_sign_in_changes_nothing() {
    let (s, kube) = with_secret().await;
    let alice = admin_session(&s.server).await;
    let mallory = admin_session(&s.server).await;
    assert_ne!(alice, mallory);
    // Mallory's own confirmation form, for a CSRF token that is hers.
    let theirs = to_github(&s, &mallory).await;
    let (_, _, page) = send(browser().get(&theirs), Some(&mallory)).await;
    let mallorys = confirmation(&page);

    let back = to_github(&s, &alice).await;
    let (status, _, page) = send(browser().get(&back), Some(&mallory)).await;
    assert_eq!(status, 403, "{page}");
    assert!(
        unescape(&page).contains("started from another sign-in"),
        "{page}"
    );
    let (_, _, asked) = send(browser().get(&back), Some(&alice)).await;
    let alices = confirmation(&asked);
    let foreign = with(
        &with(&mallorys, "state", &alices[2].1),
        "code",
        &alices[1].1,
    );
    let (status, _, page) = confirm(&s, &mallory, &foreign).await;
    assert_eq!(status, 403, "{page}");
    assert!(
        unescape(&page).contains("started from another sign-in"),
        "{page}"
    );
    assert_eq!(patches(&kube), 0);
    assert!(s.github.app_conversions().is_empty());

    // Alice's own confirmation still works: nothing was spent.
    let (status, _, page) = confirm(&s, &alice, &alices).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(patches(&kube), 1);
}

/// The confirmation is refused from another site (as a browser says it:
/// `Sec-Fetch-Site`, `Origin`, `Referer`) or without the session's CSRF
/// token, even with the operator's cookie; nothing is written or spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_confirmation_changes_nothing() {
    let (s, kube) = with_secret().await;
    let cookie = admin_session(&s.server).await;
    let back = to_github(&s, &cookie).await;
    let (_, _, asked) = send(browser().get(&back), Some(&cookie)).await;
    let form = confirmation(&asked);
    let post = || {
        browser()
            .post(s.server.at("/ui/setup/github/confirm"))
            .form(&form)
    };
    for (what, req) in [
        (
            "sec-fetch-site",
            post().header("sec-fetch-site", "cross-site"),
        ),
        ("same-site", post().header("sec-fetch-site", "same-site")),
        ("origin", post().header("origin", "https://evil.example")),
        ("null origin", post().header("origin", "null")),
        (
            "referer",
            post().header("referer", "https://evil.example/page"),
        ),
    ] {
        let (status, _, page) = send(req, Some(&cookie)).await;
        assert_eq!(status, 403, "{what}: {page}");
        assert!(unescape(&page).contains("sent from"), "{what}: {page}");
    }
    let (status, _, page) = confirm(&s, &cookie, &with(&form, "csrf", "0123")).await;
    assert_eq!(status, 403, "{page}");
    assert!(unescape(&page).contains("CSRF"), "{page}");
    assert_eq!(patches(&kube), 0);
    assert!(s.github.app_conversions().is_empty());

    // From gatebot's own page (its public origin, or the host it was reached at).
    let at = s.server.at("");
    let (status, _, page) = send(
        post()
            .header("sec-fetch-site", "same-origin")
            .header("origin", at.trim_end_matches('/')),
        Some(&cookie),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(patches(&kube), 1);
}
