//! Builds everything once from a [`Config`]: the store, the GitHub and Slack
//! clients, the engine, the workers; composes the router; serves and stops.
//! The only module that knows every channel.

mod entry;
mod front;
mod members;
mod origin;
mod probe;
mod router;
mod tasks;
mod web_access;

pub use entry::main;
pub use router::{app, app_with, harden, Webhooks};

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::{CorrectedClock, SharedClock, SkewedClock, SystemClock};
use crate::config::Config;
use crate::core::{self as engine, AppState, Engine, EngineSettings, Shared};
use crate::evidence::prometheus::Prometheus;
use crate::evidence::Evidence;
use crate::metrics::{Metrics, ReasonLabels};
use crate::notify::{Drain, Handler, Notifier, Sink, Worker, WorkerSettings};
use crate::store::{self, QueueName, Store};
use crate::{gate, github, http, policy, slack, templates};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tasks::{follow_gates, heartbeat, housekeeping, retention, take_over_leases};

/// What tests (and embedders) may swap in.
#[derive(Default)]
pub struct Options {
    pub clock: Option<SharedClock>,
    /// Extra notification sinks, next to the configured GitHub and Slack ones.
    pub sinks: Vec<Arc<dyn Sink>>,
    /// Extra inbox handlers by source.
    pub inbox: Vec<(String, Arc<dyn Handler>)>,
    /// Overrides the outbox worker's timings.
    pub worker: Option<WorkerSettings>,
}

/// A running gatebot: state plus its background workers.
pub struct Gatebot {
    pub state: AppState,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    drain: Drain,
    /// The pages under /ui, built once.
    web: Arc<crate::web::Web>,
    receipts: http::receipts::Receipts,
    redeliveries: github::redeliver::Redeliveries,
    webhook_readers: http::limits::WebhookReaders,
}

