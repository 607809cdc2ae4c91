//! Slack Socket Mode end to end: gatebot opens the connection
//! (`apps.connections.open`, then the WebSocket) to the fake Slack, which
//! speaks Slack's frames, and takes clicks and slash commands from it with no
//! signing secret and no public URL. Acknowledged only once stored; a dropped
//! connection, a `disconnect` refresh, a silent link and two replicas each lose
//! nothing and apply every click once.

use std::time::Duration;

use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::fake_socket_mode::Hub;
use gatebot_testkit::flagger::{pr_hooks, FlaggerSim, HookType, Phase, Strategy};
use gatebot_testkit::harness::{eventually, postgres_url, Backend, TestDb, TestServer};
use serde_json::{json, Value};
use sqlx::Connection;

const WAIT: Duration = Duration::from_secs(10);
const PROMOTE: &str = "/gates/promote/acme/shop/pr/42";
const CANARY: Strategy = Strategy::Canary {
    step_weight: 50,
    max_weight: 50,
};

const POLICY: &str = r#"
[slack]
approvers = ["UALICE", "UBOB"]

[slack.commands.freeze]
approvers = ["UALICE"]
"#;

/// gatebot with Socket Mode on (an app token, no signing secret), connected.
async fn env(backend: Backend) -> ChatOps {
    let env = ChatOps::start_with(
        backend,
        Setup {
            policy: POLICY,
            ..Setup::default()
        },
        |config| {
            config.slack.signing_secret = None;
            config.slack.app_token = Some("xapp-1-A0FAKE-1-test".to_string().into());
        },
    )
    .await;
    connected(&env.server, 1).await;
    env
}

/// Waits until `server` holds `n` greeted Socket Mode connections.
async fn connected(server: &TestServer, n: usize) {
    eventually("Socket Mode connected", WAIT, || async {
        server.metric("gatebot_slack_socket_connections").await == n as f64
    })
    .await;
}

fn socket(env: &ChatOps) -> &Hub {
    env.slack.socket()
}

/// The open connection, when exactly one is open.
fn only_open(env: &ChatOps) -> usize {
    let open = socket(env).open();
    assert_eq!(open.len(), 1, "one open connection: {open:?}");
    open[0]
}

async fn acked(env: &ChatOps, envelope: &str) -> Vec<gatebot_testkit::fake_socket_mode::SocketAck> {
    eventually(&format!("the ack of {envelope}"), WAIT, || async {
        !socket(env).acks_of(envelope).is_empty()
    })
    .await;
    socket(env).acks_of(envelope)
}

