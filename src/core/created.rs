//! The changes gatebot opens (`[change] mode = "create"`): one for each
//! wait under the rule that a Flagger token vouched for; the gate opened when
//! the change is approved, held when it is rejected; the change closed when
//! Flagger promotes or rolls back.

use std::collections::HashSet;

use super::commands::Subject;
use super::dispatch::{self, Checked, Request};
use super::tickets::TicketPin;
use super::{CommandError, Engine, Provenance};
use crate::change::{CallError, ChangeClient, Draft};
use crate::command::Command;
use crate::evidence::Evidence;
use crate::gate::ticket::{ChangeRule, Decision, Mode};
use crate::gate::{Actor, CanaryRef, GateStatus, Group, Millis, Scope, Source};
use crate::store::tickets::{state, TicketRow};
use crate::store::WaitRow;

/// How many tickets one pass reads or closes, least recently read first
/// (each read moves it to the back), and how many changes it opens: a pass
/// stays short, and the rest come at the next ones.
const PER_PASS: i64 = 100;
const OPENED_PER_PASS: usize = 20;

/// How many waits a pass looks at: more than the store keeps open.
const WAITS: i64 = 10_000;

/// How long a closed ticket is kept, and how long a claim whose change may
/// or may not have been opened (a timeout, a replica that died mid-call)
/// waits before it is tried again: at most one more change per claim and
/// per that while the change system misbehaves.
const KEEP_CLOSED: Millis = 30 * 24 * 3_600_000;
/// How long a change's canary may be gone before the change is closed.
const GONE_AFTER: Millis = 3_600_000;
const STALE_CLAIM: Millis = 10 * 60_000;

/// One pass over the changes gatebot opens (mode `create`): a change for
/// each wait under the rule that a Flagger token vouched for; each open one
/// read, its gate opened when it allows, held when it was rejected, closed
/// when its wait ended without it; those Flagger is done with moved to their
/// end state. The change system down or limiting ends the pass, to be tried
/// at the next.
pub async fn tend(engine: &Engine, about: &About<'_>) -> Result<(), CommandError> {
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
    let waits = engine.store().waits().list(None, true, WAITS).await?;
    let waiting = Waiting::of(&waits);
    let pass = async {
        open_changes(engine, rule, system, about, &waits).await?;
        follow_changes(engine, rule, system, &waiting).await?;
        retire_changes(engine, &waiting).await?;
        close_changes(engine, system).await
    };
    match pass.await {
        Ok(()) => {}
        Err(Stop::Store(e)) => return Err(e),
        Err(Stop::Unreachable(e)) => {
            tracing::warn!(error = %e, "the change system can't be reached; the pass ends, and the waits go on");
        }
    }
    let now = engine.now();
    engine
        .store()
        .tickets()
        .prune_tickets(now - KEEP_CLOSED, now - STALE_CLAIM)
        .await?;
    Ok(())
}

/// Why a pass ends early.
enum Stop {
    Store(CommandError),
    /// The change system is down or limiting: asking it more now only adds load.
    Unreachable(CallError),
}

impl From<CommandError> for Stop {
    fn from(e: CommandError) -> Self {
        Self::Store(e)
    }
}

impl From<crate::store::StoreError> for Stop {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Store(e.into())
    }
}

/// What a change gatebot opens shows beyond the wait: the canary's numbers
/// and where the gate's page is.
pub struct About<'a> {
    pub evidence: &'a Evidence,
    /// `GATEBOT_PUBLIC_URL`, for the link to the gate's page.
    pub public_url: Option<&'a str>,
}

impl About<'_> {
    /// The canary's numbers, read now when no pass has read them yet (at most
    /// [`OPENED_PER_PASS`] reads a pass, each bounded by Prometheus's timeout).
    async fn numbers(&self, canary: &CanaryRef, wait: &WaitRow, now: Millis) -> Option<String> {
        if !self.evidence.is_on() {
            return None;
        }
        if self.evidence.line_of(canary).is_none() {
            let metadata = crate::evidence::strings(&wait.metadata);
            self.evidence.fetch(canary, &metadata, now).await;
        }
        self.evidence.line_of(canary)
    }
}

