//! Every write to Teams, through the outbox (retries, Retry-After, leases):
//! the answer to a command typed to the bot, and the card of each waiting
//! gate, posted once and updated in place (`PUT`) on every later notice. A
//! card is rendered when sent, from what the store knows then, so a retry
//! sends the latest state.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::card::{self, CardView, Links, Offer, Status};
use super::client::{Connector, Workflow};
use crate::clock::SharedClock;
use crate::command::Invalid;
use crate::core::intake::{AppliedNote, Refusal, Told};
use crate::core::Records;
use crate::evidence::Evidence;
use crate::gate::{AuditAction, CanaryRef, GateKey, GateStatus, Millis};
use crate::notify::{
    decode_job, encode_job, BoxFuture, Channel, Lease, Notice, PayloadError, SendError, SinkJob,
};
use crate::store::{NewJob, QueueItem, TeamsCard};

pub const NAME: &str = "teams";
const REPLY: &str = "reply";
/// The Canary's webhook metadata that names the conversation for its cards:
/// the caller's word, followed only where `[[teams.channels]]` binds it
/// (`TeamsSink::conversation`).
pub const CHANNEL_METADATA: &str = "teams_channel";
/// How many of a gate's latest cards change when it changes: older waits are over.
const GATE_CARDS: i64 = 20;
/// Rollout endings a card shows.
const FINAL: [&str; 3] = ["promotion_completed", "rolling_back", "canary_failed"];

/// A reply in an activity's thread (the job's topic is `reply`): to a typed
/// command, its text; to a card's click, what the core told of it (`lines`),
/// worded when it is sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub service_url: String,
    pub conversation_id: String,
    /// The activity answered: Teams shows the reply in its thread.
    pub reply_to_id: String,
    pub text: String,
    /// Who clicked, when this answers a click.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clicker: Option<String>,
    /// What came of the click, filled in by the core.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<Told>,
}

impl Reply {
    /// The words posted: the text, or what was told of a typed command or a
    /// click. A card shows a click's decision, so only lateness is said of it.
    pub fn words(&self) -> String {
        if self.lines.is_empty() {
            return self.text.clone();
        }
        let said: Vec<String> = match &self.clicker {
            Some(clicker) => self
                .lines
                .iter()
                .filter_map(|line| match line {
                    Told::Late { note } => Some(format!("{clicker}'s click was {note}")),
                    _ => None,
                })
                .collect(),
            None => self.lines.iter().filter_map(typed).collect(),
        };
        said.join("\n\n")
    }

    /// Once per activity answered: a command applied again sends no second reply.
    pub fn job(&self) -> Result<NewJob, PayloadError> {
        Ok(NewJob {
            once_key: Some(format!(
                "teams-reply:{}:{}",
                self.conversation_id, self.reply_to_id
            )),
            ..encode_job(NAME, REPLY, self)?
        })
    }
}

/// Teams' words for one line of what the core told of a typed command.
fn typed(line: &Told) -> Option<String> {
    let why = match line {
        Told::Applied { note, summary, .. } => {
            return Some(match note {
                Some(AppliedNote::Froze { reason_line }) => format!("Changes are {reason_line}"),
                Some(AppliedNote::Lifted { count: 0, scope }) => {
                    format!("nothing was frozen in {scope}")
                }
                Some(AppliedNote::Lifted { count, scope }) => {
                    format!("lifted {count} freeze(s) of {scope}")
                }
                _ => summary.clone(),
            })
        }
        Told::Late { note } => return Some(note.clone()),
        Told::Refused { why, .. } => why,
        _ => return None,
    };
    Some(match why {
        Refusal::Denied { why }
        | Refusal::ForceWithoutReason { why, .. }
        | Refusal::Invalid { why }
        | Refusal::Named { why } => why.clone(),
        Refusal::FreezeReason => Invalid::FreezeReason.to_string(),
        Refusal::Held { gate, by, via } => format!("{gate} is held by {by} via {via}"),
        Refusal::WrittenBeforeClose { gate, .. } => {
            format!("{gate} was closed after this was written: send it again")
        }
    })
}

