//! What the status comment and `/status` show about one pull request, read
//! from the store at the moment of sending (so a coalesced job shows the latest).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::core::Records;
use crate::evidence::Evidence;
use crate::gate::progress::CanaryProgress;
use crate::gate::reason::MAX_REASON;
use crate::gate::state::rfc3339;
use crate::gate::{
    CanaryRef, ClusterName, GateKey, GateKind, GateStatus, Millis, PrNumber, RepoName, Scope,
};
use crate::store::StoreError;
use crate::templates::escape::{self, code};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CanaryView {
    pub canary: String,
    pub phase: String,
    pub checksum: String,
    pub answer: String,
    pub waiting_since: Option<Millis>,
    /// Reminder points passed in the wait going on (0: none yet).
    pub reminders: i64,
    /// While it waits: its progress as its events tell it, one line
    /// (made by `for_markdown`, with Flagger's words as code).
    pub progress: Option<String>,
    #[serde(skip)]
    pub progress_of: Option<CanaryProgress>,
    /// While it waits: its numbers against the primary's (`evidence`).
    pub evidence: Option<String>,
    #[serde(skip)]
    pub canary_ref: CanaryRef,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GateView {
    pub kind: &'static str,
    pub key: String,
    /// A named gate's name (a pipeline's gate that names this PR).
    pub name: Option<String>,
    /// A named gate's title.
    pub title: Option<String>,
    /// What opens it: `/promote`, or with environments `/promote production`.
    pub command: String,
    /// open | closed | held (an expired approval shows as closed); with
    /// environments, "not started" in a cluster where nothing happened yet.
    pub state: &'static str,
    /// With environments: the gate's cluster and its environment.
    pub cluster: Option<String>,
    pub environment: Option<String>,
    /// Where the revision stands on its way here ("waiting: staging promoted
    /// 85d557f 12 min ago; …"), gatebot's own words, as a code span.
    pub order: Option<String>,
    pub by: Option<String>,
    pub via: Option<String>,
    pub reason: Option<String>,
    pub at: Option<Millis>,
    pub expires_at: Option<Millis>,
    pub waiting: bool,
    /// At a gate that needs several people: "1 of 2 approvals: @alice".
    pub approvals: Option<String>,
    /// Opened by break glass.
    pub forced: bool,
    /// A PR gate that a deployment waits for (`[[github.protection]]`).
    pub deployment: bool,
    pub canaries: Vec<CanaryView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EventView {
    pub at: Millis,
    pub canary: String,
    /// With environments: the cluster whose Flagger told it.
    pub cluster: Option<String>,
    pub kind: String,
    pub event_type: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PrView {
    pub subject: String,
    pub gates: Vec<GateView>,
    pub events: Vec<EventView>,
    /// Flagger has waited at one of this PR's gates at least once.
    #[serde(skip)]
    pub ever_waited: bool,
}

impl PrView {
    /// The view with every string from Flagger's side (and a named gate's
    /// title) as a capped code span, as the markdown templates get it: no
    /// mention, link, HTML or marker can come through a canary's words.
    pub fn for_markdown(mut self, evidence: &Evidence) -> Self {
        for g in &mut self.gates {
            g.title = g.title.as_deref().map(|t| code(t, escape::METADATA));
            // A person's words: no mention, link or marker forms in them.
            g.reason = g.reason.as_deref().map(|r| code(r, MAX_REASON));
            // People's names, as chat gave them (a Teams name is free text).
            g.approvals = g.approvals.as_deref().map(|a| code(a, escape::MESSAGE));
            g.by = g.by.as_deref().map(|b| code(b, escape::NAME));
            for c in &mut g.canaries {
                // gatebot's own words and numbers: no text of Flagger's side.
                c.evidence = c
                    .waiting_since
                    .and_then(|_| evidence.line_of(&c.canary_ref));
                c.canary = code(&c.canary, escape::NAME);
                c.phase = code(&c.phase, escape::WORD);
                c.checksum = code(&c.checksum, escape::CHECKSUM);
                c.answer = code(&c.answer, escape::MESSAGE);
                c.progress = c.progress_of.as_ref().map(|p| {
                    p.line(
                        |m| code(m, escape::MESSAGE),
                        |at| format!("at {}", rfc3339(at)),
                    )
                });
            }
        }
        for e in &mut self.events {
            e.canary = code(&e.canary, escape::NAME);
            e.kind = code(&e.kind, escape::WORD);
            e.event_type = code(&e.event_type, escape::WORD);
            e.message = code(&e.message, escape::MESSAGE);
        }
        self
    }
}

/// The marker that finds the status comment again (and tells gatebot's own
/// comments from people's).
pub fn status_marker(repo: &RepoName, number: PrNumber) -> String {
    format!("<!-- gatebot:status {repo}#{number} -->")
}

const EVENTS_SHOWN: usize = 8;

pub async fn view(
    records: &Records,
    repo: &RepoName,
    number: PrNumber,
    now: Millis,
) -> Result<PrView, StoreError> {
    let mut gates = Vec::new();
    let mut ever_waited = false;
    let mut canaries = BTreeSet::new();
    let mut rows = Vec::new();
    for (key, title) in keys_of_pr(records, repo, number).await? {
        let (view, waited) = gate_view(records, &key, title, now, &mut canaries).await?;
        ever_waited |= waited;
        rows.push((key, view));
    }
    for (key, view) in &rows {
        match view {
            Some(view) => gates.push(view.clone()),
            // The path: every cluster of a kind that one of them has used.
            None if key.cluster.is_some()
                && rows.iter().any(|(k, v)| k.kind == key.kind && v.is_some()) =>
            {
                gates.push(GateView::not_started(records, key));
            }
            None => {}
        }
    }
    Ok(PrView {
        subject: format!("{repo}#{number}"),
        gates,
        events: recent_events(records, &canaries).await?,
        ever_waited,
    })
}

/// The PR's gates of every kind, and the named gates that name it (with their titles).
async fn keys_of_pr(
    records: &Records,
    repo: &RepoName,
    number: PrNumber,
) -> Result<Vec<(GateKey, Option<String>)>, StoreError> {
    let envs = records.environments();
    let clusters: Vec<Option<ClusterName>> = match envs.is_empty() {
        true => vec![None],
        false => envs.clusters().cloned().map(Some).collect(),
    };
    let mut keys: Vec<(GateKey, Option<String>)> = GateKind::ROUTABLE
        .into_iter()
        .flat_map(|kind| {
            let scope = Scope::Pr {
                repo: repo.clone(),
                number,
            };
            let key = GateKey::new(kind, scope);
            clusters
                .iter()
                .map(move |c| (key.clone().at(c.clone()), None))
        })
        .collect();
    for named in records.named_gates_of_pr(repo, number).await? {
        keys.push((named.key, named.spec.title));
    }
    Ok(keys)
}

/// One gate as the comment shows it (none when nothing happened at it), and
/// whether anything ever waited there; its canaries are added to `canaries`.
async fn gate_view(
    records: &Records,
    key: &GateKey,
    title: Option<String>,
    now: Millis,
    canaries: &mut BTreeSet<CanaryRef>,
) -> Result<(Option<GateView>, bool), StoreError> {
    let name = match &key.scope {
        Scope::Named(name) => Some(name.to_string()),
        _ => None,
    };
    let gate = records.load_gate(key).await?;
    let observations = records.observations_for(key).await?;
    let waits = records.waits(Some(key), false, 50).await?;
    let waited = !waits.is_empty();
    let open: Vec<_> = waits.iter().filter(|w| w.ended_at.is_none()).collect();
    // A wait no canary made at a PR gate: a deployment's (`[[github.protection]]`).
    let deployment = name.is_none() && open.iter().any(|w| w.canary.is_none());
    if gate.is_none() && observations.is_empty() && name.is_none() && !deployment {
        return Ok((None, waited));
    }
    let open_since: BTreeMap<Option<&CanaryRef>, Millis> = open
        .iter()
        .map(|w| (w.canary.as_ref(), w.started_at))
        .collect();
    let reminded: BTreeMap<Option<&CanaryRef>, i64> = open
        .iter()
        .map(|w| (w.canary.as_ref(), w.reminders_sent))
        .collect();
    let mut view = GateView {
        // A pipeline's gate waits for approval from its announcement on, as
        // does the gate a deployment waits for.
        waiting: open_since.contains_key(&None),
        deployment,
        name,
        title,
        ..GateView::not_started(records, key)
    };
    view.state = "closed";
    view.show_status(gate.as_ref().map(|g| &g.status), now);
    for o in observations {
        let waiting_since = open_since.get(&Some(&o.canary)).copied();
        view.waiting |= waiting_since.is_some();
        if waiting_since.is_some() && view.order.is_none() {
            view.order = crate::core::path::order_line(records, key, &o, now).await?;
        }
        // One row per canary; read only for the canaries that wait.
        let progress_of = match waiting_since {
            Some(_) => records
                .canary_progress(&o.canary)
                .await?
                .filter(|p| p.of_revision(&o.checksum)),
            None => None,
        };
        canaries.insert(o.canary.clone());
        view.canaries.push(CanaryView {
            canary: o.canary.to_string(),
            phase: o.phase.to_string(),
            checksum: o.checksum,
            answer: o.answer.to_string(),
            waiting_since,
            reminders: reminded.get(&Some(&o.canary)).copied().unwrap_or(0),
            progress: None,
            progress_of,
            evidence: None,
            canary_ref: o.canary.clone(),
        });
    }
    Ok((Some(view), waited))
}

impl GateView {
    /// A gate where nothing happened yet (with environments, a cluster the
    /// revision has not reached).
    fn not_started(records: &Records, key: &GateKey) -> Self {
        let kind = key.kind;
        let environment = key
            .cluster
            .as_ref()
            .and_then(|c| records.environments().of_cluster(c))
            .map(|e| e.name.to_string());
        let command = match &environment {
            Some(env) => format!("{} {env}", kind.command()),
            None => kind.command().to_string(),
        };
        GateView {
            kind: kind.as_str(),
            key: key.to_string(),
            waiting: false,
            deployment: false,
            name: None,
            title: None,
            command,
            state: "not started",
            cluster: key.cluster.as_ref().map(ToString::to_string),
            environment,
            order: None,
            by: None,
            via: None,
            reason: None,
            at: None,
            expires_at: None,
            approvals: None,
            forced: false,
            canaries: Vec::new(),
        }
    }

    /// The gate's state, and who changed it last, when and why.
    fn show_status(&mut self, status: Option<&GateStatus>, now: Millis) {
        let change = match status {
            Some(GateStatus::Open(a)) if !a.expired(now) => {
                self.state = "open";
                self.expires_at = a.expires_at;
                self.approvals = crate::gate::quorum::opened_by(a);
                self.forced = a.forced;
                Some(&a.change)
            }
            Some(GateStatus::Open(_)) => {
                self.reason = Some("approval expired".into());
                None
            }
            Some(GateStatus::Held { change }) => {
                self.state = "held";
                Some(change)
            }
            Some(GateStatus::Closed { change }) => change.as_ref(),
            Some(GateStatus::Approving(t)) => {
                self.approvals = Some(t.summary());
                t.votes.last().map(|v| &v.change)
            }
            None => None,
        };
        if let Some(c) = change {
            self.by = Some(c.by.name.clone());
            self.via = Some(c.by.source.to_string());
            self.reason = c.reason.clone();
            self.at = Some(c.at);
        }
    }
}

/// The last events of the PR's canaries, oldest first.
async fn recent_events(
    records: &Records,
    canaries: &BTreeSet<CanaryRef>,
) -> Result<Vec<EventView>, StoreError> {
    let mut events = Vec::new();
    for canary in canaries {
        for e in records
            .events(Some(&canary.to_string()), EVENTS_SHOWN as i64)
            .await?
        {
            events.push(EventView {
                at: e.received_at,
                canary: e.canary.to_string(),
                cluster: e
                    .cluster
                    .filter(|_| !records.environments().is_empty())
                    .map(|c| c.to_string()),
                kind: e.kind,
                event_type: e.event_type,
                message: e.message,
            });
        }
    }
    events.sort_by(|a, b| (a.at, &a.canary).cmp(&(b.at, &b.canary)));
    let skip = events.len().saturating_sub(EVENTS_SHOWN);
    events.drain(..skip);
    Ok(events)
}
