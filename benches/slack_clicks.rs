//! Signed Slack button clicks at a fixed rate against an in-process gatebot:
//! throughput and time to acknowledge (goal: p99 < 20 ms at 500 clicks/s).
//! With `GATEBOT_BENCH_SOCKET=1` the same clicks come as Socket Mode envelopes
//! over the fake Slack's WebSocket, timed from sending each until its
//! acknowledgement is back.
//!
//!     cargo bench --bench slack_clicks
//!     GATEBOT_BENCH_RATE=1000 GATEBOT_BENCH_SECS=10 cargo bench --bench slack_clicks
//!     GATEBOT_BENCH_SOCKET=1 cargo bench --bench slack_clicks
//!     GATEBOT_BENCH_TEAMS=1 GATEBOT_BENCH_RATE=100 cargo bench --bench slack_clicks
//!
//! With `GATEBOT_BENCH_TEAMS=1` the clicks are Microsoft Teams card clicks
//! (`adaptiveCard/action` invokes with a Bot Framework token) on the same
//! wait, half of them by someone not allowed. Teams is answered with the
//! updated card (or the refusal), so its time to acknowledge includes
//! applying the click; Slack's does not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gatebot::{Config, Options};
use gatebot_testkit::{fake_slack, harness};
use serde_json::json;