/// Flagger waiting at the promote gate of PR 42.
async fn waiting_to_promote(env: &ChatOps) -> FlaggerSim {
    env.server.open("/gates/start/pr/42").await;
    let mut sim = FlaggerSim::new("podinfo", "test", CANARY, pr_hooks(&env.server.url, 42));
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

/// Ticks until Flagger promotes.
async fn promotes(sim: &mut FlaggerSim) {
    assert!(
        sim.run_until(|s| s.promotions() == 1, 10).await,
        "promoted; promote answers: {:?}",
        sim.calls_of(HookType::ConfirmPromotion)
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>()
    );
}

fn approve(env: &ChatOps, user: &str, trigger: &str) -> Value {
    let message = env.waiting_message(PROMOTE).expect("a waiting message");
    env.click_payload(
        user,
        &user.to_ascii_lowercase(),
        "gatebot_approve",
        &message,
        trigger,
    )
}

async fn audit_actions(server: &TestServer, gate: &str) -> Vec<String> {
    let gate = server
        .api(&format!("/api/v1/gates{}", &gate["/gates".len()..]))
        .await;
    gate["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["action"].as_str().unwrap_or_default(),
                e["actor"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Another connection on the same store that holds the inbox's table locked,
/// so no receipt can be stored until it lets go.
struct InboxLock(sqlx::AnyConnection);

impl InboxLock {
    async fn take(db: &TestDb) -> Self {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
        match db.backend {
            Backend::Sqlite => {
                sqlx::raw_sql("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            Backend::Postgres => {
                sqlx::raw_sql("BEGIN; LOCK TABLE inbox IN EXCLUSIVE MODE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
        }
        Self(conn)
    }

    async fn release(mut self) {
        sqlx::raw_sql("COMMIT").execute(&mut self.0).await.unwrap();
    }
}

gatebot_testkit::on_both_stores!(
    a_click_is_acknowledged_only_once_stored_and_flagger_promotes,
    a_dropped_connection_loses_nothing_and_applies_each_once,
    a_burst_of_envelopes_is_held_to_a_bound_and_none_is_lost,
);

/// A click while the store cannot take its receipt is not acknowledged
/// (Slack delivers it again); once stored it is, and Flagger promotes. Slash
/// commands are answered in their acknowledgement; malformed frames are
/// counted and change nothing.
async fn a_click_is_acknowledged_only_once_stored_and_flagger_promotes(backend: Backend) {
    let env = env(backend).await;
    let conn = only_open(&env);
    let opened = env.slack.ok("apps.connections.open");
    assert_eq!(opened.len(), 1);
    assert_eq!(
        opened[0].auth.as_deref(),
        Some("Bearer xapp-1-A0FAKE-1-test"),
        "opened with the app-level token"
    );
    // No signing secret: the HTTP routes are not the way in.
    let r = gatebot_testkit::harness::client()
        .post(env.server.at("/webhooks/slack/interactions"))
        .body("payload=%7B%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);

    let mut sim = waiting_to_promote(&env).await;

    // The store is stuck: the click is read but not acknowledged.
    let lock = InboxLock::take(&env.db).await;
    let click = socket(&env).send_to(conn, "interactive", approve(&env, "UALICE", "trig-1"));
    eventually("the click given up unacknowledged", WAIT, || async {
        env.server
            .metric(r#"gatebot_slack_socket_envelopes_total{kind="interactive",result="unacked"}"#)
            .await
            == 1.0
    })
    .await;
    assert!(
        socket(&env).acks_of(&click).is_empty(),
        "nothing acknowledged before its receipt is stored"
    );
    lock.release().await;

    // Slack delivers it again 3 s later; now it is stored and acknowledged.
    socket(&env).retry_unacked();
    let acks = acked(&env, &click).await;
    assert_eq!(acks.len(), 1);
    assert!(acks[0].payload.is_none(), "a click's ack carries nothing");
    env.server.drained().await;
    promotes(&mut sim).await;
    let opens: Vec<String> = audit_actions(&env.server, PROMOTE)
        .await
        .into_iter()
        .filter(|a| a.starts_with("open"))
        .collect();
    assert_eq!(opens, ["open ualice"], "opened once, by the click");

    // A slash command is answered in its acknowledgement.
    let help = socket(&env).send_to(
        conn,
        "slash_commands",
        env.slash_payload("UBOB", "bob", "help", "trig-2"),
    );
    let ack = acked(&env, &help).await.remove(0);
    let answer = ack.payload.expect("the command's answer");
    assert_eq!(answer["response_type"], "ephemeral");
    assert!(
        answer["text"].as_str().unwrap().contains("promote"),
        "{answer}"
    );

    // Malformed frames and events gatebot did not ask for change nothing;
    // the connection stays and the next envelope is still taken.
    let before = env
        .server
        .metric(
            r#"gatebot_rejected_requests_total{route="slack_socket",reason="malformed_payload"}"#,
        )
        .await;
    socket(&env).send_raw(conn, "{not json");
    socket(&env).send_raw(conn, r#"{"type":"interactive","payload":{}}"#);
    let garbled = socket(&env).send_to(conn, "interactive", json!({"type": 7}));
    let event = socket(&env).send_to(
        conn,
        "events_api",
        json!({"event": {"type": "app_mention"}}),
    );
    acked(&env, &garbled).await;
    acked(&env, &event).await;
    assert_eq!(
        env.server.metric(r#"gatebot_rejected_requests_total{route="slack_socket",reason="malformed_payload"}"#).await,
        before + 3.0
    );
    assert_eq!(socket(&env).open(), [conn], "still the same connection");
    assert_eq!(
        env.server
            .metric(r#"gatebot_slack_socket_envelopes_total{kind="interactive",result="acked"}"#)
            .await,
        1.0
    );
    assert!(
        env.server
            .metric("gatebot_slack_socket_ack_duration_seconds_count")
            .await
            >= 4.0
    );

    // On shutdown gatebot closes its connection.
    let ChatOps { server, slack, .. } = env;
    server.stop().await;
    eventually("the connection closed", WAIT, || async {
        slack.socket().open().is_empty()
    })
    .await;
}

/// An acknowledgement lost with its connection, and an envelope whose
/// connection dropped before it could be acknowledged: Slack delivers both
/// again on the next connection; each is applied once.
async fn a_dropped_connection_loses_nothing_and_applies_each_once(backend: Backend) {
    let env = env(backend).await;
    let mut sim = waiting_to_promote(&env).await;
    let first = only_open(&env);

    // The ack is sent, but the connection drops before Slack sees it.
    socket(&env).lose_next_ack(first);
    let click = socket(&env).send_to(first, "interactive", approve(&env, "UALICE", "trig-1"));
    let acks = acked(&env, &click).await;
    assert_eq!(acks.len(), 1);
    assert_ne!(
        acks[0].connection, first,
        "acknowledged on the next connection"
    );
    env.server.drained().await;
    promotes(&mut sim).await;
    let by_alice: Vec<String> = audit_actions(&env.server, PROMOTE)
        .await
        .into_iter()
        .filter(|a| a.ends_with(" ualice"))
        .collect();
    assert_eq!(
        by_alice,
        ["open ualice"],
        "the redelivered click applied once, not refused as a second one"
    );

    // The connection drops right after the envelope was sent.
    connected(&env.server, 1).await;
    let second = only_open(&env);
    let freeze = socket(&env).send_to(
        second,
        "slash_commands",
        env.slash_payload(
            "UALICE",
            "alice",
            "freeze all for 1h release train",
            "trig-2",
        ),
    );
    socket(&env).drop_connection(second);
    let acks = acked(&env, &freeze).await;
    assert!(acks.iter().all(|a| a.connection != second));
    env.server.drained().await;
    let freezes = env.server.api("/api/v1/freezes").await;
    assert_eq!(
        freezes["freezes"].as_array().map(Vec::len),
        Some(1),
        "one freeze: {freezes}"
    );
    let announced = env
        .announcements()
        .into_iter()
        .filter(|t| t.contains("release train"))
        .count();
    assert_eq!(announced, 1, "announced once");
    assert!(socket(&env).unacked() == 0);
}

/// Slack's `disconnect` (refresh_requested): the next connection opens
/// before the old one closes, and the old one still delivers until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_refresh_opens_the_next_connection_first() {
    let env = env(Backend::Sqlite).await;
    let old = only_open(&env);
    socket(&env).disconnect(old, "refresh_requested");
    eventually("a second connection", WAIT, || async {
        socket(&env).open().len() == 2
    })
    .await;
    connected(&env.server, 2).await;
    // Until Slack closes it, the old connection is still read.
    let late = socket(&env).send_to(
        old,
        "slash_commands",
        env.slash_payload("UBOB", "bob", "help", "trig-1"),
    );
    assert_eq!(acked(&env, &late).await[0].connection, old);
    socket(&env).close_connection(old);
    connected(&env.server, 1).await;
    let new = only_open(&env);
    assert_ne!(new, old);
    let next = socket(&env).send_to(
        new,
        "slash_commands",
        env.slash_payload("UBOB", "bob", "help", "trig-2"),
    );
    assert_eq!(acked(&env, &next).await[0].connection, new);
    assert_eq!(socket(&env).opened(), 2, "no third connection");
    assert_eq!(
        env.server
            .metric(r#"gatebot_slack_socket_disconnects_total{reason="refresh_requested"}"#)
            .await,
        1.0
    );
}

/// A dropped connection whose replacement cannot open at first is retried
/// with backoff; a healthy idle connection is kept past the silence limit,
/// and one that goes silent (no pong) is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_network_is_retried_and_a_silent_connection_replaced() {
    let env = env(Backend::Sqlite).await;
    let first = only_open(&env);
    env.slack
        .fail_next("apps.connections.open", 500, None, Some("internal_error"));
    env.slack
        .fail_next("apps.connections.open", 200, None, Some("internal_error"));
    socket(&env).drop_connection(first);
    eventually("a new connection after two failed tries", WAIT, || async {
        socket(&env).open().len() == 1 && socket(&env).opened() == 2
    })
    .await;
    connected(&env.server, 1).await;
    assert_eq!(env.slack.attempts("apps.connections.open").len(), 4);
    assert_eq!(
        env.server
            .metric(r#"gatebot_slack_socket_connects_total{result="failed"}"#)
            .await,
        2.0
    );
    assert_eq!(
        env.server
            .metric(r#"gatebot_outbound_requests_total{service="slack",endpoint="apps.connections.open",result="server_error"}"#)
            .await,
        1.0
    );

    // A healthy connection outlives the silence limit: Slack's pongs count.
    let quiet = only_open(&env);
    eventually(
        "four pings answered (20 s, past the 15 s silence limit)",
        Duration::from_secs(40),
        || async { socket(&env).pings(quiet) >= 4 },
    )
    .await;
    assert_eq!(socket(&env).open(), [quiet], "the same connection");
    assert_eq!(socket(&env).opened(), 2);

    // The link goes quiet without closing: no pong comes back.
    socket(&env).freeze(quiet);
    eventually(
        "a new connection in place of the silent one",
        Duration::from_secs(40),
        || async { socket(&env).opened() == 3 },
    )
    .await;
    connected(&env.server, 1).await;
    assert_eq!(
        env.server
            .metric(r#"gatebot_slack_socket_disconnects_total{reason="silent"}"#)
            .await,
        1.0
    );
    socket(&env).drop_connection(quiet);
    eventually("the silent connection gone", WAIT, || async {
        socket(&env).open().len() == 1
    })
    .await;
    let next = only_open(&env);
    let help = socket(&env).send_to(
        next,
        "slash_commands",
        env.slash_payload("UBOB", "bob", "help", "trig-1"),
    );
    acked(&env, &help).await;
}

/// Two replicas each hold a connection; the same click delivered to both
/// (a retry racing the original) and a click whose connection died before
/// its ack are each applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(gatebot_test_postgres),
    ignore = "needs PostgreSQL: set GATEBOT_TEST_POSTGRES_URL"
)]
async fn two_replicas_each_connect_and_every_click_is_applied_once() {
    if postgres_url().is_none() {
        eprintln!("SKIPPED on PostgreSQL: set GATEBOT_TEST_POSTGRES_URL (bash .ci/run does)");
        return;
    }
    let env = env(Backend::Postgres).await;
    let b = env.replica().await;
    connected(&b, 1).await;
    let open = socket(&env).open();
    assert_eq!(open.len(), 2, "one connection per replica");
    let mut sim = waiting_to_promote(&env).await;

    let payload = approve(&env, "UALICE", "trig-1");
    let one = socket(&env).send_to(open[0], "interactive", payload.clone());
    let other = socket(&env).send_to(open[1], "interactive", payload);
    acked(&env, &one).await;
    acked(&env, &other).await;
    env.server.drained().await;
    b.drained().await;
    promotes(&mut sim).await;
    let opens = audit_actions(&env.server, PROMOTE)
        .await
        .into_iter()
        .filter(|a| a.starts_with("open"))
        .count();
    assert_eq!(opens, 1, "applied once across replicas");

    // A's connection dies before its ack reaches Slack: B's takes it.
    let freeze = env.slash_payload(
        "UALICE",
        "alice",
        "freeze all for 1h replica test",
        "trig-2",
    );
    socket(&env).lose_next_ack(open[0]);
    let envelope = socket(&env).send_to(open[0], "slash_commands", freeze);
    acked(&env, &envelope).await;
    env.server.drained().await;
    b.drained().await;
    let announced = env
        .announcements()
        .into_iter()
        .filter(|t| t.contains("replica test"))
        .count();
    assert_eq!(announced, 1, "frozen and announced once");
    b.stop().await;
}

/// A Slack that answers every `hello` with `disconnect`: the replica never
/// holds more than two connections, opens with backoff instead of at once,
/// and settles on one connection when Slack does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_storm_holds_two_connections_and_backs_off() {
    let env = env(Backend::Sqlite).await;
    let first = only_open(&env);
    socket(&env).disconnect_after_hello(Some("refresh_requested"));
    socket(&env).disconnect(first, "refresh_requested");
    let storm = Duration::from_secs(8);
    let started = std::time::Instant::now();
    let mut most = 0.0f64;
    while started.elapsed() < storm {
        most = most.max(env.server.metric("gatebot_slack_socket_connections").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let opens = env.slack.attempts("apps.connections.open").len();
    assert!(
        socket(&env).max_open() <= 2,
        "at most two connections at once, Slack saw {}",
        socket(&env).max_open()
    );
    assert!(most <= 2.0, "gatebot held {most} greeted connections");
    // 1 + opens at about 1, 2, 4 and 8 s; without backoff, one per disconnect.
    assert!(opens <= 7, "{opens} opens in {storm:?} of disconnects");
    assert!(opens >= 3, "still trying: {opens} opens");

    // Slack calms down and ends the connections it told to leave, as it
    // does seconds after a `disconnect`: one connection is left, and it
    // carries commands again. (Not just any single one: the last told to
    // leave may be draining alone while its replacement waits out backoff.)
    socket(&env).disconnect_after_hello(None);
    eventually(
        "one lasting connection",
        Duration::from_secs(30),
        || async {
            for leaving in socket(&env).leaving() {
                socket(&env).close_connection(leaving);
            }
            let open = socket(&env).open();
            open.len() == 1
                && socket(&env).leaving().is_empty()
                && env.server.metric("gatebot_slack_socket_connections").await == 1.0
        },
    )
    .await;
    let conn = only_open(&env);
    let help = socket(&env).send_to(
        conn,
        "slash_commands",
        env.slash_payload("UBOB", "bob", "help", "trig-1"),
    );
    acked(&env, &help).await;
    assert!(socket(&env).max_open() <= 2);
}

/// `apps.connections.open` answered 429 with `Retry-After`: the next try
/// waits that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_on_opening_a_connection_is_obeyed() {
    let env = env(Backend::Sqlite).await;
    let first = only_open(&env);
    env.slack.rate_limit_next("apps.connections.open", 3);
    socket(&env).drop_connection(first);
    eventually("connected again", Duration::from_secs(20), || async {
        socket(&env).open().len() == 1 && socket(&env).opened() == 2
    })
    .await;
    let attempts = env.slack.attempts("apps.connections.open");
    assert_eq!(
        attempts.len(),
        3,
        "the first, the limited one, and the next"
    );
    assert_eq!(attempts[1].status, 429);
    let waited = attempts[2].at - attempts[1].at;
    assert!(
        waited >= Duration::from_secs(3),
        "tried again after {waited:?}, before Retry-After's 3 s"
    );
}

/// A burst of clicks while the store cannot take them: only a bounded number
/// is held in memory at a time, the rest go back to Slack unacknowledged and
/// are counted; once the store is back, every click is stored and the gate
/// opens once.
async fn a_burst_of_envelopes_is_held_to_a_bound_and_none_is_lost(backend: Backend) {
    const BURST: usize = 200;
    let env = env(backend).await;
    let conn = only_open(&env);
    let mut sim = waiting_to_promote(&env).await;
    let lock = InboxLock::take(&env.db).await;
    let clicks: Vec<String> = (0..BURST)
        .map(|i| {
            let payload = approve(&env, "UALICE", &format!("burst-{i}"));
            socket(&env).send_to(conn, "interactive", payload)
        })
        .collect();
    let shed = r#"gatebot_slack_socket_envelopes_total{kind="interactive",result="shed"}"#;
    let unacked = r#"gatebot_slack_socket_envelopes_total{kind="interactive",result="unacked"}"#;
    eventually("every envelope of the burst given back", WAIT, || async {
        env.server.metric(shed).await + env.server.metric(unacked).await == BURST as f64
    })
    .await;
    let held = env.server.metric(unacked).await;
    assert!(
        held <= 32.0,
        "{held} envelopes were held waiting for the store at once"
    );
    assert!(
        socket(&env).acks().is_empty(),
        "nothing acknowledged unstored"
    );
    lock.release().await;

    // Slack delivers each again; every one is stored, acknowledged once.
    socket(&env).retry_unacked();
    eventually(
        "every click acknowledged",
        Duration::from_secs(30),
        || async {
            if socket(&env).unacked() > 0 {
                socket(&env).retry_unacked();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            clicks.iter().all(|c| !socket(&env).acks_of(c).is_empty())
        },
    )
    .await;
    // Every click is in the inbox once and worked; the first opens the gate.
    // (The API shows only the latest 100 audit lines, so count in the store.)
    sqlx::any::install_default_drivers();
    let mut db = sqlx::AnyConnection::connect(&env.db.url).await.unwrap();
    let worked = "SELECT COUNT(*) FROM inbox WHERE kind = 'block_actions' AND state = 'done'";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (done,): (i64,) = sqlx::query_as(worked).fetch_one(&mut db).await.unwrap();
        if done == BURST as i64 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{done} of {BURST} clicks worked"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (opens,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM audit WHERE gate_key LIKE '%promote%' AND action = 'open'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(opens, 1, "one person's clicks open the gate once");
    promotes(&mut sim).await;
}

/// A reason modal submitted blank stays open: its acknowledgement carries
/// Slack's `response_action: errors`, as the HTTP route's answer does.
#[tokio::test]
async fn a_blank_reason_modal_is_kept_open_by_its_acknowledgement() {
    let env = env(Backend::Sqlite).await;
    let conn = only_open(&env);
    let origin = json!({"a": "gatebot_approve", "v": "{}", "r": null}).to_string();
    let state =
        json!({"values": {"reason": {"reason": {"type": "plain_text_input", "value": "  "}}}});
    let submission = json!({
        "type": "view_submission",
        "user": {"id": "UALICE", "username": "alice", "name": "alice", "team_id": "T9TK3CUKW"},
        "trigger_id": "trig-modal",
        "view": {
            "id": "V1", "type": "modal", "callback_id": "gatebot_reason",
            "private_metadata": origin, "state": state,
        },
    });
    let envelope = socket(&env).send_to(conn, "interactive", submission);
    let acks = acked(&env, &envelope).await;
    assert_eq!(
        acks[0].payload,
        Some(json!({
            "response_action": "errors",
            "errors": {"reason": "Write why in words: it is recorded with your decision."},
        }))
    );
    let refused =
        r#"gatebot_rejected_requests_total{route="slack_socket",reason="reason_missing"}"#;
    assert_eq!(env.server.metric(refused).await, 1.0);
}
