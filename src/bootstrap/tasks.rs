//! The background tasks every replica runs beside the workers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::clock::{CorrectedClock, SharedClock};
use crate::core::AppState;
use crate::gate;
use crate::metrics::{Metrics, TableLabels};
use crate::store::{self, Store};

/// Before the workers start: on SQLite (one process) every lease is a dead
/// process's, so take them back; on both stores, say this replica is alive
/// before it claims anything.
pub(super) async fn take_over_leases(store: &Store, now: gate::Millis) {
    if store.backend() == store::Backend::Sqlite {
        match store.replicas().release_leases().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(items = n, "took back leases of a previous process"),
            Err(e) => tracing::warn!(error = %e, "could not take back old leases"),
        }
    }
    if let Err(e) = store.replicas().heartbeat(now).await {
        tracing::warn!(error = %e, "could not register this replica");
    }
}

/// What the heartbeat measures the clock with: the clock it corrects, the
/// metrics it reports to, and what it said last.
pub(super) type ClockSync = (Arc<CorrectedClock>, Arc<Metrics>, SkewLog);

/// PostgreSQL: says every second that this replica is alive, so that others
/// take its leases within seconds of its death (see `store::DEAD_AFTER`);
/// first, with `sync`, measures the clock's offset to the database's, so the
/// heartbeat and everything after it are stamped in the database's time.
pub(super) async fn heartbeat(
    store: Store,
    clock: SharedClock,
    mut sync: Option<ClockSync>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(store::HEARTBEAT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let beat = async {
            if let Some((corrected, metrics, log)) = sync.as_mut() {
                sync_clock(&store, corrected, metrics, log).await;
            }
            store.replicas().heartbeat(clock.now_ms()).await
        };
        match tokio::time::timeout(store::HEARTBEAT_EVERY * 2, beat).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(_) => tracing::warn!("heartbeat timed out"),
        }
    }
}

/// A reading whose round trip took longer than this is not used: the offset
/// is only known to within half the round trip.
const READING_TRUSTED_WITHIN: gate::Millis = 1000;

/// A change of the offset between two readings beyond this is a step of the
/// wall clock, logged.
const STEP_NOTICED: gate::Millis = 1000;

/// How often a clock that stays beyond the limit is logged again.
const SKEW_LOG_EVERY: Duration = Duration::from_secs(60);

/// When the clock's offset was last logged, so a lasting skew is said once a
/// minute rather than every second.
#[derive(Default)]
pub(super) struct SkewLog {
    warned: Option<Instant>,
}

/// Measures the offset to the database's clock and corrects by it; reports
/// it as a gauge, and in the log when it is beyond `clock::OFFSET_LIMIT`.
pub(super) async fn sync_clock(
    store: &Store,
    clock: &CorrectedClock,
    metrics: &Metrics,
    log: &mut SkewLog,
) {
    let reading = match store.replicas().clock_reading(clock.local()).await {
        Ok(Some(r)) if r.round_trip_ms <= READING_TRUSTED_WITHIN => r,
        Ok(Some(r)) => {
            tracing::debug!(
                round_trip_ms = r.round_trip_ms,
                "clock reading too slow to use"
            );
            return;
        }
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the database's clock");
            return;
        }
    };
    let stepped = reading.offset_ms - clock.offset_ms();
    if clock.measured() && stepped.abs() > STEP_NOTICED {
        // The stamps were right all along (see `CorrectedClock`): this says why
        // the offset moved.
        tracing::warn!(
            step_ms = stepped,
            "this replica's wall clock stepped; times stay the database's"
        );
    }
    clock.set_reading(reading.offset_ms, reading.db_ms, reading.at);
    metrics.clock_offset.set(reading.offset_ms as f64 / 1000.0);
    match clock.skew_problem() {
        Some(why) if log.warned.is_none_or(|at| at.elapsed() >= SKEW_LOG_EVERY) => {
            tracing::warn!(offset_ms = reading.offset_ms, "{why}");
            log.warned = Some(Instant::now());
        }
        Some(_) => {}
        None if log.warned.take().is_some() => tracing::info!(
            offset_ms = reading.offset_ms,
            "this replica's clock is within the limit of the database's again"
        ),
        None => {}
    }
}

/// PostgreSQL: keeps this replica's gates in memory current with every
/// replica's changes (see `core::gate_cache`), until shutdown.
pub(super) async fn follow_gates(state: AppState, shutdown: CancellationToken) {
    let url = state.config.database_url.clone();
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = state.engine.gate_cache().follow_gates(&url) => {}
    }
}

