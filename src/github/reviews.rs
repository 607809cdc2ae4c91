//! Pull-request reviews (`[github] approving_review = "promote"`): an
//! approving review is a `/promote` by the reviewer, pinned to the commit
//! reviewed, authorized and applied as their comment would be; a review of
//! an older commit than the PR's head is stale and only answered. A
//! dismissed review takes the reviewer's vote back while it has not been
//! used to open the gate (`core::withdraw`).

use super::access::{CommentAuthorizer, Stale};
use super::events::PullRequestReviewEvent;
use super::inbox::GithubInbox;
use super::reply::Line;
use super::retry;
use super::sink::GithubJob;
use super::SOURCE;
use crate::command::{Command, Invalid};
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Request};
use crate::core::intake::{self, Replies, Said};
use crate::core::Provenance;
use crate::gate::reason::MAX_REASON;
use crate::gate::{Actor, DeliveryId, GateKey, GateKind, PrNumber, RepoName, Scope, Source};
use crate::notify::{Lease, SendError, Settled};
use crate::policy::ApprovingReview;
use crate::store::NewJob;

/// A commit as replies show it.
fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// One review's delivery and where it answers.
struct Reviewed<'a> {
    e: &'a PullRequestReviewEvent,
    repo: RepoName,
    number: PrNumber,
    delivery: &'a DeliveryId,
}

impl Reviewed<'_> {
    fn reviewer(&self) -> &str {
        &self.e.review.user.login
    }

    /// The reviewer's words as the approval's reason: the body's first line
    /// that says something, cut to a reason's length.
    fn said(&self) -> Option<String> {
        let body = self.e.review.body.as_deref()?;
        let line = body.lines().map(str::trim).find(|l| !l.is_empty())?;
        Some(line.chars().take(MAX_REASON).collect())
    }

    /// The start of the reason of the vote the review's approval casts: its
    /// dismissal takes back that vote alone, not one the reviewer gave otherwise.
    fn cast(&self) -> String {
        let review = &self.e.review;
        format!(
            "approving review {} of {}",
            review.id,
            short(&review.commit_id)
        )
    }

    /// The reply on the PR, once per delivery.
    fn reply(&self, inbox: &GithubInbox, lines: Vec<Line>) -> Result<NewJob, SendError> {
        let body = inbox.reply(self.reviewer(), lines)?;
        let job = GithubJob::Comment {
            repo: self.repo.clone(),
            number: self.number,
            body,
            installation: self.e.installation.as_ref().map(|i| i.id),
        };
        Ok(job.once(self.delivery.once_key(SOURCE, "review-reply"))?)
    }

    /// The reply the core fills with what it told, once per delivery, led
    /// by `lead`; worded when sent.
    fn told(&self, lead: Option<String>) -> Result<Replies<'static>, SendError> {
        let job = GithubJob::Reply {
            repo: self.repo.clone(),
            number: self.number,
            author: self.reviewer().to_string(),
            installation: self.e.installation.as_ref().map(|i| i.id),
            lead,
            lines: Vec::new(),
        };
        Ok(Replies {
            reply: Some(job.once(self.delivery.once_key(SOURCE, "review-reply"))?),
            ..Replies::default()
        })
    }

    fn promote(&self) -> GateKey {
        GateKey::new(
            GateKind::Promote,
            Scope::Pr {
                repo: self.repo.clone(),
                number: self.number,
            },
        )
    }
}

impl GithubInbox {
    /// An approving review or a dismissal, when the policy counts reviews.
    pub(super) async fn review(
        &self,
        e: &PullRequestReviewEvent,
        delivery: &DeliveryId,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let Some((repo, number)) = e.pr() else {
            return Ok(Settled::NotYet);
        };
        let on = self.state.policy.approving_review() == ApprovingReview::Promote;
        if !on || !self.allowed(&repo) || e.review.user.is_bot() {
            return Ok(Settled::NotYet);
        }
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        let r = Reviewed {
            e,
            repo,
            number,
            delivery,
        };
        if e.dismissed() {
            return self.dismissed(lease, &r).await;
        }
        if e.approved() {
            return self.approved(lease, &r).await;
        }
        Ok(Settled::NotYet)
    }

