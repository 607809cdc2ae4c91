//! Release windows across daylight saving transitions. A window's answer is a
//! function of the policy and the instant: every minute from a day before to
//! a day after both 2026 transitions in Europe/Berlin, America/New_York and
//! Australia/Sydney, an evaluator that keeps its answers (started at many
//! different instants, as processes and replicas are) agrees with a fresh
//! one, and both with the rule written out here on its own: open while the
//! local date is one of the window's days and the local wall-clock time is in
//! `[from, to)`. The "opens …" text names the instant the rule opens at.
//! End to end, a long-running server and one started later answer the
//! gateway's checks alike around the spring gap and the autumn fold.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{ManualClock, SharedClock};
use gatebot::testing::config::Permission;
use gatebot::testing::gate::window::{Calendar, WindowCache, WindowState};
use gatebot::testing::gate::GateKind;
use gatebot::testing::policy::Policy;
use gatebot::Options;
use gatebot_testkit::harness::{client, Backend, TestDb, TestServer, ADMIN_TOKEN};
use jiff::civil::{DateTime, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;
use serde_json::json;

const MINUTE: i64 = 60_000;
const DAY: i64 = 1_440 * MINUTE;
const ZONES: [&str; 3] = ["Europe/Berlin", "America/New_York", "Australia/Sydney"];

/// One window, as the test's own rule reads it.
struct Spec {
    days: &'static [Weekday],
    from: &'static str,
    to: &'static str,
}

const SUN: &[Weekday] = &[Weekday::Sunday];
const WEEKEND: &[Weekday] = &[Weekday::Saturday, Weekday::Sunday];
const EVERY_DAY: &[Weekday] = &[
    Weekday::Monday,
    Weekday::Tuesday,
    Weekday::Wednesday,
    Weekday::Thursday,
    Weekday::Friday,
    Weekday::Saturday,
    Weekday::Sunday,
];

/// Calendars whose edges fall before, inside, across and after each zone's
/// gap and fold (02:00–03:00 local in Berlin and Sydney, 02:00–03:00 and
/// 01:00–02:00 in New York).
fn calendars() -> Vec<Vec<Spec>> {
    let spec = |days, from, to| Spec { days, from, to };
    vec![
        vec![spec(SUN, "01:00", "02:30")],
        vec![spec(SUN, "02:30", "02:45")],
        vec![spec(SUN, "01:30", "03:30")],
        vec![spec(EVERY_DAY, "02:00", "02:01")],
        vec![spec(SUN, "00:00", "02:15"), spec(WEEKEND, "02:45", "04:00")],
    ]
}

fn policy_text(zone: &str, specs: &[Spec]) -> String {
    specs
        .iter()
        .map(|s| {
            let days: Vec<String> = s
                .days
                .iter()
                .map(|d| format!("\"{}\"", &format!("{d:?}").to_lowercase()[..3]))
                .collect();
            format!(
                "[[windows]]\nkind = \"promote\"\ndays = [{}]\nfrom = \"{}\"\nto = \"{}\"\ntimezone = \"{zone}\"\n",
                days.join(", "),
                s.from,
                s.to
            )
        })
        .collect()
}

fn calendar(text: &str) -> Calendar {
    Policy::parse(text, Permission::Write, &[])
        .unwrap()
        .calendar()
        .clone()
}

/// The rule, written out independently of the code under test.
fn rule(tz: &TimeZone, specs: &[Spec], at: i64) -> bool {
    let local = Timestamp::from_millisecond(at)
        .unwrap()
        .to_zoned_datetime(tz.clone());
    specs.iter().any(|s| {
        let (from, to): (Time, Time) = (s.from.parse().unwrap(), s.to.parse().unwrap());
        s.days.contains(&local.weekday()) && from <= local.time() && local.time() < to
    })
}

/// The zone's transitions in 2026: its spring gap and autumn fold.
fn transitions(tz: &TimeZone) -> Vec<i64> {
    let start = "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap();
    let all: Vec<i64> = tz
        .following(start)
        .map(|t| t.timestamp().as_millisecond())
        .take_while(|at| {
            *at < "2027-01-01T00:00:00Z"
                .parse::<Timestamp>()
                .unwrap()
                .as_millisecond()
        })
        .collect();
    assert_eq!(all.len(), 2, "two transitions in 2026");
    all
}

/// The local date and time a reason's "opens …" names, and its zone
/// abbreviation.
fn named_opening(reason: &str) -> Option<(DateTime, String)> {
    let text = reason.split("next window opens ").nth(1)?;
    let mut words = text.split(' ');
    let (_day, date, time, abbr) = (words.next()?, words.next()?, words.next()?, words.next()?);
    let dt: DateTime = format!("{date}T{time}").parse().ok()?;
    Some((dt, abbr.to_string()))
}

/// The named local time exists, and in its zone abbreviation it is `at`.
fn names_instant(tz: &TimeZone, reason: &str, at: i64) -> Result<(), String> {
    let (dt, abbr) = named_opening(reason).ok_or_else(|| format!("no opening in {reason:?}"))?;
    let offsets = match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => vec![offset],
        AmbiguousOffset::Fold { before, after } => vec![before, after],
        AmbiguousOffset::Gap { .. } => return Err(format!("{dt} never occurs: {reason:?}")),
    };
    let real = offsets.into_iter().any(|o| {
        let t = o.to_timestamp(dt).unwrap();
        t.as_millisecond() == at
            && t.to_zoned_datetime(tz.clone()).strftime("%Z").to_string() == abbr
    });
    real.then_some(())
        .ok_or_else(|| format!("{reason:?} does not name {at}"))
}

