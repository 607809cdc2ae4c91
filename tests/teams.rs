//! Microsoft Teams, the bot's endpoint: a fake Bot Framework (metadata and
//! key set served by the test, keys made and tokens minted by the test)
//! against gatebot over real HTTP, on SQLite and on PostgreSQL. Every token
//! the spec refuses is answered 401, counted, and stores nothing.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{Clock, ManualClock, SharedClock};
use gatebot::testing::notify::WorkerSettings;
use gatebot::{Config, Options};
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_prometheus::{Answer, FakePrometheus};
use gatebot_testkit::fake_servicenow::{Change, FakeServiceNow};
use gatebot_testkit::fake_teams::{claims, unsigned, FakeBotFramework, Sent, TestKey};
use gatebot_testkit::flagger::{
    failing_webhook, pr_hooks, FlaggerSim, Hook, HookType, Phase, Strategy,
};
use gatebot_testkit::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};
use serde_json::{json, Value};
use sqlx::Connection;

const APP_ID: &str = "0b6fe6d1-fece-44f7-9a48-56465e2d5ab8";
/// The tenant of the captured channel message.
const TENANT: &str = "50612dbb-0237-4969-b378-8d42590f9c00";
/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const ROUTE: &str = "/webhooks/teams";
/// The sender of the captured channel message, by Entra object id.
const RIDO: &str = "b15a9416-0ad3-4172-9210-7beb711d3f70";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/teams");

struct Env {
    server: TestServer,
    bot: FakeBotFramework,
    clock: Arc<ManualClock>,
    key: TestKey,
    db: TestDb,
}

/// Keys take a moment to make: one for the whole test binary.
fn signing_key() -> TestKey {
    static KEY: std::sync::OnceLock<TestKey> = std::sync::OnceLock::new();
    KEY.get_or_init(|| TestKey::new("key-1")).clone()
}

async fn env(backend: Backend) -> Env {
    env_with(backend, |_, _| {}).await
}

