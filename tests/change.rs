//! Approvals tied to change requests (the policy's `[change]`, mode
//! `reference`), end to end over real HTTP on SQLite and PostgreSQL, against
//! fakes of ServiceNow's Change Management API and Jira Service Management's
//! request API that answer with their published shapes: an approval at a gate
//! under the rule names a change, which gatebot reads and counts only when it
//! is approved, its window holds now and it names the service; the approval
//! carries its number and link and ends with its window. A change system that
//! is down or rate limited opens nothing and says so.

use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::fake_jira::{self, FakeJira};
use gatebot_testkit::fake_prometheus::{Answer, FakePrometheus};
use gatebot_testkit::fake_servicenow::{Change, FakeServiceNow};
use gatebot_testkit::flagger::{
    flagger_tokens, pr_hooks, with_token, FlaggerSim, HookType, Phase, Strategy,
};
use gatebot_testkit::harness::{client, Backend, ADMIN_TOKEN};
use serde_json::json;

const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};
const HOUR: i64 = 3_600_000;

gatebot_testkit::on_both_stores!(
    servicenow_changes_gate_an_approval_from_every_way_in,
    a_jira_change_counts_once_approved_and_its_approval_ends_with_its_window,
    a_production_promotion_under_a_reason_a_team_and_a_change_gatebot_opens,
    a_change_rejected_in_jira_holds_its_gate,
    each_canary_at_one_gate_goes_by_its_own_change,
    a_changes_vote_comes_back_after_a_reset_and_a_rejection_holds_after_it,
    break_glass_through_a_changes_gate_closes_it_unsuccessful,
);

/// The change voted, then someone broke glass: Flagger's promotion went
/// through a forced gate, not the change's, so the change is closed
/// unsuccessful.
async fn break_glass_through_a_changes_gate_closes_it_unsuccessful(backend: Backend) {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let policy = one_of_two(&sn, "[github.commands.force]\nmin_permission = \"write\"\n");
    let env = start_vouched(backend, &policy).await;
    let mut sim = waiting_vouched(&env).await;
    let number = the_change_votes(&env, &sn).await;
    env.comment_by(42, "carol", 8001, "alice", "/promote --force db is down")
        .await;
    env.server.drained().await;
    assert!(sim.run_until(|s| s.phase() == Phase::Succeeded, 20).await);
    env.server.drained().await;
    eventually("the change closed", || async {
        hook(&env, HOOK_SECRET).await;
        sn.change(number).is_some_and(|c| c.state == 3)
    })
    .await;
    let patches = sn.patches();
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(patches[0].1["close_code"], "unsuccessful", "{patches:?}");
}

