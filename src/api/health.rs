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
/// has failed in the last few seconds. Liveness (`/healthz`) stays separate: a
/// full disk is a reason to take traffic away, not to restart the process.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let now = state.clock.now_ms();
    let unready = |why: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
    };
    match tokio::time::timeout(PROBE_TIMEOUT, state.store.probe_write(now)).await {
        Err(_) => unready(format!("a test write did not finish in {PROBE_TIMEOUT:?}")),
        Ok(Err(e)) => unready(format!("writes fail: {e}")),
        Ok(Ok(())) => match state
            .store
            .write_health()
            .recent_failure(FAILED_WRITE_COUNTS_FOR)
        {
            Some(e) => unready(format!("a write failed just now: {e}")),
            None => (StatusCode::OK, "ready\n".to_string()),
        },
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
