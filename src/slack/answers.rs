//! What Slack is told when gatebot says no, and Slack's authorizer for the
//! one command path: the policy's approvers, then four eyes.

use serde_json::json;

use super::approvers::{Approvers, Verdict};
use super::blocks::hhmm;
use crate::command::Invalid;
use crate::core::authors::PrAuthors;
use crate::core::dispatch::{Answer, Authorizer, Rule};
use crate::core::error::{held, written_before_close};
use crate::core::intake::{AppliedNote, Refusal, Told};
use crate::core::{AppState, CommandError};
use crate::gate::{GateKey, Millis, Scope};
use crate::notify::SendError;
use crate::policy::ChatRule;
use crate::templates::Templates;

/// An ephemeral text from `slack/reply.j2`.
pub fn reply(templates: &Templates, ctx: serde_json::Value) -> String {
    templates
        .render("slack/reply.j2", ctx)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("{e:#}"))
}

/// Slack's words for one line of what the core told of a click or a typed
/// command, when its answer says it: a refusal (the authorizer's, worded
/// before the unit as `denied`), that it applied late, and for a typed
/// command what it did. A click done says nothing: the message shows the
/// decision.
pub fn told(templates: &Templates, answer: &Answered, line: &Told) -> Option<String> {
    let error = |message: String| reply(templates, json!({"what": "error", "message": message}));
    let (command, why) = match line {
        Told::Late { note } if answer.typed => return Some(note.clone()),
        Told::Late { note } => return Some(format!(":hourglass: your click was {note}")),
        Told::Applied { .. } if !answer.typed => return None,
        Told::Applied { note, summary, .. } => {
            return Some(done(templates, note.as_ref(), summary))
        }
        Told::Refused { command, why } => (command, why),
        _ => return None,
    };
    Some(match why {
        Refusal::Denied { why } => answer.denied.as_deref().unwrap_or(why).to_string(),
        Refusal::Held { gate, by, via } => error(held(gate, by, via)),
        Refusal::WrittenBeforeClose { gate, closed_at } => {
            error(written_before_close(gate, *closed_at))
        }
        Refusal::Named { why } => error(why.clone()),
        Refusal::ForceWithoutReason { verb, .. } => force_without_reason(verb),
        Refusal::FreezeReason => freeze_reason(command),
        Refusal::Invalid { why } => why.clone(),
    })
}

/// What an answer knows besides the core's lines.
pub struct Answered {
    /// The authorizer's refusal, worded before the unit.
    pub denied: Option<String>,
    /// A typed command (its answer says what it did), not a click.
    pub typed: bool,
}

/// What Slack is told when a command was done.
fn done(templates: &Templates, note: Option<&AppliedNote>, summary: &str) -> String {
    match note {
        Some(AppliedNote::Froze { reason_line }) => {
            let line = crate::templates::escape::entities(reason_line);
            format!(":snowflake: Changes are {line}")
        }
        Some(AppliedNote::Lifted { count: 0, scope }) => format!("nothing was frozen in {scope}"),
        Some(AppliedNote::Lifted { count, scope }) => {
            format!(":sunny: lifted {count} freeze(s) of {scope}")
        }
        _ => reply(templates, json!({"what": "done", "summary": summary})),
    }
}

/// Break glass without a reason, and how to give one.
fn force_without_reason(verb: &dyn std::fmt::Display) -> String {
    format!("break glass needs a reason: `/gatebot {verb} <target> --force <reason>`")
}

/// A freeze's reason gatebot cannot keep, and how to write one.
fn freeze_reason(command: &str) -> String {
    format!(
        "{}: `/gatebot {command} [all|owner/repo|ns/<namespace>] [for 2h|until <time>] <reason>`",
        Invalid::FreezeReason
    )
}

/// The refusal for a verdict other than Allowed.
pub fn refusal(
    templates: &Templates,
    verdict: &Verdict,
    rule: &ChatRule,
    command: &str,
    user: &str,
) -> String {
    let what = match verdict {
        Verdict::Nobody => "nobody",
        _ => "not_approver",
    };
    let approvers: Vec<String> = rule
        .approvers
        .iter()
        .map(|a| {
            if a.starts_with('S') {
                format!("<!subteam^{a}>")
            } else {
                format!("<@{a}>")
            }
        })
        .collect();
    reply(
        templates,
        json!({
            "what": what, "user": user, "command": format!("/gatebot {command}"),
            "setting": rule.setting, "approvers": approvers.join(", "),
        }),
    )
}

/// Why Slack refuses someone: not an approver by the policy, four eyes, no
/// break glass set up, or a click on a message whose wait was decided or is over.
#[derive(Debug, Clone)]
pub enum SlackDenied {
    Approver {
        verdict: Verdict,
        rule: ChatRule,
        user: String,
    },
    FourEyes(String),
    NoForce,
    /// The message was approved or rejected already.
    Decided {
        verb: &'static str,
        name: String,
        by: String,
        at: Millis,
    },
    /// The wait the message showed ended (how).
    Over(String),
}

