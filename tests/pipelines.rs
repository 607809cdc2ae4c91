//! The design's generic gates, end to end over real HTTP on both stores:
//! namespace gates (`/gates/<kind>/<namespace>`) and named gates a pipeline
//! creates (`POST /api/v1/gates`), announced in Slack and on the PR before
//! Flagger asks, approved by a click, waited on by `gatebot wait`.

use std::time::Duration;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::fake_slack::Request;
use gatebot_testkit::flagger::{FlaggerSim, Hook, HookType, Phase, Strategy};
use gatebot_testkit::harness::{client, Backend, ADMIN_TOKEN};
use serde_json::{json, Value};

/// 2024-05-01T14:02:00Z: messages show fixed times.
const NOW: i64 = 1_714_572_120_000;
const PIPELINE_TOKEN: &str = "test-pipeline-token";
const ALICE: &str = "UALICE";
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

struct Env {
    chat: ChatOps,
}

impl std::ops::Deref for Env {
    type Target = ChatOps;
    fn deref(&self) -> &ChatOps {
        &self.chat
    }
}

async fn env(backend: Backend) -> Env {
    let setup = Setup {
        policy: "",
        permissions: &[],
        clock: Some(ManualClock::new(NOW)),
    };
    let chat = ChatOps::start_with(backend, setup, |config| {
        config.pipeline_token = Some(PIPELINE_TOKEN.to_string().into());
        config.slack.approvers = vec![ALICE.to_string()];
    })
    .await;
    Env { chat }
}

impl Env {
    async fn create(&self, token: &str, body: &Value) -> (u16, Value) {
        let r = client()
            .post(self.server.at("/api/v1/gates"))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap();
        answer(r).await
    }

    async fn retire(&self, gate: &str) -> (u16, Value) {
        let r = client()
            .delete(self.server.at(&format!("/api/v1{gate}")))
            .bearer_auth(PIPELINE_TOKEN)
            .send()
            .await
            .unwrap();
        answer(r).await
    }

    async fn detail(&self, gate: &str) -> Value {
        self.server
            .api(&format!(
                "/api/v1/gates{}",
                gate.trim_start_matches("/gates")
            ))
            .await
    }

    /// Waiting messages posted (not thread replies).
    fn waiting_messages(&self) -> Vec<Request> {
        self.slack
            .ok("chat.postMessage")
            .into_iter()
            .filter(|r| r.body.get("thread_ts").is_none())
            .collect()
    }

    async fn click(&self, user: &str, action: &str, message: &Request, trigger: &str) -> u16 {
        self.chat
            .click(user, "alice", action, message, trigger)
            .await
    }
}

/// The status and the JSON answer; a refusal's plain text as a JSON string.
async fn answer(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

fn said(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

impl Env {
    /// `/gatebot <text>` from `user`, signed as Slack signs it.
    async fn slash(&self, user: &str, text: &str, trigger: &str) -> (u16, String) {
        self.chat.slash(user, "alice", text, trigger).await
    }
}

fn text_of(message: &Request) -> String {
    message.body["blocks"].to_string()
}

/// A canary of `namespace` whose promotion asks `promote_url`, past its first
/// deployment, with `revision` applied.
async fn canary(name: &str, namespace: &str, promote_url: String, revision: &str) -> FlaggerSim {
    let hooks = vec![Hook::new(
        "promote-gate",
        HookType::ConfirmPromotion,
        promote_url,
    )];
    let mut sim = FlaggerSim::new(name, namespace, CANARY, hooks);
    sim.deploy("rev-0");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::Initialized);
    sim.deploy(revision);
    sim
}

gatebot_testkit::on_both_stores!(
    one_namespace_approval_promotes_each_canary_once,
    named_gate_is_announced_clicked_and_passed,
    creating_twice_is_idempotent_and_a_different_body_conflicts,
    retiring_holds_the_gate_and_ends_its_waits,
    gatebot_wait_exits_on_approval_and_on_rejection,
    slash_commands_open_namespace_and_named_gates,
);

async fn slash_commands_open_namespace_and_named_gates(backend: Backend) {
    let env = env(backend).await;
    let (status, _) = env
        .create(PIPELINE_TOKEN, &json!({"kind": "start", "name": "r3"}))
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        env.slash(ALICE, "promote ns/test all services", "T1")
            .await
            .0,
        200
    );
    assert_eq!(env.slash(ALICE, "start named/r3", "T2").await.0, 200);
    let (status, bad) = env.slash(ALICE, "promote ns/Bad_NS", "T3").await;
    assert_eq!(status, 200);
    env.server.drained().await;
    let ns = env.detail("/gates/promote/test").await;
    assert_eq!(ns["state"], "open", "{ns}");
    assert_eq!(ns["by"]["source"], "slack");
    assert_eq!(ns["reason"], "all services");
    let named = env.detail("/gates/start/named/r3").await;
    assert_eq!(named["state"], "open", "{named}");
    // A bad namespace is answered with what is allowed, and opens nothing.
    assert!(bad.contains("not a Kubernetes namespace"), "{bad}");
    let gates = env.server.api("/api/v1/gates").await["gates"].clone();
    assert_eq!(gates.as_array().unwrap().len(), 2, "{gates}");
    // Holding a namespace holds its start, promote and traffic gates.
    assert_eq!(env.slash(ALICE, "hold ns/test freeze", "T4").await.0, 200);
    env.server.drained().await;
    for kind in ["start", "promote", "traffic"] {
        let g = env.detail(&format!("/gates/{kind}/test")).await;
        assert_eq!(g["state"], "held", "{kind}: {g}");
    }
}

