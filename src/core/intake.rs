//! The one intake of a stored delivery that carries commands (a PR comment,
//! a button clicked in a PR's checks, in Slack or on a Teams card, an
//! approving or dismissed review) or starts a wait (a deployment's
//! protection request). The channel reads the delivery, has the core
//! authorize its commands (`dispatch::authorize`, with the channel's
//! authorizer; its calls out happen there, before any transaction), and
//! says in its own words what came of them ([`Said`]); the core decides,
//! writes that, settles the delivery and commits in one unit. No channel
//! opens a transaction (`tests/layering.rs`).
//!
//! A channel that can say what came of a delivery later hands the core its
//! answer as data instead ([`take_told`]): the core writes what came of each
//! line ([`Told`]) into the channel's reply in the command's own unit, and the
//! channel's sink words it when it sends. Such a command goes from the channel
//! to the core and never back before its decision is committed, and a reply
//! retried after a crash says what was decided.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::awaited::Awaited;
use super::dispatch::{self, Authorized, Outcome, Request};
use super::unit::Unit;
use super::withdraw::Withdrawn;
use super::{Engine, Provenance};
use crate::command::Command;
use crate::command::Invalid;
use crate::gate::{Actor, GateKey, Millis, PrNumber, RepoName};
use crate::notify::{late_note, BoxFuture, Handler, Lease, SendError, Settled};
use crate::store::{NewJob, ProtectionRequest, QueueItem, SlackDecision};

/// A channel's side of the inbox: how a stored delivery reads back, the lane
/// it keeps order in, and what it comes to (through this module's `take`s).
/// The worker runs every channel's deliveries through [`Inbox`]: it hands
/// each to the core, which hands it to the channel read back once.
pub trait Intake: Send + Sync + 'static {
    /// A delivery, as the channel reads it.
    type Delivery: Send;

    /// `item`'s delivery, read back from its payload.
    fn decode(item: &QueueItem) -> Result<Self::Delivery, SendError>;

    /// Deliveries of one lane apply one at a time, in the order received.
    fn lane(&self, delivery: &Self::Delivery) -> Option<String>;

    /// What `delivery` (stored as `item`, claimed under `lease`) comes to.
    fn take<'a>(
        &'a self,
        delivery: Self::Delivery,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>>;
}

/// A channel's intake as the inbox's worker runs it.
pub struct Inbox<I>(Arc<I>);

impl<I: Intake> Inbox<I> {
    /// The handler of `intake`'s deliveries.
    pub fn handler(intake: I) -> Arc<dyn Handler> {
        Arc::new(Self(Arc::new(intake)))
    }
}

impl<I: Intake> Handler for Inbox<I> {
    fn lane(&self, item: &QueueItem) -> Option<String> {
        self.0.lane(&I::decode(item).ok()?)
    }

    fn handle<'a>(
        &'a self,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move { self.0.take(I::decode(item)?, item, lease).await })
    }
}

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
#[derive(Debug, Clone)]
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
    /// `gatebot_commands_total` as `command` with `result`, and `told` in
    /// the answer when it says something there.
    Counted {
        command: String,
        result: &'static str,
        told: Option<Told>,
    },
}

/// Decides a delivery's commands in order, then writes what `say` makes of
/// their outcomes (one per line, `None` for a counted one) and settles
/// `receipt`, all in one unit; the freezes in force are re-read when a
/// command changed them. `say` is the core's own ([`take_told`]): channels
/// hand over data, never code that runs inside the unit.
async fn take_all<D, T>(
    engine: &Engine,
    source: &'static str,
    asked: Vec<Asked<D>>,
    receipt: Option<&Lease>,
    say: impl FnOnce(Vec<Option<Outcome<D>>>, Millis) -> Result<(Said, T), SendError>,
) -> Result<T, SendError>
where
    D: fmt::Display,
{
    let mut unit = engine.commands().begin().await?;
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
            Asked::Counted {
                command, result, ..
            } => {
                unit.count(source, &command, result);
                outcomes.push(None);
            }
        }
    }
    let (said, answer) = say(outcomes, unit.now())?;
    write(&mut unit, said, receipt).await?;
    unit.commit().await?;
    if froze {
        engine.freezes().reload_freezes().await?;
    }
    Ok(answer)
}

