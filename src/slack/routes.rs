//! `POST /webhooks/slack/interactions` and `POST /webhooks/slack/commands`:
//! verify, store, answer within Slack's 3 seconds; the inbox does the rest.
//!
//! The slash command answers at once what needs no Slack call and changes no
//! gate (help, status, parse errors, refusals decidable from the settings alone);
//! everything else is stored and answered on the `response_url` when done.

use axum::body::Bytes;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use secrecy::ExposeSecret;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::answers::{reply, SlackDenied};
use super::approvers::{quick, Verdict};
use super::inbox::{CLICK, SLASH};
use super::payload::{Interaction, SlashCommand};
use super::verify::verify;
use crate::command::{parse_slash, Command};
use crate::core::commands::{self, Subject};
use crate::core::dispatch;
use crate::core::AppState;
use crate::core::Provenance;
use crate::gate::{Actor, DeliveryId, Millis, Source};
use crate::http::error::Reject;
use crate::http::receipts::Receipts;
use crate::http::SLACK_BODY_LIMIT;
use crate::store::Delivery;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/webhooks/slack/interactions", post(interactions))
        .route("/webhooks/slack/commands", post(commands))
        .layer(DefaultBodyLimit::max(SLACK_BODY_LIMIT))
}

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

fn secret(state: &AppState) -> Result<&[u8], Reject> {
    let slack = &state.config.slack;
    match (&slack.signing_secret, &slack.bot_token) {
        (Some(s), Some(_)) if !s.expose_secret().is_empty() => Ok(s.expose_secret().as_bytes()),
        _ => Err(Reject::not_configured(
            "Slack",
            "GATEBOT_SLACK_SIGNING_SECRET and GATEBOT_SLACK_BOT_TOKEN",
        )),
    }
}

/// Checks the signature; returns the signed request time (Unix ms), which is
/// when the person acted as far as gatebot can trust.
fn verified(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Millis, Reject> {
    let secret = secret(state)?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let secs = verify(
        secret,
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        body,
        state.clock.now_secs(),
    )
    .map_err(|e| {
        Reject::new(
            StatusCode::UNAUTHORIZED,
            e.reason(),
            super::verify::message(e),
        )
    })?;
    Ok(secs.saturating_mul(1000))
}

/// Names a request that carries no id of its own by what Slack signed.
fn signed_digest(signed_at: Millis, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(signed_at.to_string().as_bytes());
    h.update(b":");
    h.update(body);
    hex::encode(&h.finalize()[..16])
}

fn ephemeral(text: String) -> Response {
    Json(json!({"response_type": "ephemeral", "text": text})).into_response()
}

async fn interactions(
    State(state): State<AppState>,
    Extension(receipts): Extension<Receipts>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Reject> {
    let signed_at = verified(&state, &headers, &body)?;
    let mut interaction =
        Interaction::from_form(&body).map_err(|e| Reject::bad_request("malformed_payload", e))?;
    // Other interactions (and other apps' buttons) are acknowledged and ignored.
    if interaction.kind != "block_actions" || interaction.click().is_none() {
        return Ok(StatusCode::OK.into_response());
    }
    if interaction.user.id.is_empty() {
        return Err(Reject::bad_request(
            "malformed_payload",
            "the click names no user",
        ));
    }
    // trigger_id is in the signed body: a replay within Slack's 5 minutes is a duplicate.
    let id = format!("click:{}", interaction.click_id());
    interaction.signed_at = Some(signed_at);
    let json = serde_json::to_string(&interaction)
        .map_err(|e| Reject::bad_request("malformed_payload", e.to_string()))?;
    store_receipt(&receipts, id, CLICK, json).await?;
    Ok(StatusCode::OK.into_response())
}

async fn commands(
    State(state): State<AppState>,
    Extension(receipts): Extension<Receipts>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Reject> {
    secret(&state)?;
    let mut command = SlashCommand::from_form(&body);
    // Slack's certificate check carries no command and may come unsigned.
    if command.ssl_check == "1" {
        return Ok(StatusCode::OK.into_response());
    }
    let signed_at = verified(&state, &headers, &body)?;
    command.signed_at = Some(signed_at);
    if command.trigger_id.is_empty() {
        // Slack always sends one; without it the signed request itself is the id.
        command.trigger_id = format!("signed-{}", signed_digest(signed_at, &body));
    }
    let templates = &state.templates;
    if let Some((verb, rest)) = crate::command::freeze_verb(&command.text) {
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
            return Ok(ephemeral(format!("{e}: {usage}")));
        }
        if verb == "freeze" && line.reason.is_none() {
            return Ok(ephemeral(format!("a freeze needs a reason: {usage}")));
        }
        let id = format!("command:{}", command.trigger_id);
        let payload = serde_json::to_string(&command).map_err(|e| {
            Reject::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unencodable",
                format!("cannot store the command: {e}"),
            )
        })?;
        store_receipt(&receipts, id, SLASH, payload).await?;
        let scope = line.scope.unwrap_or_else(|| "all".into());
        return Ok(ephemeral(reply(
            templates,
            json!({"what": "received", "command": format!("/gatebot {verb}"), "subject": scope}),
        )));
    }
    let inv = match parse_slash(&command.text) {
        Ok(inv) => inv,
        Err(e) => return Ok(ephemeral(e.to_string())),
    };
    let slash = if command.command.is_empty() {
        "/gatebot".to_string()
    } else {
        command.command.clone()
    };
    if inv.command == Command::Help {
        let commands = dispatch::help();
        let default_repo = state
            .config
            .github
            .repository
            .as_ref()
            .map(|r| r.to_string());
        let text = templates
            .render(
                "slack/help.j2",
                json!({"slash": slash, "commands": commands, "default_repo": default_repo}),
            )
            .map_err(|e| Reject::unavailable(format!("{e:#}")))?;
        return Ok(ephemeral(text.trim().to_string()));
    }
    let subject =
        match commands::subject_of(inv.target.clone(), state.config.github.repository.as_ref()) {
            Ok(s) => s,
            Err(e) => return Ok(ephemeral(e)),
        };
    if inv.command == Command::Status {
        return Ok(ephemeral(status(&state, subject.as_ref()).await?));
    }
    let Some(subject) = subject else {
        return Ok(ephemeral(
            parse_slash(&format!("{} ", inv.command.as_str()))
                .err()
                .map_or_else(|| "which pull request?".into(), |e| e.to_string()),
        ));
    };
    let rule = state.policy.slack(inv.command);
    match quick(&rule, &command.user_id) {
        Some(Verdict::Allowed) | None => {}
        Some(verdict) => {
            let who = Provenance::new(Actor::new(command.user_label(), Source::Slack))
                .delivery(DeliveryId::slack_command(&command.trigger_id))
                .written_at(command.signed_at);
            let denied = SlackDenied::Approver {
                verdict,
                rule,
                user: command.user_id.clone(),
            };
            let keys = commands::gates_for(inv.command, &subject);
            dispatch::refuse(&state.engine, inv.command, &keys, &who, &denied.to_string())
                .await
                .map_err(|e| Reject::unavailable(e.to_string()))?;
            return Ok(ephemeral(denied.reply(templates, inv.command)));
        }
    }
    let id = format!("command:{}", command.trigger_id);
    let payload = serde_json::to_string(&command).map_err(|e| {
        Reject::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unencodable",
            format!("cannot store the command: {e}"),
        )
    })?;
    store_receipt(&receipts, id, SLASH, payload).await?;
    Ok(ephemeral(reply(
        templates,
        json!({"what": "received", "command": format!("{slash} {}", inv.command.as_str()), "subject": subject.display()}),
    )))
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
