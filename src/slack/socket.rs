//! Slack Socket Mode: clicks and slash commands over a WebSocket that gatebot
//! opens, so Slack needs no public URL. A channel like the HTTP routes: each
//! envelope goes through [`accept`] (the same receipts, inbox and dedupe) and
//! is acknowledged only once its receipt is stored; what is not stored in
//! time is not acknowledged, and Slack delivers it again.
//!
//! One connection is kept open per replica. When Slack asks for a new one
//! (`disconnect`: `refresh_requested`, `warning`, …) the next is opened
//! first and the old one keeps delivering until Slack closes it. A lost or
//! silent connection is replaced at once, then with growing, jittered delays
//! while opening fails. Several replicas may each hold one: Slack gives an
//! envelope to one of them, and a redelivery to another is a duplicate
//! receipt, applied once.
//!
//! slack-morphism's Socket Mode client opens its WebSocket with
//! tokio-tungstenite's own connector: no `HTTPS_PROXY` and no
//! `GATEBOT_EXTRA_CA_FILE`, which a private cluster needs. Here the WebSocket is
//! upgraded from a request of gatebot's own Slack client instead
//! ([`SlackApi::open_socket`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::accept;
use super::client::{SlackApi, Socket};
use super::payload::{Interaction, SlashCommand};
use crate::core::AppState;
use crate::gate::Millis;
use crate::http::error::Reject;
use crate::http::receipts::Receipts;
use crate::metrics::{EnvelopeLabels, ReasonLabels, ResultLabels};

/// How often gatebot pings; Slack answers each with a pong.
const PING_EVERY: Duration = Duration::from_secs(5);
/// A connection from which nothing (not even a pong) came for this long is
/// taken for lost: networks drop connections without a word.
const SILENCE_LIMIT: Duration = Duration::from_secs(15);
/// An envelope's receipt must be stored within this, or it is not
/// acknowledged (Slack waits 3 s, then delivers it again).
const ACK_WITHIN: Duration = Duration::from_secs(2);
/// After a `disconnect`, how long the old connection is kept for Slack to
/// close it (Slack's `warning` gives 10 s).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// A connection that lasted less than this counts as a failed attempt.
const HEALTHY_AFTER: Duration = Duration::from_secs(5);
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// How far back Slack's own click time is believed (a redelivery after a
/// dropped connection comes later than the click).
const ACTION_TS_WINDOW: Millis = 5 * 60 * 1000;

pub struct SocketMode {
    state: AppState,
    receipts: Receipts,
    api: Arc<SlackApi>,
    token: SecretString,
}

/// How a connection ended.
struct Ended {
    id: u64,
    greeted: bool,
    lived: Duration,
}

/// What one text message from Slack is, read leniently: unknown fields and
/// types are fine, a missing `envelope_id` is not.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Frame {
    #[serde(rename = "type")]
    kind: String,
    envelope_id: Option<String>,
    payload: Option<Value>,
    /// For `disconnect`.
    reason: Option<String>,
    retry_attempt: Option<u64>,
}

/// What the acknowledgement carries.
enum Ack {
    Bare,
    /// A slash command's answer, shown to the person at once.
    Text(String),
}

impl SocketMode {
    pub fn new(
        state: AppState,
        receipts: Receipts,
        api: Arc<SlackApi>,
        token: SecretString,
    ) -> Self {
        Self {
            state,
            receipts,
            api,
            token,
        }
    }

