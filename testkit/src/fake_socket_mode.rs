//! Slack's side of Socket Mode, for tests: `apps.connections.open` hands out
//! WebSocket URLs on the fake Slack; each connection is greeted with `hello`,
//! then carries the envelopes a test sends and the acknowledgements gatebot
//! returns. As Slack does, an envelope not acknowledged when its connection
//! ends is delivered again on another one, with `retry_attempt` counted up.
//!
//! The frames are Slack's documented ones (tests/fixtures/slack/socket_mode/),
//! with the ids and payloads filled in.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// An acknowledgement gatebot sent.
#[derive(Debug, Clone)]
pub struct SocketAck {
    pub envelope_id: String,
    /// A slash command's answer, if it carried one.
    pub payload: Option<Value>,
    /// The connection (0, 1, … in opening order) it came on.
    pub connection: usize,
    pub at: Instant,
}

enum Command {
    Frame(String),
    /// End the connection without a close frame, as a lost network does.
    Drop,
    /// Slack's close frame.
    Close,
    /// Stop reading and answering (pings included), as a half-open link does.
    Freeze,
    /// Take the next acknowledgement as lost: drop the connection before it counts.
    LoseNextAck,
}

struct Connection {
    tx: mpsc::UnboundedSender<Command>,
    open: bool,
    /// Pings gatebot sent on it (each answered with a pong while it is read).
    pings: usize,
    /// Whether Slack's `disconnect` followed its hello.
    told_to_leave: bool,
}

struct Pending {
    envelope_id: String,
    kind: String,
    payload: Value,
    connection: usize,
    attempt: u64,
}

#[derive(Default)]
struct State {
    connections: Vec<Connection>,
    pending: Vec<Pending>,
    acks: Vec<SocketAck>,
    /// Every frame gatebot sent that was not an acknowledgement.
    other: Vec<String>,
    /// The most connections that were open at one time.
    max_open: usize,
    /// Sent right after every `hello` while set, as a Slack in trouble does.
    disconnect_after_hello: Option<String>,
}

#[derive(Default)]
pub struct Hub {
    state: Mutex<State>,
}