/// The change is followed while its canary waits: a hold and an unhold reset
/// the count, and the change votes again; rejected after it voted, it holds
/// the gate, once (a person's `/unhold` then stands).
async fn a_changes_vote_comes_back_after_a_reset_and_a_rejection_holds_after_it(backend: Backend) {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let env = start_vouched(backend, &one_of_two(&sn, "")).await;
    let mut sim = waiting_vouched(&env).await;
    let number = the_change_votes(&env, &sn).await;

    env.comment_by(42, "carol", 7001, "alice", "/hold").await;
    env.comment_by(42, "carol", 7002, "alice", "/unhold").await;
    env.server.drained().await;
    assert_eq!(
        promote_gate(&env).await["state"],
        "closed",
        "the count reset"
    );
    after_passes(&env, "approving").await;
    let gate = promote_gate(&env).await.to_string();
    assert!(gate.contains(number), "the change voted again: {gate}");

    sn.reject(number);
    after_passes(&env, "held").await;
    env.comment_by(42, "carol", 7003, "alice", "/promote").await;
    env.server.drained().await;
    for _ in 0..3 {
        sim.tick().await;
    }
    assert_eq!(sim.phase(), Phase::WaitingPromotion, "held by its change");
    assert_eq!(sim.promotions(), 0);

    // A person lifts the hold: the rejected change does not hold it again.
    env.comment_by(42, "carol", 7004, "alice", "/unhold").await;
    env.server.drained().await;
    for _ in 0..2 {
        assert_eq!(hook(&env, HOOK_SECRET).await, 202);
        env.server.drained().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_ne!(promote_gate(&env).await["state"], "held");
}

/// Under `[[environments]]` a wait has its gate's cluster whether a token
/// vouched for it or not: without Flagger tokens a check naming a cluster
/// (a made-up canary, in metadata) is still Flagger's claim alone, and opens
/// no change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environments_cluster_vouches_for_no_wait() {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let policy = format!(
        "[[environments]]\nname = \"production\"\nclusters = [\"prod\"]\n\
         [change]\nprovider = \"servicenow\"\nurl = \"{}\"\nmode = \"create\"\n\
         environments = [\"production\"]\n",
        sn.url
    );
    let env = start_vouched_with(Backend::Sqlite, &policy, |config| {
        config.flagger_tokens = flagger_tokens(&[]).into();
    })
    .await;
    let r = client()
        .post(env.server.at("/gates/promote/pr/42"))
        .json(
            &json!({"name": "made-up", "namespace": "anyone", "phase": "WaitingPromotion",
            "checksum": "rev-x", "metadata": {"cluster": "prod"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    env.server.drained().await;
    let waits = env.server.api("/api/v1/waits").await.to_string();
    assert!(waits.contains("anyone/made-up"), "{waits}");
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(sn.created().is_empty(), "{:?}", sn.created());
}

/// Flagger's checksum is its side's data even with its token: in the change
/// gatebot opens it is shown as letters and digits, never as Jira's wiki
/// markup (a link, a colour, a mention) or a line of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_is_no_markup_in_the_change() {
    let jira = FakeJira::start().await;
    jira.require_basic("gatebot", "s3cret");
    let policy = jira_creates(&jira);
    let env = start_vouched(Backend::Sqlite, &policy).await;
    let hostile =
        "[a|http://x/]\nThe gate: [https://gatebot.example.com/ui|https://evil.example/phish]\n\
                   {color:red}CAB pre-approved{color} [~accountid:5b10ac8d82e05b22cc7d4ef5]";
    env.server.open("/gates/start/pr/42").await;
    let hooks = with_token(pr_hooks(&env.server.url, 42), TOKEN);
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy(hostile);
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 20)
            .await
    );
    env.server.drained().await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("a change opened", || async { !jira.created().is_empty() }).await;
    let fields = jira.created()[0]["requestFieldValues"].clone();
    let summary = fields["summary"].as_str().unwrap_or_default();
    let description = fields["description"].as_str().unwrap_or_default();
    for text in [summary, description] {
        for markup in ["[", "|", "{", "~", "evil.example"] {
            assert!(!text.contains(markup), "{markup} in {text}");
        }
    }
    assert!(
        description.lines().all(|l| !l.starts_with("The gate: ")),
        "{description}"
    );
    assert!(
        description.contains("at revision ?a?http???x???The?gate"),
        "{description}"
    );
}

/// A Jira change never approved offers no Implement and no Fail: when its
/// canary rolls back it is cancelled, not left awaiting approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jira_change_never_approved_is_cancelled_when_its_canary_rolls_back() {
    let jira = FakeJira::start().await;
    jira.require_basic("gatebot", "s3cret");
    let policy = jira_creates(&jira);
    let env = start_vouched(Backend::Sqlite, &policy).await;
    let _sim = waiting_vouched(&env).await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("numbered", || async { jira.request("CHG-101").is_some() }).await;
    let event = json!({"name": "podinfo", "namespace": "test", "phase": "Failed",
        "checksum": "rev-b", "metadata": {"eventMessage": "Rolling back podinfo.test failed checks threshold reached 2",
        "eventType": "Warning", "timestamp": "1"}});
    let r = client()
        .post(env.server.at(&format!("/flagger/events?token={TOKEN}")))
        .json(&event)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    env.server.drained().await;
    eventually("cancelled", || async {
        hook(&env, HOOK_SECRET).await;
        jira.request("CHG-101").map(|r| r.status) == Some(fake_jira::CANCELED.to_string())
    })
    .await;
    let posted = jira.transitions();
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert_eq!(posted[0].1["id"], "41", "Cancel: {posted:?}");
}

/// Two canaries wait at one PR's gate, each with the change gatebot opened
/// for it: one change's approval opens the gate for its own canary only.
async fn each_canary_at_one_gate_goes_by_its_own_change(backend: Backend) {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let policy = format!(
        "[change]\nprovider = \"servicenow\"\nurl = \"{}\"\nmode = \"create\"\n",
        sn.url
    );
    let env = start_vouched(backend, &policy).await;
    let mut podinfo = waiting_vouched(&env).await;
    let hooks = with_token(pr_hooks(&env.server.url, 42), TOKEN);
    let mut other = FlaggerSim::new("other", "test", CANARY, hooks);
    other.deploy("rev-a");
    other.tick().await;
    other.deploy("rev-o");
    assert!(
        other
            .run_until(|s| s.phase() == Phase::WaitingPromotion, 20)
            .await
    );
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("two changes", || async { sn.created().len() == 2 }).await;
    let number_of = |canary: &str| {
        let created = sn.created();
        let n = created
            .iter()
            .position(|c| c.to_string().contains(canary))
            .expect("a change for the canary");
        format!("CHG004000{}", n + 1)
    };
    let (mine, theirs) = (number_of("test/podinfo"), number_of("test/other"));
    eventually("numbered", || async { sn.change(&theirs).is_some() }).await;

    sn.approve(&mine);
    podinfo.tick().await;
    other.tick().await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    assert!(
        podinfo.run_until(|s| s.promotions() == 1, 40).await,
        "its own change opens podinfo"
    );
    for _ in 0..3 {
        other.tick().await;
    }
    assert_eq!(
        other.phase(),
        Phase::WaitingPromotion,
        "not by podinfo's change"
    );
    let said = other
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .map(|c| c.response.clone())
        .unwrap_or_default();
    assert!(said.contains("test/podinfo only"), "{said}");

    sn.approve(&theirs);
    other.tick().await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    assert!(
        other.run_until(|s| s.promotions() == 1, 40).await,
        "its own change opens other"
    );
}

