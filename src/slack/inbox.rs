//! Work on stored Slack deliveries (the inbox's `slack` source): button clicks
//! and slash commands that change gates. Runs after Slack got its 200.

use std::sync::Arc;

use serde_json::json;

use super::answers::{reply, SlackAuthorizer, SlackDenied};
use super::approvers::Approvers;
use super::blocks;
use super::blocks::hhmm;
use super::client::Response;
use super::client::SlackApi;
use super::payload::{Click, Interaction, ModalOrigin, SlashCommand, APPROVE, REJECT};
use super::record::{self, Decision, Ended};
use super::sink::{parse_gate, SlackJob};
use crate::command::{parse_slash, Command, Invalid};
use crate::core::authors::PrAuthors;
use crate::core::commands::{self, Subject};
use crate::core::dispatch::{self, Request};
use crate::core::intake::{self, Intake, Mark, Replies, Said, Told};
use crate::core::AppState;
use crate::core::{CommandError, Provenance};
use crate::gate::{Actor, DeliveryId, GateKey, GateStatus, Phase, Source};
use crate::notify::{BoxFuture, Lease, SendError, Settled, SinkJob};
use crate::store::{NewJob, QueueItem, WaitRow};
use crate::templates::Templates;

pub const CLICK: &str = "block_actions";
pub const SLASH: &str = "slash_command";

pub struct SlackInbox {
    pub state: AppState,
    /// For the reason modal, opened at once while the click's trigger holds.
    pub api: Arc<SlackApi>,
    pub approvers: Arc<Approvers>,
    pub authors: PrAuthors,
}

fn store_err(e: crate::store::StoreError) -> SendError {
    e.into()
}

/// A stored Slack delivery: a click on a message's button, or a slash command.
pub enum SlackDelivery {
    Click(Box<Interaction>),
    Slash(Box<SlashCommand>),
}

impl Intake for SlackInbox {
    type Delivery = SlackDelivery;

    fn decode(item: &QueueItem) -> Result<SlackDelivery, SendError> {
        let unreadable =
            |what: &str, e: serde_json::Error| SendError::Permanent(format!("stored {what}: {e}"));
        match item.topic.as_str() {
            CLICK => serde_json::from_str(&item.payload)
                .map(SlackDelivery::Click)
                .map_err(|e| unreadable("click", e)),
            SLASH => serde_json::from_str(&item.payload)
                .map(SlackDelivery::Slash)
                .map_err(|e| unreadable("command", e)),
            other => Err(SendError::Permanent(format!(
                "unknown Slack delivery kind {other}"
            ))),
        }
    }

    /// Clicks and commands apply as they come: each settles on its own.
    fn lane(&self, _delivery: &SlackDelivery) -> Option<String> {
        None
    }

    fn take<'a>(
        &'a self,
        delivery: SlackDelivery,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            match delivery {
                SlackDelivery::Click(i) => self.click(&i, item, lease).await,
                SlackDelivery::Slash(c) => self.slash(&c, item, lease).await,
            }
        })
    }
}

impl SlackInbox {
    fn templates(&self) -> &Templates {
        &self.state.templates
    }

    async fn respond(&self, response_url: Option<&str>, text: String) -> Result<(), SendError> {
        let Some(job) = response(response_url, text)? else {
            return Ok(());
        };
        self.state
            .engine
            .commands()
            .enqueue(&[job])
            .await
            .map_err(store_err)?;
        Ok(())
    }

    /// A click on a waiting message: Approve opens its gate, Reject is what
    /// the core says it is there. The decision, the change and the message's
    /// refresh commit together: the notice of the change finds the message
    /// decided, and a change that fails leaves no decision behind.
    async fn click(
        &self,
        i: &Interaction,
        item: &QueueItem,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let Some(click) = i.click() else {
            return Ok(Settled::NotYet);
        };
        let engine = &self.state.engine;
        let url = i.response_url.as_deref();
        let key = parse_gate(&click.value.gate)?;
        let wait_id = click.value.wait_id;
        let wait = self.state.records.wait(wait_id).await.map_err(store_err)?;
        // A button acts on the wait its message was made for, at that wait's
        // gate: one that names another gate is refused, and nothing is written.
        if let Some(w) = wait.as_ref().filter(|w| w.gate != key) {
            let why = format!(
                "this button names {key}, but its message is for {}: nothing was done",
                w.gate
            );
            let text = reply(self.templates(), json!({"what": "error", "message": why}));
            self.respond(url, text).await?;
            return Err(SendError::Permanent(why));
        }
        let request = self.click_request(i, &key, click.approve, wait.as_ref());
        let authorizer = SlackAuthorizer {
            state: &self.state,
            approvers: &self.approvers,
            authors: &self.authors,
            user: &i.user.id,
            decided: self.decided(wait_id).await?,
            over: self.over(wait_id, wait.as_ref()).await?,
        };
        let authorized = dispatch::authorize(engine, &request, &authorizer)
            .await
            .map_err(send_error)?;
        // Asked why (and which change) only when that is all that is missing:
        // one who may not act, or a click on a decided message, is answered as before.
        let held = || async {
            matches!(
                engine.gate(&key).await.map(|g| g.status),
                Ok(GateStatus::Held { .. })
            )
        };
        if let (
            Some(why @ (Invalid::ReasonRequired { .. } | Invalid::ChangeRequired { .. })),
            None,
        ) = (authorized.invalid(), authorized.denied())
        {
            if !held().await && self.asked_why(i, &click, why).await {
                intake::answer(engine, Said::jobs(Vec::new()), Some(lease)).await?;
                return Ok(Settled::Done);
            }
        }
        // Opened elsewhere meanwhile: say so, change nothing.
        if click.approve && authorized.allowed() {
            if let GateStatus::Open(a) = engine.gate(&key).await.map_err(store_err)?.status {
                let by = format!("@{} via {}", a.change.by.name, a.change.by.source);
                let text = reply(
                    self.templates(),
                    json!({"what": "already", "verb": "approved", "by": by, "at_hhmm": hhmm(a.change.at)}),
                );
                self.respond(url, text).await?;
                return Ok(Settled::NotYet);
            }
        }
        let replies = self.answer(i, &click, url, item, authorized.denied(), &request)?;
        intake::take_one(engine, "slack", request, authorized, Some(lease), replies).await?;
        Ok(Settled::Done)
    }

