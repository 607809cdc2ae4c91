//! `POST /api/v1/gates` and `DELETE /api/v1/gates/{kind}/named/{name}`: gates
//! a pipeline creates, announces at once, and retires when it is done.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use crate::command::Command;
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Checked, Outcome, Request};
use crate::core::named::{Named, NamedError};
use crate::core::{AppState, CommandError, Provenance};
use crate::gate::{GateKey, GateKind, GateName, PrNumber, RepoName, Scope};
use crate::http::auth::{pipeline, Caller};
use crate::http::error::Reject;
use crate::store::{Link, NamedSpec};

/// At most this many links, each at most `MAX_URL` bytes.
const MAX_LINKS: usize = 10;
const MAX_URL: usize = 2000;
/// Titles and link texts, in characters.
const MAX_TEXT: usize = 200;
/// What one gate's title, links, channel and PR may take together, as the
/// JSON they are stored in: each copy (the gate, its announcement, the Slack
/// message) stays this small (README, "Limits and guarantees").
pub const MAX_SPEC_BYTES: usize = 2048;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    kind: String,
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    links: Vec<LinkBody>,
    #[serde(default)]
    slack_channel: Option<String>,
    /// `owner/repo#42`, or `#42` / `42` in the default repository.
    #[serde(default)]
    pr: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum LinkBody {
    Url(String),
    Link(Link),
}

fn bad(reason: &'static str, message: impl Into<String>) -> Reject {
    Reject::bad_request(reason, message)
}

fn text(field: &str, value: Option<String>) -> Result<Option<String>, Reject> {
    let Some(value) = value
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    if value.chars().count() > MAX_TEXT || value.chars().any(char::is_control) {
        return Err(bad(
            "bad_text",
            format!("{field} must be one line of at most {MAX_TEXT} characters"),
        ));
    }
    Ok(Some(value))
}

fn link(body: LinkBody) -> Result<Link, Reject> {
    let (url, label) = match body {
        LinkBody::Url(url) => (url, None),
        LinkBody::Link(l) => (l.url, l.text),
    };
    let url = url.trim().to_string();
    // Shown as a Slack link `<url|text>`: none of its delimiters may be inside.
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= MAX_URL
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | '|'));
    if !ok {
        return Err(bad(
            "bad_link",
            format!(
                "links must be http(s) URLs of at most {MAX_URL} bytes, without spaces, <, > or |"
            ),
        ));
    }
    Ok(Link {
        text: text("a link's text", label)?,
        url,
    })
}

fn pr(text: &str, default_repo: Option<&RepoName>) -> Result<(RepoName, PrNumber), Reject> {
    let refuse = || {
        bad(
            "bad_pr",
            format!("`{text}` is not a pull request: write owner/repo#42"),
        )
    };
    let (repo, number) = match text.trim().split_once('#') {
        Some(("", n)) => (None, n),
        Some((repo, n)) => (Some(repo), n),
        None => (None, text.trim()),
    };
    let number: PrNumber = number.parse().map_err(|_| refuse())?;
    let repo = match repo {
        Some(r) => r.parse().map_err(|_| refuse())?,
        None => default_repo.cloned().ok_or_else(|| {
            bad("bad_pr", format!("`{text}` needs a repository: write owner/repo#{number} or set GATEBOT_GITHUB_REPOSITORY"))
        })?,
    };
    Ok((repo, number))
}

fn channel(value: Option<String>) -> Result<Option<String>, Reject> {
    let Some(c) = value
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
    else {
        return Ok(None);
    };
    let ok = c.len() <= 80
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'#' | b'-' | b'_' | b'.'));
    if !ok {
        return Err(bad(
            "bad_channel",
            "slack_channel must be a channel id (C…) or #name",
        ));
    }
    Ok(Some(c))
}

fn created_json(n: &Named) -> serde_json::Value {
    let key = n.gate.key.to_string();
    json!({
        "gate": key,
        // Flagger's webhook URL is gatebot's address followed by this path.
        "url": key,
        "api": format!("/api/v1{key}"),
        "created": n.created,
        "state": n.gate,
        "named": n.named,
        "retired": n.named.retired_at.is_some(),
    })
}

