//! Calls to the Bot Connector: a token from the client-credentials flow,
//! kept until shortly before it expires, and activities sent to a
//! conversation. Every call is bounded and counted; what the connector
//! answers decides whether the outbox tries again.

use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;

use crate::clock::SharedClock;
use crate::gate::Millis;
use crate::metrics::OutboundCalls;
use crate::notify::SendError;
use crate::outbound;

static HTTP: outbound::Shared = outbound::Shared::new();

const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A token is fetched again this long before it expires.
const TOKEN_MARGIN: Millis = 5 * 60 * 1000;
/// Answers are small JSON objects.
const ANSWER_LIMIT: usize = 64 * 1024;
/// The tenant of multi-tenant bots' tokens.
const BOTFRAMEWORK_TENANT: &str = "botframework.com";
const SCOPE: &str = "https://api.botframework.com/.default";

pub struct Connector {
    login_url: String,
    app_id: String,
    password: SecretString,
    tenant: Option<String>,
    clock: SharedClock,
    calls: OutboundCalls,
    token: tokio::sync::Mutex<Option<(SecretString, Millis)>>,
}

/// The connector's answer to a send: the activity's id.
#[derive(Deserialize)]
struct Resource {
    id: String,
}

/// A conversation's activities (or one of them), ids escaped.
fn activities_url(service_url: &str, conversation_id: &str, activity_id: Option<&str>) -> String {
    let escape = |id: &str| -> String { form_urlencoded::byte_serialize(id.as_bytes()).collect() };
    let base = format!(
        "{}/v3/conversations/{}/activities",
        service_url.trim_end_matches('/'),
        escape(conversation_id)
    );
    match activity_id {
        Some(id) => format!("{base}/{}", escape(id)),
        None => base,
    }
}

/// A Teams Workflows webhook (GATEBOT_TEAMS_WORKFLOW_URL): a card posted
/// there needs no bot and no token; the URL itself is the secret.
pub struct Workflow {
    url: SecretString,
    calls: OutboundCalls,
}

impl Workflow {
    pub fn new(url: SecretString, calls: OutboundCalls) -> Self {
        Self { url, calls }
    }

    pub async fn post(&self, message: &Value) -> Result<(), SendError> {
        let http = HTTP
            .get(CALL_TIMEOUT)
            .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        let started = Instant::now();
        let sent = http
            .post(self.url.expose_secret())
            .json(message)
            .send()
            .await;
        let result = answer(sent).await;
        let label = result.as_ref().err().map_or("ok", |(label, _)| label);
        self.calls.observe("workflow", label, started.elapsed());
        result.map(drop).map_err(|(_, e)| e)
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: i64,
}

impl Connector {
    pub fn new(
        login_url: &str,
        app_id: &str,
        password: SecretString,
        tenant: Option<String>,
        clock: SharedClock,
        calls: OutboundCalls,
    ) -> Self {
        Self {
            login_url: login_url.trim_end_matches('/').to_string(),
            app_id: app_id.to_string(),
            password,
            tenant,
            clock,
            calls,
            token: tokio::sync::Mutex::default(),
        }
    }

    /// `POST {serviceUrl}/v3/conversations/{id}/activities`; the id the
    /// connector gave the activity (kept to update it).
    pub async fn send(
        &self,
        service_url: &str,
        conversation_id: &str,
        activity: &Value,
    ) -> Result<String, SendError> {
        let url = activities_url(service_url, conversation_id, None);
        let body = self
            .call(reqwest::Method::POST, &url, activity, "send_activity")
            .await?;
        let sent: Resource = serde_json::from_slice(&body).map_err(|e| {
            SendError::Permanent(format!("the connector's answer names no activity id: {e}"))
        })?;
        Ok(sent.id)
    }

