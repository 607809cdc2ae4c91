//! What Slack is told when gatebot says no, and Slack's authorizer for the
//! one command path: the policy's approvers, then four eyes.

use serde_json::json;

use super::approvers::Verdict;
use super::inbox::SlackInbox;
use crate::command::Command;
use crate::core::dispatch::Authorizer;
use crate::gate::GateKey;
use crate::notify::{BoxFuture, SendError};
use crate::policy::SlackRule;
use crate::templates::Templates;

/// An ephemeral text from `slack/reply.j2`.
pub fn reply(templates: &Templates, ctx: serde_json::Value) -> String {
    templates
        .render("slack/reply.j2", ctx)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("{e:#}"))
}

/// The refusal for a verdict other than Allowed.
pub fn refusal(
    templates: &Templates,
    verdict: &Verdict,
    rule: &SlackRule,
    command: Command,
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
            "what": what, "user": user, "command": format!("/gatebot {}", command.as_str()),
            "setting": rule.setting, "approvers": approvers.join(", "),
        }),
    )
}

/// Why Slack refuses someone: not an approver by the policy, or four eyes.
#[derive(Debug)]
pub enum SlackDenied {
    Approver {
        verdict: Verdict,
        rule: SlackRule,
        user: String,
    },
    FourEyes(String),
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
        }
    }
}

impl SlackDenied {
    /// The ephemeral answer.
    pub fn reply(&self, templates: &Templates, command: Command) -> String {
        match self {
            Self::Approver {
                verdict,
                rule,
                user,
            } => refusal(templates, verdict, rule, command, user),
            Self::FourEyes(why) => reply(templates, json!({"what": "self", "message": why})),
        }
    }
}

/// Slack's rules for a slash command: the policy's approvers, then four eyes.
pub(super) struct SlackAuthorizer<'a> {
    pub(super) inbox: &'a SlackInbox,
    pub(super) rule: SlackRule,
    pub(super) user: &'a str,
}

impl Authorizer for SlackAuthorizer<'_> {
    type Denied = SlackDenied;

    fn authorize<'a>(
        &'a self,
        _command: Command,
        keys: &'a [GateKey],
    ) -> BoxFuture<'a, Result<Result<(), SlackDenied>, SendError>> {
        Box::pin(async move {
            let verdict = self.inbox.approvers.check(&self.rule, self.user).await?;
            if verdict != Verdict::Allowed {
                return Ok(Err(SlackDenied::Approver {
                    verdict,
                    rule: self.rule.clone(),
                    user: self.user.to_string(),
                }));
            }
            // A subject's gates share its scope.
            let own = match keys.first() {
                Some(key) => {
                    self.inbox
                        .own_pull_request(&self.rule, self.user, &key.scope)
                        .await?
                }
                None => None,
            };
            Ok(own.map_or(Ok(()), |why| Err(SlackDenied::FourEyes(why))))
        })
    }
}
