//! Slack Web API calls over reqwest, with `GATEBOT_SLACK_API_URL` as the base,
//! and how their failures map onto the outbox's retry rules.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::blocks::Block;
use crate::metrics::OutboundCalls;
use crate::notify::SendError;
use crate::outbound;

/// The largest answer read from Slack.
const BODY_LIMIT: usize = 4 * 1024 * 1024;

static HTTP: outbound::Shared = outbound::Shared::new();

/// The largest Socket Mode message read: what the HTTP routes take as a body.
pub const SOCKET_MESSAGE_LIMIT: usize = crate::http::SLACK_BODY_LIMIT;

/// An open Socket Mode connection.
pub type Socket = tokio_tungstenite::WebSocketStream<reqwest::Upgraded>;

/// Why no Socket Mode connection opened; Slack may say when to try again.
#[derive(Debug)]
pub struct SocketError {
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl SocketError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry_after: None,
        }
    }
}

impl std::fmt::Display for SocketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Deserialize)]
struct Opened {
    url: String,
}

pub struct SlackApi {
    http: reqwest::Client,
    /// The Web API root without a trailing slash.
    base: String,
    token: String,
    calls: OutboundCalls,
}

/// A message posted to an interaction's or command's `response_url`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Response {
    /// `ephemeral` (only the person who clicked sees it) or `in_channel`.
    pub response_type: String,
    pub text: String,
    #[serde(default)]
    pub replace_original: bool,
}

impl Response {
    pub fn ephemeral(text: impl Into<String>) -> Self {
        Self {
            response_type: "ephemeral".into(),
            text: text.into(),
            replace_original: false,
        }
    }
}

/// Why a Slack call failed, before it is mapped onto the outbox's rules.
#[derive(Debug)]
pub enum CallError {
    /// HTTP 429, with Retry-After when given.
    RateLimited(Option<Duration>),
    /// HTTP 200 with `"ok": false` and an error code.
    Api(String),
    /// Any other HTTP status.
    Http(StatusCode),
    /// No (readable) answer.
    Transport(String),
}

impl CallError {
    /// The result as `gatebot_outbound_requests_total` counts it.
    fn result(&self) -> &'static str {
        match self {
            Self::RateLimited(_) => "rate_limited",
            Self::Api(code) if code == "ratelimited" => "rate_limited",
            Self::Api(_) => "api_error",
            Self::Http(status) if status.is_server_error() => "server_error",
            Self::Http(_) => "client_error",
            Self::Transport(_) => "transport",
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RateLimited(_) => f.write_str("rate limited"),
            Self::Api(code) => f.write_str(code),
            Self::Http(status) => write!(f, "HTTP {status}"),
            Self::Transport(m) => f.write_str(m),
        }
    }
}

#[derive(Deserialize)]
struct Posted {
    channel: String,
    ts: String,
}

#[derive(Deserialize)]
struct Members {
    #[serde(default)]
    users: Vec<String>,
}

impl SlackApi {
    pub fn new(api_url: &str, bot_token: &str, calls: OutboundCalls) -> anyhow::Result<Self> {
        Ok(Self {
            http: HTTP.get(CALL_TIMEOUT)?,
            base: api_url.trim_end_matches('/').to_string(),
            token: bot_token.to_string(),
            calls,
        })
    }

    /// chat.postMessage; returns the channel id and the message ts.
    pub async fn post_message(
        &self,
        channel: &str,
        text: &str,
        blocks: Option<Vec<Block>>,
        thread_ts: Option<&str>,
    ) -> Result<(String, String), SendError> {
        let mut body = json!({ "channel": channel, "text": text });
        if let Some(blocks) = blocks {
            body["blocks"] = json!(blocks);
        }
        if let Some(ts) = thread_ts {
            body["thread_ts"] = json!(ts);
        }
        let posted: Posted = self.method("chat.postMessage", &body).await?;
        Ok((posted.channel, posted.ts))
    }

