//! Release windows, end to end with the Flagger simulator and the manual
//! clock, on SQLite and PostgreSQL: an approval given on Friday evening,
//! outside the window, promotes on Monday morning, and Flagger is told when.

use std::sync::Arc;
use std::time::Duration;

use gatebot::testing::clock::{ManualClock, SharedClock};
use gatebot::Options;
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::{Backend, TestDb, TestServer, ADMIN_TOKEN};

const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

const POLICY: &str = r#"
holidays = ["2026-12-24"]

[[windows]]
kind = "promote"
days = ["mon", "tue", "wed", "thu", "fri"]
from = "08:00"
to = "16:00"
timezone = "Europe/Berlin"
"#;

fn at(text: &str) -> i64 {
    let t = humantime::parse_rfc3339(text).unwrap();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

async fn server(backend: Backend, clock: Arc<ManualClock>) -> (TestServer, TestDb) {
    let db = TestDb::new(backend).await;
    let mut config = db.config();
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.admin_token = Some(ADMIN_TOKEN.to_string().into());
    config.approval_ttl = Duration::from_secs(24 * 3600);
    let policy = db.dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    config.policy = Some(policy);
    let options = Options {
        clock: Some(clock as SharedClock),
        ..Options::default()
    };
    (TestServer::start(config, options).await, db)
}

gatebot_testkit::on_both_stores!(an_approval_on_friday_evening_promotes_on_monday_morning,);

async fn an_approval_on_friday_evening_promotes_on_monday_morning(backend: Backend) {
    // Friday 2026-12-04, 18:30 in Berlin.
    let clock = ManualClock::new(at("2026-12-04T17:30:00Z"));
    let (server, _db) = server(backend, clock.clone()).await;
    server.open("/gates/start/pr/42").await;
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&server.url, 42));
    sim.deploy("rev-a");
    sim.tick().await;
    sim.deploy("rev-b");
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await,
        "the start gate has no window"
    );
    server.open("/gates/promote/pr/42").await;
    for _ in 0..3 {
        sim.tick().await;
    }
    assert_eq!(
        sim.phase(),
        Phase::WaitingPromotion,
        "held until the window"
    );
    let last = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(
        last.contains("outside the release window (promote: Mon–Fri 08:00–16:00 Europe/Berlin), next window opens Mon 2026-12-07 08:00 CET"),
        "{last}"
    );
    // The approval's day counts from the window's opening, not from Friday.
    let gate = server.api("/api/v1/gates/promote/acme/shop/pr/42").await;
    assert_eq!(gate["state"], "open");
    assert_eq!(gate["expires_at"], at("2026-12-08T07:00:00Z"), "{gate}");

    clock.set(at("2026-12-07T06:59:00Z"));
    sim.tick().await;
    assert_eq!(
        sim.phase(),
        Phase::WaitingPromotion,
        "07:59 is still outside"
    );
    clock.set(at("2026-12-07T07:01:00Z"));
    assert!(
        sim.run_until(|s| s.promotions() == 1, 3).await,
        "promoted on Monday morning"
    );
    let last = sim
        .calls_of(HookType::ConfirmPromotion)
        .last()
        .unwrap()
        .response
        .clone();
    assert!(last.starts_with("approved by admin via api"), "{last}");
}

#[test]
fn a_bad_window_says_which_and_what_to_write() {
    for (text, says) in [
        ("[[windows]]\nkind = \"promote\"\nfrom = \"08:00\"\nto = \"16:00\"\ntimezone = \"Mars/Olympus\"\n", "windows[0] (line 1): timezone `Mars/Olympus`"),
        ("[[windows]]\nkind = \"promote\"\nfrom = \"16:00\"\nto = \"08:00\"\n", "is not before"),
        ("[[windows]]\nkind = \"rollback\"\nfrom = \"08:00\"\nto = \"16:00\"\n", "a rollback is never held back"),
        ("[[windows]]\nkind = \"promote\"\ndays = [\"funday\"]\nfrom = \"08:00\"\nto = \"16:00\"\n", "day `funday`"),
        ("holidays = [\"christmas\"]\n", "holidays[0]"),
    ] {
        let err = gatebot::testing::policy::Policy::parse(text, gatebot::testing::config::Permission::Write, &[])
            .unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains(says), "{text}: {err}");
    }
}