    /// The PR's head: as the last push told it, else as GitHub says now.
    async fn head(&self, r: &Reviewed<'_>, asked: Option<String>) -> Result<String, SendError> {
        let known = self
            .state
            .records
            .pr_head(&r.repo, r.number)
            .await
            .map_err(retry)?;
        Ok(known.or(asked).unwrap_or_default())
    }

    /// An approving review: `/promote` by the reviewer, unless it is about
    /// an older commit than the PR's head.
    async fn approved(&self, lease: &Lease, r: &Reviewed<'_>) -> Result<Settled, SendError> {
        let pull = self
            .client
            .pull(&r.repo, r.number)
            .await
            .map_err(|e| e.to_send_error())?;
        let head = self.head(r, pull.head.map(|h| h.sha)).await?;
        let reviewed = r.e.review.commit_id.as_str();
        let engine = &self.state.engine;
        if !head.is_empty() && reviewed != head {
            dispatch::count(engine, SOURCE, "review", "stale");
            let line = Line {
                command: Some("/promote".into()),
                message: format!(
                    "not done: your approving review is of `{}`, but the pull request's head is now `{}`: the review is stale, so it counts for nothing. Review the new commits to approve them",
                    short(reviewed),
                    short(&head)
                ),
            };
            let said = Said::jobs(vec![r.reply(self, vec![line])?]);
            intake::answer(engine, said, Some(lease)).await?;
            return Ok(Settled::Done);
        }
        let pr_author = pull.user.map(|u| u.login).unwrap_or_default();
        let stale = Stale {
            closed_unmerged: pull.state == "closed" && !pull.merged,
            pushed: None,
        };
        let authorizer = CommentAuthorizer {
            access: &self.access,
            repo: &r.repo,
            user: r.reviewer(),
            pr_author: &pr_author,
            stale: &stale,
        };
        // Which review cast the vote is recorded before the reviewer's words,
        // never taken for them: a policy's `[[reasons]]` reads the words.
        let who = Provenance::new(Actor::new(r.reviewer().to_string(), Source::Github))
            .delivery(r.delivery.clone())
            .written_at(r.e.submitted_at())
            .claim(Some(r.cast()));
        let request = Request {
            place: None,
            command: Command::Open {
                kind: GateKind::Promote,
                reason: r.said(),
                force: false,
            },
            subject: Subject::pr(r.repo.clone(), r.number),
            who,
        };
        let authorized = dispatch::authorize(engine, &request, &authorizer).await?;
        // A reply only when the review did more than open the gate, led by
        // what the review counted as (or where its reason goes); worded when sent.
        let lead = match authorized.invalid() {
            Some(Invalid::ReasonRequired { .. }) => format!(
                "your approving review of `{}` needs a reason: write it as the first line of the review's body, then review again.",
                short(reviewed)
            ),
            _ => format!(
                "your approving review of `{}` counts as `/promote` here:",
                short(reviewed)
            ),
        };
        let replies = r.told(Some(lead))?;
        intake::take_one(engine, SOURCE, request, authorized, Some(lease), replies).await?;
        Ok(Settled::Done)
    }

    /// A dismissed review: the reviewer's vote at the promote gate no longer
    /// counts, unless it already opened the gate.
    async fn dismissed(&self, lease: &Lease, r: &Reviewed<'_>) -> Result<Settled, SendError> {
        let engine = &self.state.engine;
        let who = Provenance::new(Actor::new(r.e.sender.login.clone(), Source::Github))
            .delivery(r.delivery.clone())
            .reason(Some(format!(
                "review by {} dismissed: their approval no longer counts",
                r.reviewer()
            )));
        // Worded when sent, from what the core told of the withdrawal.
        let replies = r.told(None)?;
        let (key, cast) = (r.promote(), r.cast());
        intake::withdraw(
            engine,
            SOURCE,
            "review",
            &key,
            (r.reviewer(), &cast),
            &who,
            Some(lease),
            replies,
        )
        .await?;
        Ok(Settled::Done)
    }
}