const SECRET: &str = "bench-signing-secret";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rate = env_or("GATEBOT_BENCH_RATE", 500);
    let secs = env_or("GATEBOT_BENCH_SECS", 5);
    let socket = env_or("GATEBOT_BENCH_SOCKET", 0) == 1;
    if env_or("GATEBOT_BENCH_TEAMS", 0) == 1 {
        return teams::run(rate, secs).await;
    }
    let slack = fake_slack::FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        Config::with_database(&format!("sqlite://{}/gatebot.db", dir.path().display()));
    config.github.repository = Some("acme/shop".parse().unwrap());
    config.slack.signing_secret = Some(SECRET.to_string().into());
    config.slack.bot_token = Some("xoxb-bench".to_string().into());
    config.slack.channel = Some("#deploys".into());
    config.slack.api_url = slack.api_url();
    config.slack.approvers = vec!["UALICE".into()];
    if socket {
        config.slack.app_token = Some("xapp-1-bench".to_string().into());
    }
    let server = harness::TestServer::start(config, Options::default()).await;
    let connection = if socket {
        let deadline = Instant::now() + Duration::from_secs(10);
        while slack.socket().open().is_empty() {
            assert!(Instant::now() < deadline, "no Socket Mode connection");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Some(slack.socket().open()[0])
    } else {
        None
    };
    let base = server.url.clone();

    // One wait to click on.
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{base}/gates/start/pr/1"))
        .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Waiting", "checksum": "rev-a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let value = json!({"g": "/gates/start/acme/shop/pr/1", "w": 1}).to_string();

    let total = rate * secs;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(total as usize)));
    let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut envelopes = Vec::with_capacity(total as usize);
    for n in 0..total {
        tick.tick().await;
        let payload = json!({
            "type": "block_actions", "team": null,
            "user": {"id": if n % 2 == 0 { "UALICE" } else { "UMALLORY" }, "username": "u"},
            "trigger_id": format!("bench-{n}"),
            "response_url": slack.response_url(&format!("bench-{n}")),
            "actions": [{"action_id": "gatebot_approve", "type": "button", "value": value, "action_ts": "1.0"}],
        });
        if let Some(connection) = connection {
            let sent = Instant::now();
            envelopes.push((
                slack.socket().send_to(connection, "interactive", payload),
                sent,
            ));
            continue;
        }
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        let (http, base) = (http.clone(), base.clone());
        let (latencies, failures) = (latencies.clone(), failures.clone());
        tasks.spawn(async move {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                .to_string();
            let sig =
                gatebot::testing::slack::verify::sign(SECRET.as_bytes(), &ts, body.as_bytes());
            let sent = Instant::now();
            let r = http
                .post(format!("{base}/webhooks/slack/interactions"))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("x-slack-request-timestamp", ts)
                .header("x-slack-signature", sig)
                .body(body)
                .send()
                .await;
            let took = sent.elapsed();
            match r {
                Ok(r) if r.status() == 200 => latencies.lock().unwrap().push(took),
                _ => {
                    failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    if !envelopes.is_empty() {
        // Every acknowledgement, or what came within 10 s of the last send.
        let deadline = Instant::now() + Duration::from_secs(10);
        while slack.socket().acks().len() < envelopes.len() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let acks: std::collections::HashMap<String, Instant> = slack
            .socket()
            .acks()
            .into_iter()
            .map(|a| (a.envelope_id, a.at))
            .collect();
        let mut l = latencies.lock().unwrap();
        for (id, sent) in &envelopes {
            match acks.get(id) {
                Some(at) => l.push(at.duration_since(*sent)),
                None => {
                    failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let mut l = latencies.lock().unwrap().clone();
    l.sort();
    let ok = l.len();
    let what = if socket {
        "Socket Mode envelopes"
    } else {
        "signed clicks"
    };
    println!("slack_clicks: {total} {what} offered at {rate}/s over {secs} s");
    println!(
        "  acknowledged: {ok}, failed: {}, throughput {:.0} clicks/s",
        failures.load(std::sync::atomic::Ordering::Relaxed),
        ok as f64 / elapsed.as_secs_f64()
    );
    if ok > 0 {
        println!(
            "  time to acknowledge: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            percentile(&l, 0.50).as_secs_f64() * 1e3,
            percentile(&l, 0.90).as_secs_f64() * 1e3,
            percentile(&l, 0.99).as_secs_f64() * 1e3,
            l[ok - 1].as_secs_f64() * 1e3,
        );
        let goal = percentile(&l, 0.99) < Duration::from_millis(20);
        println!(
            "  goal p99 < 20 ms: {}",
            if goal { "met" } else { "NOT met" }
        );
    }
    // How far the inbox got meanwhile (it works after acknowledging).
    println!(
        "  Slack answers sent by the end: {} response_url posts, {} chat.update",
        slack.ok("respond").len(),
        slack.ok("chat.update").len()
    );
    server.stop().await;
}

/// Teams card clicks, timed from sending each invoke until its answer.
mod teams {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use gatebot::{Config, Options};
    use gatebot_testkit::fake_teams::{claims, FakeBotFramework, TestKey};
    use gatebot_testkit::harness;
    use serde_json::{json, Value};

    const APP_ID: &str = "0b6fe6d1-fece-44f7-9a48-56465e2d5ab8";
    const TENANT: &str = "50612dbb-0237-4969-b378-8d42590f9c00";
    const APPROVER: &str = "b15a9416-0ad3-4172-9210-7beb711d3f70";

    fn invoke(service_url: &str, n: u64) -> Value {
        let who = if n.is_multiple_of(2) {
            APPROVER
        } else {
            "00000000-0000-0000-0000-00000000beef"
        };
        json!({
            "type": "invoke", "name": "adaptiveCard/action", "id": format!("f:bench-{n}"),
            "serviceUrl": service_url, "channelId": "msteams",
            "from": {"id": format!("29:{who}"), "name": "bench", "aadObjectId": who},
            "conversation": {"id": "19:bench@thread.tacv2", "tenantId": TENANT},
            "channelData": {"tenant": {"id": TENANT}},
            "value": {"action": {"type": "Action.Execute", "verb": "approve",
                      "data": {"wait_id": 1, "gate": "/gates/start/acme/shop/pr/1"}}},
        })
    }

    pub async fn run(rate: u64, secs: u64) {
        let key = TestKey::new("bench-key");
        let bot = FakeBotFramework::start(std::slice::from_ref(&key)).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config =
            Config::with_database(&format!("sqlite://{}/gatebot.db", dir.path().display()));
        config.github.repository = Some("acme/shop".parse().unwrap());
        config.teams.app_id = Some(APP_ID.into());
        config.teams.tenants = vec![TENANT.into()];
        config.teams.openid_metadata_url = bot.metadata_url();
        config.teams.approvers = vec![APPROVER.into()];
        let server = harness::TestServer::start(config, Options::default()).await;
        let base = server.url.clone();
        let http = reqwest::Client::new();
        let r = http
            .post(format!("{base}/gates/start/pr/1"))
            .json(&json!({"name": "podinfo", "namespace": "test", "phase": "Waiting", "checksum": "rev-a"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        // One token for every click: the Bot Framework's are valid for an hour.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let service_url = bot.service_url();
        let token = key.sign(&claims(APP_ID, &service_url, now));

        let total = rate * secs;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(total as usize)));
        let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..total {
            tick.tick().await;
            let body = invoke(&service_url, n);
            let (http, base, token) = (http.clone(), base.clone(), token.clone());
            let (latencies, failures) = (latencies.clone(), failures.clone());
            tasks.spawn(async move {
                let sent = Instant::now();
                let r = http
                    .post(format!("{base}/webhooks/teams"))
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await;
                let took = sent.elapsed();
                match r {
                    Ok(r) if r.status() == 200 => latencies.lock().unwrap().push(took),
                    _ => {
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let elapsed = started.elapsed();
        let mut l = latencies.lock().unwrap().clone();
        l.sort();
        let ok = l.len();
        println!("teams_clicks: {total} card clicks offered at {rate}/s over {secs} s");
        println!(
            "  answered: {ok}, failed: {}, throughput {:.0} clicks/s",
            failures.load(std::sync::atomic::Ordering::Relaxed),
            ok as f64 / elapsed.as_secs_f64()
        );
        if ok > 0 {
            println!(
                "  time to answer (the click applied): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                super::percentile(&l, 0.50).as_secs_f64() * 1e3,
                super::percentile(&l, 0.90).as_secs_f64() * 1e3,
                super::percentile(&l, 0.99).as_secs_f64() * 1e3,
                l[ok - 1].as_secs_f64() * 1e3,
            );
        }
        server.stop().await;
    }
}
