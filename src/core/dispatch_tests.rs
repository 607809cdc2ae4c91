//! The one command path on a real SQLite file and the manual clock: what each
//! outcome changes and what it audits, whatever channel asked.

use std::sync::Arc;

use tokio::sync::Notify;

use super::commands::Subject;
use super::dispatch::{self, Answer, Authorizer, Outcome, Request, Rule};
use super::{Engine, EngineSettings, Provenance, CHECK_DEADLINE};
use crate::clock::ManualClock;
use crate::command::{Command, Verb};
use crate::gate::{Actor, Channels, DeliveryId, GateKey, GateStatus, Source};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::store::Store;

struct Fixture {
    engine: Engine,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

async fn engine() -> Fixture {
    engine_in(Default::default()).await
}

async fn engine_in(environments: crate::gate::environment::Environments) -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::connect(&format!("sqlite://{}/gatebot.db", dir.path().display()))
        .await
        .expect("store");
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::new(
        store,
        clock.clone(),
        EngineSettings {
            approval_ttl: None,
            default_repo: None,
            check_deadline: CHECK_DEADLINE,
            channels: Channels::default(),
            calendar: Default::default(),
            quorum: Vec::new(),
            reasons: Vec::new(),
            change: None,
            timers: Default::default(),
            environments,
            named: crate::core::named::NamedLimits {
                live: 10,
                per_hour: 10,
            },
        },
        Arc::new(Metrics::new()),
        Notifier::new(Vec::new()),
        Arc::new(Notify::new()),
    )
    .await
    .expect("engine");
    Fixture {
        engine,
        clock,
        _dir: dir,
    }
}

/// Says yes, or no with a reason.
struct Decides(Option<&'static str>);

impl Authorizer for Decides {
    type Denied = &'static str;

    fn authorize<'a>(&'a self, _rule: Rule, _keys: &'a [GateKey]) -> Answer<'a, &'static str> {
        Box::pin(async move { Ok(self.0.map_or(Ok(()), Err)) })
    }
}

fn key(path: &str) -> GateKey {
    GateKey::parse(path, None).expect("key")
}

fn request(verb: Verb, gate: &str, delivery: &str, written_at: i64) -> Request {
    Request {
        place: None,
        command: Command::from_verb(verb, None),
        subject: Subject::Gate(key(gate)),
        who: Provenance::new(Actor::new("alice", Source::Github))
            .delivery(DeliveryId::github(delivery))
            .written_at(Some(written_at)),
    }
}

const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";

async fn actions(engine: &Engine, gate: &str) -> Vec<String> {
    let mut log = engine
        .store()
        .history()
        .audit_log(Some(&key(gate)), 100)
        .await
        .expect("audit");
    log.reverse();
    log.into_iter().map(|e| e.action.to_string()).collect()
}

#[tokio::test]
async fn an_authorized_command_opens_and_is_audited_once() {
    let f = engine().await;
    let r = request(Verb::Promote, PROMOTE, "d1", 999_000);
    let out = dispatch::run(&f.engine, "test", &r, &Decides(None)).await;
    assert!(matches!(out, Ok(Outcome::Applied(_))), "{out:?}");
    assert!(matches!(
        f.engine.gate(&key(PROMOTE)).await.unwrap().status,
        GateStatus::Open(_)
    ));
    // The same delivery again changes nothing and is not audited twice.
    let again = dispatch::run(&f.engine, "test", &r, &Decides(None)).await;
    assert!(matches!(again, Ok(Outcome::Applied(_))), "{again:?}");
    assert_eq!(actions(&f.engine, PROMOTE).await, ["open"]);
}

#[tokio::test]
async fn a_denied_command_changes_nothing_and_is_audited_on_every_gate_it_names() {
    let f = engine().await;
    let mut r = request(Verb::Hold, PROMOTE, "d1", 999_000);
    r.subject = Subject::pr("acme/shop".parse().unwrap(), crate::gate::PrNumber(42));
    let out = dispatch::run(&f.engine, "test", &r, &Decides(Some("not a maintainer"))).await;
    assert!(
        matches!(out, Ok(Outcome::Denied("not a maintainer"))),
        "{out:?}"
    );
    for kind in ["start", "promote", "traffic"] {
        let gate = format!("/gates/{kind}/acme/shop/pr/42");
        assert_eq!(actions(&f.engine, &gate).await, ["refuse"], "{gate}");
        assert!(matches!(
            f.engine.gate(&key(&gate)).await.unwrap().status,
            GateStatus::Closed { .. }
        ));
    }
    let log = f
        .engine
        .store()
        .history()
        .audit_log(None, 10)
        .await
        .unwrap();
    assert!(log
        .iter()
        .all(|e| e.reason.as_deref() == Some("refused /hold: not a maintainer")));
}

