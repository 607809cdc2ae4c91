//! Wait deadlines, end to end with the Flagger simulator and the manual clock,
//! on SQLite and PostgreSQL: a canary waiting for promotion past its deadline
//! is rolled back at its next tick; at the start gate the deadline closes the
//! wait; a new revision starts a new deadline; and each is acted on once.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{
    flagger_tokens, pr_hooks, with_token, FlaggerSim, Hook, HookType, Phase, Strategy,
};
use gatebot_testkit::harness::{client, eventually, Backend};
use serde_json::Value;

/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const HOUR: i64 = 3_600_000;
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

const POLICY: &str = r#"
[[deadlines]]
kind = "promote"
after = "2h"

[[deadlines]]
kind = "start"
after = "1h"
on_deadline = "close"
repository = "acme/shop"
"#;

struct Env {
    chat: ChatOps,
    clock: Arc<ManualClock>,
}

impl std::ops::Deref for Env {
    type Target = ChatOps;
    fn deref(&self) -> &ChatOps {
        &self.chat
    }
}

async fn env(backend: Backend) -> Env {
    env_with(backend, POLICY, |_| {}).await
}

/// The Flagger token of the one cluster of [`authenticated`].
const TOKEN: &str = "flagger-token-of-prod";

/// A server whose Flagger's side takes checks with `TOKEN` only.
async fn authenticated(backend: Backend) -> Env {
    env_with(backend, POLICY, |config| {
        config.flagger_tokens = flagger_tokens(&[("prod", TOKEN)]).into();
    })
    .await
}

async fn env_with(backend: Backend, policy: &str, edit: impl FnOnce(&mut gatebot::Config)) -> Env {
    let clock = ManualClock::new(NOW);
    let setup = Setup {
        policy,
        permissions: &[],
        clock: Some(clock.clone()),
    };
    let chat = ChatOps::start_with(backend, setup, |config| {
        config.slack.approvers = vec!["UALICE".into()];
        edit(config);
    })
    .await;
    Env { chat, clock }
}

impl Env {
    /// What the housekeeping task does every few seconds, run now.
    async fn enforce(&self) -> usize {
        let n = self
            .server
            .state
            .engine
            .deadlines()
            .enforce_deadlines()
            .await
            .expect("deadlines apply");
        self.server.drained().await;
        n
    }

    /// A check as anyone inside the cluster can send it: status and answer.
    async fn check(&self, path: &str, body: Value) -> (u16, String) {
        let response = client()
            .post(format!("{}{path}", self.server.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    async fn open_waits(&self) -> usize {
        let waits = self.server.api("/api/v1/waits?open=true").await;
        waits["waits"].as_array().map_or(0, Vec::len)
    }

    async fn audit(&self, gate: &str) -> Vec<Value> {
        let a = self.server.api(&format!("/api/v1/audit?gate={gate}")).await;
        a["audit"].as_array().unwrap().clone()
    }

    fn thread_replies(&self) -> Vec<String> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("thread_ts").is_some())
            .map(|r| r.body["text"].to_string() + &r.body["blocks"].to_string())
            .collect()
    }

    fn waiting_messages(&self) -> usize {
        self.slack
            .ok("chat.postMessage")
            .iter()
            .filter(|r| r.body.get("thread_ts").is_none())
            .count()
    }
}

/// A canary of PR `pr` past its first deployment, with `revision` applied.
async fn released(env: &Env, pr: u64, revision: &str) -> FlaggerSim {
    released_with(pr_hooks(&env.server.url, pr), revision).await
}

async fn released_with(hooks: Vec<Hook>, revision: &str) -> FlaggerSim {
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Initialized);
    sim.deploy(revision);
    sim
}

gatebot_testkit::on_both_stores!(
    waiting_for_promotion_past_the_deadline_rolls_back_at_the_next_tick,
    the_start_gate_deadline_closes_the_wait_without_a_rollback,
    metadata_overrides_the_policy_and_a_new_revision_starts_a_new_deadline,
    a_deadline_rolls_back_only_the_canary_and_revision_whose_wait_ran_out,
    metadata_from_an_unauthenticated_check_sets_no_deadline,
    a_check_without_the_clusters_token_is_refused_and_changes_nothing,
    deadlines_and_reminders_are_kept_past_fifty_thousand_other_waits,
);

