//! `POST /webhooks/teams`, the bot's messaging endpoint: the Bot Framework's
//! token is checked before the body is read, then the activity is bound to
//! the token (its service URL) and to a tenant gatebot serves, and stored as
//! a receipt before it is acknowledged.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};

use super::activity::Activity;
use super::auth::{self, Expected, Failure, Refusal, Verified};
use super::conversations::{self, CONVERSATION_UPDATE, INSTALLATION_UPDATE};
use super::inbox::MESSAGE;
use super::invoke::{self, INVOKE};
use super::keys::SigningKeys;
use super::receipt;
use super::BODY_LIMIT;
use crate::core::AppState;
use crate::http::error::Reject;
use crate::http::limits::{self, BodyLimit};
use crate::http::receipts::Receipts;

/// The signing keys, when Teams is on.
#[derive(Clone)]
pub struct Bot(pub Option<Arc<SigningKeys>>);

/// The messaging endpoint; its body read under `body`, once the token is checked.
pub fn routes(state: &AppState, body: BodyLimit) -> Router<AppState> {
    let keys = state.config.teams.app_id().map(|_| {
        Arc::new(SigningKeys::new(
            &state.config.teams.openid_metadata_url,
            state.clock.clone(),
            state.metrics.outbound("teams"),
        ))
    });
    Router::new()
        .route("/webhooks/teams", post(activity))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .route_layer(middleware::from_fn_with_state(body, limits::bounded))
        // Outermost: no body is read for a request without a valid token.
        .route_layer(middleware::from_fn_with_state(
            (state.clone(), Bot(keys)),
            authenticated,
        ))
}

/// The Bot Framework's token, checked before the body is read (a sender
/// without one holds none of Teams' body readers); its claims go on to the
/// handler.
async fn authenticated(
    State((state, Bot(keys))): State<(AppState, Bot)>,
    mut req: Request,
    next: Next,
) -> Response {
    let (Some(keys), Some(app_id)) = (keys, state.config.teams.app_id()) else {
        return Reject::not_configured("Microsoft Teams", "GATEBOT_TEAMS_APP_ID").into_response();
    };
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let expected = Expected {
        app_id,
        now_secs: state.clock.now_secs(),
    };
    match auth::verify(&keys, authorization, &expected).await {
        Ok(claims) => {
            req.extensions_mut().insert(claims);
            next.run(req).await
        }
        Err(Failure::Refused(r)) => refused(r).into_response(),
        Err(Failure::Unavailable(why)) => Reject::unavailable(format!(
            "cannot read the Bot Framework's signing keys ({why}): try again"
        ))
        .into_response(),
    }
}

fn refused(r: Refusal) -> Reject {
    Reject::new(r.status(), r.reason(), r.message())
}

async fn activity(
    State(state): State<AppState>,
    Extension(receipts): Extension<Receipts>,
    Extension(verified): Extension<Verified>,
    body: Bytes,
) -> Result<Response, Reject> {
    let mut activity =
        Activity::from_json(&body).map_err(|e| Reject::bad_request("malformed_activity", e))?;
    auth::admits(&verified, &activity, state.config.teams.tenants()).map_err(refused)?;
    match activity.kind.as_str() {
        MESSAGE => {}
        INVOKE => return invoke::respond(&state, &receipts, activity).await,
        CONVERSATION_UPDATE | INSTALLATION_UPDATE => {
            conversations::update(&state, &activity).await?;
            return Ok(StatusCode::OK.into_response());
        }
        other => {
            tracing::debug!(kind = %other, "Teams activity not acted on");
            return Ok(StatusCode::OK.into_response());
        }
    }
    if activity.id.is_empty() {
        return Err(Reject::bad_request(
            "malformed_activity",
            "the activity has no id",
        ));
    }
    activity.received_at = Some(state.clock.now_ms());
    receipt::store(&receipts, &activity).await?;
    Ok(StatusCode::OK.into_response())
}