/// Decides a delivery's lines and queues `replies` with what came of them
/// ([`Told`]), writes `marks` (and the replies' `decided` when a line was
/// done in full) and settles `receipt`, all in one unit: the channel made
/// everything it writes before, and words the answer when its sink sends
/// it. Returns what was told, for the log.
pub async fn take_told<D>(
    engine: &Engine,
    source: &'static str,
    asked: Vec<Asked<D>>,
    receipt: Option<&Lease>,
    replies: Replies<'_>,
    mut marks: Vec<Mark>,
) -> Result<Vec<Told>, SendError>
where
    D: fmt::Display,
{
    // A command's line tells its outcome; any other line, what the channel said of it.
    let lines: Vec<Result<Command, Option<Told>>> = asked
        .iter()
        .map(|line| match line {
            Asked::Command {
                request,
                authorized,
            } => Ok(authorized.command_of(request).clone()),
            Asked::Counted { told, .. } => Err(told.clone()),
        })
        .collect();
    let say = |outcomes: Vec<Option<Outcome<D>>>, now| {
        let rollback = rollback_opened(&outcomes);
        let told: Vec<Told> = lines
            .into_iter()
            .zip(outcomes)
            .filter_map(|(line, outcome)| match (line, outcome) {
                (Ok(command), Some(outcome)) => Some(Told::of(&command, outcome)),
                (Ok(_), None) => None,
                (Err(told), _) => told,
            })
            .collect();
        if told.iter().any(Told::in_full) {
            let stamped = replies.decided.iter().cloned();
            marks.extend(stamped.map(|m| m.stamped(now, rollback.as_deref())));
        }
        let jobs = replies
            .jobs(told.clone(), now)
            .map_err(|e| SendError::Permanent(format!("cannot write the reply: {e}")))?;
        Ok((Said { jobs, marks }, told))
    };
    take_all(engine, source, asked, receipt, say).await
}

/// [`take_told`] for a delivery of one command and no rows of its own.
pub async fn take_one<D>(
    engine: &Engine,
    source: &'static str,
    request: Request,
    authorized: Authorized<D>,
    receipt: Option<&Lease>,
    replies: Replies<'_>,
) -> Result<Vec<Told>, SendError>
where
    D: fmt::Display,
{
    let asked = vec![Asked::Command {
        request: Box::new(request),
        authorized,
    }];
    take_told(engine, source, asked, receipt, replies, Vec::new()).await
}

/// The rollback gate a command opened (a Reject at a promotion), if any.
fn rollback_opened<D>(outcomes: &[Option<Outcome<D>>]) -> Option<String> {
    outcomes.iter().flatten().find_map(|outcome| match outcome {
        Outcome::Applied(applied) => applied
            .gates
            .iter()
            .find(|g| g.key.kind.is_rollback())
            .map(|g| g.key.to_string()),
        _ => None,
    })
}

impl Mark {
    /// The mark as the unit writes it: a message's decision made at the
    /// unit's time, naming the rollback gate a Reject opened.
    fn stamped(mut self, now: Millis, rollback: Option<&str>) -> Self {
        if let Self::SlackDecision { decision, .. } = &mut self {
            decision.at = now;
            if !decision.approved {
                decision.rollback_gate = rollback.map(str::to_string);
            }
        }
        self
    }
}

/// Writes `said` and settles `receipt` in a unit of their own: a delivery
/// that carries no command but is answered (a stale review).
pub async fn answer(engine: &Engine, said: Said, receipt: Option<&Lease>) -> Result<(), SendError> {
    let mut unit = engine.commands().begin().await?;
    write(&mut unit, said, receipt).await?;
    Ok(unit.commit().await?)
}

/// Withdraws `person`'s approval at `key` that `cast` gave (a dismissed
/// review: the vote its approval cast), counts it
/// as `command` withdrawn or used, queues `replies` with what came of it
/// ([`Told::Withdrawn`], by `who`) and settles `receipt`, in one unit.
#[allow(clippy::too_many_arguments)]
pub async fn withdraw(
    engine: &Engine,
    source: &'static str,
    command: &str,
    key: &GateKey,
    (person, cast): (&str, &str),
    who: &Provenance,
    receipt: Option<&Lease>,
    replies: Replies<'_>,
) -> Result<(), SendError> {
    let mut unit = engine.commands().begin().await?;
    let withdrawn = unit.withdraw(key, person, Some(cast), who).await?;
    let by = who.actor.name.clone();
    let told = match withdrawn {
        Withdrawn::Counted(left) => {
            unit.count(source, command, "withdrawn");
            Some(Told::Withdrawn {
                by,
                left: Some(left),
            })
        }
        Withdrawn::Used => {
            unit.count(source, command, "used");
            Some(Told::Withdrawn { by, left: None })
        }
        Withdrawn::Nothing => None,
    };
    let jobs = replies
        .jobs(told.into_iter().collect(), unit.now())
        .map_err(|e| SendError::Permanent(format!("cannot write the reply: {e}")))?;
    write(&mut unit, Said::jobs(jobs), receipt).await?;
    Ok(unit.commit().await?)
}

