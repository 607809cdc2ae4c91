//! Named gates cannot fill the disk (issue 24, point 7), over real HTTP on
//! both stores: a gate's title and links have a size limit, creations past
//! the live quota or a token's hourly quota get 429 with the limit and a
//! Retry-After (counted in the store, so two replicas agree), and a retired
//! gate's details are pruned after the retention period, leaving its name,
//! its state and its audit lines. A retired gate's answer says it is retired.

use std::time::Duration;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{FlaggerSim, Hook, HookType, Phase, Strategy};
use gatebot_testkit::harness::{client, eventually, Backend, ADMIN_TOKEN};
use serde_json::{json, Value};

/// 2024-05-01T14:02:00Z.
const NOW: i64 = 1_714_572_120_000;
const PIPELINE_TOKEN: &str = "test-pipeline-token";
const HOUR: i64 = 3_600_000;

async fn env(backend: Backend, live: u32, per_hour: u32) -> ChatOps {
    let setup = Setup {
        clock: Some(ManualClock::new(NOW)),
        ..Setup::default()
    };
    ChatOps::start_with(backend, setup, |config| {
        config.pipeline_token = Some(PIPELINE_TOKEN.to_string().into());
        config.limits.named_gates_live = live;
        config.limits.named_gates_per_hour = per_hour;
    })
    .await
}

struct Answer {
    status: u16,
    retry_after: Option<u64>,
    text: String,
}

