//! Open waits are bounded (src/core/bounds.rs), on SQLite and PostgreSQL: a
//! wait whose canary stopped asking ends as abandoned and its message says
//! so; past the bound at one gate the oldest made-up wait ends first, never
//! that of a canary that keeps asking, and every check is still answered;
//! an evicted made-up wait leaves no audit entry.

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::harness::{client, Backend};
use serde_json::{json, Value};

/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const MINUTE: i64 = 60_000;
/// `OPEN_WAITS_PER_GATE`.
const PER_GATE: usize = 100;

struct Env {
    chat: ChatOps,
    clock: Arc<ManualClock>,
}

async fn env(backend: Backend) -> Env {
    let clock = ManualClock::new(NOW);
    let setup = Setup {
        policy: "",
        permissions: &[],
        clock: Some(clock.clone()),
    };
    let chat = ChatOps::start(backend, setup).await;
    Env { chat, clock }
}

impl Env {
    /// A check as anyone inside the cluster can send it: status and answer.
    async fn check(&self, pr: u64, name: &str, checksum: &str) -> (u16, String) {
        let body = json!({"name": name, "namespace": "test", "phase": "Progressing", "checksum": checksum});
        let r = client()
            .post(format!("{}/gates/promote/pr/{pr}", self.chat.server.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn waits(&self, open: bool) -> Vec<Value> {
        let path = format!("/api/v1/waits?open={open}");
        let waits = self.chat.server.api(&path).await;
        waits["waits"].as_array().cloned().unwrap_or_default()
    }

    /// What housekeeping does every few seconds, now.
    async fn housekeeping(&self) {
        let engine = &self.chat.server.state.engine;
        engine
            .events()
            .flush_seen()
            .await
            .expect("last-seen times written");
        engine
            .bounds()
            .end_silent_waits()
            .await
            .expect("silent waits ended");
        self.chat.server.drained().await;
    }
}

gatebot_testkit::on_both_stores!(
    a_canary_that_stops_asking_has_its_wait_abandoned_and_told,
    past_the_bound_the_oldest_made_up_wait_ends_and_a_canary_that_asks_stays,
);

async fn a_canary_that_stops_asking_has_its_wait_abandoned_and_told(backend: Backend) {
    let env = env(backend).await;
    let (status, answer) = env.check(7, "podinfo", "r1").await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.starts_with("waiting: "), "{answer}");
    env.chat.server.drained().await;
    assert!(env.chat.waiting_message("pr/7").is_some(), "announced");
    // Asking now and then keeps the wait open.
    env.clock.advance(20 * MINUTE);
    assert_eq!(env.check(7, "podinfo", "r1").await.0, 403);
    env.housekeeping().await;
    env.clock.advance(29 * MINUTE);
    env.housekeeping().await;
    assert_eq!(
        env.waits(true).await.len(),
        1,
        "silent for 29 minutes: still waiting"
    );
    let updates = env.chat.slack.ok("chat.update").len();

    env.clock.advance(2 * MINUTE);
    env.housekeeping().await;
    assert!(
        env.waits(true).await.is_empty(),
        "silent for 31 minutes: abandoned"
    );
    let ended = env.waits(false).await;
    assert_eq!(ended[0]["outcome"], "abandoned", "{ended:?}");
    assert!(
        env.chat.slack.ok("chat.update").len() > updates,
        "the waiting message is rewritten as for any ending"
    );
    // Asking again is a new wait, answered as before.
    let (status, answer) = env.check(7, "podinfo", "r1").await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.starts_with("waiting: "), "{answer}");
    assert_eq!(env.waits(true).await.len(), 1);
}

async fn past_the_bound_the_oldest_made_up_wait_ends_and_a_canary_that_asks_stays(
    backend: Backend,
) {
    let env = env(backend).await;
    assert_eq!(env.check(9, "podinfo", "r1").await.0, 403);
    for i in 0..PER_GATE / 2 {
        env.clock.advance(10);
        assert_eq!(env.check(9, &format!("made-up-{i}"), "x").await.0, 403);
    }
    // The real canary asks again at its next interval; the made-up ones never do.
    env.clock.advance(MINUTE);
    assert_eq!(env.check(9, "podinfo", "r1").await.0, 403);
    env.housekeeping().await;
    for i in PER_GATE / 2..PER_GATE + 10 {
        env.clock.advance(10);
        let (status, answer) = env.check(9, &format!("made-up-{i}"), "x").await;
        assert_eq!(status, 403, "{answer}");
        assert!(answer.starts_with("waiting: "), "{answer}");
    }
    let open = env.waits(true).await;
    assert_eq!(open.len(), PER_GATE, "bounded at the gate");
    let names: Vec<&str> = open.iter().filter_map(|w| w["canary"].as_str()).collect();
    assert!(
        names.contains(&"test/podinfo"),
        "the canary that asks stays"
    );
    for i in 0..11 {
        let gone = format!("test/made-up-{i}");
        assert!(
            !names.contains(&gone.as_str()),
            "{gone} was among the oldest"
        );
    }
    let evicted = env
        .waits(false)
        .await
        .iter()
        .filter(|w| w["outcome"] == "evicted")
        .count();
    assert_eq!(evicted, 11);
    // An evicted made-up wait leaves no audit entry (kept a year, a flood's
    // would grow the store); the wait of a canary that asked again keeps its.
    let audit = env
        .chat
        .server
        .api("/api/v1/audit?gate=/gates/promote/pr/9&limit=500")
        .await;
    let waited: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "wait")
        .filter_map(|e| e["canary"].as_str())
        .collect();
    assert!(waited.contains(&"test/podinfo"), "{waited:?}");
    for i in 0..11 {
        let gone = format!("test/made-up-{i}");
        assert!(!waited.contains(&gone.as_str()), "{gone}'s entry stayed");
    }
    assert!(
        waited.contains(&"test/made-up-11"),
        "an open wait keeps its entry"
    );
    let refused = env
        .chat
        .server
        .metric("gatebot_budget_refused_total{what=\"wait\",cluster=\"\"}")
        .await;
    assert_eq!(refused, 11.0);
    // The real canary is still answered as its gate stands.
    env.chat.server.open("/gates/promote/pr/9").await;
    let (status, answer) = env.check(9, "podinfo", "r1").await;
    assert_eq!(status, 200, "{answer}");
}