async fn one_namespace_approval_promotes_each_canary_once(backend: Backend) {
    let env = env(backend).await;
    let gate = env.server.at("/gates/promote/test");
    let mut podinfo = canary("podinfo", "test", gate.clone(), "pod-1").await;
    let mut backend_sim = canary("backend", "test", gate.clone(), "back-1").await;
    for sim in [&mut podinfo, &mut backend_sim] {
        assert!(
            sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
                .await
        );
        sim.tick().await;
        assert_eq!(sim.phase(), Phase::WaitingPromotion, "the gate is closed");
    }
    // The waiting message lists both canaries of the namespace.
    env.server.drained().await;
    let waits = env.detail("/gates/promote/test").await["waits"].clone();
    assert_eq!(waits.as_array().unwrap().len(), 2, "{waits}");
    let last = env.waiting_messages().pop().expect("a waiting message");
    let text = text_of(&last);
    let both = "Waiting at this namespace gate: *test/backend*, *test/podinfo*";
    assert!(text.contains(both), "{text}");
    // The first canary's message was rewritten to list the second.
    let first_ts = "1714572120.000001";
    let updated = env.slack.ok("chat.update");
    assert!(
        updated
            .iter()
            .any(|u| u.body["ts"] == first_ts && u.body["blocks"].to_string().contains(both)),
        "{updated:?}"
    );

    // A canary of another namespace is refused, and changes nothing.
    let r = client()
        .post(&gate)
        .json(&json!({"name": "podinfo", "namespace": "prod", "phase": "WaitingPromotion", "checksum": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("not in it"));

    env.server.open("/gates/promote/test").await;
    for sim in [&mut podinfo, &mut backend_sim] {
        assert!(sim.run_until(|s| s.promotions() == 1, 5).await, "promoted");
    }
    // The approval was pinned to each canary's revision: the next ones wait.
    podinfo.deploy("pod-2");
    backend_sim.deploy("back-2");
    for sim in [&mut podinfo, &mut backend_sim] {
        assert!(
            sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
                .await
        );
        sim.tick().await;
        assert_eq!(sim.phase(), Phase::WaitingPromotion, "waits again");
        let last = sim
            .calls_of(HookType::ConfirmPromotion)
            .last()
            .unwrap()
            .response
            .clone();
        assert!(last.contains("was for revision"), "{last}");
    }
    let pins = env.detail("/gates/promote/test").await["pins"].clone();
    assert_eq!(
        pins,
        json!({"test/backend": "back-1", "test/podinfo": "pod-1"})
    );
}

async fn named_gate_is_announced_clicked_and_passed(backend: Backend) {
    let env = env(backend).await;
    let (status, created) = env
        .create(
            PIPELINE_TOKEN,
            &json!({"kind": "promote", "name": "release-2026-12-01", "title": "December <release>",
                    "links": ["https://ci.example/run/7", {"text": "changes", "url": "https://ci.example/diff"}],
                    "pr": "acme/shop#42"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let gate = "/gates/promote/named/release-2026-12-01";
    assert_eq!(created["url"], gate);
    assert_eq!(
        created["api"],
        "/api/v1/gates/promote/named/release-2026-12-01"
    );
    assert_eq!(created["named"]["pr"], "acme/shop#42");

    // Announced before Flagger ever asks: in Slack, and on the PR.
    env.server.drained().await;
    let messages = env.waiting_messages();
    assert_eq!(messages.len(), 1, "one announcement");
    let text = text_of(&messages[0]);
    assert!(
        text.contains("*December &lt;release&gt;* waits for approval at the *promote* gate"),
        "{text}"
    );
    assert!(text.contains("<https://ci.example/diff|changes>"), "{text}");
    assert!(text.contains("acme/shop#42"), "{text}");
    let status_comment = env.github.status_comments(42);
    assert_eq!(status_comment.len(), 1, "the PR's status comment");
    assert!(
        status_comment[0]
            .body
            .contains("The pipeline gate `release-2026-12-01` waits for approval"),
        "{}",
        status_comment[0].body
    );
    let audit = env.detail(gate).await["audit"].clone();
    assert_eq!(audit[0]["action"], "create", "{audit}");
    assert_eq!(audit[0]["actor"]["name"], "pipeline");

    assert_eq!(
        env.click(ALICE, "gatebot_approve", &messages[0], "T1")
            .await,
        200
    );
    env.server.drained().await;
    let detail = env.detail(gate).await;
    assert_eq!(detail["state"], "open", "{detail}");
    assert_eq!(detail["waits"][0]["outcome"], "approved");
    let comment = env.github.status_comments(42).remove(0);
    assert!(comment.body.contains("✅ open"), "{}", comment.body);

    let mut sim = canary("podinfo", "test", env.server.at(gate), "rev-b").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 10).await, "passed");
    let last = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(last.starts_with("approved by alice via slack"), "{last}");
    let section = messages[0].body["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    insta::assert_snapshot!("named_gate_announcement", section);
}

async fn creating_twice_is_idempotent_and_a_different_body_conflicts(backend: Backend) {
    let env = env(backend).await;
    let body = json!({"kind": "start", "name": "r1", "title": "one", "slack_channel": "C123"});
    let (first, a) = env.create(PIPELINE_TOKEN, &body).await;
    assert_eq!(first, 201, "{a}");
    let (again, b) = env.create(ADMIN_TOKEN, &body).await;
    assert_eq!(again, 200, "{b}");
    assert_eq!(a["named"], b["named"], "the same gate");
    assert_eq!(b["created"], false);
    let (conflict, c) = env
        .create(
            PIPELINE_TOKEN,
            &json!({"kind": "start", "name": "r1", "title": "two"}),
        )
        .await;
    assert_eq!(conflict, 409, "{c}");
    assert!(said(&c).contains("another title, slack_channel"), "{c}");
    // One announcement (to the gate's own channel), one creation in the audit.
    env.server.drained().await;
    let messages = env.waiting_messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].body["channel"], "C123");
    let audit = env.detail("/gates/start/named/r1").await["audit"].clone();
    let creations = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "create")
        .count();
    assert_eq!(creations, 1, "{audit}");

    // Bad input gets a clear 400 and creates nothing.
    let long = "a".repeat(101);
    for (name, why) in [
        ("", "gate name"),
        ("a/b", "gate name"),
        ("..", "gate name"),
        ("naïve", "gate name"),
        (long.as_str(), "gate name"),
    ] {
        let (status, r) = env
            .create(PIPELINE_TOKEN, &json!({"kind": "promote", "name": name}))
            .await;
        assert_eq!(status, 400, "{name:?}: {r}");
        assert!(said(&r).contains(why), "{name:?}: {r}");
    }
    for bad in [
        json!({"kind": "deploy", "name": "x"}),
        json!({"kind": "promote", "name": "x", "links": ["javascript:alert(1)"]}),
        json!({"kind": "promote", "name": "x", "pr": "not a pr"}),
        json!({"kind": "promote", "name": "x", "extra": 1}),
    ] {
        let (status, r) = env.create(PIPELINE_TOKEN, &bad).await;
        assert_eq!(status, 400, "{bad}: {r}");
    }
    let (status, _) = env
        .create("wrong-token", &json!({"kind": "promote", "name": "x"}))
        .await;
    assert_eq!(status, 401);
    // The pipeline token writes nothing else.
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(PIPELINE_TOKEN)
        .json(&json!({"gate": "/gates/start/named/r1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    for path in [
        "/gates/promote/Test",
        "/gates/promote/%C3%A9",
        "/gates/promote/named/na%C3%AFve",
        "/gates/promote/-x",
        "/gates/promote/named/a..b",
    ] {
        let r = client().post(env.server.at(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path}");
    }
    let long_ns = format!("/gates/promote/{}", "n".repeat(64));
    let r = client().post(env.server.at(&long_ns)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let gates = env.server.api("/api/v1/gates").await["gates"].clone();
    assert_eq!(gates.as_array().unwrap().len(), 0, "{gates}");
}

async fn retiring_holds_the_gate_and_ends_its_waits(backend: Backend) {
    let env = env(backend).await;
    let gate = "/gates/promote/named/r2";
    let (status, _) = env
        .create(PIPELINE_TOKEN, &json!({"kind": "promote", "name": "r2"}))
        .await;
    assert_eq!(status, 201);
    let mut sim = canary("podinfo", "test", env.server.at(gate), "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    sim.tick().await;
    env.server.drained().await;
    let open_waits = env
        .server
        .api(&format!("/api/v1/waits?open=true&gate={gate}"))
        .await;
    assert_eq!(
        open_waits["waits"].as_array().unwrap().len(),
        2,
        "{open_waits}"
    );

    let (status, retired) = env.retire(gate).await;
    assert_eq!(status, 200, "{retired}");
    assert_eq!(retired["state"]["state"], "held");
    assert_eq!(retired["retired"], true);
    let open_waits = env
        .server
        .api(&format!("/api/v1/waits?open=true&gate={gate}"))
        .await;
    assert_eq!(
        open_waits["waits"].as_array().unwrap().len(),
        0,
        "{open_waits}"
    );
    let (again, _) = env.retire(gate).await;
    assert_eq!(again, 200, "retiring again is the same answer");
    // Nobody approves a retired gate by mistake, and its name stays taken.
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": gate}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let (status, r) = env
        .create(PIPELINE_TOKEN, &json!({"kind": "promote", "name": "r2"}))
        .await;
    assert_eq!(status, 409, "{r}");
    assert!(said(&r).contains("retired"), "{r}");
    let (status, _) = env.retire("/gates/promote/named/never").await;
    assert_eq!(status, 404);
    let (status, _) = env.retire("/gates/promote/pr/1").await;
    assert_eq!(status, 400);
    sim.tick().await;
    assert_eq!(
        sim.phase(),
        Phase::WaitingPromotion,
        "a retired gate stays closed"
    );
}

/// Runs the real binary's `gatebot wait`; the child dies with the test.
fn wait_for(env: &Env, gate: &str) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .args(["wait", gate, "--interval", "100ms", "--timeout", "60s"])
        .env("GATEBOT_SERVER", &env.server.url)
        .env("GATEBOT_PIPELINE_TOKEN", PIPELINE_TOKEN)
        .env_remove("GATEBOT_ADMIN_TOKEN")
        .current_dir(env.db.dir.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gatebot wait starts")
}

async fn exit_of(child: tokio::process::Child) -> (i32, String) {
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("gatebot wait exits")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

async fn gatebot_wait_exits_on_approval_and_on_rejection(backend: Backend) {
    let env = env(backend).await;
    for name in ["ok", "no"] {
        let (status, _) = env
            .create(PIPELINE_TOKEN, &json!({"kind": "promote", "name": name}))
            .await;
        assert_eq!(status, 201);
    }
    let approved = wait_for(&env, "/gates/promote/named/ok");
    let rejected = wait_for(&env, "promote/named/no");
    // Whether they first ask before or after the decision, they see it: a
    // named gate's decisions count from its creation.
    env.server.open("/gates/promote/named/ok").await;
    env.server.close("/gates/promote/named/no").await;
    let (code, out) = exit_of(approved).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("approved by admin via api"), "{out}");
    let (code, out) = exit_of(rejected).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("was closed by admin via api"), "{out}");
    // An unknown token is not worth waiting for: exit 2 at once.
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .args(["wait", "/gates/promote/named/ok", "--token", "wrong"])
        .env("GATEBOT_SERVER", &env.server.url)
        .env_remove("GATEBOT_PIPELINE_TOKEN")
        .env_remove("GATEBOT_ADMIN_TOKEN")
        .current_dir(env.db.dir.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (code, _) = exit_of(child).await;
    assert_eq!(code, 2);
    // A named gate nobody created is a mistake, not a wait: exit 2 at once
    // (docs/pipelines.md), not 1 after the 60 s timeout (exit_of allows 30 s).
    let never = wait_for(&env, "/gates/promote/named/never");
    let (code, out) = exit_of(never).await;
    assert_eq!(code, 2, "{out}");
}
