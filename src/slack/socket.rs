//! Slack Socket Mode: clicks and slash commands over a WebSocket that gatebot
//! opens, so Slack needs no public URL. A channel like the HTTP routes: each
//! envelope goes through [`accept`] (the same receipts, inbox and dedupe) and
//! is acknowledged only once its receipt is stored; what is not stored in
//! time is not acknowledged, and Slack delivers it again.
//!
//! One connection is kept open per replica. When Slack asks for a new one
//! (`disconnect`: `refresh_requested`, `warning`, …) the next is opened
//! first and the old one keeps delivering until Slack closes it; a replica
//! never holds more than two, so a third closes the oldest first. A lost or
//! silent connection is replaced at once, then with growing, jittered delays
//! while opening fails or connections end young (a Slack that answers every
//! `hello` with `disconnect`); opens are at least a second apart and
//! `Retry-After` is obeyed. Envelopes share the HTTP webhooks' cap on work in
//! hand, and what does not fit is left for Slack to deliver again. Several
//! replicas may each hold one: Slack gives an envelope to one of them, and a
//! redelivery to another is a duplicate receipt, applied once.
//!
//! slack-morphism's Socket Mode client opens its WebSocket with
//! tokio-tungstenite's own connector: no `HTTPS_PROXY` and no
//! `GATEBOT_EXTRA_CA_FILE`, which a private cluster needs. Here the WebSocket is
//! upgraded from a request of gatebot's own Slack client instead
//! ([`SlackApi::open_socket`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{self, JoinSet};
use tokio::time::Instant as TokioInstant;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::accept;
use super::client::{SlackApi, Socket};
use super::payload::{Interaction, SlashCommand};
use crate::core::AppState;
use crate::gate::Millis;
use crate::http::error::Reject;
use crate::http::limits::WEBHOOK_READER_WAIT;
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
/// Connections one replica holds at once: the live one, and one that still
/// delivers after Slack asked for a new one. Slack allows 10 per app, shared
/// by the replicas.
const MAX_CONNECTIONS: usize = 2;
/// Opens are at least this far apart, however quickly Slack ends connections.
const MIN_OPEN_GAP: Duration = Duration::from_secs(1);
/// A `Retry-After` longer than this is cut to it, so that one odd header
/// cannot leave a replica without Slack for hours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// Envelopes of one connection read and not yet stored: past this, one is
/// left unacknowledged (Slack delivers it again), so a burst costs no memory.
const IN_FLIGHT: usize = 32;
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// How far back Slack's own click time is believed (a redelivery after a
/// dropped connection comes later than the click).
const ACTION_TS_WINDOW: Millis = 5 * 60 * 1000;

pub struct SocketMode {
    state: AppState,
    receipts: Receipts,
    /// The cap on webhook bodies handled at once, shared with the HTTP routes.
    readers: Arc<Semaphore>,
    api: Arc<SlackApi>,
    token: SecretString,
}

/// One connection while it is read.
struct Connection {
    id: u64,
    /// Asks for a new connection when Slack wants this one replaced.
    asks: mpsc::UnboundedSender<u64>,
    /// Envelopes being stored; each answers its acknowledgement.
    handling: JoinSet<Option<String>>,
    greeted: bool,
    /// Slack asked for a new connection: this one ends by then.
    draining_until: Option<Instant>,
    heard: Instant,
}

impl Connection {
    /// Why the connection ends at a ping: silent too long, or drained.
    fn overdue(&self) -> Option<&'static str> {
        if self.heard.elapsed() > SILENCE_LIMIT {
            tracing::warn!(connection = self.id, silent_for = ?self.heard.elapsed(), "nothing from Slack's Socket Mode connection: replacing it");
            return Some("silent");
        }
        self.draining_until
            .is_some_and(|until| Instant::now() > until)
            .then_some("drained")
    }
}

/// How a connection ended.
struct Ended {
    greeted: bool,
    lived: Duration,
}

/// The connections one replica holds, and when it may open the next.
struct Pool {
    tasks: JoinSet<Ended>,
    /// Open or draining, oldest first.
    alive: Vec<Live>,
    /// The connection that is not draining; None while one is wanted.
    active: Option<u64>,
    next_id: u64,
    /// Opens in a row that failed, or whose connection did not last.
    failures: u32,
    /// The last try to open one, whatever came of it.
    last_open: Option<TokioInstant>,
    next_open: TokioInstant,
}