/// One cluster's flood spends that cluster's budget only (issue 41, C):
/// made-up canaries at cluster a's gates, with a's token, start waits until
/// a's budget is spent (counted by cluster), and cluster b's canary still
/// starts its wait and is told, as before the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_at_one_cluster_spends_only_its_own_budget() {
    use gatebot_testkit::flagger::flagger_tokens;
    use gatebot_testkit::harness::{TestDb, TestServer};
    const BUDGET: usize = 20;
    let db = TestDb::new(Backend::Sqlite).await;
    let mut config = db.config();
    config.flagger_tokens = flagger_tokens(&[("a", "token-of-a"), ("b", "token-of-b")]).into();
    let server = TestServer::start(config, Default::default()).await;
    server.state.engine.budget().limit_budget(BUDGET as u32);
    let check = |token: &'static str, name: String| {
        let url = server.at(&format!("/gates/t/{token}/promote/acme/shop/pr/7"));
        async move {
            let body = json!({"name": name, "namespace": "test", "phase": "Progressing", "checksum": "r1"});
            let r = client().post(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    for n in 0..2 * BUDGET {
        let (status, answer) = check("token-of-a", format!("made-up-{n}")).await;
        assert_eq!(status, 403, "answered as the gate stands: {answer}");
    }
    let (status, answer) = check("token-of-b", "real".to_string()).await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.starts_with("waiting: "), "{answer}");
    let waits = server.api("/api/v1/waits?open=true").await;
    let open: Vec<&str> = waits["waits"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["canary"].as_str())
        .collect();
    assert!(open.contains(&"test/real"), "b's canary waits: {open:?}");
    let of_a = open
        .iter()
        .filter(|c| c.starts_with("test/made-up-"))
        .count();
    assert_eq!(of_a, BUDGET, "a's waits stop at its budget");
    let refused = |cluster: &str| {
        format!("gatebot_budget_refused_total{{what=\"wait\",cluster=\"{cluster}\"}}")
    };
    assert_eq!(server.metric(&refused("a")).await, BUDGET as f64);
    assert_eq!(server.metric(&refused("b")).await, 0.0);
}