/// Who opened a gate, and when: filled into a job the channel made before
/// the unit, for a request that found its gate open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opened {
    pub by: Actor,
    pub at: Millis,
}

/// Keeps a deployment's protection request (at `unit.now()`) and starts the
/// wait at its gate, settles `receipt`, and, when the gate is open already,
/// queues `if_open` with who opened it ([`Opened`], as its payload's
/// `opened`), all in one unit. A redelivered request changes nothing.
pub async fn protection_request(
    engine: &Engine,
    mut request: ProtectionRequest,
    reason: String,
    metadata: BTreeMap<String, String>,
    receipt: Option<&Lease>,
    if_open: NewJob,
) -> Result<(), SendError> {
    let mut unit = engine.commands().begin().await?;
    request.requested_at = unit.now();
    let mut jobs = Vec::new();
    if unit.put_protection_request(&request).await? {
        let awaited = unit.await_gate(&request.gate, reason, metadata).await?;
        if let Awaited::Open(change) = awaited {
            let opened = Opened {
                by: change.by,
                at: unit.now(),
            };
            let job = with_field(if_open, "opened", &opened)
                .map_err(|e| SendError::Permanent(format!("cannot write the decision: {e}")))?;
            jobs.push(job);
        }
    }
    write(&mut unit, Said::jobs(jobs), receipt).await?;
    Ok(unit.commit().await?)
}

/// What came of one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "told", rename_all = "snake_case")]
pub enum Told {
    /// A command done; `note` when its line says more than its reaction,
    /// `summary` what it did ("opened /gates/…"), for an answer that says it.
    Applied {
        command: String,
        note: Option<AppliedNote>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        summary: String,
    },
    /// A command not done, and why.
    Refused { command: String, why: Refusal },
    /// A word that is no gatebot command.
    Unknown { word: String },
    /// A line that names no command gatebot can run (a freeze of another
    /// scope, a time it cannot read).
    Unreadable { word: String, why: String },
    /// The delivery applied long after it was received: when, and why.
    Late { note: String },
    /// Lines past the most one delivery runs: not run.
    Skipped { lines: usize, most: usize },
    /// An approval taken back by `by` (a dismissed review): what the gate
    /// still has (`left`), or none when the approval had already opened it.
    Withdrawn { by: String, left: Option<String> },
}

/// What an applied command's line says besides that it was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum AppliedNote {
    /// A freeze made: "frozen … until …".
    Froze { reason_line: String },
    /// Freezes lifted (possibly none) in a scope.
    Lifted { count: usize, scope: String },
    /// An approval that counted and opened nothing yet: "approval counted at …".
    Counted { summary: String },
}

/// Why a command was not done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum Refusal {
    /// The channel's authorizer said no.
    Denied { why: String },
    /// Break glass without a reason; `why` as the core words it.
    ForceWithoutReason {
        verb: String,
        #[serde(default)]
        why: String,
    },
    /// A freeze's reason empty, too long or more than one line.
    FreezeReason,
    /// Anything else no one may send.
    Invalid { why: String },
    /// A hold stands in the way.
    Held {
        gate: String,
        by: String,
        via: String,
    },
    /// Written before the gate's last close.
    WrittenBeforeClose {
        #[serde(default)]
        gate: String,
        closed_at: Millis,
    },
    /// A named gate that cannot be created or retired so.
    Named { why: String },
}

impl Told {
    /// What `outcome` of `command` comes to.
    pub fn of<D: fmt::Display>(command: &Command, outcome: Outcome<D>) -> Self {
        let name = command.name().to_string();
        let why = match outcome {
            Outcome::Applied(applied) => {
                let note = if let Some(f) = &applied.froze {
                    Some(AppliedNote::Froze {
                        reason_line: f.reason_line(),
                    })
                } else if let Command::Unfreeze { scope } = command {
                    Some(AppliedNote::Lifted {
                        count: applied.lifted.len(),
                        scope: scope.to_string(),
                    })
                } else {
                    applied.counted_only().then(|| AppliedNote::Counted {
                        summary: applied.summary(),
                    })
                };
                return Self::Applied {
                    command: name,
                    note,
                    summary: applied.summary(),
                };
            }
            Outcome::Denied(why) => Refusal::Denied {
                why: why.to_string(),
            },
            Outcome::Invalid(invalid @ Invalid::ForceWithoutReason(verb)) => {
                Refusal::ForceWithoutReason {
                    verb: verb.to_string(),
                    why: invalid.to_string(),
                }
            }
            Outcome::Invalid(Invalid::FreezeReason) => Refusal::FreezeReason,
            Outcome::Invalid(other) => Refusal::Invalid {
                why: other.to_string(),
            },
            Outcome::Held { gate, by, via } => Refusal::Held {
                gate: gate.to_string(),
                by,
                via: via.to_string(),
            },
            Outcome::WrittenBeforeClose { gate, closed_at } => Refusal::WrittenBeforeClose {
                gate: gate.to_string(),
                closed_at,
            },
            Outcome::Named(why) => Refusal::Named {
                why: why.to_string(),
            },
        };
        Self::Refused { command: name, why }
    }

