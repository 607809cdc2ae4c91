//! Prometheus metrics, one registry per server (so tests can read their own).
//!
//! Over 400 lines on purpose: the file is the list of every metric gatebot
//! exports, each registered with its help text (the chart's dashboard and
//! alerts name them; tests/metrics.rs checks that they exist).

use std::time::Duration;

use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::{Metric, Registry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    pub kind: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub route: String,
    pub reason: String,
}

/// A request that gatebot failed to answer itself: `panic` or `timeout`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub route: String,
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    pub table: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// A side effect refused past its cluster's budget: what it was (`wait`,
/// `lookup`, `query`) and the cluster (empty on a single-cluster install).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    pub what: &'static str,
    pub cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub queue: &'static str,
    pub route: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    pub source: &'static str,
    pub command: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub sink: String,
    /// `digest` (announced in a digest), `missing_pr` (GitHub said 404), `unencodable`.
    pub reason: &'static str,
}

/// The build that runs: one series, always 1.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    /// The git commit it was built from, `unknown` without git at build time.
    pub commit: &'static str,
    pub rustc: &'static str,
}

/// An outbound call: which service, which endpoint (a fixed name such as
/// `create_comment` or `chat.postMessage`, never a path with ids in it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub service: &'static str,
    pub endpoint: &'static str,
}

/// An outbound call's result: `ok`, `rate_limited`, `client_error`,
/// `server_error`, `api_error` (Slack's `ok: false`), `transport`, `timeout`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallResultLabels {
    pub service: &'static str,
    pub endpoint: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: &'static str,
}

/// How a wait ended (`opened`, `superseded`, `promoted`, …) at a gate of `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub kind: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// A Socket Mode envelope by its `type` (`interactive`, `slash_commands`,
/// `events_api`, `other`) and what became of it: `acked` (stored, or nothing
/// to store), `refused` (acknowledged with the reason, changing nothing) or
/// `unacked` (not stored in time: Slack delivers it again).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnvelopeLabels {
    pub kind: &'static str,
    pub result: &'static str,
}

/// Which queue a write transaction worked: `inbox`, `outbox`, or `none`
/// (gate checks, API commands, housekeeping).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub queue: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// (name, type, help) of every metric, so that /metrics describes the
    /// families that have no series yet too (see `render`).
    described: Vec<(&'static str, &'static str, &'static str)>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram>,
    pub http_failures: Family<FailureLabels, Counter>,
    pub http_connections: Gauge,
    pub http_connections_cut: Family<ReasonLabels, Counter>,
    pub gate_checks: Family<GateLabels, Counter>,
    /// Checks answered closed because the store did not answer in time.
    pub checks_store_busy: Counter,
    pub waits_started: Family<KindLabels, Counter>,
    pub waits_open: Gauge,
    /// Side effects of checks refused past their bound (docs/security.md).
    pub budget_refused: Family<BudgetLabels, Counter>,
    pub audit_events: Family<ActionLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub jobs: Family<JobLabels, Counter>,
    pub outbox_pending: Gauge,
    pub inbox_pending: Gauge,
    /// Deliveries acknowledged more than [`OVERDUE_AFTER`] ago and not yet applied.
    pub inbox_overdue: Gauge,
    pub commands: Family<CommandLabels, Counter>,
    pub events: Family<ActionLabels, Counter>,
    pub notifications_dropped: Family<DropLabels, Counter>,
    pub outbound_calls: Family<CallResultLabels, Counter>,
    pub outbound_duration: Family<CallLabels, Histogram>,
    /// Age of the oldest pending item of each queue (0 when it is empty).
    pub queue_oldest: Family<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// 1 when the latest readiness probe found the store writable, else 0.
    pub store_ready: Gauge,
    /// Database clock minus this replica's, as measured at each heartbeat.
    pub clock_offset: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub deadlines_passed: Counter,
    /// Rows per table, counted at every retention pass.
    pub store_rows: Family<TableLabels, Gauge>,
    /// The store's size on disk, measured at every retention pass.
    pub store_bytes: Gauge,
    /// Rows deleted by retention, per table.
    pub store_pruned: Family<TableLabels, Counter>,
    /// 1 while gate checks are answered from memory (SQLite, or PostgreSQL
    /// with the gate-change listener connected), 0 while each reads the store.
    pub gate_cache_trusted: Gauge,
    /// Times every gate was read back into memory after the listener (re)connected.
    pub gate_cache_reloads: Counter,
    /// Open Slack Socket Mode connections (greeted by Slack's `hello`).
    pub socket_connections: Gauge,
    /// Socket Mode connections opened (`ok`) or not (`failed`).
    pub socket_connects: Family<ResultLabels, Counter>,
    /// Socket Mode connections ended, by why.
    pub socket_disconnects: Family<ReasonLabels, Counter>,
    pub socket_envelopes: Family<EnvelopeLabels, Counter>,
    /// From reading an envelope to sending its acknowledgement.
    pub socket_ack_duration: Histogram,
}

