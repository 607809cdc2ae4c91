//! gatebot: ChatOps gates for Flagger canaries.
//!
//! [`Gatebot::start`] builds everything from a [`Config`]; [`app`] is the router
//! that `main` serves and that tests drive over real HTTP.

pub mod actions;
pub mod cli;
pub mod clock;
pub mod command;
pub mod config;
pub mod engine;
pub mod gate;
pub mod github;
pub mod http;
pub mod metrics;
pub mod notify;
pub mod outbound;
pub mod policy;
pub mod slack;
pub mod store;
pub mod telemetry;
pub mod templates;

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::{SharedClock, SystemClock};
pub use crate::config::Config;
use crate::engine::{Engine, EngineSettings};
use crate::metrics::Metrics;
use crate::notify::{Drain, Handler, Notifier, Sink, Worker, WorkerSettings};
use crate::store::{QueueName, Store};

/// Everything a request handler may need.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub config: Config,
    pub store: Store,
    pub engine: Engine,
    pub metrics: Arc<Metrics>,
    pub clock: SharedClock,
    /// Nudges the inbox worker when a delivery is stored.
    pub inbox_wake: Arc<Notify>,
    pub templates: templates::Templates,
    /// Who may do what; read once at start.
    pub policy: policy::Policy,
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The router, shared by `main` and the tests.
pub fn app(state: AppState) -> Router {
    http::router(state)
}

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
}

