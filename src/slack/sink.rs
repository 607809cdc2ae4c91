//! The `slack` outbox sink: which Slack writes a notice means (`plan`), and
//! running them (`handle`). Messages are rendered when sent, from what the store
//! knows then, so jobs may run in any order and a retry sends the latest state.
//!
//! Over 400 lines: planning and running share the job type and the message
//! lookups; splitting them would split one protocol in two.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::answers;
use super::blocks;
use super::client::{Response, SlackApi};
use super::record::{self, Decision, Ended, Final, Posted, WaitInfo};
use crate::clock::SharedClock;
use crate::core::intake::Told;
use crate::core::Records;
use crate::evidence::Evidence;
use crate::gate::{Actor, AuditAction, GateKey, Millis, RepoName};
use crate::metrics::Metrics;
use crate::notify::burst::{Admit, Burst};
use crate::notify::{
    decode_job, BoxFuture, Channel, Lease, Notice, PayloadError, SendError, SinkJob,
};
use crate::store::{NewJob, QueueItem};
use crate::templates::escape::{self, mrkdwn};
use crate::templates::Templates;

pub const NAME: &str = "slack";

/// Canary events worth a reply in the message's thread.
const THREADED: [&str; 5] = [
    "deadline",
    "promotion_started",
    "promotion_completed",
    "rolling_back",
    "canary_failed",
];
/// Of those, the ones that end the rollout: the main message shows them.
const FINAL: [&str; 3] = ["promotion_completed", "rolling_back", "canary_failed"];

/// One Slack write, as stored in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum SlackJob {
    /// chat.postMessage of a waiting message with buttons.
    PostWait { info: WaitInfo, channel: String },
    /// chat.update of a waiting message from what the store knows now.
    Refresh { wait_id: i64 },
    WaitEnded {
        wait_id: i64,
        outcome: String,
        at: Millis,
    },
    /// A gate opened somewhere (GitHub, API, CLI, slash command).
    GateOpened {
        gate: String,
        actor: Actor,
        reason: Option<String>,
        at: Millis,
    },
    /// An approval counted towards a gate that needs several people: its
    /// open messages show the count.
    RefreshGate { gate: String },
    /// A milestone: a reply in the thread, and the final state on the message.
    CanaryEvent {
        canary: String,
        kind: String,
        message: String,
        checksum: String,
        at: Millis,
    },
    /// An answer to the person who clicked or typed a command.
    Respond {
        response_url: String,
        response: Response,
    },
    /// An answer to a click, worded when it is sent from what the core told
    /// of it (`lines`, filled in by the core) and the authorizer's refusal,
    /// worded before the unit (`denied`).
    Answer {
        response_url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        denied: Option<String>,
        /// A typed command's answer (it says what was done), not a click's.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        typed: bool,
        #[serde(default)]
        lines: Vec<Told>,
    },
    /// A reminder in the thread of a waiting message, mentioning who may decide.
    Remind {
        wait_id: i64,
        canary: String,
        kind: String,
        checksum: String,
        waited: String,
        mentions: Vec<String>,
    },
    /// A freeze or its lifting, in the default channel.
    Announce { text: String },
    /// Flagger failed outside the analysis: in the canary's thread when it
    /// has a message, else in the channel.
    Failure {
        canary: String,
        checksum: String,
        what: String,
        message: String,
        next: String,
        /// The channel when there is no thread.
        channel: Option<String>,
    },
    /// One message for the waits of a minute over [limits] notify_burst in a channel.
    Digest {
        channel: String,
        since: Millis,
        until: Millis,
    },
}

impl SinkJob for SlackJob {
    const SINK: &'static str = NAME;
    const TAG: &'static str = "job";
}

/// The metadata key a Canary names its Slack channel with (bound by `[[slack.channels]]`).
pub(super) const CHANNEL_METADATA: &str = "slack_channel";

/// Announced waits have a `post_wait` job with this once-key prefix and their id.
pub(super) const POST_ONCE: &str = "slack-wait:";

pub struct SlackSink {
    pub api: Arc<SlackApi>,
    pub records: Records,
    pub templates: Templates,
    pub clock: SharedClock,
    pub channel: Option<String>,
    /// `[[slack.channels]]`: where a Canary's `slack_channel` may send its messages.
    pub bound: crate::policy::ChannelBindings,
    pub default_repo: Option<RepoName>,
    /// New waits announced on their own per channel and minute.
    pub burst: Burst,
    pub metrics: Arc<Metrics>,
    /// The waiting canaries' numbers, shown under the progress line.
    pub evidence: Arc<Evidence>,
}

