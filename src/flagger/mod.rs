//! What Flagger calls: the gates (`/gates/…`), the loadtester's gate API, and
//! the event hook. See flagger-protocol.md: 200 opens, anything else keeps the
//! gate closed, and 403 is never retried, so a closed gate is always 403.

pub mod events;

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;

use crate::command::Command;
use crate::core::admit::Claim;
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Checked, Request};
use crate::core::AppState;
use crate::core::{CheckInput, CommandError, Provenance};
use crate::gate::{
    Actor, Answer, CanaryRef, ClusterName, GateKey, GateKind, Scope, Source, Verdict,
};
use crate::http::access::{self, Changed};
use crate::http::auth::admin;
use crate::http::error::Reject;
use events::{Event, EventIntake, Taken};

/// The body of a Flagger webhook call. Unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct FlaggerBody {
    name: String,
    namespace: String,
    phase: String,
    checksum: String,
    metadata: Option<BTreeMap<String, serde_json::Value>>,
}

impl FlaggerBody {
    pub(crate) fn parse(body: &[u8]) -> Result<Option<Self>, Reject> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(body)
            .map(Some)
            .map_err(|e| Reject::bad_request("malformed_json", format!("malformed JSON: {e}")))
    }

    fn canary(&self) -> Result<Option<CanaryRef>, Reject> {
        if self.name.is_empty() && self.namespace.is_empty() {
            return Ok(None);
        }
        CanaryRef::new(&self.namespace, &self.name)
            .map(Some)
            .map_err(|e| Reject::bad_request("bad_canary", e.to_string()))
    }

    pub(crate) fn input(self, cluster: Option<ClusterName>) -> Result<CheckInput, Reject> {
        Ok(CheckInput {
            cluster,
            found_commit: None,
            canary: self.canary()?,
            checksum: Claim::new(self.checksum),
            phase: Claim::new(self.phase),
            metadata: Claim::new(
                self.metadata
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| {
                        let v = match v {
                            serde_json::Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (k, v)
                    })
                    .collect(),
            ),
        })
    }
}

fn kind_of(kind: &str) -> Result<GateKind, Reject> {
    GateKind::from_route(kind).ok_or_else(|| {
        Reject::not_found(format!(
            "unknown gate kind `{kind}`: use start, promote, traffic or rollback"
        ))
    })
}

/// The cluster a request of Flagger's comes from, by the token its URL
/// carries: in the path (`/gates/t/<token>/…`) or as `?token=`. Without
/// `GATEBOT_FLAGGER_TOKENS` every request is let in, naming no cluster.
fn cluster(
    state: &AppState,
    in_path: Option<&str>,
    query: Option<&str>,
) -> Result<Option<ClusterName>, Reject> {
    let tokens = state.config.flagger_tokens();
    if tokens.is_empty() {
        return Ok(None);
    }
    let in_query = query.and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
    });
    let Some(token) = in_path.map(str::to_string).or(in_query) else {
        return Err(Reject::new(
            StatusCode::UNAUTHORIZED,
            "flagger_token_missing",
            "unauthorized: this gatebot takes checks only with a Flagger token: point the webhook at /gates/t/<token>/… (or add ?token=<token>)",
        ));
    };
    match tokens.cluster_of(&token) {
        Some(cluster) => Ok(Some(cluster.clone())),
        None => Err(Reject::new(
            StatusCode::UNAUTHORIZED,
            "flagger_token_wrong",
            "unauthorized: the Flagger token is not one of this gatebot's (GATEBOT_FLAGGER_TOKENS)",
        )),
    }
}

/// One of Flagger's check routes, with what its path carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckRoute<'a> {
    /// `/gates/{kind}` (or `/gates/t/{token}/{kind}`): the canary in the body.
    Canary {
        token: Option<&'a str>,
        kind: &'a str,
    },
    /// `/gates/{kind}/{*scope}` (or `/gates/t/{token}/{kind}/{*scope}`).
    Scoped {
        token: Option<&'a str>,
        kind: &'a str,
        scope: &'a str,
    },
    /// `/gate/check` and `/rollback/check`, the loadtester's.
    Legacy(GateKind),
}

