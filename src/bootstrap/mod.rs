//! Builds everything once from a [`Config`]: the store, the GitHub and Slack
//! clients, the engine, the workers; composes the router; serves and stops.
//! The only module that knows every channel.

mod entry;
mod router;
mod tasks;
mod web_access;

pub use entry::main;
pub use router::{app, app_with, harden, Webhooks};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::{CorrectedClock, SharedClock, SkewedClock, SystemClock};
use crate::config::Config;
use crate::core::{self as engine, AppState, Engine, EngineSettings, Shared};
use crate::metrics::Metrics;
use crate::notify::{Drain, Handler, Notifier, Sink, Worker, WorkerSettings};
use crate::store::{self, QueueName, Store};
use crate::{gate, github, http, policy, slack, templates};
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
    webhook_readers: Arc<Semaphore>,
}

impl Gatebot {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        Self::start_with(config, Options::default()).await
    }

    pub async fn start_with(config: Config, options: Options) -> anyhow::Result<Self> {
        if let Some(problem) = config.problems().into_iter().next() {
            anyhow::bail!(problem);
        }
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        // Before any client is built: they all take these proxies and roots.
        crate::outbound::configure(&config.outbound)?;
        // A clock a test sets is the truth; the system clock is corrected to
        // the database's on PostgreSQL (see `tasks::sync_clock`).
        let measure = options.clock.is_none() && !simulated_date();
        let local = match options.clock {
            Some(clock) => clock,
            None => system_clock()?,
        };
        let clock_sync = CorrectedClock::new(local);
        let clock: SharedClock = clock_sync.clone();
        let store = Store::connect(&config.database_url).await?;
        let mut metrics = Metrics::new();
        metrics.count_store_writes(store.write_health().committed().clone());
        metrics.time_decisions(store.write_health().decisions().clone());
        let metrics = Arc::new(metrics);
        let measure = measure && store.backend() == store::Backend::Postgres;
        let mut skew_log = tasks::SkewLog::default();
        if measure {
            // Before anything is stamped.
            tasks::sync_clock(&store, &clock_sync, &metrics, &mut skew_log).await;
        }
        let templates = templates::Templates::with_links(
            config.templates_dir.clone(),
            config.public_url.as_deref(),
        )?;
        let policy = policy::Policy::from_config(&config)?;
        for warning in policy.door_warnings(config.flagger_tokens()) {
            tracing::warn!("{warning}");
        }
        let outbox_wake = Arc::new(Notify::new());
        let inbox_wake = Arc::new(Notify::new());
        let mut sinks = options.sinks;
        let github = github::client(&config, &metrics)?;
        sinks.extend(github::sinks(
            github.as_ref(),
            &config,
            &store,
            &templates,
            &clock,
            &metrics,
        ));
        sinks.extend(slack::sinks(&config, &store, &templates, &clock, &metrics)?);
        sinks.extend(crate::teams::sinks(&config, &clock, &metrics));
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
                    slack: config.slack.inbound(),
                },
                calendar: policy.calendar().clone(),
                quorum: policy.quorum().to_vec(),
                timers: policy.timers(),
            },
            metrics.clone(),
            notifier.clone(),
            outbox_wake.clone(),
        )
        .await
        .context("cannot load gates from the store")?;
        // The policy may have changed since the waits in progress started.
        let rescheduled = engine
            .schedule_waits()
            .await
            .context("cannot set the timers of the waits in progress")?;
        if rescheduled > 0 {
            tracing::info!(
                waits = rescheduled,
                "timers of waits in progress set by the policy now in force"
            );
        }
        // One channel of changes for every open page (server-sent events).
        let (changes, _) = tokio::sync::broadcast::channel(1024);
        engine.publish_to(changes.clone());
        let authority = github.clone().map(|client| {
            Arc::new(web_access::GithubAuthority::new(
                client,
                policy.clone(),
                store.clone(),
                clock.clone(),
                config.github.repository.clone(),
            )) as Arc<dyn crate::web::Authority>
        });
        let web = Arc::new(crate::web::Web::new(&config, changes, authority)?);
        let state = AppState(Arc::new(Shared {
            config,
            store: store.clone(),
            engine,
            metrics: metrics.clone(),
            clock: clock.clone(),
            clock_sync: clock_sync.clone(),
            inbox_wake: inbox_wake.clone(),
            templates,
            policy,
        }));

        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let owner = store.replica().to_string();
        take_over_leases(&store, clock.now_ms()).await;
        if store.backend() == store::Backend::Postgres {
            let sync = measure.then(|| (clock_sync.clone(), metrics.clone(), skew_log));
            tasks.spawn(heartbeat(
                store.clone(),
                clock.clone(),
                sync,
                shutdown.clone(),
            ));
            tasks.spawn(follow_gates(state.clone(), shutdown.clone()));
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
            finisher: Default::default(),
        };
        let mut drain = Drain::default();
        drain.add(&outbox);
        tasks.spawn(outbox.run(shutdown.clone()));
        let mut inbox_handlers: std::collections::HashMap<String, Arc<dyn Handler>> =
            options.inbox.into_iter().collect();
        inbox_handlers.extend(github::inbox_handlers(&state, github.as_ref()));
        let app_client = github.clone();
        let authors = github.map(|c| c as Arc<dyn crate::core::authors::AuthorLookup>);
        inbox_handlers.extend(slack::inbox_handlers(&state, authors)?);
        inbox_handlers.extend(crate::teams::inbox_handlers(&state));
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
            finisher: Default::default(),
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
        tasks.spawn(retention(state.clone(), shutdown.clone()));
        // One receipt writer for the webhooks and Socket Mode: one commit for
        // what arrives together, whichever way it came.
        let receipts =
            http::receipts::Receipts::new(store.clone(), clock.clone(), state.inbox_wake.clone());
        // One cap on webhook work in hand, over HTTP and Socket Mode alike.
        let webhook_readers = Arc::new(Semaphore::new(http::limits::WEBHOOK_BODY_READERS));
        if let Some(socket) = slack::socket_mode(&state, receipts.clone(), webhook_readers.clone())?
        {
            tasks.spawn(socket.run(shutdown.clone()));
        }
        // GitHub keeps an App's deliveries: what gatebot refused, it asks for again.
        let redeliveries = github::redeliver::Redeliveries::default();
        if let Some(app) = app_client.filter(|c| c.is_app()) {
            tasks.spawn(
                redeliveries
                    .clone()
                    .run(app, store.clone(), shutdown.clone()),
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
/// wrong, e.g. `-90s`, to show that the correction to the database's clock holds.
fn system_clock() -> anyhow::Result<SharedClock> {
    match std::env::var("GATEBOT_TEST_CLOCK_OFFSET") {
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
