//! Approvals tied to change requests (the policy's `[change]`). In mode
//! `reference` a command that opens a gate under the rule names an approved
//! change, read from its system before the unit opens; the approval carries
//! its number and link and ends with its window. In mode `create` gatebot
//! opens a change for each vouched wait under the rule ([`tend`]), opens the
//! gate when the change is approved, holds it when it is rejected, and
//! closes the change when Flagger promotes or rolls back.

use super::commands::{environment_of, Plan, Subject};
use super::dispatch::{self, Checked, Request};
use super::{CommandError, Engine, Provenance};
use crate::change::{CallError, ChangeClient, Draft};
use crate::command::{Command, Invalid, Verb};
use crate::gate::ticket::{ChangeRule, Decision, Mode};
use crate::gate::{Actor, CanaryRef, GateKey, Millis, Source};
use crate::store::tickets::{state, TicketRow};

/// The change an approval was given under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketPin {
    pub number: String,
    pub link: String,
    /// Its window's end: the approval ends then.
    pub until: Millis,
}

impl TicketPin {
    /// "change CHG0031337 (https://…), window until …", for the reason.
    pub fn describe(&self) -> String {
        format!(
            "change {} ({}), window until {}",
            self.number,
            self.link,
            crate::gate::state::rfc3339(self.until)
        )
    }
}

/// The change a command that opens gates under the rule names, checked
/// with its system: Ok(None) when no gate of `plan` is under the rule.
pub async fn check(
    engine: &Engine,
    plan: &Plan,
    command: &Command,
) -> Result<Result<Option<TicketPin>, Invalid>, CommandError> {
    let settings = engine.settings();
    let Some(rule) = settings
        .change
        .as_ref()
        .filter(|r| r.mode == Mode::Reference)
    else {
        return Ok(Ok(None));
    };
    let Some(key) = covered(rule, engine, &plan.keys) else {
        return Ok(Ok(None));
    };
    let place = environment_of(&settings.environments, key);
    let Some(number) = command.reason().and_then(|text| rule.number_in(text)) else {
        return Ok(Err(Invalid::ChangeRequired {
            verb: Verb::opening(key.kind).to_string(),
            place,
            example: rule.example(),
        }));
    };
    let Some(system) = engine.change_system.get() else {
        return Ok(Err(Invalid::ChangeNotReady(
            "no change system is set up (GATEBOT_CHANGE_USER)".into(),
        )));
    };
    let now = engine.now();
    let answer = match system.read(&number).await {
        Ok(ticket) => match ticket.allows(now, rule.service.as_deref()) {
            Ok(until) => Ok(Some(TicketPin {
                number,
                link: ticket.link,
                until,
            })),
            Err(why) => Err(Invalid::ChangeNotReady(why.0)),
        },
        Err(CallError::NotFound) => Err(Invalid::ChangeNotReady(format!(
            "{} has no change {number}",
            rule.provider.name()
        ))),
        Err(e) => {
            tracing::warn!(change = %number, error = %e, "change not read");
            Err(Invalid::ChangeNotReady(e.to_string()))
        }
    };
    Ok(answer)
}

/// The first gate of `keys` under the rule.
fn covered<'k>(rule: &ChangeRule, engine: &Engine, keys: &'k [GateKey]) -> Option<&'k GateKey> {
    let envs = &engine.settings().environments;
    keys.iter()
        .find(|k| rule.covers(k.kind, environment_of(envs, k).as_deref()))
}

/// How many tickets one pass reads or closes, oldest first: a pass stays
/// short, and the rest come at the next.
const PER_PASS: i64 = 100;

/// How long a closed ticket is kept, and how long a claim may go unanswered
/// (a replica that died mid-call) before it is tried again.
const KEEP_CLOSED: Millis = 30 * 24 * 3_600_000;
const STALE_CLAIM: Millis = 10 * 60_000;

/// One pass over the changes gatebot opens (mode `create`): a change for
/// each wait under the rule that a Flagger token vouched for; each open one
/// read, its gate opened when it allows, held when it was rejected; those
/// Flagger is done with moved to their end state. A change system that does
/// not answer leaves everything as it was, for the next pass.
pub async fn tend(engine: &Engine) -> Result<(), CommandError> {
    let (Some(rule), Some(system)) = (
        engine
            .settings()
            .change
            .as_ref()
            .filter(|r| r.mode == Mode::Create),
        engine.change_system.get(),
    ) else {
        return Ok(());
    };
    open_changes(engine, rule, system).await?;
    follow_changes(engine, rule, system).await?;
    close_changes(engine, system).await?;
    let now = engine.now();
    engine
        .store()
        .tickets()
        .prune_tickets(now - KEEP_CLOSED, now - STALE_CLAIM)
        .await?;
    Ok(())
}

