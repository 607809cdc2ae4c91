//! The one command path. Every intake (PR comments, Slack's slash command
//! and buttons, the web pages, the API and the CLI, the loadtester's routes,
//! the freeze API, and whatever comes next) hands a [`Request`] and its own
//! [`Authorizer`] to [`run`] (or [`authorize`] then [`decide`] in a larger
//! unit), and renders the [`Outcome`] in its own words. What a command means
//! at its gates, break glass, refusals and their audit entries, held gates,
//! stale commands and the count in `gatebot_commands_total` are decided here
//! once.

use std::fmt;

use serde::Serialize;

use super::commands::{
    apply_in, check_reason, forced_after_place, plan, Act, Applied, Plan, Subject,
};
use super::named::NamedError;
use super::tickets::{self, TicketPin};
use super::unit::Unit;
use super::{members, CommandError, Engine, Provenance};
use crate::command::{Command, Invalid, Verb};
use crate::gate::{GateKey, Group, Millis, Phase, Source};
use crate::metrics::CommandLabels;
use crate::notify::BoxFuture;
use crate::store::StoreError;

pub use super::commands::Rule;

/// A person's command, as a channel understood it.
#[derive(Debug, Clone)]
pub struct Request {
    pub command: Command,
    pub subject: Subject,
    /// Who, on which delivery, when (by the channel's signed time). The
    /// reason travels in the command.
    pub who: Provenance,
    /// With `[[environments]]`: the environment or cluster it is for, when the
    /// intake has a field for it (the CLI's `--env`). Chat commands name it as
    /// the first word after the command (`/promote production`).
    pub place: Option<String>,
}

/// What an authorizer answers: `Ok(Err(why))` refuses; `Err` means "cannot
/// tell now, try again".
pub type Answer<'a, D> = BoxFuture<'a, Result<Result<(), D>, CommandError>>;

/// What a channel knows about who may do what: GitHub permissions and teams,
/// Slack approvers, four eyes, a PR closed or pushed since the command, an
/// operator's token.
pub trait Authorizer: Send + Sync {
    /// Why a person was refused; its `Display` is the audit log's reason.
    type Denied: fmt::Display + Clone + Send + Sync;

    /// May the person do what `rule` governs at `keys`?
    fn authorize<'a>(&'a self, rule: Rule, keys: &'a [GateKey]) -> Answer<'a, Self::Denied>;
}

/// An authorizer for callers whose right was checked already (an operator's
/// token on the API, the loadtester's routes).
pub struct Checked;

impl Authorizer for Checked {
    type Denied = String;

    fn authorize<'a>(&'a self, _rule: Rule, _keys: &'a [GateKey]) -> Answer<'a, String> {
        Box::pin(async { Ok(Ok(())) })
    }
}

/// What came of a command. Everything but `Applied` changed nothing and was
/// audited at the gates it named.
#[derive(Debug)]
pub enum Outcome<D> {
    Applied(Applied),
    /// The channel's authorizer said no.
    Denied(D),
    /// No one may send it so (break glass without a reason, a freeze's reason).
    Invalid(Invalid),
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
    /// A named gate that cannot be created or retired so (another spec, retired,
    /// never created, past a quota).
    Named(NamedError),
}

impl<D: fmt::Display> Outcome<D> {
    /// The audit reason of a refusal; None when applied.
    fn refusal(&self) -> Option<String> {
        match self {
            Self::Applied(_) => None,
            Self::Denied(why) => Some(why.to_string()),
            Self::Invalid(why) => Some(why.to_string()),
            Self::Held { gate, by, via } => Some(format!("{gate} is held by {by} via {via}")),
            Self::WrittenBeforeClose { gate, closed_at } => Some(format!(
                "{gate} closed at {}, after this was sent",
                crate::gate::state::rfc3339(*closed_at)
            )),
            Self::Named(why) => Some(why.to_string()),
        }
    }
}

impl<D: fmt::Display> Outcome<D> {
    /// The change, or why it was not made, for channels that answer a
    /// refusal as an error (the API, the loadtester's routes).
    pub fn applied(self) -> Result<Applied, CommandError> {
        match self {
            Self::Applied(applied) => Ok(applied),
            Self::Denied(why) => Err(CommandError::Denied(why.to_string())),
            Self::Invalid(why) => Err(CommandError::Invalid(why)),
            Self::Held { gate, by, via } => Err(CommandError::Held { gate, by, via }),
            Self::WrittenBeforeClose { gate, closed_at } => {
                Err(CommandError::WrittenBeforeClose { gate, closed_at })
            }
            Self::Named(why) => Err(CommandError::Named(why)),
        }
    }
}

