//! The operator API's answers, as one set of types: its handlers write them
//! and the CLI (`gatebot gates`, `freeze`, `unfreeze`, `wait`) reads them, so a
//! field the server no longer sends is an error the CLI reports, not a blank.

use serde::{Deserialize, Serialize};

use crate::core::{
    AuditEntry, CanarySeen, EventRow, GateDetail, GatePage, GateSummary, Job, ObservationRow,
    WaitRow,
};
use crate::gate::freeze::Freeze;
use crate::gate::{Actor, Change, Gate, GateStatus, Millis};
use crate::store::{NamedGate, NamedSpec};

/// `GET /api/v1/gates`: one page of gates in key order; `next` is the cursor
/// of the following page, null on the last one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateList {
    pub gates: Vec<GateLine>,
    pub next: Option<String>,
}

/// A gate as the list shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateLine {
    pub gate: String,
    pub state: String,
    pub by: Option<Actor>,
    pub reason: Option<String>,
    pub at: Option<Millis>,
    pub expires_at: Option<Millis>,
    /// At a gate that needs several people: "1 of 2 approvals: @alice".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<String>,
    /// Opened by break glass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    pub canaries: Vec<CanarySeen>,
}

/// `GET /api/v1/gates/{key}`: one gate in full.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateView {
    #[serde(flatten)]
    pub gate: Gate,
    pub observations: Vec<ObservationRow>,
    pub waits: Vec<WaitRow>,
    pub audit: Vec<AuditEntry>,
    /// What the pipeline that created a named gate said about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named: Option<NamedView>,
}

/// A named gate's spec and life, as its gate's view shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NamedView {
    #[serde(flatten)]
    pub spec: NamedSpec,
    pub created_at: Millis,
    pub created_by: String,
    pub retired_at: Option<Millis>,
    /// When a retired gate's details (title, links, waits) were pruned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned_at: Option<Millis>,
}

/// A freeze, with the line people read about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FreezeView {
    pub id: i64,
    pub scope: String,
    pub reason: String,
    pub by: Actor,
    pub at: Millis,
    pub until: Option<Millis>,
    pub line: String,
}

/// `GET /api/v1/freezes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FreezeList {
    pub freezes: Vec<FreezeView>,
}

/// `DELETE /api/v1/freezes?scope=…`: the scope and the freezes it lifted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lifted {
    pub scope: String,
    pub lifted: Vec<FreezeView>,
}

/// `GET /api/v1/waits`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitList {
    pub waits: Vec<WaitRow>,
}

/// `GET /api/v1/audit`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditList {
    pub audit: Vec<AuditEntry>,
}

/// `GET /api/v1/outbox`; no command reads it back.
#[derive(Debug, Clone, Serialize)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// `GET /api/v1/events`; no command reads it back.
#[derive(Debug, Clone, Serialize)]
pub struct EventList {
    pub events: Vec<EventRow>,
}

impl From<GatePage> for GateList {
    fn from(page: GatePage) -> Self {
        Self {
            gates: page.gates.into_iter().map(GateLine::from).collect(),
            next: page.next,
        }
    }
}

impl From<GateSummary> for GateLine {
    fn from(s: GateSummary) -> Self {
        Self {
            gate: s.gate,
            state: s.state.to_string(),
            by: s.by,
            reason: s.reason,
            at: s.at,
            expires_at: s.expires_at,
            approvals: s.approvals,
            forced: s.forced,
            canaries: s.canaries,
        }
    }
}

impl From<GateDetail> for GateView {
    fn from(d: GateDetail) -> Self {
        Self {
            gate: d.gate,
            observations: d.observations,
            waits: d.waits,
            audit: d.audit,
            named: d.named.map(NamedView::from),
        }
    }
}

impl From<NamedGate> for NamedView {
    fn from(n: NamedGate) -> Self {
        Self {
            spec: n.spec,
            created_at: n.created_at,
            created_by: n.created_by,
            retired_at: n.retired_at,
            pruned_at: n.pruned_at,
        }
    }
}