#[tokio::test]
async fn a_held_gate_and_a_stale_command_are_refused_and_audited() {
    let f = engine().await;
    let hold = request(Verb::Hold, PROMOTE, "h1", 999_000);
    assert!(matches!(
        dispatch::run(&f.engine, "test", &hold, &Decides(None)).await,
        Ok(Outcome::Applied(_))
    ));
    let promote = request(Verb::Promote, PROMOTE, "p1", 999_500);
    let held = dispatch::run(&f.engine, "test", &promote, &Decides(None)).await;
    assert!(matches!(held, Ok(Outcome::Held { .. })), "{held:?}");

    let unhold = request(Verb::Unhold, PROMOTE, "u1", 999_600);
    dispatch::run(&f.engine, "test", &unhold, &Decides(None))
        .await
        .unwrap();
    // Written before the unhold closed the gate: about what came before.
    f.clock.advance(1_000);
    let stale = request(Verb::Promote, PROMOTE, "p2", 999_000);
    let out = dispatch::run(&f.engine, "test", &stale, &Decides(None)).await;
    assert!(
        matches!(out, Ok(Outcome::WrittenBeforeClose { .. })),
        "{out:?}"
    );
    assert_eq!(
        actions(&f.engine, PROMOTE).await,
        ["hold", "refuse", "unhold", "refuse"]
    );
}

/// A delivery whose lease was lost before its unit commits writes nothing
/// (no gate change, no answer): the worker that holds it now applies and
/// answers it, once. Settling with a stale claim used to be ignored, and the
/// person was answered twice.
#[tokio::test]
async fn a_unit_whose_lease_was_lost_writes_nothing() {
    use super::intake::{self, Asked, Replies};
    use crate::notify::{Lease, SendError};
    use crate::store::{NewJob, QueueName};

    let f = engine().await;
    let store = f.engine.store().clone();
    let queues = store.queues();
    let now = f.engine.now();
    assert!(queues
        .receive("test", "d1", "comment", "{}", now)
        .await
        .unwrap());
    let first = queues
        .claim(QueueName::Inbox, "one", now, 1_000)
        .await
        .unwrap()
        .expect("claimed");
    f.clock.advance(2_000);
    let later = f.engine.now();
    let second = queues.claim(QueueName::Inbox, "two", later, 60_000).await;
    assert!(
        second.unwrap().is_some(),
        "the lease ran out: claimed again"
    );
    let lease = Lease {
        queue: QueueName::Inbox,
        owner: "one".into(),
        attempts: first.attempts,
        id: first.id.clone(),
        length: std::time::Duration::from_secs(1),
        store: store.clone(),
        clock: f.clock.clone(),
        lost: Default::default(),
    };
    let r = request(Verb::Promote, PROMOTE, "d1", 999_000);
    let authorized = dispatch::authorize(&f.engine, &r, &Decides(None))
        .await
        .unwrap();
    let answer = NewJob {
        sink: "test".into(),
        topic: "reply".into(),
        payload: "{}".into(),
        dedupe_key: None,
        once_key: None,
        not_before: 0,
    };
    let replies = Replies {
        reply: Some(answer),
        shows: |_| true,
        ..Replies::default()
    };
    let asked = vec![Asked::Command {
        request: Box::new(r),
        authorized,
    }];
    let out = intake::take_told(&f.engine, "test", asked, Some(&lease), replies, Vec::new()).await;
    assert!(matches!(out, Err(SendError::Transient(_))), "{out:?}");
    assert!(matches!(
        f.engine.gate(&key(PROMOTE)).await.unwrap().status,
        GateStatus::Closed { .. }
    ));
    assert_eq!(queues.pending(QueueName::Outbox).await.unwrap(), 0);
    assert!(actions(&f.engine, PROMOTE).await.is_empty());
}

/// Two clicks on one message, each authorized before either commits, Alice's
/// applied first. Returns how Bob's went and the gate his click would open.
async fn two_clicks_at_once(
    f: &Fixture,
    mark: impl Fn(&str) -> super::intake::Mark,
) -> (
    Result<Vec<super::intake::Told>, crate::notify::SendError>,
    GateStatus,
) {
    use super::intake::{self, Asked, Replies};

    let start = "/gates/start/acme/shop/pr/42";
    let mut asked = Vec::new();
    for r in [
        request(Verb::Promote, PROMOTE, "c1", 999_000),
        request(Verb::Start, start, "c2", 999_000),
    ] {
        let authorized = dispatch::authorize(&f.engine, &r, &Decides(None))
            .await
            .unwrap();
        asked.push(Asked::Command {
            request: Box::new(r),
            authorized,
        });
    }
    let late = asked.pop().expect("second");
    let mut outs = Vec::new();
    for (by, one) in [("Alice", asked.pop().expect("first")), ("Bob", late)] {
        let replies = Replies {
            decided: vec![mark(by)],
            ..Replies::default()
        };
        outs.push(intake::take_told(&f.engine, "test", vec![one], None, replies, Vec::new()).await);
    }
    assert!(outs[0].is_ok(), "{:?}", outs[0]);
    let status = f.engine.gate(&key(start)).await.unwrap().status;
    (outs.pop().expect("Bob's"), status)
}