impl Gatebot {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        Self::start_with(config, Options::default()).await
    }

    pub async fn start_with(mut config: Config, options: Options) -> anyhow::Result<Self> {
        let policy = policy::Policy::from_config(&config)?;
        policy.settle(&mut config);
        prepare(&config)?;
        let base = Base::open(&config, &policy, options.clock).await?;
        let templates = templates::Templates::with_links(
            config.templates_dir.clone(),
            config.public_url.as_deref(),
        )?;
        for warning in policy.door_warnings(config.flagger_tokens()) {
            tracing::warn!("{warning}");
        }
        let wakes = Wakes::default();
        let github = github::client(&config, &base.metrics, base.clock.clone())?;
        let evidence = Arc::new(base.evidence(&config, &policy)?);
        let mut sinks = options.sinks;
        sinks.extend(base.sinks(&config, &policy, github.as_ref(), &templates, &evidence)?);
        let notifier = Notifier::new(sinks);
        let engine = base.engine(&config, &policy, &notifier, &wakes).await?;
        let members = members::Members::new(&config, &base.metrics, &policy, github.clone())?;
        engine.set_membership(Arc::new(members));
        if let Some(client) = change_client(&config, &policy)? {
            engine.set_changes(Arc::new(client));
        }
        base.cluster(&config, github.clone(), &engine).await?;
        let web = base.web(&config, &policy, github.clone(), &engine)?;
        if let Some(secret) = origin::app_secret(&config).await? {
            web.write_app_to(secret);
        }
        let state = AppState(Arc::new(Shared {
            config,
            store: base.store.clone(),
            records: base.records.clone(),
            engine,
            metrics: base.metrics.clone(),
            clock: base.clock.clone(),
            clock_sync: base.clock_sync.clone(),
            inbox_wake: wakes.inbox.clone(),
            delivery_applied: Arc::new(Notify::new()),
            templates,
            policy,
            evidence,
        }));
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        take_over_leases(&base.store, base.clock.now_ms()).await;
        let workers = Workers {
            worker: options.worker,
            inbox: options.inbox,
            notifier,
            github: github.clone(),
            wakes,
        };
        let drain = base.spawn(&state, workers, &mut tasks, &shutdown)?;
        // One receipt writer for the webhooks and Socket Mode: one commit for
        // what arrives together, whichever way it came.
        let receipts = http::receipts::Receipts::new(
            state.store.clone(),
            state.clock.clone(),
            state.inbox_wake.clone(),
        );
        // A cap on webhook work in hand per channel; Slack's over HTTP and
        // Socket Mode alike.
        let webhook_readers = http::limits::WebhookReaders::default();
        if let Some(socket) =
            slack::socket_mode(&state, receipts.clone(), webhook_readers.slack.clone())?
        {
            tasks.spawn(socket.run(shutdown.clone()));
        }
        // GitHub keeps an App's deliveries: what gatebot refused, it asks for again.
        let redeliveries = github::redeliver::Redeliveries::default();
        if let Some(app) = github.filter(|c| c.is_app()) {
            tasks.spawn(
                redeliveries
                    .clone()
                    .run(app, state.records.clone(), shutdown.clone()),
            );
        }
        Ok(Self {
            state,
            shutdown,
            tasks,
            drain,
            web,
            receipts,
            redeliveries,
            webhook_readers,
        })
    }

    /// Waits for the inbox and outbox workers to have nothing due (tests use it
    /// instead of polling for background work; see [`Drain::settled`]).
    pub fn drain(&self) -> Drain {
        self.drain.clone()
    }

    pub fn router(&self) -> Router {
        let webhooks = Webhooks {
            receipts: self.receipts.clone(),
            redeliveries: self.redeliveries.clone(),
            readers: self.webhook_readers.clone(),
        };
        app_with(self.state.clone(), self.web.clone(), webhooks)
    }

    /// Serves until `signal`, lets in-flight requests finish (up to the
    /// configured shutdown timeout), then stops the workers. Slow and idle
    /// connections are cut and connections are limited (see [`http::server`]).
    pub async fn serve(
        self,
        listener: TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let grace = self.state.config.limits.shutdown_timeout;
        let limits = http::server::ServerLimits::from_config(&self.state.config);
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let server = http::server::serve(
            listener,
            front::Front::new(self.state.clone(), self.router()),
            limits,
            self.state.metrics.clone(),
            async move {
                signal.await;
                tracing::info!("shutting down: finishing in-flight requests");
                let _ = stopping_tx.send(());
            },
        );
        tokio::pin!(server);
        tokio::select! {
            () = &mut server => {}
            () = async {
                let _ = stopping_rx.await;
                tokio::time::sleep(grace).await;
            } => tracing::warn!(?grace, "in-flight requests did not finish in time"),
        }
        self.stop().await;
        Ok(())
    }

    /// Stops the workers and writes what is only in memory.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
        if let Err(e) = self.state.engine.events().flush_seen().await {
            tracing::warn!(error = %e, "could not write last-seen times");
        }
        if let Err(e) = self.state.store.replicas().leave().await {
            tracing::warn!(error = %e, "could not remove this replica's heartbeat");
        }
        self.state.store.close().await;
    }
}

/// Refuses a configuration with a problem, says its warnings, and sets the
/// proxies and roots every client is built with.
fn prepare(config: &Config) -> anyhow::Result<()> {
    if let Some(problem) = config.problems().into_iter().next() {
        anyhow::bail!(problem);
    }
    for warning in config
        .warnings()
        .into_iter()
        .chain(config.limits.warnings())
    {
        tracing::warn!("{warning}");
    }
    crate::outbound::configure(&config.outbound)
}

/// What the rest is built on: the store, the clock and the metrics.
struct Base {
    store: Store,
    /// The channels' rows, over the same store: one, shared by the sinks and handlers.
    records: crate::core::Records,
    clock_sync: Arc<CorrectedClock>,
    clock: SharedClock,
    metrics: Arc<Metrics>,
    /// The clock is measured against the database's (PostgreSQL, real time).
    measure: bool,
    skew_log: tasks::SkewLog,
    /// Counts of the canaries' PR lookups ([kubernetes] lookup).
    canary_lookups: engine::origin::Lookups,
    /// Counts of the canaries' numbers that Prometheus could not give.
    evidence_unavailable: Family<ReasonLabels, Counter>,
}

/// Wakes the workers when there is work for them.
#[derive(Default)]
struct Wakes {
    outbox: Arc<Notify>,
    inbox: Arc<Notify>,
}

/// What the inbox and outbox workers are made of.
struct Workers {
    worker: Option<WorkerSettings>,
    inbox: Vec<(String, Arc<dyn Handler>)>,
    notifier: Notifier,
    github: Option<Arc<github::client::GithubClient>>,
    wakes: Wakes,
}