/// [`env`], with the configuration edited last.
async fn env_with(backend: Backend, edit: impl FnOnce(&mut Config, &FakeBotFramework)) -> Env {
    let db = TestDb::new(backend).await;
    let key = signing_key();
    let bot = FakeBotFramework::start(std::slice::from_ref(&key)).await;
    let mut config = db.config();
    config.teams.app_id = Some(APP_ID.into());
    config.teams.tenants = vec![TENANT.into()];
    config.teams.openid_metadata_url = bot.metadata_url();
    config.teams.approvers = vec![RIDO.into()];
    config.teams.app_password = Some("test-app-password".to_string().into());
    config.teams.login_url = bot.url.clone();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    edit(&mut config, &bot);
    let clock = ManualClock::new(NOW);
    let options = Options {
        clock: Some(clock.clone() as SharedClock),
        worker: Some(WorkerSettings {
            base_backoff: Duration::from_millis(50),
            idle_poll: Duration::from_millis(50),
            ..Default::default()
        }),
        ..Options::default()
    };
    let server = TestServer::start(config, options).await;
    Env {
        server,
        bot,
        clock,
        key,
        db,
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The captured channel message that mentions the bot, from the fake
/// connector's service URL (gatebot posts its answers there).
fn message_at(service_url: &str) -> Value {
    let mut activity = fixture("message.channel-mention-reply.teams-net-capture.json");
    activity["serviceUrl"] = json!(service_url);
    activity
}

fn service_url(activity: &Value) -> String {
    activity["serviceUrl"].as_str().unwrap().to_string()
}

impl Env {
    fn message(&self) -> Value {
        message_at(&self.bot.service_url())
    }

    fn now_secs(&self) -> i64 {
        self.clock.now_secs()
    }

    /// A token as the Bot Framework would send with `activity`.
    fn token_for(&self, activity: &Value) -> String {
        self.key
            .sign(&claims(APP_ID, &service_url(activity), self.now_secs()))
    }

    async fn post(&self, token: Option<&str>, activity: &Value) -> u16 {
        let mut request = client().post(self.server.at(ROUTE)).json(activity);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.send().await.unwrap().status().as_u16()
    }

    async fn stored(&self) -> i64 {
        sqlx::any::install_default_drivers();
        let mut db = sqlx::AnyConnection::connect(&self.db.url).await.unwrap();
        sqlx::query_scalar("SELECT COUNT(*) FROM inbox WHERE source = 'teams'")
            .fetch_one(&mut db)
            .await
            .unwrap()
    }

    async fn refused(&self, reason: &str) -> f64 {
        self.server
            .metric(&format!(
                "gatebot_rejected_requests_total{{route=\"{ROUTE}\",reason=\"{reason}\"}}"
            ))
            .await
    }

    /// `token` with `activity` is answered 401 (403 for a channel the key
    /// is not endorsed for, as the spec asks), counted under `reason`, and
    /// stores nothing.
    async fn assert_refused(
        &self,
        what: &str,
        token: Option<&str>,
        activity: &Value,
        reason: &str,
    ) {
        let before = self.refused(reason).await;
        let stored = self.stored().await;
        let status = match reason {
            "teams_channel" | "teams_endorsement" => 403,
            _ => 401,
        };
        assert_eq!(self.post(token, activity).await, status, "{what}");
        assert_eq!(
            self.refused(reason).await,
            before + 1.0,
            "{what}: counted as {reason}"
        );
        assert_eq!(self.stored().await, stored, "{what}: nothing stored");
    }
}

/// Each token the spec refuses, one by one, next to the one it accepts.
async fn refusals(backend: Backend) {
    let env = env(backend).await;
    let activity = env.message();
    let url = service_url(&activity);
    let now = env.now_secs();
    let with = |change: Value| {
        let mut c = claims(APP_ID, &url, now);
        for (k, v) in change.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };

    env.assert_refused("no token", None, &activity, "teams_no_token")
        .await;
    let forger = TestKey::new("key-1");
    let forged = forger.sign(&claims(APP_ID, &url, now));
    env.assert_refused(
        "a signature by another key under a listed key id",
        Some(&forged),
        &activity,
        "teams_signature",
    )
    .await;
    let mut tampered = env.token_for(&activity);
    tampered.push('A');
    env.assert_refused(
        "a signature changed",
        Some(&tampered),
        &activity,
        "teams_signature",
    )
    .await;
    let expired = env
        .key
        .sign(&with(json!({"exp": now - 301, "nbf": now - 3600})));
    env.assert_refused(
        "expired past the 5 minutes of skew",
        Some(&expired),
        &activity,
        "teams_expired",
    )
    .await;
    let early = env.key.sign(&with(json!({"nbf": now + 301})));
    env.assert_refused(
        "not valid for 5 minutes more",
        Some(&early),
        &activity,
        "teams_not_yet_valid",
    )
    .await;
    let other_bot = env.key.sign(&with(json!({"aud": "another-bot"})));
    env.assert_refused(
        "another bot's audience",
        Some(&other_bot),
        &activity,
        "teams_audience",
    )
    .await;
    let issuer = env.key.sign(&with(
        json!({"iss": "https://sts.windows.net/d6d49420-f39b-4df7-a1dc-d59a935871db/"}),
    ));
    env.assert_refused("another issuer", Some(&issuer), &activity, "teams_issuer")
        .await;
    let none = unsigned(
        &json!({"alg": "none", "typ": "JWT", "kid": "key-1"}),
        &with(json!({})),
        None,
    );
    env.assert_refused("alg: none", Some(&none), &activity, "teams_malformed_token")
        .await;
    // HMAC with the public key as the secret: the classic confusion.
    let public = serde_json::to_vec(&env.key.jwk()).unwrap();
    let hs256 = unsigned(
        &json!({"alg": "HS256", "typ": "JWT", "kid": "key-1"}),
        &with(json!({})),
        Some(&public),
    );
    env.assert_refused("HS256", Some(&hs256), &activity, "teams_algorithm")
        .await;
    let unknown = env
        .key
        .named("key-unknown")
        .sign(&claims(APP_ID, &url, now));
    env.assert_refused(
        "an unknown key id",
        Some(&unknown),
        &activity,
        "teams_unknown_key",
    )
    .await;
    let elsewhere = env
        .key
        .sign(&claims(APP_ID, "https://smba.example.net/teams/", now));
    env.assert_refused(
        "a token for another service URL",
        Some(&elsewhere),
        &activity,
        "teams_service_url",
    )
    .await;
    let mut other_tenant = activity.clone();
    other_tenant["channelData"]["tenant"]["id"] = json!("72f988bf-86f1-41af-91ab-2d7cd011db47");
    other_tenant["conversation"]["tenantId"] = json!("72f988bf-86f1-41af-91ab-2d7cd011db47");
    let token = env.token_for(&other_tenant);
    env.assert_refused(
        "another tenant",
        Some(&token),
        &other_tenant,
        "teams_tenant",
    )
    .await;

    // Within the skew, and as sent: stored.
    let late = env.key.sign(&with(json!({"exp": now - 299})));
    assert_eq!(
        env.post(Some(&late), &activity).await,
        200,
        "expired within the skew"
    );
    assert_eq!(env.stored().await, 1);
    env.server.stop().await;
}

/// An activity of another channel (`webchat`), or signed by a key the key
/// set does not endorse for `msteams`, is refused 403 and stores nothing,
/// whatever its kind; the same activity from Teams with a Teams key is taken.
async fn only_teams_activities_signed_for_teams(backend: Backend) {
    let env = env(backend).await;
    let web = env
        .key
        .named("key-webchat")
        .endorsed(&["webchat", "directline"]);
    let bare = env.key.named("key-bare").endorsed(&[]);
    env.bot.publish(&web);
    env.bot.publish(&bare);
    let activity = env.message();
    let url = service_url(&activity);
    let now = env.now_secs();

    let mut webchat = activity.clone();
    webchat["channelId"] = json!("webchat");
    let token = env.token_for(&webchat);
    env.assert_refused("channelId webchat", Some(&token), &webchat, "teams_channel")
        .await;
    let mut click = fixture(CLICK);
    click["serviceUrl"] = json!(url);
    click["channelId"] = json!("webchat");
    let token = env.token_for(&click);
    env.assert_refused("a webchat invoke", Some(&token), &click, "teams_channel")
        .await;
    let by_web_key = web.sign(&claims(APP_ID, &url, now));
    env.assert_refused(
        "a key endorsed for webchat and directline only",
        Some(&by_web_key),
        &activity,
        "teams_endorsement",
    )
    .await;
    let by_bare_key = bare.sign(&claims(APP_ID, &url, now));
    env.assert_refused(
        "a key endorsed for nothing",
        Some(&by_bare_key),
        &activity,
        "teams_endorsement",
    )
    .await;
    let mut installed = fixture(INSTALLED);
    installed["serviceUrl"] = json!(url);
    installed["channelData"]["tenant"]["id"] = json!(TENANT);
    installed["conversation"]["tenantId"] = json!(TENANT);
    let by_web_key = web.sign(&claims(APP_ID, &url, now));
    assert_eq!(env.post(Some(&by_web_key), &installed).await, 403);
    assert!(
        env.conversations().await.is_empty(),
        "an installation signed by a webchat key keeps nothing"
    );

    assert_eq!(
        env.post(Some(&env.token_for(&activity)), &activity).await,
        200,
        "from Teams, by a key endorsed for msteams"
    );
    assert_eq!(env.stored().await, 1);
    env.server.stop().await;
}

/// A replayed activity (same token, same body) is stored once.
async fn replayed_once(backend: Backend) {
    let env = env(backend).await;
    let activity = env.message();
    let token = env.token_for(&activity);
    for _ in 0..3 {
        assert_eq!(env.post(Some(&token), &activity).await, 200);
    }
    assert_eq!(env.stored().await, 1, "one receipt per activity id");
    let mut next = activity.clone();
    next["id"] = json!("1759944781431");
    assert_eq!(env.post(Some(&env.token_for(&next)), &next).await, 200);
    assert_eq!(env.stored().await, 2, "another activity is another receipt");
    env.server.drained().await;
    env.server.stop().await;
}

/// A key id not seen before fetches the key set again, but not more than
/// once every 5 minutes; a new key is accepted after the refresh.
async fn key_rotation(backend: Backend) {
    let env = env(backend).await;
    let activity = env.message();
    assert_eq!(
        env.post(Some(&env.token_for(&activity)), &activity).await,
        200
    );
    assert_eq!(env.bot.key_fetches(), 1, "keys read on first use");
    let rotated = TestKey::new("key-2");
    let url = service_url(&activity);
    let mut next = activity.clone();
    next["id"] = json!("1759944781431");
    // Within 5 minutes of the last fetch, an unknown key id fetches nothing:
    // refused before the Bot Framework lists it, and after.
    let early = rotated.sign(&claims(APP_ID, &url, env.now_secs()));
    env.assert_refused(
        "a key not listed yet",
        Some(&early),
        &next,
        "teams_unknown_key",
    )
    .await;
    env.bot.publish(&rotated);
    env.assert_refused(
        "a key listed, within 5 minutes",
        Some(&early),
        &next,
        "teams_unknown_key",
    )
    .await;
    assert_eq!(
        env.bot.key_fetches(),
        1,
        "no fetch within 5 minutes of the last"
    );
    env.clock.advance(5 * 60 * 1000);
    let token = rotated.sign(&claims(APP_ID, &url, env.now_secs()));
    assert_eq!(
        env.post(Some(&token), &next).await,
        200,
        "the new key, after a refresh"
    );
    assert_eq!(env.bot.key_fetches(), 2);
    // Known keys are read from memory until the day is over.
    assert_eq!(
        env.post(Some(&env.token_for(&activity)), &activity).await,
        200
    );
    assert_eq!(env.bot.key_fetches(), 2);
    env.clock.advance(24 * 3600 * 1000);
    let mut third = activity.clone();
    third["id"] = json!("1759944781432");
    assert_eq!(env.post(Some(&env.token_for(&third)), &third).await, 200);
    assert_eq!(env.bot.key_fetches(), 3, "refreshed once a day");
    env.server.stop().await;
}

impl Env {
    /// Sends the captured message as activity `id`, saying `text` after the
    /// mention of the bot, from `aad_object_id`; waits until it is applied.
    async fn say(&self, id: &str, text: &str, aad_object_id: &str) {
        let mut activity = self.message();
        activity["id"] = json!(id);
        activity["text"] = json!(format!("<at>ridotest</at> {text}"));
        activity["from"]["aadObjectId"] = json!(aad_object_id);
        assert_eq!(
            self.post(Some(&self.token_for(&activity)), &activity).await,
            200
        );
        self.server.drained().await;
    }

    async fn gate(&self, path: &str) -> Value {
        self.server.api(&format!("/api/v1/gates{path}")).await
    }

    async fn audit(&self, gate: &str) -> Vec<Value> {
        let a = self.server.api(&format!("/api/v1/audit?gate={gate}")).await;
        a["audit"].as_array().unwrap().clone()
    }
}

/// `@gatebot promote 42 reason` from an approver opens the gate, and
/// Flagger's simulator promotes; someone else is refused, audited with
/// words that say who may; hold and unhold take the same path.
async fn typed_commands(backend: Backend) {
    let env = env(backend).await;
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        pr_hooks(&env.server.url, 42),
    );
    sim.deploy("rev-a");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Initialized);
    sim.deploy("rev-b");
    let gate = "/gates/promote/acme/shop/pr/42";

    env.say(
        "1",
        "promote 42 ship it",
        "00000000-0000-0000-0000-00000000beef",
    )
    .await;
    assert_eq!(
        env.gate("/promote/acme/shop/pr/42").await["state"],
        "closed"
    );
    let refused = env.audit(gate).await;
    let refusal = refused
        .iter()
        .find(|a| a["action"] == "refuse")
        .unwrap_or_else(|| panic!("the refusal is audited: {refused:?}"));
    let why = refusal["reason"].as_str().unwrap();
    assert!(
        why.contains("rido is not a Teams approver") && why.contains("[teams] approvers"),
        "{why}"
    );

    env.say("2", "hold 42 not yet", RIDO).await;
    assert_eq!(env.gate("/promote/acme/shop/pr/42").await["state"], "held");
    env.say("3", "unhold pr/42", RIDO).await;
    env.say("4", "promote 42 ship it", RIDO).await;
    assert_eq!(env.gate("/promote/acme/shop/pr/42").await["state"], "open");
    let open = env
        .audit(gate)
        .await
        .into_iter()
        .find(|a| a["action"] == "open")
        .unwrap();
    assert_eq!(open["reason"], "ship it");
    assert_eq!(open["actor"]["source"], "teams");
    assert_eq!(open["actor"]["name"], "rido");

    for (result, n) in [("refused", 1.0), ("applied", 1.0)] {
        let counter = format!(
            "gatebot_commands_total{{source=\"teams\",command=\"promote\",result=\"{result}\"}}"
        );
        assert_eq!(env.server.metric(&counter).await, n, "{counter}");
    }
    env.say("5", "start 42", RIDO).await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted: {:?}",
        sim.phase()
    );
    env.server.stop().await;
}

