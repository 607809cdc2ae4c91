//! The pages in a real browser: headless Chromium driven through chromedriver
//! (WebDriver, `fantoccini`). Without Chromium and chromedriver every test
//! prints `SKIPPED: chromium not installed` and passes; `.ci/run` installs them.
//!
//! Each test starts its own gatebot (in-process, SQLite), fake GitHub and
//! chromedriver; chromedriver and the browser it starts run in a process group
//! of their own that is killed when the test ends, however it ends.
//! Screenshots go to target/screenshots/.
//! README's pictures (docs/pictures/) are checked against the message
//! snapshots here too; that check needs no browser.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_prometheus::{Answer, FakePrometheus};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::{
    options_with, Backend, RecordingSink, TestDb, TestServer, ADMIN_TOKEN,
};
use gatebot_testkit::served::free_port;
use serde_json::json;

const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// chromedriver and the browser, when both are installed.
fn chromium() -> Option<(PathBuf, PathBuf)> {
    let driver = find_program(&["chromedriver"])?;
    let browser = find_program(&["chromium", "chromium-browser", "google-chrome"])?;
    Some((driver, browser))
}

/// chromedriver in a process group of its own; dropping it kills the group
/// (chromedriver and every browser process it started) and reaps it.
struct Driver {
    child: std::process::Child,
    url: String,
    /// Kills the group if the test outlives [`TEST_LIMIT`].
    watchdog: tokio::task::JoinHandle<()>,
}

/// How long one test may drive its browser. Past it the browser and
/// chromedriver are killed, so a hung WebDriver command fails the test
/// instead of holding CI.
const TEST_LIMIT: Duration = Duration::from_secs(150);
/// How long a new browser session may take; a slower one is retried with a
/// new chromedriver (Chromium's start now and then hangs).
const SESSION_LIMIT: Duration = Duration::from_secs(30);
const SESSION_ATTEMPTS: u32 = 3;

fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.watchdog.abort();
        kill_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver(driver: &Path) -> Driver {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("chromedriver starts");
    let pid = child.id();
    let watchdog = tokio::spawn(async move {
        tokio::time::sleep(TEST_LIMIT).await;
        eprintln!("the browser test ran past {TEST_LIMIT:?}: killing chromedriver and Chromium");
        kill_group(pid);
    });
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
        watchdog,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let http = reqwest::Client::new();
    loop {
        let ready = http
            .get(format!("{}/status", driver.url))
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success());
        if ready.is_some() {
            return driver;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// chromedriver and a session of the browser, retried with a fresh
/// chromedriver when the session does not start within [`SESSION_LIMIT`].
async fn driven_browser(driver: &Path, browser: &Path) -> (Driver, Client) {
    for attempt in 1..=SESSION_ATTEMPTS {
        let started = start_driver(driver).await;
        match tokio::time::timeout(SESSION_LIMIT, open_browser(&started, browser)).await {
            Ok(client) => {
                // chromedriver's own limits, well inside TEST_LIMIT.
                let limits = fantoccini::wd::TimeoutConfiguration::new(
                    Some(Duration::from_secs(10)),
                    Some(Duration::from_secs(20)),
                    None,
                );
                client
                    .update_timeouts(limits)
                    .await
                    .expect("WebDriver timeouts");
                return (started, client);
            }
            Err(_) => eprintln!(
                "no browser session within {SESSION_LIMIT:?} (attempt {attempt} of {SESSION_ATTEMPTS}): trying a new chromedriver"
            ),
        }
    }
    panic!("no browser session in {SESSION_ATTEMPTS} attempts");
}

async fn open_browser(driver: &Driver, browser: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--no-first-run", "--disable-extensions"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a browser session")
}

/// Everything one test runs against; dropped in reverse order.
struct Rig {
    browser: Client,
    _driver: Driver,
    server: TestServer,
    github: FakeGithub,
    _db: TestDb,
}

impl Rig {
    /// None (after saying so) when Chromium is missing.
    async fn start() -> Option<Self> {
        Self::start_with(|_| {}).await
    }

    /// [`Rig::start`], with the configuration edited last.
    async fn start_with(edit: impl FnOnce(&mut gatebot::Config)) -> Option<Self> {
        let Some((driver, browser)) = chromium() else {
            println!("SKIPPED: chromium not installed");
            return None;
        };
        let db = TestDb::new(Backend::Sqlite).await;
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
        let server = TestServer::start(config, options_with(&RecordingSink::new(), None)).await;
        let (driver, browser) = driven_browser(&driver, &browser).await;
        Some(Self {
            browser,
            _driver: driver,
            server,
            github,
            _db: db,
        })
    }

    /// A page of gatebot, by `localhost` (a secure context: Secure cookies work over http).
    fn page(&self, path: &str) -> String {
        format!("http://localhost:{}{path}", self.server.addr.port())
    }

    async fn goto(&self, path: &str) {
        self.browser
            .goto(&self.page(path))
            .await
            .expect("the page loads");
    }

    async fn js(&self, script: &str) -> serde_json::Value {
        self.browser.execute(script, vec![]).await.expect(script)
    }

    /// Polls `script` until it returns true.
    async fn until(&self, what: &str, within: Duration, script: &str) {
        let deadline = Instant::now() + within;
        loop {
            if self.js(script).await == json!(true) {
                return;
            }
            if Instant::now() >= deadline {
                let live = self
                    .js("return document.getElementById('live').innerHTML")
                    .await;
                panic!("{what}: not within {within:?}; the page shows {live}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn live(&self) {
        self.until(
            "the page listens for changes",
            Duration::from_secs(10),
            "return document.body.dataset.live === 'on'",
        )
        .await;
    }

    /// Does `act` on the element `css`, finding it again when a live update
    /// swapped the page's <main> between finding and acting.
    async fn on<T, F, Fut>(&self, css: &str, act: F) -> T
    where
        F: Fn(fantoccini::elements::Element) -> Fut,
        Fut: std::future::Future<Output = Result<T, fantoccini::error::CmdError>>,
    {
        let mut last = None;
        for _ in 0..10 {
            let found = self
                .browser
                .wait()
                .at_most(Duration::from_secs(10))
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("{css}: {e}"));
            match act(found).await {
                Ok(done) => return done,
                Err(e) => last = Some(e),
            }
        }
        panic!("{css}: {last:?}");
    }

    async fn click(&self, css: &str) {
        self.on(css, |e| async move { e.click().await.map(drop) })
            .await
    }

    async fn type_into(&self, css: &str, keys: &str) {
        self.on(css, |e| async move { e.send_keys(keys).await })
            .await
    }

    async fn text(&self, css: &str) -> String {
        self.on(css, |e| async move { e.text().await }).await
    }

    /// The text of `css` once `wanted` holds for it: a click that navigates
    /// returns before the next page is there.
    async fn text_once(&self, css: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.text(css).await;
            if wanted(&text) || Instant::now() >= deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn screenshot(&self, name: &str) {
        let png = self.browser.screenshot().await.expect("a screenshot");
        let dir = screenshots();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
    }

    async fn sign_in_with_github(&self, login: &str) {
        self.github.set_oauth_login(login);
        self.goto("/ui/signin").await;
        self.click("#signin-github").await;
        let me = self.text("#me").await;
        assert!(me.contains(&format!("Signed in as {login}")), "{me}");
    }

    async fn sign_in_with_token(&self) {
        self.goto("/ui/signin").await;
        self.type_into("#token", ADMIN_TOKEN).await;
        self.click("form.stack button[type=submit]").await;
        let me = self.text("#me").await;
        assert!(me.contains("Signed in as admin"), "{me}");
    }

    fn canary(&self, pr: u64, title: Option<&str>) -> FlaggerSim {
        let hooks = pr_hooks(&self.server.url, pr)
            .into_iter()
            .map(|h| match title {
                Some(t) => h.with_metadata("title", t),
                None => h,
            })
            .collect();
        let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
        sim.deploy("rev-a");
        sim
    }

    async fn stop(self) {
        let _ = self.browser.close().await;
    }
}

/// target/screenshots, beside the test binary's profile directory.
fn screenshots() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/browser-… → target
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| "target".into());
    target.join("screenshots")
}

/// A new revision past its first deployment (which asks no gate).
async fn release(sim: &mut FlaggerSim, checksum: &str) {
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Initialized);
    sim.deploy(checksum);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_canary_appears_within_a_second_without_reload() {
    let Some(rig) = Rig::start().await else {
        return;
    };
    rig.goto("/ui").await;
    rig.live().await;
    assert_eq!(rig.text("#waiting-count").await, "0");
    rig.js("window.notReloaded = 42; return true").await;

    let mut sim = rig.canary(42, Some("Faster checkout"));
    // From before Flagger's first call: the wait starts during these ticks.
    let waited = Instant::now();
    release(&mut sim, "rev-b").await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Waiting, "held at the start gate");
    rig.until(
        "the wait shows",
        Duration::from_secs(1),
        "const row = document.querySelector('#waiting tr[data-gate=\"/gates/start/acme/shop/pr/42\"]'); \
         return !!row && row.textContent.includes('test/podinfo') && row.textContent.includes('Faster checkout')",
    )
    .await;
    let took = waited.elapsed();
    assert_eq!(
        rig.js("return window.notReloaded").await,
        json!(42),
        "no full reload"
    );
    assert_eq!(rig.text("#waiting-count").await, "1");
    // The time is the viewer's, with UTC in the tooltip.
    let title = rig
        .js("return document.querySelector('#waiting time').getAttribute('title')")
        .await;
    assert!(title.as_str().unwrap().ends_with(" UTC"), "{title}");
    println!("the wait showed {took:?} after the check");
    rig.screenshot("waiting.png").await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_with_github_approve_confirm_and_the_canary_promotes() {
    let Some(rig) = Rig::start().await else {
        return;
    };
    rig.github.set_permission("wanda", "write");
    rig.server.open("/gates/start/pr/8").await;
    let mut sim = rig.canary(8, Some("Checkout in one step"));
    release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    sim.tick().await;
    assert!(!sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .passed());

    rig.sign_in_with_github("wanda").await;
    let row = "#waiting tr[data-gate=\"/gates/promote/acme/shop/pr/8\"]";
    rig.text(row).await;
    rig.screenshot("waiting-signed-in.png").await;
    rig.click(&format!("{row} button[data-action=approve]"))
        .await;
    let heading = rig.text_once("h1", |h| h.starts_with("Approve")).await;
    assert!(
        heading.starts_with("Approve"),
        "a confirmation first: {heading}"
    );
    assert_eq!(
        gatebot_testkit::harness::status(
            gatebot_testkit::harness::client().post(rig.server.at("/gates/promote/pr/8"))
                .json(&json!({"name": "podinfo", "namespace": "test", "checksum": "rev-b", "phase": "WaitingPromotion"}))
        )
        .await,
        403,
        "nothing changes before the confirmation"
    );
    rig.type_into("#reason", "canary metrics look right").await;
    rig.click("#confirm-button").await;
    let state = rig
        .text_once("#gate-state", |s| s.contains("OPEN") || s.contains("open"))
        .await;
    assert!(state.contains("OPEN") || state.contains("open"), "{state}");
    assert!(state.contains("@wanda via web"), "{state}");
    rig.screenshot("gate.png").await;

    sim.tick().await;
    let (passed, response) = {
        let last = *sim.calls_of(HookType::ConfirmPromotion).last().unwrap();
        (last.passed(), last.response.clone())
    };
    assert!(passed, "the gate answers 200: {response}");
    assert!(
        response.starts_with("approved by wanda via web"),
        "{response}"
    );
    assert!(
        sim.run_until(|s| s.phase() == Phase::Succeeded, 5).await,
        "promoted"
    );
    assert_eq!(sim.promoted_checksum(), "rev-b");
    rig.stop().await;
}

/// A gate approved for an earlier revision is closed for the one that waits
/// now (issue 42, point 3: the page showed OPEN beside a canary that got 403,
/// and offered no Approve). The page shows what Flagger gets, Approve is
/// there for the admin, and after it the gate answers Flagger 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_open_for_an_earlier_revision_shows_closed_and_offers_approve() {
    let Some(rig) = Rig::start().await else {
        return;
    };
    let check = |revision: &'static str| {
        let url = rig.server.at("/gates/promote/pr/10");
        async move {
            gatebot_testkit::harness::status(gatebot_testkit::harness::client().post(url).json(
                &json!({"name": "podinfo", "namespace": "test", "checksum": revision, "phase": "WaitingPromotion"}),
            ))
            .await
        }
    };
    assert_eq!(check("r1").await, 403);
    rig.server.open("/gates/promote/pr/10").await;
    assert_eq!(check("r1").await, 200, "pinned to r1");
    assert_eq!(check("r2").await, 403, "r2 waits");

    rig.sign_in_with_token().await;
    rig.goto("/ui").await;
    let row = "#waiting tr[data-gate=\"/gates/promote/acme/shop/pr/10\"]";
    let shown = rig.text(row).await;
    assert!(shown.contains("r2"), "{shown}");
    assert!(!shown.to_lowercase().contains("open by"), "{shown}");
    assert!(
        shown.contains("was for revision r1"),
        "the reason Flagger gets: {shown}"
    );
    assert_eq!(
        rig.js(&format!(
            "return document.querySelector('{} .state').textContent",
            row.replace('\'', "\\'")
        ))
        .await,
        json!("closed")
    );
    rig.goto("/ui/gates/promote/acme/shop/pr/10").await;
    let state = rig.text("#gate-state").await.to_lowercase();
    assert!(state.starts_with("closed"), "{state}");
    assert!(
        state.contains("was for revision r1, this is revision r2"),
        "{state}"
    );
    rig.click("button[data-action=approve]").await;
    let heading = rig.text_once("h1", |h| h.starts_with("Approve")).await;
    assert!(heading.starts_with("Approve"), "{heading}");
    rig.click("#confirm-button").await;
    let state = rig
        .text_once("#gate-state", |s| s.to_lowercase().starts_with("open"))
        .await
        .to_lowercase();
    assert!(state.starts_with("open"), "{state}");
    assert_eq!(check("r2").await, 200, "Flagger's check after the click");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_sees_no_approve_button_and_a_forged_post_is_refused() {
    let Some(rig) = Rig::start().await else {
        return;
    };
    rig.github.set_permission("rita", "read");
    rig.server.open("/gates/start/pr/9").await;
    let mut sim = rig.canary(9, None);
    release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );

    rig.sign_in_with_github("rita").await;
    rig.goto("/ui").await;
    rig.text("#waiting tr[data-gate=\"/gates/promote/acme/shop/pr/9\"]")
        .await;
    assert_eq!(
        rig.js("return document.querySelectorAll('button[data-action=approve]').length")
            .await,
        json!(0),
        "a reader gets no Approve button"
    );
    // The reader's own CSRF token, in a form the page never offered.
    rig.js(
        "const f = document.createElement('form'); f.method = 'post'; f.action = '/ui/act'; \
         const csrf = document.querySelector('input[name=csrf]').value; \
         for (const [k, v] of Object.entries({gate: '/gates/promote/acme/shop/pr/9', action: 'approve', csrf, confirmed: 'yes'})) { \
           const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); } \
         document.body.appendChild(f); f.submit(); return true",
    )
    .await;
    let why = rig.text("#problem").await;
    assert!(why.starts_with("refused:"), "{why}");
    assert!(
        why.contains("needs write permission on acme/shop and you have read"),
        "{why}"
    );
    sim.tick().await;
    assert!(
        !sim.calls_of(HookType::ConfirmPromotion)
            .last()
            .unwrap()
            .passed(),
        "still closed"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_without_a_csrf_token_is_refused() {
    let Some(rig) = Rig::start().await else {
        return;
    };
    rig.server.open("/gates/start/pr/10").await;
    let mut sim = rig.canary(10, None);
    release(&mut sim, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );

    rig.sign_in_with_token().await;
    let hold = "#waiting tr[data-gate=\"/gates/promote/acme/shop/pr/10\"] button[data-action=hold]";
    rig.text(hold).await;
    rig.js(&format!(
        "document.querySelector('{}').form.querySelector('input[name=csrf]').remove(); return true",
        hold.replace('\'', "\\'")
    ))
    .await;
    rig.click(hold).await;
    let why = rig.text("#problem").await;
    assert!(why.contains("no CSRF token"), "{why}");
    let gate = rig
        .server
        .api("/api/v1/gates/promote/acme/shop/pr/10")
        .await;
    assert_eq!(gate["state"], "closed", "{gate}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_title_with_a_script_tag_is_shown_as_text() {
    let Some(rig) = Rig::start().await else {
        return;
    };
    const TITLE: &str =
        "<script>window.pwned = 1</script><b>bold</b> & <img src=x onerror=\"window.pwned=2\">";
    rig.goto("/ui").await;
    rig.live().await;
    let mut sim = rig.canary(11, Some(TITLE));
    release(&mut sim, "rev-b").await;
    sim.tick().await;
    let title = "#waiting tr[data-gate=\"/gates/start/acme/shop/pr/11\"] .title";
    assert_eq!(rig.text(title).await, TITLE);
    rig.goto("/ui/gates/start/acme/shop/pr/11").await;
    assert_eq!(rig.text("#title").await, TITLE);
    assert_eq!(
        rig.js("return typeof window.pwned").await,
        json!("undefined")
    );
    assert_eq!(
        rig.js("return document.querySelectorAll('#live b, #live img').length")
            .await,
        json!(0)
    );
    rig.stop().await;
}

/// Issue 29: the gate's page draws the waiting canary's success rate and p99
/// against its primary's, as inline SVG under the page's strict CSP, with
/// the weight step marked. The picture goes to target/screenshots/, and with
/// GATEBOT_UPDATE_PICTURES=1 to docs/pictures/evidence-chart.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_page_draws_the_canary_against_its_primary() {
    let prometheus = FakePrometheus::start().await;
    let rate = "istio_requests_total";
    let latency = "istio_request_duration_milliseconds_bucket";
    let (canary, primary) = ("=~\"podinfo\"", "=~\"podinfo-primary\"");
    prometheus.answer(&[rate, canary], Answer::Value("98.4".into()));
    prometheus.answer(&[rate, primary], Answer::Value("99.7".into()));
    prometheus.answer(&[latency, canary], Answer::Value("140".into()));
    prometheus.answer(&[latency, primary], Answer::Value("110".into()));
    let url = prometheus.url.clone();
    let Some(rig) = Rig::start_with(|config| {
        config.prometheus.url = Some(url);
        config.limits.evidence_refresh = Duration::from_millis(100);
    })
    .await
    else {
        return;
    };
    let mut sim = rig.canary(42, Some("Faster checkout"));
    release(&mut sim, "rev-b").await;
    rig.server.open("/gates/start/pr/42").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    rig.browser.set_window_size(900, 1400).await.unwrap();
    let page = "/ui/gates/promote/acme/shop/pr/42";
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        rig.goto(page).await;
        let drawn = rig
            .js("return document.querySelectorAll('#charts svg polyline').length")
            .await;
        if drawn == json!(4) {
            break;
        }
        assert!(Instant::now() < deadline, "no charts on {page}: {drawn}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let width = rig
        .js("return document.querySelector('#charts svg').getBoundingClientRect().width")
        .await;
    assert!(
        width.as_f64().unwrap_or(0.0) > 300.0,
        "the chart is laid out: {width}"
    );
    rig.js("document.getElementById('charts').scrollIntoView(); return true")
        .await;
    let charts = rig.browser.find(Locator::Css("#charts")).await.unwrap();
    let png = charts.screenshot().await.unwrap();
    let dir = screenshots();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("evidence-chart.png"), &png).unwrap();
    if std::env::var_os("GATEBOT_UPDATE_PICTURES").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pictures");
        std::fs::write(docs.join("evidence-chart.png"), &png).unwrap();
    }
    rig.stop().await;
}

// ----------------------------------------------------------------- README's pictures

/// What a snapshot file pins: its body, after the front matter.
fn snapshot_body(file: &str) -> &str {
    file.splitn(3, "---\n")
        .nth(2)
        .expect("a snapshot has front matter")
}

/// The status comment as GitHub shows it: its Markdown (GitHub's dialect:
/// tables, raw HTML such as `<details>`) in HTML, for the parts gatebot writes.
fn status_comment_page(markdown: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let text = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut body = String::new();
    let mut head = false;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        let cell = if head { "th" } else { "td" };
        body.push_str(&match event {
            Event::Start(Tag::Heading { level, .. }) => format!("<{level}>"),
            Event::End(TagEnd::Heading(level)) => format!("</{level}>"),
            Event::Start(Tag::Paragraph) => "<p>".into(),
            Event::End(TagEnd::Paragraph) => "</p>".into(),
            Event::Start(Tag::Table(_)) => "<table>".into(),
            Event::End(TagEnd::Table) => "</tbody></table>".into(),
            Event::Start(Tag::TableHead) => {
                head = true;
                "<thead><tr>".into()
            }
            Event::End(TagEnd::TableHead) => {
                head = false;
                "</tr></thead><tbody>".into()
            }
            Event::Start(Tag::TableRow) => "<tr>".into(),
            Event::End(TagEnd::TableRow) => "</tr>".into(),
            Event::Start(Tag::TableCell) => format!("<{cell}>"),
            Event::End(TagEnd::TableCell) => format!("</{cell}>"),
            Event::Start(Tag::List(_)) => "<ul>".into(),
            Event::End(TagEnd::List(_)) => "</ul>".into(),
            Event::Start(Tag::Item) => "<li>".into(),
            Event::End(TagEnd::Item) => "</li>".into(),
            Event::Start(Tag::Strong) => "<b>".into(),
            Event::End(TagEnd::Strong) => "</b>".into(),
            Event::Start(Tag::Emphasis) => "<i>".into(),
            Event::End(TagEnd::Emphasis) => "</i>".into(),
            Event::Start(Tag::Link { dest_url, .. }) => format!("<a href=\"{}\">", text(&dest_url)),
            Event::End(TagEnd::Link) => "</a>".into(),
            Event::Code(c) => format!("<code>{}</code>", text(&c)),
            Event::Text(s) => text(&s),
            Event::Html(h) | Event::InlineHtml(h) => h.to_string(),
            Event::Start(Tag::HtmlBlock) | Event::End(TagEnd::HtmlBlock) => String::new(),
            Event::SoftBreak => "\n".into(),
            Event::HardBreak => "<br>".into(),
            other => panic!("Markdown the picture does not draw: {other:?}"),
        });
    }
    picture_page(
        "pr",
        &format!("<div class=\"who\"><b>gatebot</b> <span>bot</span> commented</div><div class=\"md\">{body}</div>"),
    )
}