impl Base {
    async fn open(
        config: &Config,
        policy: &policy::Policy,
        clock: Option<SharedClock>,
    ) -> anyhow::Result<Self> {
        // A clock a test sets is the truth; the system clock is corrected to
        // the database's on PostgreSQL (see `tasks::sync_clock`).
        let measure = clock.is_none() && !simulated_date();
        let local = match clock {
            Some(clock) => clock,
            None => system_clock()?,
        };
        let clock_sync = CorrectedClock::new(local);
        let store = Store::connect(&config.database_url).await?;
        let mut metrics = Metrics::new();
        metrics.count_store_writes(store.write_health().committed().clone());
        metrics.time_decisions(store.write_health().decisions().clone());
        let canary_lookups = engine::origin::Lookups::default();
        metrics.count_canary_lookups(canary_lookups.clone());
        let evidence_unavailable = Family::default();
        metrics.count_evidence_unavailable(evidence_unavailable.clone());
        let mut base = Self {
            measure: measure && store.backend() == store::Backend::Postgres,
            clock: clock_sync.clone(),
            clock_sync,
            records: crate::core::Records::new(store.clone())
                .with_environments(policy.environments().clone()),
            store,
            metrics: Arc::new(metrics),
            skew_log: tasks::SkewLog::default(),
            canary_lookups,
            evidence_unavailable,
        };
        if base.measure {
            // Before anything is stamped.
            tasks::sync_clock(
                &base.store,
                &base.clock_sync,
                &base.metrics,
                &mut base.skew_log,
            )
            .await;
        }
        Ok(base)
    }

    /// The configured GitHub and Slack notification sinks.
    fn sinks(
        &self,
        config: &Config,
        policy: &policy::Policy,
        github: Option<&Arc<github::client::GithubClient>>,
        templates: &templates::Templates,
        evidence: &Arc<Evidence>,
    ) -> anyhow::Result<Vec<Arc<dyn Sink>>> {
        let base = crate::core::SinkBase {
            config,
            records: &self.records,
            templates,
            clock: &self.clock,
            metrics: &self.metrics,
        };
        let mut sinks = github::sinks(github, &base, policy, evidence);
        sinks.extend(slack::sinks(&base, policy, evidence)?);
        sinks.extend(crate::teams::sinks(&base, policy, evidence));
        Ok(sinks)
    }

    /// The canaries' numbers: Prometheus's client and the policy's queries,
    /// checked now so a bad query stops the start, not a message.
    fn evidence(&self, config: &Config, policy: &policy::Policy) -> anyhow::Result<Evidence> {
        let prometheus = Prometheus::from_config(
            &config.prometheus,
            config.limits.prometheus_timeout,
            self.metrics.outbound("prometheus"),
        )?;
        crate::evidence::check_rules(policy.evidence()).context("GATEBOT_POLICY: [evidence]")?;
        Ok(Evidence::new(
            prometheus,
            policy.evidence().clone(),
            self.evidence_unavailable.clone(),
        ))
    }

    /// The engine, its gates loaded and the timers of waits in progress set.
    async fn engine(
        &self,
        config: &Config,
        policy: &policy::Policy,
        notifier: &Notifier,
        wakes: &Wakes,
    ) -> anyhow::Result<Engine> {
        let settings = EngineSettings {
            approval_ttl: Some(config.approval_ttl).filter(|t| !t.is_zero()),
            default_repo: config.github.repository.clone(),
            check_deadline: engine::CHECK_DEADLINE,
            channels: gate::Channels {
                github: config.github.webhook_secret.is_some(),
                slack: config.slack.inbound(),
            },
            calendar: policy.calendar().clone(),
            quorum: policy.quorum().to_vec(),
            reasons: policy.reasons().to_vec(),
            change: policy.change().map(|c| c.rule.clone()),
            timers: policy.timers(),
            environments: policy.environments().clone(),
            named: engine::named::NamedLimits {
                live: config.limits.named_gates_live,
                per_hour: config.limits.named_gates_per_hour,
            },
        };
        let engine = Engine::new(
            self.store.clone(),
            self.clock.clone(),
            settings,
            self.metrics.clone(),
            notifier.clone(),
            wakes.outbox.clone(),
        )
        .await
        .context("cannot load gates from the store")?;
        // The policy may have changed since the waits in progress started.
        let rescheduled = engine
            .deadlines()
            .schedule_waits()
            .await
            .context("cannot set the timers of the waits in progress")?;
        if rescheduled > 0 {
            tracing::info!(
                waits = rescheduled,
                "timers of waits in progress set by the policy now in force"
            );
        }
        Ok(engine)
    }

