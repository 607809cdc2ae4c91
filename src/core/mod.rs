//! The application core: answers gate checks, applies approvals, records waits
//! and the Flagger timeline, and queues notifications. Uses the store; knows no HTTP.
//!
//! The steady-state check (same canary, same revision, same answer) reads memory
//! and writes nothing: with SQLite this process is the only writer, so its copy
//! of the gates is the truth; with PostgreSQL other replicas write too, so the
//! copy is kept current by their announcements and trusted only while they can
//! be heard (`gate_cache`). Last-seen times are kept in memory and flushed in batches.

pub mod admit;
mod app;
pub mod authors;
pub mod awaited;
mod bounds;
mod budget;
mod change;
mod check;
pub mod commands;
pub mod created;
pub mod deadlines;
pub mod dispatch;
#[cfg(test)]
mod dispatch_tests;
mod environments;
pub mod error;
mod events;
pub mod evidence;
pub mod freezes;
mod gate_cache;
pub mod intake;
pub mod members;
mod memory;
pub mod named;
pub mod origin;
pub mod path;
mod read;
mod records;
pub mod reminders;
pub mod tickets;
pub mod unit;
pub mod watch;
pub mod withdraw;

/// Stored rows the channels show as they are, read through the core.
pub use crate::store::{
    AuditEntry, AuditSearch, CanarySeen, EventRow, Job, ObservationRow, QueueName, WaitRow,
};
pub use app::{AppState, Shared};
pub use check::Checked;
pub use error::CommandError;
pub use read::{GateDetail, GatePage, GateSummary};
pub use records::{Records, SinkBase};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;

use crate::clock::SharedClock;
use crate::gate::event::{classify, EventKind};
use crate::gate::state::{closed_word, one_line, open_hint};
use crate::gate::{
    decide, wait_step, Actor, Answer, AuditAction, CanaryRef, Change, Channels, Check, DeliveryId,
    Gate, GateKey, GateKind, GateStatus, Millis, Phase, RepoName, Scope, Source, Verdict, WaitStep,
};
use crate::metrics::{ActionLabels, GateLabels, KindLabels, Metrics};
use crate::notify::{Notice, Notifier};
use crate::store::{Backend, Store, StoreError, WriteTx};
use memory::{Memory, Observed};

#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub approval_ttl: Option<Duration>,
    pub default_repo: Option<RepoName>,
    /// How long a check may wait for the store before it answers closed.
    /// Flagger's webhook timeout is 10 s; the promise is an answer within 2 s.
    pub check_deadline: Duration,
    /// The ways of opening a gate that closed answers name.
    pub channels: Channels,
    /// The policy's release windows: outside them a gate answers closed.
    pub calendar: crate::gate::window::Calendar,
    /// How many people each gate needs (the policy's `[[approvals]]`).
    pub quorum: Vec<crate::gate::QuorumRule>,
    /// Which commands must say why (the policy's `[[reasons]]`).
    pub reasons: Vec<crate::gate::reason::ReasonRule>,
    /// Which gates are tied to change requests (the policy's `[change]`).
    pub change: Option<crate::gate::ticket::ChangeRule>,
    /// When waits' deadlines fall and reminders are due (the policy's).
    pub timers: crate::gate::timers::WaitTimers,
    /// How many gates pipelines may create by name.
    pub named: named::NamedLimits,
    /// The policy's `[[environments]]`: with them each cluster's gates are its own.
    pub environments: crate::gate::environment::Environments,
}

/// The default [`EngineSettings::check_deadline`].
pub const CHECK_DEADLINE: Duration = Duration::from_millis(1500);

/// The reason Flagger reads when the store could not record a check in time.
pub const STORE_BUSY: &str =
    "closed: gatebot cannot read its store in time (store busy: try again at the next poll)";

/// What Flagger sent with a check.
#[derive(Debug, Clone, Default)]
pub struct CheckInput {
    pub canary: Option<CanaryRef>,
    pub checksum: admit::Claim<String>,
    pub phase: admit::Claim<String>,
    pub metadata: admit::Claim<admit::Metadata>,
    /// The cluster whose Flagger token the check carried; None without tokens.
    pub cluster: Option<crate::gate::ClusterName>,
    /// The commit gatebot itself found the revision was built from (the
    /// Kubernetes lookup's tie of this checksum); never read from the body.
    pub found_commit: Option<admit::Admitted<String>>,
}