/// Every minute of `[lo, hi)`, seconds varying so that evaluations fall at
/// many offsets within their minute, as clocks and processes do.
fn check_range(zone: &str, specs: &[Spec], lo: i64, hi: i64) {
    let tz = TimeZone::get(zone).unwrap();
    let text = policy_text(zone, specs);
    let cal = calendar(&text);
    let minutes = usize::try_from((hi - lo) / MINUTE).unwrap();
    // Every edge is a whole minute, so the rule at each minute's start holds
    // for the minute; the first later minute where it differs is the change.
    let by_minute: Vec<bool> = (0..minutes)
        .map(|i| rule(&tz, specs, lo + i as i64 * MINUTE))
        .collect();
    let mut next_change = vec![None; minutes];
    for i in (0..minutes.saturating_sub(1)).rev() {
        next_change[i] = if by_minute[i + 1] != by_minute[i] {
            Some(i + 1)
        } else {
            next_change[i + 1]
        };
    }
    // Long-lived evaluators started every 97 minutes, each advanced minute by
    // minute to the end: processes started at different instants.
    let mut kept: Vec<(usize, WindowCache)> = (0..minutes)
        .step_by(97)
        .map(|i| (i, WindowCache::default()))
        .collect();
    for i in 0..minutes {
        let at = lo + i as i64 * MINUTE + (i as i64 * 7_919) % MINUTE;
        let open = by_minute[i];
        assert_eq!(rule(&tz, specs, at), open, "{zone} {text} at {at}");
        let fresh = cal.state(GateKind::Promote, at);
        let ctx = || format!("{zone}\n{text}at {} ({at}): {fresh:?}", local(&tz, at));
        assert_eq!(matches!(fresh, WindowState::Open { .. }), open, "{}", ctx());
        match next_change[i] {
            Some(j) => assert_eq!(fresh.valid_until(), lo + j as i64 * MINUTE, "{}", ctx()),
            None => assert!(fresh.valid_until() >= hi, "{}", ctx()),
        }
        if let WindowState::Closed { reason, next, .. } = &fresh {
            let next = next.unwrap_or_else(|| panic!("{}", ctx()));
            assert_eq!(next, fresh.valid_until(), "{}", ctx());
            assert!(
                rule(&tz, specs, next) && !rule(&tz, specs, next - 1),
                "{}",
                ctx()
            );
            names_instant(&tz, reason, next).unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
        }
        for (since, cache) in kept.iter_mut().filter(|(since, _)| *since <= i) {
            let answer = cache.state(&cal, GateKind::Promote, at);
            assert_eq!(answer, fresh, "kept since minute {since}: {}", ctx());
        }
    }
}

