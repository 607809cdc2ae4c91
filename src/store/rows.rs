//! Rows as the API shows them, and decoding of stored rows into domain types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{actor_from, Result, StoreError};
use crate::gate::audit::as_text;
use crate::gate::{
    Actor, Answer, Approval, AuditAction, CanaryRef, Change, DeliveryId, Gate, GateKey, GateStatus,
    Millis, Phase, Tally,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditEntry {
    pub at: Millis,
    pub gate: GateKey,
    pub action: AuditAction,
    pub actor: Actor,
    pub reason: Option<String>,
    pub revision: Option<String>,
    #[serde(with = "as_text::option")]
    pub canary: Option<CanaryRef>,
    pub delivery: Option<DeliveryId>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObservationRow {
    pub gate: GateKey,
    #[serde(with = "as_text")]
    pub canary: CanaryRef,
    pub checksum: String,
    pub phase: Phase,
    pub answer: Answer,
    pub reason: String,
    pub metadata: serde_json::Value,
    pub first_seen: Millis,
    pub last_seen: Millis,
    pub wait_id: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitRow {
    pub id: i64,
    pub gate: GateKey,
    /// None for the wait that announces a named gate before any canary asks.
    #[serde(with = "as_text::or_empty")]
    pub canary: Option<CanaryRef>,
    pub checksum: String,
    pub phase: Phase,
    pub metadata: serde_json::Value,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    pub outcome: Option<String>,
    /// How many of the policy's reminder points people were reminded of.
    #[serde(skip)]
    pub reminders_sent: i64,
    /// The cluster whose Flagger token the check that started it carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::gate::ClusterName>,
    /// Whether a Flagger token vouched for the check that started it. Under
    /// `[[environments]]` a wait has its gate's cluster either way: only this
    /// says the check was authenticated.
    #[serde(skip)]
    pub vouched: bool,
    /// When its deadline falls and its next reminder is due (`store::waits`).
    #[serde(skip)]
    pub due_at: Option<Millis>,
    #[serde(skip)]
    pub remind_at: Option<Millis>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    pub received_at: Millis,
    #[serde(with = "as_text")]
    pub canary: CanaryRef,
    pub phase: Phase,
    pub checksum: String,
    pub event_type: String,
    pub kind: String,
    pub message: String,
    pub flagger_at: Option<Millis>,
    #[serde(skip)]
    pub metadata: String,
    /// The cluster whose Flagger told it (its token's, or with environments
    /// as the check's is named).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cluster: Option<crate::gate::ClusterName>,
}

/// PR numbers and GitHub's ids are u64 in the domain, BIGINT in the store.
pub(super) fn signed(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| StoreError::Corrupt(format!("{what} {n} is out of range")))
}

pub(super) fn unsigned(n: i64, what: &str) -> Result<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("{what} {n} is out of range")))
}

/// The id (a GitHub id, u64) in `column`; a negative one is corrupt.
pub(super) fn id_in(row: &AnyRow, column: &str, what: &str) -> Result<u64> {
    let id: i64 = row.try_get(column)?;
    u64::try_from(id).map_err(|_| StoreError::Corrupt(format!("{what} {id}")))
}

pub(super) fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

/// The gate key in `column`; one that does not parse is corrupt, never skipped.
pub(super) fn key_in(row: &AnyRow, column: &str) -> Result<GateKey> {
    let text: String = row.try_get(column)?;
    GateKey::parse(&text, None).map_err(|e| StoreError::Corrupt(format!("gate key {text}: {e}")))
}

/// The canary (`namespace/name`) in `column`.
pub(super) fn canary_in(row: &AnyRow, column: &str) -> Result<CanaryRef> {
    let text: String = row.try_get(column)?;
    text.parse()
        .map_err(|e| StoreError::Corrupt(format!("canary {text}: {e}")))
}

/// The phase in `column`: one gatebot does not know is kept as it was sent.
pub(super) fn phase_in(row: &AnyRow, column: &str) -> Result<Phase> {
    Ok(Phase::parse(&row.try_get::<String, _>(column)?))
}

/// The answer in `column`; anything but "open" or "closed" is corrupt.
pub(super) fn answer_in(row: &AnyRow, column: &str) -> Result<Answer> {
    let text: String = row.try_get(column)?;
    text.parse()
        .map_err(|e| StoreError::Corrupt(format!("{column}: {e}")))
}

fn optional_canary_in(row: &AnyRow, column: &str) -> Result<Option<CanaryRef>> {
    let text: Option<String> = row.try_get(column)?;
    text.map(|t| {
        t.parse()
            .map_err(|e| StoreError::Corrupt(format!("canary {t}: {e}")))
    })
    .transpose()
}

