//! Pull request events: new commits pushed, or the PR closed without merging,
//! close the PR's gates (which kinds: [github] close_on_push).

use super::checks::KINDS;
use super::events::PullRequestEvent;
use super::inbox::GithubInbox;
use super::pushes;
use super::retry;
use super::sink::GithubJob;
use crate::core::commands;
use crate::core::Provenance;
use crate::gate::{Actor, DeliveryId, GateKind, PrNumber, RepoName, Source};
use crate::notify::SendError;

impl GithubInbox {
    pub(super) async fn pull_request(
        &self,
        delivery: &DeliveryId,
        e: &PullRequestEvent,
    ) -> Result<(), SendError> {
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
                self.moved_head(e, &repo, number).await?;
                if let Some(at) = e.updated_at() {
                    pushes::remember(
                        &self.state.records,
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
            .map_err(super::send_error)?;
        Ok(())
    }
}

impl GithubInbox {
    /// Records the new head commit, and has each of the PR's check runs
    /// follow it (the old one superseded, a new one while the gate waits).
    async fn moved_head(
        &self,
        e: &PullRequestEvent,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<(), SendError> {
        let (Some(sha), Some(at)) = (e.after.as_deref(), e.updated_at()) else {
            return Ok(());
        };
        let records = &self.state.records;
        records
            .remember_pr_head(repo, number, sha, at)
            .await
            .map_err(retry)?;
        if !self.state.config.github.check_runs_on() {
            return Ok(());
        }
        let mut jobs = Vec::new();
        for kind in KINDS {
            if records
                .check_run(repo, number, kind)
                .await
                .map_err(retry)?
                .is_some()
            {
                jobs.push(GithubJob::check_run(repo, number, kind)?);
            }
        }
        self.state
            .engine
            .commands()
            .enqueue(&jobs)
            .await
            .map_err(retry)?;
        Ok(())
    }
}