/// Hold from the card holds the gate; the card says so and keeps its
/// buttons.
async fn hold_from_the_card(backend: Backend) {
    let env = cards_env(backend).await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);
    let (status, answer) = env.click("f:hold", &card, "hold", RIDO).await;
    assert_eq!((status, answer["type"].as_str()), (200, Some(CARD_TYPE)));
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "held");
    let shown = &answer["value"];
    assert!(texts(shown).contains("Held by Rido via teams"), "{shown}");
    assert_eq!(verbs(shown), ["approve", "reject", "hold"]);
    env.server.stop().await;
}

/// Each command is answered in its thread through the outbox, with the
/// bot's token (fetched once, kept); a 429 is tried again after its
/// Retry-After.
async fn answers_are_posted(backend: Backend) {
    let env = env(backend).await;
    env.say("1", "promote 42 ship it", RIDO).await;
    env.say("2", "promote 43", "00000000-0000-0000-0000-00000000beef")
        .await;
    let sent = env.bot.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let conversation = env.message()["conversation"]["id"].clone();
    for s in &sent {
        assert_eq!(json!(s.conversation_id), conversation);
        assert_eq!(s.auth.as_deref(), Some("Bearer test-bot-token-1"));
        assert_eq!(s.activity["type"], "message");
        assert_eq!(s.activity["textFormat"], "plain");
    }
    assert_eq!(sent[0].activity["replyToId"], "1");
    let done = sent[0].activity["text"].as_str().unwrap();
    assert!(done.contains("/gates/promote/acme/shop/pr/42"), "{done}");
    let refused = sent[1].activity["text"].as_str().unwrap();
    assert!(
        refused.contains("rido is not a Teams approver"),
        "{refused}"
    );
    assert_eq!(
        env.bot.token_requests(),
        vec!["botframework.com".to_string()]
    );

    env.bot.throttle_next(2);
    env.say("3", "help", RIDO).await;
    assert_eq!(env.bot.sent().len(), 3);
    assert_eq!(env.bot.sent()[2].status, 429);
    env.clock.advance(2_000);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env.bot.sent().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the throttled answer was not sent again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let help = env.bot.sent()[3].clone();
    assert_eq!(help.status, 200);
    assert!(
        help.activity["text"].as_str().unwrap().contains("promote"),
        "{help:?}"
    );

    // Anyone may ask for status.
    env.say("4", "status 42", "00000000-0000-0000-0000-00000000beef")
        .await;
    let status = env.bot.sent()[4].activity["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        status.contains("/gates/promote/acme/shop/pr/42: open by rido via teams"),
        "{status}"
    );
    env.server.stop().await;
}

gatebot_testkit::on_both_stores!(
    refusals,
    only_teams_activities_signed_for_teams,
    replayed_once,
    key_rotation,
    typed_commands,
    answers_are_posted,
    conversation_references,
    a_click_approves_and_flagger_promotes,
    hold_from_the_card,
    a_button_acts_only_on_its_own_wait,
    an_unlisted_user_is_refused_in_the_card,
    a_github_approval_updates_the_card,
    the_card_shows_the_canarys_numbers,
    the_workflow_webhook_gets_its_card,
    four_eyes_and_one_person_by_the_users_mapping,
);

/// The channel the installation fixtures name.
const CHANNEL: &str = "19:0b7f32667e064dd9b25d7969801541f4@thread.tacv2";
const PUBLIC_URL: &str = "https://gatebot.example.com";
const INSTALLED: &str = "installationUpdate.add.bot-events-docs.json";
const ADDED: &str = "conversationUpdate.bot-added-to-team.conversation-events-docs.json";
const CLICK: &str = "invoke.adaptiveCard-action.teams-net-capture.json";
const CARD_TYPE: &str = "application/vnd.microsoft.card.adaptive";

