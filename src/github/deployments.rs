//! GitHub Deployments ([github] deployments): one per canary revision
//! tied to a pull request, on the PR's head commit, for the environment the
//! policy names (`[[github.environments]]`), with statuses that follow
//! Flagger's phases:
//! `queued` while waiting to start, `in_progress` while progressing or
//! waiting for promotion, `success` when promoted, `failure` when rolled
//! back, `inactive` for a revision a newer one superseded.
//!
//! A gate check is unauthenticated, and a deployment may start a workflow
//! (`on: deployment`): so the environment comes from the policy only (a
//! canary no table names gets none), a revision counts only once it is known
//! to be real (a person's approval at one of the PR's gates was used by that
//! revision, or a Flagger token vouched for a wait of it), and a PR's
//! deployments name at most [`MAX_CANARIES`] canaries. A made-up checksum of
//! a real canary is neither deployed nor supersedes the real revision.
//!
//! Sending: one outbox job per PR, deduplicated and in the PR's lane, that
//! reads the revisions at send time and posts only what changed, so a status
//! never overtakes the deployment it is about.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::client::GithubClient;
use super::retry;
use crate::clock::SharedClock;
use crate::core::Records;
use crate::gate::{GateKey, GateKind, GateStatus, Phase, PrNumber, RepoName, Scope};
use crate::metrics::Metrics;
use crate::notify::SendError;
use crate::policy::Policy;
use crate::store::{DeploymentRow, ObservationRow, Reserved, StoreError};

/// The most canaries whose revisions get deployments on one PR; a canary
/// past it gets none (logged and counted once).
pub const MAX_CANARIES: usize = 8;

/// Canaries whose refusal was logged, kept so each is logged once; cleared when full.
const TOLD: usize = 10_000;

/// The gates whose waits tie a canary's revisions to a pull request.
const KINDS: [GateKind; 4] = [
    GateKind::Start,
    GateKind::Promote,
    GateKind::Traffic,
    GateKind::Rollback,
];

/// One canary revision as its deployment should show it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Revision {
    canary: String,
    /// None: no `[[github.environments]]` table names the canary.
    environment: Option<String>,
    checksum: String,
    state: &'static str,
}

/// The PR's gate of `kind` (of every cluster).
fn pr_gate(kind: GateKind, repo: &RepoName, number: PrNumber) -> GateKey {
    GateKey::new(
        kind,
        Scope::Pr {
            repo: repo.clone(),
            number,
        },
    )
}

/// States after which a deployment's status no longer changes.
fn ended(state: &str) -> bool {
    matches!(state, "success" | "failure" | "inactive")
}

/// Sends the deployment jobs of the `github` sink.
pub struct Deployments {
    pub client: Arc<GithubClient>,
    pub records: Records,
    pub clock: SharedClock,
    /// GATEBOT_PUBLIC_URL: statuses link to the gate's page.
    pub public_url: Option<String>,
    /// Names each canary's environment (`[[github.environments]]`).
    pub policy: Policy,
    /// `gatebot_notifications_dropped_total{sink="github",reason="deployment_…"}`.
    pub metrics: Arc<Metrics>,
    /// The refusals logged already (repository, PR, canary, why).
    pub told: Mutex<HashSet<String>>,
}

/// The most a deployment status's description may hold (GitHub refuses more).
const DESCRIPTION_MAX: usize = 140;

impl Deployments {
    /// Creates each current revision's deployment and posts the statuses
    /// that changed since the last send.
    pub async fn send(&self, repo: &RepoName, number: PrNumber) -> Result<(), SendError> {
        let mut known = self
            .records
            .deployments_of(repo, number)
            .await
            .map_err(retry)?;
        let revisions = self.revisions(repo, number, &known).await.map_err(retry)?;
        for rev in &revisions {
            let Some(environment) = rev.environment.as_deref() else {
                self.tell(repo, number, rev, "deployment_no_environment");
                continue;
            };
            let superseded: Vec<DeploymentRow> = known
                .iter()
                .filter(|k| k.canary == rev.canary && k.checksum != rev.checksum)
                .filter(|k| !ended(&k.state) && !k.reserved())
                .cloned()
                .collect();
            for old in superseded {
                let gate = self.gate_of(repo, number);
                self.post(repo, number, old, "inactive", environment, gate)
                    .await?;
            }
            let same = known
                .iter()
                .find(|k| k.canary == rev.canary && k.checksum == rev.checksum)
                .cloned();
            let row = match same {
                Some(k) if k.reserved() => self.create(repo, number, rev, environment).await?,
                Some(k) if k.state == rev.state => continue,
                Some(k) => k,
                None if self.may_create(repo, number, rev).await? => {
                    self.create(repo, number, rev, environment).await?
                }
                None => continue,
            };
            let gate = self.gate_of(repo, number);
            self.post(repo, number, row, rev.state, environment, gate)
                .await?;
            known = self
                .records
                .deployments_of(repo, number)
                .await
                .map_err(retry)?;
        }
        Ok(())
    }