/// A change for each vouched wait under the rule that has none.
async fn open_changes(
    engine: &Engine,
    rule: &ChangeRule,
    system: &ChangeClient,
    about: &About<'_>,
    waits: &[WaitRow],
) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    let envs = &engine.settings().environments;
    let mut opened = 0;
    for wait in waits {
        let Some(canary) = wait.canary.as_ref() else {
            continue;
        };
        // A check alone is Flagger's unauthenticated claim: only a wait a
        // Flagger token vouched for opens anything outside.
        let under = rule.covers_gate(&wait.gate, envs);
        let Some(cluster) = wait.cluster.as_ref().filter(|_| under && wait.vouched) else {
            continue;
        };
        if opened == OPENED_PER_PASS {
            return Ok(());
        }
        let now = engine.now();
        let row = TicketRow {
            gate: wait.gate.clone(),
            canary: canary.to_string(),
            checksum: wait.checksum.clone(),
            cluster: cluster.to_string(),
            number: String::new(),
            state: state::CREATING.into(),
            successful: false,
            changed_at: now,
            seen_at: now,
        };
        if !tickets.claim_ticket(&row, now).await? {
            continue;
        }
        opened += 1;
        // A claim stays until the change is known: a failure may have opened
        // it anyway (an answer lost to a timeout), so it is tried again only
        // once the claim is stale.
        let numbers = about.numbers(canary, wait, now).await;
        let draft = draft(rule, &row, wait.started_at, numbers, about.public_url);
        match system.create(&draft).await {
            Ok(number) if rule.is_number(&number) => {
                tracing::info!(change = %number, gate = %row.gate, canary = %row.canary, "change opened");
                tickets.ticket_made(&row, &number, engine.now()).await?;
            }
            Ok(number) => {
                tracing::error!(change = ?number, "the change system answered a number unlike its own; not followed");
            }
            Err(e @ CallError::Unreachable { .. }) => return Err(Stop::Unreachable(e)),
            Err(e) => {
                tracing::warn!(gate = %row.gate, canary = %row.canary, error = %e, "change not opened");
            }
        }
    }
    Ok(())
}

/// What a change gatebot opens says: the canary, its revision, gate and
/// numbers, and a link to the gate's page. Names come from Flagger's side:
/// they are data in the text, and the change system shows them as text.
fn draft(
    rule: &ChangeRule,
    row: &TicketRow,
    started: Millis,
    numbers: Option<String>,
    public_url: Option<&str>,
) -> Draft {
    let revision: String = shown(&row.checksum).chars().take(12).collect();
    let pr = match &row.gate.scope {
        Scope::Pr { repo, number } => format!(", from pull request {repo}#{}", number.0),
        _ => String::new(),
    };
    let mut description = format!(
        "Flagger waits at {} for canary {} at revision {} (cluster {}){pr}.\n",
        row.gate,
        row.canary,
        shown(&row.checksum),
        row.cluster
    );
    if let Some(numbers) = numbers {
        description.push_str(&format!("Its numbers when this was opened: {numbers}.\n"));
    }
    if let Some(url) = public_url {
        description.push_str(&format!(
            "The gate: {}/ui{}\n",
            url.trim_end_matches('/'),
            row.gate
        ));
    }
    description.push_str(
        "Approve this change to open the gate; gatebot closes it when Flagger promotes or rolls back.",
    );
    Draft {
        summary: format!("Promote {} to revision {revision}{pr}", row.canary),
        description,
        service: rule.service.clone(),
        window: (started, started + rule.window),
    }
}

/// A revision as a change's text shows it. Flagger's checksums are letters
/// and digits; anything else in one is its side's data, and never becomes
/// markup, a link or a line of its own in the change system.
fn shown(checksum: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
    checksum
        .chars()
        .take(64)
        .map(|c| if safe(c) { c } else { '?' })
        .collect()
}

/// Each change read while its canary waits, least recently read first (each
/// read moves it to the back): a new one until it votes or is rejected; one
/// that voted, as its vote may be lost (a hold and an unhold reset the count)
/// or its change rejected after all; one rejected, as it may be approved
/// again. A new change whose wait ended is closed after an hour.
async fn follow_changes(
    engine: &Engine,
    rule: &ChangeRule,
    system: &ChangeClient,
    waiting: &Waiting,
) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    for from in [state::OPEN, state::OPENED, state::REJECTED] {
        for row in tickets.tickets_in(from, PER_PASS).await? {
            follow(engine, rule, system, waiting.at(&row), &row).await?;
        }
    }
    Ok(())
}

