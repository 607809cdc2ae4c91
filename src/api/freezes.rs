//! `/api/v1/freezes`: change freezes from the CLI and from pipelines' tools.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::core::AppState;
use crate::gate::freeze::{end_of, Freeze, FreezeScope};
use crate::http::auth::{operator, reader};
use crate::http::error::Reject;

/// A reason, one line, at most this many characters.
const MAX_REASON: usize = 300;

pub fn freeze_json(f: &Freeze) -> Value {
    json!({
        "id": f.id, "scope": f.scope.to_string(), "reason": f.reason,
        "by": f.by, "at": f.at, "until": f.until, "line": f.reason_line(),
    })
}

pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, Reject> {
    reader(&state.config, &headers)?;
    let freezes: Vec<Value> = state.engine.freezes().iter().map(freeze_json).collect();
    Ok(Json(json!({ "freezes": freezes })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FreezeBody {
    #[serde(default)]
    scope: Option<String>,
    reason: String,
    /// `2h`: ends by itself after that long.
    #[serde(default, rename = "for")]
    for_: Option<String>,
    /// RFC 3339: ends by itself then.
    #[serde(default)]
    until: Option<String>,
}

/// `scope` as written (`all` when absent).
pub fn scope_of(text: Option<&str>) -> Result<FreezeScope, Reject> {
    text.unwrap_or("all").parse().map_err(|e| {
        Reject::bad_request(
            "bad_scope",
            format!("{e} (a freeze's scope is all, owner/repo or ns/<namespace>)"),
        )
    })
}

/// `POST /api/v1/freezes`: 201 with the freeze.
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Reject> {
    let caller = operator(&state.config, &headers)?;
    let body: FreezeBody = serde_json::from_slice(&body).map_err(|e| {
        Reject::bad_request(
            "malformed_json",
            format!("expected {{\"scope\": \"all\", \"reason\": \"…\", \"for\": \"2h\"}}: {e}"),
        )
    })?;
    let scope = scope_of(body.scope.as_deref())?;
    let reason = body.reason.trim();
    if reason.is_empty()
        || reason.chars().count() > MAX_REASON
        || reason.chars().any(char::is_control)
    {
        return Err(Reject::bad_request(
            "bad_reason",
            format!("a freeze needs a reason: one line of at most {MAX_REASON} characters"),
        ));
    }
    let until = end_of(
        state.engine.now(),
        body.for_.as_deref(),
        body.until.as_deref(),
    )
    .map_err(|e| Reject::bad_request("bad_time", e))?;
    // What the caller claims is said with the reason it gives.
    let reason = caller
        .reason(Some(reason.to_string()))
        .unwrap_or_else(|| reason.to_string());
    let freeze = state
        .engine
        .freeze(scope, until, &reason, &caller.actor, None)
        .await?;
    Ok((StatusCode::CREATED, Json(freeze_json(&freeze))).into_response())
}

#[derive(Debug, Deserialize)]
pub struct LiftQuery {
    scope: Option<String>,
}

/// `DELETE /api/v1/freezes?scope=…`: lifts the scope's freezes.
pub async fn lift(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<LiftQuery>,
) -> Result<Json<Value>, Reject> {
    let actor = operator(&state.config, &headers)?.actor;
    let scope = scope_of(q.scope.as_deref())?;
    let lifted = state.engine.unfreeze(&scope, &actor).await?;
    let lifted: Vec<Value> = lifted.iter().map(freeze_json).collect();
    Ok(Json(
        json!({ "scope": scope.to_string(), "lifted": lifted }),
    ))
}
