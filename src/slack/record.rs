//! What gatebot remembers about each waiting message, one typed table per fact
//! (`src/store/slack.rs`), keyed by the wait, so that the inbox (clicks) and the
//! outbox (notices), which run concurrently, never overwrite each other's facts.
//! [`get`] and [`put`] take a [`Key`], whose type names the fact and its table.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use crate::core::Records;
use crate::gate::audit::as_text;
use crate::gate::{CanaryRef, GateKey, GateStatus, Millis};
use crate::store::{SlackDecision, SlackEnding, SlackFinal, SlackMessage, StoreError};

/// The wait a message announces. Stored in jobs with its key and canary as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitInfo {
    pub wait_id: i64,
    pub gate: GateKey,
    /// None: a named gate announced before any canary asks.
    #[serde(with = "as_text::or_empty")]
    pub canary: Option<CanaryRef>,
    pub checksum: String,
    pub phase: String,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    pub since: Millis,
}

/// The posted message.
#[derive(Debug, Clone, PartialEq)]
pub struct Posted {
    pub info: WaitInfo,
    pub channel: String,
    pub ts: String,
}

/// Who decided the wait (its row in `slack_decisions`).
pub type Decision = SlackDecision;

impl Decision {
    /// `<@U123>` in Slack, else `@name`.
    pub fn by(&self) -> String {
        match &self.user_id {
            Some(id) if !id.is_empty() => format!("<@{id}>"),
            _ => format!("@{}", self.name),
        }
    }
}

/// The wait ended without a Slack decision.
pub type Ended = SlackEnding;

/// The canary's rollout ended.
pub type Final = SlackFinal;

/// Everything a waiting message shows.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub info: WaitInfo,
    /// At a namespace gate: every canary waiting there now.
    pub waiting: Vec<String>,
    pub decision: Option<Decision>,
    pub ended: Option<Ended>,
    pub final_state: Option<Final>,
    /// At a gate that needs several people: who approved so far, or who opened it.
    pub approvals: Option<String>,
    /// The canary's progress at the wait's revision, as its events tell it.
    pub progress: Option<crate::gate::progress::CanaryProgress>,
    /// The canary's numbers against its primary's (`evidence`), while it waits.
    pub evidence: Option<String>,
    /// With environments: every cluster's gate of the same kind and PR.
    pub path: Vec<crate::core::path::PathRow>,
}

impl View {
    /// Buttons stay only while nobody decided and the wait goes on.
    pub fn open(&self) -> bool {
        self.decision.is_none() && self.ended.is_none() && self.final_state.is_none()
    }
}

/// How many of a gate's latest messages change when it opens elsewhere: older
/// waits are over.
const GATE_MESSAGES: i64 = 20;

/// Where one fact about a wait's message is kept: its type names the table.
#[derive(Debug)]
pub struct Key<T> {
    wait_id: i64,
    fact: PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    fn new(wait_id: i64) -> Self {
        Self {
            wait_id,
            fact: PhantomData,
        }
    }
}

pub fn msg_key(wait_id: i64) -> Key<Posted> {
    Key::new(wait_id)
}
pub fn decision_key(wait_id: i64) -> Key<Decision> {
    Key::new(wait_id)
}
pub fn ended_key(wait_id: i64) -> Key<Ended> {
    Key::new(wait_id)
}
pub fn final_key(wait_id: i64) -> Key<Final> {
    Key::new(wait_id)
}