impl Gatebot {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        Self::start_with(config, Options::default()).await
    }

    pub async fn start_with(config: Config, options: Options) -> anyhow::Result<Self> {
        if let Some(problem) = config.problems().into_iter().next() {
            anyhow::bail!(problem);
        }
        let clock = options.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let store = Store::connect(&config.database_url).await?;
        let metrics = Arc::new(Metrics::new());
        let templates = templates::Templates::new(config.templates_dir.clone())?;
        let policy = policy::Policy::from_config(&config)?;
        let outbox_wake = Arc::new(Notify::new());
        let inbox_wake = Arc::new(Notify::new());
        let mut sinks = options.sinks;
        sinks.extend(github::sinks(
            &config, &store, &templates, &clock, &metrics,
        )?);
        sinks.extend(slack::sinks(&config, &store, &templates, &clock, &metrics)?);
        let notifier = Notifier::new(sinks);
        let engine = Engine::new(
            store.clone(),
            clock.clone(),
            EngineSettings {
                approval_ttl: Some(config.approval_ttl).filter(|t| !t.is_zero()),
                default_repo: config.github.repository.clone(),
                check_deadline: engine::CHECK_DEADLINE,
                channels: gate::Channels {
                    github: config.github.webhook_secret.is_some(),
                    slack: config.slack.signing_secret.is_some(),
                },
            },
            metrics.clone(),
            notifier.clone(),
            outbox_wake.clone(),
        )
        .await
        .context("cannot load gates from the store")?;
        let state = AppState(Arc::new(Shared {
            config,
            store: store.clone(),
            engine,
            metrics: metrics.clone(),
            clock: clock.clone(),
            inbox_wake: inbox_wake.clone(),
            templates,
            policy,
        }));

        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let owner = store.replica().to_string();
        take_over_leases(&store, clock.now_ms()).await;
        if store.backend() == store::Backend::Postgres {
            tasks.spawn(heartbeat(store.clone(), clock.clone(), shutdown.clone()));
        }
        let settings = options.worker.unwrap_or_else(|| WorkerSettings {
            base_backoff: state.config.outbox_backoff,
            max_attempts: state.config.outbox_max_attempts,
            lease: state.config.outbox_lease,
            ..WorkerSettings::default()
        });
        let outbox = Worker {
            queue: QueueName::Outbox,
            store: store.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            handlers: notifier.handlers().into_iter().collect(),
            settings: settings.clone(),
            wake: outbox_wake,
            owner: owner.clone(),
            idle: Default::default(),
        };
        let mut drain = Drain::default();
        drain.add(&outbox);
        tasks.spawn(outbox.run(shutdown.clone()));
        let mut inbox_handlers: std::collections::HashMap<String, Arc<dyn Handler>> =
            options.inbox.into_iter().collect();
        inbox_handlers.extend(github::inbox_handlers(&state)?);
        inbox_handlers.extend(slack::inbox_handlers(&state)?);
        let inbox = Worker {
            queue: QueueName::Inbox,
            store: store.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            handlers: inbox_handlers,
            settings: WorkerSettings {
                base_backoff: Duration::from_millis(500),
                ..settings
            },
            wake: inbox_wake,
            owner,
            idle: Default::default(),
        };
        drain.add(&inbox);
        // Test and operations knob (undocumented in --help): start working the inbox
        // only after this long, e.g. to inspect or drain stored deliveries first.
        let inbox_delay = std::env::var("GATEBOT_INBOX_START_DELAY")
            .ok()
            .and_then(|v| humantime::parse_duration(v.trim()).ok());
        let inbox_shutdown = shutdown.clone();
        tasks.spawn(async move {
            if let Some(delay) = inbox_delay {
                tokio::select! {
                    () = inbox_shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
            inbox.run(inbox_shutdown).await
        });
        tasks.spawn(housekeeping(state.clone(), shutdown.clone()));
        Ok(Self {
            state,
            shutdown,
            tasks,
            drain,
        })
    }

    /// Waits for the inbox and outbox workers to have nothing due (tests use it
    /// instead of polling for background work; see [`Drain::settled`]).
    pub fn drain(&self) -> Drain {
        self.drain.clone()
    }

    pub fn router(&self) -> Router {
        app(self.state.clone())
    }

    /// Serves until `signal`, lets in-flight requests finish (up to the
    /// configured shutdown timeout), then stops the workers. Slow and idle
    /// connections are cut and connections are limited (see [`http::server`]).
    pub async fn serve(
        self,
        listener: TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let grace = self.state.config.shutdown_timeout;
        let limits = http::server::ServerLimits::from_config(&self.state.config);
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let server = http::server::serve(
            listener,
            self.router(),
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
        if let Err(e) = self.state.engine.flush_seen().await {
            tracing::warn!(error = %e, "could not write last-seen times");
        }
        if let Err(e) = self.state.store.leave().await {
            tracing::warn!(error = %e, "could not remove this replica's heartbeat");
        }
        self.state.store.close().await;
    }
}

/// Before the workers start: on SQLite (one process) every lease is a dead
/// process's, so take them back; on both stores, say this replica is alive
/// before it claims anything.
async fn take_over_leases(store: &Store, now: gate::Millis) {
    if store.backend() == store::Backend::Sqlite {
        match store.release_leases().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(items = n, "took back leases of a previous process"),
            Err(e) => tracing::warn!(error = %e, "could not take back old leases"),
        }
    }
    if let Err(e) = store.heartbeat(now).await {
        tracing::warn!(error = %e, "could not register this replica");
    }
}

/// PostgreSQL: says every second that this replica is alive, so that others
/// take its leases within seconds of its death (see `store::DEAD_AFTER`).
async fn heartbeat(store: Store, clock: SharedClock, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(store::HEARTBEAT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let beat = store.heartbeat(clock.now_ms());
        match tokio::time::timeout(store::HEARTBEAT_EVERY * 2, beat).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(_) => tracing::warn!("heartbeat timed out"),
        }
    }
}

/// Every few seconds: write last-seen times, expire approvals, refresh gauges.
async fn housekeeping(state: AppState, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = state.engine.flush_seen().await {
            tracing::warn!(error = %e, "could not write last-seen times");
        }
        if let Err(e) = state.engine.expire_due().await {
            tracing::warn!(error = %e, "could not expire approvals");
        }
        if let Ok(n) = state.store.pending(QueueName::Outbox).await {
            state.metrics.outbox_pending.set(n);
        }
        if let Ok(n) = state.store.pending(QueueName::Inbox).await {
            state.metrics.inbox_pending.set(n);
        }
    }
}
