//! What a PR comment's lines come to: each command parsed and authorized
//! before the comment's transaction opens ([`Step`]); the core tells what
//! came of them in the reply, worded when it is sent.

use serde_json::json;

use super::access::{CommentAuthorizer, Stale};
use super::events::IssueCommentEvent;
use super::inbox::GithubInbox;
use super::reply::Line;
use super::retry;
use super::sink::GithubJob;
use super::status::view;
use super::MARKER;
use crate::command::{Command, Parsed, Verb};
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Authorized, Request};
use crate::core::intake::{Asked, Told};
use crate::core::Provenance;
use crate::gate::freeze::FreezeScope;
use crate::gate::{Actor, DeliveryId, PrNumber, RepoName, Source};
use crate::notify::SendError;

/// The most command lines one comment runs: a reply that says what came of
/// each stays well within GitHub's 65,536 characters.
pub(super) const MAX_LINES: usize = 20;

impl GithubInbox {
    /// What a comment's command lines come to, the first [`MAX_LINES`] of
    /// them, before anything is written.
    pub(super) async fn steps(
        &self,
        parsed: Vec<Parsed>,
        e: &IssueCommentEvent,
        repo: &RepoName,
        stale: &Stale,
        delivery: &DeliveryId,
    ) -> Result<Vec<Step>, SendError> {
        let subject = Subject::pr(repo.clone(), PrNumber(e.issue.number));
        let skipped = parsed.len().saturating_sub(MAX_LINES);
        let mut steps = Vec::new();
        for p in parsed.into_iter().take(MAX_LINES) {
            steps.push(self.step(p, e, repo, &subject, stale, delivery).await?);
        }
        if skipped > 0 {
            steps.push(Step::skipped(skipped));
        }
        Ok(steps)
    }

    /// What one command-shaped line of a comment comes to, before anything is written.
    async fn step(
        &self,
        parsed: Parsed,
        e: &IssueCommentEvent,
        repo: &RepoName,
        subject: &Subject,
        stale: &Stale,
        delivery: &DeliveryId,
    ) -> Result<Step, SendError> {
        let user = &e.comment.user.login;
        let number = PrNumber(e.issue.number);
        let inv = match parsed {
            Parsed::Unknown { word, .. } => return Ok(Step::unknown(word)),
            Parsed::Freeze { unfreeze, rest, .. } => {
                return self.freeze_step(unfreeze, &rest, e, repo, delivery).await;
            }
            Parsed::Command(inv) => inv,
        };
        let command = inv.command;
        let installation = e.installation.as_ref().map(|i| i.id);
        let comment = |body: String| GithubJob::Comment {
            repo: repo.clone(),
            number,
            body,
            installation,
        };
        match command {
            Verb::Help => {
                let text = self
                    .state
                    .templates
                    .render(
                        "github/help.md.j2",
                        json!({"marker": MARKER, "author": user, "subject": subject.display(), "commands": dispatch::help()}),
                    )
                    .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
                return Ok(Step::answer(comment(text), "help"));
            }
            Verb::Status => {
                let pr = view(&self.state.records, repo, number, self.state.clock.now_ms())
                    .await
                    .map_err(retry)?
                    .for_markdown(&self.state.evidence);
                let text = self
                    .state
                    .templates
                    .render(
                        "github/status.md.j2",
                        json!({"marker": MARKER, "subject": pr.subject, "gates": pr.gates, "events": pr.events, "reply": true}),
                    )
                    .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
                return Ok(Step::answer(comment(text), "status"));
            }
            _ => {}
        }
        let request = Request {
            place: None,
            command: Command::from_verb(command, inv.reason),
            subject: subject.clone(),
            who: self.who(user, e, delivery).typed(),
        };
        self.authorized(request, e, repo, stale).await
    }

    fn who(&self, user: &str, e: &IssueCommentEvent, delivery: &DeliveryId) -> Provenance {
        Provenance::new(Actor::new(user.to_string(), Source::Github))
            .delivery(delivery.clone())
            .written_at(e.written_at())
    }