impl<'a> CheckRoute<'a> {
    /// The check route `method` and `path` name, read as the router matches
    /// them; None for anything else, and for what only the router handles
    /// alike (percent-escapes, empty or ambiguous segments).
    pub(crate) fn of(method: &Method, path: &'a str) -> Option<Self> {
        let post = *method == Method::POST;
        if !post && *method != Method::GET {
            return None;
        }
        match path {
            "/gate/check" if post => return Some(Self::Legacy(GateKind::LegacyGate)),
            "/rollback/check" if post => return Some(Self::Legacy(GateKind::LegacyRollback)),
            _ => {}
        }
        let rest = path.strip_prefix("/gates/").filter(|r| !r.contains('%'))?;
        let (token, rest) = match rest.strip_prefix("t/") {
            Some(after) => {
                let (token, rest) = after.split_once('/')?;
                if token.is_empty() {
                    return None;
                }
                (Some(token), rest)
            }
            None => (None, rest),
        };
        let (kind, scope) = match rest.split_once('/') {
            Some((kind, scope)) => (kind, Some(scope).filter(|s| !s.is_empty())?),
            None => (rest, ""),
        };
        if kind.is_empty() || (token.is_none() && kind == "t") {
            return None;
        }
        Some(match scope {
            "" => Self::Canary { token, kind },
            scope => Self::Scoped { token, kind, scope },
        })
    }

    /// The route's pattern, as the router names it in metrics.
    /// The route as its access line shows it: never the token, and the kind
    /// and scope only when `access::Shown` finds them plain.
    pub(crate) fn shown(&self) -> access::Shown<'a> {
        let known = |kind: &'a str| GateKind::from_route(kind).map(|_| kind);
        match *self {
            Self::Canary { token, kind } => access::Shown::Check {
                token: token.is_some(),
                kind: known(kind),
                scope: None,
            },
            Self::Scoped { token, kind, scope } => access::Shown::Check {
                token: token.is_some(),
                kind: known(kind),
                scope: Some(scope),
            },
            Self::Legacy(_) => access::Shown::Pattern(self.pattern()),
        }
    }

    pub(crate) fn pattern(&self) -> &'static str {
        match self {
            Self::Canary { token: None, .. } => "/gates/{kind}",
            Self::Canary { token: Some(_), .. } => "/gates/t/{token}/{kind}",
            Self::Scoped { token: None, .. } => "/gates/{kind}/{*scope}",
            Self::Scoped { token: Some(_), .. } => "/gates/t/{token}/{kind}/{*scope}",
            Self::Legacy(GateKind::LegacyRollback) => "/rollback/check",
            Self::Legacy(_) => "/gate/check",
        }
    }
}

/// Flagger's check on `route`: the answer (200 open, 403 closed), or why
/// the request itself is refused.
pub(crate) async fn check(
    state: &AppState,
    route: CheckRoute<'_>,
    query: Option<&str>,
    body: &[u8],
) -> Result<Response, Reject> {
    match route {
        // A token in the path is the one asked for; `?token=` is not read then.
        CheckRoute::Canary { token, kind } => {
            let cluster = cluster(state, token, query.filter(|_| token.is_none()))?;
            of_canary(state, kind, cluster, body).await
        }
        CheckRoute::Scoped { token, kind, scope } => {
            let cluster = cluster(state, token, query.filter(|_| token.is_none()))?;
            scoped(state, kind, scope, cluster, body).await
        }
        CheckRoute::Legacy(kind) => {
            let cluster = cluster(state, None, query)?;
            let (key, input) = legacy_key(kind, cluster, body)?;
            // The loadtester's gate is the one `/gate/open` opens: never a PR's.
            Ok(respond(
                &key,
                state.engine.checks().check(&key, &input).await,
            ))
        }
    }
}

