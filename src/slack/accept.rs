//! What a Slack click or slash command becomes once its sender is trusted,
//! whichever way it came (the signed HTTP routes or a Socket Mode envelope):
//! stored durably as a receipt, answered at once only with what needs no
//! Slack call and changes no gate. The inbox does the rest.

use axum::http::StatusCode;
use serde_json::json;

use super::answers::{reply, SlackDenied};
use super::approvers::{quick, Verdict};
use super::inbox::{CLICK, SLASH};
use super::payload::{Interaction, SlashCommand, REASON_INPUT};
use crate::command::{parse_slash, Verb};
use crate::core::commands::{self, Subject};
use crate::core::dispatch;
use crate::core::AppState;
use crate::core::Provenance;
use crate::gate::{Actor, DeliveryId, Millis, Source};
use crate::http::error::Reject;
use crate::http::receipts::Receipts;
use crate::store::Delivery;

/// Stores a delivery durably before it is acknowledged.
/// A redelivered id is a success too: Slack retries what it did not see answered.
async fn store_receipt(
    receipts: &Receipts,
    id: String,
    kind: &'static str,
    payload: String,
) -> Result<(), Reject> {
    let delivery = Delivery {
        source: "slack".into(),
        delivery: id,
        kind: kind.into(),
        payload,
    };
    receipts
        .store(delivery)
        .await
        .map(|_| ())
        .map_err(Reject::unavailable)
}

/// Stores a slash command for the inbox, under its trigger id.
async fn store_command(receipts: &Receipts, command: &SlashCommand) -> Result<(), Reject> {
    let id = format!("command:{}", command.trigger_id);
    let payload = serde_json::to_string(command).map_err(|e| {
        Reject::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unencodable",
            format!("cannot store the command: {e}"),
        )
    })?;
    store_receipt(receipts, id, SLASH, payload).await
}

/// What Slack is told of an interaction at once.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// Stored for the inbox, or not gatebot's: an empty 200.
    Stored,
    /// A reason modal submitted without a reason: it stays open with this
    /// under its field, and nothing is stored.
    AskAgain(&'static str),
}

/// Under the reason modal's field when nothing in it is a reason.
pub const WRITE_WHY: &str = "Write why in words: it is recorded with your decision.";

impl Taken {
    /// The body of the answer: Slack keeps a modal open on `errors`.
    pub fn body(&self) -> Option<serde_json::Value> {
        match self {
            Self::Stored => None,
            Self::AskAgain(why) => Some(json!({
                "response_action": "errors",
                "errors": { REASON_INPUT: why },
            })),
        }
    }
}

/// Stores a click on one of gatebot's buttons; other interactions (and other
/// apps' buttons) are accepted and ignored. `acted_at` is when the person
/// clicked as far as gatebot can trust (Unix ms).
pub async fn interaction(
    receipts: &Receipts,
    interaction: Interaction,
    acted_at: Millis,
) -> Result<Taken, Reject> {
    if interaction.reason_missing() {
        return Ok(Taken::AskAgain(WRITE_WHY));
    }
    // A submitted reason modal is the click it asked why for, with the reason.
    let mut interaction = interaction.into_click();
    let ours = matches!(
        interaction.kind.as_str(),
        "block_actions" | "view_submission"
    );
    if !ours || interaction.click().is_none() {
        return Ok(Taken::Stored);
    }
    if interaction.user.id.is_empty() {
        return Err(Reject::bad_request(
            "malformed_payload",
            "the click names no user",
        ));
    }
    // trigger_id is in what Slack sent: a replay or a redelivery is a duplicate.
    let id = format!("click:{}", interaction.click_id());
    interaction.signed_at = Some(acted_at);
    let json = serde_json::to_string(&interaction)
        .map_err(|e| Reject::bad_request("malformed_payload", e.to_string()))?;
    store_receipt(receipts, id, CLICK, json).await?;
    Ok(Taken::Stored)
}

