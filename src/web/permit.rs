//! Who may act from a page, and which buttons a gate has: the page's
//! [`Authorizer`] for the one command path, used by the actions and, to show
//! a button, by the views.

use std::fmt;

use super::session::{Session, Via};
use super::Web;
use crate::command::Verb;
use crate::config::UiMode;
use crate::core::commands::rollback_of;
use crate::core::dispatch::{Answer, Authorizer, Rule};
use crate::core::{AppState, CommandError};
use crate::gate::{GateKey, GateKind};
use crate::notify::BoxFuture;

/// Who may run a command as a GitHub login: built in bootstrap from GitHub's
/// rules (repository permission, teams, four eyes, the policy).
pub trait Authority: Send + Sync {
    /// `Ok(Err(why))` refuses; `Err` means "cannot tell now".
    fn authorize<'a>(
        &'a self,
        login: &'a str,
        rule: Rule,
        keys: &'a [GateKey],
    ) -> BoxFuture<'a, Result<Result<(), String>, CommandError>>;
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
pub(super) struct WebAuthorizer<'a> {
    pub(super) state: &'a AppState,
    pub(super) web: &'a Web,
    pub(super) session: &'a Session,
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
            if self.web.mode != UiMode::On {
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
            let Some(authority) = &self.web.authority else {
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
pub async fn may_act(
    state: &AppState,
    web: &Web,
    session: Option<&Session>,
    verb: Verb,
    key: &GateKey,
) -> bool {
    let Some(session) = session else {
        return false;
    };
    let authorizer = WebAuthorizer {
        state,
        web,
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
