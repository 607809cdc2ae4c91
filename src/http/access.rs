//! The access log. Every request runs in a `request` span (method, path,
//! request id), so whatever it logs can be told apart. Routes that machines
//! poll (Flagger's checks, probes, the scrape) log their access line at debug:
//! the same line every few seconds per canary says nothing. A check that
//! changed something (a wait, a pin, a new revision, a flipped answer) logs
//! its access line at info, once, naming the change.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tower_http::request_id::RequestId;
use tracing::Instrument;

/// Put on a gate check's response when the check was written down: what changed.
#[derive(Debug, Clone, Copy)]
pub struct Changed(pub &'static str);

/// Routes polled by machines, whose steady state is not worth a line at info.
pub fn polled(path: &str) -> bool {
    path.starts_with("/gates/")
        || matches!(
            path,
            "/gate/check" | "/rollback/check" | "/healthz" | "/readyz" | "/metrics"
        )
}

pub async fn log(req: Request, next: Next) -> Response {
    let id = req
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or("-");
    let span = tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id);
    let polled = polled(req.uri().path());
    let started = Instant::now();
    let response = next.run(req).instrument(span.clone()).await;
    let latency = format_args!("{} ms", started.elapsed().as_millis());
    let status = response.status().as_u16();
    let _in = span.enter();
    match response.extensions().get::<Changed>() {
        Some(Changed(change)) => {
            tracing::info!(%latency, status, change, "finished processing request: {change}")
        }
        None if response.status().is_server_error() => {
            tracing::error!(%latency, status, "response failed")
        }
        None if polled => tracing::debug!(%latency, status, "finished processing request"),
        None => tracing::info!(%latency, status, "finished processing request"),
    }
    response
}