struct Live {
    id: u64,
    task: task::Id,
    stop: CancellationToken,
    opened: Instant,
}

/// What one text message from Slack is, read leniently: unknown fields and
/// types are fine, a missing `envelope_id` is not.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Frame {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) envelope_id: Option<String>,
    pub(crate) payload: Option<Value>,
    /// For `disconnect`.
    pub(crate) reason: Option<String>,
    pub(crate) retry_attempt: Option<u64>,
}

/// What the acknowledgement carries.
pub(crate) enum Ack {
    Bare,
    /// A slash command's answer, shown to the person at once.
    Text(String),
    /// A modal's answer (`response_action`), as the HTTP route's body.
    Payload(Value),
}

impl SocketMode {
    pub fn new(
        state: AppState,
        receipts: Receipts,
        readers: Arc<Semaphore>,
        api: Arc<SlackApi>,
        token: SecretString,
    ) -> Self {
        Self {
            state,
            receipts,
            readers,
            api,
            token,
        }
    }

    /// Keeps a connection open until `shutdown`; then lets each connection
    /// acknowledge what it has stored and close.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let (asks, mut asked) = mpsc::unbounded_channel::<u64>();
        let mut pool = Pool::new();
        loop {
            if pool.active.is_none() && pool.alive.len() >= MAX_CONNECTIONS {
                // A new connection is wanted and both places are taken: the
                // oldest, already draining, closes first (what it is storing
                // is still acknowledged).
                pool.retire_oldest();
            }
            let may_open = pool.active.is_none() && pool.alive.len() < MAX_CONNECTIONS;
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(pool.next_open), if may_open => {
                    let opened = tokio::select! {
                        () = shutdown.cancelled() => break,
                        opened = self.api.open_socket(self.token.expose_secret()) => opened,
                    };
                    match opened {
                        Ok(socket) => {
                            self.connects("ok");
                            let (id, stop) = pool.opened(&shutdown);
                            let span = tracing::info_span!("slack_socket", connection = id);
                            let serving = self.clone().serve(id, socket, asks.clone(), stop.clone());
                            pool.spawn(id, stop, serving.instrument(span));
                        }
                        Err(e) => {
                            self.connects("failed");
                            let wait = pool.failed(e.retry_after);
                            tracing::warn!(error = %e, attempt = pool.failures, retry_in = ?wait, "cannot open a Slack Socket Mode connection");
                        }
                    }
                }
                Some(id) = asked.recv() => pool.asked(id),
                Some(ended) = pool.tasks.join_next_with_id() => pool.ended(ended),
            }
        }
        while pool.tasks.join_next().await.is_some() {}
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
        stop: CancellationToken,
    ) -> Ended {
        let started = Instant::now();
        let (mut tx, mut rx) = socket.split();
        let mut conn = Connection {
            id,
            asks,
            handling: JoinSet::new(),
            greeted: false,
            draining_until: None,
            heard: Instant::now(),
        };
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let reason = loop {
            tokio::select! {
                biased;
                // Shutdown, or retired to make room for a newer connection.
                () = stop.cancelled() => break if conn.draining_until.is_some() { "retired" } else { "shutdown" },
                Some(done) = conn.handling.join_next() => {
                    if let Ok(Some(ack)) = done {
                        if tx.send(Message::text(ack)).await.is_err() {
                            break "error";
                        }
                    }
                }
                frame = rx.next() => {
                    conn.heard = Instant::now();
                    if let Some(reason) = self.read(&mut conn, frame) {
                        break reason;
                    }
                }
                _ = ping.tick() => {
                    if let Some(reason) = conn.overdue() {
                        break reason;
                    }
                    if tx.send(Message::Ping(Default::default())).await.is_err() {
                        break "error";
                    }
                }
            }
        };
        let greeted = conn.greeted;
        self.close(conn, tx, reason).await;
        Ended {
            greeted,
            lived: started.elapsed(),
        }
    }

    /// One frame read; the reason the connection ends, if it does.
    fn read(
        self: &Arc<Self>,
        conn: &mut Connection,
        frame: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
    ) -> Option<&'static str> {
        match frame {
            None | Some(Ok(Message::Close(_))) => return Some("closed"),
            Some(Err(e)) => {
                tracing::info!(connection = conn.id, error = %e, "Slack Socket Mode connection lost");
                return Some("error");
            }
            Some(Ok(Message::Text(text))) => match serde_json::from_str::<Frame>(&text) {
                Ok(frame) => self.frame(conn, frame),
                Err(e) => self.malformed(&format!("not a Socket Mode message: {e}")),
            },
            Some(Ok(Message::Binary(_))) => self.malformed("a binary message"),
            // tungstenite answers pings itself; a pong is only a sign of life.
            Some(Ok(_)) => {}
        }
        None
    }

    /// Slack's hello, its request for a new connection, or an envelope to handle.
    fn frame(self: &Arc<Self>, conn: &mut Connection, frame: Frame) {
        let id = conn.id;
        match frame.kind.as_str() {
            "hello" => {
                conn.greeted = true;
                self.state.metrics.socket_connections.inc();
                tracing::info!(connection = id, "Slack Socket Mode connected");
            }
            "disconnect" => {
                let why = frame.reason.as_deref().unwrap_or("unknown");
                tracing::info!(
                    connection = id,
                    reason = why,
                    "Slack asks for a new Socket Mode connection"
                );
                if conn.draining_until.is_none() {
                    conn.draining_until = Some(Instant::now() + DRAIN_LIMIT);
                    let _ = conn.asks.send(id);
                    self.disconnected(disconnect_reason(why));
                }
            }
            _ => match frame.envelope_id.clone().filter(|e| !e.is_empty()) {
                Some(envelope) if conn.handling.len() >= IN_FLIGHT => {
                    self.shed(&envelope, &frame.kind)
                }
                Some(envelope) => {
                    let me = self.clone();
                    conn.handling.spawn(
                        async move { me.envelope(envelope, frame, Instant::now()).await }
                            .in_current_span(),
                    );
                }
                None => self.malformed(&format!("a `{}` message without envelope_id", frame.kind)),
            },
        }
    }

    /// Ends a connection: what is being stored is still acknowledged at a
    /// shutdown or retirement; what was not read yet goes to another connection.
    async fn close(
        &self,
        mut conn: Connection,
        mut tx: futures_util::stream::SplitSink<Socket, Message>,
        reason: &'static str,
    ) {
        if matches!(reason, "shutdown" | "retired") {
            while let Some(done) = conn.handling.join_next().await {
                if let Ok(Some(ack)) = done {
                    let _ = tx.send(Message::text(ack)).await;
                }
            }
        }
        if matches!(reason, "shutdown" | "retired" | "silent" | "drained") {
            let _ = tokio::time::timeout(Duration::from_secs(1), tx.close()).await;
        }
        if conn.draining_until.is_none() {
            self.disconnected(reason);
        }
        if conn.greeted {
            self.state.metrics.socket_connections.dec();
        }
        tracing::info!(
            connection = conn.id,
            reason,
            "Slack Socket Mode connection closed"
        );
    }

    /// An envelope left unacknowledged because too many are being stored:
    /// Slack delivers it again after 3 s.
    fn shed(&self, envelope: &str, kind: &str) {
        let kind = envelope_kind(kind);
        self.state
            .metrics
            .socket_envelopes
            .get_or_create(&EnvelopeLabels {
                kind,
                result: "shed",
            })
            .inc();
        tracing::debug!(
            envelope,
            kind,
            "busy: not acknowledged, Slack delivers it again"
        );
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
        let kind = envelope_kind(&frame.kind);
        // The same cap as webhook bodies over HTTP: a flood waits its turn
        // briefly, then goes back to Slack unacknowledged.
        let readers = self.readers.clone().acquire_owned();
        let Ok(Ok(_permit)) = tokio::time::timeout(WEBHOOK_READER_WAIT, readers).await else {
            self.shed(&envelope, kind);
            return None;
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
                "interactive" => self.interactive(payload).await,
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

    async fn interactive(&self, payload: Value) -> Result<Ack, Reject> {
        let interaction: Interaction = serde_json::from_value(payload)
            .map_err(|e| Reject::bad_request("malformed_payload", format!("payload: {e}")))?;
        let now = self.state.clock.now_ms();
        let acted_at = clicked_at(&interaction, now);
        let taken = accept::interaction(&self.receipts, interaction, acted_at).await?;
        Ok(match taken.body() {
            Some(body) => {
                self.state.metrics.reject("slack_socket", "reason_missing");
                Ack::Payload(body)
            }
            None => Ack::Bare,
        })
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

impl Pool {
    fn new() -> Self {
        Self {
            tasks: JoinSet::new(),
            alive: Vec::new(),
            active: None,
            next_id: 0,
            failures: 0,
            last_open: None,
            next_open: TokioInstant::now(),
        }
    }

    /// A connection was opened: its id, and what stops it alone.
    fn opened(&mut self, shutdown: &CancellationToken) -> (u64, CancellationToken) {
        self.next_id += 1;
        self.active = Some(self.next_id);
        self.last_open = Some(TokioInstant::now());
        (self.next_id, shutdown.child_token())
    }

    fn spawn(
        &mut self,
        id: u64,
        stop: CancellationToken,
        serving: impl Future<Output = Ended> + Send + 'static,
    ) {
        let task = self.tasks.spawn(serving).id();
        self.alive.push(Live {
            id,
            task,
            stop,
            opened: Instant::now(),
        });
    }

    /// Opening failed: when to try again, as Slack says or with backoff.
    fn failed(&mut self, retry_after: Option<Duration>) -> Duration {
        self.failures += 1;
        self.last_open = Some(TokioInstant::now());
        let wait = retry_after.map_or_else(
            || backoff(self.failures),
            |after| after.min(MAX_RETRY_AFTER),
        );
        self.schedule(wait);
        wait
    }

    /// Slack asked connection `id` for a new one. One that did not last is a
    /// failed attempt, so a Slack that ends every connection at once is
    /// answered with backoff, not a storm of opens.
    fn asked(&mut self, id: u64) {
        if self.active != Some(id) {
            return;
        }
        self.active = None;
        let lived = self
            .alive
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.opened.elapsed());
        self.replace(lived.is_some_and(|lived| lived >= HEALTHY_AFTER));
    }

    fn ended(&mut self, ended: Result<(task::Id, Ended), task::JoinError>) {
        let (task, healthy) = match ended {
            Ok((task, e)) => (task, e.greeted && e.lived >= HEALTHY_AFTER),
            Err(e) => {
                tracing::error!(error = %e, "a Slack Socket Mode connection failed");
                (e.id(), false)
            }
        };
        let Some(at) = self.alive.iter().position(|c| c.task == task) else {
            return;
        };
        let gone = self.alive.remove(at);
        if self.active == Some(gone.id) {
            self.active = None;
            self.replace(healthy);
        }
    }

    /// Schedules the open that replaces the active connection.
    fn replace(&mut self, healthy: bool) {
        self.failures = if healthy { 0 } else { self.failures + 1 };
        let wait = if healthy {
            Duration::ZERO
        } else {
            backoff(self.failures)
        };
        self.schedule(wait);
    }

    /// The next open: `wait` from now, and never sooner than
    /// [`MIN_OPEN_GAP`] after the last try.
    fn schedule(&mut self, wait: Duration) {
        let now = TokioInstant::now();
        let gap = self.last_open.map_or(now, |at| at + MIN_OPEN_GAP);
        self.next_open = (now + wait).max(gap);
    }

    /// Closes the oldest draining connection, to make room for a new one.
    fn retire_oldest(&self) {
        if let Some(oldest) = self.alive.iter().find(|c| Some(c.id) != self.active) {
            oldest.stop.cancel();
        }
    }
}

/// The envelope types gatebot names in metrics; anything else is `other`.
pub(crate) fn envelope_kind(kind: &str) -> &'static str {
    match kind {
        "interactive" => "interactive",
        "slash_commands" => "slash_commands",
        "events_api" => "events_api",
        _ => "other",
    }
}

/// When the person clicked: Slack's `action_ts` when it is recent, else now.
pub(crate) fn clicked_at(interaction: &Interaction, now: Millis) -> Millis {
    interaction
        .actions
        .first()
        .and_then(|a| a.action_ts.as_deref())
        .and_then(|ts| ts.parse::<f64>().ok())
        .map(|secs| (secs * 1000.0) as Millis)
        .filter(|at| *at <= now && now - *at <= ACTION_TS_WINDOW)
        .unwrap_or(now)
}

pub(crate) fn acknowledgement(envelope: &str, ack: Ack) -> String {
    match ack {
        Ack::Bare => json!({ "envelope_id": envelope }),
        Ack::Text(text) => json!({
            "envelope_id": envelope,
            "payload": { "response_type": "ephemeral", "text": text },
        }),
        Ack::Payload(payload) => json!({ "envelope_id": envelope, "payload": payload }),
    }
    .to_string()
}

/// Slack's documented reasons; anything else is counted as `other`.
pub(crate) fn disconnect_reason(reason: &str) -> &'static str {
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
