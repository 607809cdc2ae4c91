//! `POST /webhooks/slack/interactions` and `POST /webhooks/slack/commands`:
//! verify the signature, then hand over to [`accept`] within Slack's 3 seconds.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use secrecy::ExposeSecret;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::accept;
use super::payload::{Interaction, SlashCommand};
use super::verify::verify;
use crate::core::AppState;
use crate::gate::Millis;
use crate::http::error::Reject;
use crate::http::receipts::{Receipts, RECEIPT_WITHIN};
use crate::http::SLACK_BODY_LIMIT;

const INTERACTIONS: &str = "/webhooks/slack/interactions";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(INTERACTIONS, post(interactions))
        .route("/webhooks/slack/commands", post(commands))
        .layer(DefaultBodyLimit::max(SLACK_BODY_LIMIT))
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

/// The largest unsigned body read: Slack's certificate check
/// (`ssl_check=1&token=…`) on the commands route.
const SSL_CHECK_MAX: u64 = 512;

/// Middleware, before the body is read: a request that can't be Slack's
/// (Slack not configured here, a signature header missing or not of the
/// form `v0=<64 hex>`, a timestamp outside the 5-minute window) is refused
/// without taking one of Slack's body readers. Only the signature's match
/// needs the body. A small unsigned body to the commands route may be
/// Slack's certificate check (`ssl_check=1`): it is answered 200 unread.
pub async fn headers_first(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (timestamp, signature) = (
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
    );
    let ssl_check = req.uri().path() == "/webhooks/slack/commands"
        && timestamp.is_none()
        && signature.is_none()
        && header(header::CONTENT_LENGTH.as_str())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|len| len <= SSL_CHECK_MAX);
    if let Err(refused) = secret(&state) {
        return refused.into_response();
    }
    match super::verify::plausible(timestamp, signature, state.clock.now_secs()) {
        Ok(_) => next.run(req).await,
        // Answered without reading it (nor taking a reader): the check
        // wants a 200, and nothing unsigned is acted on.
        Err(_) if ssl_check => StatusCode::OK.into_response(),
        Err(e) => unsigned(e).into_response(),
    }
}

fn unsigned(e: super::verify::VerifyError) -> Reject {
    Reject::new(
        StatusCode::UNAUTHORIZED,
        e.reason(),
        super::verify::message(e),
    )
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
    .map_err(unsigned)?;
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

async fn interactions(
    State(state): State<AppState>,
    Extension(receipts): Extension<Receipts>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Reject> {
    let signed_at = verified(&state, &headers, &body)?;
    let interaction =
        Interaction::from_form(&body).map_err(|e| Reject::bad_request("malformed_payload", e))?;
    let taken = accept::interaction(&receipts, interaction, signed_at).await?;
    Ok(match taken.body() {
        Some(body) => {
            state.metrics.reject(INTERACTIONS, "reason_missing");
            Json(body).into_response()
        }
        None => StatusCode::OK.into_response(),
    })
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
    if command.trigger_id.is_empty() {
        // Slack always sends one; without it the signed request itself is the id.
        command.trigger_id = format!("signed-{}", signed_digest(signed_at, &body));
    }
    // Refusals and `status` read or write the store too: Slack gives up after
    // 3 s, so a store that does not answer in time is a 503 it retries.
    let text = tokio::time::timeout(
        RECEIPT_WITHIN,
        accept::command(&state, &receipts, command, signed_at),
    )
    .await
    .map_err(|_| {
        Reject::unavailable(format!(
            "the store did not answer within {}: try again",
            humantime::format_duration(RECEIPT_WITHIN)
        ))
    })??;
    Ok(Json(json!({"response_type": "ephemeral", "text": text})).into_response())
}
