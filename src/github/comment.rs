//! What a PR comment's lines come to, and the reply that says so: each
//! command is authorized before the comment's transaction opens, then
//! rendered from its outcome.

use serde_json::json;

use super::access::{CommentAuthorizer, Stale};
use super::events::IssueCommentEvent;
use super::inbox::GithubInbox;
use super::sink::GithubJob;
use super::status::view;
use super::MARKER;
use crate::command::{Command, Parsed};
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Outcome, Request};
use crate::core::Provenance;
use crate::gate::state::rfc3339;
use crate::gate::{Actor, DeliveryId, GateStatus, Millis, PrNumber, RepoName, Source};
use crate::notify::SendError;

fn retry(e: impl std::fmt::Display) -> SendError {
    SendError::retry(e.to_string())
}

/// One line of a reply.
pub(super) struct Line {
    pub(super) command: Option<String>,
    pub(super) message: String,
}

/// What came of one comment.
#[derive(Default)]
pub(super) struct Reply {
    pub(super) lines: Vec<Line>,
    pub(super) applied: bool,
    pub(super) refused: bool,
    pub(super) extra: Vec<(GithubJob, &'static str)>,
}

/// One line of a comment, decided before the transaction opens.
pub(super) enum Step {
    Unknown(String),
    /// `/help` or `/status`: a comment to post.
    Answer {
        job: GithubJob,
        purpose: &'static str,
    },
    Command {
        request: Request,
        verdict: Result<(), String>,
    },
    /// `/freeze` or `/unfreeze` of the PR's repository, authorized or not.
    Freeze {
        unfreeze: bool,
        until: Option<Millis>,
        reason: Option<String>,
        who: Actor,
        verdict: Result<(), String>,
    },
}

impl Reply {
    pub(super) fn render(&mut self, command: Command, outcome: Outcome<String>) {
        let why = match outcome {
            Outcome::Applied(applied) => {
                self.applied = true;
                // Counted, not opened: say how many more the gate needs.
                if applied
                    .gates
                    .iter()
                    .any(|g| matches!(g.status, GateStatus::Approving(_)))
                {
                    self.lines.push(Line {
                        command: Some(format!("/{command}")),
                        message: applied.summary(),
                    });
                }
                return;
            }
            Outcome::Denied(why) => why,
            Outcome::Held { gate, by, via } => {
                format!("{gate} is held by {by} via {via}: comment `/unhold` first")
            }
            Outcome::WrittenBeforeClose { closed_at, .. } => format!(
                "written before the gate closed at {}: comment again",
                rfc3339(closed_at)
            ),
        };
        self.refused = true;
        self.lines.push(Line {
            command: Some(format!("/{command}")),
            message: format!("not done: {why}"),
        });
    }
}

impl GithubInbox {
    /// What one command-shaped line of a comment comes to, before anything is written.
    pub(super) async fn step(
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
            Parsed::Unknown { word, .. } => return Ok(Step::Unknown(word)),
            Parsed::Freeze { unfreeze, rest, .. } => {
                return self.freeze_step(unfreeze, &rest, repo, user).await;
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
            Command::Help => {
                let text = self
                    .state
                    .templates
                    .render(
                        "github/help.md.j2",
                        json!({"marker": MARKER, "author": user, "subject": subject.display(), "commands": dispatch::help()}),
                    )
                    .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
                return Ok(Step::Answer {
                    job: comment(text),
                    purpose: "help",
                });
            }
            Command::Status => {
                let pr = view(&self.state.store, repo, number, self.state.clock.now_ms())
                    .await
                    .map_err(retry)?
                    .for_markdown();
                let text = self
                    .state
                    .templates
                    .render(
                        "github/status.md.j2",
                        json!({"marker": MARKER, "subject": pr.subject, "gates": pr.gates, "events": pr.events, "reply": true}),
                    )
                    .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
                return Ok(Step::Answer {
                    job: comment(text),
                    purpose: "status",
                });
            }
            _ => {}
        }
        let (force, reason) = crate::command::split_force(inv.reason.clone());
        let request = Request {
            command,
            subject: subject.clone(),
            who: Provenance::new(Actor::new(user.clone(), Source::Github))
                .delivery(delivery.clone())
                .written_at(e.written_at())
                .reason(reason.clone())
                .force(force),
        };
        let authorizer = CommentAuthorizer {
            access: &self.access,
            repo,
            user,
            pr_author: &e.issue.user.login,
            stale,
            force,
        };
        let verdict = match dispatch::authorize(&request, &authorizer).await? {
            Ok(()) if force && reason.is_none() => Err(format!(
                "break glass needs a reason: `/{command} --force <reason>`"
            )),
            verdict => verdict,
        };
        Ok(Step::Command { request, verdict })
    }

    /// `/freeze [for 2h|until <time>] <reason>` freezes the PR's repository;
    /// other scopes are frozen from Slack or the CLI.
    async fn freeze_step(
        &self,
        unfreeze: bool,
        rest: &str,
        repo: &RepoName,
        user: &str,
    ) -> Result<Step, SendError> {
        let verb = if unfreeze { "unfreeze" } else { "freeze" };
        let line = crate::command::parse_freeze(rest);
        let who = Actor::new(user.to_string(), Source::Github);
        let refuse = |why: String| Step::Freeze {
            unfreeze,
            until: None,
            reason: None,
            who: who.clone(),
            verdict: Err(why),
        };
        if line.scope.is_some() {
            return Ok(refuse(format!(
                "on a pull request `/{verb}` is for {repo}: freeze other scopes with `/gatebot {verb}` in Slack or `gatebot {verb}`"
            )));
        }
        let until = match crate::gate::freeze::end_of(
            self.state.clock.now_ms(),
            line.for_.as_deref(),
            line.until.as_deref(),
        ) {
            Ok(u) => u,
            Err(e) => return Ok(refuse(e)),
        };
        if !unfreeze && line.reason.is_none() {
            return Ok(refuse(
                "a freeze needs a reason: `/freeze [for 2h|until <time>] <reason>`".into(),
            ));
        }
        let verdict = self.access.authorize_named(verb, repo, user).await?;
        Ok(Step::Freeze {
            unfreeze,
            until,
            reason: line.reason,
            who,
            verdict,
        })
    }

    pub(super) fn reply(&self, author: &str, lines: Vec<Line>) -> Result<String, SendError> {
        let lines: Vec<_> = lines
            .into_iter()
            .map(|l| json!({"command": l.command, "message": l.message}))
            .collect();
        self.state
            .templates
            .render(
                "github/reply.md.j2",
                json!({"marker": MARKER, "author": author, "lines": lines}),
            )
            .map_err(|e| SendError::Permanent(format!("{e:#}")))
    }
}
