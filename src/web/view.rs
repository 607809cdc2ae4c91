//! What the templates are given: who is looking, times as people read them,
//! and a gate or a wait as one row of a page.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use serde::Serialize;

use super::permit::{approve_command, may_act, reject_target};
use super::session::{self, Session};
use super::{Problem, Web};
use crate::command::Verb;
use crate::config::UiMode;
use crate::core::AppState;
use crate::core::WaitRow;
use crate::gate::{Answer, Gate, GateKey, GateKind, GateStatus, Millis, RepoName, Scope};

/// The pages' shared state and who is asking, for every handler.
pub struct Viewer {
    pub web: Arc<Web>,
    pub session: Option<Session>,
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let web =
            parts.extensions.get::<Arc<Web>>().cloned().ok_or_else(|| {
                Problem::unavailable("the web pages are not set up on this route")
            })?;
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let session = session::who(
            &web,
            &state.policy,
            &parts.headers,
            peer,
            state.clock.now_ms(),
        );
        let session = match session {
            Some(s) if signed_out(state, &s).await? => None,
            other => other,
        };
        Ok(Self { web, session })
    }
}

/// Whether the session was signed out, on any replica. When the store cannot
/// say, nobody is taken for signed in.
async fn signed_out(state: &AppState, session: &Session) -> Result<bool, Problem> {
    let Some(id) = &session.id else {
        return Ok(false);
    };
    state.records.session_revoked(id).await.map_err(|e| {
        tracing::warn!(error = %e, "cannot check whether a session was signed out");
        Problem::unavailable("gatebot cannot check your sign-in right now: reload in a moment")
    })
}

/// What every page's frame shows.
#[derive(Serialize)]
pub struct Base<'a> {
    pub me: Option<&'a Session>,
    /// Whether this server takes actions at all (`GATEBOT_UI=on`).
    pub actions: bool,
    /// The page's own address, for the forms that come back to it.
    pub here: String,
}

impl Viewer {
    pub fn base(&self, here: impl Into<String>) -> Base<'_> {
        Base {
            me: self.session.as_ref(),
            actions: self.web.mode == UiMode::On,
            here: here.into(),
        }
    }
}

/// A time: machine-readable, in UTC for the tooltip, and how long ago.
#[derive(Debug, Clone, Serialize)]
pub struct When {
    pub iso: String,
    pub utc: String,
    pub ago: String,
}

pub fn when(ms: Millis, now: Millis) -> When {
    let utc = jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| ms.to_string());
    When {
        iso: crate::gate::state::rfc3339(ms),
        utc,
        ago: ago(now.saturating_sub(ms)),
    }
}

/// "3m", "2h 5m", "4d 1h": the two largest units.
pub fn ago(ms: Millis) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

/// A gate's state in words.
#[derive(Debug, Clone, Serialize)]
pub struct StateView {
    pub name: &'static str,
    /// "@alice via web"
    pub by: Option<String>,
    pub at: Option<When>,
    pub reason: Option<String>,
    pub expires: Option<When>,
    /// canary → pinned revision.
    pub pins: Vec<(String, String)>,
}

pub fn state_view(gate: &Gate, now: Millis) -> StateView {
    let (name, change, expires, pins) = match &gate.status {
        GateStatus::Open(a) => (
            "open",
            Some(&a.change),
            a.expires_at,
            a.pins.iter().map(|(c, r)| (c.clone(), r.clone())).collect(),
        ),
        GateStatus::Held { change } => ("held", Some(change), None, Vec::new()),
        GateStatus::Closed { change } => ("closed", change.as_ref(), None, Vec::new()),
        GateStatus::Approving(t) => (
            "approving",
            t.votes.last().map(|v| &v.change),
            None,
            Vec::new(),
        ),
    };
    // A gate that needs several people says how many approved.
    let counted = match &gate.status {
        GateStatus::Approving(t) => Some(t.summary()),
        GateStatus::Open(a) => crate::gate::quorum::opened_by(a),
        _ => None,
    };
    StateView {
        name,
        by: change.map(|c| format!("@{} via {}", c.by.name, c.by.source.as_str())),
        at: change.map(|c| when(c.at, now)),
        reason: counted.or_else(|| change.and_then(|c| c.reason.clone())),
        expires: expires.map(|t| when(t, now)),
        pins,
    }
}

/// A pull request as the pages link it.
#[derive(Debug, Clone, Serialize)]
pub struct PrView {
    pub repo: String,
    pub number: u64,
    pub url: String,
    pub author: Option<String>,
}

/// Which buttons a row gets (only those the viewer may press).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Buttons {
    pub approve: bool,
    pub reject: bool,
    pub hold: bool,
    pub release: bool,
}

/// Remembers, for one page, what the viewer may do per command and scope.
pub struct Permits<'a> {
    state: &'a AppState,
    viewer: &'a Viewer,
    memo: HashMap<(Verb, String), bool>,
}

impl<'a> Permits<'a> {
    pub fn new(state: &'a AppState, viewer: &'a Viewer) -> Self {
        Self {
            state,
            viewer,
            memo: HashMap::new(),
        }
    }

    async fn may(&mut self, command: Verb, key: &GateKey) -> bool {
        let memo_key = (command, key.to_string());
        if let Some(&yes) = self.memo.get(&memo_key) {
            return yes;
        }
        let yes = may_act(
            self.state,
            &self.viewer.web,
            self.viewer.session.as_ref(),
            command,
            key,
        )
        .await;
        self.memo.insert(memo_key, yes);
        yes
    }

