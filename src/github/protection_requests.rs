//! The intake of `deployment_protection_rule` (`requested`): the request is
//! stored and the wait at its gate started through the core, in one unit.
//! What is sent back when the gate is decided is in `protection`.

use std::collections::BTreeMap;

use super::events::DeploymentProtectionRuleEvent;
use super::inbox::{finish, GithubInbox};
use super::protection::{callback_path, Decision};
use super::retry;
use super::sink::GithubJob;
use crate::core::awaited::Awaited;
use crate::gate::{GateKey, Scope};
use crate::notify::{Lease, SendError, Settled};
use crate::store::{ProtectionRequest, QueueItem};

impl GithubInbox {
    /// A deployment waiting for gatebot: stored, and its wait started through
    /// the core in the same unit; approved at once when the gate is open.
    pub(super) async fn protection_request(
        &self,
        item: &QueueItem,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let e: DeploymentProtectionRuleEvent = serde_json::from_str(&item.payload)
            .map_err(|err| SendError::Permanent(format!("unreadable delivery: {err}")))?;
        let Some((repo, number)) = e.pr() else {
            return Ok(Settled::NotYet);
        };
        let kind = self.state.policy.protection_gate(&e.environment);
        let api = &self.state.config.github.api_url;
        let callback = callback_path(api, &e.deployment_callback_url, &repo);
        let (Some(kind), Ok((_, run_id)), true) = (kind, callback, self.allowed(&repo)) else {
            // Answered at receipt; the policy may have changed since.
            return Ok(Settled::NotYet);
        };
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        let key = GateKey::new(
            kind,
            Scope::Pr {
                repo: repo.clone(),
                number,
            },
        );
        let mut unit = self.state.engine.begin().await.map_err(retry)?;
        let request = ProtectionRequest {
            repo: repo.clone(),
            run_id,
            environment: e.environment.trim().to_string(),
            number,
            gate: key.clone(),
            callback_url: e.deployment_callback_url.clone(),
            installation: e.installation.as_ref().map(|i| i.id),
            requested_at: unit.now(),
        };
        if !unit.put_protection_request(&request).await.map_err(retry)? {
            return finish(unit, item, lease).await;
        }
        let reason = format!(
            "the deployment of workflow run {run_id} to {} waits for {key}",
            request.environment
        );
        let awaited = unit
            .await_gate(&key, reason, metadata(&request))
            .await
            .map_err(super::send_error)?;
        if let Awaited::Open(change) = awaited {
            let decision = Decision::approved(kind, &change.by, unit.now());
            let job = GithubJob::protection(&repo, number, decision)?;
            unit.enqueue(&[job]).await.map_err(retry)?;
        }
        finish(unit, item, lease).await
    }
}

/// What the announcement carries to the sinks: its title and the PR.
fn metadata(r: &ProtectionRequest) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "title".to_string(),
            format!(
                "Deployment to {} (workflow run {})",
                r.environment, r.run_id
            ),
        ),
        ("environment".to_string(), r.environment.clone()),
        ("pr".to_string(), r.number.to_string()),
        ("repository".to_string(), r.repo.to_string()),
    ])
}
