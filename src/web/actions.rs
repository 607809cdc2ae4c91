//! Approve, Reject, Hold and Release from a page: the same command path as a
//! PR comment or a Slack click (`core::dispatch`), audited with source `web`.
//! Every form carries the session's CSRF token; Approve and Reject ask for a
//! confirmation first. Who may act is `permit`'s to say (GitHub's
//! permission, teams and four eyes for the person's login); the admin token's
//! operators may act as the API may.

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::permit::{reject_target, Denied, WebAuthorizer};
use super::session::{Session, Via};
use super::view::Viewer;
use super::{gate_path, render, Problem};
use crate::command::Command;
use crate::core::commands::Subject;
use crate::core::dispatch::{self, Outcome, Request};
use crate::core::{AppState, Provenance};
use crate::gate::{Actor, CanaryRef, GateKey, Source};

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
    if session.via != Via::Admin {
        // A GitHub login (signed in with GitHub, or by a proxy as [users]
        // lists it): the person in the quorum rules' groups. A token's name
        // is no login.
        who = who.person(session.login.clone());
    }
    if form.action == Action::Approve && !form.revision.trim().is_empty() {
        if let Ok(canary) = form.canary.trim().parse::<CanaryRef>() {
            who = who.revision(canary, form.revision.trim());
        }
    }
    let request = Request {
        place: None,
        command,
        subject: Subject::Gate(key.clone()),
        who,
    };
    let authorizer = WebAuthorizer {
        state: &state,
        web: &viewer.web,
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
        Outcome::Named(why) => why.to_string(),
    }
}