/// Who did something and on which delivery (for replays and the audit log).
#[derive(Debug, Clone)]
pub struct Provenance {
    pub actor: Actor,
    pub reason: Option<String>,
    /// Webhook delivery or click id: the same delivery never applies twice.
    pub delivery: Option<DeliveryId>,
    /// When the person gave the command, by the source's signed time (GitHub's
    /// `updated_at`, Slack's request timestamp). An open written before the
    /// gate's last close is refused: it was about what came before.
    pub written_at: Option<Millis>,
    /// The revision the person saw (a click on a waiting message): the approval
    /// is pinned to it for that canary at once, so it never opens a newer one.
    pub revision: Option<(CanaryRef, String)>,
    /// Who the actor is across channels, for counting distinct approvers
    /// (a GitHub login, mapped from Slack by the policy's `[users]`). None:
    /// the actor's name.
    pub person: Option<String>,
    /// Break glass: open past freezes, release windows and missing approvals.
    /// The channel checked that the person may.
    pub force: bool,
    /// The approval opens for the canary of `revision` only (a deadline's
    /// rollback): no other canary is rolled back by it.
    pub exclusive: bool,
    /// What an API caller claims beside its token ("claims alice via cli"):
    /// recorded before the reason, never taken for one.
    pub claim: Option<String>,
    /// The groups of the quorum rules the person was found in, asked before
    /// the unit opened (`members`).
    pub groups: Vec<crate::gate::Group>,
    /// The approved change the approval is given under (`tickets`).
    pub ticket: Option<tickets::TicketPin>,
    /// Typed by the person as a chat command (a PR comment, Slack's slash
    /// command, a message to the Teams bot): its words may ask for break
    /// glass after the place they name. A button's, a card's, a review's,
    /// the page's and the API's reasons never do.
    pub typed: bool,
}

impl Provenance {
    pub fn new(actor: Actor) -> Self {
        Self {
            actor,
            reason: None,
            delivery: None,
            written_at: None,
            revision: None,
            person: None,
            force: false,
            exclusive: false,
            claim: None,
            groups: Vec::new(),
            ticket: None,
            typed: false,
        }
    }

    /// Typed as a chat command ([`Self::typed`]).
    pub fn typed(mut self) -> Self {
        self.typed = true;
        self
    }

    pub fn claim(mut self, claim: Option<String>) -> Self {
        self.claim = claim;
        self
    }

    pub fn reason(mut self, reason: Option<String>) -> Self {
        self.reason = reason.map(|r| one_line(&r)).filter(|r| !r.is_empty());
        self
    }

    pub fn delivery(mut self, delivery: DeliveryId) -> Self {
        self.delivery = Some(delivery);
        self
    }

    pub fn written_at(mut self, at: Option<Millis>) -> Self {
        self.written_at = at;
        self
    }

    pub fn revision(mut self, canary: CanaryRef, checksum: impl Into<String>) -> Self {
        self.revision = Some((canary, checksum.into()));
        self
    }

    /// For the canary of `canary` at `checksum` only: every other canary, at
    /// any revision, finds the gate closed.
    pub fn only(mut self, canary: CanaryRef, checksum: impl Into<String>) -> Self {
        self.exclusive = true;
        self.revision(canary, checksum)
    }

    pub fn person(mut self, person: impl Into<String>) -> Self {
        self.person = Some(person.into());
        self
    }

    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The GitHub login this person is known to be: as GitHub sent it, or
    /// as the policy's `[users]` maps their chat or proxy name. None for a
    /// token's holder, whose named user is a claim.
    pub fn login(&self) -> Option<String> {
        let login = match self.actor.source {
            Source::Github => Some(self.actor.name.as_str()),
            Source::Slack | Source::Teams | Source::Web => self.person.as_deref(),
            _ => None,
        }?;
        (!login.contains(':')).then(|| login.to_ascii_lowercase())
    }

    /// The Slack user this person is when they act from Slack unmapped.
    pub fn slack_user(&self) -> Option<&str> {
        self.person.as_deref()?.strip_prefix("slack:")
    }

    /// The person this is, for counting approvals: one login in any case.
    pub fn person_name(&self) -> String {
        self.person
            .as_deref()
            .unwrap_or(&self.actor.name)
            .to_ascii_lowercase()
    }
}