async fn waiting_for_promotion_past_the_deadline_rolls_back_at_the_next_tick(backend: Backend) {
    let env = env(backend).await;
    env.server.open("/gates/start/pr/42").await;
    let mut sim = released(&env, 42, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    sim.tick().await;
    env.server.drained().await;

    env.clock.advance(2 * HOUR - 1000);
    assert_eq!(env.enforce().await, 0, "not yet");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion);

    env.clock.advance(2000);
    // Two passes at once (as two replicas would run them) act once.
    let state = &env.server.state;
    let (a, b) = tokio::join!(
        state.engine.deadlines().enforce_deadlines(),
        state.engine.deadlines().enforce_deadlines()
    );
    assert_eq!(a.unwrap() + b.unwrap(), 1, "acted on once");
    assert_eq!(env.enforce().await, 0, "and never again");
    // Pinned to the revision that waited before Flagger asks: it never rolls
    // back the next one.
    let pins = env
        .server
        .api("/api/v1/gates/rollback/acme/shop/pr/42")
        .await["pins"]
        .clone();
    assert_eq!(pins, serde_json::json!({"test/podinfo": "rev-b"}));
    let rollbacks = sim.rollbacks();
    sim.tick().await;
    assert_eq!(
        sim.rollbacks(),
        rollbacks + 1,
        "rolled back at the next tick"
    );
    assert!(sim.run_until(|s| s.phase() == Phase::Failed, 3).await);
    let answer = sim
        .calls_of(HookType::Rollback)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(
        answer.contains("approved by policy via gatebot"),
        "{answer}"
    );

    // Audited as the policy's doing, pinned to the revision that waited.
    let audit = env.audit("/gates/rollback/acme/shop/pr/42").await;
    let open = audit
        .iter()
        .find(|e| e["action"] == "open")
        .expect("opened");
    assert_eq!(open["actor"]["name"], "policy");
    let reason = open["reason"].as_str().unwrap();
    assert!(
        reason.contains("waited 2h at /gates/promote/acme/shop/pr/42 for revision rev-b"),
        "{reason}"
    );
    // The Slack thread and the PR are told why.
    let replies = env.thread_replies();
    assert!(
        replies
            .iter()
            .any(|r| r.contains("Deadline passed") && r.contains("rolls it back")),
        "{replies:?}"
    );
    let comment = env.github.status_comments(42).remove(0);
    assert!(
        comment
            .body
            .contains("without a decision: the deadline rolls it back"),
        "{}",
        comment.body
    );
}

async fn the_start_gate_deadline_closes_the_wait_without_a_rollback(backend: Backend) {
    let env = env(backend).await;
    let mut sim = released(&env, 7, "rev-b").await;
    sim.tick().await;
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Waiting);
    env.server.drained().await;
    assert_eq!(env.waiting_messages(), 1);

    env.clock.advance(HOUR);
    assert_eq!(env.enforce().await, 1);
    let audit = env.audit("/gates/start/acme/shop/pr/7").await;
    let deadline = audit
        .iter()
        .find(|e| e["action"] == "deadline")
        .expect("audited");
    assert_eq!(deadline["actor"]["name"], "policy");
    // Flagger sends the last applied revision while it waits to start.
    assert_eq!(deadline["revision"], "rev-a");
    // The message loses its buttons; Flagger still waits, and nothing is
    // announced again while it asks.
    let updates = env.slack.ok("chat.update");
    let last = updates.last().expect("the message was rewritten");
    assert!(
        !last.body["blocks"].to_string().contains("gatebot_approve"),
        "{}",
        last.body
    );
    for _ in 0..3 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::Waiting);
    env.server.drained().await;
    assert_eq!(env.waiting_messages(), 1, "not announced again");
    assert_eq!(env.enforce().await, 0);
    // No rollback gate was opened at the start gate (fluxcd/flagger#1432).
    let rollback = env
        .server
        .api("/api/v1/gates/rollback/acme/shop/pr/7")
        .await;
    assert_eq!(rollback["state"], "closed", "{rollback}");
}