impl SlackSink {
    /// What a waiting message shows now, its canary's numbers included.
    async fn view(&self, info: WaitInfo) -> Result<record::View, SendError> {
        let mut view = record::view(&self.records, info, self.now())
            .await
            .map_err(store_err)?;
        if view.open() {
            view.evidence = view
                .info
                .canary
                .as_ref()
                .and_then(|c| self.evidence.line_of(c));
        }
        Ok(view)
    }
}

impl Channel for SlackSink {
    type Job = SlackJob;
    const NAME: &'static str = NAME;

    fn decode(item: &QueueItem) -> Result<SlackJob, SendError> {
        decode_job(NAME, item)
    }

    /// Messages and their updates go out in order: a gate's opening edits the
    /// waiting messages that earlier jobs posted. Answers to one person don't wait.
    fn lane(&self, job: &SlackJob) -> Option<String> {
        match job {
            SlackJob::Respond { .. } | SlackJob::Answer { .. } => None,
            _ => Some("messages".to_string()),
        }
    }

    fn send<'a>(
        &'a self,
        job: SlackJob,
        _item: &'a QueueItem,
        _lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(self.run(job))
    }

    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        Ok(match notice {
            Notice::WaitStarted { .. } => return self.wait_started(notice),
            Notice::WaitEnded {
                wait_id,
                outcome,
                at,
                ..
            } => vec![SlackJob::WaitEnded {
                wait_id: *wait_id,
                outcome: outcome.clone(),
                at: *at,
            }
            .job(None)?],
            Notice::GateChanged { .. } => return self.gate_changed(notice),
            Notice::Evidence { gates, .. } => gates
                .iter()
                .map(|gate| {
                    SlackJob::RefreshGate {
                        gate: gate.to_string(),
                    }
                    .job(None)
                })
                .collect::<Result<_, _>>()?,
            Notice::CanaryEvent {
                canary,
                kind,
                message,
                checksum,
                at,
                ..
            } if THREADED.contains(&kind.as_str()) => vec![SlackJob::CanaryEvent {
                canary: canary.to_string(),
                kind: kind.clone(),
                message: message.clone(),
                checksum: checksum.clone(),
                at: *at,
            }
            .job(None)?],
            Notice::Reminder { .. } => return reminder(notice),
            Notice::CanaryFailure { .. } => return self.failure_job(notice),
            Notice::Frozen { .. } | Notice::Unfrozen { .. } if self.channel.is_some() => {
                freeze_news(notice)?
            }
            _ => Vec::new(),
        })
    }
}

impl SlackSink {
    /// A failure outside the analysis, said once per revision and failure.
    fn failure_job(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        let Notice::CanaryFailure {
            canary,
            gates,
            failure,
            what,
            message,
            next,
            checksum,
            metadata,
            ..
        } = notice
        else {
            return Ok(Vec::new());
        };
        let job = SlackJob::Failure {
            canary: canary.to_string(),
            checksum: checksum.clone(),
            what: what.clone(),
            message: message.clone(),
            next: next.clone(),
            channel: self
                .channel_of(metadata, gates, Some(canary), true)
                .map(str::to_string),
        };
        Ok(vec![job.job(Some(format!(
            "slack-failure:{canary}:{checksum}:{failure}"
        )))?])
    }

    /// A new wait: its message, or the minute's digest when too many start at once.
    fn wait_started(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        let Notice::WaitStarted {
            wait_id,
            gate,
            canary,
            checksum,
            phase,
            metadata,
            at,
            ..
        } = notice
        else {
            return Ok(Vec::new());
        };
        let Some(channel) =
            self.channel_of(metadata, std::slice::from_ref(gate), canary.as_ref(), true)
        else {
            tracing::debug!(gate = %gate, "no Slack channel for this wait: set GATEBOT_SLACK_CHANNEL or slack_channel metadata");
            return Ok(Vec::new());
        };
        if let Admit::Digest { start, end } = self.burst.admit(channel, *at) {
            self.metrics.dropped(NAME, "digest");
            let digest = SlackJob::Digest {
                channel: channel.to_string(),
                since: start,
                until: end,
            };
            // One per channel and minute (the dedupe key), sent when the
            // minute is over, with a second's grace for late writers.
            return Ok(vec![NewJob {
                dedupe_key: Some(format!("slack-digest:{channel}:{start}")),
                not_before: end + 1000,
                ..digest.job(None)?
            }]);
        }
        let info = WaitInfo {
            wait_id: *wait_id,
            gate: gate.clone(),
            canary: canary.clone(),
            checksum: checksum.clone(),
            phase: phase.clone(),
            metadata: metadata.clone(),
            since: *at,
        };
        let job = SlackJob::PostWait {
            info,
            channel: channel.to_string(),
        };
        Ok(vec![job.job(Some(format!("{POST_ONCE}{wait_id}")))?])
    }

