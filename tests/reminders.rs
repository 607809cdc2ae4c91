//! Reminders, end to end with the Flagger simulator and the manual clock, on
//! SQLite and PostgreSQL: at each of the policy's points, one thread reply in
//! Slack that mentions the approvers, one edit of the PR's status comment and
//! one mention comment; none once the wait is over.

use std::sync::Arc;
use std::time::Duration;

use gatebot::clock::{ManualClock, SharedClock};
use gatebot::notify::WorkerSettings;
use gatebot::Options;
use gatebot_testkit::fake_github::FakeGithub;
use gatebot_testkit::fake_slack::FakeSlack;
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Phase, Strategy};
use gatebot_testkit::harness::{Backend, TestDb, TestServer, ADMIN_TOKEN};

/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

const POLICY: &str = r#"
[github.commands.promote]
teams = ["acme/release-managers"]

[slack]
approvers = ["UALICE", "S0RELEASE"]

[reminders]
at = ["2h", "30m", "8h"]
"#;

struct Env {
    server: TestServer,
    slack: FakeSlack,
    github: FakeGithub,
    clock: Arc<ManualClock>,
    _db: TestDb,
}

async fn env(backend: Backend) -> Env {
    let db = TestDb::new(backend).await;
    let slack = FakeSlack::start().await;
    let github = FakeGithub::start().await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.github.token = Some("ghp_test".to_string().into());
    config.github.webhook_secret = Some("github-secret".to_string().into());
    config.github.api_url = github.url.clone();
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.slack.signing_secret = Some("slack-secret".to_string().into());
    config.slack.bot_token = Some("xoxb-test-token".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    config.slack.approvers = vec!["UALICE".into()];
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    config.policy = Some(policy);
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
        slack,
        github,
        clock,
        _db: db,
    }
}

impl Env {
    /// What the housekeeping task does every few seconds, run now.
    async fn remind(&self) -> usize {
        let state = &self.server.state;
        let n = state
            .engine
            .send_reminders(&state.policy)
            .await
            .expect("reminders go out");
        self.server.drained().await;
        n
    }

    fn reminder_comments(&self) -> Vec<String> {
        self.github
            .comments_on(42)
            .into_iter()
            .filter(|c| c.body.contains("⏰"))
            .map(|c| c.body)
            .collect()
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

gatebot_testkit::on_both_stores!(each_reminder_point_is_sent_once_until_the_wait_ends,);

async fn each_reminder_point_is_sent_once_until_the_wait_ends(backend: Backend) {
    let env = env(backend).await;
    env.server.open("/gates/start/pr/42").await;
    let mut sim = released(&env, 42, "rev-b").await;
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    sim.tick().await;
    env.server.drained().await;
    assert_eq!(env.waiting_messages(), 1);
    assert_eq!(env.remind().await, 0, "nothing due yet");
    let edits = || env.github.status_comments(42)[0].edits;
    let edits_before = edits();

    env.clock.advance(30 * 60_000);
    // Two passes at once (as two replicas would run them) remind once.
    let state = &env.server.state;
    let (a, b) = tokio::join!(
        state.engine.send_reminders(&state.policy),
        state.engine.send_reminders(&state.policy)
    );
    assert_eq!(a.unwrap() + b.unwrap(), 1);
    env.server.drained().await;
    assert_eq!(env.remind().await, 0, "the 30m point is done");
    let replies = env.thread_replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].contains("<@UALICE> <!subteam^S0RELEASE>: *test/podinfo* has waited 30m at the *promote* gate for revision `rev-b`"),
        "{replies:?}"
    );
    let comments = env.reminder_comments();
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(
        comments[0].contains(
            "@acme/release-managers: `test/podinfo` has waited 30m at the `promote` gate"
        ),
        "{comments:?}"
    );
    assert!(edits() > edits_before, "the status comment was edited");
    let status = env.github.status_comments(42).remove(0).body;
    assert!(status.contains("reminded 1×"), "{status}");
    assert_eq!(env.waiting_messages(), 1, "a reply, not a new message");

    env.clock.advance(90 * 60_000);
    assert_eq!(env.remind().await, 1);
    assert_eq!(env.thread_replies().len(), 2);
    assert!(env.thread_replies()[1].contains("has waited 2h"));
    assert_eq!(env.reminder_comments().len(), 2);

    // Approved: the wait ends, and so do the reminders.
    env.server.open("/gates/promote/pr/42").await;
    assert!(sim.run_until(|s| s.promotions() == 1, 5).await);
    env.server.drained().await;
    env.clock.advance(8 * 60 * 60_000);
    assert_eq!(env.remind().await, 0);
    assert_eq!(
        env.thread_replies()
            .iter()
            .filter(|r| r.contains("has waited"))
            .count(),
        2
    );
    assert_eq!(env.reminder_comments().len(), 2);
}

#[test]
fn a_bad_reminder_point_says_which_and_what_to_write() {
    let err = gatebot::policy::Policy::parse(
        "[reminders]\nat = [\"30m\", \"later\"]\n",
        gatebot::config::Permission::Write,
        &[],
    )
    .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("reminders.at[1]") && err.contains("write e.g."),
        "{err}"
    );
}