    /// Whether (real) revision `rev` may get a deployment: the PR's
    /// deployments have room for its canary (its row is reserved then).
    async fn may_create(
        &self,
        repo: &RepoName,
        number: PrNumber,
        rev: &Revision,
    ) -> Result<bool, SendError> {
        let reserved = self
            .records
            .reserve_deployment(
                repo,
                number,
                &rev.canary,
                &rev.checksum,
                MAX_CANARIES,
                self.clock.now_ms(),
            )
            .await
            .map_err(retry)?;
        if reserved == Reserved::Full {
            self.tell(repo, number, rev, "deployment_limit");
            return Ok(false);
        }
        Ok(true)
    }

    /// Logs and counts, once per canary, why its revision gets no deployment.
    fn tell(&self, repo: &RepoName, number: PrNumber, rev: &Revision, why: &'static str) {
        let (canary, checksum) = (&rev.canary, &rev.checksum);
        // Once per canary: a job may read an older revision's observation.
        let id = format!("{repo}#{number} {canary} {why}");
        {
            let mut told = self.told.lock().expect("told poisoned");
            if told.len() >= TOLD {
                told.clear();
            }
            if !told.insert(id) {
                return;
            }
        }
        self.metrics.dropped(super::SINK, why);
        match why {
            "deployment_limit" => {
                tracing::warn!(%repo, pr = %number, %canary, ?checksum, max = MAX_CANARIES, "no deployment for this revision: the pull request's deployments name the most canaries gatebot makes deployments for")
            }
            _ => {
                tracing::warn!(%repo, pr = %number, %canary, ?checksum, "no deployment for this revision: no [[github.environments]] table names its canary or namespace")
            }
        }
    }

    /// The promote gate's page, when GATEBOT_PUBLIC_URL is set.
    /// "promoted; approved by alice via slack: <why>", as the promote gate's
    /// approval says, within GitHub's 140 characters for a description.
    async fn promoted_by(&self, repo: &RepoName, number: PrNumber) -> Result<String, SendError> {
        let key = pr_gate(GateKind::Promote, repo, number);
        let gate = self.records.load_gate(&key).await.map_err(retry)?;
        let Some(GateStatus::Open(a)) = gate.map(|g| g.status) else {
            return Ok("promoted".to_string());
        };
        let mut text = format!(
            "promoted; approved by {} via {}",
            a.change.by.name, a.change.by.source
        );
        if let Some(why) = a.change.reason.as_deref() {
            text = format!("{text}: {why}");
        }
        if text.chars().count() > DESCRIPTION_MAX {
            text = text.chars().take(DESCRIPTION_MAX - 1).collect::<String>() + "…";
        }
        Ok(text)
    }

    fn gate_of(&self, repo: &RepoName, number: PrNumber) -> Option<String> {
        let base = self.public_url.as_deref()?.trim_end_matches('/');
        let key = pr_gate(GateKind::Promote, repo, number);
        Some(format!("{base}/ui{key}"))
    }

    async fn create(
        &self,
        repo: &RepoName,
        number: PrNumber,
        rev: &Revision,
        environment: &str,
    ) -> Result<DeploymentRow, SendError> {
        let head = super::pushes::head(&self.records, &self.client, repo, number).await?;
        let payload = json!({"canary": rev.canary, "checksum": rev.checksum});
        // A creation whose answer was lost (a timeout, a crash before the id
        // was stored) made the deployment already: found by its payload.
        let listed = self
            .client
            .deployments_of(repo, &head, environment)
            .await
            .map_err(|e| e.to_send_error())?;
        if let Some((id, _)) = listed.into_iter().find(|(_, p)| *p == payload) {
            return self.keep(repo, number, rev, id).await;
        }
        let body = json!({
            "ref": head,
            "environment": environment,
            "auto_merge": false,
            "required_contexts": [],
            "description": format!("canary {} at revision {}", rev.canary, rev.checksum),
            "payload": payload,
        });
        let id = self
            .client
            .create_deployment(repo, body)
            .await
            .map_err(|e| e.to_send_error())?;
        self.keep(repo, number, rev, id).await
    }

