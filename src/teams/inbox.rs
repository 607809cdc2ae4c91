//! Work on stored Teams activities (the inbox's `teams` source): a message
//! typed to the bot (`@gatebot promote 42 reason`) is read with the Slack
//! slash command's grammar once its mentions are stripped, and applied
//! through the one command path with Teams' authorizer.

use crate::command::{parse_freeze, parse_slash, Command, Verb};
use crate::core::authors::PrAuthors;
use crate::core::commands::{self, Subject};
use crate::core::dispatch::{self, Request};
use crate::core::intake::{self, Intake, Replies};
use crate::core::{AppState, Provenance};
use crate::gate::{Actor, DeliveryId, Source};
use crate::notify::{BoxFuture, Lease, SendError, Settled};
use crate::store::QueueItem;

use super::activity::Activity;
use super::answers::{name_of, person_of, send_error, TeamsAuthorizer};
use super::sink::Reply;

/// A message typed to the bot.
pub const MESSAGE: &str = "message";

pub struct TeamsInbox {
    pub state: AppState,
    /// The PRs' authors, for four eyes.
    pub authors: PrAuthors,
    /// Whether answers are posted (GATEBOT_TEAMS_APP_PASSWORD is set).
    pub replies: bool,
}

impl Intake for TeamsInbox {
    type Delivery = Activity;

    fn decode(item: &QueueItem) -> Result<Activity, SendError> {
        serde_json::from_str(&item.payload)
            .map_err(|e| SendError::Permanent(format!("stored activity: {e}")))
    }

    /// Messages and card clicks apply as they come: each settles on its own.
    fn lane(&self, _activity: &Activity) -> Option<String> {
        None
    }

    fn take<'a>(
        &'a self,
        activity: Activity,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            if item.topic == super::invoke::INVOKE {
                let click = super::invoke::Stored {
                    activity: &activity,
                    item,
                    lease,
                    replies: self.replies,
                };
                super::invoke::apply(&self.state, &self.authors, click).await?;
                return Ok(Settled::Done);
            }
            self.message(&activity, item, lease).await
        })
    }
}

/// A reply in `activity`'s thread, its words to come.
fn reply_to(activity: &Activity) -> Reply {
    Reply {
        service_url: activity.service_url.clone(),
        conversation_id: activity.conversation.id.clone(),
        reply_to_id: activity.id.clone(),
        text: String::new(),
        clicker: None,
        lines: Vec::new(),
    }
}