/// gatebot posting cards to CHANNEL, with links to its pages.
async fn cards_env(backend: Backend) -> Env {
    env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.public_url = Some(PUBLIC_URL.into());
    })
    .await
}

/// The card a sent activity carries.
fn card_of(sent: &Sent) -> Value {
    sent.activity["attachments"][0]["content"].clone()
}

/// Every text of a card, one after another.
fn texts(card: &Value) -> String {
    let mut out = Vec::new();
    for block in card["body"].as_array().unwrap() {
        if let Some(t) = block["text"].as_str() {
            out.push(t.to_string());
        }
        for fact in block["facts"].as_array().into_iter().flatten() {
            out.push(format!("{}: {}", fact["title"], fact["value"]));
        }
    }
    out.join("\n")
}

fn verbs(card: &Value) -> Vec<String> {
    card["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["verb"].as_str().map(str::to_string))
        .collect()
}

impl Env {
    /// The fixture `name`, from the test's tenant and the fake connector.
    fn activity(&self, name: &str) -> Value {
        let mut a = fixture(name);
        a["serviceUrl"] = json!(self.bot.service_url());
        a["channelData"]["tenant"]["id"] = json!(TENANT);
        a["conversation"]["tenantId"] = json!(TENANT);
        a
    }

    async fn send(&self, activity: &Value) -> u16 {
        self.post(Some(&self.token_for(activity)), activity).await
    }

    /// The bot installed in CHANNEL.
    async fn install(&self) {
        assert_eq!(self.send(&self.activity(INSTALLED)).await, 200);
    }

    /// What `gatebot check-config` says on this store, with `channel` as
    /// GATEBOT_TEAMS_CHANNEL.
    fn check_config(&self, channel: &str) -> String {
        let out = std::process::Command::new(gatebot_testkit::served::bin())
            .env_clear()
            .current_dir(self.db.dir.path())
            .arg("check-config")
            .env("GATEBOT_DATABASE_URL", &self.db.url)
            .env("GATEBOT_TEAMS_APP_ID", APP_ID)
            .env("GATEBOT_TEAMS_TENANTS", TENANT)
            .env("GATEBOT_TEAMS_CHANNEL", channel)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn conversations(&self) -> Vec<(String, String)> {
        sqlx::any::install_default_drivers();
        let mut db = sqlx::AnyConnection::connect(&self.db.url).await.unwrap();
        sqlx::query_as(
            "SELECT conversation_id, name FROM teams_conversations ORDER BY conversation_id",
        )
        .fetch_all(&mut db)
        .await
        .unwrap()
    }

    /// Cards posted (`POST`) or updated (`PUT`), in order.
    fn cards(&self, method: &str) -> Vec<Sent> {
        self.bot
            .sent()
            .into_iter()
            .filter(|s| s.method == method && s.activity["attachments"].is_array())
            .collect()
    }

    /// Waits until `n` cards were posted (`POST`) or updated (`PUT`).
    async fn until_cards(&self, method: &str, n: usize) -> Vec<Sent> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            self.server.drained().await;
            let cards = self.cards(method);
            if cards.len() >= n {
                return cards;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{n} {method} cards: {:?}",
                self.bot.sent()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A click on the `verb` button of `card` by `aad_object_id`, as
    /// activity `id`: the invoke's HTTP status and answer.
    async fn click(&self, id: &str, card: &Value, verb: &str, aad_object_id: &str) -> (u16, Value) {
        let button = card["actions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["verb"] == verb)
            .unwrap_or_else(|| panic!("no {verb} button: {card}"))
            .clone();
        self.click_with(id, verb, &button["data"], aad_object_id)
            .await
    }

    /// A click on a `verb` button whose data is `data`, as gatebot's card
    /// would carry it or crafted.
    async fn click_with(
        &self,
        id: &str,
        verb: &str,
        data: &Value,
        aad_object_id: &str,
    ) -> (u16, Value) {
        let mut a = self.activity(CLICK);
        a["id"] = json!(id);
        a["value"]["action"]["verb"] = json!(verb);
        a["value"]["action"]["data"] = data.clone();
        a["from"]["aadObjectId"] = json!(aad_object_id);
        let r = client()
            .post(self.server.at(ROUTE))
            .header("authorization", format!("Bearer {}", self.token_for(&a)))
            .json(&a)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        let answer = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("the invoke's answer ({status}) is not JSON: {e}: {body}"));
        (status, answer)
    }
}

/// A canary of PR 42 waiting at the start gate, its card posted.
async fn waiting_at_start(env: &Env) -> FlaggerSim {
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        pr_hooks(&env.server.url, 42),
    );
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    sim.tick().await;
    sim
}

/// The bot added and removed, by installation and by conversation
/// updates: one row per conversation, gone on removal.
async fn conversation_references(backend: Backend) {
    let env = env(backend).await;
    env.install().await;
    env.install().await;
    let kept = env.conversations().await;
    assert_eq!(
        kept,
        vec![(CHANNEL.to_string(), "2021 Test Channel".to_string())]
    );
    let said = env.check_config("19:elsewhere@thread.tacv2");
    assert!(
        said.contains(&format!(
            "teams:           {CHANNEL} (channel \"2021 Test Channel\")"
        )),
        "{said}"
    );
    assert!(
        said.contains("warning:         GATEBOT_TEAMS_CHANNEL 19:elsewhere@thread.tacv2 is not a conversation the bot was added to"),
        "{said}"
    );
    assert!(!env.check_config(CHANNEL).contains("warning:"));

    let mut removed = env.activity(INSTALLED);
    removed["action"] = json!("remove");
    removed["id"] = json!("f:removed");
    assert_eq!(env.send(&removed).await, 200);
    assert!(env.conversations().await.is_empty());

    let added = env.activity(ADDED);
    assert_eq!(env.send(&added).await, 200);
    assert_eq!(env.conversations().await.len(), 1);
    let mut left = added.clone();
    left["membersRemoved"] = added["membersAdded"].clone();
    left["membersAdded"] = json!([]);
    assert_eq!(env.send(&left).await, 200);
    assert!(env.conversations().await.is_empty());
    env.server.stop().await;
}

/// A waiting gate's card is posted (after the connector's 429 and its
/// Retry-After); Approve opens the gate, the invoke is answered with the
/// updated card, the posted card is updated in place, and Flagger's
/// simulator promotes once the promote gate's card is approved too.
async fn a_click_approves_and_flagger_promotes(backend: Backend) {
    let env = cards_env(backend).await;
    env.install().await;
    env.bot.throttle_next(2);
    let mut sim = waiting_at_start(&env).await;
    let throttled = env.until_cards("POST", 1).await;
    assert_eq!(throttled[0].status, 429);
    env.clock.advance(2_000);
    let posted = env.until_cards("POST", 2).await;
    assert_eq!(posted[1].status, 200);
    assert_eq!(posted[1].conversation_id, CHANNEL);
    assert_eq!(posted[1].auth.as_deref(), Some("Bearer test-bot-token-1"));
    let card = card_of(&posted[1]);
    insta::assert_json_snapshot!("teams_card_waiting", card);

    let (status, answer) = env.click("f:click-1", &card, "approve", RIDO).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["statusCode"], 200);
    assert_eq!(answer["type"], CARD_TYPE);
    insta::assert_json_snapshot!("teams_card_approved", answer["value"]);
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "open");
    let updated = env.until_cards("PUT", 1).await;
    assert_eq!(updated[0].activity_id.as_deref(), Some("1562094704.000002"));
    let shown = card_of(updated.last().unwrap());
    assert!(verbs(&shown).is_empty(), "{shown}");
    assert!(
        texts(&shown).contains("Approved by Rido in Teams"),
        "{shown}"
    );

    assert!(
        sim.run_until(|s| env.cards("POST").len() >= 3 || s.promotions() == 1, 20)
            .await
    );
    let promote = card_of(&env.until_cards("POST", 3).await[2]);
    assert!(texts(&promote).contains("promote gate"), "{promote}");
    let (status, _) = env.click("f:click-2", &promote, "approve", RIDO).await;
    assert_eq!(status, 200);
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted: {:?}",
        sim.phase()
    );
    // Flagger's event says the rollout is done: the promote card shows it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        env.server.drained().await;
        let last = env
            .cards("PUT")
            .into_iter()
            .map(|s| texts(&card_of(&s)))
            .rfind(|t| t.contains("promote gate"));
        if last.as_deref().is_some_and(|t| t.contains("Promoted")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the promote card never said Promoted: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.server.stop().await;
}