    /// Asks GitHub whether the person may (no transaction is open).
    async fn authorized(
        &self,
        request: Request,
        e: &IssueCommentEvent,
        repo: &RepoName,
        stale: &Stale,
    ) -> Result<Step, SendError> {
        let authorizer = CommentAuthorizer {
            access: &self.access,
            repo,
            user: &e.comment.user.login,
            pr_author: &e.issue.user.login,
            stale,
        };
        let authorized = dispatch::authorize(&self.state.engine, &request, &authorizer)
            .await
            .map_err(super::send_error)?;
        Ok(Step::command(request, authorized))
    }

    /// `/freeze [for 2h|until <time>] <reason>` freezes the PR's repository;
    /// other scopes are frozen from Slack or the CLI.
    async fn freeze_step(
        &self,
        unfreeze: bool,
        rest: &str,
        e: &IssueCommentEvent,
        repo: &RepoName,
        delivery: &DeliveryId,
    ) -> Result<Step, SendError> {
        let word = if unfreeze { "unfreeze" } else { "freeze" };
        let line = crate::command::parse_freeze(rest);
        let unreadable = |why: String| Ok(Step::unreadable(word, why));
        if line.scope.is_some() {
            return unreadable(format!(
                "on a pull request `/{word}` is for {repo}: freeze other scopes with `/gatebot {word}` in Slack or `gatebot {word}`"
            ));
        }
        let scope = FreezeScope::Repo(repo.clone());
        let command = if unfreeze {
            Command::Unfreeze { scope }
        } else {
            let now = self.state.clock.now_ms();
            let until =
                match crate::gate::freeze::end_of(now, line.for_.as_deref(), line.until.as_deref())
                {
                    Ok(until) => until,
                    Err(why) => return unreadable(why),
                };
            Command::Freeze {
                scope,
                until,
                reason: line.reason.unwrap_or_default(),
            }
        };
        let request = Request {
            place: None,
            command,
            subject: Subject::pr(repo.clone(), PrNumber(e.issue.number)),
            who: self.who(&e.comment.user.login, e, delivery),
        };
        let stale = Stale {
            closed_unmerged: false,
            pushed: None,
        };
        self.authorized(request, e, repo, &stale).await
    }

    pub(super) fn reply(&self, author: &str, lines: Vec<Line>) -> Result<String, SendError> {
        super::reply::render(&self.state.templates, author, lines)
    }
}

/// One line of a comment, decided before the transaction opens: what the
/// core runs or counts of it, and the answer posted for it first (`/help`,
/// `/status`).
pub(super) struct Step {
    pub(super) asked: Asked<String>,
    pub(super) first: Option<(GithubJob, &'static str)>,
}

impl Step {
    fn counted(command: &str, result: &'static str, told: Option<Told>) -> Self {
        let command = command.to_string();
        Self {
            asked: Asked::Counted {
                command,
                result,
                told,
            },
            first: None,
        }
    }

    /// A word that is no command, quoted back in at most 40 characters.
    pub(super) fn unknown(word: String) -> Self {
        let word = crate::templates::escape::cap(&word, 40);
        Self::counted("unknown", "unknown", Some(Told::Unknown { word }))
    }

    /// Lines past the most a comment runs: answered, not run.
    pub(super) fn skipped(lines: usize) -> Self {
        let told = Told::Skipped {
            lines,
            most: MAX_LINES,
        };
        Self::counted("skipped", "refused", Some(told))
    }

    pub(super) fn answer(job: GithubJob, purpose: &'static str) -> Self {
        Self {
            first: Some((job, purpose)),
            ..Self::counted(purpose, "answered", None)
        }
    }

    pub(super) fn unreadable(word: &'static str, why: String) -> Self {
        let told = Told::Unreadable {
            word: word.to_string(),
            why,
        };
        Self::counted(word, "refused", Some(told))
    }

    pub(super) fn command(request: Request, authorized: Authorized<String>) -> Self {
        Self {
            asked: Asked::Command {
                request: Box::new(request),
                authorized,
            },
            first: None,
        }
    }
}
