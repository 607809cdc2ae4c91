//! The one intake of a stored delivery that carries commands (a PR comment,
//! a button clicked in a PR's checks, in Slack or on a Teams card, an
//! approving or dismissed review) or starts a wait (a deployment's
//! protection request). The channel reads the delivery, has the core
//! authorize its commands (`dispatch::authorize`, with the channel's
//! authorizer; its calls out happen there, before any transaction), and
//! says in its own words what came of them ([`Said`]); the core decides,
//! writes that, settles the delivery and commits in one unit. No channel
//! opens a transaction (`tests/layering.rs`).

use std::collections::BTreeMap;
use std::fmt;

use super::awaited::Awaited;
use super::dispatch::{self, Authorized, Outcome, Request};
use super::unit::Unit;
use super::withdraw::Withdrawn;
use super::{Engine, Provenance};
use crate::gate::{GateKey, Millis, PrNumber, RepoName};
use crate::notify::{Lease, SendError};
use crate::store::{NewJob, ProtectionRequest, SlackDecision};

/// What a channel writes beside a delivery's outcome, in the same unit.
#[derive(Debug, Default)]
pub struct Said {
    /// Its replies and refreshes.
    pub jobs: Vec<NewJob>,
    /// Rows it reads back later (what a message or card shows).
    pub marks: Vec<Mark>,
}

impl Said {
    pub fn jobs(jobs: Vec<NewJob>) -> Self {
        Self {
            jobs,
            marks: Vec::new(),
        }
    }
}

/// A row a channel keeps about what was decided where it asked.
#[derive(Debug)]
pub enum Mark {
    /// Who decided a Slack message's wait, shown on its buttons.
    SlackDecision {
        wait_id: i64,
        decision: SlackDecision,
    },
    /// Who decided a Teams card's wait, and how.
    TeamsCard {
        wait_id: i64,
        verb: &'static str,
        by: String,
    },
    /// A pull request's author, learned from GitHub (four eyes in chat).
    PrAuthor {
        repo: RepoName,
        number: PrNumber,
        login: String,
    },
}

/// One line of a delivery, as the core takes it.
pub enum Asked<D> {
    /// A command, authorized by [`dispatch::authorize`] (where the channel's
    /// calls happen, before any transaction).
    Command {
        request: Box<Request>,
        authorized: Authorized<D>,
    },
    /// A line that runs nothing (an unknown word, `/help`): counted in
    /// `gatebot_commands_total` as `command` with `result`.
    Counted {
        command: String,
        result: &'static str,
    },
}

/// Decides a delivery's commands in order, then writes what `say` makes of
/// their outcomes (one per line, `None` for a counted one) and settles
/// `receipt`, all in one unit; the freezes in force are re-read when a
/// command changed them. `say` turns the outcomes into the rows and jobs to
/// write and whatever the channel does after the commit.
pub async fn take_all<D, T>(
    engine: &Engine,
    source: &'static str,
    asked: Vec<Asked<D>>,
    receipt: Option<&Lease>,
    say: impl FnOnce(Vec<Option<Outcome<D>>>, Millis) -> Result<(Said, T), SendError>,
) -> Result<T, SendError>
where
    D: fmt::Display,
{
    let mut unit = engine.begin().await?;
    let mut outcomes = Vec::with_capacity(asked.len());
    let mut froze = false;
    for line in asked {
        match line {
            Asked::Command {
                request,
                authorized,
            } => {
                let outcome = dispatch::decide(&mut unit, source, &request, authorized).await?;
                froze |= dispatch::changed_freezes(&outcome);
                outcomes.push(Some(outcome));
            }
            Asked::Counted { command, result } => {
                unit.count(source, &command, result);
                outcomes.push(None);
            }
        }
    }
    let (said, answer) = say(outcomes, unit.now())?;
    write(&mut unit, said, receipt).await?;
    unit.commit().await?;
    if froze {
        engine.reload_freezes().await?;
    }
    Ok(answer)
}

