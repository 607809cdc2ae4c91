//! One gatebot for three clusters in two environments, end to end: a Flagger
//! simulator per cluster, each with its own token, on SQLite and PostgreSQL,
//! with the manual clock. Staging goes first; production waits until staging
//! promoted the same commit a soak ago; `/promote <environment|cluster>`
//! names where; break glass skips the order, loudly.

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{
    flagger_tokens, with_token, FlaggerSim, Hook, HookType, Phase, Strategy,
};
use gatebot_testkit::harness::{
    check_config_of_policy, client, eventually, postgres_url, Backend, ADMIN_TOKEN,
};
use serde_json::{json, Value};

/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const MINUTE: i64 = 60_000;
const COMMIT: &str = "85d557f0c3b1e2a4d6f8091a2b3c4d5e6f708192";
const NEXT_COMMIT: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";

/// docs/environments.md's policy, with break glass for the admins.
fn policy() -> String {
    let doc = include_str!("../docs/environments.md");
    format!(
        "{}\n[github.commands.force]\nmin_permission = \"admin\"\n",
        block(doc, "```toml\n")
    )
}

/// The first block of a document that starts with `fence`.
fn block<'a>(doc: &'a str, fence: &str) -> &'a str {
    let start = doc.find(fence).expect("the block") + fence.len();
    &doc[start..start + doc[start..].find("```").expect("its end")]
}

const STAGING: (&str, &str) = ("staging-eu", "token-of-staging-eu");
const PROD_EU: (&str, &str) = ("prod-eu", "token-of-prod-eu");
const PROD_US: (&str, &str) = ("prod-us", "token-of-prod-us");

struct Env {
    chat: ChatOps,
    clock: Arc<ManualClock>,
    comments: std::sync::atomic::AtomicU64,
}

impl std::ops::Deref for Env {
    type Target = ChatOps;
    fn deref(&self) -> &ChatOps {
        &self.chat
    }
}

async fn env(backend: Backend) -> Env {
    env_with(backend, "").await
}

/// [`env`], with more of the policy after the documented one.
async fn env_with(backend: Backend, more: &str) -> Env {
    let clock = ManualClock::new(NOW);
    let policy = policy() + more;
    let setup = Setup {
        policy: &policy,
        permissions: &[("alice", "write"), ("carol", "admin")],
        clock: Some(clock.clone()),
    };
    let chat = ChatOps::start_with(backend, setup, |config| {
        config.slack.approvers = vec!["UALICE".into()];
        config.flagger_tokens = flagger_tokens(&[STAGING, PROD_EU, PROD_US]).into();
    })
    .await;
    Env {
        chat,
        clock,
        comments: 100.into(),
    }
}

/// The hooks of PR 42's canary in one cluster: its promote and rollback
/// gates and the event hook, each with the revision's commit.
fn hooks(base: &str, commit: &str) -> Vec<Hook> {
    let gate = |name: &str, t: HookType, kind: &str| {
        Hook::new(name, t, format!("{base}/gates/{kind}/pr/42")).with_metadata("commit", commit)
    };
    vec![
        gate("promote-gate", HookType::ConfirmPromotion, "promote"),
        gate("rollback-gate", HookType::Rollback, "rollback"),
        Hook::new(
            "timeline",
            HookType::Event,
            format!("{base}/flagger/events"),
        )
        .with_metadata("pr", "42"),
    ]
}

impl Env {
    /// A cluster's Flagger running `revision` of `commit`, waiting for promotion.
    async fn waiting(&self, cluster: (&str, &str), revision: &str, commit: &str) -> FlaggerSim {
        self.waiting_at(&self.server.url, cluster, revision, commit)
            .await
    }

    /// [`Env::waiting`], with the gatebot at `base` (a replica).
    async fn waiting_at(
        &self,
        base: &str,
        (_, token): (&str, &str),
        revision: &str,
        commit: &str,
    ) -> FlaggerSim {
        let mut sim = FlaggerSim::new(
            "podinfo",
            "test",
            Strategy::Canary {
                step_weight: 50,
                max_weight: 50,
            },
            with_token(hooks(base, commit), token),
        );
        sim.tick().await;
        sim.deploy(revision);
        assert!(
            sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
                .await
        );
        self.server.drained().await;
        sim
    }