/// A change for each vouched wait under the rule that has none.
async fn open_changes(
    engine: &Engine,
    rule: &ChangeRule,
    system: &ChangeClient,
) -> Result<(), CommandError> {
    let tickets = engine.store().tickets();
    let envs = &engine.settings().environments;
    for wait in engine.store().waits().list(None, true, PER_PASS).await? {
        let Some(canary) = wait.canary.as_ref() else {
            continue;
        };
        // A check alone is Flagger's unauthenticated claim: only a wait a
        // Flagger token vouched for opens anything outside.
        let under = rule.covers(wait.gate.kind, environment_of(envs, &wait.gate).as_deref());
        if !under || wait.cluster.is_none() {
            continue;
        }
        let now = engine.now();
        let canary = canary.to_string();
        if !tickets
            .claim_ticket(&wait.gate, &canary, &wait.checksum, now)
            .await?
        {
            continue;
        }
        let row = TicketRow {
            gate: wait.gate.clone(),
            canary,
            checksum: wait.checksum.clone(),
            number: String::new(),
            state: state::CREATING.into(),
            successful: false,
            changed_at: now,
        };
        match system.create(&draft(rule, &row, wait.started_at)).await {
            Ok(number) => {
                tracing::info!(change = %number, gate = %row.gate, canary = %row.canary, "change opened");
                tickets.ticket_made(&row, &number, engine.now()).await?;
            }
            Err(e) => {
                tracing::warn!(gate = %row.gate, canary = %row.canary, error = %e, "change not opened; trying again at the next pass");
                tickets.unclaim_ticket(&row).await?;
            }
        }
    }
    Ok(())
}

/// What a change gatebot opens says: the canary, its revision and gate.
/// Names come from Flagger's side: they are data in the text, and the
/// change system shows them as text.
fn draft(rule: &ChangeRule, row: &TicketRow, started: Millis) -> Draft {
    let revision: String = row.checksum.chars().take(12).collect();
    Draft {
        summary: format!("Promote {} to revision {revision}", row.canary),
        description: format!(
            "Flagger waits at {} for canary {} at revision {}.\n\
             Approve this change to open the gate; gatebot closes it when Flagger promotes or rolls back.",
            row.gate, row.canary, row.checksum
        ),
        service: rule.service.clone(),
        window: (started, started + rule.window),
    }
}

/// Each open change read: its gate opened once it allows, held once rejected.
async fn follow_changes(
    engine: &Engine,
    rule: &ChangeRule,
    system: &ChangeClient,
) -> Result<(), CommandError> {
    let tickets = engine.store().tickets();
    for row in tickets.tickets_in(state::OPEN, PER_PASS).await? {
        let ticket = match system.read(&row.number).await {
            Ok(ticket) => ticket,
            Err(e) => {
                tracing::warn!(change = %row.number, error = %e, "change not read; the wait goes on");
                continue;
            }
        };
        let now = engine.now();
        match ticket.allows(now, rule.service.as_deref()) {
            Ok(until) => {
                let pin = TicketPin {
                    number: row.number.clone(),
                    link: ticket.link.clone(),
                    until,
                };
                if act(engine, &row, Act::Open(pin)).await? {
                    tickets
                        .move_ticket(&row, &[state::OPEN], state::OPENED, None, now)
                        .await?;
                }
            }
            Err(why) if ticket.decision == Decision::Rejected || ticket.closed => {
                if act(engine, &row, Act::Hold(why.0)).await? {
                    tickets
                        .move_ticket(&row, &[state::OPEN], state::REJECTED, None, now)
                        .await?;
                }
            }
            // Not yet approved, or its window has not begun: the wait goes on.
            Err(_) => {}
        }
    }
    Ok(())
}

/// What a change does to its gate.
enum Act {
    Open(TicketPin),
    Hold(String),
}

/// Opens or holds the ticket's gate through the one command path, as the
/// change: pinned to the canary and revision it was opened for. False when
/// it was refused (a hold, a freeze), to be tried at the next pass.
async fn act(engine: &Engine, row: &TicketRow, act: Act) -> Result<bool, CommandError> {
    let actor = Actor::new(row.number.clone(), Source::Gatebot);
    let mut who = Provenance::new(actor);
    if let Ok(canary) = row.canary.parse::<CanaryRef>() {
        who = who.revision(canary, row.checksum.clone());
    }
    let command = match act {
        Act::Open(pin) => {
            let reason = format!("change {} approved", row.number);
            who.ticket = Some(pin);
            Command::Open {
                kind: row.gate.kind,
                reason: Some(reason),
                force: false,
            }
        }
        Act::Hold(why) => Command::Hold { reason: Some(why) },
    };
    let request = Request {
        command,
        subject: Subject::Gate(row.gate.clone()),
        who,
        place: None,
    };
    let outcome = dispatch::run(engine, "change", &request, &Checked).await?;
    if let dispatch::Outcome::Applied(_) = outcome {
        return Ok(true);
    }
    tracing::info!(change = %row.number, gate = %row.gate, outcome = ?outcome, "the change's gate was not changed; trying again at the next pass");
    Ok(false)
}

/// Those Flagger is done with, moved to their end state.
async fn close_changes(engine: &Engine, system: &ChangeClient) -> Result<(), CommandError> {
    let tickets = engine.store().tickets();
    for row in tickets.tickets_in(state::CLOSING, PER_PASS).await? {
        let notes = if row.successful {
            format!(
                "Flagger promoted {} at revision {}.",
                row.canary, row.checksum
            )
        } else {
            format!(
                "Flagger rolled {} back from revision {}.",
                row.canary, row.checksum
            )
        };
        match system.close(&row.number, row.successful, &notes).await {
            Ok(()) => {
                tracing::info!(change = %row.number, successful = row.successful, "change closed");
                tickets
                    .move_ticket(&row, &[state::CLOSING], state::CLOSED, None, engine.now())
                    .await?;
            }
            Err(e) => {
                tracing::warn!(change = %row.number, error = %e, "change not closed; trying again at the next pass");
            }
        }
    }
    Ok(())
}
