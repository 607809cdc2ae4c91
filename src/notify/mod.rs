//! Notifications: what happened (a `Notice`), which jobs it means for each
//! configured sink, and the worker that runs durable jobs from a queue.

pub mod burst;
mod channel;
pub mod finish;
mod late;
mod worker;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::SharedClock;
use crate::gate::audit::as_text;
use crate::gate::{Actor, AuditAction, CanaryRef, GateKey, Millis, PrNumber, RepoName};
use crate::store::{Claim, NewJob, QueueItem, QueueName, Store, StoreError};

pub use channel::{Channel, Outbox};
pub use late::late_note;
pub use worker::{Drain, Worker, WorkerSettings, MAX_RETRY_AFTER};

/// Something people may want to hear about. Stored as the payload of jobs:
/// keys and canaries are kept as their text, so payloads queued before these
/// fields were typed still read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Notice {
    /// Flagger started waiting at a closed gate.
    WaitStarted {
        wait_id: i64,
        gate: GateKey,
        /// None: a named gate announced before any canary asks.
        #[serde(with = "as_text::or_empty")]
        canary: Option<CanaryRef>,
        checksum: String,
        phase: String,
        reason: String,
        metadata: BTreeMap<String, String>,
        at: Millis,
    },
    /// The gate opened for a waiting canary (or the wait was superseded).
    WaitEnded {
        wait_id: i64,
        gate: GateKey,
        #[serde(with = "as_text::or_empty")]
        canary: Option<CanaryRef>,
        outcome: String,
        at: Millis,
    },
    /// Someone opened, closed, held or released a gate, or it expired.
    GateChanged {
        gate: GateKey,
        action: AuditAction,
        actor: Actor,
        reason: Option<String>,
        at: Millis,
        /// The pull request a named gate names (other gates name theirs in the key).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pr: Option<(RepoName, PrNumber)>,
    },
    /// A wait has lasted to one of the policy's reminder points.
    Reminder {
        wait_id: i64,
        gate: GateKey,
        #[serde(with = "as_text")]
        canary: CanaryRef,
        checksum: String,
        /// The point reached, as people read it: "2h".
        waited: String,
        /// Which point (1 for the first): one reminder each.
        point: i64,
        /// Who may decide: Slack users and groups, GitHub teams.
        slack_mentions: Vec<String>,
        github_mentions: Vec<String>,
        at: Millis,
    },
    /// Someone froze changes: announced once.
    Frozen {
        id: i64,
        scope: String,
        /// Who, why, until when: the reason Flagger reads too.
        line: String,
        at: Millis,
    },
    /// Someone lifted the freezes of a scope.
    Unfrozen {
        ids: Vec<i64>,
        scope: String,
        by: Actor,
        at: Millis,
    },
    /// A milestone from Flagger's event hook, for the gates the canary asks.
    CanaryEvent {
        #[serde(with = "as_text")]
        canary: CanaryRef,
        gates: Vec<GateKey>,
        kind: String,
        message: String,
        event_type: String,
        phase: String,
        checksum: String,
        metadata: BTreeMap<String, String>,
        at: Millis,
    },
    /// A waiting canary's numbers changed (`evidence`): its messages are
    /// drawn again, at most once a minute.
    Evidence {
        #[serde(with = "as_text")]
        canary: CanaryRef,
        gates: Vec<GateKey>,
        at: Millis,
    },
    /// Flagger failed outside the analysis (a pre-rollout webhook, the progress
    /// deadline, …) and sends no alert of its own: said once per revision and kind.
    CanaryFailure {
        #[serde(with = "as_text")]
        canary: CanaryRef,
        gates: Vec<GateKey>,
        /// `Failure::as_str`: pre_rollout, progress_deadline, …
        failure: String,
        /// What failed, in people's words.
        what: String,
        /// Flagger's own message (data: escaped by each sink).
        message: String,
        /// What Flagger does next.
        next: String,
        checksum: String,
        metadata: BTreeMap<String, String>,
        at: Millis,
    },
}