/// One change read, and its gate opened once it allows (its vote cast again
/// if it was lost), held once it is rejected (once: a person's `/unhold`
/// stands).
async fn follow(
    engine: &Engine,
    rule: &ChangeRule,
    system: &ChangeClient,
    still: bool,
    row: &TicketRow,
) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    let now = engine.now();
    let new = row.state == state::OPEN;
    if !still && !new {
        // Its canary moved on: `retire_changes` closes it in time.
        return Ok(());
    }
    // Gone for an hour (a newer revision, the canary deleted): closed. A
    // wait ended a moment ago may start again at Flagger's next check.
    if !still && now - row.seen_at > GONE_AFTER {
        tickets.abandon_ticket(row, now).await?;
        return Ok(());
    }
    let ticket = match system.read(&row.number).await {
        Ok(ticket) => ticket,
        Err(e @ CallError::Unreachable { .. }) => return Err(Stop::Unreachable(e)),
        Err(e) => {
            tracing::warn!(change = %row.number, error = %e, "change not read; the wait goes on");
            tickets.touch_ticket(row, still, now).await?;
            return Ok(());
        }
    };
    match ticket.allows(now, rule.service.as_deref()) {
        // Its canary has moved on (or waits again at Flagger's next
        // check): nothing is opened for a revision that does not wait.
        Ok(_) if !still => {}
        Ok(until) => {
            // Voted already, or held: a vote now would change nothing.
            let status = engine.gate(&row.gate).await?.status;
            let voted = row.state == state::OPENED && landed_in(&status, row);
            if !voted && !matches!(status, GateStatus::Held { .. }) {
                let pin = TicketPin {
                    number: row.number.clone(),
                    link: ticket.link.clone(),
                    until,
                };
                claimed(engine, row, state::OPENED, Act::Open(pin), now).await?;
            }
        }
        Err(why) if ticket.decision == Decision::Rejected || ticket.closed => {
            if row.state != state::REJECTED {
                claimed(engine, row, state::REJECTED, Act::Hold(why.0), now).await?;
            }
        }
        // Not yet approved, or its window has not begun: the wait goes on.
        Err(_) => {}
    }
    // Read now: to the back of the line, so no change waits behind others.
    tickets.touch_ticket(row, still, now).await?;
    Ok(())
}

/// What the change does to its gate, its ticket moved `to` first and moved
/// back when it was refused: so two replicas never both act on one reading
/// (a rejection holds the gate once, and a person's `/unhold` stands).
async fn claimed(
    engine: &Engine,
    row: &TicketRow,
    to: &str,
    what: Act,
    now: Millis,
) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    let from = row.state.as_str();
    let marked = from == to || tickets.move_ticket(row, &[from], to, None, now).await?;
    if !marked {
        // Moved meanwhile: Flagger is done with it, or another replica acts.
        return Ok(());
    }
    if !act(engine, row, what).await? && from != to {
        tickets
            .move_ticket(row, &[to], from, None, engine.now())
            .await?;
    }
    Ok(())
}

/// Changes that opened or held their gate, closed once their canary has not
/// waited for them for an hour (a newer revision, the canary deleted), when
/// no promotion or rollback said so. Those still waited for are followed.
async fn retire_changes(engine: &Engine, waiting: &Waiting) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    for kind in [state::OPENED, state::REJECTED] {
        for row in tickets.tickets_in(kind, PER_PASS).await? {
            let now = engine.now();
            if waiting.at(&row) {
                continue;
            }
            if now - row.seen_at > GONE_AFTER {
                tickets.abandon_ticket(&row, now).await?;
            } else {
                tickets.touch_ticket(&row, false, now).await?;
            }
        }
    }
    Ok(())
}

/// What waits now, by gate, canary and revision: read once a pass.
struct Waiting(HashSet<(String, String, String)>);

impl Waiting {
    fn of(waits: &[WaitRow]) -> Self {
        let each = waits.iter().filter_map(|w| {
            let canary = w.canary.as_ref()?;
            Some((w.gate.to_string(), canary.to_string(), w.checksum.clone()))
        });
        Self(each.collect())
    }

