//! Approve, Reject, Hold and Release from a page: the same command path as a
//! PR comment or a Slack click (`core::dispatch`), audited with source `web`.
//! Every form carries the session's CSRF token; Approve and Reject ask for a
//! confirmation first. Who may act is the [`Authority`]'s to say (GitHub's
//! permission, teams and four eyes for the person's login); the admin token's
//! operators may act as the API may.

use std::fmt;

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::session::{Session, Via};
use super::view::Viewer;
use super::{gate_path, render, Problem};
use crate::command::{Command, Verb};
use crate::config::UiMode;
use crate::core::commands::{rollback_of, Subject};
use crate::core::dispatch::{self, Answer, Authorizer, Outcome, Request, Rule};
use crate::core::{AppState, Provenance};
use crate::gate::{Actor, CanaryRef, GateKey, GateKind, Source};
use crate::notify::{BoxFuture, SendError};

/// Who may run a command as a GitHub login: built in bootstrap from GitHub's
/// rules (repository permission, teams, four eyes, the policy).
pub trait Authority: Send + Sync {
    /// `Ok(Err(why))` refuses; `Err` means "cannot tell now".
    fn authorize<'a>(
        &'a self,
        login: &'a str,
        rule: Rule,
        keys: &'a [GateKey],
    ) -> BoxFuture<'a, Result<Result<(), String>, SendError>>;
}

/// The command word Approve runs at a gate of this kind.
pub fn approve_command(kind: GateKind) -> Verb {
    Verb::opening(kind)
}

/// The rollback gate a Reject at `key` opens, as the page shows it (the
/// core decides it when the Reject is sent, by the canary's phase).
pub fn reject_target(key: &GateKey) -> Option<GateKey> {
    rollback_of(key, &crate::gate::Phase::None)
}

/// The page's rules for one person.
struct WebAuthorizer<'a> {
    state: &'a AppState,
    viewer: &'a Viewer,
    session: &'a Session,
}

/// Why the page refused.
#[derive(Debug, Clone)]
pub struct Denied(String);

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Authorizer for WebAuthorizer<'_> {
    type Denied = Denied;

    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, Denied> {
        Box::pin(async move {
            if self.viewer.web.mode != UiMode::On {
                return Ok(Err(Denied(
                    "this server's pages are read-only (GATEBOT_UI=read-only)".into(),
                )));
            }
            if self.session.via == Via::Admin {
                // An operator with a token, as on the API. The session ended
                // already if its token is no longer configured (`session::who`).
                return Ok(if self.state.config.has_operators() {
                    Ok(())
                } else {
                    Err(Denied("this server no longer has an operator token".into()))
                });
            }
            let Some(authority) = &self.viewer.web.authority else {
                return Ok(Err(Denied(format!(
                    "gatebot cannot check @{}'s GitHub permission: it has no GitHub credentials (GATEBOT_GITHUB_TOKEN or a GitHub App)",
                    self.session.login
                ))));
            };
            Ok(authority
                .authorize(&self.session.login, rule, keys)
                .await?
                .map_err(Denied))
        })
    }
}

/// Whether the viewer may run `command` at `key` (for showing its button).
pub async fn may_act(state: &AppState, viewer: &Viewer, verb: Verb, key: &GateKey) -> bool {
    let Some(session) = &viewer.session else {
        return false;
    };
    let authorizer = WebAuthorizer {
        state,
        viewer,
        session,
    };
    match authorizer
        .authorize(Rule::Verb(verb), std::slice::from_ref(key))
        .await
    {
        Ok(verdict) => verdict.is_ok(),
        Err(e) => {
            tracing::debug!(error = %e, "cannot tell whether to show a button");
            false
        }
    }
}