/// Someone not in [teams] approvers is answered in the card with who
/// may, and nothing opens; a replayed click is applied once; a click on a
/// card decided already is refused.
async fn an_unlisted_user_is_refused_in_the_card(backend: Backend) {
    let env = cards_env(backend).await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);
    let gate = "/gates/start/acme/shop/pr/42";

    let stranger = "00000000-0000-0000-0000-00000000beef";
    let (status, answer) = env.click("f:stranger", &card, "approve", stranger).await;
    assert_eq!(status, 200);
    assert_eq!(answer["type"], "application/vnd.microsoft.activity.message");
    let why = answer["value"].as_str().unwrap();
    assert!(
        why.contains("Rido is not a Teams approver") && why.contains("[teams] approvers"),
        "{why}"
    );
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "closed");

    for _ in 0..2 {
        let (status, answer) = env.click("f:approve", &card, "approve", RIDO).await;
        assert_eq!((status, answer["type"].as_str()), (200, Some(CARD_TYPE)));
    }
    env.server.drained().await;
    let opened = env
        .audit(gate)
        .await
        .into_iter()
        .filter(|a| a["action"] == "open")
        .count();
    assert_eq!(opened, 1, "a replayed click is applied once");

    let (_, answer) = env.click("f:late", &card, "reject", RIDO).await;
    assert_eq!(
        answer["value"].as_str(),
        Some("refused /reject: this card was approved by Rido already")
    );
    env.server.stop().await;
}

/// A click that carries PR 42's wait with PR 43's gate is refused with a
/// reply that says so, stores nothing and opens neither gate: a button acts
/// on the wait its card was made for, as the store knows it.
async fn a_button_acts_only_on_its_own_wait(backend: Backend) {
    let env = cards_env(backend).await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);
    let approve = card["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["verb"] == "approve")
        .unwrap()
        .clone();
    let mut crafted = approve["data"].clone();
    assert_eq!(crafted["gate"], "/gates/start/acme/shop/pr/42", "{crafted}");
    crafted["gate"] = json!("/gates/start/acme/shop/pr/43");
    let stored = env.stored().await;
    let (status, answer) = env.click_with("f:crafted", "approve", &crafted, RIDO).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["type"], "application/vnd.microsoft.error");
    let why = answer["value"]["message"].as_str().unwrap();
    assert!(
        why.contains("/gates/start/acme/shop/pr/43") && why.contains("nothing was done"),
        "{why}"
    );
    assert_eq!(env.stored().await, stored, "nothing stored");
    env.server.drained().await;
    assert_eq!(env.gate("/start/acme/shop/pr/43").await["state"], "closed");
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "closed");
    let bad =
        format!("gatebot_rejected_requests_total{{route=\"{ROUTE}\",reason=\"teams_bad_invoke\"}}");
    assert_eq!(env.server.metric(&bad).await, 1.0);

    // The card's own button still works.
    let (status, answer) = env.click("f:own", &card, "approve", RIDO).await;
    assert_eq!((status, answer["type"].as_str()), (200, Some(CARD_TYPE)));
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "open");
    env.server.stop().await;
}

/// `/start` on the pull request opens the gate: the card says who did,
/// and loses its buttons.
async fn a_github_approval_updates_the_card(backend: Backend) {
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    let env = env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.public_url = Some(PUBLIC_URL.into());
        c.github.token = Some("ghp_test".to_string().into());
        c.github.webhook_secret = Some("github-secret".to_string().into());
        c.github.api_url = github.url.clone();
    })
    .await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    env.until_cards("POST", 1).await;

    let mut payload = gatebot_testkit::github_payloads::comment_at(42, 7, "alice", "/start", NOW);
    payload["issue"]["user"]["login"] = json!("bob");
    github.set_webhook(&env.server.at("/webhooks/github"), "github-secret");
    assert_eq!(github.deliver("issue_comment", &payload).await, 202);
    let updated = env.until_cards("PUT", 1).await;
    let card = card_of(updated.last().unwrap());
    insta::assert_json_snapshot!("teams_card_approved_on_github", card);
    assert!(verbs(&card).is_empty());
    env.server.stop().await;
}

/// With Prometheus set (issue 29), the waiting canary's card is updated
/// with its numbers against the primary's.
async fn the_card_shows_the_canarys_numbers(backend: Backend) {
    let prometheus = FakePrometheus::start().await;
    let (rate, canary, primary) = (
        "istio_requests_total",
        "=~\"podinfo\"",
        "=~\"podinfo-primary\"",
    );
    prometheus.answer(&[rate, canary], Answer::Value("97.0".into()));
    prometheus.answer(&[rate, primary], Answer::Value("99.9".into()));
    let env = env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.public_url = Some(PUBLIC_URL.into());
        c.prometheus.url = Some(prometheus.url.clone());
        c.limits.evidence_refresh = Duration::from_millis(100);
    })
    .await;
    env.install().await;
    let mut sim = waiting_at_start(&env).await;
    env.until_cards("POST", 1).await;
    // Numbers are read only for a canary known to be real: here, one a
    // person's approval was used by.
    env.server.open("/gates/start/pr/42").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        env.server.drained().await;
        let shown = env
            .cards("PUT")
            .iter()
            .chain(env.cards("POST").iter())
            .any(|c| {
                // Card text is Markdown: every character that means something is escaped.
                texts(&card_of(c))
                    .replace('\\', "")
                    .contains("⚠ success 97.0 % (primary 99.9 %) · last 1m")
            });
        if shown {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no card with the numbers: {:?}",
            env.bot.sent()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.server.stop().await;
}