const TOKEN: &str = "prod-flagger-token";
const STAGING_TOKEN: &str = "staging-flagger-token";
const HOOK_SECRET: &str = "hook-secret";
const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";

/// Polls `what` until it holds, for at most 20 s.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f().await {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The change system's webhook, with `secret`.
async fn hook(env: &ChatOps, secret: &str) -> u16 {
    client()
        .post(env.server.at("/webhooks/change"))
        .bearer_auth(secret)
        .body("{\"sys_id\": \"ignored\"}")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A server whose Flagger carries its cluster's token, so that its waits
/// are vouched for, with the change system's credentials and webhook secret.
async fn start_vouched(backend: Backend, policy: &str) -> ChatOps {
    start_vouched_with(backend, policy, |_| {}).await
}

/// [`start_vouched`], with the configuration edited last.
async fn start_vouched_with(
    backend: Backend,
    policy: &str,
    edit: impl FnOnce(&mut gatebot::Config),
) -> ChatOps {
    let env = ChatOps::start_with(
        backend,
        Setup {
            policy,
            permissions: &[("alice", "write"), ("carol", "write")],
            clock: None,
        },
        |config| {
            config.change.user = Some("gatebot".into());
            config.change.password = Some("s3cret".to_string().into());
            config.change.webhook_secret = Some(HOOK_SECRET.to_string().into());
            config.flagger_tokens =
                flagger_tokens(&[("prod", TOKEN), ("staging", STAGING_TOKEN)]).into();
            edit(config);
        },
    )
    .await;
    env.github.set_author(42, "carol");
    env
}

/// Flagger (with its token), waiting at PR 42's promote gate.
async fn waiting_vouched(env: &ChatOps) -> FlaggerSim {
    let hooks = with_token(pr_hooks(&env.server.url, 42), TOKEN);
    let start = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/start/pr/42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status().as_u16(), 200);
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, hooks);
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 20)
            .await,
        "waits at the promote gate"
    );
    env.server.drained().await;
    sim
}