/// Every few seconds: write last-seen times, expire approvals, act on
/// deadlines and reminders, prune retired named gates, refresh gauges.
pub(super) async fn housekeeping(state: AppState, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = state.engine.events().flush_seen().await {
            tracing::warn!(error = %e, "could not write last-seen times");
        }
        if let Err(e) = state.engine.bounds().end_silent_waits().await {
            tracing::warn!(error = %e, "could not end the waits of canaries that stopped asking");
        }
        if let Err(e) = state.engine.commands().expire_due().await {
            tracing::warn!(error = %e, "could not expire approvals");
        }
        match state.engine.deadlines().enforce_deadlines().await {
            Ok(acted) => {
                state.metrics.deadlines_passed.inc_by(acted as u64);
            }
            Err(e) => tracing::warn!(error = %e, "could not apply wait deadlines"),
        }
        if let Err(e) = state.engine.reminders().send_reminders(&state.policy).await {
            tracing::warn!(error = %e, "could not send reminders");
        }
        let retention = state.config.limits.named_gate_retention;
        if let Err(e) = state.engine.named().prune_retired(retention).await {
            tracing::warn!(error = %e, "could not prune retired named gates");
        }
        // Another replica may have frozen or lifted; SQLite has one writer.
        if state.store.backend() == crate::store::Backend::Postgres {
            if let Err(e) = state.engine.freezes().reload_freezes().await {
                tracing::warn!(error = %e, "could not re-read freezes");
            }
        }
        state
            .store
            .queues()
            .report_queues(&state.metrics, state.clock.now_ms())
            .await;
    }
}

/// The waiting canaries' numbers: every [limits] evidence_refresh while
/// Prometheus is set; a pass that takes longer delays the next.
pub(super) async fn evidence(state: AppState, shutdown: CancellationToken) {
    if !state.evidence.is_on() {
        return;
    }
    let mut tick = tokio::time::interval(state.config.limits.evidence_refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refreshed = crate::core::evidence::Refreshed::default();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pass = state
            .engine
            .evidence()
            .refresh_evidence(&state.evidence, &mut refreshed);
        tokio::select! {
            () = shutdown.cancelled() => return,
            done = pass => if let Err(e) = done {
                tracing::warn!(error = %e, "could not refresh the canaries' numbers");
            },
        }
    }
}

/// The changes gatebot opens (`[change] mode = "create"`): a pass every
/// `poll`, and at once when the change system's webhook says something
/// changed; a pass that takes longer delays the next.
pub(super) async fn changes(state: AppState, shutdown: CancellationToken) {
    let Some(site) = state.policy.change() else {
        return;
    };
    if site.rule.mode != gate::ticket::Mode::Create {
        return;
    }
    let mut tick = tokio::time::interval(site.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wake = state.engine.change_wake();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            () = wake.notified() => {}
        }
        let about = crate::core::created::About {
            evidence: &state.evidence,
            public_url: state.config.public_url.as_deref(),
        };
        let pass = crate::core::created::tend(&state.engine, &about);
        tokio::select! {
            () = shutdown.cancelled() => return,
            done = pass => if let Err(e) = done {
                tracing::warn!(error = %e, "could not tend the change requests");
            },
        }
    }
}

/// Retention: every `[limits] retention_interval` (and once at start), prunes
/// what has outlived its setting, then reports the store's rows and size
/// when the pass pruned something or a minute has passed: counting every
/// table's rows costs a scan, which a short interval on a large store would
/// otherwise repeat for ever.
pub(super) async fn retention(state: AppState, shutdown: CancellationToken) {
    const SIZE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
    let rules = store::Retention::from(&state.config.limits);
    let mut tick = tokio::time::interval(state.config.limits.retention_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sized: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pruned = prune_once(&state, &rules).await;
        if pruned || sized.is_none_or(|at| at.elapsed() >= SIZE_EVERY) {
            report_store_size(&state).await;
            sized = Some(tokio::time::Instant::now());
        }
    }
}

/// One pass; whether it pruned anything.
async fn prune_once(state: &AppState, rules: &store::Retention) -> bool {
    let pruned = match state
        .store
        .retention()
        .prune(rules, state.clock.now_ms())
        .await
    {
        Ok(pruned) => pruned,
        Err(e) => {
            tracing::warn!(error = %e, "retention pass failed; it is tried again at the next");
            return false;
        }
    };
    let any = !pruned.is_empty();
    for p in pruned {
        let labels = TableLabels { table: p.table };
        state
            .metrics
            .store_pruned
            .get_or_create(&labels)
            .inc_by(p.deleted);
        if p.table == "audit" {
            // The audit log is what people read afterwards: never pruned silently.
            tracing::info!(
                deleted = p.deleted,
                kept_for = %humantime::format_duration(state.config.limits.retention_audit),
                "pruned audit entries older than [limits] retention_audit"
            );
        } else {
            tracing::debug!(
                table = p.table,
                deleted = p.deleted,
                payloads_cleared = p.cleared,
                "pruned"
            );
        }
    }
    any
}

async fn report_store_size(state: &AppState) {
    match state.store.retention().row_counts().await {
        Ok(counts) => {
            for (table, n) in counts {
                state
                    .metrics
                    .store_rows
                    .get_or_create(&TableLabels { table })
                    .set(n);
            }
        }
        Err(e) => tracing::debug!(error = %e, "cannot count the store's rows"),
    }
    match state.store.retention().size_bytes().await {
        Ok(bytes) => {
            state.metrics.store_bytes.set(bytes);
        }
        Err(e) => tracing::debug!(error = %e, "cannot measure the store's size"),
    }
}