impl std::fmt::Display for SlackDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Approver {
                verdict: Verdict::Nobody,
                rule,
                ..
            } => write!(f, "nobody may act from Slack: set {}", rule.setting),
            Self::Approver { rule, user, .. } => {
                write!(f, "{user} is not an approver ({})", rule.setting)
            }
            Self::FourEyes(why) => f.write_str(why),
            Self::NoForce => f.write_str("break glass is not set up: the policy names who may force with [slack.commands.force] approvers"),
            Self::Decided { verb, name, .. } => write!(f, "already {verb} by {name}"),
            Self::Over(outcome) => write!(f, "the wait is over ({outcome})"),
        }
    }
}

impl SlackDenied {
    /// The ephemeral answer to `/gatebot <command>` or a click.
    pub fn reply(&self, templates: &Templates, command: &str) -> String {
        match self {
            Self::Approver { rule, user, .. } if matches!(command, "freeze" | "unfreeze") => {
                format!(
                    "<@{user}> may not {command} from Slack: the approvers are in {}",
                    rule.setting
                )
            }
            Self::Approver {
                verdict,
                rule,
                user,
            } => refusal(templates, verdict, rule, command, user),
            Self::FourEyes(why) => reply(templates, json!({"what": "self", "message": why})),
            Self::NoForce => self.to_string(),
            Self::Decided { verb, by, at, .. } => reply(
                templates,
                json!({"what": "already", "verb": verb, "by": by, "at_hhmm": hhmm(*at)}),
            ),
            Self::Over(outcome) => reply(templates, json!({"what": "over", "outcome": outcome})),
        }
    }
}

/// Slack's rules: the click's message still waiting, the policy's approvers
/// for the command's rule, then four eyes.
pub(super) struct SlackAuthorizer<'a> {
    pub(super) state: &'a AppState,
    pub(super) approvers: &'a Approvers,
    pub(super) authors: &'a PrAuthors,
    pub(super) user: &'a str,
    /// A click on a message decided already: refused before anything else.
    pub(super) decided: Option<SlackDenied>,
    /// A click on a message whose wait is over: refused once the person may.
    pub(super) over: Option<SlackDenied>,
}

impl SlackAuthorizer<'_> {
    fn rule(&self, rule: Rule) -> Option<ChatRule> {
        let policy = &self.state.policy;
        match rule {
            Rule::Verb(verb) => Some(policy.slack(verb)),
            Rule::Force => policy.slack_force(),
            other => Some(policy.slack_named(other)),
        }
    }

    /// Why the user may not act on gates of `scope` under four eyes: they opened
    /// the pull request, by the policy's GitHub-to-Slack user mapping.
    async fn own_pull_request(
        &self,
        rule: &ChatRule,
        scope: &Scope,
    ) -> Result<Option<String>, CommandError> {
        let Scope::Pr { repo, number } = scope else {
            return Ok(None);
        };
        if !rule.forbid_self_approval {
            return Ok(None);
        }
        let user = self.user;
        let Some(login) = self.state.policy.github_login_of(user) else {
            return Ok(None);
        };
        let now = self.state.engine.now();
        let opened = self.authors.opened_by(repo, *number, login, now).await?;
        Ok(opened.then(|| {
            format!(
                "{user} (@{login}) opened {repo}#{number}: someone else must approve (four eyes)",
                number = number.0
            )
        }))
    }
}

/// Slack's user groups did not answer: the core's terms for it.
fn unanswered(e: SendError) -> CommandError {
    match e {
        SendError::Retry { after, message } => CommandError::unanswered(message, after),
        SendError::Permanent(message) => CommandError::unanswerable(message),
        SendError::Transient(message) => CommandError::unanswered(message, None),
    }
}

impl Authorizer for SlackAuthorizer<'_> {
    type Denied = SlackDenied;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, SlackDenied> {
        Box::pin(async move {
            if let Some(decided) = &self.decided {
                return Ok(Err(decided.clone()));
            }
            let Some(rule) = self.rule(rule) else {
                return Ok(Err(SlackDenied::NoForce));
            };
            let verdict = self
                .approvers
                .check(&rule, self.user)
                .await
                .map_err(unanswered)?;
            if verdict != Verdict::Allowed {
                return Ok(Err(SlackDenied::Approver {
                    verdict,
                    rule,
                    user: self.user.to_string(),
                }));
            }
            // A command's gates share its scope.
            if let Some(key) = keys.first() {
                let own = self.own_pull_request(&rule, &key.scope);
                if let Some(why) = own.await? {
                    return Ok(Err(SlackDenied::FourEyes(why)));
                }
            }
            Ok(self.over.clone().map_or(Ok(()), Err))
        })
    }
}