    /// Canaries tied to their PRs through the cluster ([kubernetes] lookup).
    async fn cluster(
        &self,
        config: &Config,
        github: Option<Arc<github::client::GithubClient>>,
        engine: &Engine,
    ) -> anyhow::Result<()> {
        let lookups = self.canary_lookups.clone();
        if let Some(origins) = origin::origins(config, github, lookups).await? {
            engine
                .origins()
                .find_origins_with(origins)
                .await
                .context("cannot load the canaries' pull requests from the store")?;
        }
        Ok(())
    }

    /// The pages under /ui, with one channel of changes for every open page
    /// (server-sent events).
    fn web(
        &self,
        config: &Config,
        policy: &policy::Policy,
        github: Option<Arc<github::client::GithubClient>>,
        engine: &Engine,
    ) -> anyhow::Result<Arc<crate::web::Web>> {
        let (changes, _) = tokio::sync::broadcast::channel(1024);
        engine.watch().publish_to(changes.clone());
        let authority = github.map(|client| {
            Arc::new(web_access::GithubAuthority::new(
                client,
                policy.clone(),
                self.records.clone(),
                self.clock.clone(),
                config.github.repository.clone(),
            )) as Arc<dyn crate::web::Authority>
        });
        Ok(Arc::new(crate::web::Web::new(config, changes, authority)?))
    }