    /// Keeps a connection open until `shutdown`; then lets each connection
    /// acknowledge what it has stored and close.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let (asks, mut asked) = mpsc::unbounded_channel::<u64>();
        let mut connections: JoinSet<Ended> = JoinSet::new();
        let mut active: Option<u64> = None;
        let mut next_id = 0;
        let mut failures = 0u32;
        let mut wait = Duration::ZERO;
        loop {
            if active.is_none() {
                if !wait.is_zero() {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
                let opened = tokio::select! {
                    () = shutdown.cancelled() => break,
                    opened = self.api.open_socket(self.token.expose_secret()) => opened,
                };
                match opened {
                    Ok(socket) => {
                        self.connects("ok");
                        next_id += 1;
                        active = Some(next_id);
                        let me = self.clone();
                        let (asks, stop) = (asks.clone(), shutdown.clone());
                        let span = tracing::info_span!("slack_socket", connection = next_id);
                        connections.spawn(me.serve(next_id, socket, asks, stop).instrument(span));
                    }
                    Err(e) => {
                        self.connects("failed");
                        failures += 1;
                        wait = e.retry_after.unwrap_or_else(|| backoff(failures));
                        tracing::warn!(error = %e, attempt = failures, retry_in = ?wait, "cannot open a Slack Socket Mode connection");
                        continue;
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(id) = asked.recv() => {
                    // Slack asked for a new connection: open it now, the old one drains.
                    if active == Some(id) {
                        active = None;
                        failures = 0;
                        wait = Duration::ZERO;
                    }
                }
                Some(ended) = connections.join_next() => {
                    let Ok(ended) = ended else {
                        // A connection's task panicked: which one is unknown, so
                        // open another rather than risk holding none.
                        tracing::error!("a Slack Socket Mode connection failed; opening another");
                        active = None;
                        failures += 1;
                        wait = backoff(failures);
                        continue;
                    };
                    if active == Some(ended.id) {
                        active = None;
                        failures = if ended.greeted && ended.lived >= HEALTHY_AFTER { 0 } else { failures + 1 };
                        wait = if failures == 0 { Duration::ZERO } else { backoff(failures) };
                    }
                }
            }
        }
        while connections.join_next().await.is_some() {}
    }

    fn connects(&self, result: &'static str) {
        self.state
            .metrics
            .socket_connects
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    fn disconnected(&self, reason: &'static str) {
        self.state
            .metrics
            .socket_disconnects
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Reads one connection until it ends; envelopes are handled side by
    /// side, each acknowledged when its receipt is stored.
    async fn serve(
        self: Arc<Self>,
        id: u64,
        socket: Socket,
        asks: mpsc::UnboundedSender<u64>,
        shutdown: CancellationToken,
    ) -> Ended {
        let started = Instant::now();
        let (mut tx, mut rx) = socket.split();
        let mut handling: JoinSet<Option<String>> = JoinSet::new();
        let mut greeted = false;
        let mut draining_until: Option<Instant> = None;
        let mut heard = Instant::now();
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let reason = loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break "shutdown",
                Some(done) = handling.join_next() => {
                    if let Ok(Some(ack)) = done {
                        if tx.send(Message::text(ack)).await.is_err() {
                            break "error";
                        }
                    }
                }
                frame = rx.next() => {
                    heard = Instant::now();
                    match frame {
                        None | Some(Ok(Message::Close(_))) => break "closed",
                        Some(Err(e)) => {
                            tracing::info!(connection = id, error = %e, "Slack Socket Mode connection lost");
                            break "error";
                        }
                        Some(Ok(Message::Text(text))) => match serde_json::from_str::<Frame>(&text) {
                            Ok(frame) if frame.kind == "hello" => {
                                greeted = true;
                                self.state.metrics.socket_connections.inc();
                                tracing::info!(connection = id, "Slack Socket Mode connected");
                            }
                            Ok(frame) if frame.kind == "disconnect" => {
                                let why = frame.reason.as_deref().unwrap_or("unknown");
                                tracing::info!(connection = id, reason = why, "Slack asks for a new Socket Mode connection");
                                if draining_until.is_none() {
                                    draining_until = Some(Instant::now() + DRAIN_LIMIT);
                                    let _ = asks.send(id);
                                    self.disconnected(disconnect_reason(why));
                                }
                            }
                            Ok(frame) => match frame.envelope_id.clone().filter(|e| !e.is_empty()) {
                                Some(envelope) => {
                                    let me = self.clone();
                                    handling.spawn(async move { me.envelope(envelope, frame, Instant::now()).await }.in_current_span());
                                }
                                None => self.malformed(&format!("a `{}` message without envelope_id", frame.kind)),
                            },
                            Err(e) => self.malformed(&format!("not a Socket Mode message: {e}")),
                        },
                        Some(Ok(Message::Binary(_))) => self.malformed("a binary message"),
                        // tungstenite answers pings itself; a pong is only a sign of life.
                        Some(Ok(_)) => {}
                    }
                }
                _ = ping.tick() => {
                    if heard.elapsed() > SILENCE_LIMIT {
                        tracing::warn!(connection = id, silent_for = ?heard.elapsed(), "nothing from Slack's Socket Mode connection: replacing it");
                        break "silent";
                    }
                    if draining_until.is_some_and(|until| Instant::now() > until) {
                        break "drained";
                    }
                    if tx.send(Message::Ping(Default::default())).await.is_err() {
                        break "error";
                    }
                }
            }
        };
        if reason == "shutdown" {
            // What is being stored is still acknowledged; what was not read
            // yet goes to another connection.
            while let Some(done) = handling.join_next().await {
                if let Ok(Some(ack)) = done {
                    let _ = tx.send(Message::text(ack)).await;
                }
            }
        }
        if matches!(reason, "shutdown" | "silent" | "drained") {
            let _ = tokio::time::timeout(Duration::from_secs(1), tx.close()).await;
        }
        if draining_until.is_none() {
            self.disconnected(reason);
        }
        if greeted {
            self.state.metrics.socket_connections.dec();
        }
        tracing::info!(
            connection = id,
            reason,
            "Slack Socket Mode connection closed"
        );
        Ended {
            id,
            greeted,
            lived: started.elapsed(),
        }
    }

    fn malformed(&self, what: &str) {
        self.state
            .metrics
            .reject("slack_socket", "malformed_payload");
        tracing::warn!(what, "ignored a Slack Socket Mode message");
    }

    /// Stores what one envelope carries; the acknowledgement to send, or
    /// None to let Slack deliver it again.
    async fn envelope(&self, envelope: String, frame: Frame, read: Instant) -> Option<String> {
        let kind = match frame.kind.as_str() {
            "interactive" => "interactive",
            "slash_commands" => "slash_commands",
            "events_api" => "events_api",
            _ => "other",
        };
        if frame.retry_attempt.is_some_and(|n| n > 0) {
            tracing::debug!(
                envelope,
                kind,
                retry = frame.retry_attempt,
                "a redelivered envelope"
            );
        }
        let payload = frame.payload.unwrap_or(Value::Null);
        let handled = tokio::time::timeout(ACK_WITHIN, async {
            match kind {
                "interactive" => self.interactive(payload).await.map(|()| Ack::Bare),
                "slash_commands" => self.slash(&envelope, payload).await.map(Ack::Text),
                // gatebot subscribes to no events; anything else is not for it.
                _ => Ok(Ack::Bare),
            }
        })
        .await;
        let (result, ack) = match handled {
            Ok(Ok(ack)) => ("acked", Some(ack)),
            Ok(Err(refused)) if refused.status.is_client_error() => {
                self.state.metrics.reject("slack_socket", refused.reason);
                tracing::info!(envelope, kind, reason = refused.reason, message = %refused.message, "refused a Slack Socket Mode envelope");
                let ack = match kind {
                    "slash_commands" => Ack::Text(refused.message),
                    _ => Ack::Bare,
                };
                ("refused", Some(ack))
            }
            Ok(Err(failed)) => {
                tracing::warn!(envelope, kind, error = %failed.message, "not acknowledged: Slack will deliver it again");
                ("unacked", None)
            }
            Err(_) => {
                tracing::warn!(envelope, kind, within = ?ACK_WITHIN, "receipt not stored in time, not acknowledged: Slack will deliver it again");
                ("unacked", None)
            }
        };
        let metrics = &self.state.metrics;
        metrics
            .socket_envelopes
            .get_or_create(&EnvelopeLabels { kind, result })
            .inc();
        let ack = ack?;
        metrics
            .socket_ack_duration
            .observe(read.elapsed().as_secs_f64());
        Some(acknowledgement(&envelope, ack))
    }

    async fn interactive(&self, payload: Value) -> Result<(), Reject> {
        let interaction: Interaction = serde_json::from_value(payload)
            .map_err(|e| Reject::bad_request("malformed_payload", format!("payload: {e}")))?;
        let now = self.state.clock.now_ms();
        let acted_at = clicked_at(&interaction, now);
        accept::interaction(&self.receipts, interaction, acted_at).await
    }

    async fn slash(&self, envelope: &str, payload: Value) -> Result<String, Reject> {
        let mut command: SlashCommand = serde_json::from_value(payload).map_err(|e| {
            Reject::bad_request(
                "malformed_payload",
                format!("gatebot could not read this command: {e}"),
            )
        })?;
        if command.trigger_id.is_empty() {
            // Slack always sends one; the envelope id is the same on redeliveries.
            command.trigger_id = format!("envelope-{envelope}");
        }
        let now = self.state.clock.now_ms();
        accept::command(&self.state, &self.receipts, command, now).await
    }
}

/// When the person clicked: Slack's `action_ts` when it is recent, else now.
fn clicked_at(interaction: &Interaction, now: Millis) -> Millis {
    interaction
        .actions
        .first()
        .and_then(|a| a.action_ts.as_deref())
        .and_then(|ts| ts.parse::<f64>().ok())
        .map(|secs| (secs * 1000.0) as Millis)
        .filter(|at| *at <= now && now - *at <= ACTION_TS_WINDOW)
        .unwrap_or(now)
}

fn acknowledgement(envelope: &str, ack: Ack) -> String {
    match ack {
        Ack::Bare => json!({ "envelope_id": envelope }),
        Ack::Text(text) => json!({
            "envelope_id": envelope,
            "payload": { "response_type": "ephemeral", "text": text },
        }),
    }
    .to_string()
}

/// Slack's documented reasons; anything else is counted as `other`.
fn disconnect_reason(reason: &str) -> &'static str {
    match reason {
        "refresh_requested" => "refresh_requested",
        "warning" => "warning",
        "link_disabled" => "link_disabled",
        _ => "other",
    }
}

/// 0.5 s, 1 s, 2 s, … up to 30 s, each within ±20 % so replicas that lost
/// Slack together do not come back in step.
fn backoff(failures: u32) -> Duration {
    let exp = FIRST_RETRY.saturating_mul(1 << failures.saturating_sub(1).min(10));
    let base = exp.min(LAST_RETRY);
    let jitter = (uuid::Uuid::new_v4().as_u128() % 401) as f64 / 1000.0 - 0.2;
    base.mul_f64(1.0 + jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        for failures in 1..40 {
            let d = backoff(failures);
            let exp = FIRST_RETRY.saturating_mul(1 << (failures - 1).min(10));
            let base = exp.min(LAST_RETRY);
            assert!(
                d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2),
                "{failures}: {d:?}"
            );
        }
        assert!(backoff(1) < Duration::from_secs(1));
        assert!(backoff(30) <= LAST_RETRY.mul_f64(1.2));
    }

