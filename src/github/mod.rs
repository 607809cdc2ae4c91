//! GitHub: webhook receiver, commands on pull requests, status comments.
//!
//! - [`verify`]: `X-Hub-Signature-256`, before anything reads the body.
//! - [`routes`]: `POST /webhooks/github` stores relevant deliveries and answers 202.
//! - [`inbox`]: works stored deliveries: authorizes and applies commands.
//! - [`sink`]: the `github` outbox sink: reactions, replies, the status comment.
//! - [`checks`]: check runs with buttons; `clicks`: clicks on them.
//! - `reviews`: an approving review as `/promote`, when the policy says so.
//! - `protection`: gatebot as an environment's deployment protection rule.
//! - [`client`]: the REST calls (reqwest), with rate-limit aware errors.
//! - [`app`]: GitHub App authentication (JWT, installation tokens).
//! - [`redeliver`]: asks GitHub to deliver again what gatebot had to refuse.

pub mod access;
pub mod app;
pub mod checks;
mod clicks;
pub mod client;
mod comment;
pub mod deployments;
pub mod events;
pub mod inbox;
mod protection;
mod protection_requests;
pub mod pulls;
pub mod pushes;
pub mod redeliver;
mod reply;
mod reviews;
pub mod routes;
pub mod sink;
pub mod status;
pub mod verify;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use axum::Router;

use crate::clock::SharedClock;
use crate::command::Verb;
use crate::config::Config;
use crate::core::authors::AuthorLookup;
use crate::core::intake::Inbox;
use crate::core::SinkBase;
use crate::core::{AppState, CommandError};
use crate::evidence::Evidence;
use crate::gate::{PrNumber, RepoName};
use crate::metrics::Metrics;
use crate::notify::{BoxFuture, SendError};
use crate::notify::{Handler, Outbox, Sink};
use client::GithubClient;

/// The inbox source name.
pub const SOURCE: &str = "github";
/// The outbox sink's name, as metrics label what it dropped.
pub const SINK: &str = "github";

/// Every comment gatebot writes starts with this, so it never reads its own
/// comments as commands even when it cannot learn its own login.
pub const MARKER: &str = "<!-- gatebot -->";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/webhooks/github", post(routes::webhook))
        .layer(DefaultBodyLimit::max(crate::http::GITHUB_BODY_LIMIT))
}

/// The one GitHub client (and installation-token cache) of a replica; None
/// without credentials.
pub fn client(
    config: &Config,
    metrics: &Metrics,
    clock: SharedClock,
) -> anyhow::Result<Option<Arc<GithubClient>>> {
    let client = GithubClient::from_config(&config.github, metrics.outbound(SOURCE), clock)?;
    Ok(client.map(Arc::new))
}

impl AuthorLookup for GithubClient {
    fn author<'a>(
        &'a self,
        repo: &'a RepoName,
        number: PrNumber,
    ) -> BoxFuture<'a, Result<Option<String>, CommandError>> {
        Box::pin(async move {
            match self.pull(repo, number).await {
                Ok(pull) => Ok(pull.user.map(|u| u.login).filter(|l| !l.is_empty())),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(unanswered(e.to_send_error())),
            }
        })
    }
}

/// GitHub's failure to answer, in the core's terms.
pub(crate) fn unanswered(e: SendError) -> CommandError {
    match e {
        SendError::Retry { after, message } => CommandError::unanswered(message, after),
        SendError::Permanent(message) => CommandError::unanswerable(message),
        SendError::Transient(message) => CommandError::unanswered(message, None),
    }
}

/// The store could not be written or read for now: try again later (for as
/// long as it takes when its failure passes, see `SendError::Transient`).
fn retry(e: crate::store::StoreError) -> SendError {
    e.into()
}

/// A command not done, in the outbox's terms: given up when trying again
/// cannot help, tried again (when GitHub said, at that time) otherwise.
pub(crate) fn send_error(e: CommandError) -> SendError {
    e.into()
}

pub fn sinks(
    client: Option<&Arc<GithubClient>>,
    base: &SinkBase<'_>,
    policy: &crate::policy::Policy,
    evidence: &Arc<Evidence>,
) -> Vec<Arc<dyn Sink>> {
    let Some(client) = client else {
        return Vec::new();
    };
    let SinkBase {
        config,
        records,
        templates,
        clock,
        metrics,
    } = *base;
    vec![Outbox::sink(sink::GithubSink::new(
        client.clone(),
        sink::SinkParts {
            records: records.clone(),
            templates: templates.clone(),
            clock: clock.clone(),
            allowed: config.github.allowed_repositories.clone(),
            burst: config.limits.notify_burst,
            metrics: metrics.clone(),
            check_runs: config.github.check_runs_on(),
            deployments: config.github.deployments,
            public_url: config.public_url.clone(),
            policy: policy.clone(),
            api_url: config.github.api_url.clone(),
            evidence: evidence.clone(),
        },
    ))]
}

pub fn inbox_handlers(
    state: &AppState,
    client: Option<&Arc<GithubClient>>,
) -> HashMap<String, Arc<dyn Handler>> {
    let Some(client) = client else {
        return HashMap::new();
    };
    let policy = state.policy.clone();
    let inbox = inbox::GithubInbox::new(state.clone(), client.clone(), policy);
    HashMap::from([(SOURCE.to_string(), Inbox::handler(inbox))])
}

/// A comment gatebot wrote.
pub fn is_own_comment(body: &str) -> bool {
    body.contains("<!-- gatebot")
}

/// A command word written somewhere a command does not count (a quote, code,
/// mid-line), for the hint that it was not run. None when there is none.
pub fn quoted_command(body: &str) -> Option<&'static str> {
    let bytes = body.as_bytes();
    for (i, _) in body.match_indices('/') {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'/' || b == b'.') {
            continue;
        }
        let rest = &body[i + 1..];
        let end = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        if let Some(c) = Verb::parse_word(&rest[..end]) {
            return Some(c.as_str());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::Templates;

    #[test]
    fn quoted_commands_are_found_and_paths_are_not() {
        assert_eq!(quoted_command("> /promote"), Some("promote"));
        assert_eq!(quoted_command("run `/promote` later"), Some("promote"));
        assert_eq!(
            quoted_command("see https://x.io/promote and a/status"),
            None
        );
        assert_eq!(quoted_command("/usr/bin"), None);
        assert_eq!(quoted_command("é/promote"), Some("promote"));
    }

    #[test]
    fn templates_render() {
        let t = Templates::new(None).unwrap();
        let out = t
            .render(
                "github/reply.md.j2",
                serde_json::json!({"marker": MARKER, "author": "bob", "lines": [{"command": "/promote", "message": "no"}]}),
            )
            .unwrap();
        assert!(out.starts_with(MARKER), "{out}");
        assert!(out.contains("- `/promote`: no"), "{out}");
    }
}