    fn applied(&self) -> bool {
        matches!(self, Self::Applied { .. })
    }

    fn refused(&self) -> bool {
        matches!(
            self,
            Self::Refused { .. }
                | Self::Unknown { .. }
                | Self::Unreadable { .. }
                | Self::Skipped { .. }
        )
    }

    /// Whether the answer has a line for it: a command done says so by its
    /// reaction alone unless it has a note.
    pub fn shows(&self) -> bool {
        !matches!(self, Self::Applied { note: None, .. })
    }

    /// Whether it is the note of a delivery applied late.
    pub fn late(&self) -> bool {
        matches!(self, Self::Late { .. })
    }

    /// A command done in full: not an approval that only counted.
    fn in_full(&self) -> bool {
        matches!(
            self,
            Self::Applied { note, .. } if !matches!(note, Some(AppliedNote::Counted { .. }))
        )
    }
}

/// How the core answers a delivery's lines, made by the channel before the
/// unit opens: the jobs always queued, the one whose payload's `lines` the
/// core fills with the [`Told`]s (when any of them shows), those queued
/// when a line was done or refused, and the rows written when a line was
/// done in full.
pub struct Replies<'a> {
    /// Queued first, whatever the lines came to (a 👀, a `/help`'s answer).
    pub first: Vec<NewJob>,
    /// The reply, if the channel writes one: a job whose payload is a JSON
    /// object with a `lines` array.
    pub reply: Option<NewJob>,
    /// Which lines the reply shows; with none, it is not queued. A PR
    /// comment's shows every line its reactions do not say ([`Told::shows`]);
    /// a Teams card's only lateness, as the card shows the decision.
    pub shows: fn(&Told) -> bool,
    /// Queued when a line was done (a 🚀, a card's refresh).
    pub applied: Option<NewJob>,
    /// Queued when a line was refused (a 😕).
    pub refused: Option<NewJob>,
    /// Written when a line was done in full, not only counted towards a
    /// quorum: who decided a card, shown on it.
    pub decided: Vec<Mark>,
    /// The delivery as received: a reply to one applied late says so.
    pub received: Option<&'a QueueItem>,
}

impl Default for Replies<'_> {
    fn default() -> Self {
        Self {
            first: Vec::new(),
            reply: None,
            shows: Told::shows,
            applied: None,
            refused: None,
            decided: Vec::new(),
            received: None,
        }
    }
}

impl Replies<'_> {
    /// The jobs `told`, decided at `now`, comes to, in the order queued.
    pub(super) fn jobs(self, mut told: Vec<Told>, now: Millis) -> serde_json::Result<Vec<NewJob>> {
        let applied = told.iter().any(Told::applied);
        let refused = told.iter().any(Told::refused);
        if applied {
            let late = self.received.and_then(|item| late_note(item, now));
            told.extend(late.map(|note| Told::Late { note }));
        }
        let mut jobs = self.first;
        let shown: Vec<Told> = told.into_iter().filter(self.shows).collect();
        if let Some(reply) = self.reply.filter(|_| !shown.is_empty()) {
            jobs.push(with_lines(reply, &shown)?);
        }
        jobs.extend(self.applied.filter(|_| applied));
        jobs.extend(self.refused.filter(|_| refused));
        Ok(jobs)
    }
}

/// `job` with `told` as its payload's `lines`.
fn with_lines(job: NewJob, told: &[Told]) -> serde_json::Result<NewJob> {
    with_field(job, "lines", &told)
}

/// `job` with `value` as its payload's `field`.
fn with_field(mut job: NewJob, field: &str, value: &impl Serialize) -> serde_json::Result<NewJob> {
    let mut payload: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&job.payload)?;
    payload.insert(field.into(), serde_json::to_value(value)?);
    job.payload = serde_json::to_string(&payload)?;
    Ok(job)
}

fn decided_meanwhile(what: &str, wait_id: i64) -> SendError {
    SendError::retry(format!(
        "the {what} of wait {wait_id} was decided meanwhile"
    ))
}