    /// Whether the ticket's canary waits at its gate at its revision.
    fn at(&self, row: &TicketRow) -> bool {
        let key = (
            row.gate.to_string(),
            row.canary.clone(),
            row.checksum.clone(),
        );
        self.0.contains(&key)
    }
}

/// What a change does to its gate.
enum Act {
    Open(TicketPin),
    Hold(String),
}

/// Opens or holds the ticket's gate through the one command path, as the
/// change (a member of no group but the change's own): pinned to the canary
/// and revision it was opened for. False when it was refused (a hold, a
/// freeze), to be tried at the next pass.
async fn act(engine: &Engine, row: &TicketRow, act: Act) -> Result<bool, CommandError> {
    let actor = Actor::new(row.number.clone(), Source::Gatebot);
    let Ok(canary) = row.canary.parse::<CanaryRef>() else {
        return Ok(false);
    };
    // Its canary's and revision's only: no other canary goes by this change.
    let mut who = Provenance::new(actor).only(canary, row.checksum.clone());
    let opens = matches!(act, Act::Open(_));
    let command = match act {
        Act::Open(pin) => {
            let reason = format!("change {} approved", row.number);
            who.ticket = Some(pin);
            who.groups = vec![Group::change()];
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
        // An open that waits for another canary's approval to end changes
        // nothing: the change has not voted yet.
        return Ok(!opens || landed(engine, row).await?);
    }
    tracing::info!(change = %row.number, gate = %row.gate, outcome = ?outcome, "the change's gate was not changed; trying again at the next pass");
    Ok(false)
}

/// Whether the change's vote is in its gate: counted, or the gate open for
/// its canary at its revision.
async fn landed(engine: &Engine, row: &TicketRow) -> Result<bool, CommandError> {
    Ok(landed_in(&engine.gate(&row.gate).await?.status, row))
}

fn landed_in(status: &GateStatus, row: &TicketRow) -> bool {
    let person = row.number.to_ascii_lowercase();
    match status {
        GateStatus::Open(a) => a.pins.get(&row.canary) == Some(&row.checksum),
        GateStatus::Approving(t) => t.votes.iter().any(|v| v.person == person),
        _ => false,
    }
}

/// A claimed close done (`CLOSED`), or given back for the next pass (`CLOSING`).
async fn settle(engine: &Engine, row: &TicketRow, to: &str) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    tickets
        .move_ticket(row, &[state::CLOSE_CLAIMED], to, None, engine.now())
        .await?;
    Ok(())
}

/// Those Flagger is done with, moved to their end state. One the change
/// system refuses for good (closed already, a workflow that does not allow
/// it) is given up, said once.
async fn close_changes(engine: &Engine, system: &ChangeClient) -> Result<(), Stop> {
    let tickets = engine.store().tickets();
    let stale = engine.now() - STALE_CLAIM;
    for row in tickets.tickets_to_close(stale, PER_PASS).await? {
        // Claimed first, so that two replicas never both close it.
        if !tickets.claim_close(&row, engine.now(), stale).await? {
            continue;
        }
        // A close whose answer was lost may have been made: read it first.
        match system.read(&row.number).await {
            Ok(ticket) if ticket.closed => {
                tracing::info!(change = %row.number, "change closed already");
                settle(engine, &row, state::CLOSED).await?;
                continue;
            }
            Err(e @ CallError::Unreachable { .. }) => {
                settle(engine, &row, state::CLOSING).await?;
                return Err(Stop::Unreachable(e));
            }
            _ => {}
        }
        let (did, under) = match row.successful {
            true => ("promoted", ""),
            false => ("did not promote", " under this change"),
        };
        let revision = shown(&row.checksum);
        let notes = format!(
            "Flagger {did} {} at revision {revision}{under}.",
            row.canary
        );
        match system.close(&row.number, row.successful, &notes).await {
            Ok(()) => {
                tracing::info!(change = %row.number, successful = row.successful, "change closed");
            }
            Err(e @ CallError::Unreachable { .. }) => {
                // Maybe not made: given back, and read again at the next pass.
                settle(engine, &row, state::CLOSING).await?;
                return Err(Stop::Unreachable(e));
            }
            Err(e) => {
                tracing::error!(change = %row.number, error = %e, "change not closed; given up: close it by hand");
            }
        }
        settle(engine, &row, state::CLOSED).await?;
    }
    Ok(())
}