const BOB: &str = "0b0b0b0b-0000-4000-8000-00000000b0b0";
const ALICE: &str = "a11ce000-0000-4000-8000-0000000a11ce";
const CAROL: &str = "ca401000-0000-4000-8000-000000ca4010";

/// `[teams]` asks four eyes and `[users]` maps Teams people to GitHub
/// logins: the PR's author is refused, an unmapped approver is refused (it
/// cannot be told), and a person approving from GitHub and from Teams counts
/// once toward the two approvals the start gate needs.
async fn four_eyes_and_one_person_by_the_users_mapping(backend: Backend) {
    let github = FakeGithub::start().await;
    github.set_permission("alice", "write");
    github.set_author(42, "bob");
    let policy = format!(
        "[teams]\napprovers = [\"{RIDO}\", \"{BOB}\", \"{ALICE}\", \"{CAROL}\"]\nforbid_self_approval = true\n\n\
         [users]\nbob = {{ teams = \"{BOB}\" }}\nalice = {{ slack = \"UALICE\", teams = \"{}\" }}\nrido = {{ teams = \"{RIDO}\" }}\n\n\
         [[approvals]]\nkind = \"start\"\nrequired = 2\n",
        ALICE.to_uppercase()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, &policy).unwrap();
    let env = env_with(backend, |c, _| {
        c.teams.approvers = Vec::new();
        c.github.token = Some("ghp_test".to_string().into());
        c.github.webhook_secret = Some("github-secret".to_string().into());
        c.github.api_url = github.url.clone();
        c.policy = Some(path);
    })
    .await;
    let _sim = waiting_at_start(&env).await;
    let gate = "/gates/start/acme/shop/pr/42";
    // The audit is newest first.
    let refusals = |audit: Vec<Value>| -> Vec<String> {
        audit
            .into_iter()
            .filter(|a| a["action"] == "refuse")
            .map(|a| a["reason"].as_str().unwrap_or("").to_string())
            .collect()
    };

    env.say("b1", "start 42", BOB).await;
    let why = refusals(env.audit(gate).await);
    assert!(
        why.first().is_some_and(
            |w| w.contains("(@bob) opened acme/shop#42: someone else must approve (four eyes)")
        ),
        "{why:?}"
    );
    env.say("c1", "start 42", CAROL).await;
    let why = refusals(env.audit(gate).await);
    assert!(
        why.first()
            .is_some_and(|w| w.contains("is not mapped to a GitHub login: add them to [users]")),
        "{why:?}"
    );
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "closed");

    let comment = gatebot_testkit::github_payloads::comment_at(42, 7, "alice", "/start", NOW);
    github.set_webhook(&env.server.at("/webhooks/github"), "github-secret");
    assert_eq!(github.deliver("issue_comment", &comment).await, 202);
    env.server.drained().await;
    let before = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(before["state"], "approving", "{before}");
    env.say("a1", "start 42", ALICE).await;
    let after = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(
        (&after["state"], &after["approvals"]),
        (&before["state"], &before["approvals"]),
        "alice from GitHub and from Teams is one person: {after}"
    );
    env.say("r1", "start 42", RIDO).await;
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "open");
    env.server.stop().await;
}

/// GATEBOT_TEAMS_WORKFLOW_URL gets the card, with a link to the gate's
/// page instead of buttons, and no bot token.
async fn the_workflow_webhook_gets_its_card(backend: Backend) {
    let env = env_with(backend, |c, bot| {
        c.teams.workflow_url = Some(bot.workflow_url().into());
        c.public_url = Some(PUBLIC_URL.into());
    })
    .await;
    let _sim = waiting_at_start(&env).await;
    let posted = env.until_cards("POST", 1).await;
    assert_eq!(posted[0].conversation_id, "workflow");
    assert_eq!(posted[0].auth, None);
    let card = card_of(&posted[0]);
    assert!(verbs(&card).is_empty(), "{card}");
    assert_eq!(
        card["actions"][0]["url"],
        format!("{PUBLIC_URL}/ui/gates/start/acme/shop/pr/42")
    );
    insta::assert_json_snapshot!("teams_workflow_card", card);
    env.server.stop().await;
}

/// A pre-rollout webhook's answer written as Markdown and Adaptive Card
/// expressions: Flagger puts it in its event message as it came.
const HOSTILE_ANSWER: &str =
    "smoke failed **now** [logs](https://evil) {{DATE(2030-01-01T00:00:00Z)}} <at>Rido</at>";

/// A failed pre-rollout webhook: one card under the canary's start card, not
/// one per retry, with Flagger's words escaped and what Flagger does next.
async fn a_failed_pre_rollout_check_reaches_teams_once(backend: Backend) {
    let env = cards_env(backend).await;
    env.install().await;
    let mut hooks = pr_hooks(&env.server.url, 42);
    hooks.push(Hook::new(
        "smoke",
        HookType::PreRollout,
        failing_webhook(HOSTILE_ANSWER).await,
    ));
    let strategy = Strategy::Canary {
        step_weight: 50,
        max_weight: 50,
    };
    let mut sim = FlaggerSim::new("podinfo", "test", strategy, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    sim.tick().await;
    let start = card_of(&env.until_cards("POST", 1).await[0]);
    let (status, answer) = env.click("f:click-1", &start, "approve", RIDO).await;
    assert_eq!(status, 200, "{answer}");
    // Past the start gate, then three intervals whose pre-rollout check fails.
    for _ in 0..4 {
        env.server.drained().await;
        sim.tick().await;
    }
    assert_eq!(sim.failed_checks(), 3, "{:#?}", sim.events());
    let told = env.until_cards("POST", 2).await;
    env.server.drained().await;
    let failures: Vec<Sent> = env
        .cards("POST")
        .into_iter()
        .filter(|s| texts(&card_of(s)).contains("rollout webhook failed"))
        .collect();
    assert_eq!(failures.len(), 1, "one card, not one per retry: {told:?}");
    // The start card's id, as its update after the approval names it.
    let start_id = env.until_cards("PUT", 1).await[0].activity_id.clone();
    assert!(start_id.is_some());
    assert_eq!(
        failures[0].activity["replyToId"].as_str(),
        start_id.as_deref(),
        "under the start card"
    );
    let card = card_of(&failures[0]);
    let text = texts(&card);
    for bad in ["**now**", "[logs](https://evil)", "{{DATE(", "<at>"] {
        assert!(!text.contains(bad), "{bad} in {text}");
    }
    insta::assert_json_snapshot!("teams_failure_pre_rollout", card);
    env.server.stop().await;
}

/// A click that only counts towards the two approvals the start gate needs
/// leaves the card open, with its buttons and no decision; the second
/// person's click decides it. The core writes a card's decision only when
/// a click was done in full (issue 43, point 1).
async fn a_click_that_only_counts_leaves_the_card_open(backend: Backend) {
    let policy = format!(
        "[teams]\napprovers = [\"{RIDO}\", \"{ALICE}\"]\n\n[[approvals]]\nkind = \"start\"\nrequired = 2\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, &policy).unwrap();
    let env = env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.public_url = Some(PUBLIC_URL.into());
        c.teams.approvers = Vec::new();
        c.policy = Some(path);
    })
    .await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);

    let (status, answer) = env.click("f:count-1", &card, "approve", RIDO).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        env.gate("/start/acme/shop/pr/42").await["state"],
        "approving"
    );
    env.server.drained().await;
    let shown = card_of(env.cards("PUT").last().expect("the card was refreshed"));
    assert!(!texts(&shown).contains("Approved by"), "{shown}");
    assert_eq!(verbs(&shown), ["approve", "reject", "hold"]);

    let (status, answer) = env.click("f:count-2", &card, "approve", ALICE).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "open");
    env.server.drained().await;
    let shown = card_of(env.cards("PUT").last().expect("the card was refreshed"));
    assert!(texts(&shown).contains("Approved by"), "{shown}");
    env.server.stop().await;
}

