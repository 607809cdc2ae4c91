//! What gatebot remembers about each waiting message, in the store's key-value
//! table. One key per concern so the inbox (clicks) and the outbox (notices),
//! which run concurrently, never overwrite each other's facts.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::gate::Millis;
use crate::store::{Store, StoreError};

/// The wait a message announces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitInfo {
    pub wait_id: i64,
    pub gate: String,
    pub canary: String,
    pub checksum: String,
    pub phase: String,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    pub since: Millis,
}

/// The posted message: `slack-msg:<wait_id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Posted {
    pub info: WaitInfo,
    pub channel: String,
    pub ts: String,
}

/// Who decided the wait: `slack-decision:<wait_id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub approved: bool,
    /// Slack user id when decided in Slack (rendered as a mention).
    pub user_id: Option<String>,
    pub name: String,
    pub via: String,
    pub at: Millis,
    pub reason: Option<String>,
    /// The rollback gate a Reject opened.
    pub rollback_gate: Option<String>,
}

impl Decision {
    /// `<@U123>` in Slack, else `@name`.
    pub fn by(&self) -> String {
        match &self.user_id {
            Some(id) if !id.is_empty() => format!("<@{id}>"),
            _ => format!("@{}", self.name),
        }
    }
}

/// The wait ended without a Slack decision: `slack-ended:<wait_id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    pub outcome: String,
    pub at: Millis,
}

/// The canary's rollout ended: `slack-final:<wait_id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Final {
    pub kind: String,
    pub message: String,
    pub at: Millis,
}

/// Everything a waiting message shows.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub info: WaitInfo,
    pub decision: Option<Decision>,
    pub ended: Option<Ended>,
    pub final_state: Option<Final>,
}

impl View {
    /// Buttons stay only while nobody decided and the wait goes on.
    pub fn open(&self) -> bool {
        self.decision.is_none() && self.ended.is_none() && self.final_state.is_none()
    }
}

pub fn msg_key(wait_id: i64) -> String {
    format!("slack-msg:{wait_id}")
}
pub fn decision_key(wait_id: i64) -> String {
    format!("slack-decision:{wait_id}")
}
pub fn ended_key(wait_id: i64) -> String {
    format!("slack-ended:{wait_id}")
}
pub fn final_key(wait_id: i64) -> String {
    format!("slack-final:{wait_id}")
}
/// The latest message posted for a canary: where its progress is threaded.
pub fn canary_key(canary: &str) -> String {
    format!("slack-canary:{canary}")
}
/// Messages posted for a gate (most recent last): found when the gate changes elsewhere.
pub fn gate_key(gate: &str) -> String {
    format!("slack-gate:{gate}")
}

pub async fn get<T: DeserializeOwned>(store: &Store, key: &str) -> Result<Option<T>, StoreError> {
    let Some(text) = store.kv_get(key).await? else {
        return Ok(None);
    };
    // `null` is written on purpose (a decision withdrawn); anything unreadable is not.
    serde_json::from_str::<Option<T>>(&text).map_err(|e| StoreError::Corrupt(format!("{key}: {e}")))
}

pub async fn put<T: Serialize>(
    store: &Store,
    key: &str,
    value: &T,
    now: Millis,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(value)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode {key}: {e}")))?;
    store.kv_put(key, &text, now).await
}

pub async fn view(store: &Store, info: WaitInfo) -> Result<View, StoreError> {
    let id = info.wait_id;
    Ok(View {
        decision: get(store, &decision_key(id)).await?,
        ended: get(store, &ended_key(id)).await?,
        final_state: get(store, &final_key(id)).await?,
        info,
    })
}

/// Remembers a posted message under its wait, its gate and its canary.
pub async fn remember(store: &Store, posted: &Posted, now: Millis) -> Result<(), StoreError> {
    let id = posted.info.wait_id;
    put(store, &msg_key(id), posted, now).await?;
    let gk = gate_key(&posted.info.gate);
    let mut ids: Vec<i64> = get(store, &gk).await?.unwrap_or_default();
    if !ids.contains(&id) {
        ids.push(id);
    }
    // Only recent waits can still change; older ones are final.
    let keep = ids.len().saturating_sub(20);
    put(store, &gk, &ids[keep..].to_vec(), now).await?;
    put(store, &canary_key(&posted.info.canary), &id, now).await
}