fn frame(name: &str) -> Value {
    let path = crate::repository().join(format!("tests/fixtures/slack/socket_mode/{name}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Hub {
    /// Serves one WebSocket until either side ends it.
    pub(crate) async fn serve(&self, mut socket: WebSocket) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (index, open, storm) = {
            let mut state = self.state.lock().unwrap();
            let storm = state.disconnect_after_hello.clone();
            state.connections.push(Connection {
                tx,
                open: true,
                pings: 0,
                told_to_leave: storm.is_some(),
            });
            let open = state.connections.iter().filter(|c| c.open).count();
            state.max_open = state.max_open.max(open);
            (state.connections.len() - 1, open, storm)
        };
        let mut hello = frame("hello.json");
        hello["num_connections"] = json!(open);
        if socket
            .send(Message::Text(hello.to_string().into()))
            .await
            .is_ok()
        {
            if let Some(reason) = storm {
                let mut message = frame("disconnect.json");
                message["reason"] = json!(reason);
                let _ = socket.send(Message::Text(message.to_string().into())).await;
            }
            self.redeliver();
            let mut lose_next_ack = false;
            loop {
                // The test's commands first: a drop queued right after an
                // envelope happens before any acknowledgement is read.
                tokio::select! {
                    biased;
                    command = rx.recv() => match command {
                        Some(Command::Frame(text)) => {
                            if socket.send(Message::Text(text.into())).await.is_err() {
                                break;
                            }
                        }
                        Some(Command::Drop) | None => break,
                        Some(Command::Close) => {
                            let _ = socket.send(Message::Close(None)).await;
                            break;
                        }
                        Some(Command::Freeze) => {
                            // Hold the socket unread until told otherwise (or long after any test).
                            let _ = tokio::time::timeout(Duration::from_secs(120), async {
                                while let Some(c) = rx.recv().await {
                                    if matches!(c, Command::Drop | Command::Close) {
                                        break;
                                    }
                                }
                            })
                            .await;
                            break;
                        }
                        Some(Command::LoseNextAck) => lose_next_ack = true,
                    },
                    message = socket.recv() => match message {
                        Some(Ok(Message::Text(text))) => {
                            if lose_next_ack && text.contains("envelope_id") {
                                break;
                            }
                            self.received(index, &text);
                        }
                        Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                        Some(Ok(Message::Ping(_))) => {
                            self.state.lock().unwrap().connections[index].pings += 1;
                        }
                        Some(Ok(_)) => {}
                    },
                }
            }
        }
        self.state.lock().unwrap().connections[index].open = false;
        drop(socket);
        self.redeliver();
    }

    fn received(&self, connection: usize, text: &str) {
        let mut state = self.state.lock().unwrap();
        let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let Some(id) = value["envelope_id"].as_str().map(str::to_string) else {
            state.other.push(text.to_string());
            return;
        };
        state.pending.retain(|p| p.envelope_id != id);
        state.acks.push(SocketAck {
            envelope_id: id,
            payload: value.get("payload").cloned(),
            connection,
            at: Instant::now(),
        });
    }

    fn envelope(p: &Pending) -> String {
        let mut envelope = frame("envelope.json");
        envelope["envelope_id"] = json!(p.envelope_id);
        envelope["type"] = json!(p.kind);
        envelope["payload"] = p.payload.clone();
        envelope["accepts_response_payload"] = json!(p.kind == "slash_commands");
        envelope["retry_attempt"] = json!(p.attempt);
        envelope["retry_reason"] = json!(if p.attempt > 0 { "timeout" } else { "" });
        envelope.to_string()
    }

    /// What a closed connection left unacknowledged goes to the newest open one.
    fn redeliver(&self) {
        self.resend(|p, connections| !connections[p.connection].open);
    }

    /// Delivers every unacknowledged envelope again on the newest open
    /// connection, as Slack does when no acknowledgement came within 3 s.
    pub fn retry_unacked(&self) {
        self.resend(|_, _| true);
    }

    /// Sends the pending envelopes that `which` picks again, on the newest
    /// open connection, one attempt later.
    fn resend(&self, which: impl Fn(&Pending, &[Connection]) -> bool) {
        let mut state = self.state.lock().unwrap();
        let Some(target) = state.connections.iter().rposition(|c| c.open) else {
            return;
        };
        let State {
            connections,
            pending,
            ..
        } = &mut *state;
        for p in pending.iter_mut() {
            if which(p, connections) {
                p.connection = target;
                p.attempt += 1;
                let _ = connections[target]
                    .tx
                    .send(Command::Frame(Self::envelope(p)));
            }
        }
    }

    fn command(&self, connection: usize, command: Command) {
        let state = self.state.lock().unwrap();
        let c = state
            .connections
            .get(connection)
            .unwrap_or_else(|| panic!("no Socket Mode connection {connection}"));
        let _ = c.tx.send(command);
    }

    /// Sends an envelope of `kind` (`interactive`, `slash_commands`,
    /// `events_api`) on connection `connection`; its envelope id.
    pub fn send_to(&self, connection: usize, kind: &str, payload: Value) -> String {
        let p = Pending {
            envelope_id: uuid::Uuid::new_v4().to_string(),
            kind: kind.to_string(),
            payload,
            connection,
            attempt: 0,
        };
        let text = Self::envelope(&p);
        let id = p.envelope_id.clone();
        self.state.lock().unwrap().pending.push(p);
        self.command(connection, Command::Frame(text));
        id
    }

    /// Sends any text frame, such as a malformed one.
    pub fn send_raw(&self, connection: usize, text: &str) {
        self.command(connection, Command::Frame(text.to_string()));
    }

    /// Sends Slack's `disconnect` with `reason` (`refresh_requested`, `warning`, …).
    pub fn disconnect(&self, connection: usize, reason: &str) {
        let mut message = frame("disconnect.json");
        message["reason"] = json!(reason);
        self.send_raw(connection, &message.to_string());
    }

    /// From now on every new connection gets `disconnect` with `reason`
    /// right after its `hello` (None: back to normal).
    pub fn disconnect_after_hello(&self, reason: Option<&str>) {
        self.state.lock().unwrap().disconnect_after_hello = reason.map(str::to_string);
    }

    pub fn drop_connection(&self, connection: usize) {
        self.command(connection, Command::Drop);
    }

    pub fn close_connection(&self, connection: usize) {
        self.command(connection, Command::Close);
    }

    pub fn freeze(&self, connection: usize) {
        self.command(connection, Command::Freeze);
    }

    pub fn lose_next_ack(&self, connection: usize) {
        self.command(connection, Command::LoseNextAck);
    }

    /// Pings gatebot sent on connection `connection`.
    pub fn pings(&self, connection: usize) -> usize {
        self.state.lock().unwrap().connections[connection].pings
    }

    /// Connections opened so far, open or not.
    pub fn opened(&self) -> usize {
        self.state.lock().unwrap().connections.len()
    }

    /// The indexes of the connections open now.
    pub fn open(&self) -> Vec<usize> {
        let state = self.state.lock().unwrap();
        (0..state.connections.len())
            .filter(|i| state.connections[*i].open)
            .collect()
    }

    /// The open connections Slack told to leave after their hello.
    pub fn leaving(&self) -> Vec<usize> {
        let state = self.state.lock().unwrap();
        (0..state.connections.len())
            .filter(|i| state.connections[*i].open && state.connections[*i].told_to_leave)
            .collect()
    }

    /// The most connections that were open at one time so far.
    pub fn max_open(&self) -> usize {
        self.state.lock().unwrap().max_open
    }

    pub fn acks(&self) -> Vec<SocketAck> {
        self.state.lock().unwrap().acks.clone()
    }

    pub fn acks_of(&self, envelope_id: &str) -> Vec<SocketAck> {
        self.acks()
            .into_iter()
            .filter(|a| a.envelope_id == envelope_id)
            .collect()
    }

    /// Envelopes sent and not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.state.lock().unwrap().pending.len()
    }
}