/// `/gates/{kind}/{*scope}`
pub async fn scoped_gate(
    State(state): State<AppState>,
    Path((kind, scope)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, Reject> {
    let route = CheckRoute::Scoped {
        token: None,
        kind: &kind,
        scope: &scope,
    };
    check(&state, route, query.as_deref(), &body).await
}

/// `/gates/t/{token}/{kind}/{*scope}`
pub async fn scoped_gate_with_token(
    State(state): State<AppState>,
    Path((token, kind, scope)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, Reject> {
    let route = CheckRoute::Scoped {
        token: Some(&token),
        kind: &kind,
        scope: &scope,
    };
    check(&state, route, None, &body).await
}

async fn scoped(
    state: &AppState,
    kind: &str,
    scope: &str,
    cluster: Option<ClusterName>,
    body: &[u8],
) -> Result<Response, Reject> {
    let kind = kind_of(kind)?;
    let segments: Vec<&str> = scope.trim_matches('/').split('/').collect();
    let key = GateKey::from_scope_segments(
        kind,
        &segments,
        state.engine.settings().default_repo.as_ref(),
    )
    .map_err(|e| Reject::bad_request("bad_gate", e.to_string()))?;
    let input = FlaggerBody::parse(body)?
        .unwrap_or_default()
        .input(cluster)?;
    if let Some(canary) = input.canary.as_ref().filter(|c| !key.admits(c)) {
        return Err(Reject::bad_request(
            "wrong_namespace",
            format!("{key} is the gate of {}; canary {canary} is not in it: point its webhook at /gates/{}/{}", key.subject(), key.kind, canary.namespace),
        ));
    }
    Ok(answer(state, &key, &input).await)
}

/// `/gates/{kind}`: scoped to the canary named in Flagger's body.
pub async fn canary_gate(
    State(state): State<AppState>,
    Path(kind): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, Reject> {
    let route = CheckRoute::Canary {
        token: None,
        kind: &kind,
    };
    check(&state, route, query.as_deref(), &body).await
}

/// `/gates/t/{token}/{kind}`
pub async fn canary_gate_with_token(
    State(state): State<AppState>,
    Path((token, kind)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, Reject> {
    let route = CheckRoute::Canary {
        token: Some(&token),
        kind: &kind,
    };
    check(&state, route, None, &body).await
}

async fn of_canary(
    state: &AppState,
    kind: &str,
    cluster: Option<ClusterName>,
    body: &[u8],
) -> Result<Response, Reject> {
    let kind = kind_of(kind)?;
    let input = FlaggerBody::parse(body)?
        .unwrap_or_default()
        .input(cluster)?;
    let Some(canary) = input.canary.clone() else {
        return Err(Reject::bad_request(
            "no_canary",
            format!("/gates/{kind} is scoped to the canary in Flagger's body, and this request names none"),
        ));
    };
    let key = GateKey::new(kind, Scope::Canary(canary));
    Ok(answer(state, &key, &input).await)
}

async fn answer(state: &AppState, key: &GateKey, input: &CheckInput) -> Response {
    // A canary's own gate may be its PR's ([kubernetes] lookup).
    respond(key, state.engine.origins().check_canary(key, input).await)
}

fn respond(
    key: &GateKey,
    checked: Result<crate::core::Checked, crate::core::CommandError>,
) -> Response {
    match checked {
        Ok(checked) => {
            let mut response = verdict_response(checked.verdict);
            if let Some(change) = checked.change {
                response.extensions_mut().insert(Changed(change));
            }
            response
        }
        // Closed is Flagger's safe default; a 5xx might be retried or alerted on.
        Err(e) => {
            tracing::warn!(gate = %key, error = %e, "gate check failed: answering closed");
            text(
                StatusCode::FORBIDDEN,
                &format!("closed: gatebot cannot read its store ({e})"),
            )
        }
    }
}

fn verdict_response(verdict: Verdict) -> Response {
    let status = match verdict.answer {
        Answer::Open => StatusCode::OK,
        Answer::Closed => StatusCode::FORBIDDEN,
    };
    // The reason becomes the body as it is: every check answers one.
    let mut line = verdict.reason;
    line.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        line,
    )
        .into_response()
}

fn text(status: StatusCode, line: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{line}\n"),
    )
        .into_response()
}

/// `POST /flagger/events`: hand the event to the intake, answer at once
/// (see [`events`]).
pub async fn event(
    State(state): State<AppState>,
    Extension(intake): Extension<EventIntake>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, Reject> {
    let cluster = cluster(&state, None, query.as_deref())?;
    let input = FlaggerBody::parse(&body)?
        .ok_or_else(|| Reject::bad_request("empty_body", "expected Flagger's event JSON"))?
        .input(cluster)?;
    let canary = input.canary.clone().ok_or_else(|| {
        Reject::bad_request("no_canary", "the event names no canary (name, namespace)")
    })?;
    // An event's message, type and time are kept as data, never a route.
    let said = input.metadata.recorded();
    let message = said.get("eventMessage").cloned().unwrap_or_default();
    let event_type = said
        .get("eventType")
        .cloned()
        .unwrap_or_else(|| "Normal".into());
    let flagger_at = said.get("timestamp").and_then(|t| t.parse().ok());
    let event = Event {
        canary,
        input,
        message,
        event_type,
        flagger_at,
    };
    Ok(match intake.take(event).await {
        Taken::Recorded(kind) => text(StatusCode::OK, &format!("recorded {}", kind.as_str())),
        Taken::Queued => text(
            StatusCode::ACCEPTED,
            "accepted: the store is slow to answer, so the event is kept and recorded in order as soon as it does",
        ),
        Taken::Full => {
            let mut r = Reject::unavailable(format!(
                "{} events are waiting for the store already: this one is not kept",
                events::QUEUED
            ))
            .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            r
        }
    })
}

// ---- the loadtester's gate API ----

fn legacy_key(
    kind: GateKind,
    cluster: Option<ClusterName>,
    body: &[u8],
) -> Result<(GateKey, CheckInput), Reject> {
    let input = FlaggerBody::parse(body)?
        .ok_or_else(|| {
            Reject::bad_request("empty_body", "expected a JSON body with name and namespace")
        })?
        .input(cluster)?;
    let canary = input.canary.clone().ok_or_else(|| {
        Reject::bad_request("no_canary", "the body names no canary (name, namespace)")
    })?;
    Ok((GateKey::new(kind, Scope::Canary(canary)), input))
}

/// `/gate/check`, `/rollback/check`
pub async fn legacy_check(
    State(state): State<AppState>,
    kind: GateKind,
    query: Option<String>,
    body: Bytes,
) -> Result<Response, Reject> {
    check(&state, CheckRoute::Legacy(kind), query.as_deref(), &body).await
}

/// `/gate/open`, `/gate/close`, `/rollback/open`, `/rollback/close`: 202 like the loadtester.
pub async fn legacy_set(
    State(state): State<AppState>,
    headers: HeaderMap,
    kind: GateKind,
    open: bool,
    body: Bytes,
) -> Result<Response, Reject> {
    let actor = if state.config.loadtester_open_access {
        admin(&state.config, &headers)
            .unwrap_or_else(|_| Actor::new("anonymous", Source::Loadtester))
    } else {
        admin(&state.config, &headers).map_err(|r| {
            Reject::new(
                r.status,
                r.reason,
                format!("{} (or set [loadtester] open_access = true for the loadtester's unauthenticated behaviour)", r.message),
            )
        })?
    };
    let (key, _) = legacy_key(kind, None, &body)?;
    let command = match open {
        true => Command::Open {
            kind,
            reason: None,
            force: false,
        },
        false => Command::Close { reason: None },
    };
    let request = Request {
        place: None,
        command,
        subject: Subject::Gate(key.clone()),
        who: Provenance::new(actor),
    };
    dispatch::run(&state.engine, "loadtester", &request, &Checked)
        .await
        .and_then(dispatch::Outcome::applied)
        .map_err(not_done)?;
    let word = if open { "opened" } else { "closed" };
    Ok(text(StatusCode::ACCEPTED, &format!("{key} {word}")))
}

/// The loadtester's answer to a change not made: a hold or a stale command
/// is a conflict, one no one may make (a policy's reason, which these routes
/// cannot carry) a bad request; the store, try again.
fn not_done(e: CommandError) -> Reject {
    let code = match &e {
        CommandError::Held { .. } => "held",
        CommandError::WrittenBeforeClose { .. } => "stale",
        CommandError::Invalid(_) => {
            let why =
                format!("{e} (these routes carry no reason: use POST /api/v1/gates/open with one)");
            return Reject::bad_request("invalid", why);
        }
        _ => return Reject::unavailable(e.to_string()),
    };
    Reject::new(StatusCode::CONFLICT, code, e.to_string())
}

pub async fn legacy_approve() -> Response {
    text(StatusCode::OK, "Approved")
}

pub async fn legacy_halt() -> Response {
    text(StatusCode::FORBIDDEN, "Forbidden")
}