    /// An opening edits the waiting messages, one approval of several
    /// refreshes them, and break glass is loud: the messages say who forced
    /// it and why, and the channel hears of it.
    fn gate_changed(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        let Notice::GateChanged {
            gate,
            action,
            actor,
            reason,
            at,
            ..
        } = notice
        else {
            return Ok(Vec::new());
        };
        match action {
            AuditAction::Open => Ok(vec![SlackJob::GateOpened {
                gate: gate.to_string(),
                actor: actor.clone(),
                reason: reason.clone(),
                at: *at,
            }
            .job(None)?]),
            AuditAction::Approve | AuditAction::Withdraw => Ok(vec![SlackJob::RefreshGate {
                gate: gate.to_string(),
            }
            .job(None)?]),
            AuditAction::Force => {
                let why = reason.as_deref().unwrap_or("no reason given");
                let mut jobs = vec![SlackJob::GateOpened {
                    gate: gate.to_string(),
                    actor: actor.clone(),
                    reason: Some(format!("break glass: {why}")),
                    at: *at,
                }
                .job(None)?];
                if self.channel.is_some() {
                    let text = format!(
                        ":rotating_light: *Break glass:* {} forced `{gate}` open via {}: {why}. Freezes, release windows and missing approvals did not hold it.",
                        actor.name, actor.source
                    );
                    jobs.push(SlackJob::Announce { text }.job(None)?);
                }
                Ok(jobs)
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// A reminder in the wait's thread, once per reminder point.
fn reminder(notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
    let Notice::Reminder {
        wait_id,
        gate,
        canary,
        checksum,
        waited,
        point,
        slack_mentions,
        ..
    } = notice
    else {
        return Ok(Vec::new());
    };
    let job = SlackJob::Remind {
        wait_id: *wait_id,
        canary: canary.to_string(),
        kind: gate.kind.as_str().to_string(),
        checksum: checksum.clone(),
        waited: waited.clone(),
        mentions: slack_mentions.clone(),
    };
    Ok(vec![
        job.job(Some(format!("slack-remind:{wait_id}:{point}")))?
    ])
}

/// A freeze or its lifting, announced in the channel.
fn freeze_news(notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
    match notice {
        Notice::Frozen { id, line, .. } => {
            let text = format!(":snowflake: Changes are {}", escape::entities(line));
            Ok(vec![
                SlackJob::Announce { text }.job(Some(format!("slack-frozen:{id}")))?
            ])
        }
        Notice::Unfrozen { ids, scope, by, .. } => {
            let text = format!(
                ":sunny: The freeze of {scope} was lifted by {} via {}.",
                escape::entities(&by.name),
                by.source
            );
            // Each freeze is lifted once: its id makes the announcement's once-key.
            let once = ids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",");
            Ok(vec![
                SlackJob::Announce { text }.job(Some(format!("slack-unfrozen:{once}")))?
            ])
        }
        _ => Ok(Vec::new()),
    }
}

pub(super) fn store_err(e: crate::store::StoreError) -> SendError {
    SendError::retry(format!("records: {e}"))
}

impl SlackSink {
    fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    async fn run(&self, job: SlackJob) -> Result<(), SendError> {
        match job {
            SlackJob::PostWait { info, channel } => self.post_wait(info, &channel).await,
            SlackJob::Refresh { wait_id } => self.refresh(wait_id).await,
            SlackJob::WaitEnded {
                wait_id,
                outcome,
                at,
            } => self.wait_ended(wait_id, outcome, at).await,
            SlackJob::GateOpened {
                gate,
                actor,
                reason,
                at,
            } => self.gate_opened(&gate, actor, reason, at).await,
            SlackJob::RefreshGate { gate } => self.refresh_gate(&gate).await,
            SlackJob::CanaryEvent {
                canary,
                kind,
                message,
                checksum,
                at,
            } => {
                self.canary_event(&canary, &kind, &message, &checksum, at)
                    .await
            }
            SlackJob::Respond {
                response_url,
                response,
            } => self.api.respond(&response_url, &response).await,
            SlackJob::Answer {
                response_url,
                denied,
                typed,
                lines,
            } => {
                let answer = answers::Answered { denied, typed };
                let said: Vec<String> = lines
                    .iter()
                    .filter_map(|line| answers::told(&self.templates, &answer, line))
                    .collect();
                if said.is_empty() {
                    return Ok(());
                }
                let response = Response::ephemeral(said.join("\n"));
                self.api.respond(&response_url, &response).await
            }
            SlackJob::Digest {
                channel,
                since,
                until,
            } => self.digest(&channel, since, until).await,
            SlackJob::Announce { text } => {
                let Some(channel) = &self.channel else {
                    return Ok(());
                };
                self.api.post_message(channel, &text, None, None).await?;
                Ok(())
            }
            SlackJob::Remind {
                wait_id,
                canary,
                kind,
                checksum,
                waited,
                mentions,
            } => {
                self.remind(wait_id, &canary, &kind, &checksum, &waited, &mentions)
                    .await
            }
            SlackJob::Failure {
                canary,
                checksum,
                what,
                message,
                next,
                channel,
            } => {
                self.failed(
                    &canary,
                    &checksum,
                    &what,
                    &message,
                    &next,
                    channel.as_deref(),
                )
                .await
            }
        }
    }

    /// Records how the wait ended, even before its message is posted, so
    /// that the post shows it; the first ending stays.
    async fn wait_ended(&self, wait_id: i64, outcome: String, at: Millis) -> Result<(), SendError> {
        let key = record::ended_key(wait_id);
        if record::get::<Ended>(&self.records, &key)
            .await
            .map_err(store_err)?
            .is_none()
        {
            record::put(&self.records, &key, &Ended { outcome, at }, self.now())
                .await
                .map_err(store_err)?;
        }
        self.refresh(wait_id).await
    }

    /// Says a failure outside the analysis in the canary's thread.
    async fn failed(
        &self,
        canary: &str,
        checksum: &str,
        what: &str,
        message: &str,
        next: &str,
        channel: Option<&str>,
    ) -> Result<(), SendError> {
        let text = self
            .templates
            .render(
                "slack/failure.j2",
                serde_json::json!({
                    "canary": mrkdwn(canary, escape::NAME),
                    "revision": mrkdwn(checksum, escape::CHECKSUM),
                    "what": what, "message": mrkdwn(message, escape::MESSAGE),
                    "next": next,
                }),
            )
            .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        self.failure(canary, text.trim(), channel).await
    }

    /// The wait's posted message and what it shows now; None until it is posted.
    async fn posted(&self, wait_id: i64) -> Result<Option<(Posted, record::View)>, SendError> {
        let Some(posted) = record::get::<Posted>(&self.records, &record::msg_key(wait_id))
            .await
            .map_err(store_err)?
        else {
            return Ok(None);
        };
        let view = self.view(posted.info.clone()).await?;
        Ok(Some((posted, view)))
    }

    /// A thread reply under the waiting message, unless someone decided or the
    /// wait ended since the reminder was queued.
    async fn remind(
        &self,
        wait_id: i64,
        canary: &str,
        kind: &str,
        checksum: &str,
        waited: &str,
        mentions: &[String],
    ) -> Result<(), SendError> {
        let Some((posted, view)) = self.posted(wait_id).await? else {
            return Ok(());
        };
        let ended = self
            .records
            .wait(wait_id)
            .await
            .map_err(store_err)?
            .is_none_or(|w| w.ended_at.is_some());
        if !view.open() || ended {
            return Ok(());
        }
        let mentions: Vec<String> = mentions
            .iter()
            .map(|m| {
                if m.starts_with('S') {
                    format!("<!subteam^{m}>")
                } else {
                    format!("<@{m}>")
                }
            })
            .collect();
        let text = self
            .templates
            .render(
                "slack/reminder.j2",
                serde_json::json!({
                    "mentions": mentions.join(" "), "canary": mrkdwn(canary, escape::NAME),
                    "kind": mrkdwn(kind, escape::WORD),
                    "revision": mrkdwn(checksum, escape::CHECKSUM), "waited": waited,
                    "evidence": view.evidence.as_deref().map(|e| mrkdwn(e, escape::MESSAGE)),
                }),
            )
            .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        self.api
            .post_message(&posted.channel, text.trim(), None, Some(&posted.ts))
            .await?;
        Ok(())
    }

    async fn post_wait(&self, info: WaitInfo, channel: &str) -> Result<(), SendError> {
        let wait_id = info.wait_id;
        if record::get::<Posted>(&self.records, &record::msg_key(wait_id))
            .await
            .map_err(store_err)?
            .is_some()
        {
            return Ok(());
        }
        let mut view = self.view(info.clone()).await?;
        if view.ended.is_none() {
            if let Some(w) = self.records.wait(wait_id).await.map_err(store_err)? {
                if let (Some(at), Some(outcome)) = (w.ended_at, w.outcome) {
                    view.ended = Some(Ended { outcome, at });
                }
            }
        }
        let (text, blocks) =
            blocks::wait_message(&self.templates, &view, self.default_repo.as_ref())
                .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        let root = self.path_root(&info).await?;
        let (channel, thread) = match &root {
            Some(root) => (root.channel.as_str(), Some(root.ts.as_str())),
            None => (channel, None),
        };
        let (channel, ts) = self
            .api
            .post_message(channel, &text, Some(blocks), thread)
            .await?;
        let posted = Posted { info, channel, ts };
        record::remember(&self.records, &posted, self.now())
            .await
            .map_err(store_err)?;
        self.refresh_path(&posted.info.gate).await?;
        self.refresh_namespace(&posted.info).await
    }

    /// With environments, the other clusters' open messages show this one's
    /// state on their path: they are rewritten.
    async fn refresh_path(&self, gate: &GateKey) -> Result<(), SendError> {
        if gate.cluster.is_none() {
            return Ok(());
        }
        for cluster in self.records.environments().clusters() {
            let key = gate.clone().at(Some(cluster.clone()));
            if key == *gate {
                continue;
            }
            for id in self.open_messages(&key.to_string()).await? {
                self.refresh(id).await?;
            }
        }
        Ok(())
    }

    /// With environments, the PR's first message about the same revision in
    /// another cluster: the thread where the path's other clusters wait.
    /// The revision is the commit (its metadata), else any wait still open.
    async fn path_root(&self, info: &WaitInfo) -> Result<Option<Posted>, SendError> {
        let envs = self.records.environments();
        if envs.is_empty() || info.gate.cluster.is_none() || info.gate.pr().is_none() {
            return Ok(None);
        }
        let commit = info.metadata.get("commit");
        let mut root: Option<Posted> = None;
        for cluster in envs.clusters() {
            let key = info.gate.clone().at(Some(cluster.clone()));
            if key == info.gate {
                continue;
            }
            let ids = record::waits_of_gate(&self.records, &key.to_string())
                .await
                .map_err(store_err)?;
            for id in ids {
                let Some(posted) = record::get::<Posted>(&self.records, &record::msg_key(id))
                    .await
                    .map_err(store_err)?
                else {
                    continue;
                };
                let same = match commit {
                    Some(c) => posted.info.metadata.get("commit") == Some(c),
                    None => self.view(posted.info.clone()).await?.ended.is_none(),
                };
                if same && root.as_ref().is_none_or(|r| r.info.wait_id > id) {
                    root = Some(posted);
                }
            }
        }
        Ok(root)
    }

    /// At a namespace gate, the earlier messages list the canary that just
    /// started waiting too: they are rewritten, as jobs of their own.
    async fn refresh_namespace(&self, info: &WaitInfo) -> Result<(), SendError> {
        let namespace_gate = matches!(info.gate.scope, crate::gate::Scope::Namespace(_));
        if !namespace_gate {
            return Ok(());
        }
        let others: Vec<i64> = record::waits_of_gate(&self.records, &info.gate.to_string())
            .await
            .map_err(store_err)?
            .into_iter()
            .filter(|w| *w != info.wait_id)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let jobs = others
            .into_iter()
            .map(|wait_id| SlackJob::Refresh { wait_id }.job(None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SendError::Permanent(e.to_string()))?;
        self.records
            .enqueue(&jobs, self.now())
            .await
            .map_err(store_err)?;
        Ok(())
    }

    /// Rewrites a posted message from the stored state (no-op until it is posted:
    /// the post itself renders the latest state).
    async fn refresh(&self, wait_id: i64) -> Result<(), SendError> {
        let Some((posted, view)) = self.posted(wait_id).await? else {
            return Ok(());
        };
        let (text, blocks) =
            blocks::wait_message(&self.templates, &view, self.default_repo.as_ref())
                .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        self.api
            .update(&posted.channel, &posted.ts, &text, blocks)
            .await
    }

    /// The waits of the gate's posted messages that still wait for people.
    async fn open_messages(&self, gate: &str) -> Result<Vec<i64>, SendError> {
        let ids = record::waits_of_gate(&self.records, gate)
            .await
            .map_err(store_err)?;
        let mut open = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(posted) = record::get::<Posted>(&self.records, &record::msg_key(id))
                .await
                .map_err(store_err)?
            else {
                continue;
            };
            let view = self.view(posted.info).await?;
            if view.open() {
                open.push(id);
            }
        }
        Ok(open)
    }

    /// A gate opened elsewhere: its undecided messages say by whom and lose their buttons.
    async fn gate_opened(
        &self,
        gate: &str,
        actor: Actor,
        reason: Option<String>,
        at: Millis,
    ) -> Result<(), SendError> {
        for id in self.open_messages(gate).await? {
            let decision = Decision {
                approved: true,
                user_id: None,
                name: actor.name.clone(),
                via: actor.source.as_str().to_string(),
                at,
                reason: reason.clone(),
                rollback_gate: None,
            };
            record::put(
                &self.records,
                &record::decision_key(id),
                &decision,
                self.now(),
            )
            .await
            .map_err(store_err)?;
            self.refresh(id).await?;
        }
        self.refresh_gate_path(gate).await
    }

    /// [`SlackSink::refresh_path`] for a gate named as text.
    async fn refresh_gate_path(&self, gate: &str) -> Result<(), SendError> {
        match GateKey::parse(gate, None) {
            Ok(key) => self.refresh_path(&key).await,
            Err(_) => Ok(()),
        }
    }

    /// Rewrites the gate's messages that still wait for people.
    async fn refresh_gate(&self, gate: &str) -> Result<(), SendError> {
        for id in self.open_messages(gate).await? {
            self.refresh(id).await?;
        }
        self.refresh_gate_path(gate).await
    }

    /// In the thread of the canary's latest message, else in `channel`.
    async fn failure(
        &self,
        canary: &str,
        text: &str,
        channel: Option<&str>,
    ) -> Result<(), SendError> {
        let wait = record::latest_of_canary(&self.records, canary)
            .await
            .map_err(store_err)?;
        let posted = match wait {
            Some(id) => record::get::<Posted>(&self.records, &record::msg_key(id))
                .await
                .map_err(store_err)?,
            None => None,
        };
        match (posted, channel) {
            (Some(p), _) => {
                self.api
                    .post_message(&p.channel, text, None, Some(&p.ts))
                    .await?;
            }
            (None, Some(channel)) => {
                self.api.post_message(channel, text, None, None).await?;
            }
            (None, None) => {
                tracing::debug!(canary, "no Slack channel for a Flagger failure");
            }
        }
        Ok(())
    }

    async fn canary_event(
        &self,
        canary: &str,
        kind: &str,
        message: &str,
        checksum: &str,
        at: Millis,
    ) -> Result<(), SendError> {
        let Some(wait_id) = record::latest_of_canary(&self.records, canary)
            .await
            .map_err(store_err)?
        else {
            return Ok(());
        };
        let Some(posted) = record::get::<Posted>(&self.records, &record::msg_key(wait_id))
            .await
            .map_err(store_err)?
        else {
            return Ok(());
        };
        let text = self
            .templates
            .render(
                "slack/event.j2",
                serde_json::json!({
                    "canary": mrkdwn(canary, escape::NAME), "kind": mrkdwn(kind, escape::WORD),
                    "message": mrkdwn(message, escape::MESSAGE),
                    "revision": mrkdwn(checksum, escape::CHECKSUM),
                    "gate": mrkdwn(&posted.info.gate.to_string(), escape::METADATA),
                }),
            )
            .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
        if FINAL.contains(&kind) {
            let key = record::final_key(wait_id);
            let fin = Final {
                kind: kind.to_string(),
                message: message.to_string(),
                at,
            };
            record::put(&self.records, &key, &fin, self.now())
                .await
                .map_err(store_err)?;
            self.refresh(wait_id).await?;
        }
        // A retry after the update above repeats it harmlessly; the reply goes last
        // so that it is sent once.
        self.api
            .post_message(&posted.channel, text.trim(), None, Some(&posted.ts))
            .await?;
        Ok(())
    }
}

/// A key as stored in a button, checked.
pub fn parse_gate(gate: &str) -> Result<GateKey, SendError> {
    GateKey::parse(gate, None)
        .map_err(|e| SendError::Permanent(format!("button names {gate}: {e}")))
}