    /// `body` commented on PR 42 (by bob) by `user`.
    async fn comment(&self, user: &str, body: &str) -> String {
        let id = self
            .comments
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.comment_by(42, "bob", id, user, body).await;
        self.replies(42).last().cloned().unwrap_or_default()
    }

    /// The answer a cluster's promote gate gives podinfo at `revision` now.
    async fn answer(
        &self,
        (_, token): (&str, &str),
        revision: &str,
        commit: &str,
    ) -> (u16, String) {
        let body = json!({
            "name": "podinfo", "namespace": "test", "phase": "WaitingPromotion",
            "checksum": revision, "metadata": {"commit": commit},
        });
        let r = client()
            .post(self.server.at(&format!("/gates/t/{token}/promote/pr/42")))
            .json(&body)
            .send()
            .await
            .unwrap();
        (
            r.status().as_u16(),
            r.text().await.unwrap().trim_end().to_string(),
        )
    }

    async fn gate(&self, key: &str) -> Value {
        self.server.api(&format!("/api/v1/gates{key}")).await
    }

    async fn promoted(&self, sim: &mut FlaggerSim) -> bool {
        let done = sim.run_until(|s| s.phase() == Phase::Succeeded, 6).await;
        self.server.drained().await;
        done
    }
}

gatebot_testkit::on_both_stores!(
    staging_goes_first_and_production_after_the_soak,
    promote_names_one_cluster_and_leaves_the_other_closed,
    a_new_commit_starts_the_path_again,
    break_glass_skips_the_order_and_is_announced,
    a_place_is_read_one_way_and_break_glass_only_where_typed,
    a_check_with_another_clusters_token_cannot_use_this_clusters_approval,
    the_cli_opens_an_environment,
    the_status_comment_and_slack_show_the_path,
    slack_names_the_environment_as_comments_do,
    a_deadline_rolls_back_in_its_own_cluster,
    without_tokens_metadata_or_the_default_names_the_cluster,
    a_revision_of_an_untold_commit_lets_no_later_environment_go,
    production_asks_why_from_every_channel,
    a_reason_past_its_cap_is_refused_everywhere,
);