/// All three rules at once, and the change gatebot opens for the wait: a
/// Slack click asks why in a modal, the person is from the team, the
/// change's approval in ServiceNow is the second approval, and once Flagger
/// promotes the change is closed, successful.
async fn a_production_promotion_under_a_reason_a_team_and_a_change_gatebot_opens(backend: Backend) {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let policy = format!(
        "[slack]\napprovers = [\"UALICE\"]\n[users]\nalice = \"UALICE\"\n\
         [[reasons]]\nkind = \"promote\"\nrequired = true\n\
         [[approvals]]\nkind = \"promote\"\nrequired = 2\ninclude = [{{ team = \"acme/sre\" }}]\n\
         [change]\nprovider = \"servicenow\"\nurl = \"{}\"\nmode = \"create\"\nservice = \"shop\"\npoll = \"10s\"\n",
        sn.url
    );
    // The change shows the canary's numbers and links to the gate's page.
    let prometheus = FakePrometheus::start().await;
    let (rate, latency) = (
        "istio_requests_total",
        "istio_request_duration_milliseconds_bucket",
    );
    for (query, workload, value) in [
        (rate, "podinfo", "99.9"),
        (rate, "podinfo-primary", "99.8"),
        (latency, "podinfo", "80"),
        (latency, "podinfo-primary", "95"),
    ] {
        let named = format!("destination_workload=~\"{workload}\"");
        prometheus.answer(&[query, &named], Answer::Value(value.into()));
    }
    let env = start_vouched_with(backend, &policy, |config| {
        config.prometheus.url = Some(prometheus.url.clone());
        config.public_url = Some("https://gatebot.example.com".into());
    })
    .await;
    env.github.add_team_member("acme/sre", "alice");
    let mut sim = waiting_vouched(&env).await;

    // A forged webhook wakes nothing and is counted.
    assert_eq!(hook(&env, "guess").await, 401);
    // The change is opened for the vouched wait, once.
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("a change opened", || async { sn.created().len() == 1 }).await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    let number = "CHG0040001";
    eventually("the change numbered", || async {
        sn.change(number).is_some_and(|c| !c.start.is_empty())
    })
    .await;
    let created = sn.created()[0].to_string();
    assert!(
        created.contains("Promote test/podinfo to revision rev-b, from pull request acme/shop#42")
            && created.contains("\"cmdb_ci\":\"shop\"")
            && created.contains("Its numbers when this was opened: success 99.9 %")
            && created
                .contains("The gate: https://gatebot.example.com/ui/gates/promote/acme/shop/pr/42"),
        "{created}"
    );

    // People alone never open it: the change's approval is one of the votes.
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42", "reason": "ship it"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // Alice (acme/sre) clicks Approve: the policy asks why, in a modal.
    let message = env.waiting_message(PROMOTE).expect("a waiting message");
    assert_eq!(
        env.click("UALICE", "alice", "gatebot_approve", &message, "T1")
            .await,
        200
    );
    env.server.drained().await;
    let opened = env.slack.ok("views.open");
    assert_eq!(opened.len(), 1, "{opened:#?}");
    let view = opened[0].body["view"].clone();
    assert_eq!(
        env.submit_reason(&view, "UALICE", "T2", "the error budget is fine")
            .await,
        200
    );
    env.server.drained().await;
    let gate = promote_gate(&env).await;
    assert_eq!(gate["state"], "approving", "{gate}");
    sim.tick().await;
    assert_eq!(
        sim.phase(),
        Phase::WaitingPromotion,
        "two people, one of them from acme/sre, but not the change"
    );
    let said = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .map(|c| c.response.clone())
        .unwrap_or_default();
    assert!(
        said.contains(
            "2 of 2 approvals: @admin, @ualice for revision rev-b; still needs its change approved"
        ),
        "{said}"
    );
    // Another cluster's Flagger says this canary was promoted: its token
    // vouches for its own canaries only, so the change stays open.
    let forged = json!({"name": "podinfo", "namespace": "test", "phase": "Succeeded",
        "checksum": "rev-b", "metadata": {"eventMessage": "Promotion completed! Scaling down podinfo.test",
        "eventType": "Normal", "timestamp": "1"}});
    let r = client()
        .post(
            env.server
                .at(&format!("/flagger/events?token={STAGING_TOKEN}")),
        )
        .json(&forged)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(sn.patches().is_empty(), "{:?}", sn.patches());
    assert_eq!(sn.change(number).map(|c| c.state), Some(-5));

    // The change is approved in ServiceNow; its webhook says so (once
    // Flagger waits again: the forged event ended the wait it was in).
    sn.approve(number);
    sim.tick().await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    assert!(
        sim.run_until(|s| s.promotions() == 1, 40).await,
        "promoted once the change was approved: {}",
        promote_gate(&env).await
    );
    let gate = promote_gate(&env).await;
    let reason = gate["reason"].to_string();
    assert!(
        reason.contains(&format!("change {number} approved; change {number} (")),
        "{gate}"
    );
    let audit = gate["audit"].to_string();
    assert!(audit.contains("the error budget is fine"), "{audit}");

    // Flagger says it promoted (with its token): the change is closed.
    // A gateway loses the close's answer (applied, then 502): the next
    // passes read the change closed and send it no second close.
    sn.lose_answers(1);
    let _ = sim.run_until(|s| s.phase() == Phase::Succeeded, 20).await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("the change closed", || async {
        sn.change(number).is_some_and(|c| c.state == 3)
    })
    .await;
    for _ in 0..3 {
        assert_eq!(hook(&env, HOOK_SECRET).await, 202);
        env.server.drained().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let patches = sn.patches();
    assert_eq!(patches.len(), 1, "closed once: {patches:?}");
    assert_eq!(patches[0].1["close_code"], "successful", "{patches:?}");
}

/// A change gatebot opened in Jira and declined there holds its gate, with
/// the reason; an unvouched Flagger (no token) opens no change at all.
async fn a_change_rejected_in_jira_holds_its_gate(backend: Backend) {
    let jira = FakeJira::start().await;
    jira.require_basic("gatebot", "s3cret");
    let policy = jira_creates(&jira);
    // Without Flagger tokens a wait is Flagger's claim alone: no change.
    let open_door = ChatOps::start_with(
        backend,
        Setup {
            policy: &policy,
            permissions: &[],
            clock: None,
        },
        |config| {
            config.change.user = Some("gatebot".into());
            config.change.password = Some("s3cret".to_string().into());
            config.change.webhook_secret = Some(HOOK_SECRET.to_string().into());
        },
    )
    .await;
    let _unvouched = waiting(&open_door).await;
    assert_eq!(hook(&open_door, HOOK_SECRET).await, 202);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(jira.created().is_empty(), "{:?}", jira.created());
    drop(open_door);

    let env = start_vouched(backend, &policy).await;
    let mut sim = waiting_vouched(&env).await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("a change opened", || async { !jira.created().is_empty() }).await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("numbered", || async { jira.request("CHG-101").is_some() }).await;
    assert_eq!(jira.created().len(), 1, "{:?}", jira.created());

    jira.decline("CHG-101");
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("the gate held", || async {
        promote_gate(&env).await["state"] == "held"
    })
    .await;
    let gate = promote_gate(&env).await;
    assert!(
        gate["change"]["reason"] == "change CHG-101 was rejected",
        "{gate}"
    );
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Jira's `2026-12-07T08:00:00.000+0000`.
fn jira_time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    let text = humantime::format_rfc3339_seconds(t).to_string();
    format!("{}.000+0000", text.trim_end_matches('Z'))
}

fn change(number: &str, approval: &str, from: i64, to: i64, ci: &str) -> Change {
    Change::planned(number, approval, from, to, ci)
}

async fn start(backend: Backend, policy: &str) -> ChatOps {
    let env = ChatOps::start_with(
        backend,
        Setup {
            policy,
            permissions: &[("alice", "write"), ("carol", "write")],
            clock: None,
        },
        |config| {
            config.change.user = Some("gatebot".into());
            config.change.password = Some("s3cret".to_string().into());
        },
    )
    .await;
    env.github.set_author(42, "carol");
    env
}

/// A policy where the change gatebot opens in the fake ServiceNow is one
/// of two votes at the promote gate, and `more` after it.
fn one_of_two(sn: &FakeServiceNow, more: &str) -> String {
    format!(
        "[[approvals]]\nkind = \"promote\"\nrequired = 2\n\
         [change]\nprovider = \"servicenow\"\nurl = \"{}\"\nmode = \"create\"\n{more}",
        sn.url
    )
}

/// The change's passes, woken until the promote gate is in `state`.
async fn after_passes(env: &ChatOps, state: &str) {
    eventually(state, || async {
        hook(env, HOOK_SECRET).await;
        promote_gate(env).await["state"] == state
    })
    .await;
}

/// gatebot opens a change for the waiting canary; approved in ServiceNow, it
/// votes. Its number.
async fn the_change_votes(env: &ChatOps, sn: &FakeServiceNow) -> &'static str {
    let number = "CHG0040001";
    assert_eq!(hook(env, HOOK_SECRET).await, 202);
    eventually("a change", || async { sn.change(number).is_some() }).await;
    sn.approve(number);
    after_passes(env, "approving").await;
    number
}

