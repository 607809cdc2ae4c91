//! The operator API: `/api/v1/…`, JSON in and out; the CLI that calls it;
//! health, readiness and metrics.

pub mod change;
pub mod cli;
pub mod freezes;
pub mod health;
pub mod named;
pub mod wait;
pub mod wire;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::command::{Command, Invalid};
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Checked, Request};
use crate::core::{AppState, CommandError, Provenance};
use crate::gate::{Gate, GateKey, Scope};
use crate::http::auth::{is_pipeline, operator, reader};
use crate::http::error::Reject;
use wire::{AuditList, EventList, GateList, GateView, JobList, WaitList};

/// A list as the API has always answered it: through a `serde_json::Value`,
/// whose objects keep their keys in alphabetical order.
fn answer_json<T: Serialize>(answer: &T) -> Result<Json<Value>, Reject> {
    serde_json::to_value(answer)
        .map(Json)
        .map_err(|e| Reject::unavailable(format!("the answer could not be written: {e}")))
}

/// How the API answers a command the core did not do: not allowed 403, not
/// valid 400, held or stale 409, no store or no answer from outside 503.
pub(crate) fn reject(e: CommandError) -> Reject {
    let message = e.to_string();
    match e {
        CommandError::Denied(_) => Reject::new(StatusCode::FORBIDDEN, "refused", message),
        CommandError::Invalid(Invalid::FreezeReason) => Reject::bad_request("bad_reason", message),
        CommandError::Invalid(_) => Reject::bad_request("invalid", message),
        CommandError::Held { .. } => Reject::new(StatusCode::CONFLICT, "held", message),
        CommandError::WrittenBeforeClose { .. } => {
            Reject::new(StatusCode::CONFLICT, "stale", message)
        }
        CommandError::Named(e) => named::named_reject(e),
        CommandError::Unanswered { .. } | CommandError::Store(_) => Reject::unavailable(message),
    }
}

fn parse_key(state: &AppState, text: &str) -> Result<GateKey, Reject> {
    GateKey::parse(text, state.engine.settings().default_repo.as_ref())
        .map_err(|e| Reject::bad_request("bad_gate", e.to_string()))
}

/// Middleware, outside the body limit: a request that may carry a body is
/// refused before it is read unless it carries one of the server's tokens
/// (`http::auth::any_token`); the route checks which token it needs after.
pub async fn token_first(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::Method;
    use axum::response::IntoResponse;
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if !reads {
        if let Err(refused) = crate::http::auth::any_token(&state.config, req.headers()) {
            return refused.into_response();
        }
    }
    next.run(req).await
}

/// Gates per page of `GET /api/v1/gates` unless `limit` says otherwise.
pub const DEFAULT_PAGE: usize = 100;
/// The largest `limit` accepted.
pub const MAX_PAGE: usize = 1000;

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    limit: Option<usize>,
    /// The `next` of the previous page: the last gate key it held.
    cursor: Option<String>,
}

/// One page of gates in key order; `next` is the cursor of the following
/// page, null on the last one.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, Reject> {
    reader(&state.config, &headers)?;
    let limit = match q.limit {
        None => DEFAULT_PAGE,
        Some(n) if (1..=MAX_PAGE).contains(&n) => n,
        Some(n) => {
            return Err(Reject::bad_request(
                "bad_limit",
                format!("limit must be from 1 to {MAX_PAGE}, not {n}"),
            ))
        }
    };
    let page = state
        .engine
        .reads()
        .page(q.cursor.as_deref(), limit)
        .await?;
    answer_json(&GateList::from(page))
}

pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Json<GateView>, Reject> {
    // A pipeline waiting on its gate (`gatebot wait`) may read it with its
    // own token: its named gates, and no other gate's history.
    let by_pipeline = is_pipeline(&state.config, &headers);
    if !by_pipeline {
        reader(&state.config, &headers)?;
    }
    let key = parse_key(&state, &key)?;
    if by_pipeline && !matches!(key.scope, Scope::Named(_)) {
        return Err(Reject::new(
            StatusCode::FORBIDDEN,
            "not_named",
            format!("the pipeline token reads only named gates (/gates/<kind>/named/<name>), and {key} is not one: read it with GATEBOT_ADMIN_TOKEN"),
        ));
    }
    Ok(Json(state.engine.reads().detail(&key).await?.into()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeBody {
    gate: String,
    #[serde(default)]
    reason: Option<String>,
    /// With `[[environments]]`: the environment or cluster (`production`, `prod-eu`).
    #[serde(default)]
    env: Option<String>,
}

pub async fn open(
    state: State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, Reject> {
    change(state, headers, body, true).await
}

pub async fn close(
    state: State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, Reject> {
    change(state, headers, body, false).await
}

async fn change(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
    open: bool,
) -> Result<Json<Value>, Reject> {
    let caller = operator(&state.config, &headers)?;
    // The API is ours, so unlike webhooks it is strict: a typo is an error.
    let body: ChangeBody = serde_json::from_slice(&body).map_err(|e| {
        Reject::bad_request(
            "malformed_json",
            format!("expected {{\"gate\": \"/gates/promote/pr/42\", \"reason\": \"…\"}}: {e}"),
        )
    })?;
    let key = parse_key(&state, &body.gate)?;
    // The caller's claim is recorded beside the reason, never taken for one.
    let reason = body
        .reason
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    let command = match open {
        true => Command::Open {
            kind: key.kind,
            reason,
            force: false,
        },
        false => Command::Close { reason },
    };
    let many = body.env.is_some();
    let request = Request {
        place: body.env,
        command,
        subject: Subject::Gate(key),
        who: Provenance::new(caller.actor.clone()).claim(caller.claim.clone()),
    };
    let mut gates = run(&state, &request).await?;
    if many {
        return Ok(Json(serde_json::json!({ "gates": gates })));
    }
    let gate = serde_json::to_value(gates.swap_remove(0));
    Ok(Json(gate.map_err(|e| Reject::unavailable(e.to_string()))?))
}

/// Runs an operator's command on one gate (with `env`, its clusters')
/// through the one command path; the token was checked already.
async fn run(state: &AppState, request: &Request) -> Result<Vec<Gate>, Reject> {
    let source = request.who.actor.source.as_str();
    let applied = dispatch::run(&state.engine, source, request, &Checked)
        .await
        .and_then(dispatch::Outcome::applied)
        .map_err(reject)?;
    if applied.gates.is_empty() {
        return Err(Reject::unavailable("the command changed no gate"));
    }
    Ok(applied.gates)
}

/// The gate a reader's list is filtered by, once the reader's token is checked.
fn gate_read(
    state: &AppState,
    headers: &HeaderMap,
    gate: Option<&str>,
) -> Result<Option<GateKey>, Reject> {
    reader(&state.config, headers)?;
    gate.map(|g| parse_key(state, g)).transpose()
}

#[derive(Debug, Deserialize)]
pub struct WaitsQuery {
    #[serde(default)]
    open: bool,
    gate: Option<String>,
}

pub async fn waits(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WaitsQuery>,
) -> Result<Json<Value>, Reject> {
    let key = gate_read(&state, &headers, q.gate.as_deref())?;
    let waits = state.records.waits(key.as_ref(), q.open, 500).await?;
    answer_json(&WaitList { waits })
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    gate: Option<String>,
    limit: Option<i64>,
}

pub async fn audit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Value>, Reject> {
    let key = gate_read(&state, &headers, q.gate.as_deref())?;
    let limit = q.limit.unwrap_or(200).clamp(1, 5000);
    let audit = state.records.audit_log(key.as_ref(), limit).await?;
    answer_json(&AuditList { audit })
}

#[derive(Debug, Deserialize)]
pub struct OutboxQuery {
    state: Option<String>,
}

pub async fn outbox(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<OutboxQuery>,
) -> Result<Json<Value>, Reject> {
    reader(&state.config, &headers)?;
    let jobs = state.records.jobs(q.state.as_deref(), 500).await?;
    answer_json(&JobList { jobs })
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    canary: Option<String>,
}

pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Json<Value>, Reject> {
    reader(&state.config, &headers)?;
    let events = state.records.events(q.canary.as_deref(), 500).await?;
    answer_json(&EventList { events })
}