/// The text with every `<at>…</at>` mention taken out, trimmed.
pub fn without_mentions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_ci(rest, "<at>") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        match find_ci(after, "</at>") {
            Some(end) => rest = &after[end + "</at>".len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

impl TeamsInbox {
    /// Queues the answer, posted in the message's thread by the outbox.
    /// Answers at once what needs no unit (`status`, `help`, words it cannot read).
    async fn answer_now(&self, activity: &Activity, text: String) -> Result<Settled, SendError> {
        tracing::info!(from = %activity.from.name, answer = %text, "Teams command");
        self.reply(activity, text).await?;
        Ok(Settled::NotYet)
    }

    async fn reply(&self, activity: &Activity, text: String) -> Result<(), SendError> {
        if !self.replies {
            return Ok(());
        }
        let job = Reply {
            text,
            ..reply_to(activity)
        }
        .job()?;
        self.state
            .engine
            .commands()
            .enqueue(&[job])
            .await
            .map_err(|e| SendError::retry(format!("store: {e}")))
            .map(drop)
    }

    /// Applies the message's command in one unit with its reply (what the
    /// core told of it, worded when sent) and the delivery's settling.
    async fn message(
        &self,
        activity: &Activity,
        item: &QueueItem,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let text = without_mentions(&activity.text);
        if let Ok(inv) = parse_slash(&text) {
            if inv.command == Verb::Status {
                let answer = self.status(inv.target).await?;
                return self.answer_now(activity, answer).await;
            }
        }
        let (command, subject) = match self.command(&text) {
            Ok(parsed) => parsed,
            Err(answer) => return self.answer_now(activity, answer).await,
        };
        let name = name_of(activity);
        let aad_object_id = activity.from.aad_object_id.as_deref();
        let request = Request {
            place: None,
            command,
            subject,
            who: Provenance::new(Actor::new(name, Source::Teams))
                .person(person_of(&self.state, activity))
                .delivery(DeliveryId::teams(&activity.receipt_id()))
                .written_at(activity.received_at)
                .typed(),
        };
        let authorizer = TeamsAuthorizer {
            state: &self.state,
            authors: &self.authors,
            aad_object_id,
            name,
            card: None,
        };
        let engine = &self.state.engine;
        let authorized = dispatch::authorize(engine, &request, &authorizer)
            .await
            .map_err(send_error)?;
        let reply = reply_to(activity).job()?;
        let replies = Replies {
            reply: self.replies.then_some(reply),
            shows: |_| true,
            received: Some(item),
            ..Replies::default()
        };
        let told =
            intake::take_one(engine, "teams", request, authorized, Some(lease), replies).await?;
        tracing::info!(from = %activity.from.name, told = ?told, "Teams command");
        Ok(Settled::Done)
    }

    /// The command and what it is about, or the answer when it is none.
    fn command(&self, text: &str) -> Result<(Command, Subject), String> {
        if let Some((verb, rest)) = crate::command::freeze_verb(text) {
            let line = parse_freeze(rest);
            let (scope, until) = line.read(self.state.engine.now())?;
            let command = match verb {
                "freeze" => Command::Freeze {
                    scope,
                    until,
                    reason: line.reason.unwrap_or_default(),
                },
                _ => Command::Unfreeze { scope },
            };
            return Ok((command, Subject::Nothing));
        }
        let inv = parse_slash(text).map_err(|e| e.to_string())?;
        if inv.command == Verb::Help {
            return Err(help());
        }
        let default_repo = self.state.config.github.repository.as_ref();
        match commands::subject_of(inv.target, default_repo).map_err(|e| e.to_string())? {
            Some(subject) => Ok((Command::from_verb(inv.command, inv.reason), subject)),
            None => Err(format!(
                "{} what? name a target, e.g. 42 or owner/repo#42",
                inv.command.as_str()
            )),
        }
    }
}

impl TeamsInbox {
    /// `@gatebot status [target]`: the target's gates, or the gates a canary
    /// waits at. Anyone may ask, as in Slack.
    async fn status(&self, target: Option<crate::command::Target>) -> Result<String, SendError> {
        let engine = &self.state.engine;
        let default_repo = self.state.config.github.repository.as_ref();
        let subject = match commands::subject_of(target, default_repo) {
            Ok(subject) => subject,
            Err(e) => return Ok(e.to_string()),
        };
        let store = send_error;
        let (gates, label) = match &subject {
            Some(s) => (
                commands::status(engine, s).await.map_err(store)?,
                s.display(),
            ),
            None => (
                engine
                    .reads()
                    .list()
                    .await
                    .map_err(|e| SendError::retry(e.to_string()))?
                    .into_iter()
                    .filter(|g| g.canaries.iter().any(|c| c.waiting_since.is_some()))
                    .collect(),
                "this gatebot (gates with a canary waiting)".to_string(),
            ),
        };
        if gates.is_empty() {
            return Ok(format!("No gates known for {label} yet."));
        }
        let lines: Vec<String> = gates
            .iter()
            .map(|g| match &g.by {
                Some(by) => format!("{}: {} by {} via {}", g.gate, g.state, by.name, by.source),
                None => format!("{}: {}", g.gate, g.state),
            })
            .collect();
        Ok(format!("Gates of {label}:\n{}", lines.join("\n")))
    }
}

/// `@gatebot help`: each command, one a line.
fn help() -> String {
    let lines: Vec<String> = dispatch::help()
        .iter()
        .map(|c| format!("{}: {}", c.name, c.description))
        .collect();
    format!(
        "Write @gatebot <command> <target> [reason], e.g. @gatebot promote 42 looks good\n{}",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::without_mentions;

    #[test]
    fn mentions_are_stripped() {
        assert_eq!(
            without_mentions("<at>gatebot</at> promote 42 ok by me"),
            "promote 42 ok by me"
        );
        assert_eq!(
            without_mentions("<AT>a b</AT>  hold <at>x</at>pr/1"),
            "hold pr/1"
        );
        assert_eq!(without_mentions("status <at>open"), "status");
        assert_eq!(without_mentions("héllo <at>ü</at> wörld"), "héllo wörld");
    }
}