/// A card's job (every topic but `reply`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum CardJob {
    /// Post the wait's card to a conversation the bot was added to.
    Post { wait_id: i64, conversation: String },
    /// Post the wait's card to the Workflows webhook.
    Workflow { wait_id: i64 },
    /// Rewrite the wait's card from what the store knows now.
    Refresh { wait_id: i64 },
    /// The wait ended: kept, then the card rewritten.
    Ended { wait_id: i64, outcome: String },
    /// The gate changed by any channel: its recent cards rewritten.
    Gate { gate: String },
    /// The canary's rollout ended: its latest card says so.
    Final {
        canary: String,
        kind: String,
        message: String,
    },
    /// Flagger failed outside the analysis: a card under the canary's latest
    /// card, else in the conversation, and to the Workflows webhook.
    Failure {
        canary: String,
        checksum: String,
        what: String,
        message: String,
        next: String,
        conversation: Option<String>,
    },
}

impl SinkJob for CardJob {
    const SINK: &'static str = NAME;
    const TAG: &'static str = "job";
}

pub struct TeamsSink {
    /// The bot's connector, when it may post (an app id and its password).
    pub connector: Option<Arc<Connector>>,
    /// GATEBOT_TEAMS_WORKFLOW_URL's poster.
    pub workflow: Option<Workflow>,
    pub records: Records,
    pub clock: SharedClock,
    /// GATEBOT_TEAMS_CHANNEL: the conversation that gets the cards.
    pub channel: Option<String>,
    /// `[[teams.channels]]`: where a Canary's `teams_channel` may send them.
    pub bound: crate::policy::ChannelBindings,
    /// Counts a `teams_channel` not followed.
    pub metrics: Arc<crate::metrics::Metrics>,
    pub links: Links,
    /// The waiting canaries' numbers, shown on their cards.
    pub evidence: Arc<Evidence>,
}

impl Channel for TeamsSink {
    type Job = TeamsJob;
    const NAME: &'static str = NAME;

    fn decode(item: &QueueItem) -> Result<TeamsJob, SendError> {
        Ok(match item.topic == REPLY {
            true => TeamsJob::Reply(decode_job(NAME, item)?),
            false => TeamsJob::Card(decode_job(NAME, item)?),
        })
    }

    /// Cards and their updates go out in order (an update after its post);
    /// replies to people do not wait for them.
    fn lane(&self, job: &TeamsJob) -> Option<String> {
        matches!(job, TeamsJob::Card(_)).then(|| "cards".to_string())
    }