async fn staging_goes_first_and_production_after_the_soak(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    let mut us = env.waiting(PROD_US, "rev-u1", COMMIT).await;
    // Production, not approved yet, says where the revision stands first
    // (docs/environments.md quotes it).
    let (status, answer) = env.answer(PROD_EU, "rev-e1", COMMIT).await;
    assert_eq!(status, 403);
    assert_eq!(
        answer,
        "waiting: staging has not promoted 85d557f; production goes after it (soak 30 min); \
         and comment /promote prod-eu on acme/shop#42 or approve in Slack"
    );

    // Both environments wait: `/promote` alone asks which.
    let reply = env.comment("alice", "/promote").await;
    assert!(
        reply.contains("which one? staging and production are waiting"),
        "{reply}"
    );
    assert_eq!(
        env.gate("/promote/acme/shop/pr/42@staging-eu").await["state"],
        "closed"
    );

    // An early approval of production is kept, and waits for staging.
    env.comment("alice", "/promote production").await;
    for key in ["prod-eu", "prod-us"] {
        let gate = env.gate(&format!("/promote/acme/shop/pr/42@{key}")).await;
        assert_eq!(gate["state"], "open", "{gate}");
    }
    let (status, answer) = env.answer(PROD_EU, "rev-e1", COMMIT).await;
    assert_eq!(status, 403);
    assert_eq!(
        answer,
        "waiting: staging has not promoted 85d557f; production goes after it (soak 30 min)"
    );
    eu.tick().await;
    assert_eq!(eu.phase(), Phase::WaitingPromotion);

    // Staging first. Its rollout's end ends no other cluster's wait.
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    let waits = env.server.api("/api/v1/waits?open=true").await;
    let mut open: Vec<&str> = waits["waits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["gate"].as_str().unwrap())
        .collect();
    open.sort();
    assert_eq!(
        open,
        [
            "/gates/promote/acme/shop/pr/42@prod-eu",
            "/gates/promote/acme/shop/pr/42@prod-us"
        ]
    );

    env.clock.advance(12 * MINUTE);
    let (status, answer) = env.answer(PROD_EU, "rev-e1", COMMIT).await;
    assert_eq!(status, 403);
    assert_eq!(
        answer,
        "waiting: staging promoted 85d557f 12 min ago; production may go at 2024-05-01T14:32:00Z (soak 30 min)"
    );
    eu.tick().await;
    assert_eq!(eu.phase(), Phase::WaitingPromotion);

    // The soak ends: the early approval takes effect, in both clusters.
    env.clock.advance(18 * MINUTE);
    assert!(env.promoted(&mut eu).await);
    assert!(env.promoted(&mut us).await);
    let pins = env.gate("/promote/acme/shop/pr/42@prod-us").await["pins"].clone();
    assert_eq!(pins, json!({"test/podinfo": "rev-u1"}));
}

async fn promote_names_one_cluster_and_leaves_the_other_closed(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    // Only staging waits: `/promote` alone opens it.
    env.comment("alice", "/promote").await;
    assert!(env.replies(42).is_empty(), "{:?}", env.replies(42));
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(31 * MINUTE);

    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    let mut us = env.waiting(PROD_US, "rev-u1", COMMIT).await;
    env.comment("alice", "/promote prod-eu").await;
    assert!(env.promoted(&mut eu).await);
    us.tick().await;
    assert_eq!(us.phase(), Phase::WaitingPromotion);
    let (status, answer) = env.answer(PROD_US, "rev-u1", COMMIT).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer,
        "waiting: comment /promote prod-us on acme/shop#42 or approve in Slack"
    );
    assert_eq!(
        env.gate("/promote/acme/shop/pr/42@prod-us").await["state"],
        "closed"
    );
}

async fn a_new_commit_starts_the_path_again(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(31 * MINUTE);
    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    env.comment("alice", "/promote prod-eu").await;
    assert!(env.promoted(&mut eu).await);

    // The next commit: staging must promote it again before production.
    let mut staging = env.waiting(STAGING, "rev-s2", NEXT_COMMIT).await;
    let mut eu = env.waiting(PROD_EU, "rev-e2", NEXT_COMMIT).await;
    env.comment("alice", "/promote production").await;
    let (status, answer) = env.answer(PROD_EU, "rev-e2", NEXT_COMMIT).await;
    assert_eq!(status, 403);
    assert!(
        answer.starts_with("waiting: staging has not promoted a1b2c3d;"),
        "{answer}"
    );
    eu.tick().await;
    assert_eq!(eu.phase(), Phase::WaitingPromotion);
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(30 * MINUTE);
    assert!(env.promoted(&mut eu).await);
}

async fn break_glass_skips_the_order_and_is_announced(backend: Backend) {
    let env = env(backend).await;
    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    env.comment("carol", "/promote --force prod-eu hotfix for the outage")
        .await;
    assert!(env.promoted(&mut eu).await);
    let status = env
        .github
        .status_comments(42)
        .last()
        .map(|c| c.body.clone())
        .unwrap_or_default();
    assert!(
        status.contains("🚨 **Break glass:**") && status.contains("the environments' order"),
        "{status}"
    );
    let audit = env.server.api("/api/v1/audit").await;
    assert!(
        audit
            .to_string()
            .contains("/gates/promote/acme/shop/pr/42@prod-eu"),
        "{audit}"
    );

    // The flag after the place breaks glass too, for the next commit.
    let mut eu = env.waiting(PROD_EU, "rev-e2", NEXT_COMMIT).await;
    env.comment("carol", "/promote prod-eu --force second hotfix")
        .await;
    assert!(env.promoted(&mut eu).await);
    let audit = env.server.api("/api/v1/audit").await.to_string();
    assert!(audit.contains("second hotfix"), "{audit}");
}

