//! Pull request events: new commits pushed, or the PR closed without merging,
//! close the PR's gates (which kinds: GATEBOT_GITHUB_CLOSE_ON_PUSH).

use super::events::PullRequestEvent;
use super::inbox::GithubInbox;
use super::pushes;
use crate::core::commands;
use crate::core::Provenance;
use crate::gate::{Actor, DeliveryId, GateKind, Source};
use crate::notify::SendError;

fn retry(e: impl std::fmt::Display) -> SendError {
    SendError::retry(e.to_string())
}

impl GithubInbox {
    pub(super) async fn pull_request(
        &self,
        delivery: &DeliveryId,
        payload: &str,
    ) -> Result<(), SendError> {
        let e: PullRequestEvent = serde_json::from_str(payload)
            .map_err(|err| SendError::Permanent(format!("unreadable delivery: {err}")))?;
        let Some((repo, number)) = e.pr() else {
            return Ok(());
        };
        if !self.allowed(&repo) {
            return Ok(());
        }
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        self.remember_author(&repo, number, &e.pull_request.user.login)
            .await?;
        let (kinds, reason) = match e.action.as_str() {
            "synchronize" => {
                if let Some(at) = e.updated_at() {
                    pushes::remember(
                        &self.state.store,
                        &repo,
                        number,
                        at,
                        self.state.engine.now(),
                    )
                    .await
                    .map_err(retry)?;
                }
                let sha = e
                    .after
                    .as_deref()
                    .unwrap_or("")
                    .chars()
                    .take(7)
                    .collect::<String>();
                (
                    self.state.config.close_on_push().to_vec(),
                    if sha.is_empty() {
                        "new commits pushed".to_string()
                    } else {
                        format!("new commits pushed ({sha})")
                    },
                )
            }
            "closed" if e.pull_request.merged != Some(true) => (
                GateKind::ROUTABLE.to_vec(),
                "pull request closed without merging".to_string(),
            ),
            _ => return Ok(()),
        };
        let login = if e.sender.login.is_empty() {
            "github".to_string()
        } else {
            e.sender.login.clone()
        };
        let who = Provenance::new(Actor::new(login, Source::Github))
            .reason(Some(reason))
            .delivery(delivery.clone());
        commands::close_pr_gates(&self.state.engine, &repo, number, &kinds, &who)
            .await
            .map_err(retry)?;
        Ok(())
    }
}
