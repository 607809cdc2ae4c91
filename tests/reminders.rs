//! Reminders, end to end with the Flagger simulator and the manual clock, on
//! SQLite and PostgreSQL: at each of the policy's points, one thread reply in
//! Slack that mentions the approvers, one edit of the PR's status comment and
//! one mention comment; none once the wait is over.

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, Phase, Strategy};
use gatebot_testkit::harness::Backend;

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
    async fn remind(&self) -> usize {
        let state = &self.server.state;
        let n = state
            .engine
            .reminders()
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
        state.engine.reminders().send_reminders(&state.policy),
        state.engine.reminders().send_reminders(&state.policy)
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
    let err = gatebot::testing::policy::Policy::parse(
        "[reminders]\nat = [\"30m\", \"later\"]\n",
        gatebot::testing::config::Permission::Write,
        &[],
    )
    .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("reminders.at[1]") && err.contains("write e.g."),
        "{err}"
    );
}
