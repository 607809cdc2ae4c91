//! The change systems (`[change]` in the policy): ServiceNow's Change
//! Management API and Jira Service Management's request API, read for a
//! change's decision, window and services, and written to open a change and
//! close it. Each answer is bounded in size and time; a refusal, a rate limit
//! and an outage each say so.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use crate::gate::ticket::{Fields, Provider, Ticket};
use crate::notify::MAX_RETRY_AFTER;

mod jira;
mod servicenow;

/// The most of an answer read: a change record is a few kilobytes.
const MAX_ANSWER: usize = 1 << 20;

/// How long one call may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call to the change system did not answer what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Down, slow, rate limited or answering garbage: ask again later.
    Unreachable {
        why: String,
        after: Option<Duration>,
    },
    /// It refused gatebot (credentials, permissions, a bad request).
    Refused(String),
    /// No such change.
    NotFound,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable { why, .. } => {
                write!(f, "the change system can't be reached ({why})")
            }
            Self::Refused(why) => write!(f, "the change system refused gatebot ({why})"),
            Self::NotFound => f.write_str("the change system has no such change"),
        }
    }
}

/// What a change opened by gatebot says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    pub summary: String,
    pub description: String,
    /// The configuration item or service it names, if the policy gives one.
    pub service: Option<String>,
    /// Its planned window: from when the canary started waiting.
    pub window: (crate::gate::Millis, crate::gate::Millis),
}

/// An instant as jiff's UTC timestamp (the epoch for one out of range).
fn timestamp(ms: crate::gate::Millis) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// A change system's client: one per process.
pub struct ChangeClient {
    provider: Provider,
    base: String,
    http: reqwest::Client,
    user: String,
    password: SecretString,
    fields: Fields,
}

impl ChangeClient {
    pub fn new(
        provider: Provider,
        base: &str,
        http: reqwest::Client,
        user: String,
        password: SecretString,
        fields: Fields,
    ) -> Self {
        Self {
            provider,
            base: base.trim_end_matches('/').to_string(),
            http,
            user,
            password,
            fields,
        }
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The change `number` as the system has it now. `number` is one the
    /// rule's pattern accepted (`ChangeRule::number_in`), so it is safe in a
    /// path or a query.
    pub async fn read(&self, number: &str) -> Result<Ticket, CallError> {
        match self.provider {
            Provider::ServiceNow => servicenow::read(self, number).await,
            Provider::Jira => jira::read(self, number).await,
        }
    }

    /// One read with the credentials given (`check-config --probe`): a
    /// number no change has, so a sign-in that works answers "no such change".
    pub async fn probe(&self, project: Option<&str>) -> Result<(), CallError> {
        let number = match (self.provider, project) {
            (Provider::Jira, Some(p)) => format!("{p}-0"),
            _ => "CHG0000000".to_string(),
        };
        match self.read(&number).await {
            Ok(_) | Err(CallError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Opens a change; its number.
    pub async fn create(&self, draft: &Draft) -> Result<String, CallError> {
        match self.provider {
            Provider::ServiceNow => servicenow::create(self, draft).await,
            Provider::Jira => jira::create(self, draft).await,
        }
    }

    /// Moves the change to its end state: successful or not, with notes.
    pub async fn close(
        &self,
        number: &str,
        successful: bool,
        notes: &str,
    ) -> Result<(), CallError> {
        match self.provider {
            Provider::ServiceNow => servicenow::close(self, number, successful, notes).await,
            Provider::Jira => jira::close(self, number, successful, notes).await,
        }
    }

    /// One call: its JSON answer (Null for an empty one), or why not.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .request(method, &url)
            .basic_auth(&self.user, Some(self.password.expose_secret()))
            .header("accept", "application/json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| CallError::Unreachable {
            why: crate::outbound::why(&e),
            after: None,
        })?;
        let status = response.status();
        // Within the hour, whatever the service says.
        let after =
            crate::outbound::retry_after(response.headers()).map(|d| d.min(MAX_RETRY_AFTER));
        let bytes = crate::outbound::body(response, MAX_ANSWER)
            .await
            .map_err(|why| CallError::Unreachable { why, after: None })?;
        match status {
            s if s.is_success() => {
                if bytes.is_empty() {
                    return Ok(Value::Null);
                }
                serde_json::from_slice(&bytes).map_err(|e| CallError::Unreachable {
                    why: format!("an answer that is not JSON: {e}"),
                    after: None,
                })
            }
            StatusCode::NOT_FOUND => Err(CallError::NotFound),
            StatusCode::TOO_MANY_REQUESTS => Err(CallError::Unreachable {
                why: "rate limited (429)".into(),
                after: after.or(Some(Duration::from_secs(60))),
            }),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(CallError::Refused(format!(
                "{} {}: check GATEBOT_CHANGE_USER and GATEBOT_CHANGE_PASSWORD",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            ))),
            s if s.is_server_error() => Err(CallError::Unreachable {
                why: format!("{}", s.as_u16()),
                after,
            }),
            s => Err(CallError::Refused(format!(
                "{}: {}",
                s.as_u16(),
                said(&bytes)
            ))),
        }
    }
}

/// What an error body says, in a line of at most 200 characters (it is the
/// other side's text, quoted in logs and answers).
fn said(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    line.trim().to_string()
}

/// The text of a JSON value that may be a string, a number or absent.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A garbled answer: the system is there but answers nothing gatebot reads.
fn garbled(what: &str) -> CallError {
    CallError::Unreachable {
        why: format!("an answer without {what}"),
        after: None,
    }
}
