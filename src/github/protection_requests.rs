//! The intake of `deployment_protection_rule` (`requested`): the request is
//! stored and the wait at its gate started through the core, in one unit.
//! What is sent back when the gate is decided is in `protection`.

use std::collections::BTreeMap;

use super::events::DeploymentProtectionRuleEvent;
use super::inbox::GithubInbox;
use super::protection::{callback_path, Decision};
use super::sink::GithubJob;
use crate::core::intake;
use crate::gate::environment::valid_commit;
use crate::gate::{GateKey, Scope};
use crate::notify::{Lease, SendError, Settled};
use crate::store::ProtectionRequest;

impl GithubInbox {
    /// A deployment waiting for gatebot: stored, and its wait started through
    /// the core in the same unit; approved at once when the gate is open.
    pub(super) async fn protection_request(
        &self,
        e: &DeploymentProtectionRuleEvent,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
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
        let request = ProtectionRequest {
            repo: repo.clone(),
            run_id,
            environment: e.environment.trim().to_string(),
            number,
            gate: key.clone(),
            callback_url: e.deployment_callback_url.clone(),
            installation: e.installation.as_ref().map(|i| i.id),
            // Set by the core, in the unit that keeps it.
            requested_at: 0,
            sha: Some(e.deployment.sha.to_ascii_lowercase())
                .filter(|sha| valid_commit(sha))
                .unwrap_or_default(),
        };
        let reason = format!(
            "the deployment of workflow run {run_id} to {} waits for {key}",
            request.environment
        );
        let metadata = metadata(&request);
        // Approved at once if the gate is open: who opened it is the core's
        // to fill in (`Opened`), in the unit that finds it open.
        let if_open = GithubJob::protection(&repo, number, Decision::approved_when_open(kind))?;
        let engine = &self.state.engine;
        intake::protection_request(engine, request, reason, metadata, Some(lease), if_open).await?;
        Ok(Settled::Done)
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