/// A command planned and asked about, before any transaction opens.
#[derive(Debug, Clone)]
pub struct Authorized<D> {
    plan: Result<Plan, Invalid>,
    verdict: Result<(), D>,
    /// The gates an invalid plan was about, once known (a missing reason):
    /// its refusal is audited there.
    about: Vec<GateKey>,
    /// The quorum rules' groups the person is in, for an approval.
    groups: Vec<Group>,
    /// The approved change it is given under.
    ticket: Option<TicketPin>,
    /// The command as the policy reads it, where that is not as the channel
    /// parsed it (break glass named after the environment).
    command: Option<Box<Command>>,
}

impl<D> Authorized<D> {
    /// The gates the command changes, or those a refused plan was about
    /// (none when it could not be placed).
    pub fn keys(&self) -> &[GateKey] {
        self.plan
            .as_ref()
            .map_or(&self.about, |p| p.keys.as_slice())
    }

    /// Why no one may send it, if no one may: known before the unit, so a
    /// channel can ask for what is missing (a reason) instead.
    pub fn invalid(&self) -> Option<&Invalid> {
        self.plan.as_ref().err()
    }

    /// As asked by a button, which carries no words: a missing reason or
    /// change is to be said in a comment.
    pub fn unspoken(mut self) -> Self {
        self.plan = self.plan.map_err(Invalid::unspoken);
        self
    }

    /// The command as the policy reads `request`'s.
    pub fn command_of<'a>(&'a self, request: &'a Request) -> &'a Command {
        self.command.as_deref().unwrap_or(&request.command)
    }

    /// Whether it may be applied.
    pub fn allowed(&self) -> bool {
        self.plan.is_ok() && self.verdict.is_ok()
    }

    /// Why the channel's authorizer said no, if it did: known before the
    /// unit opens, so a channel can word it beforehand.
    pub fn denied(&self) -> Option<&D> {
        self.verdict.as_ref().err()
    }
}

/// Plans, authorizes and applies one command in a unit of its own
/// ([`authorize`], then [`decide`]), tried again when a gate it changes was
/// locked. A store failure is for the caller to retry.
pub async fn run<A: Authorizer>(
    engine: &Engine,
    source: &'static str,
    request: &Request,
    authorizer: &A,
) -> Result<Outcome<A::Denied>, CommandError> {
    let authorized = authorize(engine, request, authorizer).await?;
    let outcome = engine
        .commands()
        .retrying(|| async {
            let mut unit = engine.commands().begin().await?;
            let outcome = decide(&mut unit, source, request, authorized.clone()).await?;
            unit.commit().await?;
            Ok(outcome)
        })
        .await?;
    if changed_freezes(&outcome) {
        engine.freezes().reload_freezes().await?;
    }
    Ok(outcome)
}

/// Whether the freezes in force changed: the check's copy is to be re-read.
pub fn changed_freezes<D>(outcome: &Outcome<D>) -> bool {
    matches!(outcome, Outcome::Applied(a) if matches!(a.act, Act::Freeze | Act::Unfreeze))
}

/// Plans the command and asks the channel whether the person may (network
/// calls happen here, before any transaction is open). A Reject whose intake
/// did not know Flagger's phase is judged by the gate's open wait.
pub async fn authorize<A: Authorizer>(
    engine: &Engine,
    request: &Request,
    authorizer: &A,
) -> Result<Authorized<A::Denied>, CommandError> {
    // Break glass is typed: only a chat command's words ask for it.
    let at = match &request.subject {
        Subject::Gate(k) => k.cluster.as_ref(),
        _ => None,
    };
    let envs = &engine.settings().environments;
    let placed = forced_after_place(envs, &request.command, at)
        .filter(|_| request.who.typed)
        .map(|command| Request {
            command,
            ..request.clone()
        });
    let request = placed.as_ref().unwrap_or(request);
    let phase = phase_of(engine, request).await?;
    let plan = match plan(&request.command, &request.subject, &phase) {
        Ok(plan) => engine.clusters().place_plan(plan, request).await?,
        Err(invalid) => Err(invalid),
    };
    let settings = engine.settings();
    // A plan refused for its reason alone is still asked about, so that one
    // who may not act is told so first, and a reason is asked only of those who may.
    let mut about = None;
    let plan = plan.and_then(|plan| {
        let (rules, envs) = (&settings.reasons, &settings.environments);
        let checked = check_reason(rules, envs, &plan, &request.command);
        if checked.is_err() {
            about = Some((plan.rule, plan.keys.clone()));
        }
        checked.map(|()| plan)
    });
    let verdict = match (&plan, &about) {
        (Ok(plan), _) => authorizer.authorize(plan.rule, &plan.keys).await?,
        (Err(_), Some((rule, keys))) => authorizer.authorize(*rule, keys).await?,
        (Err(_), None) => Ok(()),
    };
    let mut about = about.map(|(_, keys)| keys).unwrap_or_default();
    // An approval allowed so far: its change read, then its groups asked.
    let (mut groups, mut ticket) = (Vec::new(), None);
    let mut plan = plan;
    if let (Ok(opens), Ok(())) = (&plan, &verdict) {
        if opens.act == Act::Open && !request.who.force {
            match tickets::check(engine, opens, &request.command).await? {
                Ok(pin) => {
                    ticket = pin;
                    groups = members::groups_of(engine, &opens.keys, &request.who).await?;
                }
                // Refused for its change: audited at the gates it was about.
                Err(invalid) => {
                    about = opens.keys.clone();
                    plan = Err(invalid);
                }
            }
        }
    }
    Ok(Authorized {
        command: placed.map(|r| Box::new(r.command)),
        plan,
        verdict,
        about,
        groups,
        ticket,
    })
}