/// A `[change]` table in which gatebot opens its changes in the fake Jira.
fn jira_creates(jira: &FakeJira) -> String {
    format!(
        "[change]\nprovider = \"jira\"\nurl = \"{}\"\nmode = \"create\"\nproject = \"CHG\"\n\
         service_desk = \"10\"\nrequest_type = \"45\"\n\
         start_field = \"{}\"\nend_field = \"{}\"\n",
        jira.url,
        fake_jira::START_FIELD,
        fake_jira::END_FIELD,
    )
}

/// Flagger, waiting at PR 42's promote gate.
async fn waiting(env: &ChatOps) -> FlaggerSim {
    env.server.open("/gates/start/pr/42").await;
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&env.server.url, 42));
    // Flagger initializes on the first revision, and analyses the next.
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 20)
            .await,
        "waits at the promote gate"
    );
    env.server.drained().await;
    sim
}

/// The last reply on PR 42.
fn last_reply(env: &ChatOps) -> String {
    env.replies(42).last().cloned().unwrap_or_default()
}

async fn promote_gate(env: &ChatOps) -> serde_json::Value {
    env.server
        .api("/api/v1/gates/promote/acme/shop/pr/42")
        .await
}

async fn servicenow_changes_gate_an_approval_from_every_way_in(backend: Backend) {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let now = now_ms();
    sn.put(change(
        "CHG0031337",
        "approved",
        now - HOUR,
        now + 2 * HOUR,
        "shop",
    ));
    sn.put(change(
        "CHG0000001",
        "requested",
        now - HOUR,
        now + 2 * HOUR,
        "shop",
    ));
    sn.put(change(
        "CHG0000002",
        "rejected",
        now - HOUR,
        now + 2 * HOUR,
        "shop",
    ));
    sn.put(change(
        "CHG0000003",
        "approved",
        now + HOUR,
        now + 2 * HOUR,
        "shop",
    ));
    sn.put(change(
        "CHG0000004",
        "approved",
        now - HOUR,
        now + 2 * HOUR,
        "billing",
    ));
    sn.put(change(
        "CHG0000005",
        "approved",
        now - 2 * HOUR,
        now - HOUR,
        "shop",
    ));
    let policy = format!(
        "[slack]\napprovers = [\"UALICE\"]\n[users]\nalice = \"UALICE\"\n\
         [change]\nprovider = \"servicenow\"\nurl = \"{}\"\nservice = \"shop\"\n",
        sn.url
    );
    let env = start(backend, &policy).await;
    let mut sim = waiting(&env).await;

    // Without a change, with one not ready, or with one that is no change.
    let refusals = [
        ("/promote", "the policy ties promote to an approved change: name it, as in `promote CHG0031337 because <why>`"),
        ("/promote because it looks fine", "name it, as in `promote CHG0031337"),
        ("/promote CHG0000001", "change CHG0000001 is not approved yet: nothing opened; the canary goes on waiting"),
        ("/promote CHG0000002", "change CHG0000002 was rejected"),
        ("/promote CHG0000003", "change CHG0000003's window begins at "),
        ("/promote CHG0000004", "change CHG0000004 does not name shop"),
        ("/promote CHG0000005", "change CHG0000005's window ended at "),
        ("/promote CHG0099999", "ServiceNow has no change CHG0099999"),
        // Only a word shaped like a change number is ever sent.
        ("/promote CHG0031337^ORnumber=CHG1", "name it, as in"),
    ];
    for (n, (body, want)) in refusals.iter().enumerate() {
        env.comment_by(42, "carol", n as u64 + 1, "alice", body)
            .await;
        assert!(
            last_reply(&env).contains(want),
            "{body}: {}",
            last_reply(&env)
        );
    }
    assert!(
        !sn.requests().iter().any(|r| r.contains('^')),
        "{:?}",
        sn.requests()
    );

    // Down, then rate limited: nothing opens, the answer says why.
    sn.down(true);
    env.comment_by(42, "carol", 20, "alice", "/promote CHG0031337")
        .await;
    assert!(
        last_reply(&env).contains("the change system can't be reached (503): nothing opened"),
        "{}",
        last_reply(&env)
    );
    sn.down(false);
    sn.rate_limit(1, 30);
    env.comment_by(42, "carol", 21, "alice", "/promote CHG0031337")
        .await;
    assert!(
        last_reply(&env).contains("rate limited (429)"),
        "{}",
        last_reply(&env)
    );
    // The API and Slack are held to it too.
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42", "reason": "looks fine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("to an approved change"));
    // The CLI (the API's client) names a change in its `--reason`.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .args(["gates", "open", "/gates/promote/pr/42", "--reason"])
        .arg("CHG0000001 because it is ready")
        .env_clear()
        .env("GATEBOT_SERVER", &env.server.url)
        .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("change CHG0000001 is not approved yet"),
        "{out:?}"
    );
    let (status, inline) = env
        .slash("UALICE", "alice", "promote 42 because looks fine", "T1")
        .await;
    assert_eq!(status, 200);
    let answer = format!("{inline} {}", env.answers("T1").await.join(" "));
    assert!(answer.contains("to an approved change"), "{answer}");
    sim.tick().await;
    assert_eq!(sim.phase(), Phase::WaitingPromotion);
    assert_eq!(promote_gate(&env).await["state"], "closed");

    // The approved change, in its window, naming the service: named in the
    // modal a Slack button opens where the policy wants a change.
    let message = env
        .waiting_message("/gates/promote/acme/shop/pr/42")
        .expect("a waiting message");
    assert_eq!(
        env.click("UALICE", "alice", "gatebot_approve", &message, "T5")
            .await,
        200
    );
    env.server.drained().await;
    let opened = env.slack.ok("views.open");
    assert_eq!(opened.len(), 1, "{opened:#?}");
    let view = opened[0].body["view"].clone();
    assert!(view.to_string().contains("to an approved change"), "{view}");
    assert_eq!(
        env.submit_reason(
            &view,
            "UALICE",
            "T6",
            "CHG0031337 because the error budget is fine"
        )
        .await,
        200
    );
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted under the change"
    );
    let gate = promote_gate(&env).await;
    let sys_id = sn.sys_id("CHG0031337").unwrap();
    let reason = gate["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("the error budget is fine; change CHG0031337")
            && reason.contains(&format!("change_request.do?sys_id={sys_id}")),
        "{gate}"
    );
    // It ends with the change's window (before the approval TTL would).
    let expires = gate["expires_at"].as_i64().expect("an expiry");
    assert!(
        (expires - (now + 2 * HOUR)).abs() < 1_000,
        "{expires} vs {}",
        now + 2 * HOUR
    );
    assert!(
        sn.requests()
            .iter()
            .any(|r| r == "GET /api/sn_chg_rest/change?sysparm_query=number=CHG0031337"),
        "{:?}",
        sn.requests()
    );
}