gatebot_testkit::on_both_stores!(
    a_failed_pre_rollout_check_reaches_teams_once,
    teams_channel_goes_only_where_the_policy_binds_it,
    a_click_that_only_counts_leaves_the_card_open,
    the_cards_reason_field_says_why_where_the_policy_asks,
    a_teams_person_counts_for_a_group_by_their_login,
    a_teams_approval_names_its_change_typed_or_in_the_cards_field,
);

/// Under `[change]` (mode `reference`), a Teams approval names its change,
/// typed after the command or in the card's reason field: gatebot reads it
/// from ServiceNow and counts the approval only once the change is approved.
async fn a_teams_approval_names_its_change_typed_or_in_the_cards_field(backend: Backend) {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let hour = 3_600_000;
    sn.put(Change::planned(
        "CHG0031337",
        "approved",
        NOW - hour,
        NOW + hour,
        "shop",
    ));
    sn.put(Change::planned(
        "CHG0000001",
        "requested",
        NOW - hour,
        NOW + hour,
        "shop",
    ));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    let policy = format!(
        "[change]\nprovider = \"servicenow\"\nurl = \"{}\"\nkinds = [\"start\"]\n",
        sn.url
    );
    std::fs::write(&path, policy).unwrap();
    let env = env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.policy = Some(path);
        c.change.user = Some("gatebot".into());
        c.change.password = Some("s3cret".to_string().into());
    })
    .await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);
    let button = |reason: &str| {
        let mut data = card["actions"][0]["data"].clone();
        data["reason"] = json!(reason);
        data
    };

    env.say("c1", "start 42 because the tests passed", RIDO)
        .await;
    let gate = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(gate["state"], "closed", "no change named: {gate}");
    let refused = env.audit("/gates/start/acme/shop/pr/42").await;
    assert!(
        refused.iter().any(|e| e["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the policy ties start to an approved change"))),
        "{refused:?}"
    );
    let (status, answer) = env
        .click_with("f:chg-1", "approve", &button("CHG0000001"), RIDO)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("change CHG0000001 is not approved yet"),
        "{answer}"
    );
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "closed");

    let (status, answer) = env
        .click_with(
            "f:chg-2",
            "approve",
            &button("CHG0031337 smoke passed"),
            RIDO,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let gate = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(gate["state"], "open", "{gate}");
    assert!(
        gate["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("CHG0031337 smoke passed; change CHG0031337 (")),
        "{gate}"
    );
    assert!(
        answer.to_string().contains("change CHG0031337"),
        "the card's decision names the change: {answer}"
    );
    env.server.stop().await;
}

/// A quorum's group from Teams: a person is in a `[groups]` list by the
/// GitHub login `[users]` maps them to; an unmapped one is in none, and the
/// answer says who is still needed.
async fn a_teams_person_counts_for_a_group_by_their_login(backend: Backend) {
    let policy = format!(
        "[teams]\napprovers = [\"{RIDO}\", \"{CAROL}\"]\n\
         [users]\nrido = {{ teams = \"{RIDO}\" }}\n\
         [groups]\nsre = [\"rido\"]\n\
         [[approvals]]\nkind = \"start\"\nrequired = 1\ninclude = [{{ group = \"sre\" }}]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, &policy).unwrap();
    let env = env_with(backend, |c, _| {
        c.teams.approvers = Vec::new();
        c.policy = Some(path);
    })
    .await;
    let _sim = waiting_at_start(&env).await;
    env.say("c1", "start 42", CAROL).await;
    let gate = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(gate["state"], "approving", "{gate}");
    assert!(
        gate.to_string()
            .contains("\"include\":[{\"at_least\":1,\"group\":\"sre\"}]"),
        "{gate}"
    );
    env.say("r1", "start 42", RIDO).await;
    let gate = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(gate["state"], "open", "rido is sre's by his login: {gate}");
}

/// Under a `[[reasons]]` rule, a button says why with what was typed in the
/// card's reason field: without it the click is refused with what to write.
async fn the_cards_reason_field_says_why_where_the_policy_asks(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, "[[reasons]]\nkind = \"start\"\nrequired = true\n").unwrap();
    let env = env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.policy = Some(path);
    })
    .await;
    env.install().await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);
    let field = card["body"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "Input.Text")
        .expect("a reason field");
    assert_eq!(
        (field["id"].as_str(), field["maxLength"].as_u64()),
        (Some("reason"), Some(1000))
    );
    let button = |reason: Option<&str>| {
        let mut data = card["actions"][0]["data"].clone();
        if let Some(reason) = reason {
            data["reason"] = json!(reason);
        }
        data
    };

    let (status, answer) = env
        .click_with("f:why-1", "approve", &button(Some("  ")), RIDO)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("the policy asks for a reason to start: say why"),
        "{answer}"
    );
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "closed");

    let (status, answer) = env
        .click_with(
            "f:why-2",
            "approve",
            &button(Some("smoke tests passed")),
            RIDO,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let gate = env.gate("/start/acme/shop/pr/42").await;
    assert_eq!(gate["state"], "open", "{gate}");
    assert_eq!(gate["reason"], "smoke tests passed", "{gate}");
    // The card's decision says why.
    assert!(
        answer.to_string().contains("UTC: smoke tests passed"),
        "{answer}"
    );
    env.server.stop().await;
}

/// A conversation of another organisation this gatebot serves.
const OTHER_TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const OTHER: &str = "19:a1b2c3d4e5f60718293a4b5c6d7e8f90@thread.tacv2";

