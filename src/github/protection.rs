//! gatebot as a deployment protection rule (`[[github.protection]]`): a
//! workflow run's deployment to a protected environment waits for a PR's
//! gate. The request (`deployment_protection_rule` `requested`) is stored
//! and starts the wait through the core, announced in every channel; when
//! the gate opens, by any channel, an outbox job approves the deployment at
//! GitHub's callback; a Reject (the rollback gate opening) or the wait's
//! deadline rejects it.
//!
//! The callback URL comes from a signed delivery, but it is still data: it is
//! posted to only when it is this repository's callback on the configured
//! GitHub API (GATEBOT_GITHUB_API_URL).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::client::GithubClient;
use super::retry;
use crate::clock::SharedClock;
use crate::core::intake::Opened;
use crate::core::Records;
use crate::gate::freeze::{outside, Freeze, Outside};
use crate::gate::window::Calendar;
use crate::gate::{Actor, AuditAction, Gate, GateKind, Millis, PrNumber, RepoName};
use crate::metrics::Metrics;
use crate::notify::{Lease, Notice, SendError};
use crate::policy::PROTECTION_KINDS;
use crate::store::ProtectionRequest;

/// GitHub's callback path under the API, and the workflow run it names;
/// `Err` says why `url` is not this repository's callback on `api_url`.
pub(crate) fn callback_path(
    api_url: &str,
    url: &str,
    repo: &RepoName,
) -> Result<(String, u64), String> {
    let api = reqwest::Url::parse(api_url.trim_end_matches('/'))
        .map_err(|e| format!("GATEBOT_GITHUB_API_URL is not a URL: {e}"))?;
    let cb = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let same_host = cb.scheme() == api.scheme()
        && cb.host_str().map(str::to_ascii_lowercase)
            == api.host_str().map(str::to_ascii_lowercase)
        && cb.port_or_known_default() == api.port_or_known_default();
    if !same_host || cb.query().is_some() || cb.fragment().is_some() {
        return Err(format!(
            "its host is not the configured GitHub API's ({})",
            api.host_str().unwrap_or("")
        ));
    }
    let prefix = api.path().trim_end_matches('/');
    let rest = cb
        .path()
        .strip_prefix(prefix)
        .ok_or_else(|| format!("it is not under the API's path `{prefix}`"))?;
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    let run = match parts.as_slice() {
        ["repos", owner, name, "actions", "runs", run, "deployment_protection_rule"]
            if format!("{owner}/{name}").eq_ignore_ascii_case(&repo.to_string()) =>
        {
            run.parse::<u64>().ok().filter(|r| *r > 0)
        }
        _ => None,
    };
    let run = run.ok_or_else(|| {
        format!("it is not {repo}'s /repos/{repo}/actions/runs/<run>/deployment_protection_rule")
    })?;
    Ok((rest.to_string(), run))
}

/// How the deployments waiting for some of a PR's gates are decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The gates whose deployments this decides.
    pub kinds: Vec<GateKind>,
    /// `approved` or `rejected`, as GitHub reads it.
    pub state: String,
    /// Who decided and how, as GitHub shows it on the run.
    pub comment: String,
    /// Requests made after this are not decided by it.
    pub at: Millis,
}

/// GitHub's longest review comment is far longer; this keeps a reason short.
const MAX_COMMENT: usize = 1000;