async fn phase_of(engine: &Engine, request: &Request) -> Result<Phase, CommandError> {
    let (Command::Reject { phase: None, .. }, Subject::Gate(key)) =
        (&request.command, &request.subject)
    else {
        return Ok(match &request.command {
            Command::Reject { phase: Some(p), .. } => p.clone(),
            _ => Phase::None,
        });
    };
    let waits = engine.store().waits().list(Some(key), true, 1).await?;
    Ok(waits
        .into_iter()
        .next()
        .map_or(Phase::None, |w| w.phase.clone()))
}

/// Applies an authorized command, or audits its refusal on every gate it
/// names, in `unit`; counts it either way once the unit commits.
pub async fn decide<D: fmt::Display>(
    unit: &mut Unit<'_>,
    source: &'static str,
    request: &Request,
    authorized: Authorized<D>,
) -> Result<Outcome<D>, CommandError> {
    let command = authorized.command.as_deref().unwrap_or(&request.command);
    let name = command.name();
    let keys = authorized.keys().to_vec();
    let outcome = match (authorized.plan, authorized.verdict) {
        (_, Err(denied)) => Outcome::Denied(denied),
        (Err(invalid), Ok(())) => Outcome::Invalid(invalid),
        (Ok(plan), Ok(())) => match apply_in(
            unit,
            command,
            &plan,
            &who_in(request, authorized.groups, authorized.ticket),
        )
        .await
        {
            Ok(applied) => Outcome::Applied(applied),
            Err(CommandError::Held { gate, by, via }) => Outcome::Held { gate, by, via },
            Err(CommandError::WrittenBeforeClose { gate, closed_at }) => {
                Outcome::WrittenBeforeClose { gate, closed_at }
            }
            Err(CommandError::Named(why)) => Outcome::Named(why),
            Err(e) => return Err(e),
        },
    };
    match outcome.refusal() {
        None => unit.count(source, name, "applied"),
        Some(why) => {
            refuse_in(unit, name, &keys, &request.who, &why).await?;
            unit.count(source, name, "refused");
        }
    }
    Ok(outcome)
}

/// The person with the groups they were found in, for their vote.
fn who_in(
    request: &Request,
    groups: Vec<Group>,
    ticket: Option<TicketPin>,
) -> std::borrow::Cow<'_, Provenance> {
    if groups.is_empty() && ticket.is_none() {
        return std::borrow::Cow::Borrowed(&request.who);
    }
    std::borrow::Cow::Owned(Provenance {
        groups,
        ticket,
        ..request.who.clone()
    })
}

/// Audits and counts a refusal of `command` on each of `keys` ("refused
/// /promote: …"), in a unit of its own: for a channel that refuses before
/// it stores the command (Slack's slash command, whose sender is no approver).
pub async fn refuse(
    engine: &Engine,
    source: &'static str,
    command: &str,
    keys: &[GateKey],
    who: &Provenance,
    why: &str,
) -> Result<(), CommandError> {
    let mut unit = engine.commands().begin().await?;
    refuse_in(&mut unit, command, keys, who, why).await?;
    unit.count(source, command, "refused");
    Ok(unit.commit().await?)
}

/// [`refuse`] in a larger unit. A delivery refused before is not audited twice.
pub async fn refuse_in(
    unit: &mut Unit<'_>,
    command: &str,
    keys: &[GateKey],
    who: &Provenance,
    why: &str,
) -> Result<(), StoreError> {
    let who = who
        .clone()
        .reason(Some(format!("refused /{command}: {why}")));
    for key in keys {
        unit.refuse(key, &who).await?;
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
/// about one gate, so they are no [`Verb`]).
pub fn help() -> Vec<HelpEntry> {
    let mut entries: Vec<HelpEntry> = Verb::ALL
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