/// `Staging,` names staging wherever a place is read: the gates it places,
/// and break glass after it (not the one environment that waits). A reason
/// given to the API breaks no glass, whatever it says.
async fn a_place_is_read_one_way_and_break_glass_only_where_typed(backend: Backend) {
    let env = env(backend).await;
    env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    let forced_at = |audit: &serde_json::Value, cluster: &str| {
        audit["audit"].as_array().is_some_and(|entries| {
            entries.iter().any(|e| {
                e["action"] == "force"
                    && e["gate"]
                        .as_str()
                        .is_some_and(|g| g.ends_with(&format!("@{cluster}")))
            })
        })
    };
    env.comment("carol", "/promote Staging, --force hotfix")
        .await;
    let audit = env.server.api("/api/v1/audit").await;
    assert!(forced_at(&audit, "staging-eu"), "{audit}");
    assert!(!forced_at(&audit, "prod-eu"), "{audit}");
    let (status, _) = env.answer(PROD_EU, "rev-e1", COMMIT).await;
    assert_eq!(status, 403, "production stays closed");

    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42", "reason": "prod-eu --force via the api"}))
        .send()
        .await
        .unwrap();
    let answer = r.text().await.unwrap();
    assert!(!answer.contains("\"forced\":true"), "{answer}");
    let audit = env.server.api("/api/v1/audit").await;
    assert!(!forced_at(&audit, "prod-eu"), "{audit}");
}