/// [`take_all`] for a delivery of one command.
pub async fn take<D, T>(
    engine: &Engine,
    source: &'static str,
    request: &Request,
    authorized: Authorized<D>,
    receipt: Option<&Lease>,
    say: impl FnOnce(Outcome<D>, Millis) -> Result<(Said, T), SendError>,
) -> Result<T, SendError>
where
    D: fmt::Display,
{
    let asked = vec![Asked::Command {
        request: Box::new(request.clone()),
        authorized,
    }];
    let say = |outcomes: Vec<Option<Outcome<D>>>, now| match outcomes.into_iter().next().flatten() {
        Some(outcome) => say(outcome, now),
        None => Err(SendError::Permanent("a command without an outcome".into())),
    };
    take_all(engine, source, asked, receipt, say).await
}

/// Writes `said` and settles `receipt` in a unit of their own: a delivery
/// that carries no command but is answered (a stale review).
pub async fn answer(engine: &Engine, said: Said, receipt: Option<&Lease>) -> Result<(), SendError> {
    let mut unit = engine.begin().await?;
    write(&mut unit, said, receipt).await?;
    Ok(unit.commit().await?)
}

/// Withdraws `person`'s approval at `key` (a dismissed review), counts it
/// as `command` withdrawn or used, and writes what `say` makes of it and
/// settles `receipt` in the same unit.
#[allow(clippy::too_many_arguments)]
pub async fn withdraw(
    engine: &Engine,
    source: &'static str,
    command: &str,
    key: &GateKey,
    person: &str,
    who: &Provenance,
    receipt: Option<&Lease>,
    say: impl FnOnce(&Withdrawn) -> Result<Said, SendError>,
) -> Result<(), SendError> {
    let mut unit = engine.begin().await?;
    let withdrawn = unit.withdraw(key, person, who).await?;
    match withdrawn {
        Withdrawn::Counted(_) => unit.count(source, command, "withdrawn"),
        Withdrawn::Used => unit.count(source, command, "used"),
        Withdrawn::Nothing => {}
    }
    write(&mut unit, say(&withdrawn)?, receipt).await?;
    Ok(unit.commit().await?)
}

/// Keeps a deployment's protection request (at `unit.now()`) and starts the
/// wait at its gate, then writes what `say` makes of it (an approval at once
/// when the gate is open) and settles `receipt`, in one unit. A redelivered
/// request changes nothing.
pub async fn protection_request(
    engine: &Engine,
    mut request: ProtectionRequest,
    reason: String,
    metadata: BTreeMap<String, String>,
    receipt: Option<&Lease>,
    say: impl FnOnce(&Awaited, Millis) -> Result<Said, SendError>,
) -> Result<(), SendError> {
    let mut unit = engine.begin().await?;
    request.requested_at = unit.now();
    let said = match unit.put_protection_request(&request).await? {
        true => {
            let awaited = unit.await_gate(&request.gate, reason, metadata).await?;
            say(&awaited, unit.now())?
        }
        false => Said::default(),
    };
    write(&mut unit, said, receipt).await?;
    Ok(unit.commit().await?)
}

async fn write(unit: &mut Unit<'_>, said: Said, receipt: Option<&Lease>) -> Result<(), SendError> {
    for mark in &said.marks {
        match mark {
            Mark::SlackDecision { wait_id, decision } => {
                unit.decide_slack_message(*wait_id, decision).await?
            }
            Mark::TeamsCard { wait_id, verb, by } => {
                unit.decide_teams_card(*wait_id, verb, by).await?
            }
            Mark::PrAuthor {
                repo,
                number,
                login,
            } => unit.learn_pr_author(repo, *number, login).await?,
        }
    }
    unit.enqueue(&said.jobs).await?;
    if let Some(lease) = receipt {
        unit.settle(lease.queue, &lease.claim()).await?;
    }
    Ok(())
}
