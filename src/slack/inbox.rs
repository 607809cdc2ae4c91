//! Work on stored Slack deliveries (the inbox's `slack` source): button clicks
//! and slash commands that change gates. Runs after Slack got its 200.

use std::sync::Arc;

use serde_json::json;

use super::answers::{reply, SlackAuthorizer};
use super::approvers::Approvers;
use super::blocks::hhmm;
use super::client::Response;
use super::payload::{Interaction, SlashCommand};
use super::record::{self, Decision, Ended};
use super::sink::{parse_gate, SlackJob};
use crate::command::{parse_slash, Command};
use crate::core::authors::PrAuthors;
use crate::core::commands::{self, Subject};
use crate::core::dispatch::{self, Authorizer, Outcome, Request};
use crate::core::AppState;
use crate::core::{EngineError, Provenance};
use crate::gate::{Actor, DeliveryId, GateKey, GateKind, GateStatus, Scope, Source};
use crate::notify::{BoxFuture, Handler, SendError};
use crate::policy::SlackRule;
use crate::store::QueueItem;
use crate::templates::Templates;

pub const CLICK: &str = "block_actions";
pub const SLASH: &str = "slash_command";

pub struct SlackInbox {
    pub state: AppState,
    pub approvers: Arc<Approvers>,
    pub authors: PrAuthors,
}

/// The command whose Slack rule governs a button: Approve opens the gate;
/// Reject of a promotion or traffic step rolls back, of anything else keeps it closed.
pub fn command_for(kind: GateKind, approve: bool, phase: &str) -> Command {
    match (kind, approve) {
        (GateKind::Start, _) => Command::Start,
        (GateKind::Traffic, true) => Command::Traffic,
        (GateKind::Promote | GateKind::LegacyGate, true) => Command::Promote,
        (GateKind::Promote | GateKind::Traffic, false) => Command::Rollback,
        (GateKind::LegacyGate, false) if progressing(phase) => Command::Rollback,
        (GateKind::LegacyGate, false) => Command::Promote,
        (GateKind::Rollback | GateKind::LegacyRollback, _) => Command::Rollback,
    }
}

fn progressing(phase: &str) -> bool {
    matches!(phase, "Progressing" | "WaitingPromotion" | "Promoting")
}

/// The rollback gate that a Reject of `key` opens, if it opens one.
pub fn rollback_of(key: &GateKey, phase: &str) -> Option<GateKey> {
    match key.kind {
        GateKind::Promote | GateKind::Traffic => {
            Some(GateKey::new(GateKind::Rollback, key.scope.clone()))
        }
        GateKind::LegacyGate if progressing(phase) => {
            Some(GateKey::new(GateKind::LegacyRollback, key.scope.clone()))
        }
        _ => None,
    }
}

fn engine_err(e: EngineError) -> Result<String, SendError> {
    match e {
        EngineError::Held { .. } | EngineError::WrittenBeforeClose { .. } => Ok(e.to_string()),
        EngineError::Store(e) => Err(SendError::retry(format!("store: {e}"))),
    }
}

fn store_err(e: crate::store::StoreError) -> SendError {
    SendError::retry(format!("store: {e}"))
}

impl Handler for SlackInbox {
    fn handle<'a>(&'a self, item: &'a QueueItem) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            match item.topic.as_str() {
                CLICK => {
                    let i: Interaction = serde_json::from_str(&item.payload)
                        .map_err(|e| SendError::Permanent(format!("stored click: {e}")))?;
                    self.click(&i).await
                }
                SLASH => {
                    let c: SlashCommand = serde_json::from_str(&item.payload)
                        .map_err(|e| SendError::Permanent(format!("stored command: {e}")))?;
                    self.slash(&c).await
                }
                other => Err(SendError::Permanent(format!(
                    "unknown Slack delivery kind {other}"
                ))),
            }
        })
    }
}

impl SlackInbox {
    fn templates(&self) -> &Templates {
        &self.state.templates
    }

    async fn respond(&self, response_url: Option<&str>, text: String) -> Result<(), SendError> {
        let Some(url) = response_url.filter(|u| !u.is_empty()) else {
            tracing::info!(reply = %text, "no response_url to answer on");
            return Ok(());
        };
        let job = SlackJob::Respond {
            response_url: url.to_string(),
            response: Response::ephemeral(text),
        };
        self.state
            .engine
            .enqueue(&[job.job(None)?])
            .await
            .map_err(store_err)?;
        Ok(())
    }

