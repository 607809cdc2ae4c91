//! Liveness, readiness and metrics.

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;

use crate::core::AppState;

pub async fn healthz() -> &'static str {
    "ok\n"
}

/// How long after a failed real write (with no success since) the replica
/// stays unready even when its own test write passes: a tiny write can fit
/// where a real one does not, e.g. on a disk with a few pages left.
const FAILED_WRITE_COUNTS_FOR: Duration = Duration::from_secs(5);

/// How long the test write may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Ready when writes work: a test write succeeds within 2 s and no real write
/// has failed in the last few seconds; and on PostgreSQL, when this replica's
/// clock is within `clock::OFFSET_LIMIT` of the database's. Liveness (`/healthz`) stays separate: a
/// full disk is a reason to take traffic away, not to restart the process.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let now = state.clock.now_ms();
    let problem =
        match tokio::time::timeout(PROBE_TIMEOUT, state.store.replicas().probe_write(now)).await {
            Err(_) => Some(format!("a test write did not finish in {PROBE_TIMEOUT:?}")),
            Ok(Err(e)) => Some(format!("writes fail: {e}")),
            Ok(Ok(())) => state
                .store
                .write_health()
                .recent_failure(FAILED_WRITE_COUNTS_FOR)
                .map(|e| format!("a write failed just now: {e}")),
        };
    // For the store-not-ready alert: the probe's answer, as a gauge.
    state.metrics.store_ready.set(i64::from(problem.is_none()));
    // Answers are right (times are corrected), but a clock this wrong is a
    // fault to fix before it is trusted with traffic.
    let problem = problem.or_else(|| state.clock_sync.skew_problem());
    match problem {
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
        None => (StatusCode::OK, "ready\n".to_string()),
    }
}

/// How long counting the queues may hold up a scrape.
const QUEUE_COUNT_TIMEOUT: Duration = Duration::from_secs(1);

/// The queue gauges are read fresh for each scrape (two indexed counts), so
/// an alert on the oldest pending notification sees its age now.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let report = state
        .store
        .queues()
        .report_queues(&state.metrics, state.clock.now_ms());
    // A slow store leaves the last values (housekeeping refreshes them too).
    let _ = tokio::time::timeout(QUEUE_COUNT_TIMEOUT, report).await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