async fn write(unit: &mut Unit<'_>, said: Said, receipt: Option<&Lease>) -> Result<(), SendError> {
    for mark in &said.marks {
        match mark {
            // Decided by a click that committed first: this one's
            // authorization is stale. Asked again, it is refused.
            Mark::SlackDecision { wait_id, decision } => {
                if !unit.decide_slack_message(*wait_id, decision).await? {
                    return Err(decided_meanwhile("message", *wait_id));
                }
            }
            Mark::TeamsCard { wait_id, verb, by } => {
                if !unit.decide_teams_card(*wait_id, verb, by).await? {
                    return Err(decided_meanwhile("card", *wait_id));
                }
            }
            Mark::PrAuthor {
                repo,
                number,
                login,
            } => unit.learn_pr_author(repo, *number, login).await?,
        }
    }
    unit.enqueue(&said.jobs).await?;
    // A lease lost meanwhile: the item is another worker's, which applies it
    // (once: the delivery's id) and answers it. Writing here too would answer twice.
    if let Some(lease) = receipt {
        if !unit.settle(lease.queue, &lease.claim()).await? {
            return Err(SendError::Transient(format!(
                "the lease of {} was lost: another worker has it",
                lease.claim().id
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(payload: &str) -> NewJob {
        NewJob {
            sink: "github".into(),
            topic: "reply".into(),
            payload: payload.into(),
            dedupe_key: None,
            once_key: Some("once".into()),
            not_before: 0,
        }
    }

    fn answer(first: &str) -> Replies<'static> {
        Replies {
            first: vec![job(first)],
            reply: Some(job(r#"{"type":"reply","lines":[]}"#)),
            applied: Some(job("rocket")),
            refused: Some(job("confused")),
            ..Replies::default()
        }
    }

    fn payloads(jobs: &[NewJob]) -> Vec<&str> {
        jobs.iter().map(|j| j.payload.as_str()).collect()
    }

    #[test]
    fn a_command_done_is_answered_by_its_reaction_alone() {
        let done = Told::Applied {
            command: "promote".into(),
            note: None,
            summary: String::new(),
        };
        let jobs = answer("eyes").jobs(vec![done], 0).unwrap();
        assert_eq!(payloads(&jobs), ["eyes", "rocket"]);
    }

    #[test]
    fn a_refusal_fills_the_reply_and_is_reacted_to() {
        let unknown = Told::Unknown {
            word: "promot".into(),
        };
        let jobs = answer("eyes").jobs(vec![unknown], 0).unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].payload, "eyes");
        let reply: serde_json::Value = serde_json::from_str(&jobs[1].payload).unwrap();
        assert_eq!(reply["type"], "reply");
        assert_eq!(reply["lines"][0]["told"], "unknown");
        assert_eq!(reply["lines"][0]["word"], "promot");
        assert_eq!(jobs[2].payload, "confused");
    }

    #[test]
    fn a_reply_shows_only_the_lines_its_channel_says() {
        let done = Told::Applied {
            command: "promote".into(),
            note: None,
            summary: String::new(),
        };
        let counted = Told::Applied {
            command: "promote".into(),
            note: Some(AppliedNote::Counted {
                summary: "1 of 2".into(),
            }),
            summary: String::new(),
        };
        let card = |first| Replies {
            shows: Told::late,
            ..answer(first)
        };
        // Nothing late: a card's reply has no line, and is not queued.
        let jobs = card("eyes")
            .jobs(vec![done.clone(), counted.clone()], 0)
            .unwrap();
        assert_eq!(payloads(&jobs), ["eyes", "rocket"]);
        assert!(done.in_full() && !counted.in_full());
    }

    #[test]
    fn told_reads_back_as_written() {
        let lines = vec![
            Told::Refused {
                command: "promote".into(),
                why: Refusal::Held {
                    gate: "/gates/promote/acme/shop/pr/42".into(),
                    by: "sre".into(),
                    via: "slack".into(),
                },
            },
            Told::Applied {
                command: "unfreeze".into(),
                note: Some(AppliedNote::Lifted {
                    count: 2,
                    scope: "acme/shop".into(),
                }),
                summary: "lifted".into(),
            },
        ];
        let text = serde_json::to_string(&lines).unwrap();
        assert_eq!(serde_json::from_str::<Vec<Told>>(&text).unwrap(), lines);
    }

    #[test]
    fn a_reply_that_is_not_an_object_is_an_error_not_an_empty_job() {
        let mut a = answer("eyes");
        a.reply = Some(job("[]"));
        let unknown = Told::Unknown { word: "x".into() };
        assert!(a.jobs(vec![unknown], 0).is_err());
    }
}