pub struct Engine {
    store: Store,
    clock: SharedClock,
    settings: EngineSettings,
    metrics: Arc<Metrics>,
    notifier: Notifier,
    outbox_wake: Arc<Notify>,
    /// Every gate (kept current by this process's writes, and on PostgreSQL by
    /// other replicas' announcements), and the last check of every canary at every gate.
    memory: Mutex<Memory>,
    /// Whether checks may answer from the gates in memory: always on SQLite; on
    /// PostgreSQL only while the gate-change listener is connected and has
    /// reloaded every gate since it (re)connected.
    cache_trusted: std::sync::atomic::AtomicBool,
    /// Serialises the slow path so two checks of one canary don't both start a wait.
    /// On PostgreSQL a write holding it waits at most `store::LOCK_TIMEOUT` for a row.
    write: tokio::sync::Mutex<()>,
    /// Orders what reaches the gates in memory: a local change's COMMIT and its
    /// `remember`, and a re-read of a gate heard of over `LISTEN`, each whole.
    /// Held only for statements that wait for no lock, never for a transaction.
    applying: tokio::sync::Mutex<()>,
    /// PostgreSQL: when the listener last showed that every change committed
    /// before some moment is in memory (`gate_cache`).
    heard: gate_cache::Heard,
    /// The change freezes in force, and whether there are any (read first).
    freezes: std::sync::RwLock<Vec<crate::gate::freeze::Freeze>>,
    any_freeze: std::sync::atomic::AtomicBool,
    /// The calendar's answer per gate kind, kept until it changes.
    windows: Mutex<crate::gate::window::WindowCache>,
    /// Where committed changes are published for open pages (`watch`).
    changes: std::sync::OnceLock<watch::Changes>,
    /// Canaries' own gates tied to their PRs, when the cluster may be read (`origin`).
    origins: std::sync::OnceLock<Arc<origin::Origins>>,
    /// Who is in the groups quorum rules name (`members`).
    membership: std::sync::OnceLock<Arc<dyn members::Membership>>,
    /// The change system of the policy's `[change]` (`tickets`).
    change_system: std::sync::OnceLock<Arc<crate::change::ChangeClient>>,
    /// Wakes the changes' pass (their system's webhook said something changed).
    change_wake: Arc<Notify>,
    /// With `[[environments]]`: where commits were promoted, and PR heads.
    paths: environments::Paths,
    /// What each cluster's checks may still start (`budget`).
    budgets: budget::Budgets,
}

/// The engine's parts, each named for what it is for and written in one file.
/// Each is a view of the one [`Engine`], which keeps only the state they share.
macro_rules! parts {
    ($( $(#[$doc:meta])* $module:ident::$part:ident by $name:ident; )*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy)]
            pub struct $part<'e> {
                engine: &'e Engine,
            }
        )*
        impl Engine {
            $(
                pub fn $name(&self) -> $part<'_> {
                    $part { engine: self }
                }
            )*
        }
    };
}

parts! {
    /// Flagger's checks: the steady state from memory, a wait started or stepped in one transaction.
    check::Checks by checks;
    /// What people do to gates: a unit of work, open, close, hold, unhold, refuse, expiry, and jobs no change carries.
    change::Commands by commands;
    /// Waits' deadlines applied, and the waits their timers follow.
    deadlines::Deadlines by deadlines;
    /// Reminders at the policy's points, once across replicas.
    reminders::Reminders by reminders;
    /// The waits kept in bounds: room made for a new one, silent ones ended, ended ones forgotten.
    bounds::Bounds by bounds;
    /// Flagger's events: the timeline, the waits they end, and last-seen times flushed.
    events::Events by events;
    /// What each cluster's checks may still start, and what was refused.
    budget::Budget by budget;
    /// The canary's numbers refreshed for the messages of waiting canaries.
    evidence::EvidenceRefresh by evidence;
    /// Freezes and release windows: what holds a gate closed, and the freezes in force.
    freezes::Freezes by freezes;
    /// PostgreSQL: other replicas' gate changes heard, and whether memory may answer.
    gate_cache::GateCache by gate_cache;
    /// The policy's clusters in order: where a command's gates land, and what each has passed.
    environments::Clusters by clusters;
    /// Gates pipelines create by name: created, and pruned after retention.
    named::NamedGates by named;
    /// Canaries' own gates tied to the PRs that brought their revisions.
    origin::OriginLookup by origins;
    /// Gate lists, details and pages, as the API, the CLI, `/status` and the pages show them.
    read::Reads by reads;
    /// Committed changes published to open pages.
    watch::Watch by watch;
}