async fn a_check_with_another_clusters_token_cannot_use_this_clusters_approval(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(31 * MINUTE);
    env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    env.comment("alice", "/promote prod-eu").await;

    // prod-us's token, claiming prod-eu in its metadata: the token names the cluster.
    let body = json!({
        "name": "podinfo", "namespace": "test", "phase": "WaitingPromotion",
        "checksum": "rev-e1", "metadata": {"commit": COMMIT, "cluster": "prod-eu"},
    });
    let r = client()
        .post(
            env.server
                .at(&format!("/gates/t/{}/promote/pr/42", PROD_US.1)),
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403, "{}", r.text().await.unwrap());
    // A cluster with no token and a name of no environment gets nothing either.
    let r = client()
        .post(env.server.at("/gates/promote/pr/42"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let (status, _) = env.answer(PROD_EU, "rev-e1", COMMIT).await;
    assert_eq!(status, 200);
}

async fn the_cli_opens_an_environment(backend: Backend) {
    let env = env(backend).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .args([
            "gates",
            "open",
            "/gates/promote/pr/42",
            "--env",
            "production",
        ])
        .env_clear()
        .env("GATEBOT_SERVER", &env.server.url)
        .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text,
        "/gates/promote/acme/shop/pr/42@prod-eu is open\n/gates/promote/acme/shop/pr/42@prod-us is open\n"
    );
    assert_eq!(
        env.gate("/promote/acme/shop/pr/42@staging-eu").await["state"],
        "closed"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .args(["gates", "open", "/gates/promote/pr/42", "--env", "qa"])
        .env_clear()
        .env("GATEBOT_SERVER", &env.server.url)
        .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    // A gate of a cluster the policy does not name is refused too.
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42@prod-xx", "reason": "typo"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let answer = r.text().await.unwrap();
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("`prod-xx` is no environment or cluster"),
        "{answer}"
    );
    assert!(
        text.contains("`qa` is no environment or cluster of the policy (staging, staging-eu, production, prod-eu, prod-us)"),
        "{text}"
    );
}

/// The latest text of the Slack message about `gate`: its post, or its last update.
fn slack_text(env: &Env, gate: &str) -> (String, Value) {
    let about = |r: &&gatebot_testkit::fake_slack::Request| {
        r.body["blocks"].to_string().contains(&format!("`{gate}`"))
    };
    let posted = env.slack.ok("chat.postMessage");
    let post = posted.iter().find(about).expect("posted").body.clone();
    let updated = env.slack.ok("chat.update");
    let last = updated
        .iter()
        .rfind(about)
        .map_or(post.clone(), |r| r.body.clone());
    let text = last["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    (text, post)
}

async fn the_status_comment_and_slack_show_the_path(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(5 * MINUTE);
    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    eu.tick().await;
    env.server.drained().await;

    let status = env.github.status_comments(42).last().unwrap().body.clone();
    insta::assert_snapshot!("environments_status_comment", status);
    let (text, post) = slack_text(&env, "/gates/promote/acme/shop/pr/42@prod-eu");
    insta::assert_snapshot!("environments_slack_message", text);
    // In the thread of staging's message about the same commit.
    let (_, root) = slack_text(&env, "/gates/promote/acme/shop/pr/42@staging-eu");
    assert!(root.get("thread_ts").is_none(), "{root}");
    assert!(post["thread_ts"].is_string(), "{post}");
}

/// docs/environments.md's token script makes a setting gatebot takes, and
/// its commands are the ones the tests run.
#[test]
fn the_documented_tokens_and_commands_work() {
    let doc = include_str!("../docs/environments.md");
    let out = std::process::Command::new("bash")
        .args(["-c", block(doc, "```sh\n")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap();
    let setting = last.strip_prefix("GATEBOT_FLAGGER_TOKENS=").unwrap();
    let tokens: gatebot::testing::gate::FlaggerTokens = setting.parse().unwrap();
    let clusters: Vec<&str> = tokens.clusters().map(|c| c.as_str()).collect();
    assert_eq!(clusters, ["staging-eu", "prod-eu", "prod-us"]);
    for line in text.lines().filter(|l| l.contains(" token: ")) {
        let (cluster, token) = line.split_once(" token: ").unwrap();
        assert_eq!(tokens.cluster_of(token).map(|c| c.as_str()), Some(cluster));
    }
    for command in [
        "`gatebot gates open /gates/promote/pr/42 --env staging`",
        "`/promote production`",
        "`/promote prod-eu`",
    ] {
        assert!(doc.contains(command), "{command}");
    }
}

/// check-config names the environments, their order and soak, and warns of
/// a cluster no token reaches.
#[test]
fn check_config_tells_the_path_and_the_cluster_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.toml"), policy()).unwrap();
    let hash = |t: &str| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(t))
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"))
        .arg("check-config")
        .current_dir(dir.path())
        .env_clear()
        .env("GATEBOT_DATABASE_URL", "sqlite://g.db")
        .env("GATEBOT_POLICY", "policy.toml")
        .env(
            "GATEBOT_FLAGGER_TOKENS",
            format!("staging-eu={},prod-eu={}", hash(STAGING.1), hash(PROD_EU.1)),
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("environment:     staging (staging-eu)\n"),
        "{text}"
    );
    assert!(
        text.contains("environment:     production (prod-eu, prod-us), after staging, soak 30m\n"),
        "{text}"
    );
    assert!(
        text.contains("cluster prod-us is in [[environments]] but has no Flagger token"),
        "{text}"
    );
}

async fn slack_names_the_environment_as_comments_do(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    let (status, _) = env.slash("UALICE", "alice", "promote 42", "t1").await;
    assert_eq!(status, 200);
    let answers = env.answers("t1").await;
    assert!(
        answers
            .iter()
            .any(|a| a.contains("which one? staging and production are waiting")),
        "{answers:?}"
    );
    let (status, _) = env
        .slash("UALICE", "alice", "promote 42 staging", "t2")
        .await;
    assert_eq!(status, 200);
    env.server.drained().await;
    assert!(env.promoted(&mut staging).await);
    assert_eq!(
        env.gate("/promote/acme/shop/pr/42@prod-eu").await["state"],
        "closed"
    );
}

/// PostgreSQL replicas: staging promotes through one, production asks the
/// other, which learns of the passage with the pin's announcement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn a_replica_knows_what_another_promoted() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let env = env(Backend::Postgres).await;
    let b = env.replica().await;
    let mut eu = env.waiting_at(&b.url, PROD_EU, "rev-e1", COMMIT).await;
    b.drained().await;
    env.comment("alice", "/promote prod-eu").await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(30 * MINUTE);
    let token = PROD_EU.1;
    let url = format!("{}/gates/t/{token}/promote/pr/42", b.url);
    eventually(
        "the replica opens prod-eu after the soak",
        std::time::Duration::from_secs(10),
        || {
            let url = url.clone();
            async move {
                let body = json!({
                    "name": "podinfo", "namespace": "test", "phase": "WaitingPromotion",
                    "checksum": "rev-e1", "metadata": {"commit": COMMIT},
                });
                let r = client().post(&url).json(&body).send().await.unwrap();
                r.status().as_u16() == 200
            }
        },
    )
    .await;
    eu.tick().await;
    b.drained().await;
    assert!(eu.run_until(|s| s.phase() == Phase::Succeeded, 6).await);
}

async fn a_deadline_rolls_back_in_its_own_cluster(backend: Backend) {
    let env = env_with(
        backend,
        "\n[[deadlines]]\nkind = \"promote\"\nafter = \"2h\"\n",
    )
    .await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);
    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    env.clock.advance(2 * 60 * MINUTE + 1000);
    env.waiting(PROD_US, "rev-u1", COMMIT).await;
    let acted = env
        .server
        .state
        .engine
        .deadlines()
        .enforce_deadlines()
        .await
        .unwrap();
    env.server.drained().await;
    assert_eq!(acted, 1);
    assert_eq!(
        env.gate("/rollback/acme/shop/pr/42@prod-eu").await["state"],
        "open"
    );
    for quiet in [
        "/rollback/acme/shop/pr/42@prod-us",
        "/rollback/acme/shop/pr/42@staging-eu",
    ] {
        assert_eq!(env.gate(quiet).await["state"], "closed", "{quiet}");
    }
    let rollbacks = eu.rollbacks();
    eu.tick().await;
    assert_eq!(eu.rollbacks(), rollbacks + 1);
}