    /// A button the policy wants a reason for: the modal that asks why,
    /// opened while the click's trigger holds. False when it could not be
    /// (a submitted modal, or Slack refused): the refusal is answered instead.
    async fn asked_why(&self, i: &Interaction, click: &Click, why: &Invalid) -> bool {
        let Some(trigger) = i.trigger_id.as_deref().filter(|_| i.kind == CLICK) else {
            return false;
        };
        // The button as the click was read, so the submission reads back the same.
        let action = if click.approve { APPROVE } else { REJECT };
        let Ok(value) = serde_json::to_string(&click.value) else {
            return false;
        };
        let origin = ModalOrigin {
            action_id: action.to_string(),
            value,
            response_url: i.response_url.clone(),
        };
        let Ok(origin) = serde_json::to_string(&origin) else {
            return false;
        };
        let modal = blocks::reason_modal(click.approve, &why.to_string(), &origin);
        match self.api.open_view(trigger, &modal).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    wait = click.value.wait_id,
                    "cannot open the reason modal, answering instead: {e}"
                );
                false
            }
        }
    }

    /// What a click writes besides its change, made before the unit: the
    /// message's refresh; its decision, written only when the click was done
    /// in full (not an approval that only counted); and the answer to the
    /// clicker, which says a refusal or that the click applied late (the
    /// message shows the rest).
    fn answer<'a>(
        &self,
        i: &Interaction,
        click: &Click,
        url: Option<&str>,
        item: &'a QueueItem,
        denied: Option<&SlackDenied>,
        request: &Request,
    ) -> Result<Replies<'a>, SendError> {
        let decision = Decision {
            approved: click.approve,
            user_id: Some(i.user.id.clone()),
            name: i.user_label(),
            via: "slack".into(),
            // Both set by the core as the unit writes it.
            at: 0,
            reason: request.command.reason().map(str::to_string),
            rollback_gate: None,
        };
        let answer = url.filter(|u| !u.is_empty()).map(|url| SlackJob::Answer {
            response_url: url.to_string(),
            denied: denied.map(|d| d.reply(self.templates(), request.command.name())),
            typed: false,
            lines: Vec::new(),
        });
        let refresh = SlackJob::Refresh {
            wait_id: click.value.wait_id,
        };
        Ok(Replies {
            reply: answer
                .map(|a| a.job(None))
                .transpose()
                .map_err(SendError::from)?,
            shows: |line| !matches!(line, Told::Applied { .. }),
            applied: Some(refresh.job(None).map_err(SendError::from)?),
            decided: vec![Mark::SlackDecision {
                wait_id: click.value.wait_id,
                decision,
            }],
            received: Some(item),
            ..Replies::default()
        })
    }

    /// The command a click means, by whom, for the revision the message showed.
    fn click_request(
        &self,
        i: &Interaction,
        key: &GateKey,
        approve: bool,
        wait: Option<&WaitRow>,
    ) -> Request {
        let mut who = Provenance::new(Actor::new(i.user_label(), Source::Slack))
            .person(self.person(&i.user.id))
            .delivery(DeliveryId::slack_click(&i.click_id()))
            .written_at(i.signed_at);
        // The message showed one revision of one canary: the click approves that
        // one, never a newer revision that reaches the gate before it asks again.
        if let Some((w, canary)) = wait.and_then(|w| Some((w, w.canary.clone()?))) {
            who = who.revision(canary, w.checksum.clone());
        }
        // Typed in the reason modal, when the click came back through it.
        let reason = i.reason();
        let command = if approve {
            Command::Open {
                kind: key.kind,
                reason,
                force: false,
            }
        } else {
            Command::Reject {
                phase: Some(wait.map_or(Phase::None, |w| w.phase.clone())),
                reason,
            }
        };
        Request {
            place: None,
            command,
            subject: Subject::Gate(key.clone()),
            who,
        }
    }

    /// The message was approved or rejected already (here or by an earlier click).
    async fn decided(&self, wait_id: i64) -> Result<Option<SlackDenied>, SendError> {
        let found = record::get::<Decision>(&self.state.records, &record::decision_key(wait_id))
            .await
            .map_err(store_err)?;
        Ok(found.map(|d| SlackDenied::Decided {
            verb: if d.approved { "approved" } else { "rejected" },
            by: d.by(),
            name: d.name,
            at: d.at,
        }))
    }

    /// The wait the message showed is over, or unknown.
    async fn over(
        &self,
        wait_id: i64,
        wait: Option<&WaitRow>,
    ) -> Result<Option<SlackDenied>, SendError> {
        let ended = record::get::<Ended>(&self.state.records, &record::ended_key(wait_id))
            .await
            .map_err(store_err)?
            .map(|e| e.outcome)
            .or_else(|| wait.and_then(|w| w.outcome.clone()))
            .or_else(|| wait.is_none().then(|| "unknown wait".to_string()));
        Ok(ended.map(SlackDenied::Over))
    }

    async fn slash(
        &self,
        c: &SlashCommand,
        item: &QueueItem,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let url = Some(c.response_url.as_str());
        let parsed = match crate::command::freeze_verb(&c.text) {
            Some((verb, rest)) => self.freeze_command(verb, rest),
            None => self.gate_command(&c.text),
        };
        let (command, subject) = match parsed {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return Ok(Settled::NotYet),
            Err(text) => {
                self.respond(url, text).await?;
                return Ok(Settled::NotYet);
            }
        };
        let request = Request {
            place: None,
            command,
            subject,
            who: Provenance::new(Actor::new(c.user_label(), Source::Slack))
                .person(self.person(&c.user_id))
                .delivery(DeliveryId::slack_command(&c.trigger_id))
                .written_at(c.signed_at)
                .typed(),
        };
        let authorizer = SlackAuthorizer {
            state: &self.state,
            approvers: &self.approvers,
            authors: &self.authors,
            user: &c.user_id,
            decided: None,
            over: None,
        };
        let engine = &self.state.engine;
        let authorized = dispatch::authorize(engine, &request, &authorizer)
            .await
            .map_err(send_error)?;
        // The answer says what was done, or why not, and whether late; the
        // core fills it in the unit that decides, and the sink words it.
        let answer = SlackJob::Answer {
            response_url: c.response_url.clone(),
            denied: authorized
                .denied()
                .map(|d| d.reply(self.templates(), request.command.name())),
            typed: true,
            lines: Vec::new(),
        };
        let replies = Replies {
            reply: (!c.response_url.is_empty())
                .then(|| answer.job(None))
                .transpose()
                .map_err(SendError::from)?,
            shows: |_| true,
            received: Some(item),
            ..Replies::default()
        };
        intake::take_one(engine, "slack", request, authorized, Some(lease), replies).await?;
        Ok(Settled::Done)
    }

    /// `/gatebot <command> <target> [reason]`; `None` when it names nothing.
    fn gate_command(&self, text: &str) -> Result<Option<(Command, Subject)>, String> {
        let inv = parse_slash(text).map_err(|e| e.to_string())?;
        let default_repo = self.state.config.github.repository.as_ref();
        let subject =
            commands::subject_of(inv.target.clone(), default_repo).map_err(|e| e.to_string())?;
        Ok(subject.map(|s| (Command::from_verb(inv.command, inv.reason), s)))
    }

    /// `/gatebot freeze …` and `/gatebot unfreeze …`.
    fn freeze_command(&self, verb: &str, rest: &str) -> Result<Option<(Command, Subject)>, String> {
        let line = crate::command::parse_freeze(rest);
        let (scope, until) = line.read(self.state.engine.now())?;
        let command = if verb == "freeze" {
            Command::Freeze {
                scope,
                until,
                reason: line.reason.unwrap_or_default(),
            }
        } else {
            Command::Unfreeze { scope }
        };
        Ok(Some((command, Subject::Nothing)))
    }

    /// Who a Slack user is when approvals are counted: their GitHub login by
    /// the policy's `[users]`, so approving from both counts once.
    fn person(&self, user_id: &str) -> String {
        match self.state.policy.github_login_of(user_id) {
            Some(login) => login.to_string(),
            None => format!("slack:{user_id}"),
        }
    }
}

/// The outbox's terms for a command not done: given up when trying again
/// cannot help, tried again (when Slack or GitHub said, at that time) otherwise.
/// The job that answers the clicker or sender on Slack's `response_url`
/// (none without one: the answer is logged).
fn response(response_url: Option<&str>, text: String) -> Result<Option<NewJob>, SendError> {
    let Some(url) = response_url.filter(|u| !u.is_empty()) else {
        tracing::info!(reply = %text, "no response_url to answer on");
        return Ok(None);
    };
    let job = SlackJob::Respond {
        response_url: url.to_string(),
        response: Response::ephemeral(text),
    };
    Ok(Some(job.job(None)?))
}

fn send_error(e: CommandError) -> SendError {
    e.into()
}