    /// Starts the background work: the heartbeat and the gate listener
    /// (PostgreSQL), the outbox and inbox workers, housekeeping, retention.
    fn spawn(
        self,
        state: &AppState,
        workers: Workers,
        tasks: &mut JoinSet<()>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Drain> {
        if self.store.backend() == store::Backend::Postgres {
            let sync = self
                .measure
                .then(|| (self.clock_sync.clone(), self.metrics.clone(), self.skew_log));
            let (store, clock) = (self.store.clone(), self.clock.clone());
            tasks.spawn(heartbeat(store, clock, sync, shutdown.clone()));
            tasks.spawn(follow_gates(state.clone(), shutdown.clone()));
        }
        let drain = workers.spawn(state, tasks, shutdown)?;
        tasks.spawn(housekeeping(state.clone(), shutdown.clone()));
        tasks.spawn(retention(state.clone(), shutdown.clone()));
        tasks.spawn(tasks::evidence(state.clone(), shutdown.clone()));
        tasks.spawn(tasks::changes(state.clone(), shutdown.clone()));
        // Canaries' PRs looked up in the background ([kubernetes] lookup).
        let (finder, stop) = (state.clone(), shutdown.clone());
        tasks.spawn(async move { finder.engine.origins().find_origins(stop).await });
        Ok(drain)
    }
}

impl Workers {
    /// Starts the outbox and inbox workers; the drain tells when both are idle.
    fn spawn(
        self,
        state: &AppState,
        tasks: &mut JoinSet<()>,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Drain> {
        let settings = self.worker.unwrap_or_else(|| WorkerSettings {
            base_backoff: state.config.limits.outbox_backoff,
            max_attempts: state.config.limits.outbox_max_attempts.into(),
            lease: state.config.limits.outbox_lease,
            ..WorkerSettings::default()
        });
        let outbox = worker(
            state,
            QueueName::Outbox,
            settings.clone(),
            self.wakes.outbox,
        );
        let outbox = Worker {
            handlers: self.notifier.handlers().into_iter().collect(),
            ..outbox
        };
        let mut handlers: HashMap<String, Arc<dyn Handler>> = self.inbox.into_iter().collect();
        handlers.extend(github::inbox_handlers(state, self.github.as_ref()));
        let authors = self
            .github
            .map(|c| c as Arc<dyn crate::core::authors::AuthorLookup>);
        handlers.extend(slack::inbox_handlers(state, authors.clone())?);
        handlers.extend(crate::teams::inbox_handlers(state, authors));
        let settings = WorkerSettings {
            base_backoff: Duration::from_millis(500),
            ..settings
        };
        let inbox = Worker {
            handlers,
            ..worker(state, QueueName::Inbox, settings, self.wakes.inbox)
        };
        let mut drain = Drain::default();
        drain.add(&outbox);
        drain.add(&inbox);
        tasks.spawn(outbox.run(shutdown.clone()));
        tasks.spawn(delayed(inbox, shutdown.clone()));
        Ok(drain)
    }
}

/// A worker of `queue` with no handlers yet.
fn worker(
    state: &AppState,
    queue: QueueName,
    settings: WorkerSettings,
    wake: Arc<Notify>,
) -> Worker {
    Worker {
        queue,
        store: state.store.clone(),
        clock: state.clock.clone(),
        metrics: state.metrics.clone(),
        handlers: HashMap::new(),
        settings,
        wake,
        owner: state.store.replica().to_string(),
        idle: Default::default(),
        finisher: Default::default(),
    }
}

/// Runs the inbox worker. Test and operations knob (undocumented in --help):
/// `GATEBOT_INBOX_START_DELAY` starts working the inbox only after this long,
/// e.g. to inspect or drain stored deliveries first.
async fn delayed(inbox: Worker, shutdown: CancellationToken) {
    let delay = std::env::var("GATEBOT_INBOX_START_DELAY")
        .ok()
        .and_then(|v| humantime::parse_duration(v.trim()).ok());
    if let Some(delay) = delay {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
    inbox.run(shutdown).await
}

/// For tests only (undocumented in --help): `GATEBOT_TEST_CLOCK_SIMULATED=true`
/// makes `GATEBOT_TEST_CLOCK_OFFSET` a simulated date that every replica shares,
/// so it is not corrected to the database's clock (tests/soak.rs moves a day at
/// each restart).
fn simulated_date() -> bool {
    let on = std::env::var("GATEBOT_TEST_CLOCK_SIMULATED").is_ok_and(|v| v.trim() == "true");
    if on {
        tracing::warn!(
            "GATEBOT_TEST_CLOCK_SIMULATED: the clock is not corrected to the database's (for tests only)"
        );
    }
    on
}

/// The system clock, moved by `GATEBOT_TEST_CLOCK_OFFSET` when that is set.
/// For tests only (undocumented in --help): it runs a replica whose clock is
/// wrong, e.g. `-90s`, to show that the correction to the database's clock holds;
/// `file:<path>` reads the offset from that file at every call, to step it.
fn system_clock() -> anyhow::Result<SharedClock> {
    match std::env::var("GATEBOT_TEST_CLOCK_OFFSET") {
        Ok(text) if text.starts_with("file:") => {
            let path = std::path::PathBuf::from(&text["file:".len()..]);
            tracing::warn!(path = %path.display(), "GATEBOT_TEST_CLOCK_OFFSET moves this replica's clock by what the file says (for tests only)");
            Ok(crate::clock::OffsetFileClock::new(
                Arc::new(SystemClock),
                path,
            ))
        }
        Ok(text) if !text.trim().is_empty() => {
            let skew = crate::clock::parse_offset(&text)
                .map_err(|e| anyhow::anyhow!("GATEBOT_TEST_CLOCK_OFFSET: {e}"))?;
            tracing::warn!(
                offset_ms = skew,
                "GATEBOT_TEST_CLOCK_OFFSET moves this replica's clock (for tests only)"
            );
            Ok(SkewedClock::new(Arc::new(SystemClock), skew))
        }
        _ => Ok(Arc::new(SystemClock)),
    }
}

/// The change system's client, when the policy's `[change]` names one; its
/// credentials must be set.
pub(super) fn change_client(
    config: &Config,
    policy: &policy::Policy,
) -> anyhow::Result<Option<crate::change::ChangeClient>> {
    let Some(site) = policy.change() else {
        return Ok(None);
    };
    let Some((user, password)) = config.change.basic_auth() else {
        anyhow::bail!(
            "the policy's [change] names {}, but GATEBOT_CHANGE_USER and GATEBOT_CHANGE_PASSWORD are not both set",
            site.rule.provider.name()
        );
    };
    let http = crate::outbound::client(&config.outbound, crate::change::TIMEOUT)?;
    Ok(Some(crate::change::ChangeClient::new(
        site.rule.provider,
        &site.url,
        http,
        user,
        password,
        site.fields.clone(),
    )))
}