    fn send<'a>(
        &'a self,
        job: TeamsJob,
        _item: &'a QueueItem,
        _lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            match job {
                TeamsJob::Reply(reply) => self.reply(&reply).await,
                TeamsJob::Card(job) => self.run(job).await,
            }
        })
    }

    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        match notice {
            Notice::WaitStarted {
                wait_id,
                gate,
                canary,
                metadata,
                ..
            } => self.wait_started(*wait_id, gate, canary.as_ref(), metadata),
            Notice::WaitEnded {
                wait_id, outcome, ..
            } => self.for_cards(CardJob::Ended {
                wait_id: *wait_id,
                outcome: outcome.clone(),
            }),
            Notice::GateChanged { gate, action, .. } if changes_cards(*action) => {
                self.for_cards(CardJob::Gate {
                    gate: gate.to_string(),
                })
            }
            Notice::Evidence { gates, .. } => {
                let mut jobs = Vec::new();
                for gate in gates {
                    jobs.extend(self.for_cards(CardJob::Gate {
                        gate: gate.to_string(),
                    })?);
                }
                Ok(jobs)
            }
            Notice::CanaryEvent {
                canary,
                kind,
                message,
                ..
            } if FINAL.contains(&kind.as_str()) => self.for_cards(CardJob::Final {
                canary: canary.to_string(),
                kind: kind.clone(),
                message: message.clone(),
            }),
            Notice::CanaryFailure {
                canary,
                gates,
                failure,
                what,
                message,
                next,
                checksum,
                metadata,
                ..
            } if self.connector.is_some() || self.workflow.is_some() => {
                let job = CardJob::Failure {
                    canary: canary.to_string(),
                    checksum: checksum.clone(),
                    what: what.clone(),
                    message: message.clone(),
                    next: next.clone(),
                    conversation: self.conversation(metadata, gates, Some(canary)),
                };
                let once = format!("teams-failure:{canary}:{checksum}:{failure}");
                Ok(vec![job.job(Some(once))?])
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// Gate changes a card shows: an approval (counted or opening), a close,
/// a hold or its release, an expiry.
fn changes_cards(action: AuditAction) -> bool {
    !matches!(action, AuditAction::Refuse)
}

impl TeamsSink {
    /// Where a card about `gates` and `canary` goes: the Canary's
    /// `teams_channel` when `[[teams.channels]]` binds that conversation to
    /// them (or it is GATEBOT_TEAMS_CHANNEL), else GATEBOT_TEAMS_CHANNEL. A
    /// `teams_channel` not bound is logged, counted and not followed: hook
    /// metadata is anyone's word, and must not post an Approve card into a
    /// conversation of another team or tenant.
    fn conversation(
        &self,
        metadata: &BTreeMap<String, String>,
        gates: &[GateKey],
        canary: Option<&CanaryRef>,
    ) -> Option<String> {
        let configured = self
            .channel
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty());
        let claimed = metadata
            .get(CHANNEL_METADATA)
            .map(|c| c.trim())
            .filter(|c| !c.is_empty());
        if let Some(claimed) = claimed {
            if Some(claimed) == configured || self.bound.allows(claimed, gates, canary) {
                return Some(claimed.to_string());
            }
            tracing::warn!(conversation = %claimed.escape_debug(), gate = ?gates.first().map(ToString::to_string),
                "teams_channel names a conversation [[teams.channels]] does not bind to this canary: not followed");
            self.metrics.dropped(NAME, "teams_channel_not_bound");
        }
        configured.map(str::to_string)
    }

    /// The card goes where `conversation` says; and to the Workflows
    /// webhook when one is set.
    fn wait_started(
        &self,
        wait_id: i64,
        gate: &GateKey,
        canary: Option<&CanaryRef>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<NewJob>, PayloadError> {
        let mut jobs = Vec::new();
        // Only the bot posts into a conversation.
        let conversation = self
            .connector
            .as_ref()
            .and_then(|_| self.conversation(metadata, std::slice::from_ref(gate), canary));
        if let Some(conversation) = conversation {
            let post = CardJob::Post {
                wait_id,
                conversation,
            };
            jobs.push(post.job(Some(format!("teams-card:{wait_id}")))?);
        }
        if self.workflow.is_some() {
            let post = CardJob::Workflow { wait_id };
            jobs.push(post.job(Some(format!("teams-workflow:{wait_id}")))?);
        }
        Ok(jobs)
    }

    /// A job about posted cards, when the bot posts cards at all.
    fn for_cards(&self, job: CardJob) -> Result<Vec<NewJob>, PayloadError> {
        if self.connector.is_none() {
            return Ok(Vec::new());
        }
        Ok(vec![job.job(None)?])
    }
}

/// What the `teams` sink sends: a reply to a person, or a card's post or
/// update (stored apart, by topic).
pub enum TeamsJob {
    Reply(Reply),
    Card(CardJob),
}

fn store_err(e: crate::store::StoreError) -> SendError {
    SendError::retry(format!("records: {e}"))
}

/// A card as the connector takes it: a message with one attachment.
pub fn card_activity(card: Value) -> Value {
    json!({
        "type": "message",
        "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}],
    })
}

impl TeamsSink {
    fn connector(&self) -> Result<&Connector, SendError> {
        self.connector
            .as_deref()
            .ok_or_else(|| SendError::Permanent("GATEBOT_TEAMS_APP_PASSWORD is not set".into()))
    }

    async fn reply(&self, reply: &Reply) -> Result<(), SendError> {
        // Plain text: what people and Flagger wrote is never markup here.
        let text = reply.words();
        if text.is_empty() {
            return Ok(());
        }
        let activity = json!({
            "type": "message",
            "text": text,
            "textFormat": "plain",
            "replyToId": reply.reply_to_id,
        });
        self.connector()?
            .send(&reply.service_url, &reply.conversation_id, &activity)
            .await
            .map(drop)
    }

    async fn run(&self, job: CardJob) -> Result<(), SendError> {
        match job {
            CardJob::Post {
                wait_id,
                conversation,
            } => self.post(wait_id, &conversation).await,
            CardJob::Workflow { wait_id } => self.workflow(wait_id).await,
            CardJob::Refresh { wait_id } => self.refresh(wait_id).await,
            CardJob::Ended { wait_id, outcome } => {
                self.records
                    .end_teams_card(wait_id, &outcome)
                    .await
                    .map_err(store_err)?;
                self.refresh(wait_id).await
            }
            CardJob::Gate { gate } => {
                let waits = self
                    .records
                    .teams_cards_of_gate(&gate, GATE_CARDS)
                    .await
                    .map_err(store_err)?;
                for wait_id in waits {
                    self.refresh(wait_id).await?;
                }
                Ok(())
            }
            CardJob::Final {
                canary,
                kind,
                message,
            } => {
                let found = self.records.latest_teams_card_of_canary(&canary).await;
                let Some(wait_id) = found.map_err(store_err)? else {
                    return Ok(());
                };
                self.records
                    .finish_teams_card(wait_id, &kind, &message)
                    .await
                    .map_err(store_err)?;
                self.refresh(wait_id).await
            }
            CardJob::Failure {
                canary,
                checksum,
                what,
                message,
                next,
                conversation,
            } => {
                let failure = card::Failure {
                    canary: &canary,
                    checksum: &checksum,
                    what: &what,
                    message: &message,
                    next: &next,
                };
                let activity = card_activity(card::failure(&failure));
                self.failure(&canary, &activity, conversation.as_deref())
                    .await
            }
        }
    }

    /// Under the canary's latest card, else in `conversation`; and to the
    /// Workflows webhook. A retry after the bot's post failed posts to the
    /// webhook again; the bot's post goes last so that it is sent once.
    async fn failure(
        &self,
        canary: &str,
        activity: &Value,
        conversation: Option<&str>,
    ) -> Result<(), SendError> {
        if let Some(workflow) = &self.workflow {
            workflow.post(activity).await?;
        }
        if self.connector.is_none() {
            return Ok(());
        }
        let latest = self.records.latest_teams_card_of_canary(canary).await;
        let card = match latest.map_err(store_err)? {
            Some(wait_id) => self.records.teams_card(wait_id).await.map_err(store_err)?,
            None => None,
        };
        if let Some(card) = card {
            let mut threaded = activity.clone();
            threaded["replyToId"] = Value::String(card.activity_id.clone());
            self.connector()?
                .send(&card.service_url, &card.conversation_id, &threaded)
                .await?;
            return Ok(());
        }
        let Some(conversation) = conversation else {
            return Ok(());
        };
        let found = self.records.teams_conversation(conversation).await;
        let Some(reference) = found.map_err(store_err)? else {
            return Err(SendError::Permanent(format!(
                "the bot was never added to the Teams conversation {conversation}: install the app there (docs/teams.md)"
            )));
        };
        self.connector()?
            .send(&reference.service_url, conversation, activity)
            .await
            .map(drop)
    }

    /// Posts the wait's card once, and keeps the activity id it got.
    async fn post(&self, wait_id: i64, conversation: &str) -> Result<(), SendError> {
        if self
            .records
            .teams_card(wait_id)
            .await
            .map_err(store_err)?
            .is_some()
        {
            return Ok(());
        }
        let Some(reference) = self
            .records
            .teams_conversation(conversation)
            .await
            .map_err(store_err)?
        else {
            return Err(SendError::Permanent(format!(
                "the bot was never added to the Teams conversation {conversation}: install the app there (docs/teams.md)"
            )));
        };
        let Some(view) = self.view(wait_id, None).await? else {
            return Ok(());
        };
        let activity = card_activity(card::render(&view, &self.links, Offer::Buttons));
        let activity_id = self
            .connector()?
            .send(&reference.service_url, conversation, &activity)
            .await?;
        let posted = TeamsCard {
            wait_id,
            gate: view.gate.to_string(),
            canary: view.canary.clone().unwrap_or_default(),
            conversation_id: conversation.to_string(),
            service_url: reference.service_url,
            activity_id,
            decided: None,
            outcome: None,
            final_state: None,
        };
        self.records
            .remember_teams_card(&posted, self.clock.now_ms())
            .await
            .map_err(store_err)
    }

    /// Rewrites a posted card (no-op until it is posted: the post renders
    /// the latest state).
    async fn refresh(&self, wait_id: i64) -> Result<(), SendError> {
        let Some(posted) = self.records.teams_card(wait_id).await.map_err(store_err)? else {
            return Ok(());
        };
        let Some(view) = self.view(wait_id, Some(&posted)).await? else {
            return Ok(());
        };
        let activity = card_activity(card::render(&view, &self.links, Offer::Buttons));
        self.connector()?
            .update(
                &posted.service_url,
                &posted.conversation_id,
                &posted.activity_id,
                &activity,
            )
            .await
    }

    async fn workflow(&self, wait_id: i64) -> Result<(), SendError> {
        let Some(workflow) = &self.workflow else {
            return Ok(());
        };
        let Some(view) = self.view(wait_id, None).await? else {
            return Ok(());
        };
        let activity = card_activity(card::render(&view, &self.links, Offer::PageLink));
        workflow.post(&activity).await
    }

    /// What the wait's card shows now; None when the wait is gone.
    async fn view(
        &self,
        wait_id: i64,
        posted: Option<&TeamsCard>,
    ) -> Result<Option<CardView>, SendError> {
        view(
            &self.records,
            &self.evidence,
            wait_id,
            posted,
            self.clock.now_ms(),
        )
        .await
    }
}

/// What a wait's card shows now, from the store: the wait, its gate, and
/// what the card itself recorded. None when the wait is gone.
pub async fn view(
    records: &Records,
    evidence: &Evidence,
    wait_id: i64,
    posted: Option<&TeamsCard>,
    now: Millis,
) -> Result<Option<CardView>, SendError> {
    let Some(wait) = records.wait(wait_id).await.map_err(store_err)? else {
        return Ok(None);
    };
    let gate = records.load_gate(&wait.gate).await.map_err(store_err)?;
    let gate_status = gate.map(|g| g.status);
    let approvals = match &gate_status {
        Some(GateStatus::Approving(t)) => Some(t.summary()),
        Some(GateStatus::Open(a)) => crate::gate::quorum::opened_by(a),
        _ => None,
    };
    let status = status(posted, gate_status.as_ref(), wait.outcome.as_deref());
    let open = status.as_ref().is_none_or(|(_, open)| *open);
    let metadata = crate::evidence::strings(&wait.metadata);
    let progress = match &wait.canary {
        Some(c) => records
            .canary_progress(c)
            .await
            .map_err(store_err)?
            .filter(|p| p.of_revision(&wait.checksum))
            .map(|p| card::progress_line(&p)),
        None => None,
    };
    let evidence = match (&wait.canary, open) {
        (Some(c), true) => evidence.line_of(c),
        _ => None,
    };
    Ok(Some(CardView {
        path: crate::core::path::path_of(records, &wait.gate, now)
            .await
            .map_err(store_err)?,
        progress,
        evidence,
        wait_id,
        gate: wait.gate.clone(),
        canary: wait.canary.as_ref().map(ToString::to_string),
        checksum: wait.checksum.clone(),
        phase: wait.phase.to_string(),
        metadata,
        since: wait.started_at,
        now,
        status: status.map(|(s, _)| s),
        approvals,
        open,
    }))
}

/// The card's status line and whether its buttons stay: the rollout's end,
/// then a decision from the card, then the gate's state, then the wait's end.
fn status(
    posted: Option<&TeamsCard>,
    gate: Option<&GateStatus>,
    outcome: Option<&str>,
) -> Option<(Status, bool)> {
    let line = |text: String, color| Status { text, color };
    if let Some((kind, message)) = posted.and_then(|p| p.final_state.as_ref()) {
        let text = match kind.as_str() {
            "promotion_completed" => "Promoted".to_string(),
            "rolling_back" => format!("Rolling back: {message}"),
            _ => format!("Failed: {message}"),
        };
        let color = if kind == "promotion_completed" {
            "good"
        } else {
            "attention"
        };
        return Some((line(text, color), false));
    }
    // What the approval in force said (a person's reason, a change's number
    // and link): escaped with the rest of the line when the card is drawn.
    let why = match gate {
        Some(GateStatus::Open(a)) => a
            .change
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    // A hold shows as the gate's state, below.
    let decided = posted.and_then(|p| p.decided.as_ref());
    if let Some((verb, by, at)) = decided.filter(|(verb, ..)| verb != card::HOLD) {
        let (done, color) = if verb == card::APPROVE {
            ("Approved", "good")
        } else {
            ("Rejected", "attention")
        };
        let why = if verb == card::APPROVE {
            why.as_str()
        } else {
            ""
        };
        let text = format!("{done} by {by} in Teams at {} UTC{why}", card::hhmm(*at));
        return Some((line(text, color), false));
    }
    match gate {
        Some(GateStatus::Open(a)) => {
            let by = &a.change.by;
            let text = format!(
                "Approved by {} via {} at {} UTC{why}",
                by.name,
                by.source,
                card::hhmm(a.change.at)
            );
            return Some((line(text, "good"), false));
        }
        Some(GateStatus::Held { change }) => {
            let text = format!("Held by {} via {}", change.by.name, change.by.source);
            return Some((line(text, "warning"), true));
        }
        _ => {}
    }
    outcome.map(|o| (line(format!("The wait is over: {o}"), "attention"), false))
}

/// A key as stored in a card's button, checked.
pub fn parse_gate(gate: &str) -> Option<GateKey> {
    GateKey::parse(gate, None).ok()
}