/// A fact kept per waiting message, each in its own table.
pub trait Fact: Sized + Sync {
    fn load(
        records: &Records,
        wait_id: i64,
    ) -> impl Future<Output = Result<Option<Self>, StoreError>> + Send;
    fn save(
        &self,
        records: &Records,
        wait_id: i64,
        now: Millis,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

pub async fn get<T: Fact>(records: &Records, key: &Key<T>) -> Result<Option<T>, StoreError> {
    T::load(records, key.wait_id).await
}

/// Writes a fact in a transaction of its own, replacing the one before. `now`
/// is when (kept for messages: the latest post of a canary is found by it).
pub async fn put<T: Fact>(
    records: &Records,
    key: &Key<T>,
    value: &T,
    now: Millis,
) -> Result<(), StoreError> {
    value.save(records, key.wait_id, now).await
}

/// The wait of the latest message posted for a canary: where its progress is threaded.
pub async fn latest_of_canary(records: &Records, canary: &str) -> Result<Option<i64>, StoreError> {
    records.latest_slack_message_of_canary(canary).await
}

/// The waits of a gate's recent messages, oldest first: found when the gate changes elsewhere.
pub async fn waits_of_gate(records: &Records, gate: &str) -> Result<Vec<i64>, StoreError> {
    records.slack_messages_of_gate(gate, GATE_MESSAGES).await
}

/// The most canaries a namespace gate's message lists.
const WAITING_SHOWN: i64 = 50;

pub async fn view(records: &Records, info: WaitInfo, now: Millis) -> Result<View, StoreError> {
    let id = info.wait_id;
    let waiting = match info.gate.scope {
        crate::gate::Scope::Namespace(_) => {
            let mut canaries: Vec<String> = records
                .waits(Some(&info.gate), true, WAITING_SHOWN)
                .await?
                .into_iter()
                .filter_map(|w| w.canary.map(|c| c.to_string()))
                .collect();
            canaries.sort();
            canaries
        }
        _ => Vec::new(),
    };
    let approvals = match records.load_gate(&info.gate).await?.map(|g| g.status) {
        Some(GateStatus::Approving(t)) => Some(t.summary()),
        Some(GateStatus::Open(a)) => crate::gate::quorum::opened_by(&a),
        _ => None,
    };
    let progress = match &info.canary {
        Some(c) => records
            .canary_progress(c)
            .await?
            .filter(|p| p.of_revision(&info.checksum)),
        None => None,
    };
    Ok(View {
        path: crate::core::path::path_of(records, &info.gate, now).await?,
        approvals,
        progress,
        evidence: None,
        waiting,
        decision: get(records, &decision_key(id)).await?,
        ended: get(records, &ended_key(id)).await?,
        final_state: get(records, &final_key(id)).await?,
        info,
    })
}

/// Remembers a posted message; its gate and its canary find it from then on.
pub async fn remember(records: &Records, posted: &Posted, now: Millis) -> Result<(), StoreError> {
    put(records, &msg_key(posted.info.wait_id), posted, now).await
}

impl Fact for Posted {
    async fn load(records: &Records, wait_id: i64) -> Result<Option<Self>, StoreError> {
        let Some(m) = records.slack_message(wait_id).await? else {
            return Ok(None);
        };
        let corrupt = |what: &str, e: &dyn std::fmt::Display| {
            StoreError::Corrupt(format!("{what} of Slack message {wait_id}: {e}"))
        };
        let metadata = serde_json::from_str(&m.metadata).map_err(|e| corrupt("metadata", &e))?;
        let gate = GateKey::parse(&m.gate, None).map_err(|e| corrupt("gate", &e))?;
        let canary = match m.canary.as_str() {
            "" => None,
            text => Some(text.parse().map_err(|e| corrupt("canary", &e))?),
        };
        Ok(Some(Posted {
            info: WaitInfo {
                wait_id: m.wait_id,
                gate,
                canary,
                checksum: m.checksum,
                phase: m.phase,
                metadata,
                since: m.since,
            },
            channel: m.channel,
            ts: m.ts,
        }))
    }

    async fn save(&self, records: &Records, wait_id: i64, now: Millis) -> Result<(), StoreError> {
        let metadata = serde_json::to_string(&self.info.metadata)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode metadata: {e}")))?;
        let m = SlackMessage {
            wait_id,
            gate: self.info.gate.to_string(),
            canary: self
                .info
                .canary
                .as_ref()
                .map_or_else(String::new, ToString::to_string),
            checksum: self.info.checksum.clone(),
            phase: self.info.phase.clone(),
            metadata,
            since: self.info.since,
            channel: self.channel.clone(),
            ts: self.ts.clone(),
        };
        records.remember_slack_message(&m, now).await
    }
}

impl Fact for Decision {
    async fn load(records: &Records, wait_id: i64) -> Result<Option<Self>, StoreError> {
        records.slack_decision(wait_id).await
    }

    async fn save(&self, records: &Records, wait_id: i64, _now: Millis) -> Result<(), StoreError> {
        records.remember_slack_decision(wait_id, self).await
    }
}

impl Fact for Ended {
    async fn load(records: &Records, wait_id: i64) -> Result<Option<Self>, StoreError> {
        records.slack_ending(wait_id).await
    }

    async fn save(&self, records: &Records, wait_id: i64, _now: Millis) -> Result<(), StoreError> {
        records.remember_slack_ending(wait_id, self).await
    }
}

impl Fact for Final {
    async fn load(records: &Records, wait_id: i64) -> Result<Option<Self>, StoreError> {
        records.slack_final(wait_id).await
    }

    async fn save(&self, records: &Records, wait_id: i64, _now: Millis) -> Result<(), StoreError> {
        records.remember_slack_final(wait_id, self).await
    }
}