/// Records the calls to one outside service (GitHub, Slack) into the server's
/// metrics; cheap to clone (the families are shared).
#[derive(Clone, Debug)]
pub struct OutboundCalls {
    service: &'static str,
    counts: Family<CallResultLabels, Counter>,
    duration: Family<CallLabels, Histogram>,
}

impl OutboundCalls {
    pub fn observe(&self, endpoint: &'static str, result: &'static str, took: Duration) {
        let service = self.service;
        self.counts
            .get_or_create(&CallResultLabels {
                service,
                endpoint,
                result,
            })
            .inc();
        self.duration
            .get_or_create(&CallLabels { service, endpoint })
            .observe(took.as_secs_f64());
    }
}

/// The values of `gatebot_build_info`, fixed at build time (see build.rs).
pub fn build_labels() -> BuildLabels {
    BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("GATEBOT_BUILD_COMMIT"),
        rustc: env!("GATEBOT_BUILD_RUSTC"),
    }
}

/// Latency buckets for calls to GitHub and Slack (each bounded at 5 s).
/// A delivery not applied this long after it was acknowledged is overdue
/// (`gatebot_inbox_overdue`): applying one takes well under a second.
pub const OVERDUE_AFTER: Duration = Duration::from_secs(60);

const CALL_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0,
];

/// From a few seconds (an approval already waiting) to a day and more.
pub const DECISION_BUCKETS: [f64; 12] = [
    1.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
];