/// A deadline in the metadata of an authenticated check (the cluster's token).
async fn metadata_overrides_the_policy_and_a_new_revision_starts_a_new_deadline(backend: Backend) {
    let env = authenticated(backend).await;
    env.server.open("/gates/start/pr/9").await;
    let hooks = with_token(pr_hooks(&env.server.url, 9), TOKEN)
        .into_iter()
        .map(|h| match h.hook_type {
            HookType::ConfirmPromotion => h
                .with_metadata("deadline", "30m")
                .with_metadata("on_deadline", "nothing"),
            _ => h,
        })
        .collect();
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    sim.tick().await;
    env.server.drained().await;

    env.clock.advance(30 * 60_000);
    assert_eq!(
        env.enforce().await,
        1,
        "30m from the metadata, not the policy's 2h"
    );
    for _ in 0..2 {
        sim.tick().await;
    }
    assert_eq!(
        sim.phase(),
        Phase::WaitingPromotion,
        "on_deadline nothing: no rollback"
    );
    let replies = env.thread_replies();
    assert!(
        replies.iter().any(|r| r.contains("the deadline passed")),
        "{replies:?}"
    );

    // A new revision is a new wait, with a deadline of its own from its start.
    sim.deploy("rev-c");
    assert!(
        sim.run_until(
            |s| s.phase() == Phase::WaitingPromotion && s.checksum() == "rev-c",
            10
        )
        .await
    );
    sim.tick().await;
    env.server.drained().await;
    assert_eq!(env.enforce().await, 0, "the new wait just started");
    env.clock.advance(30 * 60_000);
    assert_eq!(env.enforce().await, 1);
}

/// The first reproduction of the trust issue: a made-up canary with a one-second
/// deadline in its metadata, and the real canary on the same PR. Metadata from
/// an unauthenticated check is not heard; when the policy's own deadline rolls
/// the real canary back, only it, at the revision that waited, gets 200 at
/// the rollback gate: every other canary, at any revision, gets 403.
async fn a_deadline_rolls_back_only_the_canary_and_revision_whose_wait_ran_out(backend: Backend) {
    let env = env(backend).await;
    let canary = |name: &str, ns: &str, checksum: &str| serde_json::json!({"name": name, "namespace": ns, "phase": "Progressing", "checksum": checksum});
    let evil = serde_json::json!({"name": "evil", "namespace": "test", "phase": "Progressing",
        "checksum": "x", "metadata": {"deadline": "1s", "on_deadline": "rollback"}});
    let (status, _) = env
        .check("/gates/promote/pr/800", canary("podinfo", "test", "real1"))
        .await;
    assert_eq!(status, 403);
    env.clock.advance(60_000);
    assert_eq!(env.check("/gates/promote/pr/800", evil).await.0, 403);
    env.clock.advance(8_000);
    assert_eq!(
        env.enforce().await,
        0,
        "a caller's metadata sets no deadline"
    );
    // The policy's 2h passes for podinfo's wait, which started first.
    env.clock.advance(2 * HOUR - 68_000);
    assert_eq!(env.enforce().await, 1);
    let rollback = "/gates/rollback/pr/800";
    let (status, answer) = env
        .check(rollback, canary("podinfo", "test", "real1"))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.starts_with("approved by policy via gatebot"),
        "{answer}"
    );
    for (name, ns, checksum) in [
        ("evil", "test", "x"),
        ("backend", "prod", "real1"),
        ("podinfo", "test", "real2"),
        ("stranger", "other", "s1"),
    ] {
        let (status, answer) = env.check(rollback, canary(name, ns, checksum)).await;
        assert_eq!(status, 403, "{ns}/{name} at {checksum}: {answer}");
    }
    // Its own deadline by the policy ends evil's wait too: that rolls back
    // evil alone, and podinfo's rollback stands.
    env.clock.advance(60_000);
    assert_eq!(env.enforce().await, 1);
    assert_eq!(
        env.check(rollback, canary("evil", "test", "x")).await.0,
        200
    );
    assert_eq!(
        env.check(rollback, canary("podinfo", "test", "real1"))
            .await
            .0,
        200
    );
    assert_eq!(
        env.check(rollback, canary("backend", "prod", "real1"))
            .await
            .0,
        403
    );
}