async fn a_jira_change_counts_once_approved_and_its_approval_ends_with_its_window(
    backend: Backend,
) {
    let jira = FakeJira::start().await;
    jira.require_basic("gatebot", "s3cret");
    let now = now_ms();
    jira.put(fake_jira::Request {
        key: "CHG-12".into(),
        status: fake_jira::AWAITING_APPROVAL.into(),
        approval: "pending".into(),
        start: jira_time(now - HOUR),
        end: jira_time(now + HOUR),
        service: "shop".into(),
    });
    let policy = format!(
        "[change]\nprovider = \"jira\"\nurl = \"{}\"\nproject = \"CHG\"\nservice = \"shop\"\n\
         start_field = \"{}\"\nend_field = \"{}\"\nservice_field = \"{}\"\n",
        jira.url,
        fake_jira::START_FIELD,
        fake_jira::END_FIELD,
        fake_jira::SERVICE_FIELD
    );
    let env = start(backend, &policy).await;
    let mut sim = waiting(&env).await;

    env.comment_by(42, "carol", 1, "alice", "/promote OPS-12")
        .await;
    assert!(
        last_reply(&env).contains("name it, as in `promote CHG-123 because <why>`"),
        "another project's key is no change: {}",
        last_reply(&env)
    );
    env.comment_by(42, "carol", 2, "alice", "/promote CHG-12")
        .await;
    assert!(
        last_reply(&env).contains("change CHG-12 is not approved yet"),
        "{}",
        last_reply(&env)
    );
    jira.approve("CHG-12");
    env.comment_by(42, "carol", 3, "alice", "/promote CHG-12 looks good")
        .await;
    assert!(
        sim.run_until(|s| s.promotions() == 1, 20).await,
        "promoted under the approved change: {}",
        last_reply(&env)
    );
    let gate = promote_gate(&env).await;
    assert!(
        gate["reason"]
            .as_str()
            .is_some_and(|r| r.contains("change CHG-12 (")),
        "{gate}"
    );
    let expires = gate["expires_at"].as_i64().expect("an expiry");
    assert!((expires - (now + HOUR)).abs() < 1_000, "{gate}");
    assert!(
        jira.requests()
            .iter()
            .any(|r| r == "GET /rest/servicedeskapi/request/CHG-12/approval"),
        "{:?}",
        jira.requests()
    );
}