/// The form's token must be the session's (constant-time).
pub fn check_csrf(session: &Session, given: &str) -> Result<(), Problem> {
    if given.is_empty() {
        return Err(Problem::forbidden(
            "refused: this form carries no CSRF token (reload the page and try again)",
        ));
    }
    if !bool::from(given.as_bytes().ct_eq(session.csrf.as_bytes())) {
        return Err(Problem::forbidden(
            "refused: this form's CSRF token is not your session's (reload the page and try again)",
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Approve,
    Reject,
    Hold,
    Release,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Self::Approve => "Approve",
            Self::Reject => "Reject",
            Self::Hold => "Hold",
            Self::Release => "Release",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ActForm {
    gate: String,
    action: Action,
    /// The canary and revision the person saw waiting: an approval is pinned
    /// to them, so it never opens a newer revision.
    #[serde(default)]
    canary: String,
    #[serde(default)]
    revision: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    csrf: String,
    /// "yes" once the confirmation page was answered.
    #[serde(default)]
    confirmed: String,
}

#[derive(Serialize)]
struct ConfirmPage<'a> {
    base: super::view::Base<'a>,
    form: &'a ActForm,
    word: &'static str,
    gate_url: String,
    rollback: Option<String>,
}

pub async fn act(
    State(state): State<AppState>,
    viewer: Viewer,
    Form(form): Form<ActForm>,
) -> Result<Response, Problem> {
    let Some(session) = viewer.session.clone() else {
        return Err(Problem::forbidden(
            "refused: sign in to act (the pages are read-only without sign-in)",
        ));
    };
    check_csrf(&session, &form.csrf)?;
    let default_repo = state.config.github.repository.as_ref();
    let key = GateKey::parse(&form.gate, default_repo)
        .map_err(|e| Problem::bad_request(format!("no such gate: {e}")))?;
    let reason = Some(form.reason.trim().to_string()).filter(|r| !r.is_empty());
    let command = match form.action {
        Action::Approve => Command::Open {
            kind: key.kind,
            reason,
            force: false,
        },
        Action::Reject => Command::Reject {
            phase: None,
            reason,
        },
        Action::Hold => Command::Hold { reason },
        Action::Release => Command::Unhold { reason },
    };
    let confirm = matches!(form.action, Action::Approve | Action::Reject);
    if confirm && form.confirmed != "yes" {
        return render(
            &state,
            "confirm.html.j2",
            ConfirmPage {
                base: viewer.base(gate_path(&key)),
                form: &form,
                word: form.action.word(),
                gate_url: gate_path(&key),
                rollback: (form.action == Action::Reject)
                    .then(|| reject_target(&key))
                    .flatten()
                    .map(|k| k.to_string()),
            },
        );
    }
    let mut who = Provenance::new(Actor::new(session.login.clone(), Source::Web));
    if form.action == Action::Approve && !form.revision.trim().is_empty() {
        if let Ok(canary) = form.canary.trim().parse::<CanaryRef>() {
            who = who.revision(canary, form.revision.trim());
        }
    }
    let request = Request {
        command,
        subject: Subject::Gate(key.clone()),
        who,
    };
    let authorizer = WebAuthorizer {
        state: &state,
        viewer: &viewer,
        session: &session,
    };
    let outcome = dispatch::run(&state.engine, "web", &request, &authorizer)
        .await
        .map_err(|e| Problem::unavailable(format!("not done, try again: {e}")))?;
    match outcome {
        Outcome::Applied(_) => Ok(Redirect::to(&gate_path(&key)).into_response()),
        Outcome::Denied(why) => Err(Problem::forbidden(format!("refused: {why}"))),
        Outcome::Invalid(why) => Err(Problem::bad_request(format!("refused: {why}"))),
        refused => Err(Problem::new(
            StatusCode::CONFLICT,
            "Not done",
            refusal(&refused),
        )),
    }
}

fn refusal(outcome: &Outcome<Denied>) -> String {
    match outcome {
        Outcome::Held { gate, by, via } => {
            format!("{gate} is held by {by} via {via}: release it first")
        }
        Outcome::WrittenBeforeClose { gate, closed_at } => format!(
            "{gate} closed at {}, after this page was shown: look again",
            crate::gate::state::rfc3339(*closed_at)
        ),
        Outcome::Applied(_) => "done".into(),
        Outcome::Denied(why) => why.to_string(),
        Outcome::Invalid(why) => why.to_string(),
    }
}