pub(super) fn named_reject(e: NamedError) -> Reject {
    match e {
        NamedError::NotNamed { .. } => bad("not_named", e.to_string()),
        NamedError::Conflict { .. } => Reject::new(StatusCode::CONFLICT, "conflict", e.to_string()),
        NamedError::Retired { .. } => Reject::new(StatusCode::CONFLICT, "retired", e.to_string()),
        NamedError::NotFound { .. } => Reject::not_found(e.to_string()),
        NamedError::Quota { .. } => {
            Reject::new(StatusCode::TOO_MANY_REQUESTS, "quota", e.to_string())
        }
    }
}

/// Runs a pipeline's create or retire through the one command path (the
/// token was checked already); the gate it names, or the answer to give.
async fn run(
    state: &AppState,
    caller: Caller,
    command: Command,
    key: GateKey,
) -> Result<Named, Response> {
    let request = Request {
        place: None,
        command,
        subject: Subject::Gate(key),
        who: Provenance::new(caller.actor),
    };
    let source = request.who.actor.source.as_str();
    dispatch::run(&state.engine, source, &request, &Checked)
        .await
        .and_then(Outcome::applied)
        .map_err(named_answer)?
        .named
        .map(|named| *named)
        .ok_or_else(|| Reject::unavailable("the command changed no gate").into_response())
}

/// A refusal past a quota carries when to ask again.
fn named_answer(e: CommandError) -> Response {
    let retry_after = match &e {
        CommandError::Named(NamedError::Quota { retry_after, .. }) => {
            Some(retry_after.as_secs().max(1))
        }
        _ => None,
    };
    let mut response = super::reject(e).into_response();
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// The whole spec within `MAX_SPEC_BYTES`.
fn within_size(spec: &NamedSpec) -> Result<(), Reject> {
    let size = serde_json::to_vec(spec).map_or(usize::MAX, |v| v.len());
    if size > MAX_SPEC_BYTES {
        return Err(bad(
            "too_large",
            format!("a named gate's title, links, slack_channel and pr take at most {MAX_SPEC_BYTES} bytes together (as JSON); these take {size}"),
        ));
    }
    Ok(())
}

/// `POST /api/v1/gates`: 201 created, 200 the same gate again, 409 a different one.
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Reject> {
    let caller = pipeline(&state.config, &headers)?;
    let body: CreateBody = serde_json::from_slice(&body).map_err(|e| {
        bad(
            "malformed_json",
            format!("expected {{\"kind\": \"promote\", \"name\": \"release-2026-12-01\", \"title\": \"…\", \"links\": [\"https://…\"], \"slack_channel\": \"C…\", \"pr\": \"owner/repo#42\"}}: {e}"),
        )
    })?;
    let kind = GateKind::from_route(&body.kind).ok_or_else(|| {
        bad(
            "bad_kind",
            format!(
                "unknown gate kind `{}`: use start, promote, traffic or rollback",
                body.kind.chars().take(32).collect::<String>()
            ),
        )
    })?;
    let name = GateName::new(&body.name).map_err(|e| bad("bad_name", e.to_string()))?;
    if body.links.len() > MAX_LINKS {
        return Err(bad("bad_link", format!("at most {MAX_LINKS} links")));
    }
    let default_repo = state.engine.settings().default_repo.clone();
    let spec = NamedSpec {
        title: text("title", body.title)?,
        links: body.links.into_iter().map(link).collect::<Result<_, _>>()?,
        slack_channel: channel(body.slack_channel)?,
        pr: body
            .pr
            .as_deref()
            .map(|p| pr(p, default_repo.as_ref()))
            .transpose()?,
    };
    within_size(&spec)?;
    let key = GateKey::new(kind, Scope::Named(name));
    let reason = caller.reason(None);
    let command = Command::Create { spec, reason };
    let named = match run(&state, caller, command, key).await {
        Ok(named) => named,
        Err(answer) => return Ok(answer),
    };
    let status = if named.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(created_json(&named))).into_response())
}

/// `DELETE /api/v1/gates/{kind}/named/{name}`: retires the gate (held, its
/// waits ended). Retiring it again is the same answer.
pub async fn retire(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, Reject> {
    let caller = pipeline(&state.config, &headers)?;
    let key = GateKey::parse(&key, state.engine.settings().default_repo.as_ref())
        .map_err(|e| bad("bad_gate", e.to_string()))?;
    if !matches!(key.scope, Scope::Named(_)) {
        return Err(named_reject(NamedError::NotNamed { key }));
    }
    let reason = caller.reason(None);
    match run(&state, caller, Command::Retire { reason }, key).await {
        Ok(named) => Ok(Json(created_json(&named)).into_response()),
        Err(answer) => Ok(answer),
    }
}
