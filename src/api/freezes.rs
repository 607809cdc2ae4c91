//! `/api/v1/freezes`: change freezes from the CLI and from pipelines' tools.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use crate::command::Command;
use crate::core::commands::{Applied, Subject};
use crate::core::dispatch::{self, Checked, Request};
use crate::core::{AppState, Provenance};
use crate::gate::freeze::{end_of, Freeze, FreezeScope};
use crate::gate::Actor;
use crate::http::auth::{operator, reader};
use crate::http::error::Reject;

use super::answer_json;
use super::wire::{FreezeList, FreezeView, Lifted};

fn views(freezes: &[Freeze]) -> Vec<FreezeView> {
    freezes.iter().map(FreezeView::from).collect()
}

pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, Reject> {
    reader(&state.config, &headers)?;
    let freezes = views(&state.engine.freezes().in_force());
    answer_json(&FreezeList { freezes })
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
    let until = end_of(
        state.engine.now(),
        body.for_.as_deref(),
        body.until.as_deref(),
    )
    .map_err(|e| Reject::bad_request("bad_time", e))?;
    // What the caller claims is said with a reason it gives; one it does not
    // give is refused by the core, as from every intake.
    let reason = match crate::command::freeze_reason(&body.reason) {
        Ok(_) => caller.reason(Some(body.reason)).unwrap_or_default(),
        Err(_) => body.reason,
    };
    let command = Command::Freeze {
        scope,
        until,
        reason,
    };
    let applied = run(&state, command, &caller.actor).await?;
    let freeze = applied
        .froze
        .ok_or_else(|| Reject::unavailable("the freeze was not made"))?;
    let view = answer_json(&FreezeView::from(&freeze))?;
    Ok((StatusCode::CREATED, view).into_response())
}

/// Runs an operator's freeze or unfreeze through the one command path.
async fn run(state: &AppState, command: Command, actor: &Actor) -> Result<Applied, Reject> {
    let request = Request {
        place: None,
        command,
        subject: Subject::Nothing,
        who: Provenance::new(actor.clone()),
    };
    dispatch::run(&state.engine, actor.source.as_str(), &request, &Checked)
        .await
        .and_then(dispatch::Outcome::applied)
        .map_err(super::reject)
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
    let command = Command::Unfreeze {
        scope: scope.clone(),
    };
    let lifted = views(&run(&state, command, &actor).await?.lifted);
    answer_json(&Lifted {
        scope: scope.to_string(),
        lifted,
    })
}