    async fn refuse(&self, key: &GateKey, who: &Provenance, why: &str) -> Result<(), SendError> {
        let who = who.clone().reason(Some(why.to_string()));
        self.state
            .engine
            .refuse(key, &who)
            .await
            .map_err(|e| match e {
                EngineError::Store(e) => store_err(e),
                other => SendError::retry(other.to_string()),
            })
    }

    /// Why `user` may not act on gates of `scope` under four eyes: they opened
    /// the pull request, by the policy's GitHub-to-Slack user mapping.
    pub(super) async fn own_pull_request(
        &self,
        rule: &SlackRule,
        user: &str,
        scope: &Scope,
    ) -> Result<Option<String>, SendError> {
        let Scope::Pr { repo, number } = scope else {
            return Ok(None);
        };
        if !rule.forbid_self_approval {
            return Ok(None);
        }
        let Some(login) = self.state.policy.github_login_of(user) else {
            return Ok(None);
        };
        let author = self
            .authors
            .author(repo, *number, self.state.engine.now())
            .await?;
        Ok(author
            .is_some_and(|a| a.eq_ignore_ascii_case(login))
            .then(|| {
                format!(
                    "{user} (@{login}) opened {repo}#{number}: someone else must approve (four eyes)",
                    number = number.0
                )
            }))
    }

