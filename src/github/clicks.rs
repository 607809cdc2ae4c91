//! Clicks on a check run's buttons (`check_run` `requested_action`): stored
//! like a comment, keyed by what GitHub signs, and applied through
//! `core::dispatch` with the rules of a comment by the same person.

use super::access::{CommentAuthorizer, Stale};
use super::checks::{self, Button, KINDS};
use super::events::CheckRunEvent;
use super::inbox::GithubInbox;
use super::retry;
use super::sink::GithubJob;
use super::SOURCE;
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Answer, Authorizer, Request, Rule};
use crate::core::intake::{self, Replies};
use crate::core::Provenance;
use crate::gate::{Actor, DeliveryId, GateKey, PrNumber, RepoName, Source};
use crate::notify::{Lease, SendError, Settled};

/// A click's rules: those of a comment by the same person, on the gate's
/// current run only (a run a push superseded was about an earlier revision).
struct ClickAuthorizer<'a> {
    comment: CommentAuthorizer<'a>,
    current: bool,
}

impl Authorizer for ClickAuthorizer<'_> {
    type Denied = String;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, String> {
        if !self.current {
            return Box::pin(async {
                Ok(Err(
                    "this check run is no longer the gate's current one (new commits were pushed): use the buttons of the latest run".to_string(),
                ))
            });
        }
        self.comment.authorize(rule, keys)
    }
}

/// A click's gate and button, when the run is one of gatebot's on this repository.
fn clicked(e: &CheckRunEvent, repo: &RepoName) -> Option<(GateKey, PrNumber, Button)> {
    let key = e.gate()?;
    let (of, number) = key.pr()?;
    if of != repo || !KINDS.contains(&key.kind) {
        return None;
    }
    let button = Button::parse(&e.requested_action.as_ref()?.identifier)?;
    Some((key.clone(), number, button))
}

impl GithubInbox {
    /// A click on a run's button: authorized as a comment by the same person
    /// would be, decided through the one command path, and the run edited
    /// with who did what, in one unit with the delivery's settlement.
    pub(super) async fn check_run_click(
        &self,
        e: &CheckRunEvent,
        delivery: &DeliveryId,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let Some(repo) = e.repository.name() else {
            return Ok(Settled::NotYet);
        };
        let on = self.state.config.github.check_runs_on();
        if !on || !self.allowed(&repo) || e.sender.is_bot() {
            return Ok(Settled::NotYet);
        }
        let Some((key, number, button)) = clicked(e, &repo) else {
            return Ok(Settled::NotYet);
        };
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        let records = &self.state.records;
        let known = records
            .check_run(&repo, number, key.kind)
            .await
            .map_err(retry)?
            .filter(|r| r.run_id == e.check_run.id);
        let current = known.is_some();
        // What the person saw was written then: a click on a run written
        // before the gate's last close does not reopen it, as a comment does not.
        let output = &e.check_run.output;
        let written_at = known.as_ref().map(|k| {
            checks::written_at(
                k,
                output.title.as_deref().unwrap_or(""),
                output.summary.as_deref().unwrap_or(""),
                e.check_run.started_at(),
            )
        });
        let pull = self
            .client
            .pull(&repo, number)
            .await
            .map_err(|e| e.to_send_error())?;
        let pr_author = pull.user.map(|u| u.login).unwrap_or_default();
        // A superseded run stands for the push rule (`current`); a closed PR as for a comment.
        let stale = Stale {
            closed_unmerged: pull.state == "closed" && !pull.merged,
            pushed: None,
        };
        let authorizer = ClickAuthorizer {
            comment: CommentAuthorizer {
                access: &self.access,
                repo: &repo,
                user: &e.sender.login,
                pr_author: &pr_author,
                stale: &stale,
            },
            current,
        };
        let who = Provenance::new(Actor::new(e.sender.login.clone(), Source::Github))
            .delivery(delivery.clone())
            .written_at(written_at);
        let request = Request {
            place: None,
            command: button.command(key.kind),
            subject: Subject::Gate(key.clone()),
            who,
        };
        // The run says at once who did what, refused or not.
        let replies = Replies {
            first: vec![GithubJob::check_run(&repo, number, key.kind)?],
            ..Replies::default()
        };
        let engine = &self.state.engine;
        let authorized = dispatch::authorize(engine, &request, &authorizer)
            .await?
            .unspoken();
        intake::take_one(engine, SOURCE, request, authorized, Some(lease), replies).await?;
        Ok(Settled::Done)
    }
}
