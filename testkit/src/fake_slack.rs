//! A fake Slack Web API for black-box tests: answers `chat.postMessage`,
//! `chat.update`, `usergroups.users.list` and `response_url` posts with Slack's
//! response shapes, records every request, and fails on demand (429 + Retry-After).
//! It also speaks Socket Mode: `apps.connections.open` and the WebSocket
//! behind it (see [`crate::fake_socket_mode`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::fake_socket_mode::Hub;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Request {
    /// `chat.postMessage`, `chat.update`, `usergroups.users.list`, `respond`, `views.open`.
    pub method: String,
    pub body: Value,
    pub auth: Option<String>,
    pub at: Instant,
    /// What the fake answered.
    pub status: u16,
    /// Answered with an injected failure (an HTTP error or `ok: false`).
    pub failed: bool,
}

/// An injected answer: (HTTP status, Retry-After seconds, Slack error code).
type Failure = (u16, Option<u64>, Option<String>);

#[derive(Default)]
struct Inner {
    requests: Mutex<Vec<Request>>,
    /// Bot tokens Slack answers `invalid_auth` (revoked, or made up).
    refused_tokens: Mutex<HashSet<String>>,
    /// method → failures to answer next: (status, Retry-After seconds, Slack error code).
    failures: Mutex<HashMap<String, VecDeque<Failure>>>,
    groups: Mutex<HashMap<String, Vec<String>>>,
    ts: AtomicU64,
    socket: Arc<Hub>,
    /// `ws://host:port`, for the Socket Mode URLs handed out.
    ws_base: Mutex<String>,
}

#[derive(Clone)]
pub struct FakeSlack {
    inner: Arc<Inner>,
    pub url: String,
}

impl FakeSlack {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/api/auth.test", post(auth_test))
            .route("/api/chat.postMessage", post(post_message))
            .route("/api/chat.update", post(update))
            .route("/api/chat.postEphemeral", post(post_ephemeral))
            .route("/api/views.open", post(views_open))
            .route(
                "/api/usergroups.users.list",
                get(group_users).post(group_users),
            )
            .route("/respond/{id}", post(respond))
            .route("/api/apps.connections.open", post(connections_open))
            .route("/link/", get(link))
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        *inner.ws_base.lock().unwrap() = format!("ws://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { inner, url }
    }

    /// The base for `GATEBOT_SLACK_API_URL`.
    pub fn api_url(&self) -> String {
        format!("{}/api", self.url)
    }

    /// A `response_url` that this fake answers.
    pub fn response_url(&self, id: &str) -> String {
        format!("{}/respond/{id}", self.url)
    }

    /// Socket Mode URLs are handed out under `base` (`wss://host:port` of a
    /// TLS front forwarding here) instead of this fake's own `ws://` address.
    pub fn socket_urls_at(&self, base: &str) {
        *self.inner.ws_base.lock().unwrap() = base.to_string();
    }

    /// The Socket Mode side: connections, envelopes, acknowledgements.
    pub fn socket(&self) -> &Hub {
        &self.inner.socket
    }

    /// From now on `auth.test` with `token` answers `invalid_auth`.
    pub fn refuse_token(&self, token: &str) {
        self.inner
            .refused_tokens
            .lock()
            .unwrap()
            .insert(token.to_string());
    }

    pub fn set_group(&self, group: &str, users: &[&str]) {
        self.inner.groups.lock().unwrap().insert(
            group.to_string(),
            users.iter().map(|u| u.to_string()).collect(),
        );
    }

    /// The next call of `method` answers HTTP 429 with `Retry-After: secs`.
    pub fn rate_limit_next(&self, method: &str, secs: u64) {
        self.fail_next(method, 429, Some(secs), None);
    }

    /// The next call of `method` answers `status`; with a code, `{"ok":false,"error":code}`.
    pub fn fail_next(
        &self,
        method: &str,
        status: u16,
        retry_after: Option<u64>,
        code: Option<&str>,
    ) {
        self.inner
            .failures
            .lock()
            .unwrap()
            .entry(method.to_string())
            .or_default()
            .push_back((status, retry_after, code.map(str::to_string)));
    }

    pub fn requests(&self) -> Vec<Request> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// Successful requests of one method.
    pub fn ok(&self, method: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && !r.failed)
            .collect()
    }

    /// Every attempt of one method, failed or not.
    pub fn attempts(&self, method: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method)
            .collect()
    }
}

impl Inner {
    fn record(&self, method: &str, headers: &HeaderMap, body: Value) -> Option<Response> {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let failure = self
            .failures
            .lock()
            .unwrap()
            .get_mut(method)
            .and_then(VecDeque::pop_front);
        let status = failure.as_ref().map_or(200, |f| f.0);
        self.requests.lock().unwrap().push(Request {
            method: method.to_string(),
            body,
            auth,
            at: Instant::now(),
            status,
            failed: failure.is_some(),
        });
        let (status, retry_after, code) = failure?;
        let status = StatusCode::from_u16(status).unwrap();
        let body =
            Json(json!({"ok": false, "error": code.unwrap_or_else(|| "ratelimited".into())}));
        let mut response = (status, body).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", secs.to_string().parse().unwrap());
        }
        Some(response)
    }

    fn next_ts(&self) -> String {
        let n = self.ts.fetch_add(1, Ordering::SeqCst) + 1;
        format!("1714572120.{n:06}")
    }
}

