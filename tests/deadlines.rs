//! Wait deadlines, end to end with the Flagger simulator and the manual clock,
//! on SQLite and PostgreSQL: a canary waiting for promotion past its deadline
//! is rolled back at its next tick; at the start gate the deadline closes the
//! wait; a new revision starts a new deadline; and each is acted on once.

use std::sync::Arc;

use gatebot::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::Backend;
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
    let clock = ManualClock::new(NOW);
    let setup = Setup {
        policy: POLICY,
        permissions: &[],
        clock: Some(clock.clone()),
    };
    let chat = ChatOps::start_with(backend, setup, |config| {
        config.slack.approvers = vec!["UALICE".into()];
    })
    .await;
    Env { chat, clock }
}

impl Env {
    /// What the housekeeping task does every few seconds, run now.
    async fn enforce(&self) -> usize {
        let state = &self.server.state;
        let n = state
            .engine
            .enforce_deadlines(state.policy.deadlines())
            .await
            .expect("deadlines apply");
        self.server.drained().await;
        n
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
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&env.server.url, pr));
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
    let rules = state.policy.deadlines();
    let (a, b) = tokio::join!(
        state.engine.enforce_deadlines(rules),
        state.engine.enforce_deadlines(rules)
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

async fn metadata_overrides_the_policy_and_a_new_revision_starts_a_new_deadline(backend: Backend) {
    let env = env(backend).await;
    env.server.open("/gates/start/pr/9").await;
    let hooks = pr_hooks(&env.server.url, 9)
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