/// Slack's mrkdwn in HTML, as far as gatebot uses it: `<url|text>` links,
/// `<@U…>` mentions, `<!date^…|fallback>`, *bold*, `code` and a few emoji.
/// Everything else gatebot already escaped as entities, so it stays text.
fn mrkdwn(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('>').map_or(rest.len(), |e| at + e);
        let inner = &rest[at + 1..end];
        let (target, label) = inner.split_once('|').unwrap_or((inner, inner));
        match target.chars().next() {
            Some('@') => out.push_str(&format!("<span class=\"at\">@{}</span>", &target[1..])),
            Some('!') => out.push_str(label),
            _ => out.push_str(&format!("<a href=\"{target}\">{label}</a>")),
        }
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    let mut styled = String::new();
    for (i, part) in out.split('`').enumerate() {
        if i % 2 == 1 {
            styled.push_str(&format!("<code>{part}</code>"));
        } else {
            for (j, p) in part.split('*').enumerate() {
                styled.push_str(&if j % 2 == 1 {
                    format!("<b>{p}</b>")
                } else {
                    p.to_string()
                });
            }
        }
    }
    [
        (":rocket:", "🚀"),
        (":hourglass_flowing_sand:", "⏳"),
        (":white_check_mark:", "✅"),
        (":x:", "❌"),
        (":rewind:", "⏪"),
        (":traffic_light:", "🚦"),
        ("\n", "<br>"),
    ]
    .iter()
    .fold(styled, |s, (from, to)| s.replace(from, to))
}