    /// `PUT {serviceUrl}/v3/conversations/{id}/activities/{activityId}`:
    /// the activity replaced in place.
    pub async fn update(
        &self,
        service_url: &str,
        conversation_id: &str,
        activity_id: &str,
        activity: &Value,
    ) -> Result<(), SendError> {
        let url = activities_url(service_url, conversation_id, Some(activity_id));
        let mut activity = activity.clone();
        activity["id"] = Value::String(activity_id.to_string());
        self.call(reqwest::Method::PUT, &url, &activity, "update_activity")
            .await
            .map(drop)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        activity: &Value,
        endpoint: &'static str,
    ) -> Result<Vec<u8>, SendError> {
        let token = self.token().await?;
        let started = Instant::now();
        let sent = self
            .http()?
            .request(method, url)
            .bearer_auth(token.expose_secret())
            .json(activity)
            .send()
            .await;
        let result = answer(sent).await;
        let label = result.as_ref().err().map_or("ok", |(label, _)| label);
        self.calls.observe(endpoint, label, started.elapsed());
        if matches!(result, Err(("unauthorized", _))) {
            // A token revoked or rotated: the next try fetches another.
            *self.token.lock().await = None;
        }
        result.map_err(|(_, e)| e)
    }

    fn http(&self) -> Result<reqwest::Client, SendError> {
        HTTP.get(CALL_TIMEOUT)
            .map_err(|e| SendError::Permanent(format!("{e:#}")))
    }

    /// A token from the login endpoint, fetched now (read only): whether the
    /// app id, password and tenant are accepted.
    pub async fn probe(&self) -> Result<(), SendError> {
        *self.token.lock().await = None;
        self.token().await.map(drop)
    }

    /// The cached token, or a new one when it is about to expire.
    async fn token(&self) -> Result<SecretString, SendError> {
        let mut cached = self.token.lock().await;
        let now = self.clock.now_ms();
        if let Some((token, expires)) = cached.as_ref() {
            if now < expires - TOKEN_MARGIN {
                return Ok(token.clone());
            }
        }
        let started = Instant::now();
        let fetched = self.fetch_token().await;
        let label = fetched.as_ref().err().map_or("ok", |(label, _)| label);
        self.calls.observe("token", label, started.elapsed());
        let got = fetched.map_err(|(_, e)| e)?;
        let token = SecretString::from(got.access_token);
        *cached = Some((token.clone(), now + got.expires_in.max(0) * 1000));
        Ok(token)
    }

    async fn fetch_token(&self) -> Result<TokenAnswer, (&'static str, SendError)> {
        let tenant = self.tenant.as_deref().unwrap_or(BOTFRAMEWORK_TENANT);
        let url = format!("{}/{tenant}/oauth2/v2.0/token", self.login_url);
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", self.app_id.as_str()),
            ("client_secret", self.password.expose_secret()),
            ("scope", SCOPE),
        ];
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let http = self.http().map_err(|e| ("transport", e))?;
        let sent = http
            .post(&url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await;
        let text = answer(sent).await?;
        serde_json::from_slice(&text).map_err(|e| {
            let why =
                format!("the login service's token answer is not JSON with access_token: {e}");
            ("api_error", SendError::Permanent(why))
        })
    }
}

/// The answer's body on success; otherwise its result label and whether
/// trying again may help (Retry-After kept).
async fn answer(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<Vec<u8>, (&'static str, SendError)> {
    let response = sent.map_err(|e| {
        let label = if e.is_timeout() {
            "timeout"
        } else {
            "transport"
        };
        (label, SendError::retry(outbound::why(&e)))
    })?;
    let status = response.status();
    if status.is_success() {
        return outbound::body(response, ANSWER_LIMIT)
            .await
            .map_err(|e| ("transport", SendError::retry(e)));
    }
    let after = outbound::retry_after(response.headers());
    let message = format!("HTTP {status}");
    Err(match status.as_u16() {
        429 => ("rate_limited", SendError::Retry { after, message }),
        401 => ("unauthorized", SendError::retry(message)),
        s if s >= 500 => ("server_error", SendError::Retry { after, message }),
        _ => ("client_error", SendError::Permanent(message)),
    })
}