impl Notice {
    /// Its kind, as stored: `wait_started`, `gate_changed`, …
    pub fn topic(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("type")?.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// A job for `sink` that carries this notice whole.
    pub fn job(&self, sink: &str) -> Result<NewJob, PayloadError> {
        encode_tagged(sink, "type", self)
    }
}

/// A job whose payload could not be written. Every payload type serialises, so
/// this is a bug; it is reported, never stored as an empty job.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode a `{sink}` {topic} job: {source}")]
pub struct PayloadError {
    pub sink: String,
    pub topic: String,
    #[source]
    pub source: serde_json::Error,
}

impl From<PayloadError> for SendError {
    fn from(e: PayloadError) -> Self {
        Self::Permanent(e.to_string())
    }
}

/// A sink's own job, stored as its JSON: the sink's name, and as its topic
/// the variant's name, which serde writes in the field `TAG`.
pub trait SinkJob: Serialize + Sized {
    const SINK: &'static str;
    /// The field serde's `#[serde(tag = …)]` names.
    const TAG: &'static str;

    /// The job, queued at most once per `once_key` when one is given (a
    /// delivery and a purpose, say).
    fn job(&self, once_key: Option<String>) -> Result<NewJob, PayloadError> {
        Ok(NewJob {
            once_key,
            ..encode_tagged(Self::SINK, Self::TAG, self)?
        })
    }

    /// The job, at most one of it pending per `dedupe_key`: a later one
    /// while it waits is the same work.
    fn deduped(&self, dedupe_key: String) -> Result<NewJob, PayloadError> {
        Ok(NewJob {
            dedupe_key: Some(dedupe_key),
            ..encode_tagged(Self::SINK, Self::TAG, self)?
        })
    }
}

/// `item`'s payload as the job `J` of `sink`. A kind of job this version
/// does not know was queued by a newer one (replicas of two versions run side
/// by side while one replaces the other): it is tried again, so that a newer
/// replica sends it, rather than given up; anything else unreadable is.
pub fn decode_job<J: serde::de::DeserializeOwned>(
    sink: &str,
    item: &QueueItem,
) -> Result<J, SendError> {
    serde_json::from_str(&item.payload).map_err(|e| {
        let message = format!("unreadable {sink} job `{}`: {e}", item.topic);
        match e.to_string().starts_with("unknown variant") {
            true => SendError::retry(format!(
                "{message} (queued by a newer gatebot? left for a replica that knows it)"
            )),
            false => SendError::Permanent(message),
        }
    })
}

/// A job for `sink` whose payload is `payload` as JSON and whose topic is
/// the variant's name serde wrote in its field `tag`: one name per kind of
/// job, kept by the type rather than copied into a `match`.
pub fn encode_tagged(
    sink: &str,
    tag: &str,
    payload: &impl Serialize,
) -> Result<NewJob, PayloadError> {
    let failed = |source| PayloadError {
        sink: sink.to_string(),
        topic: tag.to_string(),
        source,
    };
    let text = serde_json::to_string(payload).map_err(failed)?;
    let fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).map_err(failed)?;
    let Some(topic) = fields.get(tag).and_then(|t| t.as_str()) else {
        return Err(failed(<serde_json::Error as serde::ser::Error>::custom(
            format!("no `{tag}` field"),
        )));
    };
    Ok(NewJob {
        sink: sink.to_string(),
        topic: topic.to_string(),
        payload: text,
        dedupe_key: None,
        once_key: None,
        not_before: 0,
    })
}

/// A job for `sink` whose payload is `payload` as JSON.
pub fn encode_job(
    sink: &str,
    topic: &str,
    payload: &impl Serialize,
) -> Result<NewJob, PayloadError> {
    let payload = serde_json::to_string(payload).map_err(|source| PayloadError {
        sink: sink.to_string(),
        topic: topic.to_string(),
        source,
    })?;
    Ok(NewJob {
        sink: sink.to_string(),
        topic: topic.to_string(),
        payload,
        dedupe_key: None,
        once_key: None,
        not_before: 0,
    })
}

