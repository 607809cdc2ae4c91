//! The one command path. Every channel (PR comments, Slack's slash command,
//! and whatever comes next) hands a [`Request`] and its own [`Authorizer`] to
//! [`run`], and renders the [`Outcome`] in its own words. Authorization,
//! refusals and their audit entries, held gates and stale commands are decided
//! here once.

use std::fmt;

use serde::Serialize;

use super::commands::{apply_in, gates_for, Applied, Subject};
use super::unit::Unit;
use super::{Engine, EngineError, Provenance};
use crate::command::Command;
use crate::gate::{GateKey, Millis, Source};
use crate::metrics::CommandLabels;
use crate::notify::{BoxFuture, SendError};
use crate::store::StoreError;

/// A person's command, as a channel understood it.
#[derive(Debug, Clone)]
pub struct Request {
    pub command: Command,
    pub subject: Subject,
    /// Who, on which delivery, when (by the channel's signed time), and why.
    pub who: Provenance,
}

/// What a channel knows about who may do what: GitHub permissions and teams,
/// Slack approvers, four eyes, a PR closed or pushed since the command.
pub trait Authorizer: Send + Sync {
    /// Why a person was refused; its `Display` is the audit log's reason.
    type Denied: fmt::Display + Send;

    /// `Ok(Err(why))` refuses; `Err` means "cannot tell now, try again".
    fn authorize<'a>(
        &'a self,
        command: Command,
        keys: &'a [GateKey],
    ) -> BoxFuture<'a, Result<Result<(), Self::Denied>, SendError>>;
}

/// What came of a command. Everything but `Applied` changed no gate and was audited.
#[derive(Debug)]
pub enum Outcome<D> {
    Applied(Applied),
    /// The channel's authorizer said no.
    Denied(D),
    /// A hold stands in the way; lifting it is the person's next step.
    Held {
        gate: GateKey,
        by: String,
        via: Source,
    },
    /// Sent before the gate's last close, so it was about what came before.
    WrittenBeforeClose {
        gate: GateKey,
        closed_at: Millis,
    },
}

impl<D: fmt::Display> Outcome<D> {
    /// The audit reason of a refusal; None when applied.
    fn refusal(&self) -> Option<String> {
        match self {
            Self::Applied(_) => None,
            Self::Denied(why) => Some(why.to_string()),
            Self::Held { gate, by, via } => Some(format!("{gate} is held by {by} via {via}")),
            Self::WrittenBeforeClose { gate, closed_at } => Some(format!(
                "{gate} closed at {}, after this was sent",
                crate::gate::state::rfc3339(*closed_at)
            )),
        }
    }
}

/// Authorizes and applies one command in a unit of its own ([`authorize`],
/// then [`decide`]). A store failure is for the caller to retry.
pub async fn run<A: Authorizer>(
    engine: &Engine,
    source: &'static str,
    request: &Request,
    authorizer: &A,
) -> Result<Outcome<A::Denied>, SendError> {
    let verdict = authorize(request, authorizer).await?;
    let mut unit = engine.begin().await.map_err(store)?;
    let outcome = decide(&mut unit, source, request, verdict).await?;
    unit.commit().await.map_err(store)?;
    Ok(outcome)
}

/// Asks the channel whether the person may (network calls happen here,
/// before any transaction is open).
pub async fn authorize<A: Authorizer>(
    request: &Request,
    authorizer: &A,
) -> Result<Result<(), A::Denied>, SendError> {
    let keys = gates_for(request.command, &request.subject);
    authorizer.authorize(request.command, &keys).await
}

/// Applies an authorized command, or audits its refusal on every gate it
/// names, in `unit`.
pub async fn decide<D: fmt::Display>(
    unit: &mut Unit<'_>,
    source: &'static str,
    request: &Request,
    verdict: Result<(), D>,
) -> Result<Outcome<D>, SendError> {
    let command = request.command;
    let outcome = match verdict {
        Err(denied) => Outcome::Denied(denied),
        Ok(()) => match apply_in(unit, command, &request.subject, &request.who).await {
            Ok(applied) => Outcome::Applied(applied),
            Err(EngineError::Held { gate, by, via }) => Outcome::Held { gate, by, via },
            Err(EngineError::WrittenBeforeClose { gate, closed_at }) => {
                Outcome::WrittenBeforeClose { gate, closed_at }
            }
            Err(EngineError::Store(e)) => return Err(store(e)),
        },
    };
    match outcome.refusal() {
        None => unit.count(source, command.as_str(), "applied"),
        Some(why) => {
            let keys = gates_for(command, &request.subject);
            refuse_in(unit, command, &keys, &request.who, &why).await?;
            unit.count(source, command.as_str(), "refused");
        }
    }
    Ok(outcome)
}

fn store(e: StoreError) -> SendError {
    SendError::retry(format!("store: {e}"))
}

/// Audits a refusal of `command` on each of `keys` ("refused /promote: …"),
/// in a unit of its own.
pub async fn refuse(
    engine: &Engine,
    command: Command,
    keys: &[GateKey],
    who: &Provenance,
    why: &str,
) -> Result<(), SendError> {
    let mut unit = engine.begin().await.map_err(store)?;
    refuse_in(&mut unit, command, keys, who, why).await?;
    unit.commit().await.map_err(store)
}

/// [`refuse`] in a larger unit. A delivery refused before is not audited twice.
pub async fn refuse_in(
    unit: &mut Unit<'_>,
    command: Command,
    keys: &[GateKey],
    who: &Provenance,
    why: &str,
) -> Result<(), SendError> {
    let who = who
        .clone()
        .reason(Some(format!("refused /{command}: {why}")));
    for key in keys {
        unit.refuse(key, &who).await.map_err(store)?;
    }
    Ok(())
}

/// Counts a command by source and result (`gatebot_commands_total`).
pub fn count(engine: &Engine, source: &'static str, command: &str, result: &'static str) {
    engine
        .metrics
        .commands
        .get_or_create(&CommandLabels {
            source,
            command: command.to_string(),
            result,
        })
        .inc();
}

/// One line of `help`, for every channel's help template.
#[derive(Debug, Clone, Serialize)]
pub struct HelpEntry {
    pub name: &'static str,
    pub description: &'static str,
}

/// Every command, in the order help lists them; freezes last (they are not
/// about one gate, so they are no [`Command`]).
pub fn help() -> Vec<HelpEntry> {
    let mut entries: Vec<HelpEntry> = Command::ALL
        .iter()
        .map(|c| HelpEntry {
            name: c.as_str(),
            description: c.description(),
        })
        .collect();
    entries.push(HelpEntry {
        name: "freeze",
        description: "freeze changes, so that start, promote and traffic gates answer closed: `for 2h` or `until <time>` (optional), then a reason",
    });
    entries.push(HelpEntry {
        name: "unfreeze",
        description: "lift a freeze",
    });
    entries
}