/// The Slack message from its Block Kit, as close as a page can show it.
fn slack_message_page(message: &serde_json::Value) -> String {
    let mut body = String::from("<div class=\"who\"><b>gatebot</b> <span>APP</span></div>");
    for block in message["blocks"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("section") => body.push_str(&format!(
                "<p>{}</p>",
                mrkdwn(block["text"]["text"].as_str().unwrap_or(""))
            )),
            Some("context") => {
                body.push_str("<p class=\"context\">");
                for e in block["elements"].as_array().into_iter().flatten() {
                    body.push_str(&mrkdwn(e["text"].as_str().unwrap_or("")));
                }
                body.push_str("</p>");
            }
            Some("actions") => {
                body.push_str("<p>");
                for e in block["elements"].as_array().into_iter().flatten() {
                    body.push_str(&format!(
                        "<button class=\"{}\">{}</button> ",
                        e["style"].as_str().unwrap_or(""),
                        e["text"]["text"].as_str().unwrap_or("")
                    ));
                }
                body.push_str("</p>");
            }
            Some("divider") => body.push_str("<hr>"),
            other => panic!("a block the picture does not draw: {other:?}"),
        }
    }
    picture_page("slack", &body)
}

fn picture_page(kind: &str, body: &str) -> String {
    const CSS: &str = "body{margin:0;padding:16px;background:#fff;font:14px/1.5 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#1f2328}\
        #card{max-width:760px;border:1px solid #d1d9e0;border-radius:6px}\
        .who{background:#f6f8fa;border-bottom:1px solid #d1d9e0;padding:8px 16px}.who span{border:1px solid #d1d9e0;border-radius:2em;padding:0 6px;font-size:12px;color:#59636e}\
        .md,.slack #card>p{padding:0 16px}table{border-collapse:collapse}td,th{border:1px solid #d1d9e0;padding:4px 10px}\
        code{background:#eff1f3;border-radius:4px;padding:1px 4px;font-size:85%}a{color:#0969da}\
        .slack .who{background:#fff;border:0}.slack .context{color:#616061;font-size:13px}.at{color:#1264a3;background:#e8f5fa}\
        button{border:1px solid #ccc;border-radius:4px;background:#fff;padding:4px 12px;font-weight:bold}\
        button.primary{background:#007a5a;color:#fff;border-color:#007a5a}button.danger{color:#e01e5a}";
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><style>{CSS}</style></head>\n\
         <body class=\"{kind}\"><div id=\"card\">{body}</div></body></html>\n"
    )
}