/// Why a job did not go through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Try again later: at `after` when the other side said so (Retry-After).
    Retry {
        after: Option<Duration>,
        message: String,
    },
    /// Trying again cannot help.
    Permanent(String),
    /// The store failed in a way that passes (see `StoreError::transient`): an
    /// inbox delivery is tried again until it applies, and this does not count
    /// as one of its attempts; an outbox job counts it as a `Retry`.
    Transient(String),
}

impl From<StoreError> for SendError {
    fn from(e: StoreError) -> Self {
        match e.transient() {
            true => Self::Transient(e.to_string()),
            false => Self::retry(e.to_string()),
        }
    }
}

impl SendError {
    pub fn retry(message: impl Into<String>) -> Self {
        Self::Retry {
            after: None,
            message: message.into(),
        }
    }

    /// Given up when trying again cannot help (`lasting`), else tried again,
    /// at `after` when the other side said when.
    pub fn of(lasting: bool, after: Option<Duration>, message: String) -> Self {
        match lasting {
            true => Self::Permanent(message),
            false => Self::Retry { after, message },
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Self::Retry { message, .. } | Self::Permanent(message) | Self::Transient(message) => {
                message
            }
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs the items of one route of a queue: a channel's outbox
/// ([`Outbox`]) or its inbox (`core::intake::Inbox`).
pub trait Handler: Send + Sync + 'static {
    /// Items of one lane run one at a time, in order; lanes run concurrently.
    /// None: the item needs no order with others.
    fn lane(&self, _item: &QueueItem) -> Option<String> {
        None
    }

    /// Runs `item` under `lease`. A handler that settles the item in the
    /// transaction of its effects (`Store::finish_in` with this lease), so
    /// the item and what it did commit together, says `Settled::Done`, and
    /// the worker does not settle it again.
    fn handle<'a>(
        &'a self,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>>;
}

/// Whose claim an item is under, for settling it in a handler's transaction
/// and for renewing it before each call out.
pub struct Lease {
    pub queue: QueueName,
    pub owner: String,
    /// The item's attempts when it was claimed: see [`Claim`].
    pub attempts: i64,
    pub(crate) id: String,
    pub(crate) length: Duration,
    pub(crate) store: Store,
    pub(crate) clock: SharedClock,
    /// Set once a renewal found the item no longer ours.
    pub(crate) lost: std::sync::atomic::AtomicBool,
}

impl Lease {
    pub fn claim(&self) -> Claim<'_> {
        Claim {
            id: &self.id,
            owner: &self.owner,
            attempts: self.attempts,
        }
    }

    /// Renews the lease just before a call out (and after any pause), so a
    /// job is sent only while it is ours. An error means: send nothing. When
    /// the item is no longer ours it is left to whoever has it (see [`Lease::lost`]).
    pub async fn hold(&self) -> Result<(), SendError> {
        let length = i64::try_from(self.length.as_millis()).unwrap_or(i64::MAX);
        let now = self.clock.now_ms();
        match self
            .store
            .queues()
            .hold_lease(self.queue, &self.claim(), now, length)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(SendError::retry(
                    "the lease was lost: another worker has the item",
                ))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a renewal found the item no longer ours: it is neither sent
    /// nor settled here.
    pub fn lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Whether a handler settled its item itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Settled with its effects (or the lease was lost: another replica has it).
    Done,
    /// The worker marks it done.
    NotYet,
}

/// A notification sink: decides which jobs a notice means, then runs them.
pub trait Sink: Handler {
    fn name(&self) -> &'static str;
    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError>;
}

/// The configured sinks.
#[derive(Clone, Default)]
pub struct Notifier {
    sinks: Vec<Arc<dyn Sink>>,
}

impl Notifier {
    pub fn new(sinks: Vec<Arc<dyn Sink>>) -> Self {
        Self { sinks }
    }

    /// Every sink's jobs for a notice; a sink that cannot encode its jobs
    /// gives an error instead, and the other sinks still get theirs.
    pub fn plan(&self, notice: &Notice) -> Vec<Result<NewJob, PayloadError>> {
        let mut out = Vec::new();
        for sink in &self.sinks {
            match sink.plan(notice) {
                Ok(jobs) => out.extend(jobs.into_iter().map(Ok)),
                Err(e) => out.push(Err(e)),
            }
        }
        out
    }

    pub fn handlers(&self) -> Vec<(String, Arc<dyn Handler>)> {
        self.sinks
            .iter()
            .map(|s| (s.name().to_string(), Arc::clone(s) as Arc<dyn Handler>))
            .collect()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.sinks.iter().map(|s| s.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's topic is its variant's name as serde writes it; a payload
    /// without the tag is refused, not stored under a made-up topic.
    #[test]
    fn topics_are_the_variants_names() {
        let notice = Notice::Unfrozen {
            ids: vec![1],
            scope: "all".into(),
            by: Actor::new("alice", crate::gate::Source::Slack),
            at: 0,
        };
        assert_eq!(notice.topic(), "unfrozen");
        assert_eq!(notice.job("slack").unwrap().topic, "unfrozen");
        let untagged = encode_tagged("slack", "job", &serde_json::json!({"text": "x"}));
        assert!(untagged.is_err());
    }

    /// A job of a kind a newer version queued is left for a replica that
    /// knows it; a payload no version can read is given up.
    #[test]
    fn a_newer_kind_of_job_is_tried_again_and_a_broken_one_given_up() {
        #[derive(Debug, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Job {
            Comment {},
        }
        let item = |topic: &str, payload: &str| QueueItem {
            id: "1".into(),
            route: "github".into(),
            topic: topic.into(),
            payload: payload.into(),
            attempts: 1,
            created_at: 0,
            last_error: None,
        };
        let newer = item("reply", r#"{"type":"reply","lines":[]}"#);
        match decode_job::<Job>("github", &newer) {
            Err(SendError::Retry { message, .. }) => {
                assert!(message.contains("newer"), "{message}")
            }
            other => panic!("not tried again: {other:?}"),
        }
        let broken = item("comment", r#"{"type":"comment""#);
        assert!(matches!(
            decode_job::<Job>("github", &broken),
            Err(SendError::Permanent(_))
        ));
        assert!(decode_job::<Job>("github", &item("comment", r#"{"type":"comment"}"#)).is_ok());
    }

    /// Payloads as the outbox holds them since before keys were typed: each
    /// still reads back, and is written again byte for byte.
    #[test]
    fn stored_payloads_read_back_unchanged() {
        for text in [
            r#"{"type":"wait_started","wait_id":3,"gate":"/gates/promote/acme/shop/pr/42","canary":"test/podinfo","checksum":"rev-a","phase":"Progressing","reason":"waiting","metadata":{"pr":"42"},"at":10}"#,
            r#"{"type":"wait_ended","wait_id":3,"gate":"/loadtester/gate/test/podinfo","canary":"test/podinfo","outcome":"opened","at":11}"#,
            r#"{"type":"gate_changed","gate":"/gates/traffic/canary/test/podinfo","action":"expire","actor":{"name":"gatebot","source":"gatebot"},"reason":null,"at":12}"#,
            r#"{"type":"canary_event","canary":"test/podinfo","gates":["/gates/start/acme/shop/pr/7","/gates/promote/acme/shop/pr/7"],"kind":"promotion_completed","message":"done","event_type":"Normal","phase":"Succeeded","checksum":"rev-a","metadata":{},"at":13}"#,
            r#"{"type":"canary_failure","canary":"test/podinfo","gates":["/gates/start/acme/shop/pr/7"],"failure":"pre_rollout","what":"a pre-rollout webhook failed","message":"Halt podinfo.test advancement pre-rollout check smoke failed 500","next":"Flagger will retry at the next interval","checksum":"rev-a","metadata":{"pr":"7"},"at":14}"#,
        ] {
            let notice: Notice = serde_json::from_str(text).expect(text);
            assert_eq!(serde_json::to_string(&notice).unwrap(), text);
        }
    }

    #[test]
    fn a_payload_with_a_bad_key_is_an_error() {
        let text = r#"{"type":"wait_ended","wait_id":3,"gate":"g","canary":"test/podinfo","outcome":"opened","at":11}"#;
        assert!(serde_json::from_str::<Notice>(text).is_err());
    }
}
