//! Microsoft Teams, the bot's endpoint: a fake Bot Framework (metadata and
//! key set served by the test, keys made and tokens minted by the test)
//! against gatebot over real HTTP, on SQLite and on PostgreSQL. Every token
//! the spec refuses is answered 401, counted, and stores nothing.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{Clock, ManualClock, SharedClock};
use gatebot::testing::notify::WorkerSettings;
use gatebot::Options;
use gatebot_testkit::fake_teams::{claims, unsigned, FakeBotFramework, TestKey};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Phase, Strategy};
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

    /// `token` with `activity` is answered 401, counted under `reason`,
    /// and stores nothing.
    async fn assert_refused(
        &self,
        what: &str,
        token: Option<&str>,
        activity: &Value,
        reason: &str,
    ) {
        let before = self.refused(reason).await;
        let stored = self.stored().await;
        assert_eq!(self.post(token, activity).await, 401, "{what}");
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
        why.contains("rido is not a Teams approver") && why.contains("GATEBOT_TEAMS_APPROVERS"),
        "{why}"
    );

    env.say("2", "hold 42 not yet", RIDO).await;
    assert_eq!(env.gate("/promote/acme/shop/pr/42").await["state"], "held");
    env.say("3", "unhold 42", RIDO).await;
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
    replayed_once,
    key_rotation,
    typed_commands,
    answers_are_posted
);