/// Without a Flagger token, a check's metadata can't set a deadline, unless the
/// policy allows it (`[deadline_metadata] allow = true`).
async fn metadata_from_an_unauthenticated_check_sets_no_deadline(backend: Backend) {
    let body = serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "Progressing",
        "checksum": "r1", "metadata": {"deadline": "1s"}});
    let allowing = format!("{POLICY}\n[deadline_metadata]\nallow = true\n");
    for (policy, acted) in [(POLICY, 0), (allowing.as_str(), 1)] {
        let env = env_with(backend, policy, |_| {}).await;
        assert_eq!(env.check("/gates/traffic/pr/5", body.clone()).await.0, 403);
        env.clock.advance(5_000);
        // The server's own pass may act first, on its tick: both count.
        let by_test = env.enforce().await;
        let passed = "gatebot_wait_deadlines_passed_total";
        eventually(policy, Duration::from_secs(5), || async {
            by_test + env.server.metric(passed).await as usize == acted
        })
        .await;
        // Settled: no later pass acts on it either.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let all = by_test + env.server.metric(passed).await as usize;
        assert_eq!(all, acted, "{policy}");
    }
}

/// With `GATEBOT_FLAGGER_TOKENS`, a check or an event without the token, or
/// with another, is 401: no wait starts, nothing is recorded, it is counted.
async fn a_check_without_the_clusters_token_is_refused_and_changes_nothing(backend: Backend) {
    let env = authenticated(backend).await;
    let body = serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "r1"});
    for path in [
        "/gates/promote/pr/5".to_string(),
        "/gates/promote/pr/5?token=wrong".to_string(),
        "/gates/t/wrong/promote/pr/5".to_string(),
        "/gates/promote".to_string(),
        "/gate/check".to_string(),
        "/flagger/events".to_string(),
    ] {
        let (status, answer) = env.check(&path, body.clone()).await;
        assert_eq!(status, 401, "{path}: {answer}");
        assert!(answer.starts_with("unauthorized: "), "{answer}");
        assert!(!answer.contains(TOKEN));
    }
    assert_eq!(env.open_waits().await, 0);
    let events = env.server.api("/api/v1/events").await;
    assert_eq!(
        events["events"].as_array().map(Vec::len),
        Some(0),
        "{events}"
    );
    let refused = env
        .server
        .metric("gatebot_rejected_requests_total{route=\"/gates/{kind}/{*scope}\",reason=\"flagger_token_missing\"}")
        .await;
    assert_eq!(refused, 1.0);
    // The token in the path or the query names the cluster, and the wait starts.
    let (status, answer) = env
        .check(&format!("/gates/t/{TOKEN}/promote/pr/5"), body.clone())
        .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.starts_with("waiting: "), "{answer}");
    let (status, _) = env
        .check(&format!("/gates/promote/pr/6?token={TOKEN}"), body)
        .await;
    assert_eq!(status, 403);
    assert_eq!(env.open_waits().await, 2);
    let waits = env.server.api("/api/v1/waits").await;
    assert!(
        waits["waits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["cluster"] == "prod"),
        "{waits}"
    );
}