fn local(tz: &TimeZone, at: i64) -> String {
    Timestamp::from_millisecond(at)
        .unwrap()
        .to_zoned_datetime(tz.clone())
        .strftime("%a %Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

#[test]
fn every_minute_around_both_2026_transitions_is_one_answer_in_three_zones() {
    for zone in ZONES {
        let tz = TimeZone::get(zone).unwrap();
        for transition in transitions(&tz) {
            let lo = transition - transition.rem_euclid(MINUTE) - DAY;
            for specs in calendars() {
                check_range(zone, &specs, lo, lo + 2 * DAY);
            }
        }
    }
}

fn at(text: &str) -> i64 {
    text.parse::<Timestamp>().unwrap().as_millisecond()
}

const BERLIN: &str = r#"
[[windows]]
kind = "promote"
days = ["sun"]
from = "01:00"
to = "02:30"
timezone = "Europe/Berlin"
"#;

#[test]
fn the_berlin_window_closes_at_the_spring_jump_and_opens_twice_in_the_fold() {
    let cal = calendar(BERLIN);
    let open = |t: &str| {
        matches!(
            cal.state(GateKind::Promote, at(t)),
            WindowState::Open { .. }
        )
    };
    // 2026-03-29: 01:00 CET is 00:00Z; at 01:00Z the clock jumps from 02:00
    // CET to 03:00 CEST, past 02:30, so the window ends there.
    assert!(open("2026-03-29T00:00:00Z"));
    assert!(open("2026-03-29T00:59:59Z"));
    assert!(!open("2026-03-29T01:00:00Z"));
    assert!(!open("2026-03-29T01:00:10Z"));
    // 2026-10-25: 01:00 CEST is 23:00Z; 02:30 CEST is 00:30Z; at 01:00Z the
    // clock goes back to 02:00 CET, inside the window again until 02:30 CET.
    assert!(open("2026-10-24T23:00:00Z"));
    assert!(!open("2026-10-25T00:30:00Z"));
    assert!(open("2026-10-25T01:00:00Z"));
    assert!(!open("2026-10-25T01:30:00Z"));
    // A process that kept its answer from 00:59:20Z agrees at 01:00:10Z.
    let mut kept = WindowCache::default();
    let before = kept.state(&cal, GateKind::Promote, at("2026-03-29T00:59:20Z"));
    assert_eq!(
        before,
        WindowState::Open {
            until: at("2026-03-29T01:00:00Z")
        }
    );
    assert_eq!(
        kept.state(&cal, GateKind::Promote, at("2026-03-29T01:00:10Z")),
        cal.state(GateKind::Promote, at("2026-03-29T01:00:10Z"))
    );
}

#[test]
fn what_closed_windows_say_across_the_transitions() {
    let inside_the_gap = BERLIN
        .replace("\"01:00\"", "\"02:30\"")
        .replace("to = \"02:30\"", "to = \"02:45\"");
    let cases = [
        (BERLIN.to_string(), "2026-03-29T01:00:10Z"),
        (BERLIN.to_string(), "2026-10-25T00:30:00Z"),
        (inside_the_gap.clone(), "2026-03-28T12:00:00Z"),
        (inside_the_gap, "2026-10-25T00:50:00Z"),
    ];
    let mut lines = String::new();
    for (text, t) in cases {
        let cal = calendar(&text);
        let WindowState::Closed { reason, .. } = cal.state(GateKind::Promote, at(t)) else {
            panic!("closed at {t}: {text}");
        };
        lines.push_str(&format!("{t}: {reason}\n"));
    }
    insta::assert_snapshot!(lines);
}

async fn server(backend: Backend, clock: Arc<ManualClock>) -> (TestServer, TestDb) {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.approval_ttl = Duration::from_secs(30 * 24 * 3600);
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(&policy, BERLIN).unwrap();
    config.policy = Some(policy);
    let options = Options {
        clock: Some(clock as SharedClock),
        ..Options::default()
    };
    let server = TestServer::start(config, options).await;
    server.open("/gates/promote/pr/42").await;
    (server, db)
}

/// Flagger's check of the promote gate; one the store could not answer in
/// time is asked again, as Flagger does at its next poll.
async fn check(server: &TestServer) -> (u16, String) {
    let mut answer = (0, String::new());
    for _ in 0..5 {
        let r = client()
            .post(server.at("/gates/promote/pr/42"))
            .json(&json!({"name": "podinfo", "namespace": "test", "phase": "WaitingPromotion", "checksum": "rev-b"}))
            .send()
            .await
            .unwrap();
        answer = (r.status().as_u16(), r.text().await.unwrap());
        if !answer.1.contains("store busy") {
            break;
        }
    }
    answer
}

gatebot_testkit::on_both_stores!(a_long_running_server_and_a_fresh_one_answer_alike_across_dst,);

async fn a_long_running_server_and_a_fresh_one_answer_alike_across_dst(backend: Backend) {
    let cal = calendar(BERLIN);
    for (first, last) in [
        ("2026-03-28T23:50:20Z", "2026-03-29T01:10:20Z"),
        ("2026-10-24T22:50:20Z", "2026-10-25T01:40:20Z"),
    ] {
        let (first, last) = (at(first), at(last));
        let clock = ManualClock::new(first);
        let (long_running, _db) = server(backend, clock.clone()).await;
        let mut t = first;
        while t <= last {
            clock.set(t);
            let (status, body) = check(&long_running).await;
            let expected = match cal.state(GateKind::Promote, t) {
                WindowState::Closed { reason, .. } => (403, reason),
                _ => (200, String::new()),
            };
            assert_eq!(status, expected.0, "at {t}: {body}");
            if status == 403 {
                assert!(body.contains(&expected.1), "at {t}: {body}");
            }
            t += MINUTE;
        }
        long_running.stop().await;
    }
    // The issue's pair: one started at 00:59:20Z and one at 01:00:10Z on the
    // spring day both answer 403 at 01:00:10Z, with the same reason.
    let early = ManualClock::new(at("2026-03-29T00:59:20Z"));
    let (early_server, _early_db) = server(backend, early.clone()).await;
    assert_eq!(check(&early_server).await.0, 200);
    early.set(at("2026-03-29T01:00:10Z"));
    let late = ManualClock::new(at("2026-03-29T01:00:10Z"));
    let (late_server, _late_db) = server(backend, late).await;
    let (a, b) = (check(&early_server).await, check(&late_server).await);
    assert_eq!(a.0, 403, "{}", a.1);
    assert_eq!(a, b);
    early_server.stop().await;
    late_server.stop().await;
}