fn channel_id(channel: &str) -> String {
    // Slack answers with the id even when given a #name.
    match channel.strip_prefix('#') {
        Some(name) => format!("C{}", name.to_ascii_uppercase().replace('-', "")),
        None => channel.to_string(),
    }
}

fn json_body(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| {
        // Form-encoded calls: keep the fields as a JSON object.
        let map: serde_json::Map<String, Value> = form_urlencoded::parse(body)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
        Value::Object(map)
    })
}

async fn post_message(State(s): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let body = json_body(&body);
    if let Some(r) = s.record("chat.postMessage", &headers, body.clone()) {
        return r;
    }
    let channel = channel_id(body["channel"].as_str().unwrap_or("C0"));
    let ts = s.next_ts();
    let mut message = json!({
        "type": "message", "user": "UBOT", "bot_id": "BBOT", "ts": ts,
        "text": body["text"], "team": "T0",
    });
    if let Some(blocks) = body.get("blocks") {
        message["blocks"] = blocks.clone();
    }
    if let Some(thread) = body.get("thread_ts") {
        message["thread_ts"] = thread.clone();
    }
    Json(json!({"ok": true, "channel": channel, "ts": ts, "message": message})).into_response()
}

async fn update(State(s): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let body = json_body(&body);
    if let Some(r) = s.record("chat.update", &headers, body.clone()) {
        return r;
    }
    Json(json!({
        "ok": true, "channel": body["channel"], "ts": body["ts"], "text": body["text"],
        "message": {"text": body["text"], "user": "UBOT", "bot_id": "BBOT", "blocks": body.get("blocks").cloned().unwrap_or(json!([]))},
    }))
    .into_response()
}

async fn post_ephemeral(State(s): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let body = json_body(&body);
    if let Some(r) = s.record("chat.postEphemeral", &headers, body) {
        return r;
    }
    Json(json!({"ok": true, "message_ts": s.next_ts()})).into_response()
}

/// `auth.test`, answered as Slack's documentation shows it.
/// `views.open`: a trigger id is good for one view, as Slack's is (a second
/// use is `trigger_exchanged`).
async fn views_open(State(s): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let body = json_body(&body);
    let trigger = body["trigger_id"].as_str().unwrap_or_default().to_string();
    let used =
        s.requests.lock().unwrap().iter().any(|r| {
            r.method == "views.open" && !r.failed && r.body["trigger_id"] == trigger.as_str()
        });
    if let Some(r) = s.record("views.open", &headers, body.clone()) {
        return r;
    }
    if trigger.is_empty() || used {
        let error = if used {
            "trigger_exchanged"
        } else {
            "invalid_trigger_id"
        };
        return Json(json!({"ok": false, "error": error})).into_response();
    }
    Json(json!({"ok": true, "view": body["view"]})).into_response()
}

async fn auth_test(State(s): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    if let Some(r) = s.record("auth.test", &headers, json!({})) {
        return r;
    }
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if token.is_empty() {
        return Json(json!({"ok": false, "error": "not_authed"})).into_response();
    }
    if s.refused_tokens.lock().unwrap().contains(token) {
        return Json(json!({"ok": false, "error": "invalid_auth"})).into_response();
    }
    Json(json!({
        "ok": true,
        "url": "https://subarachnoid.slack.com/",
        "team": "Subarachnoid Workspace",
        "user": "grace",
        "team_id": "T12345678",
        "user_id": "W12345678",
        "bot_id": "B12345678",
        "is_enterprise_install": false,
    }))
    .into_response()
}

async fn group_users(
    State(s): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let group = q.get("usergroup").cloned().unwrap_or_default();
    if let Some(r) = s.record(
        "usergroups.users.list",
        &headers,
        json!({"usergroup": group}),
    ) {
        return r;
    }
    match s.groups.lock().unwrap().get(&group) {
        Some(users) => Json(json!({"ok": true, "users": users})).into_response(),
        None => Json(json!({"ok": false, "error": "no_such_subteam"})).into_response(),
    }
}

async fn respond(
    State(s): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut body = json_body(&body);
    body["_response_url_id"] = Value::String(id);
    if let Some(r) = s.record("respond", &headers, body) {
        return r;
    }
    Json(json!({"ok": true})).into_response()
}

/// `apps.connections.open`: only an app-level token gets a WebSocket URL.
async fn connections_open(State(s): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    if let Some(r) = s.record("apps.connections.open", &headers, json!({})) {
        return r;
    }
    let app_token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer xapp-"));
    if !app_token {
        return Json(json!({"ok": false, "error": "not_allowed_token_type"})).into_response();
    }
    let ticket = uuid::Uuid::new_v4();
    let base = s.ws_base.lock().unwrap().clone();
    Json(json!({"ok": true, "url": format!("{base}/link/?ticket={ticket}&app_id=A0FAKE")}))
        .into_response()
}

async fn link(State(s): State<Arc<Inner>>, upgrade: WebSocketUpgrade) -> Response {
    let hub = s.socket.clone();
    upgrade.on_upgrade(move |socket| async move { hub.serve(socket).await })
}

/// A request to gatebot signed as Slack signs it: `v0:<ts>:<body>` with `secret`.
pub async fn post_signed(url: &str, body: &str, ts: i64, secret: &str) -> reqwest::Response {
    let ts = ts.to_string();
    let sig = gatebot::testing::slack::verify::sign(secret.as_bytes(), &ts, body.as_bytes());
    crate::harness::client()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", sig)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}