/// Answers or stores a slash command (whose `trigger_id` is set); returns
/// the text Slack shows the person at once.
pub async fn command(
    state: &AppState,
    receipts: &Receipts,
    mut command: SlashCommand,
    acted_at: Millis,
) -> Result<String, Reject> {
    command.signed_at = Some(acted_at);
    if let Some((verb, rest)) = crate::command::freeze_verb(&command.text) {
        return freeze(state, receipts, &command, verb, rest).await;
    }
    let inv = match parse_slash(&command.text) {
        Ok(inv) => inv,
        Err(e) => return Ok(e.to_string()),
    };
    let slash = if command.command.is_empty() {
        "/gatebot".to_string()
    } else {
        command.command.clone()
    };
    if inv.command == Verb::Help {
        return help(state, &slash);
    }
    let subject =
        match commands::subject_of(inv.target.clone(), state.config.github.repository.as_ref()) {
            Ok(s) => s,
            Err(e) => return Ok(e.to_string()),
        };
    if inv.command == Verb::Status {
        return status(state, subject.as_ref()).await;
    }
    let Some(subject) = subject else {
        return Ok(parse_slash(&format!("{} ", inv.command.as_str()))
            .err()
            .map_or_else(|| "which pull request?".into(), |e| e.to_string()));
    };
    if let Some(refused) = refuse_early(state, &command, inv.command, &subject).await? {
        return Ok(refused);
    }
    store_command(receipts, &command).await?;
    Ok(reply(
        &state.templates,
        json!({"what": "received", "command": format!("{slash} {}", inv.command.as_str()), "subject": subject.display()}),
    ))
}

/// `/gatebot freeze …` or `unfreeze …`: what cannot be read is answered at
/// once; the rest is stored for the one command path.
async fn freeze(
    state: &AppState,
    receipts: &Receipts,
    command: &SlashCommand,
    verb: &str,
    rest: &str,
) -> Result<String, Reject> {
    let line = crate::command::parse_freeze(rest);
    let usage = format!(
        "write `/gatebot {verb} [all|owner/repo|ns/<namespace>]{}`",
        if verb == "freeze" {
            " [for 2h|until <time>] <reason>"
        } else {
            ""
        }
    );
    if let Err(e) = line.read(state.engine.now()) {
        return Ok(format!("{e}: {usage}"));
    }
    if verb == "freeze" && line.reason.is_none() {
        return Ok(format!("a freeze needs a reason: {usage}"));
    }
    store_command(receipts, command).await?;
    let scope = line.scope.unwrap_or_else(|| "all".into());
    Ok(reply(
        &state.templates,
        json!({"what": "received", "command": format!("/gatebot {verb}"), "subject": scope}),
    ))
}

fn help(state: &AppState, slash: &str) -> Result<String, Reject> {
    let commands = dispatch::help();
    let default_repo = state
        .config
        .github
        .repository
        .as_ref()
        .map(|r| r.to_string());
    let text = state
        .templates
        .render(
            "slack/help.j2",
            json!({"slash": slash, "commands": commands, "default_repo": default_repo}),
        )
        .map_err(|e| Reject::unavailable(format!("{e:#}")))?;
    Ok(text.trim().to_string())
}

/// Someone the policy names as no approver is refused at once, without
/// asking Slack: audited and counted as the one command path does.
async fn refuse_early(
    state: &AppState,
    command: &SlashCommand,
    verb: Verb,
    subject: &Subject,
) -> Result<Option<String>, Reject> {
    let rule = state.policy.slack(verb);
    let verdict = match quick(&rule, &command.user_id) {
        Some(Verdict::Allowed) | None => return Ok(None),
        Some(verdict) => verdict,
    };
    let who = Provenance::new(Actor::new(command.user_label(), Source::Slack))
        .delivery(DeliveryId::slack_command(&command.trigger_id))
        .written_at(command.signed_at);
    let denied = SlackDenied::Approver {
        verdict,
        rule,
        user: command.user_id.clone(),
    };
    let keys = commands::gates_for(verb, subject);
    let why = denied.to_string();
    dispatch::refuse(&state.engine, "slack", verb.as_str(), &keys, &who, &why)
        .await
        .map_err(|e| Reject::unavailable(e.to_string()))?;
    Ok(Some(denied.reply(&state.templates, verb.as_str())))
}

async fn status(state: &AppState, subject: Option<&Subject>) -> Result<String, Reject> {
    let (gates, label) = match subject {
        Some(s) => (
            commands::status(&state.engine, s)
                .await
                .map_err(|e| Reject::unavailable(e.to_string()))?,
            s.display(),
        ),
        None => (
            state
                .engine
                .reads()
                .list()
                .await?
                .into_iter()
                .filter(|g| g.canaries.iter().any(|c| c.waiting_since.is_some()))
                .collect(),
            "this gatebot (gates with a canary waiting)".to_string(),
        ),
    };
    let freezes: Vec<String> = state
        .engine
        .freezes()
        .in_force()
        .iter()
        .map(|f| f.reason_line())
        .collect();
    state
        .templates
        .render(
            "slack/status_reply.j2",
            json!({"subject": label, "gates": gates, "freezes": freezes}),
        )
        .map(|t| t.trim().to_string())
        .map_err(|e| Reject::unavailable(format!("{e:#}")))
}