    #[test]
    fn a_click_time_is_slacks_only_when_recent() {
        let mut i: Interaction = serde_json::from_value(json!({
            "type": "block_actions",
            "actions": [{"action_id": "gatebot_approve", "action_ts": "1714572121.500000"}],
        }))
        .unwrap();
        let now = 1_714_572_130_000;
        assert_eq!(clicked_at(&i, now), 1_714_572_121_500);
        // From the future or long ago: the receipt time.
        assert_eq!(clicked_at(&i, 1_714_572_120_000), 1_714_572_120_000);
        assert_eq!(
            clicked_at(&i, now + ACTION_TS_WINDOW),
            now + ACTION_TS_WINDOW
        );
        i.actions[0].action_ts = Some("soon".into());
        assert_eq!(clicked_at(&i, now), now);
    }

    #[test]
    fn acknowledgements_name_the_envelope_and_carry_a_commands_answer() {
        assert_eq!(acknowledgement("e1", Ack::Bare), r#"{"envelope_id":"e1"}"#);
        let v: Value =
            serde_json::from_str(&acknowledgement("e2", Ack::Text("ok".into()))).unwrap();
        assert_eq!(v["envelope_id"], "e2");
        assert_eq!(v["payload"]["response_type"], "ephemeral");
        assert_eq!(v["payload"]["text"], "ok");
    }

    #[test]
    fn disconnect_reasons_are_slacks_or_other() {
        for reason in ["refresh_requested", "warning", "link_disabled"] {
            assert_eq!(disconnect_reason(reason), reason);
        }
        assert_eq!(disconnect_reason("too_many_websockets"), "other");
    }

    #[test]
    fn frames_parse_leniently() {
        let f: Frame = serde_json::from_str(
            r#"{"type":"disconnect","reason":"refresh_requested","debug_info":{"host":"h"}}"#,
        )
        .unwrap();
        assert_eq!(f.kind, "disconnect");
        assert_eq!(f.reason.as_deref(), Some("refresh_requested"));
        let f: Frame = serde_json::from_str(
            r#"{"type":"hello","num_connections":2,"connection_info":{"app_id":"A1"}}"#,
        )
        .unwrap();
        assert_eq!(f.kind, "hello");
        assert!(f.envelope_id.is_none());
        assert!(serde_json::from_str::<Frame>("[1]").is_err());
    }
}