    /// Stores revision `rev`'s deployment `id`, with no status posted yet.
    async fn keep(
        &self,
        repo: &RepoName,
        number: PrNumber,
        rev: &Revision,
        id: u64,
    ) -> Result<DeploymentRow, SendError> {
        let row = DeploymentRow {
            canary: rev.canary.clone(),
            checksum: rev.checksum.clone(),
            deployment_id: id,
            state: String::new(),
        };
        // Stored at once: a retry posts the status on this one, not a second deployment.
        self.records
            .put_deployment(repo, number, &row, self.clock.now_ms())
            .await
            .map_err(retry)?;
        Ok(row)
    }

    async fn post(
        &self,
        repo: &RepoName,
        number: PrNumber,
        row: DeploymentRow,
        state: &'static str,
        environment: &str,
        log_url: Option<String>,
    ) -> Result<(), SendError> {
        let description = match state {
            "queued" => "waiting to start".to_string(),
            "in_progress" => "progressing, or waiting for promotion".to_string(),
            "success" => self.promoted_by(repo, number).await?,
            "failure" => "rolled back".to_string(),
            _ => "superseded by a newer revision".to_string(),
        };
        let mut body = json!({
            "state": state,
            "environment": environment,
            "description": description,
            "auto_inactive": false,
        });
        if let Some(url) = log_url {
            body["log_url"] = json!(url);
        }
        self.client
            .create_deployment_status(repo, row.deployment_id, body)
            .await
            .map_err(|e| e.to_send_error())?;
        let sent = DeploymentRow {
            state: state.to_string(),
            ..row
        };
        self.records
            .put_deployment(repo, number, &sent, self.clock.now_ms())
            .await
            .map_err(retry)
    }

    /// Each canary's latest real revision seen at the PR's gates, and its
    /// state. Real: one with a deployment already (`known`), or one
    /// `Records::revision_real` vouches for; a made-up checksum is skipped,
    /// so it neither gets a deployment nor supersedes the real one.
    async fn revisions(
        &self,
        repo: &RepoName,
        number: PrNumber,
        known: &[DeploymentRow],
    ) -> Result<Vec<Revision>, StoreError> {
        let gates: Vec<GateKey> = KINDS.iter().map(|k| pr_gate(*k, repo, number)).collect();
        let mut seen: BTreeMap<String, Vec<ObservationRow>> = BTreeMap::new();
        for gate in &gates {
            for o in self.records.observations_for(gate).await? {
                seen.entry(o.canary.to_string()).or_default().push(o);
            }
        }
        let mut out = Vec::new();
        for (canary, mut observed) in seen {
            observed.sort_by_key(|o| std::cmp::Reverse(o.last_seen));
            for o in observed {
                let deployed = known
                    .iter()
                    .any(|k| k.canary == canary && k.checksum == o.checksum);
                if deployed
                    || self
                        .records
                        .revision_real(&gates, &canary, &o.checksum)
                        .await?
                {
                    out.push(self.revision(canary, o).await?);
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Observation `o`'s revision, in the state Flagger's events and phases give it.
    async fn revision(&self, canary: String, o: ObservationRow) -> Result<Revision, StoreError> {
        let state = match self.ended(&canary, &o.checksum).await? {
            Some(end) => end,
            None if o.gate.kind == GateKind::Start && !o.phase.progressing() => "queued",
            None if o.phase == Phase::Failed => "failure",
            None => "in_progress",
        };
        Ok(Revision {
            environment: self.policy.environment_of(&o.canary),
            canary,
            checksum: o.checksum,
            state,
        })
    }

    /// How Flagger's events say the revision ended, if they do.
    async fn ended(
        &self,
        canary: &str,
        checksum: &str,
    ) -> Result<Option<&'static str>, StoreError> {
        let mut end = None;
        for e in self.records.events(Some(canary), 20).await? {
            let this = match e.kind.as_str() {
                "promotion_completed" => "success",
                "canary_failed" | "rolling_back" => "failure",
                _ => continue,
            };
            if e.checksum == checksum && end.is_none_or(|(at, _)| e.received_at > at) {
                end = Some((e.received_at, this));
            }
        }
        Ok(end.map(|(_, this)| this))
    }
}