impl From<&Freeze> for FreezeView {
    fn from(f: &Freeze) -> Self {
        Self {
            id: f.id,
            scope: f.scope.to_string(),
            reason: f.reason.clone(),
            by: f.by.clone(),
            at: f.at,
            until: f.until,
            line: f.reason_line(),
        }
    }
}

impl GateView {
    /// The change the gate shows: its approval's, or its close's or hold's;
    /// none while it collects approvals.
    pub fn change(&self) -> Option<&Change> {
        match &self.gate.status {
            GateStatus::Open(a) => Some(&a.change),
            GateStatus::Closed { change } => change.as_ref(),
            GateStatus::Held { change } => Some(change),
            GateStatus::Approving(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gate::freeze::FreezeScope;
    use crate::gate::{Answer, AuditAction, CanaryRef, GateKey, Phase, Source};

    fn summary(approvals: Option<String>, forced: bool) -> GateSummary {
        GateSummary {
            gate: "/gates/promote/acme/shop/pr/1".into(),
            state: "open",
            by: Some(Actor::new("alice", Source::Github)),
            reason: Some("dashboards green".into()),
            at: Some(5),
            expires_at: None,
            approvals,
            forced,
            canaries: vec![CanarySeen {
                canary: CanaryRef::new("test", "app").unwrap(),
                checksum: "r1".into(),
                phase: Phase::Progressing,
                answer: Answer::Open,
                reason: "approved".into(),
                last_seen: 7,
                waiting_since: Some(6),
            }],
        }
    }

    /// The bytes the list answered when it was built with `json!` from the core's rows.
    #[test]
    fn a_gate_list_is_answered_byte_for_byte_as_before() {
        let gates = vec![summary(None, false), summary(Some("1 of 2".into()), true)];
        let before = json!({ "gates": gates, "next": "k" }).to_string();
        let page = GatePage {
            gates,
            next: Some("k".into()),
        };
        let now = serde_json::to_value(GateList::from(page)).unwrap();
        assert_eq!(now.to_string(), before);
        let read: GateList = serde_json::from_value(now).unwrap();
        assert_eq!(read.gates[1].approvals.as_deref(), Some("1 of 2"));
    }

    /// A canary's name, phase and answer are typed inside and plain text on the wire.
    #[test]
    fn a_canary_line_is_written_as_text() {
        let line = serde_json::to_string(&summary(None, false).canaries[0]).unwrap();
        assert_eq!(
            line,
            r#"{"canary":"test/app","checksum":"r1","phase":"Progressing","answer":"open","reason":"approved","last_seen":7,"waiting_since":6}"#
        );
        let read: CanarySeen = serde_json::from_str(&line).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), line);
    }

    /// Every row a gate's view carries reads back as it was written, canaries
    /// (written as text) included.
    #[test]
    fn a_gate_view_reads_back_what_it_wrote() {
        let key = GateKey::parse("/gates/promote/acme/shop/pr/1", None).unwrap();
        let canary = CanaryRef::new("test", "app").unwrap();
        let view = GateView {
            gate: Gate::closed(key.clone()),
            observations: Vec::new(),
            waits: Vec::new(),
            audit: vec![AuditEntry {
                at: 5,
                gate: key,
                action: AuditAction::Pin,
                actor: Actor::new("alice", Source::Api),
                reason: None,
                revision: Some("r1".into()),
                canary: Some(canary.clone()),
                delivery: None,
            }],
            named: None,
        };
        let text = serde_json::to_string(&view).unwrap();
        let read: GateView = serde_json::from_str(&text).unwrap();
        assert_eq!(read.audit[0].canary, Some(canary));
        assert_eq!(serde_json::to_string(&read).unwrap(), text);
    }

    #[test]
    fn a_freeze_is_answered_byte_for_byte_as_before() {
        let f = Freeze {
            id: 3,
            scope: FreezeScope::All,
            reason: "end of year".into(),
            by: Actor::new("alice", Source::Slack),
            at: 0,
            until: Some(7_200_000),
        };
        let before = json!({
            "id": f.id, "scope": f.scope.to_string(), "reason": f.reason,
            "by": f.by, "at": f.at, "until": f.until, "line": f.reason_line(),
        });
        let now = serde_json::to_value(FreezeView::from(&f)).unwrap();
        assert_eq!(now.to_string(), before.to_string());
    }
}