pub(super) fn gate_from_row(row: &AnyRow) -> Result<Gate> {
    let key_text: String = row.try_get("key")?;
    let key = key_in(row, "key")?;
    let status: String = row.try_get("status")?;
    let change = actor_from(row, "actor", "source")?.map(|by| -> Result<Change> {
        Ok(Change {
            by,
            reason: row.try_get("reason")?,
            at: row.try_get("changed_at")?,
        })
    });
    let change = change.transpose()?;
    let status = match (status.as_str(), change) {
        ("open", Some(change)) => GateStatus::Open(Approval {
            id: row
                .try_get::<Option<String>, _>("approval_id")?
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("open gate {key_text} has no approval"))
                })?,
            change,
            expires_at: row.try_get("expires_at")?,
            pins: BTreeMap::new(),
            approvers: Vec::new(),
            forced: row.try_get::<i64, _>("forced")? != 0,
            exclusive: row.try_get::<i64, _>("exclusive")? != 0,
        }),
        ("held", Some(change)) => GateStatus::Held { change },
        ("approving", _) => GateStatus::Approving(Tally {
            include: super::votes::includes_in(&row.try_get::<String, _>("must_include")?)?,
            ..Tally::new(
                // Tallies stored before they had pins had no id: name them by their gate.
                row.try_get::<Option<String>, _>("approval_id")?
                    .unwrap_or_else(|| format!("votes:{key_text}")),
                u32::try_from(row.try_get::<i64, _>("required")?).unwrap_or(u32::MAX),
            )
        }),
        ("closed", change) => GateStatus::Closed { change },
        (other, _) => return Err(StoreError::Corrupt(format!("gate {key_text} is `{other}`"))),
    };
    Ok(Gate { key, status })
}

pub(super) fn observation_from_row(row: &AnyRow) -> Result<ObservationRow> {
    Ok(ObservationRow {
        gate: key_in(row, "gate_key")?,
        canary: canary_in(row, "canary")?,
        checksum: row.try_get("checksum")?,
        phase: phase_in(row, "phase")?,
        answer: answer_in(row, "answer")?,
        reason: row.try_get("reason")?,
        metadata: json(&row.try_get::<String, _>("metadata")?),
        first_seen: row.try_get("first_seen")?,
        last_seen: row.try_get("last_seen")?,
        wait_id: row.try_get("wait_id")?,
    })
}

pub(super) fn wait_from_row(row: &AnyRow) -> Result<WaitRow> {
    Ok(WaitRow {
        id: row.try_get("id")?,
        gate: key_in(row, "gate_key")?,
        // "" is a named gate's announcement, which no canary made.
        canary: match row.try_get::<String, _>("canary")?.as_str() {
            "" => None,
            text => Some(
                text.parse()
                    .map_err(|e| StoreError::Corrupt(format!("canary {text}: {e}")))?,
            ),
        },
        checksum: row.try_get("checksum")?,
        phase: phase_in(row, "phase")?,
        metadata: json(&row.try_get::<String, _>("metadata")?),
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        outcome: row.try_get("outcome")?,
        reminders_sent: row.try_get("reminders_sent")?,
        cluster: cluster_of(row)?,
        vouched: row.try_get::<i64, _>("vouched")? != 0,
        due_at: row.try_get("due_at")?,
        remind_at: row.try_get("remind_at")?,
    })
}

pub(super) fn audit_from_row(row: &AnyRow) -> Result<AuditEntry> {
    let action: String = row.try_get("action")?;
    Ok(AuditEntry {
        at: row.try_get("at")?,
        gate: key_in(row, "gate_key")?,
        action: action
            .parse()
            .map_err(|e| StoreError::Corrupt(format!("audit entry: {e}")))?,
        actor: actor_from(row, "actor", "source")?.unwrap_or_else(Actor::gatebot),
        reason: row.try_get("reason")?,
        revision: row.try_get("revision")?,
        canary: optional_canary_in(row, "canary")?,
        delivery: row
            .try_get::<Option<String>, _>("delivery")?
            .map(DeliveryId::stored),
    })
}

pub(super) fn event_from_row(row: &AnyRow) -> Result<EventRow> {
    Ok(EventRow {
        received_at: row.try_get("received_at")?,
        canary: canary_in(row, "canary")?,
        phase: phase_in(row, "phase")?,
        checksum: row.try_get("checksum")?,
        event_type: row.try_get("event_type")?,
        kind: row.try_get("kind")?,
        message: row.try_get("message")?,
        flagger_at: row.try_get("flagger_at")?,
        metadata: row.try_get("metadata")?,
        cluster: cluster_of(row)?,
    })
}

/// The cluster a wait's check came from, as stored.
fn cluster_of(row: &AnyRow) -> Result<Option<crate::gate::ClusterName>> {
    let text: Option<String> = row.try_get("cluster")?;
    text.map(|t| {
        t.parse()
            .map_err(|e: String| StoreError::Corrupt(format!("cluster: {e}")))
    })
    .transpose()
}
