//! `POST /webhooks/github`: verify, keep what matters, store, acknowledge.
//! Nothing here calls GitHub or changes a gate; the inbox worker does that.
//! Deliveries are stored under an id made of signed fields (the comment's id
//! and `updated_at`), never the unsigned `X-GitHub-Delivery` header, so a
//! captured delivery re-sent under a new header is a duplicate.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use secrecy::ExposeSecret;

use super::events::{
    CheckRunEvent, DeploymentProtectionRuleEvent, IssueCommentEvent, PullRequestEvent,
    PullRequestReviewEvent, Repository,
};
use super::protection::callback_path;
use super::verify::verify;
use super::{is_own_comment, SOURCE};
use crate::config::GithubConfig;
use crate::core::{dispatch, AppState};
use crate::gate::Millis;
use crate::http::error::Reject;
use crate::http::receipts::Receipts;
use crate::policy::ApprovingReview;
use crate::store::Delivery;

pub async fn webhook(
    State(state): State<AppState>,
    Extension(receipts): Extension<Receipts>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match receive(&state, &receipts, &headers, &body).await {
        Ok(r) => r,
        Err(r) => r.into_response(),
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response {
    (status, format!("{}\n", message.into())).into_response()
}

fn ignored(why: impl std::fmt::Display) -> Response {
    text(StatusCode::OK, format!("ignored: {why}"))
}

/// What a delivery comes to: stored to be worked, or answered at once.
enum Received {
    Work { id: String, payload: String },
    Answer(Response),
}

async fn receive(
    state: &AppState,
    receipts: &Receipts,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, Reject> {
    authenticate(&state.config.github, headers, body)?;
    let (event, guid) = event_and_guid(headers)?;
    let json = json_of(headers, body)?;
    let body = json.as_ref();
    let received = match event {
        "ping" => return Ok(text(StatusCode::OK, "pong")),
        "issue_comment" => issue_comment(state, body)?,
        "pull_request" => pull_request(state, body)?,
        "check_run" => check_run(state, body)?,
        "pull_request_review" => review(state, body)?,
        "deployment_protection_rule" => protection(state, body)?,
        other => return Ok(ignored(format_args!("gatebot does not use {other} events"))),
    };
    let (signed_id, payload) = match received {
        Received::Work { id, payload } => (id, payload),
        Received::Answer(answer) => return Ok(answer),
    };
    let delivery = Delivery {
        source: SOURCE.to_string(),
        delivery: signed_id.clone(),
        kind: event.to_string(),
        payload,
    };
    if !receipts
        .store(delivery)
        .await
        .map_err(Reject::unavailable)?
    {
        // A redelivery, or a replay under a new header: it ran (or runs) once.
        tracing::info!(delivery = guid, id = %signed_id, "duplicate GitHub delivery");
        return Ok(text(StatusCode::OK, "duplicate delivery"));
    }
    tracing::debug!(delivery = guid, id = %signed_id, "GitHub delivery stored");
    Ok(text(StatusCode::ACCEPTED, "accepted"))
}

/// The delivery's JSON: the body itself, or with the content type
/// `application/x-www-form-urlencoded` (the default in GitHub's hook form)
/// its `payload` field. The signature was checked over the bytes received.
fn json_of<'a>(headers: &HeaderMap, body: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, Reject> {
    let form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !form {
        return Ok(std::borrow::Cow::Borrowed(body));
    }
    // The content type is not signed: a JSON delivery sent again as a form
    // must not yield a `payload` someone wrote into a comment. GitHub's form
    // is `payload=…` and nothing else, so anything more is refused.
    let mut pairs = form_urlencoded::parse(body);
    match (body.starts_with(b"payload="), pairs.next(), pairs.next()) {
        (true, Some((key, json)), None) if key == "payload" => {
            Ok(std::borrow::Cow::Owned(json.into_owned().into_bytes()))
        }
        _ => Err(Reject::bad_request(
            "malformed_payload",
            "a form-encoded delivery is `payload=<JSON>` and nothing else, as GitHub sends it",
        )),
    }
}

/// GitHub is configured, and the delivery is signed with its webhook secret.
fn authenticate(gh: &GithubConfig, headers: &HeaderMap, body: &[u8]) -> Result<(), Reject> {
    let secret = secret(gh)?;
    verify(secret.expose_secret(), signature_header(headers), body).map_err(unsigned)
}

fn secret(gh: &GithubConfig) -> Result<&secrecy::SecretString, Reject> {
    let Some(secret) = &gh.webhook_secret else {
        return Err(Reject::not_configured(
            "GitHub",
            "GATEBOT_GITHUB_WEBHOOK_SECRET and GATEBOT_GITHUB_TOKEN (or a GitHub App)",
        ));
    };
    if gh.token.is_none() && gh.app_id.is_none() {
        return Err(Reject::not_configured(
            "GitHub",
            "GATEBOT_GITHUB_TOKEN, or GATEBOT_GITHUB_APP_ID and GATEBOT_GITHUB_APP_PRIVATE_KEY",
        ));
    }
    Ok(secret)
}

fn signature_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
}

fn unsigned(e: super::verify::VerifyError) -> Reject {
    Reject::new(
        StatusCode::UNAUTHORIZED,
        e.reason(),
        super::verify::message(e),
    )
}

/// Middleware, before the body is read: a request that can't be a delivery
/// of GitHub's (GitHub not configured here, no event, no signature of the
/// form `sha256=<64 hex>`) is refused without taking one of GitHub's body
/// readers. Only the signature's match needs the body.
pub async fn headers_first(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let checked = secret(&state.config.github)
        .and_then(|_| super::verify::signature(signature_header(headers)).map_err(unsigned))
        .and_then(|_| event_and_guid(headers).map(|_| ()));
    match checked {
        Ok(()) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// The event's name and GitHub's delivery id (unsigned, so only logged:
/// deliveries are keyed by what GitHub signs).
fn event_and_guid(headers: &HeaderMap) -> Result<(&str, &str), Reject> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let event = header("x-github-event").unwrap_or("").trim();
    if event.is_empty() {
        return Err(Reject::bad_request(
            "missing_event",
            "missing X-GitHub-Event",
        ));
    }
    let guid = header("x-github-delivery").unwrap_or("").trim();
    if guid.is_empty() || guid.len() > 128 {
        return Err(Reject::bad_request(
            "missing_delivery",
            "missing or malformed X-GitHub-Delivery",
        ));
    }
    Ok((event, guid))
}

fn malformed(e: serde_json::Error) -> Reject {
    Reject::bad_request("malformed_json", format!("malformed JSON: {e}"))
}

/// None when the repository may send commands; else the answer that ignores it.
fn not_allowed(gh: &GithubConfig, repository: &Repository) -> Option<Response> {
    let allowed = gh.allowed_repositories.is_empty()
        || repository
            .name()
            .is_some_and(|r| gh.allowed_repositories.contains(&r));
    (!allowed).then(|| {
        ignored(format_args!(
            "{} is not in GATEBOT_GITHUB_ALLOWED_REPOSITORIES",
            repository.full_name
        ))
    })
}

/// A new or edited comment on a pull request that may hold a command.
fn issue_comment(state: &AppState, body: &[u8]) -> Result<Received, Reject> {
    let e: IssueCommentEvent = serde_json::from_slice(body).map_err(malformed)?;
    let comment = e.comment.body.as_deref().unwrap_or("");
    if !matches!(e.action.as_str(), "created" | "edited") {
        return Ok(Received::Answer(ignored(format_args!(
            "issue_comment {}",
            e.action
        ))));
    }
    if !e.on_pull_request() {
        return Ok(Received::Answer(ignored(
            "comment on an issue, not a pull request",
        )));
    }
    if let Some(answer) = not_allowed(&state.config.github, &e.repository) {
        return Ok(Received::Answer(answer));
    }
    // No slash, no command (quoted or not): nothing to store.
    if !comment.contains('/') || is_own_comment(comment) {
        return Ok(Received::Answer(ignored("no command")));
    }
    let Some(id) = e.signed_id() else {
        return Err(Reject::bad_request(
            "malformed_comment",
            "comment.id or comment.updated_at (an RFC 3339 UTC time) is missing: commands are keyed by them",
        ));
    };
    too_old(state, e.written_at())?;
    let payload = serde_json::to_string(&e).map_err(malformed)?;
    Ok(Received::Work { id, payload })
}

/// A push to or the close of a pull request, which closes its gates.
fn pull_request(state: &AppState, body: &[u8]) -> Result<Received, Reject> {
    let e: PullRequestEvent = serde_json::from_slice(body).map_err(malformed)?;
    if !matches!(e.action.as_str(), "synchronize" | "closed") {
        return Ok(Received::Answer(ignored(format_args!(
            "pull_request {}",
            e.action
        ))));
    }
    if let Some(answer) = not_allowed(&state.config.github, &e.repository) {
        return Ok(Received::Answer(answer));
    }
    too_old(state, e.signed_at())?;
    let payload = serde_json::to_string(&e).map_err(malformed)?;
    Ok(Received::Work {
        id: e.signed_id(),
        payload,
    })
}

/// A click on one of a check run's buttons ([github] check_runs).
fn check_run(state: &AppState, body: &[u8]) -> Result<Received, Reject> {
    let e: CheckRunEvent = serde_json::from_slice(body).map_err(malformed)?;
    if e.action != "requested_action" {
        return Ok(Received::Answer(ignored(format_args!(
            "check_run {}",
            e.action
        ))));
    }
    if !state.config.github.check_runs_on() {
        return Ok(Received::Answer(ignored(
            "check runs are off ([github] check_runs, with a GitHub App)",
        )));
    }
    if let Some(answer) = not_allowed(&state.config.github, &e.repository) {
        return Ok(Received::Answer(answer));
    }
    let Some(id) = e.signed_id() else {
        return Err(Reject::bad_request(
            "malformed_check_run",
            "check_run.id, requested_action.identifier or sender.login is missing",
        ));
    };
    let payload = serde_json::to_string(&e).map_err(malformed)?;
    Ok(Received::Work { id, payload })
}

/// An approving review, or the dismissal of one, when the policy counts
/// approving reviews as `/promote`; acknowledged and counted otherwise.
fn review(state: &AppState, body: &[u8]) -> Result<Received, Reject> {
    let e: PullRequestReviewEvent = serde_json::from_slice(body).map_err(malformed)?;
    if !e.approved() && !e.dismissed() {
        return Ok(Received::Answer(ignored(format_args!(
            "pull_request_review {} ({})",
            e.action, e.review.state
        ))));
    }
    if state.policy.approving_review() != ApprovingReview::Promote {
        dispatch::count(&state.engine, SOURCE, "review", "ignored");
        return Ok(Received::Answer(ignored(
            "approving reviews count for nothing: the policy's [github] approving_review is off",
        )));
    }
    if let Some(answer) = not_allowed(&state.config.github, &e.repository) {
        return Ok(Received::Answer(answer));
    }
    let Some(id) = e.signed_id() else {
        return Err(Reject::bad_request(
            "malformed_review",
            "review.id, review.submitted_at (an RFC 3339 UTC time) or pull_request.number is missing",
        ));
    };
    // A dismissal signs no time of its own: only an approval can be too old.
    if e.approved() {
        too_old(state, e.submitted_at())?;
    }
    let payload = serde_json::to_string(&e).map_err(malformed)?;
    Ok(Received::Work { id, payload })
}

/// A workflow run's deployment to an environment that waits for gatebot
/// (`[[github.protection]]`). A callback URL that is not the repository's
/// own on the configured API is refused (422, counted): it is never posted to.
fn protection(state: &AppState, body: &[u8]) -> Result<Received, Reject> {
    let e: DeploymentProtectionRuleEvent = serde_json::from_slice(body).map_err(malformed)?;
    if e.action != "requested" {
        return Ok(Received::Answer(ignored(format_args!(
            "deployment_protection_rule {}",
            e.action
        ))));
    }
    if let Some(answer) = not_allowed(&state.config.github, &e.repository) {
        return Ok(Received::Answer(answer));
    }
    if state.policy.protection_gate(&e.environment).is_none() {
        return Ok(Received::Answer(ignored(format_args!(
            "no [[github.protection]] table of the policy names the environment `{}`",
            e.environment.escape_debug()
        ))));
    }
    let Some((repo, _)) = e.pr() else {
        return Ok(Received::Answer(ignored(
            "the deployment is of no pull request: gatebot approves deployments of pull requests",
        )));
    };
    let (Some(id), Some(_)) = (e.signed_id(), e.created_at()) else {
        return Err(Reject::bad_request(
            "malformed_protection_rule",
            "deployment.id, deployment.created_at (an RFC 3339 UTC time) or deployment_callback_url is missing",
        ));
    };
    if let Err(why) = callback_path(
        &state.config.github.api_url,
        &e.deployment_callback_url,
        &repo,
    ) {
        return Err(Reject::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "foreign_callback",
            format!("deployment_callback_url refused: {why}"),
        ));
    }
    too_old(state, e.created_at())?;
    let payload = serde_json::to_string(&e).map_err(malformed)?;
    Ok(Received::Work { id, payload })
}

/// Delivery ids are forgotten after `[limits] retention_deliveries`, so what
/// GitHub signed longer ago than that is refused: a replay of it cannot run
/// again once its id is gone.
fn too_old(state: &AppState, signed_at: Option<Millis>) -> Result<(), Reject> {
    let window = state.config.limits.retention_deliveries;
    let oldest = state.clock.now_ms() - window.as_millis() as Millis;
    match signed_at {
        Some(at) if at < oldest => Err(Reject::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_old",
            format!(
                "signed more than {} ago ([limits] retention_deliveries): too old to act on",
                humantime::format_duration(window)
            ),
        )),
        _ => Ok(()),
    }
}