/// The first of two racing clicks decides a Teams card; the second, whose
/// authorization is stale, writes nothing and is asked again (then refused as
/// decided), instead of opening its gate and overwriting the card's decision.
#[tokio::test]
async fn a_card_decided_meanwhile_keeps_its_first_decision() {
    use crate::store::TeamsCard;

    let f = engine().await;
    let card = TeamsCard {
        wait_id: 7,
        gate: PROMOTE.into(),
        canary: "test/podinfo".into(),
        conversation_id: "19:c".into(),
        service_url: "https://smba.example/".into(),
        activity_id: "a1".into(),
        decided: None,
        outcome: None,
        final_state: None,
    };
    let teams = f.engine.store().teams();
    teams
        .remember_teams_card(&card, f.engine.now())
        .await
        .unwrap();
    let (late, start) = two_clicks_at_once(&f, |by| super::intake::Mark::TeamsCard {
        wait_id: 7,
        verb: "approve",
        by: by.into(),
    })
    .await;
    assert!(
        matches!(late, Err(crate::notify::SendError::Retry { .. })),
        "{late:?}"
    );
    let kept = teams.teams_card(7).await.unwrap().expect("card");
    assert_eq!(kept.decided.map(|(_, by, _)| by).as_deref(), Some("Alice"));
    assert!(matches!(start, GateStatus::Closed { .. }), "{start:?}");
}

/// The same race on a Slack message: its first decision stands.
#[tokio::test]
async fn a_slack_message_decided_meanwhile_keeps_its_first_decision() {
    use crate::store::SlackDecision;

    let f = engine().await;
    let (late, start) = two_clicks_at_once(&f, |by| super::intake::Mark::SlackDecision {
        wait_id: 7,
        decision: SlackDecision {
            approved: true,
            user_id: Some(format!("U{by}")),
            name: by.into(),
            via: "slack".into(),
            at: 0,
            reason: None,
            rollback_gate: None,
        },
    })
    .await;
    assert!(
        matches!(late, Err(crate::notify::SendError::Retry { .. })),
        "{late:?}"
    );
    let kept = f.engine.store().slack().slack_decision(7).await.unwrap();
    assert_eq!(kept.map(|d| d.name).as_deref(), Some("Alice"));
    assert!(matches!(start, GateStatus::Closed { .. }), "{start:?}");
}

/// `production --force <why>` breaks glass only in a command typed in a chat
/// channel: not in a button's modal (whatever its gate), the API's or the
/// page's reason; and at a gate typed with its cluster, only after a place
/// that holds that cluster.
#[tokio::test]
async fn force_after_a_place_is_read_only_in_typed_chat_commands() {
    use crate::gate::environment::{Environment, Environments};
    let env = |name: &str, cluster: &str| Environment {
        name: name.parse().unwrap(),
        clusters: vec![cluster.parse().unwrap()],
        after: None,
        soak: std::time::Duration::ZERO,
    };
    let envs = vec![env("staging", "staging-eu"), env("production", "prod-eu")];
    let f = engine_in(Environments::new(envs, None).unwrap()).await;
    let forced = |source: Source, typed: bool, subject: Subject, said: &str| {
        let mut who = Provenance::new(Actor::new("alice", source));
        if typed {
            who = who.typed();
        }
        let request = Request {
            place: None,
            command: Command::from_verb(Verb::Promote, Some(said.to_string())),
            subject,
            who,
        };
        let engine = &f.engine;
        async move {
            let authorized = dispatch::authorize(engine, &request, &Decides(None))
                .await
                .expect("authorized");
            authorized.command_of(&request).forced()
        }
    };
    let said = "production --force db is down";
    let pr = || Subject::pr("acme/shop".parse().unwrap(), crate::gate::PrNumber(42));
    let at = |path: &str| Subject::Gate(key(path));
    assert!(
        forced(Source::Github, true, pr(), said).await,
        "a PR comment"
    );
    assert!(
        forced(Source::Slack, true, pr(), said).await,
        "a slash command"
    );
    let eu = "/gates/promote/acme/shop/pr/42@prod-eu";
    assert!(
        !forced(Source::Slack, false, at(eu), said).await,
        "a button's modal"
    );
    let named = "/gates/promote/named/rel-1";
    assert!(
        !forced(Source::Slack, false, at(named), said).await,
        "a named gate's modal"
    );
    assert!(
        !forced(Source::Api, false, pr(), said).await,
        "the API's reason"
    );
    assert!(
        !forced(Source::Web, false, pr(), said).await,
        "the page's reason"
    );
    assert!(
        forced(Source::Slack, true, at(eu), said).await,
        "a typed gate in its place"
    );
    let elsewhere = "staging --force db is down";
    assert!(
        !forced(Source::Slack, true, at(eu), elsewhere).await,
        "a typed gate elsewhere"
    );
}