/// Waits of made-up canaries that no deadline or reminder applies to, as many
/// as a flood of checks would leave, written straight into the store.
async fn flood(env: &Env, waits: usize) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&env.db.url).await.unwrap();
    for batch in 0..waits.div_ceil(1000) {
        let rows: Vec<String> = (batch * 1000..((batch + 1) * 1000).min(waits))
            .map(|n| format!("('/gates/traffic/canary/junk/c{n}', 'junk/c{n}', 'x', 'Progressing', '{{}}', {NOW})"))
            .collect();
        let sql = format!(
            "INSERT INTO waits (gate_key, canary, checksum, phase, metadata, started_at) VALUES {}",
            rows.join(", ")
        );
        sqlx::query(&sql).execute(&mut conn).await.unwrap();
    }
}

/// Every wait with a deadline or a reminder is acted on in its pass, however
/// many other waits there are: housekeeping reads only the ones that are due.
async fn deadlines_and_reminders_are_kept_past_fifty_thousand_other_waits(backend: Backend) {
    let policy = format!("{POLICY}\n[reminders]\nat = [\"30m\"]\nkinds = [\"promote\"]\n");
    let env = env_with(backend, &policy, |_| {}).await;
    flood(&env, 50_000).await;
    // What a restart does: the waits in progress get the policy's timers.
    let started = std::time::Instant::now();
    assert_eq!(
        env.server
            .state
            .engine
            .deadlines()
            .schedule_waits()
            .await
            .unwrap(),
        0
    );
    eprintln!(
        "timers of 50,000 waits looked at in {:?}",
        started.elapsed()
    );

    let body = serde_json::json!({"name": "podinfo", "namespace": "test", "phase": "WaitingPromotion", "checksum": "r1"});
    assert_eq!(env.check("/gates/promote/pr/12", body.clone()).await.0, 403);
    env.clock.advance(30 * 60_000);
    let state = &env.server.state;
    assert_eq!(
        state
            .engine
            .reminders()
            .send_reminders(&state.policy)
            .await
            .unwrap(),
        1,
        "reminded"
    );
    env.clock.advance(2 * HOUR);
    assert_eq!(env.enforce().await, 1, "rolled back");
    let rollback = env.check("/gates/rollback/pr/12", body).await;
    assert_eq!(rollback.0, 200, "{}", rollback.1);
}

/// `check-config` says whether Flagger's door is open and warns where a
/// deadline could roll back without tokens; a token pasted in place of its
/// hash is refused and never repeated.
#[test]
fn check_config_tells_who_may_reach_flaggers_side() {
    let run = |envs: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"));
        cmd.arg("check-config")
            .current_dir(dir.path())
            .env_clear()
            .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
            .env("GATEBOT_POLICY", "policy.toml");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, open) = run(&[]);
    assert!(ok, "{open}");
    assert!(open.contains("flagger:         open: no GATEBOT_FLAGGER_TOKENS, so anyone who can reach the port can create waits"), "{open}");
    assert!(open.contains("warning:         deadline rollbacks without Flagger tokens: anyone who can reach the port can pose as a canary"), "{open}");
    let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let (ok, closed) = run(&[("GATEBOT_FLAGGER_TOKENS", &format!("prod-eu={hash}"))]);
    assert!(ok, "{closed}");
    assert!(
        closed.contains("flagger:         checks need a token, of cluster prod-eu"),
        "{closed}"
    );
    assert!(
        !closed.contains("warning:         deadline rollbacks"),
        "{closed}"
    );
    let (ok, pasted) = run(&[("GATEBOT_FLAGGER_TOKENS", "prod-eu=hunter2-the-token")]);
    assert!(!ok, "{pasted}");
    assert!(
        pasted.contains("GATEBOT_FLAGGER_TOKENS: `prod-eu`: the value must be the token's SHA-256"),
        "{pasted}"
    );
    assert!(!pasted.contains("hunter2"), "{pasted}");
}

#[test]
fn check_config_names_the_bad_deadline_and_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("policy.toml"),
        "[[deadlines]]\nkind = \"start\"\nafter = \"1h\"\non_deadline = \"rollback\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .arg("check-config")
        .current_dir(dir.path())
        .env_clear()
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
        .env("GATEBOT_POLICY", "policy.toml")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("problem:")
            && text.contains("deadlines[0]")
            && text.contains("write \"close\" or \"nothing\""),
        "{text}"
    );
}