    async fn click(&self, i: &Interaction) -> Result<(), SendError> {
        let Some(click) = i.click() else {
            return Ok(());
        };
        let engine = &self.state.engine;
        let store = &self.state.store;
        let url = i.response_url.as_deref();
        let user = i.user.id.clone();
        let mut who = Provenance::new(Actor::new(i.user_label(), Source::Slack))
            .person(self.person(&user))
            .delivery(DeliveryId::slack_click(&i.click_id()))
            .written_at(i.signed_at);
        let key = parse_gate(&click.value.gate)?;
        let wait_id = click.value.wait_id;
        let wait = store.wait(wait_id).await.map_err(store_err)?;
        // The message showed one revision of one canary: the click approves that
        // one, never a newer revision that reaches the gate before it asks again.
        if let Some((w, canary)) = wait.as_ref().and_then(|w| Some((w, w.canary.clone()?))) {
            who = who.revision(canary, w.checksum.clone());
        }
        let phase = wait.as_ref().map(|w| w.phase.clone()).unwrap_or_default();
        let command = command_for(key.kind, click.approve, &phase);

        // Decided already (here or by an earlier click): say so, change nothing.
        if let Some(d) = record::get::<Decision>(store, &record::decision_key(wait_id))
            .await
            .map_err(store_err)?
        {
            let verb = if d.approved { "approved" } else { "rejected" };
            let text = reply(
                self.templates(),
                json!({"what": "already", "verb": verb, "by": d.by(), "at_hhmm": hhmm(d.at)}),
            );
            self.refuse(&key, &who, &format!("already {verb} by {}", d.name))
                .await?;
            return self.respond(url, text).await;
        }

        // The same rules as the slash command (approvers, then four eyes).
        let authorizer = SlackAuthorizer {
            inbox: self,
            rule: self.state.policy.slack(command),
            user: &user,
        };
        if let Err(denied) = authorizer
            .authorize(command, std::slice::from_ref(&key))
            .await?
        {
            self.refuse(&key, &who, &denied.to_string()).await?;
            return self
                .respond(url, denied.reply(self.templates(), command))
                .await;
        }

        // The wait is over, or the gate was opened elsewhere meanwhile.
        let ended = record::get::<Ended>(store, &record::ended_key(wait_id))
            .await
            .map_err(store_err)?
            .map(|e| e.outcome)
            .or_else(|| wait.as_ref().and_then(|w| w.outcome.clone()))
            .or_else(|| wait.is_none().then(|| "unknown wait".to_string()));
        if let Some(outcome) = ended {
            self.refuse(&key, &who, &format!("the wait is over ({outcome})"))
                .await?;
            let text = reply(
                self.templates(),
                json!({"what": "over", "outcome": outcome}),
            );
            return self.respond(url, text).await;
        }
        if let GateStatus::Open(a) = engine.gate(&key).await.map_err(store_err)?.status {
            if click.approve {
                let by = format!("@{} via {}", a.change.by.name, a.change.by.source);
                let text = reply(
                    self.templates(),
                    json!({"what": "already", "verb": "approved", "by": by, "at_hhmm": hhmm(a.change.at)}),
                );
                return self.respond(url, text).await;
            }
        }

        let rollback = if click.approve {
            None
        } else {
            rollback_of(&key, &phase)
        };
        let now = engine.now();
        let decision = Decision {
            approved: click.approve,
            user_id: Some(user.clone()),
            name: i.user_label(),
            via: "slack".into(),
            at: now,
            reason: None,
            rollback_gate: rollback.as_ref().map(ToString::to_string),
        };
        // The decision, the change and the message's refresh commit together:
        // the notice of the change finds the message decided, and a change
        // that fails leaves no decision behind.
        let dkey = record::decision_key(wait_id);
        let mut unit = engine.begin().await.map_err(store_err)?;
        // An approval that only counts towards several leaves the buttons for
        // the others: the message is not decided.
        let mut decided = true;
        let result = match (&rollback, click.approve) {
            (_, true) => commands::apply_in(&mut unit, command, &Subject::Gate(key.clone()), &who)
                .await
                .map(|applied| {
                    decided = !applied
                        .gates
                        .iter()
                        .any(|g| matches!(g.status, GateStatus::Approving(_)));
                }),
            (Some(rb), false) => {
                let why = format!(
                    "revision {phase_rev} rejected in Slack",
                    phase_rev = wait.as_ref().map_or("", |w| w.checksum.as_str())
                );
                unit.open(rb, &who.clone().reason(Some(why)))
                    .await
                    .map(|_| ())
            }
            (None, false) => {
                let why = format!(
                    "rejected in Slack by {} (revision {})",
                    i.user_label(),
                    wait.as_ref().map_or("", |w| w.checksum.as_str())
                );
                unit.close(&key, &who.clone().reason(Some(why)))
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = result {
            unit.rollback().await;
            self.audit_stale(&e, &who).await?;
            let message = engine_err(e)?;
            let text = reply(
                self.templates(),
                json!({"what": "error", "message": message}),
            );
            return self.respond(url, text).await;
        }
        if decided {
            record::decide_in(unit.tx(), &dkey, &decision)
                .await
                .map_err(store_err)?;
        }
        unit.enqueue(&[SlackJob::Refresh { wait_id }.job(None)?])
            .await
            .map_err(store_err)?;
        unit.commit().await.map_err(store_err)?;
        Ok(())
    }

    async fn slash(&self, c: &SlashCommand) -> Result<(), SendError> {
        if let Some((verb, rest)) = crate::command::freeze_verb(&c.text) {
            return self.freeze(c, verb, rest).await;
        }
        let url = Some(c.response_url.as_str());
        let inv = match parse_slash(&c.text) {
            Ok(inv) => inv,
            Err(e) => return self.respond(url, e.to_string()).await,
        };
        let default_repo = self.state.config.github.repository.as_ref();
        let subject = match commands::subject_of(inv.target.clone(), default_repo) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(()),
            Err(e) => return self.respond(url, e).await,
        };
        let (force, reason) = crate::command::split_force(inv.reason.clone());
        let rule = if force {
            match self.force_rule(inv.command, reason.as_deref()) {
                Ok(rule) => rule,
                Err(why) => return self.respond(url, why).await,
            }
        } else {
            self.state.policy.slack(inv.command)
        };
        let request = Request {
            command: inv.command,
            subject,
            who: Provenance::new(Actor::new(c.user_label(), Source::Slack))
                .person(self.person(&c.user_id))
                .reason(reason)
                .force(force)
                .delivery(DeliveryId::slack_command(&c.trigger_id))
                .written_at(c.signed_at),
        };
        let authorizer = SlackAuthorizer {
            inbox: self,
            rule,
            user: &c.user_id,
        };
        let outcome = dispatch::run(&self.state.engine, "slack", &request, &authorizer).await?;
        let text = match outcome {
            Outcome::Applied(applied) => reply(
                self.templates(),
                json!({"what": "done", "summary": applied.summary()}),
            ),
            Outcome::Denied(denied) => denied.reply(self.templates(), inv.command),
            Outcome::Held { gate, by, via } => {
                let message = EngineError::Held { gate, by, via }.to_string();
                reply(
                    self.templates(),
                    json!({"what": "error", "message": message}),
                )
            }
            Outcome::WrittenBeforeClose { gate, closed_at } => {
                let message = EngineError::WrittenBeforeClose { gate, closed_at }.to_string();
                reply(
                    self.templates(),
                    json!({"what": "error", "message": message}),
                )
            }
        };
        self.respond(url, text).await
    }

    /// `/gatebot freeze …` and `/gatebot unfreeze …`, by the policy's
    /// `slack.commands.freeze` (or `unfreeze`) approvers.
    async fn freeze(&self, c: &SlashCommand, verb: &str, rest: &str) -> Result<(), SendError> {
        let url = Some(c.response_url.as_str());
        let line = crate::command::parse_freeze(rest);
        let (scope, until) = match line.read(self.state.engine.now()) {
            Ok(read) => read,
            Err(e) => return self.respond(url, e).await,
        };
        let rule = self.state.policy.slack_named(verb);
        if self.approvers.check(&rule, &c.user_id).await? != super::approvers::Verdict::Allowed {
            let text = format!(
                "<@{}> may not {verb} from Slack: the approvers are in {}",
                c.user_id, rule.setting
            );
            return self.respond(url, text).await;
        }
        let engine = &self.state.engine;
        let who = Actor::new(c.user_label(), Source::Slack);
        let failed = |e: EngineError| match e {
            EngineError::Store(e) => store_err(e),
            other => SendError::retry(other.to_string()),
        };
        let text = if verb == "freeze" {
            let Some(reason) = line.reason else {
                return self.respond(url, "a freeze needs a reason".into()).await;
            };
            let delivery = format!("slack:{}", c.trigger_id);
            let f = engine
                .freeze(scope, until, &reason, &who, Some(&delivery))
                .await
                .map_err(failed)?;
            format!(":snowflake: Changes are {}", f.reason_line())
        } else {
            let lifted = engine.unfreeze(&scope, &who).await.map_err(failed)?;
            match lifted.len() {
                0 => format!("nothing was frozen in {scope}"),
                n => format!(":sunny: lifted {n} freeze(s) of {scope}"),
            }
        };
        self.respond(url, text).await
    }

    /// Who a Slack user is when approvals are counted: their GitHub login by
    /// the policy's `[users]`, so approving from both counts once.
    fn person(&self, user_id: &str) -> String {
        match self.state.policy.github_login_of(user_id) {
            Some(login) => login.to_string(),
            None => format!("slack:{user_id}"),
        }
    }

    /// Break glass from Slack: only a gate-opening command, with a reason, by
    /// the policy's `slack.commands.force` approvers.
    fn force_rule(&self, command: Command, reason: Option<&str>) -> Result<SlackRule, String> {
        if crate::core::commands::kind_opened_by(command).is_none_or(GateKind::is_rollback) {
            return Err(format!(
                "`--force` opens a start, promote or traffic gate, not `{command}`"
            ));
        }
        if reason.is_none() {
            return Err(format!(
                "break glass needs a reason: `/gatebot {command} <target> --force <reason>`"
            ));
        }
        self.state.policy.slack_force().ok_or_else(|| {
            "break glass is not set up: the policy names who may force with [slack.commands.force] approvers".to_string()
        })
    }

    /// A click or command sent before the gate's last close is refused; the
    /// audit log says so.
    async fn audit_stale(&self, e: &EngineError, who: &Provenance) -> Result<(), SendError> {
        let EngineError::WrittenBeforeClose { gate, .. } = e else {
            return Ok(());
        };
        self.refuse(gate, who, &e.to_string()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{CanaryRef, Scope};

    #[test]
    fn reject_means_rollback_only_once_progressing() {
        let scope = Scope::Canary(CanaryRef::new("test", "podinfo").unwrap());
        let promote = GateKey::new(GateKind::Promote, scope.clone());
        assert_eq!(
            rollback_of(&promote, "Progressing").unwrap().to_string(),
            "/gates/rollback/canary/test/podinfo"
        );
        assert!(rollback_of(&GateKey::new(GateKind::Start, scope.clone()), "Waiting").is_none());
        let legacy = GateKey::new(GateKind::LegacyGate, scope);
        assert_eq!(
            rollback_of(&legacy, "WaitingPromotion")
                .unwrap()
                .to_string(),
            "/loadtester/rollback/test/podinfo"
        );
        assert!(rollback_of(&legacy, "Waiting").is_none());
        assert_eq!(command_for(GateKind::Promote, false, ""), Command::Rollback);
        assert_eq!(command_for(GateKind::Start, false, ""), Command::Start);
    }
}