async fn without_tokens_metadata_or_the_default_names_the_cluster(backend: Backend) {
    let check = |env: &Env, metadata: Value| {
        let url = env.server.at("/gates/promote/pr/42");
        async move {
            let body = json!({
                "name": "podinfo", "namespace": "test", "phase": "WaitingPromotion",
                "checksum": "rev-1", "metadata": metadata,
            });
            let r = client().post(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let setup = |more: &'static str| {
        let clock = ManualClock::new(NOW);
        let policy = format!("{more}{}", policy());
        async move {
            let setup = Setup {
                policy: &policy,
                permissions: &[("alice", "write")],
                clock: Some(clock.clone()),
            };
            let chat = ChatOps::start(backend, setup).await;
            Env {
                chat,
                clock,
                comments: 100.into(),
            }
        }
    };
    let env = setup("").await;
    let (status, answer) = check(&env, json!({})).await;
    assert_eq!(status, 403);
    assert!(
        answer.starts_with("closed: which cluster is this?"),
        "{answer}"
    );
    let (status, answer) = check(&env, json!({"cluster": "qa"})).await;
    assert_eq!(status, 403);
    assert!(
        answer.starts_with("closed: cluster qa is in no environment"),
        "{answer}"
    );
    let (status, answer) = check(&env, json!({"cluster": "staging-eu"})).await;
    assert_eq!(status, 403);
    assert!(answer.contains("/promote staging-eu"), "{answer}");
    env.server.drained().await;
    let waits = env.server.api("/api/v1/waits?open=true").await;
    assert_eq!(
        waits["waits"][0]["gate"], "/gates/promote/acme/shop/pr/42@staging-eu",
        "{waits}"
    );

    let env = setup("default_cluster = \"prod-us\"\n").await;
    let (status, answer) = check(&env, json!({})).await;
    assert_eq!(status, 403);
    assert!(answer.contains("/promote prod-us"), "{answer}");
}

/// Issue 41, point 11: staging's Flagger names no commit and still runs
/// revision r1 (of the first commit) when the PR's head moves on. Staging
/// promotes r1: gatebot can't tell its commit, so production, running the new
/// head, is not let go after the soak, and says why.
async fn a_revision_of_an_untold_commit_lets_no_later_environment_go(backend: Backend) {
    let env = env(backend).await;
    env.pushed(42, COMMIT).await;
    let untold: Vec<Hook> = hooks(&env.server.url, COMMIT)
        .into_iter()
        .map(|mut h| {
            h.metadata.remove("commit");
            h
        })
        .collect();
    let mut staging = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        with_token(untold, STAGING.1),
    );
    staging.tick().await;
    staging.deploy("rev-s1");
    assert!(
        staging
            .run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    env.server.drained().await;

    // The head moves on while staging still runs r1; staging promotes r1.
    env.clock.advance(MINUTE);
    env.pushed(42, NEXT_COMMIT).await;
    env.clock.advance(MINUTE);
    env.comment("alice", "/promote staging").await;
    assert!(env.promoted(&mut staging).await);

    // Production runs the new head, approved early; the soak passes.
    env.comment("alice", "/promote production").await;
    env.clock.advance(31 * MINUTE);
    let (status, answer) = env.answer(PROD_EU, "rev-e2", NEXT_COMMIT).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(
        answer,
        "waiting: can't tell which commit staging promoted: set the canary's `commit` metadata in staging-eu (or let gatebot look the revision up in the cluster), then promote a1b2c3d there; production goes after it"
    );
    // A production check that names no commit is not let go either.
    let body = json!({
        "name": "podinfo", "namespace": "test", "phase": "WaitingPromotion", "checksum": "rev-u2",
    });
    let r = client()
        .post(
            env.server
                .at(&format!("/gates/t/{}/promote/pr/42", PROD_US.1)),
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let line = r.text().await.unwrap();
    assert!(
        line.contains("gatebot can't tell which commit this revision was built from"),
        "{line}"
    );
}

/// docs/policy.md's `[[reasons]]` example.
fn reasons() -> String {
    let doc = include_str!("../docs/policy.md");
    let at = doc
        .find("```toml\n[[reasons]]")
        .expect("the reasons example");
    block(&doc[at..], "```toml\n").to_string()
}

/// The audit's reasons, newest first.
async fn audited_reasons(env: &Env) -> Vec<String> {
    let audit = env.server.api("/api/v1/audit").await;
    let entries = audit["audit"].as_array().expect("entries").clone();
    entries
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

async fn production_asks_why_from_every_channel(backend: Backend) {
    let env = env_with(backend, &reasons()).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    // Staging is under no rule: `/promote` alone opens it.
    env.comment("alice", "/promote").await;
    assert!(env.promoted(&mut staging).await);
    env.clock.advance(31 * MINUTE);
    let mut eu = env.waiting(PROD_EU, "rev-e1", COMMIT).await;
    let asks = "the policy asks for a reason to promote in production: say why, as in `promote production because <why>`";

    // A PR comment naming the cluster, with nothing after it.
    let reply = env.comment("alice", "/promote prod-eu").await;
    assert!(reply.contains(asks), "{reply}");
    // Slack's slash command, with `because` and nothing after it.
    let (status, _) = env
        .slash("UALICE", "alice", "promote 42 production because", "t1")
        .await;
    assert_eq!(status, 200);
    let answers = env.answers("t1").await;
    assert!(answers.iter().any(|a| a.contains(asks)), "{answers:?}");
    // The API (and so the CLI), naming the environment.
    // Words that only name the place, or show nothing, are no reason either.
    for none in [
        "/promote Production",
        "/promote prod-eu, production",
        "/promote prod-eu because \u{200B}",
    ] {
        let reply = env.comment("alice", none).await;
        assert!(reply.contains(asks), "{none}: {reply}");
    }
    // Break glass says why by the same measure.
    let reply = env
        .comment("carol", "/promote --force prod-eu because")
        .await;
    assert!(reply.contains("break glass needs a reason"), "{reply}");
    // The API (and the CLI, whose user is a claim beside the token, never a
    // reason), naming the environment.
    let cli = |reason: Option<&str>| {
        let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_gatebot"));
        cli.args([
            "gates",
            "open",
            "/gates/promote/pr/42",
            "--env",
            "production",
        ])
        .args(reason.map(|r| ["--reason", r]).into_iter().flatten())
        .env_clear()
        .env("USER", "mallory")
        .env("GATEBOT_SERVER", &env.server.url)
        .env("GATEBOT_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("GATEBOT_GITHUB_REPOSITORY", "acme/shop");
        cli.output().unwrap()
    };
    let out = cli(None);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(asks),
        "{out:?}"
    );
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42", "env": "production"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains(asks));
    for cluster in ["prod-eu", "prod-us"] {
        let gate = env
            .gate(&format!("/promote/acme/shop/pr/42@{cluster}"))
            .await;
        assert_eq!(gate["state"], "closed", "{gate}");
    }
    // Each refusal is audited on the gates it was about.
    let refused = audited_reasons(&env).await;
    assert!(
        refused.iter().filter(|r| r.contains(asks)).count() >= 6,
        "{refused:?}"
    );

    // Said why: the comment opens its cluster, and the audit keeps the words as written.
    env.comment(
        "alice",
        "/promote prod-eu because the error budget is <b>fine</b>",
    )
    .await;
    assert!(env.promoted(&mut eu).await);
    let kept = audited_reasons(&env).await;
    assert!(
        kept.iter()
            .any(|r| r == "prod-eu because the error budget is <b>fine</b>"),
        "{kept:?}"
    );
    // The status comment shows it as a code span: no tag, mention or marker forms.
    let status = env.github.status_comments(42).last().unwrap().body.clone();
    assert!(
        status.contains("`prod-eu because the error budget is ‹b›fine‹/b›`"),
        "{status}"
    );
    // docs/policy.md's CLI command; the claim is recorded beside the reason.
    let out = cli(Some("the error budget is fine"));
    assert!(out.status.success(), "{out:?}");
    let gate = env.gate("/promote/acme/shop/pr/42@prod-us").await;
    assert_eq!(gate["state"], "open", "{gate}");
    let kept = audited_reasons(&env).await;
    assert!(
        kept.iter()
            .any(|r| r.ends_with("via cli; the error budget is fine")),
        "{kept:?}"
    );
}

/// `check-config` says which commands must say why, and that a rule for
/// break glass cannot lift its reason.
#[test]
fn check_config_lists_the_reasons() {
    let policy = policy() + &reasons() + "\n[[reasons]]\nkind = \"force\"\nrequired = false\n";
    let (ok, text) = check_config_of_policy(env!("CARGO_BIN_EXE_gatebot"), &policy);
    assert!(ok, "{text}");
    assert!(
        text.contains("reasons:         promote in production needs a reason ([[reasons]])\n"),
        "{text}"
    );
    assert!(
        text.contains("kind = \"force\" with required = false changes nothing"),
        "{text}"
    );
}

async fn a_reason_past_its_cap_is_refused_everywhere(backend: Backend) {
    let env = env(backend).await;
    let mut staging = env.waiting(STAGING, "rev-s1", COMMIT).await;
    let long = "x".repeat(1_001);
    let reply = env.comment("alice", &format!("/promote {long}")).await;
    assert!(
        reply.contains("a reason is at most 1000 characters"),
        "{reply}"
    );
    let r = client()
        .post(env.server.at("/api/v1/gates/open"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"gate": "/gates/promote/pr/42", "env": "staging", "reason": long}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("at most 1000 characters"));
    staging.tick().await;
    assert_eq!(staging.phase(), Phase::WaitingPromotion);
    // At the cap, it is kept whole.
    env.comment("alice", &format!("/promote {}", &long[1..]))
        .await;
    assert!(env.promoted(&mut staging).await);
}
