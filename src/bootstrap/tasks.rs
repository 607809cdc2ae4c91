//! The background tasks every replica runs beside the workers.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::core::AppState;
use crate::gate;
use crate::store::{self, Store};

/// Before the workers start: on SQLite (one process) every lease is a dead
/// process's, so take them back; on both stores, say this replica is alive
/// before it claims anything.
pub(super) async fn take_over_leases(store: &Store, now: gate::Millis) {
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
pub(super) async fn heartbeat(store: Store, clock: SharedClock, shutdown: CancellationToken) {
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

/// PostgreSQL: keeps this replica's gates in memory current with every
/// replica's changes (see `core::gate_cache`), until shutdown.
pub(super) async fn follow_gates(state: AppState, shutdown: CancellationToken) {
    let url = state.config.database_url.clone();
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = state.engine.follow_gates(&url) => {}
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
        if let Err(e) = state.engine.flush_seen().await {
            tracing::warn!(error = %e, "could not write last-seen times");
        }
        if let Err(e) = state.engine.expire_due().await {
            tracing::warn!(error = %e, "could not expire approvals");
        }
        match state.engine.enforce_deadlines().await {
            Ok(acted) => {
                state.metrics.deadlines_passed.inc_by(acted as u64);
            }
            Err(e) => tracing::warn!(error = %e, "could not apply wait deadlines"),
        }
        if let Err(e) = state.engine.send_reminders(&state.policy).await {
            tracing::warn!(error = %e, "could not send reminders");
        }
        let retention = state.config.named_gate_retention;
        if let Err(e) = state.engine.prune_retired_named(retention).await {
            tracing::warn!(error = %e, "could not prune retired named gates");
        }
        // Another replica may have frozen or lifted; SQLite has one writer.
        if state.store.backend() == crate::store::Backend::Postgres {
            if let Err(e) = state.engine.reload_freezes().await {
                tracing::warn!(error = %e, "could not re-read freezes");
            }
        }
        state
            .store
            .report_queues(&state.metrics, state.clock.now_ms())
            .await;
    }
}