/// The histogram of how long waits lasted, kept by the store (which ends them).
pub fn decision_family() -> Family<DecisionLabels, Histogram> {
    Family::new_with_constructor(|| Histogram::new(DECISION_BUCKETS))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut metrics = Self::unregistered();
        let build = Family::<BuildLabels, Gauge>::default();
        build.get_or_create(&build_labels()).set(1);
        metrics.add(
            "build_info",
            "The running build: version, git commit, rustc; always 1",
            build,
        );
        metrics.register_http();
        metrics.register_gates();
        metrics.register_queues();
        metrics.register_outbound();
        metrics.register_store();
        metrics.register_socket();
        metrics
    }

    /// Every metric, made and not yet registered.
    fn unregistered() -> Self {
        Self {
            registry: Registry::with_prefix("gatebot"),
            described: Vec::new(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(|| {
                Histogram::new([
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                ])
            }),
            http_failures: Family::default(),
            http_connections: Gauge::default(),
            http_connections_cut: Family::default(),
            gate_checks: Family::default(),
            checks_store_busy: Counter::default(),
            waits_started: Family::default(),
            waits_open: Gauge::default(),
            budget_refused: Family::default(),
            audit_events: Family::default(),
            rejected: Family::default(),
            jobs: Family::default(),
            outbox_pending: Gauge::default(),
            inbox_pending: Gauge::default(),
            inbox_overdue: Gauge::default(),
            commands: Family::default(),
            events: Family::default(),
            notifications_dropped: Family::default(),
            outbound_calls: Family::default(),
            outbound_duration: Family::new_with_constructor(|| Histogram::new(CALL_BUCKETS)),
            queue_oldest: Family::default(),
            store_ready: Gauge::default(),
            clock_offset: Gauge::default(),
            deadlines_passed: Counter::default(),
            store_rows: Family::default(),
            store_bytes: Gauge::default(),
            store_pruned: Family::default(),
            gate_cache_trusted: Gauge::default(),
            gate_cache_reloads: Counter::default(),
            socket_connections: Gauge::default(),
            socket_connects: Family::default(),
            socket_disconnects: Family::default(),
            socket_envelopes: Family::default(),
            socket_ack_duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0,
            ]),
        }
    }

    /// Registers `metric` and remembers its name, type and help for `render`.
    fn add<M: Metric + TypedMetric>(&mut self, name: &'static str, help: &'static str, metric: M) {
        let kind = match M::TYPE {
            prometheus_client::metrics::MetricType::Counter => "counter",
            prometheus_client::metrics::MetricType::Gauge => "gauge",
            prometheus_client::metrics::MetricType::Histogram => "histogram",
            prometheus_client::metrics::MetricType::Info => "info",
            prometheus_client::metrics::MetricType::Unknown => "unknown",
        };
        self.described.push((name, kind, help));
        self.registry.register(name, help, metric);
    }

    /// The HTTP server: requests, latency, failures, connections, refusals.
    fn register_http(&mut self) {
        self.add(
            "http_requests",
            "HTTP requests by matched route",
            self.http_requests.clone(),
        );
        self.add(
            "http_request_duration_seconds",
            "HTTP request latency by matched route",
            self.http_duration.clone(),
        );
        self.add("http_failures", "Requests gatebot failed to answer itself (panic, timeout), by route; also counted in http_requests", self.http_failures.clone());
        self.add(
            "http_connections",
            "Open HTTP connections",
            self.http_connections.clone(),
        );
        self.add("http_connections_cut", "Connections closed for sending no request head in time (header_timeout) or staying idle (idle_timeout)", self.http_connections_cut.clone());
        self.add(
            "rejected_requests",
            "Requests refused before doing anything, by route and reason",
            self.rejected.clone(),
        );
    }

    /// Gates, waits and what people and Flagger did to them.
    fn register_gates(&mut self) {
        self.add(
            "gate_checks",
            "Gate answers by kind and result",
            self.gate_checks.clone(),
        );
        self.add("gate_checks_store_busy", "Gate checks answered closed because the store did not answer within the check deadline", self.checks_store_busy.clone());
        self.add(
            "waits_started",
            "Waits started (one per canary and gate)",
            self.waits_started.clone(),
        );
        self.add("waits_open", "Waits not yet ended", self.waits_open.clone());
        self.add(
            "budget_refused",
            "Side effects of checks refused or cut short past their cluster's budget or their bound: a made-up wait not started or ended for room (wait), a cluster lookup (lookup), a Prometheus query (query)",
            self.budget_refused.clone(),
        );
        self.add(
            "audit_events",
            "Audit log entries by action",
            self.audit_events.clone(),
        );
        self.add(
            "commands",
            "Commands from people, by source and result",
            self.commands.clone(),
        );
        self.add(
            "flagger_events",
            "Flagger events received, by kind",
            self.events.clone(),
        );
        self.add(
            "wait_deadlines_passed",
            "Waits that outlasted their deadline and were acted on (rolled back, closed, or told)",
            self.deadlines_passed.clone(),
        );
    }

    /// The inbox and the outbox.
    fn register_queues(&mut self) {
        self.add(
            "queue_jobs",
            "Outbox and inbox items run, by result",
            self.jobs.clone(),
        );
        self.add(
            "outbox_pending",
            "Notification jobs waiting to be sent",
            self.outbox_pending.clone(),
        );
        self.add(
            "inbox_pending",
            "Webhook deliveries waiting to be worked",
            self.inbox_pending.clone(),
        );
        self.add(
            "inbox_overdue",
            "Webhook deliveries acknowledged more than a minute ago and not yet applied (a store that keeps failing, a row lock held)",
            self.inbox_overdue.clone(),
        );
        self.add("queue_oldest_pending_age_seconds", "Age of the oldest pending item, by queue (outbox: notifications, inbox: deliveries); 0 when none is pending", self.queue_oldest.clone());
        self.add(
            "notifications_dropped",
            "Notifications not sent on their own, by sink and reason",
            self.notifications_dropped.clone(),
        );
    }

    /// Calls to GitHub and Slack.
    fn register_outbound(&mut self) {
        self.add("outbound_requests", "Calls to GitHub and Slack, by service, endpoint and result (ok, rate_limited, client_error, server_error, api_error, transport, timeout)", self.outbound_calls.clone());
        self.add(
            "outbound_request_duration_seconds",
            "Latency of calls to GitHub and Slack, by service and endpoint, whatever their result",
            self.outbound_duration.clone(),
        );
    }

    /// The store, its clock, and the gates kept in memory.
    fn register_store(&mut self) {
        self.add(
            "store_ready",
            "1 when the latest readiness probe (/readyz) found the store writable, else 0",
            self.store_ready.clone(),
        );
        self.add("clock_offset_seconds", "The database's clock minus this replica's, measured at every heartbeat (PostgreSQL; 0 on SQLite); times are stamped corrected by it, and /readyz fails beyond 2 s", self.clock_offset.clone());
        self.add(
            "store_rows",
            "Rows in each table of the store, counted at every retention pass",
            self.store_rows.clone(),
        );
        self.add(
            "store_size_bytes",
            "The store's size on disk: the SQLite file's pages, or the PostgreSQL database",
            self.store_bytes.clone(),
        );
        self.add(
            "store_pruned_rows",
            "Rows deleted by retention, per table (audit entries included: never silently)",
            self.store_pruned.clone(),
        );
        self.add("gate_cache_trusted", "1 while gate checks are answered from memory; 0 on PostgreSQL while the gate-change listener is down and each check reads the store", self.gate_cache_trusted.clone());
        self.add("gate_cache_reloads", "Times every gate was read back into memory after the gate-change listener (re)connected (PostgreSQL)", self.gate_cache_reloads.clone());
    }

    /// Slack Socket Mode.
    fn register_socket(&mut self) {
        self.add(
            "slack_socket_connections",
            "Open Slack Socket Mode connections (0 without GATEBOT_SLACK_APP_TOKEN)",
            self.socket_connections.clone(),
        );
        self.add(
            "slack_socket_connects",
            "Attempts to open a Slack Socket Mode connection, by result (ok, failed)",
            self.socket_connects.clone(),
        );
        self.add("slack_socket_disconnects", "Slack Socket Mode connections ended, by reason (Slack's refresh_requested, warning, link_disabled or other; closed, error, silent, shutdown)", self.socket_disconnects.clone());
        self.add("slack_socket_envelopes", "Slack Socket Mode envelopes by kind and result (acked, refused, unacked: Slack delivers it again)", self.socket_envelopes.clone());
        self.add(
            "slack_socket_ack_duration_seconds",
            "Time from reading a Socket Mode envelope to acknowledging it (Slack waits 3 s)",
            self.socket_ack_duration.clone(),
        );
    }

    /// The recorder for calls to `service` (`github`, `slack`).
    pub fn outbound(&self, service: &'static str) -> OutboundCalls {
        OutboundCalls {
            service,
            counts: self.outbound_calls.clone(),
            duration: self.outbound_duration.clone(),
        }
    }

    /// Registers the store's histogram of how long waits lasted (the store
    /// observes it when a transaction that ended waits commits).
    pub fn time_decisions(&mut self, decisions: Family<DecisionLabels, Histogram>) {
        self.add(
            "wait_duration_seconds",
            "How long waits lasted, from the first check to their end, by gate kind and outcome (opened: the time to a decision)",
            decisions,
        );
    }

    /// Sets the age of `queue`'s oldest pending item.
    pub fn queue_age(&self, queue: &'static str, age: Duration) {
        self.queue_oldest
            .get_or_create(&QueueLabels { queue })
            .set(age.as_secs_f64());
    }

    /// Registers the store's count of committed write transactions (kept by
    /// the store, which commits them).
    pub fn count_store_writes(&mut self, committed: Family<WriteLabels, Counter>) {
        self.add(
            "store_write_transactions",
            "Write transactions committed, by the queue they worked (inbox, outbox, none); idle claims, heartbeats and probes are not counted",
            committed,
        );
    }

    /// Registers the count of lookups of the PR that brought a canary's
    /// revision (kept by the lookup worker, `core::origin`).
    pub fn count_canary_lookups(&mut self, lookups: Family<ResultLabels, Counter>) {
        self.add(
            "canary_lookups",
            "Lookups of the pull request that brought a canary's revision ([kubernetes] lookup), by result: found, no_pr (no PR brought the commit), failed (retried with backoff; the gate stays closed)",
            lookups,
        );
    }

    /// Registers the count of canaries' numbers Prometheus could not give
    /// (kept by `evidence`).
    pub fn count_evidence_unavailable(&mut self, unavailable: Family<ReasonLabels, Counter>) {
        self.add(
            "evidence_unavailable",
            "Canary numbers (GATEBOT_PROMETHEUS_URL) that could not be read, by reason: timeout, unreachable, error (Prometheus refused), no_data, bad_answer, bad_query; the message says \"metrics unavailable\"",
            unavailable,
        );
    }

    /// Counts a notification that was not sent on its own.
    pub fn dropped(&self, sink: &str, reason: &'static str) {
        self.notifications_dropped
            .get_or_create(&DropLabels {
                sink: sink.to_string(),
                reason,
            })
            .inc();
    }

    pub fn reject(&self, route: &str, reason: &str) {
        self.rejected
            .get_or_create(&RejectLabels {
                route: route.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The OpenMetrics text. A family without series is not encoded by
    /// prometheus-client; its HELP and TYPE are added before `# EOF` (a family
    /// with no samples is valid OpenMetrics), so every metric gatebot has is
    /// listed from the start, for people and for the chart's checks.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        let mut missing = String::new();
        for (name, kind, help) in &self.described {
            if !out.contains(&format!("# TYPE gatebot_{name} {kind}\n")) {
                missing.push_str(&format!(
                    "# HELP gatebot_{name} {help}.\n# TYPE gatebot_{name} {kind}\n"
                ));
            }
        }
        match out.strip_suffix("# EOF\n") {
            Some(head) if !missing.is_empty() => format!("{head}{missing}# EOF\n"),
            _ => out,
        }
    }
}