impl Engine {
    pub async fn new(
        store: Store,
        clock: SharedClock,
        settings: EngineSettings,
        metrics: Arc<Metrics>,
        notifier: Notifier,
        outbox_wake: Arc<Notify>,
    ) -> Result<Self, StoreError> {
        let mut memory = Memory::new(true);
        // PostgreSQL: the gate-change listener loads them once it listens, so
        // that no change made in between is missed (`follow_gates`).
        let sqlite = store.backend() == Backend::Sqlite;
        if sqlite {
            store
                .loading()
                .each_gate(|gate| memory.put_gate(&gate))
                .await?;
        }
        store
            .loading()
            .each_observation(|gate, o| {
                memory.load(Observed {
                    gate: &gate,
                    canary: &o.canary.to_string(),
                    checksum: &o.checksum,
                    phase: o.phase.as_str(),
                    answer: o.answer,
                    reason: &o.reason,
                    wait_open: o.waiting_since.is_some(),
                    last_seen: o.last_seen,
                });
            })
            .await?;
        memory.shrink_to_fit();
        tracing::info!(gates = memory.len(), "loaded gates and last checks");
        let freezes = store.freezes().active_freezes(clock.now_ms()).await?;
        metrics.gate_cache_trusted.set(i64::from(sqlite));
        let engine = Self {
            paths: Default::default(),
            budgets: Default::default(),
            cache_trusted: std::sync::atomic::AtomicBool::new(sqlite),
            any_freeze: std::sync::atomic::AtomicBool::new(!freezes.is_empty()),
            windows: Mutex::new(Default::default()),
            changes: std::sync::OnceLock::new(),
            origins: std::sync::OnceLock::new(),
            membership: std::sync::OnceLock::new(),
            change_system: std::sync::OnceLock::new(),
            change_wake: Arc::new(Notify::new()),
            freezes: std::sync::RwLock::new(freezes),
            store,
            clock,
            settings,
            metrics,
            notifier,
            outbox_wake,
            memory: Mutex::new(memory),
            write: tokio::sync::Mutex::new(()),
            applying: tokio::sync::Mutex::new(()),
            heard: gate_cache::Heard::default(),
        };
        engine.clusters().load_passages().await?;
        Ok(engine)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Where to ask who is in a quorum rule's groups; set once, at start.
    pub fn set_membership(&self, membership: Arc<dyn members::Membership>) {
        let _ = self.membership.set(membership);
    }

    /// What wakes the changes' pass before its time.
    pub fn change_wake(&self) -> Arc<Notify> {
        self.change_wake.clone()
    }

    /// The change system changes are read from; set once, at start.
    pub fn set_changes(&self, client: Arc<crate::change::ChangeClient>) {
        let _ = self.change_system.set(client);
    }

    /// What a claim from Flagger's side may route (see [`admit`]).
    pub(crate) fn admit(&self) -> admit::Admit<'_> {
        admit::Admit::new(&self.settings)
    }

    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// The gate as it stands (closed when never touched).
    pub async fn gate(&self, key: &GateKey) -> Result<Gate, StoreError> {
        let found = match self.store.backend() {
            Backend::Sqlite => self.memory().gate(key),
            Backend::Postgres => self.store.gates().load_gate(key).await?,
        };
        Ok(found.unwrap_or_else(|| Gate::closed(key.clone())))
    }

    /// The gate as `tx` may change it. PostgreSQL: read and locked in `tx`, so
    /// that another replica's change to it waits for this one, or this for
    /// theirs. SQLite: `tx` holds the only writer's lock, and memory is the row.
    async fn gate_in(&self, tx: &mut WriteTx<'_>, key: &GateKey) -> Result<Gate, StoreError> {
        let found = match self.store.backend() {
            Backend::Sqlite => self.memory().gate(key),
            Backend::Postgres => crate::store::Gates::lock_gate(tx, key).await?,
        };
        Ok(found.unwrap_or_else(|| Gate::closed(key.clone())))
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().expect("engine memory poisoned")
    }

    fn remember(&self, gate: &Gate) {
        self.memory().put_gate(gate);
    }

    /// Writes audit entries and queues the jobs the notices mean. Returns how many jobs.
    async fn finish(
        &self,
        tx: &mut WriteTx<'_>,
        audits: &[AuditEntry],
        notices: &[Notice],
        now: Millis,
    ) -> Result<usize, StoreError> {
        for entry in audits {
            crate::store::History::audit(tx, entry).await?;
        }
        let mut queued = 0;
        for notice in notices {
            for planned in self.notifier.plan(notice) {
                match planned {
                    Ok(job) => {
                        queued += usize::from(crate::store::Queues::enqueue(tx, &job, now).await?)
                    }
                    // A bug, said loudly; the change the notice reports still happens.
                    Err(e) => {
                        tracing::error!(error = %e, "notification dropped");
                        self.metrics.dropped(&e.sink, "unencodable");
                    }
                }
            }
        }
        Ok(queued)
    }

    fn after_commit(&self, audits: &[AuditEntry], queued: usize) {
        self.watch().publish(audits);
        for entry in audits {
            self.metrics
                .audit_events
                .get_or_create(&ActionLabels {
                    action: entry.action.to_string(),
                })
                .inc();
        }
        if queued > 0 {
            self.outbox_wake.notify_one();
        }
    }
}

/// Queues `jobs` in `tx`; how many were new (a once-key seen before queues nothing).
pub(crate) async fn queue_jobs(
    tx: &mut WriteTx<'_>,
    jobs: &[crate::store::NewJob],
    now: Millis,
) -> Result<usize, StoreError> {
    let mut queued = 0;
    for job in jobs {
        queued += usize::from(crate::store::Queues::enqueue(tx, job, now).await?);
    }
    Ok(queued)
}