fn bounded(text: String) -> String {
    match text.char_indices().nth(MAX_COMMENT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

fn by(actor: &Actor) -> String {
    format!("{} via {}", actor.name, actor.source)
}

impl Decision {
    pub fn approved(kind: GateKind, actor: &Actor, at: Millis) -> Self {
        Self {
            kinds: vec![kind],
            state: "approved".into(),
            comment: bounded(format!("approved by {}", by(actor))),
            at,
        }
    }

    /// An approval at `kind`'s gate by whoever opened it: the core fills in
    /// who and when ([`Opened`]) as it finds the gate open.
    pub fn approved_when_open(kind: GateKind) -> Self {
        Self {
            kinds: vec![kind],
            state: "approved".into(),
            comment: String::new(),
            at: 0,
        }
    }

    /// The decision with who opened the gate, and when, filled in.
    pub fn opened(self, opened: &Opened) -> Self {
        Self {
            comment: bounded(format!("approved by {}", by(&opened.by))),
            at: opened.at,
            ..self
        }
    }
}

/// The decision a notice means for the deployments waiting at its PR's
/// gates: an opening approves, the rollback gate opening (a Reject) or a
/// wait's deadline rejects.
pub(super) fn decision_of(notice: &Notice) -> Option<(RepoName, PrNumber, Decision)> {
    let (gate, decision) = match notice {
        Notice::GateChanged {
            gate,
            action: AuditAction::Open | AuditAction::Force,
            actor,
            reason,
            at,
            ..
        } => {
            let decision = if PROTECTION_KINDS.contains(&gate.kind) {
                Decision::approved(gate.kind, actor, *at)
            } else if gate.kind == GateKind::Rollback {
                let why = reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                Decision {
                    kinds: PROTECTION_KINDS.to_vec(),
                    state: "rejected".into(),
                    comment: bounded(format!("rejected by {}{why}", by(actor))),
                    at: *at,
                }
            } else {
                return None;
            };
            (gate, decision)
        }
        Notice::WaitEnded {
            gate, outcome, at, ..
        } if outcome == "deadline" && PROTECTION_KINDS.contains(&gate.kind) => (
            gate,
            Decision {
                kinds: vec![gate.kind],
                state: "rejected".into(),
                comment: format!(
                    "rejected: the wait at {gate} passed its deadline without a decision"
                ),
                at: *at,
            },
        ),
        _ => return None,
    };
    let (repo, number) = gate.pr()?;
    Some((repo.clone(), number, decision))
}

/// What an approval goes by besides its gate: the freezes in force and the
/// PR's head as gatebot knows it (the commit its approvals are of).
struct Standing {
    freezes: Vec<Freeze>,
    head: Option<String>,
}

impl Standing {
    /// A deployment of another commit than the head waits for that commit's
    /// push, which closes the gate (`close_on_push`).
    fn of_the_head(&self, r: &ProtectionRequest) -> Result<(), SendError> {
        match &self.head {
            Some(head) if !r.sha.is_empty() && !head.eq_ignore_ascii_case(&r.sha) => {
                Err(SendError::retry(format!(
                    "the deployment of run {} is of {}, but {}#{}'s head is {head}: it waits for the push",
                    r.run_id, r.sha, r.repo, r.number
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Sends the protection jobs of the `github` sink.
pub struct Protections {
    pub client: Arc<GithubClient>,
    pub records: Records,
    pub clock: SharedClock,
    pub metrics: Arc<Metrics>,
    /// GATEBOT_GITHUB_API_URL: the only host callbacks are posted to.
    pub api_url: String,
    /// The policy's release windows, which hold a deployment as they hold a canary.
    pub calendar: Calendar,
}

impl Protections {
    /// Decides each of the PR's deployments waiting at the decision's gates
    /// since before it: one review each at its callback, remembered once sent,
    /// each only while the job's lease holds (`None`: a caller that holds none).
    pub async fn send(
        &self,
        repo: &RepoName,
        number: PrNumber,
        d: &Decision,
        lease: Option<&Lease>,
    ) -> Result<(), SendError> {
        let pending = self
            .records
            .pending_protections(repo, number, d.at)
            .await
            .map_err(retry)?;
        let pending: Vec<_> = pending
            .iter()
            .filter(|r| d.kinds.contains(&r.gate.kind))
            .collect();
        // What an approval goes by besides its gate, read once for the PR's requests.
        let standing = match (d.state.as_str(), pending.is_empty()) {
            ("approved", false) => Some(self.standing(repo, number).await?),
            _ => None,
        };
        for r in pending {
            if let Some(standing) = &standing {
                if !self.may_go(r, standing).await? {
                    continue;
                }
            }
            let state = self.review(repo, r, d, lease).await?;
            let now = self.clock.now_ms();
            self.records
                .decide_protection(r, state, now)
                .await
                .map_err(retry)?;
        }
        Ok(())
    }

    /// Posts one review, unless GitHub says the run no longer waits for the
    /// environment (an earlier attempt, here or on another replica, may have
    /// reached GitHub before its answer was lost); what the request came to.
    async fn review(
        &self,
        repo: &RepoName,
        r: &ProtectionRequest,
        d: &Decision,
        lease: Option<&Lease>,
    ) -> Result<&'static str, SendError> {
        let path = match callback_path(&self.api_url, &r.callback_url, repo) {
            Ok((path, _)) => path,
            Err(why) => {
                self.metrics.dropped(super::SOURCE, "foreign_callback");
                tracing::warn!(%repo, run = r.run_id, "a deployment's callback URL is refused: {why}");
                return Ok("refused");
            }
        };
        if let Some(id) = r.installation {
            self.client.learn_installation(repo, id);
        }
        if !self.still_waits(repo, r).await? {
            tracing::info!(%repo, run = r.run_id, environment = %r.environment,
                "the deployment no longer waits (decided by an earlier attempt or on GitHub): nothing sent");
            return Ok("not_waiting");
        }
        // The read may have taken a while: still ours, right before the call.
        if let Some(lease) = lease {
            lease.hold().await?;
        }
        let body = json!({
            "environment_name": r.environment,
            "state": d.state,
            "comment": d.comment,
        });
        match self.client.review_protection(repo, &path, body).await {
            Ok(()) if d.state == "approved" => Ok("approved"),
            Ok(()) => Ok("rejected"),
            Err(e) => match e.to_send_error() {
                SendError::Permanent(why) => {
                    // Decided elsewhere, or the run is gone: nothing to retry.
                    tracing::warn!(%repo, run = r.run_id, "GitHub refused the deployment's review: {why}");
                    Ok("failed")
                }
                again => Err(again),
            },
        }
    }
}

impl Protections {
    /// The freezes in force and the PR's head as gatebot knows it.
    async fn standing(&self, repo: &RepoName, number: PrNumber) -> Result<Standing, SendError> {
        let now = self.clock.now_ms();
        Ok(Standing {
            freezes: self.records.active_freezes(now).await.map_err(retry)?,
            head: self.records.pr_head(repo, number).await.map_err(retry)?,
        })
    }

    /// Whether the request's gate lets it go now, read again right before
    /// the approval: false when the gate closed or was held since (a later
    /// opening approves it); a freeze, a closed release window or a commit
    /// pushed since (whose push has not arrived) is tried again later.
    async fn may_go(&self, r: &ProtectionRequest, standing: &Standing) -> Result<bool, SendError> {
        let now = self.clock.now_ms();
        let gate = self.records.load_gate(&r.gate).await.map_err(retry)?;
        let gate = gate.unwrap_or_else(|| Gate::closed(r.gate.clone()));
        let window = self.calendar.state(r.gate.kind, now);
        match outside(&gate, &standing.freezes, window, now) {
            Outside::Go(_) => standing.of_the_head(r).map(|()| true),
            Outside::Closed => {
                tracing::info!(run = r.run_id, gate = %r.gate, "the gate closed before its deployment was approved: it waits");
                Ok(false)
            }
            Outside::Held { why, until } => Err(SendError::Retry {
                after: until.map(|t| Duration::from_millis(t.saturating_sub(now).max(0) as u64)),
                message: format!("{} waits: {why}", r.gate),
            }),
        }
    }

    /// Whether GitHub still lists the request's environment among the run's
    /// pending deployments. A run GitHub no longer knows waits for nothing; a
    /// read GitHub refuses (an App without Actions: read) cannot tell, and the
    /// review is sent as before.
    async fn still_waits(&self, repo: &RepoName, r: &ProtectionRequest) -> Result<bool, SendError> {
        match self.client.pending_deployments(repo, r.run_id).await {
            Ok(envs) => Ok(envs.iter().any(|e| e.eq_ignore_ascii_case(&r.environment))),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => match e.to_send_error() {
                SendError::Permanent(why) => {
                    tracing::warn!(%repo, run = r.run_id, "cannot ask GitHub whether the deployment still waits (does the App have Actions: read?): {why}");
                    Ok(true)
                }
                again => Err(again),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_repositorys_callback_on_the_api_host_is_posted_to() {
        let repo: RepoName = "acme/shop".parse().unwrap();
        let ok =
            "https://api.github.com/repos/acme/shop/actions/runs/42/deployment_protection_rule";
        assert_eq!(
            callback_path("https://api.github.com", ok, &repo),
            Ok((
                "/repos/acme/shop/actions/runs/42/deployment_protection_rule".into(),
                42
            ))
        );
        let ghes =
            "https://ghe.example/api/v3/repos/acme/shop/actions/runs/7/deployment_protection_rule";
        assert_eq!(
            callback_path("https://ghe.example/api/v3/", ghes, &repo).map(|(_, r)| r),
            Ok(7)
        );
        for bad in [
            "https://evil.example/repos/acme/shop/actions/runs/42/deployment_protection_rule",
            "http://api.github.com/repos/acme/shop/actions/runs/42/deployment_protection_rule",
            "https://api.github.com:8443/repos/acme/shop/actions/runs/42/deployment_protection_rule",
            "https://api.github.com/repos/acme/other/actions/runs/42/deployment_protection_rule",
            "https://api.github.com/repos/acme/shop/actions/runs/42/deployment_protection_rule?x=1",
            "https://api.github.com/repos/acme/shop/actions/runs/x/deployment_protection_rule",
            "https://api.github.com/repos/acme/shop/pulls/42",
            "not a url",
        ] {
            assert!(callback_path("https://api.github.com", bad, &repo).is_err(), "{bad}");
        }
    }
}