    /// chat.update with the full new block list.
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
        blocks: Vec<Block>,
    ) -> Result<(), SendError> {
        let body = json!({ "channel": channel, "text": text, "blocks": blocks, "ts": ts });
        let _: Value = self.method("chat.update", &body).await?;
        Ok(())
    }

    /// Posts to a `response_url` (no token: the URL is the credential, and it
    /// is not logged).
    pub async fn respond(&self, response_url: &str, body: &Response) -> Result<(), SendError> {
        let url: reqwest::Url = response_url
            .parse()
            .map_err(|e| SendError::Permanent(format!("response_url `{response_url}`: {e}")))?;
        let request = self.http.post(url).json(body);
        let _: Value = self.within("response_url", call(request)).await?;
        Ok(())
    }

    /// views.open: a modal for the person whose click gave `trigger_id`
    /// (Slack takes it for 3 seconds after the click).
    pub async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<(), SendError> {
        let body = json!({ "trigger_id": trigger_id, "view": view });
        let _: Value = self.method("views.open", &body).await?;
        Ok(())
    }

    /// `auth.test`: who the bot token is, as `user (team)`; read only.
    pub async fn auth_test(&self) -> Result<String, SendError> {
        let answer: Value = self.method("auth.test", &json!({})).await?;
        let field = |k: &str| {
            answer
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        Ok(format!("{} ({})", field("user"), field("team")))
    }

    /// usergroups.users.list: the members of a user group.
    pub async fn group_members(&self, group: &str) -> Result<Vec<String>, SendError> {
        let method = "usergroups.users.list";
        let request = self
            .http
            .get(format!("{}/{method}", self.base))
            .query(&[("usergroup", group)])
            .bearer_auth(&self.token);
        let members: Members = self.within(method, call(request)).await?;
        Ok(members.users)
    }

    /// A Web API method taking a JSON body.
    async fn method<T: DeserializeOwned>(
        &self,
        method: &'static str,
        body: &Value,
    ) -> Result<T, SendError> {
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&self.token)
            .json(body);
        self.within(method, call(request)).await
    }

    /// Opens a Socket Mode connection: `apps.connections.open` with the
    /// app-level token for a one-time WebSocket URL, then the WebSocket itself,
    /// upgraded from a request of the same client (so through the same
    /// proxies, trusting the same roots).
    pub async fn open_socket(&self, app_token: &str) -> Result<Socket, SocketError> {
        let method = "apps.connections.open";
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(app_token)
            .json(&json!({}));
        let opened = match self.timed(method, call::<Opened>(request)).await {
            Some(Ok(opened)) => opened,
            Some(Err(CallError::RateLimited(after))) => {
                return Err(SocketError {
                    message: format!("{method}: rate limited by Slack"),
                    retry_after: after,
                })
            }
            Some(Err(CallError::Api(code))) => {
                let hint = match code.as_str() {
                    "invalid_auth" | "not_authed" | "token_revoked" | "not_allowed_token_type" => {
                        ": check GATEBOT_SLACK_APP_TOKEN (an app-level xapp- token)"
                    }
                    "missing_scope" => ": the app-level token needs the connections:write scope",
                    "not_allowed" => ": turn Socket Mode on in the app's settings",
                    _ => "",
                };
                return Err(SocketError::new(format!("{method}: {code}{hint}")));
            }
            Some(Err(e)) => return Err(SocketError::new(format!("{method}: {e}"))),
            None => {
                return Err(SocketError::new(format!(
                    "{method}: no answer within {CALL_TIMEOUT:?}"
                )))
            }
        };
        let upgrade = async {
            self.upgrade(&opened.url)
                .await
                .map_err(CallError::Transport)
        };
        match self.timed("websocket", upgrade).await {
            Some(socket) => socket.map_err(|e| SocketError::new(e.to_string())),
            None => Err(SocketError::new(format!(
                "the Socket Mode WebSocket did not open within {CALL_TIMEOUT:?}"
            ))),
        }
    }

    async fn upgrade(&self, url: &str) -> Result<Socket, String> {
        use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};
        use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

        let mut url: reqwest::Url = url
            .parse()
            .map_err(|e| format!("apps.connections.open gave no URL: {e}"))?;
        let scheme = match url.scheme() {
            "wss" => "https",
            "ws" => "http",
            other => {
                return Err(format!(
                    "apps.connections.open gave a {other}: URL, not wss:"
                ))
            }
        };
        url.set_scheme(scheme)
            .map_err(|()| "cannot read the Socket Mode URL".to_string())?;
        let key = generate_key();
        let response = self
            .http
            .get(url)
            .header(reqwest::header::CONNECTION, "Upgrade")
            .header(reqwest::header::UPGRADE, "websocket")
            .header(reqwest::header::SEC_WEBSOCKET_VERSION, "13")
            .header(reqwest::header::SEC_WEBSOCKET_KEY, &key)
            .send()
            .await
            .map_err(|e| format!("Socket Mode WebSocket: {}", outbound::why(&e)))?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Err(format!(
                "Socket Mode WebSocket: HTTP {} instead of 101 Switching Protocols",
                response.status()
            ));
        }
        let accepted = response
            .headers()
            .get(reqwest::header::SEC_WEBSOCKET_ACCEPT)
            .and_then(|v| v.to_str().ok());
        if accepted != Some(derive_accept_key(key.as_bytes()).as_str()) {
            return Err("Socket Mode WebSocket: Sec-WebSocket-Accept does not match".into());
        }
        let io = response
            .upgrade()
            .await
            .map_err(|e| format!("Socket Mode WebSocket: {}", outbound::why(&e)))?;
        // Envelopes are small; a larger frame is refused by the framing itself.
        let config = WebSocketConfig::default()
            .max_message_size(Some(SOCKET_MESSAGE_LIMIT))
            .max_frame_size(Some(SOCKET_MESSAGE_LIMIT));
        Ok(
            tokio_tungstenite::WebSocketStream::from_raw_socket(io, Role::Client, Some(config))
                .await,
        )
    }

    /// Bounds one call, so a hanging Slack holds up only the work waiting on
    /// it; counts and times it under `method`, whatever its result.
    async fn within<T>(
        &self,
        method: &'static str,
        call: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, SendError> {
        match self.timed(method, call).await {
            Some(answer) => answer.map_err(|e| classify(method, e)),
            None => Err(SendError::retry(format!(
                "Slack {method}: no answer within {CALL_TIMEOUT:?}"
            ))),
        }
    }

    /// The call, bounded by [`CALL_TIMEOUT`] (None when it ran out) and
    /// counted and timed under `endpoint`.
    async fn timed<T>(
        &self,
        endpoint: &'static str,
        call: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Option<Result<T, CallError>> {
        let started = Instant::now();
        let answered = tokio::time::timeout(CALL_TIMEOUT, call).await.ok();
        let result = match &answered {
            None => "timeout",
            Some(Ok(_)) => "ok",
            Some(Err(e)) => e.result(),
        };
        self.calls.observe(endpoint, result, started.elapsed());
        answered
    }
}

/// Sends one request and reads Slack's answer: `ok: false` carries an error
/// code even with HTTP 200.
async fn call<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, CallError> {
    let response = request
        .send()
        .await
        .map_err(|e| CallError::Transport(outbound::why(&e)))?;
    let status = response.status();
    let retry_after = outbound::retry_after(response.headers());
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    let bytes = outbound::body(response, BODY_LIMIT)
        .await
        .map_err(CallError::Transport)?;
    match status {
        StatusCode::TOO_MANY_REQUESTS => Err(CallError::RateLimited(retry_after)),
        StatusCode::OK if is_json => {
            let value: Value = serde_json::from_slice(&bytes)
                .map_err(|e| CallError::Transport(format!("unexpected answer: {e}")))?;
            if let Some(code) = value.get("error").and_then(Value::as_str) {
                return Err(CallError::Api(code.to_string()));
            }
            serde_json::from_value(value)
                .map_err(|e| CallError::Transport(format!("unexpected answer: {e}")))
        }
        // `response_url` may answer with plain text.
        StatusCode::OK | StatusCode::NO_CONTENT => serde_json::from_str("{}")
            .map_err(|e| CallError::Transport(format!("unexpected answer: {e}"))),
        other => Err(CallError::Http(other)),
    }
}

/// Slack's error codes that no retry can fix (configuration, permissions, content).
const PERMANENT: &[&str] = &[
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "no_permission",
    "missing_scope",
    "not_allowed_token_type",
    "invalid_blocks",
    "invalid_blocks_format",
    "msg_too_long",
    "no_text",
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
    "no_such_subteam",
    "invalid_arguments",
    "expired_url",
    "used_url",
    "restricted_action",
    "team_access_not_granted",
];

/// Rate limits and Slack-side trouble are retried (honouring Retry-After);
/// configuration and content errors are not. Unknown codes are retried, within
/// the outbox's attempt limit, rather than dropping a message on a new code.
/// The longest one Slack call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub fn classify(method: &str, e: CallError) -> SendError {
    match e {
        CallError::RateLimited(after) => SendError::Retry {
            after: Some(after.unwrap_or(Duration::from_secs(1))),
            message: format!("{method}: rate limited by Slack"),
        },
        CallError::Api(code) if code == "ratelimited" => SendError::Retry {
            after: Some(Duration::from_secs(1)),
            message: format!("{method}: ratelimited"),
        },
        CallError::Api(code) if PERMANENT.contains(&code.as_str()) => {
            SendError::Permanent(format!("{method}: {}", hint(&code)))
        }
        CallError::Api(code) => SendError::retry(format!("{method}: {code}")),
        CallError::Http(status)
            if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 404 =>
        {
            SendError::Permanent(format!("{method}: HTTP {status}"))
        }
        other => SendError::retry(format!("{method}: {other}")),
    }
}

fn hint(code: &str) -> String {
    match code {
        "not_in_channel" => {
            "not_in_channel: invite the app to the channel (/invite @gatebot)".into()
        }
        "channel_not_found" => {
            "channel_not_found: check GATEBOT_SLACK_CHANNEL or the canary's slack_channel metadata"
                .into()
        }
        "invalid_auth" | "not_authed" | "token_revoked" | "token_expired" => {
            format!("{code}: check GATEBOT_SLACK_BOT_TOKEN")
        }
        "missing_scope" => {
            "missing_scope: the app needs chat:write, commands and usergroups:read".into()
        }
        other => other.to_string(),
    }
}