/// `gatebot check-config` with `env`, in a directory of its own; whether it
/// passed, and what it printed.
async fn check_config(policy: &str, env: &[(&str, &str)], probe: bool) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, policy).unwrap();
    let mut env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.push(("GATEBOT_POLICY".into(), path.display().to_string()));
    env.push((
        "GATEBOT_DATABASE_URL".into(),
        format!("sqlite://{}/gatebot.db", dir.path().display()),
    ));
    env.push(("NO_COLOR".into(), "1".into()));
    let args: &[&str] = if probe {
        &["check-config", "--probe"]
    } else {
        &["check-config"]
    };
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
            .env_clear()
            .current_dir(dir.path())
            .envs(env)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// check-config says which gates need a change and what is missing, and
/// `--probe` signs in to the change system, never showing the password.
#[tokio::test]
async fn check_config_reads_the_change_system() {
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret-password");
    let policy = format!(
        "[change]\nprovider = \"servicenow\"\nurl = \"{}\"\nmode = \"create\"\nservice = \"shop\"\n",
        sn.url
    );
    let (ok, text) = check_config(&policy, &[], false).await;
    assert!(!ok, "{text}");
    assert!(
        text.contains("change:          promote opens a change naming shop for each waiting canary, every 1m (ServiceNow at "),
        "{text}"
    );
    assert!(
        text.contains("[change] needs GATEBOT_CHANGE_USER and GATEBOT_CHANGE_PASSWORD"),
        "{text}"
    );
    assert!(
        text.contains("opens no change without GATEBOT_FLAGGER_TOKENS"),
        "{text}"
    );

    let signed = [
        ("GATEBOT_CHANGE_USER", "gatebot"),
        ("GATEBOT_CHANGE_PASSWORD", "s3cret-password"),
    ];
    let (ok, text) = check_config(&policy, &signed, true).await;
    assert!(ok, "{text}");
    assert!(
        text.contains("change:          signed in to ServiceNow as gatebot and read its changes"),
        "{text}"
    );
    let wrong = [
        ("GATEBOT_CHANGE_USER", "gatebot"),
        ("GATEBOT_CHANGE_PASSWORD", "wrong-password"),
    ];
    let (ok, text) = check_config(&policy, &wrong, true).await;
    assert!(!ok, "{text}");
    assert!(
        text.contains("ServiceNow: the change system refused gatebot (401 Unauthorized: check GATEBOT_CHANGE_USER and GATEBOT_CHANGE_PASSWORD)"),
        "{text}"
    );
    assert!(!text.contains("wrong-password"), "{text}");
    let (ok, text) = check_config(
        "[change]\nprovider = \"remedy\"\nurl = \"https://x\"\n",
        &[],
        false,
    )
    .await;
    assert!(
        !ok && text.contains("provider `remedy`: write servicenow or jira"),
        "{text}"
    );
}