/// README's pictures: the status comment and the Slack message rendered from
/// the snapshots that pin what gatebot sends (tests/snapshots.rs). The pages
/// in docs/pictures/ must be what the snapshots give now; with
/// `GATEBOT_UPDATE_PICTURES=1` this test rewrites them and, in Chromium, their PNGs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_pictures_show_what_gatebot_sends() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pictures");
    let status = include_str!("snapshots/suite__snapshots__github_status_waiting_promotion.snap");
    let slack = include_str!("snapshots/suite__snapshots__slack_wait_promote.snap");
    let slack: serde_json::Value = serde_json::from_str(snapshot_body(slack)).unwrap();
    let pages = [
        ("status-comment", status_comment_page(snapshot_body(status))),
        ("slack-message", slack_message_page(&slack)),
    ];
    let update = std::env::var("GATEBOT_UPDATE_PICTURES").is_ok_and(|v| v == "1");
    for (name, html) in &pages {
        let file = docs.join(format!("{name}.html"));
        if update {
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(&file, html).unwrap();
        }
        let committed = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            committed == *html,
            "{} is not what the snapshots give now: run GATEBOT_UPDATE_PICTURES=1 cargo test --test suite browser::readme_pictures",
            file.display()
        );
    }
    if !update {
        return;
    }
    let Some((driver, browser)) = chromium() else {
        panic!("GATEBOT_UPDATE_PICTURES needs chromium and chromedriver for the PNGs");
    };
    let (_driver, client) = driven_browser(&driver, &browser).await;
    client.set_window_size(900, 900).await.unwrap();
    for (name, _) in &pages {
        let url = format!("file://{}", docs.join(format!("{name}.html")).display());
        client.goto(&url).await.unwrap();
        let card = client.find(Locator::Css("#card")).await.unwrap();
        let png = card.screenshot().await.unwrap();
        std::fs::write(docs.join(format!("{name}.png")), png).unwrap();
    }
    let _ = client.close().await;
}