async fn create(url: &str, token: &str, body: &Value) -> Answer {
    let r = client()
        .post(format!("{url}/api/v1/gates"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap();
    Answer {
        status: r.status().as_u16(),
        retry_after: r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()),
        text: r.text().await.unwrap(),
    }
}

fn gate(name: &str) -> Value {
    json!({"kind": "promote", "name": name})
}

async fn retire(url: &str, name: &str) -> u16 {
    client()
        .delete(format!("{url}/api/v1/gates/promote/named/{name}"))
        .bearer_auth(PIPELINE_TOKEN)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

gatebot_testkit::on_both_stores!(
    a_gate_past_its_size_limit_is_refused,
    creations_past_a_tokens_hourly_quota_get_429_with_the_limit,
    live_gates_past_the_quota_get_429_until_one_is_retired,
    concurrent_creations_on_two_replicas_never_pass_the_quota,
    a_retired_gates_details_are_pruned_after_the_retention,
);

/// Ten 2 KB links and a 200-character title were about 44 KB per gate; now a
/// gate's title, links, channel and PR take at most 2 KB together.
async fn a_gate_past_its_size_limit_is_refused(backend: Backend) {
    let env = env(backend, 500, 30).await;
    let url = &env.server.url;
    // 2000 bytes: each link alone is within its own limit.
    let link = |n: usize| format!("https://ci.example.com/{n}/{}", "x".repeat(1975));
    let big = json!({
        "kind": "promote", "name": "big", "title": "t".repeat(200),
        "links": (0..10).map(link).collect::<Vec<_>>(),
    });
    let r = create(url, PIPELINE_TOKEN, &big).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("at most 2048 bytes together"),
        "the limit is said: {}",
        r.text
    );
    let r = create(
        url,
        PIPELINE_TOKEN,
        &json!({"kind": "promote", "name": "big", "links": [link(0)]}),
    )
    .await;
    assert_eq!(r.status, 400, "one link of 2 KB with the rest: {}", r.text);
    let fits = json!({
        "kind": "promote", "name": "fits", "title": "t".repeat(200),
        "links": (0..10).map(|n| format!("https://ci.example.com/run/{n}")).collect::<Vec<_>>(),
    });
    let r = create(url, PIPELINE_TOKEN, &fits).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        env.server
            .metric(r#"gatebot_rejected_requests_total{route="/api/v1/gates",reason="too_large"}"#)
            .await,
        2.0
    );
    assert!(created(&env, "fits").await);
    assert!(
        !created(&env, "big").await,
        "nothing of the refused gate is kept"
    );
}

/// Whether the named gate `/gates/promote/named/<name>` was created.
async fn created(env: &ChatOps, name: &str) -> bool {
    let detail = env
        .server
        .api(&format!("/api/v1/gates/promote/named/{name}"))
        .await;
    !detail["named"].is_null()
}

async fn creations_past_a_tokens_hourly_quota_get_429_with_the_limit(backend: Backend) {
    let env = env(backend, 500, 3).await;
    let url = &env.server.url;
    let clock = env.clock.clone().unwrap();
    for n in 0..3 {
        let r = create(url, PIPELINE_TOKEN, &gate(&format!("r{n}"))).await;
        assert_eq!(r.status, 201, "{}", r.text);
        clock.advance(60_000);
    }
    let r = create(url, PIPELINE_TOKEN, &gate("r3")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(
        r.text.contains("[limits] named_gates_per_hour = 3"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("pipeline created 3 named gates in the last hour"),
        "{}",
        r.text
    );
    // The oldest of the three leaves the window 57 minutes from now.
    assert_eq!(r.retry_after, Some(57 * 60), "{}", r.text);
    assert_eq!(
        env.server
            .metric(r#"gatebot_rejected_requests_total{route="/api/v1/gates",reason="quota"}"#)
            .await,
        1.0
    );
    // The same gate again costs nothing; another token has its own quota.
    assert_eq!(create(url, PIPELINE_TOKEN, &gate("r0")).await.status, 200);
    let r = create(url, ADMIN_TOKEN, &gate("by-admin")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // An hour after the first, one more.
    clock.advance(57 * 60_000);
    let r = create(url, PIPELINE_TOKEN, &gate("r3")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(create(url, PIPELINE_TOKEN, &gate("r4")).await.status, 429);
}

async fn live_gates_past_the_quota_get_429_until_one_is_retired(backend: Backend) {
    let env = env(backend, 2, 100).await;
    let url = &env.server.url;
    for name in ["a", "b"] {
        assert_eq!(create(url, PIPELINE_TOKEN, &gate(name)).await.status, 201);
    }
    let r = create(url, ADMIN_TOKEN, &gate("c")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(
        r.text.contains("[limits] named_gates_live = 2"),
        "{}",
        r.text
    );
    assert!(r.retry_after.is_some());
    assert_eq!(retire(url, "a").await, 200);
    assert_eq!(create(url, ADMIN_TOKEN, &gate("c")).await.status, 201);
    assert_eq!(create(url, ADMIN_TOKEN, &gate("d")).await.status, 429);
}

/// Two creations at the same moment, one on each replica (PostgreSQL; SQLite
/// has one process), with one slot left: exactly one is created, round after
/// round.
async fn concurrent_creations_on_two_replicas_never_pass_the_quota(backend: Backend) {
    let env = env(backend, 1, 1000).await;
    let other = match backend {
        Backend::Postgres => Some(env.replica().await),
        Backend::Sqlite => None,
    };
    let urls = [
        env.server.url.clone(),
        other
            .as_ref()
            .map_or(env.server.url.clone(), |o| o.url.clone()),
    ];
    for round in 0..10 {
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let tasks: Vec<_> = (0..2)
            .map(|n| {
                let url = urls[n].clone();
                let start = start.clone();
                tokio::spawn(async move {
                    let name = format!("g{round}-{n}");
                    start.wait().await;
                    (
                        create(&url, PIPELINE_TOKEN, &gate(&name)).await.status,
                        name,
                    )
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
        let mut sorted = statuses.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [201, 429], "round {round}: {answers:?}");
        let (_, made) = answers.iter().find(|(s, _)| *s == 201).unwrap();
        assert_eq!(retire(&urls[0], made).await, 200);
    }
}

/// A canary asking `url` at its promotion, waiting there.
async fn canary_waiting_at(url: String) -> FlaggerSim {
    let hooks = vec![Hook::new("promote-gate", HookType::ConfirmPromotion, url)];
    let strategy = Strategy::Canary {
        step_weight: 50,
        max_weight: 50,
    };
    let mut sim = FlaggerSim::new("podinfo", "test", strategy, hooks);
    sim.deploy("rev-0");
    sim.tick().await;
    sim.deploy("rev-1");
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    sim
}

async fn check(url: &str) -> (u16, String) {
    let r = client()
        .post(url)
        .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "rev-1"}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn a_retired_gates_details_are_pruned_after_the_retention(backend: Backend) {
    let env = env(backend, 500, 30).await;
    let url = &env.server.url;
    let clock = env.clock.clone().unwrap();
    let path = "/gates/promote/named/release-1";
    let body = |name: &str| {
        json!({
            "kind": "promote", "name": name, "title": format!("Release {name}"),
            "links": ["https://ci.example.com/run/1"], "slack_channel": "C123",
        })
    };
    assert_eq!(
        create(url, PIPELINE_TOKEN, &body("release-1")).await.status,
        201
    );
    let _sim = canary_waiting_at(env.server.at(path)).await;
    env.server.drained().await;
    assert_eq!(retire(url, "release-1").await, 200);
    env.server.drained().await;

    // Retired: the answer says so, and points at nothing that answers 409.
    let (status, reason) = check(&env.server.at(path)).await;
    assert_eq!(status, 403);
    assert!(
        reason.starts_with("retired by pipeline via api at "),
        "{reason}"
    );
    assert!(!reason.contains("gatebot gates open"), "{reason}");
    let detail = env.server.api(&format!("/api/v1{path}")).await;
    assert_eq!(detail["named"]["title"], "Release release-1");
    let ended = |d: &Value| {
        d["waits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| !w["ended_at"].is_null())
            .count()
    };
    assert!(
        ended(&detail) >= 2,
        "the announcement and the canary's wait: {detail}"
    );
    let audit_before = detail["audit"].as_array().unwrap().len();

    // Another gate, retired two days later: 29 days on, it is kept.
    clock.advance(2 * 24 * HOUR);
    assert_eq!(
        create(url, PIPELINE_TOKEN, &body("release-2")).await.status,
        201
    );
    assert_eq!(retire(url, "release-2").await, 200);
    clock.advance(29 * 24 * HOUR);
    eventually(
        "the first retired gate pruned",
        Duration::from_secs(20),
        || async { env.server.api(&format!("/api/v1{path}")).await["named"]["pruned_at"].is_i64() },
    )
    .await;
    let kept = env
        .server
        .api("/api/v1/gates/promote/named/release-2")
        .await;
    assert_eq!(kept["named"]["title"], "Release release-2", "{kept}");
    assert!(kept["named"]["pruned_at"].is_null());

    let detail = env.server.api(&format!("/api/v1{path}")).await;
    let named = &detail["named"];
    assert!(named["pruned_at"].as_i64().unwrap() >= NOW + 31 * 24 * HOUR);
    assert_eq!(named["title"], Value::Null);
    assert_eq!(named["links"], json!([]));
    assert_eq!(named["slack_channel"], Value::Null);
    assert_eq!(named["created_by"], "pipeline");
    assert!(named["retired_at"].is_i64());
    assert_eq!(
        ended(&detail),
        0,
        "ended waits and their metadata are gone: {detail}"
    );
    assert_eq!(detail["observations"], json!([]), "{detail}");
    assert_eq!(detail["state"], "held");
    assert_eq!(
        detail["audit"].as_array().unwrap().len(),
        audit_before,
        "every audit line stays: {detail}"
    );
    // The name stays taken, and the gate stays closed and retired.
    let again = create(url, PIPELINE_TOKEN, &body("release-1")).await;
    assert_eq!(again.status, 409, "{}", again.text);
    let (status, reason) = check(&env.server.at(path)).await;
    assert_eq!(status, 403);
    assert!(
        reason.starts_with("retired by pipeline via api at "),
        "{reason}"
    );
}