/// Two replicas on one PostgreSQL store read a change rejected after it
/// voted, one of them late: the gate is held once, and a person's `/unhold`
/// in between stands.
#[tokio::test]
async fn two_replicas_hold_a_rejected_changes_gate_once() {
    if gatebot_testkit::harness::postgres_url().is_none() {
        eprintln!(
            "SKIPPED: replicas share PostgreSQL; set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)"
        );
        return;
    }
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    let env = start_vouched(Backend::Postgres, &one_of_two(&sn, "")).await;
    let other = env.replica().await;
    let _sim = waiting_vouched(&env).await;
    let number = the_change_votes(&env, &sn).await;
    env.server.drained().await;

    // Rejected. The other replica reads it first but late; this one holds.
    sn.reject(number);
    sn.slow_next_read(std::time::Duration::from_millis(1_500));
    let woken = client()
        .post(format!("{}/webhooks/change", other.url))
        .bearer_auth(HOOK_SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(woken.status().as_u16(), 202);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(hook(&env, HOOK_SECRET).await, 202);
    eventually("held by the change", || async {
        promote_gate(&env).await["state"] == "held"
    })
    .await;
    // A person lifts the hold before the late read comes back.
    env.comment_by(42, "carol", 9001, "alice", "/unhold").await;
    env.server.drained().await;
    assert_ne!(promote_gate(&env).await["state"], "held");
    tokio::time::sleep(std::time::Duration::from_millis(2_000)).await;
    let gate = promote_gate(&env).await;
    assert_ne!(gate["state"], "held", "held again after /unhold: {gate}");
    let holds = gate["audit"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|e| e["action"] == "hold").count());
    assert_eq!(holds, 1, "{gate}");
}

/// Two replicas on one PostgreSQL store, woken together by the change
/// system's webhook while its writes are slow: the change is opened once,
/// and once Flagger promotes it is closed once.
#[tokio::test]
async fn two_replicas_open_and_close_each_change_once() {
    if gatebot_testkit::harness::postgres_url().is_none() {
        eprintln!(
            "SKIPPED: replicas share PostgreSQL; set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)"
        );
        return;
    }
    let sn = FakeServiceNow::start().await;
    sn.require_basic("gatebot", "s3cret");
    sn.slow_writes(std::time::Duration::from_millis(400));
    let policy = format!(
        "[change]\nprovider = \"servicenow\"\nurl = \"{}\"\nmode = \"create\"\n",
        sn.url
    );
    let env = start_vouched(Backend::Postgres, &policy).await;
    let other = env.replica().await;
    let mut sim = waiting_vouched(&env).await;
    let both = || async {
        let wake = |url: String| async move {
            client()
                .post(format!("{url}/webhooks/change"))
                .bearer_auth(HOOK_SECRET)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        let (a, b) = tokio::join!(wake(env.server.url.clone()), wake(other.url.clone()));
        assert_eq!((a, b), (202, 202));
    };
    both().await;
    eventually("a change opened", || async { sn.created().len() == 1 }).await;
    let number = "CHG0040001";
    eventually("the change numbered", || async {
        sn.change(number).is_some()
    })
    .await;
    both().await;

    sn.approve(number);
    sim.tick().await;
    both().await;
    assert!(sim.run_until(|s| s.promotions() == 1, 40).await, "promoted");
    let _ = sim.run_until(|s| s.phase() == Phase::Succeeded, 20).await;
    for _ in 0..3 {
        both().await;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    eventually("the change closed", || async {
        sn.change(number).is_some_and(|c| c.state == 3)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    assert_eq!(sn.created().len(), 1, "opened once");
    assert_eq!(sn.patches().len(), 1, "closed once: {:?}", sn.patches());
}