    /// The state and buttons of `gate` beside `wait`, a canary waiting at a
    /// revision: what Flagger is answered for that revision. A gate open for
    /// another revision (or held back by a freeze, a window, or the
    /// environments' order) is closed for this one: shown closed, with the
    /// reason Flagger gets, and with Approve for a viewer who may.
    pub async fn beside(
        &mut self,
        gate: &Gate,
        wait: Option<&WaitRow>,
        now: Millis,
    ) -> Result<(StateView, Buttons), Problem> {
        let mut shown = state_view(gate, now);
        let mut buttons = self.buttons(gate).await;
        let Some(wait) = wait.filter(|_| shown.name == "open") else {
            return Ok((shown, buttons));
        };
        let verdict = self.state.engine.checks().answer_for_wait(wait).await?;
        if verdict.answer == Answer::Closed {
            shown = StateView {
                name: "closed",
                by: None,
                at: None,
                reason: Some(verdict.reason),
                expires: None,
                pins: shown.pins,
            };
            buttons.approve =
                self.acts() && self.may(approve_command(gate.key.kind), &gate.key).await;
        }
        Ok((shown, buttons))
    }

    /// Whether the viewer is signed in where the pages take actions.
    fn acts(&self) -> bool {
        self.viewer.session.is_some() && self.viewer.web.mode == UiMode::On
    }

    /// The buttons for `gate` in its state.
    pub async fn buttons(&mut self, gate: &Gate) -> Buttons {
        if !self.acts() {
            return Buttons::default();
        }
        let key = &gate.key;
        let (open, held) = match &gate.status {
            GateStatus::Open(_) => (true, false),
            GateStatus::Held { .. } => (false, true),
            GateStatus::Closed { .. } | GateStatus::Approving(_) => (false, false),
        };
        let holdable = matches!(
            key.kind,
            GateKind::Start | GateKind::Promote | GateKind::Traffic
        );
        let mut b = Buttons::default();
        if !open && !held {
            b.approve = self.may(approve_command(key.kind), key).await;
        }
        if let Some(rollback) = reject_target(key) {
            b.reject = !held && self.may(Verb::Rollback, &rollback).await;
        }
        if holdable {
            if held {
                b.release = self.may(Verb::Unhold, key).await;
            } else {
                b.hold = self.may(Verb::Hold, key).await;
            }
        }
        b
    }
}

/// One open wait on the waiting page.
#[derive(Debug, Clone, Serialize)]
pub struct WaitingRow {
    pub wait_id: i64,
    pub gate: String,
    pub gate_url: String,
    pub kind: &'static str,
    pub subject: String,
    /// The cluster whose gate it is, with environments.
    pub cluster: Option<String>,
    pub canary: Option<String>,
    pub revision: String,
    pub phase: String,
    pub since: When,
    pub title: Option<String>,
    pub pr: Option<PrView>,
    pub state: StateView,
    pub buttons: Buttons,
}

/// The PR a gate belongs to: by its key, else the canary's `pr` and
/// `repository` metadata.
fn pr_of(key: &GateKey, metadata: &serde_json::Value) -> Option<(RepoName, u64)> {
    if let Some((repo, n)) = key.pr() {
        return Some((repo.clone(), n.0));
    }
    let text = |k: &str| metadata.get(k).and_then(|v| v.as_str()).map(str::trim);
    let repo: RepoName = text("repository")?.parse().ok()?;
    let number: u64 = text("pr")?.trim_start_matches('#').parse().ok()?;
    Some((repo, number))
}

pub async fn pr_view(state: &AppState, repo: &RepoName, number: u64) -> Result<PrView, Problem> {
    let author = state
        .records
        .pr_author(repo, crate::gate::PrNumber(number))
        .await?;
    Ok(PrView {
        repo: repo.to_string(),
        number,
        url: format!("/ui/prs/{repo}/{number}"),
        author,
    })
}

/// A gate's title: a named gate's, else the canary's `title` metadata.
pub async fn title_of(
    state: &AppState,
    key: &GateKey,
    metadata: &serde_json::Value,
) -> Result<Option<String>, Problem> {
    if matches!(key.scope, Scope::Named(_)) {
        if let Some(named) = state.engine.named().find(key).await? {
            if named.spec.title.is_some() {
                return Ok(named.spec.title);
            }
        }
    }
    Ok(metadata
        .get("title")
        .and_then(|v| v.as_str())
        .map(str::to_string))
}

pub async fn waiting_row(
    state: &AppState,
    wait: &WaitRow,
    now: Millis,
    permits: &mut Permits<'_>,
) -> Result<WaitingRow, Problem> {
    let gate = state.engine.gate(&wait.gate).await?;
    let (state_shown, buttons) = permits.beside(&gate, Some(wait), now).await?;
    let pr = match pr_of(&wait.gate, &wait.metadata) {
        Some((repo, n)) => Some(pr_view(state, &repo, n).await?),
        None => None,
    };
    Ok(WaitingRow {
        wait_id: wait.id,
        gate: wait.gate.to_string(),
        gate_url: super::gate_path(&wait.gate),
        kind: wait.gate.kind.as_str(),
        subject: wait.gate.subject(),
        cluster: wait
            .gate
            .cluster
            .as_ref()
            .or(wait.cluster.as_ref())
            .map(ToString::to_string),
        canary: wait.canary.as_ref().map(ToString::to_string),
        revision: wait.checksum.clone(),
        phase: wait.phase.to_string(),
        since: when(wait.started_at, now),
        title: title_of(state, &wait.gate, &wait.metadata).await?,
        pr,
        state: state_shown,
        buttons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_two_units() {
        assert_eq!(ago(42_000), "42s");
        assert_eq!(ago(3 * 60_000), "3m");
        assert_eq!(ago(2 * 3_600_000 + 5 * 60_000), "2h 5m");
        assert_eq!(ago(4 * 86_400_000 + 3_600_000), "4d 1h");
        assert_eq!(ago(-5), "0s");
    }
}