/// A canary of `namespace`/`name` for PR `pr` whose start gate's metadata
/// names `teams_channel`, waiting there.
async fn waiting_with_channel(
    env: &Env,
    namespace: &str,
    name: &str,
    pr: u64,
    channel: &str,
) -> FlaggerSim {
    let mut hooks = pr_hooks(&env.server.url, pr);
    hooks[0] = hooks[0].clone().with_metadata("teams_channel", channel);
    let strategy = Strategy::Canary {
        step_weight: 50,
        max_weight: 50,
    };
    let mut sim = FlaggerSim::new(name, namespace, strategy, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    sim.tick().await;
    sim
}

/// A Canary's `teams_channel` is followed only to a conversation the
/// policy's `[[teams.channels]]` binds to that canary: naming a channel of
/// another tenant the bot was added to, a check of namespace `test` gets its
/// card in GATEBOT_TEAMS_CHANNEL (counted), while a canary of `billing`, to
/// which the policy binds that channel, gets its card there.
async fn teams_channel_goes_only_where_the_policy_binds_it(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    let policy =
        format!("[[teams.channels]]\nconversation = \"{OTHER}\"\nnamespace = \"billing\"\n");
    std::fs::write(&path, policy).unwrap();
    let env = env_with(backend, |c, _| {
        c.teams.channel = Some(CHANNEL.into());
        c.teams.tenants = vec![TENANT.into(), OTHER_TENANT.into()];
        c.public_url = Some(PUBLIC_URL.into());
        c.policy = Some(path);
    })
    .await;
    env.install().await;
    let mut other = env.activity(INSTALLED);
    other["id"] = json!("f:other-install");
    other["conversation"]["id"] = json!(OTHER);
    other["channelData"]["tenant"]["id"] = json!(OTHER_TENANT);
    other["conversation"]["tenantId"] = json!(OTHER_TENANT);
    assert_eq!(env.send(&other).await, 200);
    assert_eq!(env.conversations().await.len(), 2);

    let _test = waiting_with_channel(&env, "test", "podinfo", 42, OTHER).await;
    let posted = env.until_cards("POST", 1).await;
    assert_eq!(
        posted[0].conversation_id, CHANNEL,
        "the check's metadata does not choose another tenant's channel"
    );
    let ignored =
        "gatebot_notifications_dropped_total{sink=\"teams\",reason=\"teams_channel_not_bound\"}";
    assert_eq!(env.server.metric(ignored).await, 1.0);

    let _billing = waiting_with_channel(&env, "billing", "api", 43, OTHER).await;
    let posted = env.until_cards("POST", 2).await;
    assert_eq!(posted[1].conversation_id, OTHER, "bound by the policy");
    assert!(texts(&card_of(&posted[1])).contains("billing"));
    assert_eq!(env.server.metric(ignored).await, 1.0);
    assert!(env.cards("POST").iter().all(|s| s.status == 200));
    env.server.stop().await;
}

/// A typed command acknowledged while the store could not apply it (a row
/// lock from a second connection, while gatebot's clock moves on two
/// minutes) says in its reply, once applied, that it was applied late and
/// when (issue 41, point 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_command_applied_late_says_so_in_its_reply() {
    if gatebot_testkit::harness::postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let env = env(Backend::Postgres).await;
    // A stored row to lock: the promote gate, open.
    env.server.open("/gates/promote/pr/42").await;
    let stuck = gatebot_testkit::row_lock::RowLock::gates(&env.db.url, "%/acme/shop/pr/42").await;
    assert!(stuck.rows >= 1, "the PR's gate rows are locked");
    let mut activity = env.message();
    activity["id"] = json!("late-1");
    activity["text"] = json!("<at>ridotest</at> hold 42 the pager is ringing");
    activity["from"]["aadObjectId"] = json!(RIDO);
    assert_eq!(
        env.post(Some(&env.token_for(&activity)), &activity).await,
        200,
        "acknowledged"
    );
    // What the delivery waits through, on gatebot's clock.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.clock.advance(120_000);
    stuck.release().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let reply = loop {
        let sent = env.bot.sent();
        if let Some(s) = sent.iter().find(|s| s.activity["replyToId"] == "late-1") {
            break s.activity["text"].as_str().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no reply: {sent:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reply.contains("held"), "{reply}");
    assert!(reply.contains("2 min after it was received"), "{reply}");
}

/// A card's click acknowledged while the store could not apply it (a row
/// lock from a second connection, while gatebot's clock moves on two
/// minutes) is answered in the card's thread, once applied, with when it
/// was received, and the card shows the decision. What the click writes is
/// made before its unit and committed with it (issue 43, point 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_click_applied_late_says_so_in_the_cards_thread() {
    if gatebot_testkit::harness::postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let env = cards_env(Backend::Postgres).await;
    env.install().await;
    // A stored row to lock: the start gate, opened and closed again.
    env.server.open("/gates/start/pr/42").await;
    env.server.close("/gates/start/pr/42").await;
    let _sim = waiting_at_start(&env).await;
    let card = card_of(&env.until_cards("POST", 1).await[0]);
    let stuck = gatebot_testkit::row_lock::RowLock::gates(&env.db.url, "%/acme/shop/pr/42").await;
    assert!(stuck.rows >= 1, "the PR's gate rows are locked");
    let (status, _) = env.click("f:late-click", &card, "approve", RIDO).await;
    assert_eq!(status, 200, "acknowledged");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.clock.advance(120_000);
    stuck.release().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let reply = loop {
        let sent = env.bot.sent();
        if let Some(s) = sent
            .iter()
            .find(|s| s.activity["replyToId"] == "f:late-click")
        {
            break s.activity["text"].as_str().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no reply: {sent:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reply.contains("'s click was"), "{reply}");
    assert!(reply.contains("2 min after it was received"), "{reply}");
    assert_eq!(env.gate("/start/acme/shop/pr/42").await["state"], "open");
    env.server.drained().await;
    let cards = env.cards("PUT");
    let last = card_of(cards.last().expect("the card was updated"));
    assert!(texts(&last).contains("Approved by Rido"), "{last}");
    env.server.stop().await;
}

/// A freeze typed to the bot is answered with the freeze it made, and an
/// unfreeze with how many it lifted (they were answered "opened ").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_freeze_and_unfreeze_say_what_they_did() {
    let env = env(Backend::Sqlite).await;
    let reply = |id: &str| {
        env.bot
            .sent()
            .iter()
            .find(|s| s.activity["replyToId"] == id)
            .map(|s| s.activity["text"].as_str().unwrap_or("").to_string())
    };
    env.say("fz-1", "freeze all for 2h maintenance window", RIDO)
        .await;
    let frozen = reply("fz-1").expect("answered");
    assert!(
        frozen.starts_with("Changes are frozen (all)") && frozen.contains("maintenance window"),
        "{frozen}"
    );
    env.say("fz-2", "unfreeze all", RIDO).await;
    assert_eq!(reply("fz-2").as_deref(), Some("lifted 1 freeze(s) of all"));
    env.server.stop().await;
}
