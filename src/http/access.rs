//! The access log. Every request runs in a `request` span (method, path,
//! request id), so whatever it logs can be told apart. Routes that machines
//! poll (Flagger's checks, probes, the scrape) log their access line at debug:
//! the same line every few seconds per canary says nothing. A check that
//! changed something (a wait, a pin, a new revision, a flipped answer) logs
//! its access line at info, once, naming the change.

use std::future::Future;
use std::time::Instant;

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use tower_http::request_id::RequestId;
use tracing::{Instrument, Span};

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
    // Cheap copies (shared bytes), kept for a line logged after the handler ran.
    let method = req.method().clone();
    let uri = req.uri().clone();
    let id = req
        .extensions()
        .get::<RequestId>()
        .map(|id| id.header_value().clone());
    let id = id.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("-");
    logged(&method, uri.path(), id, next.run(req)).await
}

/// Runs `answer` in the request's span and logs its access line.
pub async fn logged(
    method: &Method,
    path: &str,
    id: &str,
    answer: impl Future<Output = Response>,
) -> Response {
    let polled = polled(path);
    let inner = span(!polled, method, path, id);
    let started = Instant::now();
    let response = answer.instrument(inner.clone()).await;
    let latency = format_args!("{} ms", started.elapsed().as_millis());
    let status = response.status().as_u16();
    let changed = response.extensions().get::<Changed>().map(|c| c.0);
    let failed = response.status().is_server_error();
    if polled && changed.is_none() && !failed {
        let _in = inner.enter();
        tracing::debug!(%latency, status, "finished processing request");
        return response;
    }
    // A polled route's line at info gets the info span its steady state goes without.
    let outer = if polled {
        span(true, method, path, id)
    } else {
        inner
    };
    let _in = outer.enter();
    match changed {
        Some(change) => {
            tracing::info!(%latency, status, change, "finished processing request: {change}")
        }
        None if failed => tracing::error!(%latency, status, "response failed"),
        None => tracing::info!(%latency, status, "finished processing request"),
    }
    response
}

/// The `request` span, at info or (for a polled route) at debug: a span at
/// info costs every request its formatted fields even when nothing is logged.
fn span(info: bool, method: &Method, path: &str, id: &str) -> Span {
    let path = Redacted(path);
    if info {
        tracing::info_span!("request", %method, path = %path, request_id = %id)
    } else {
        tracing::debug_span!("request", %method, path = %path, request_id = %id)
    }
}

/// A path as logged: the Flagger token of `/gates/t/<token>/…` is a secret.
/// (Query strings, where `?token=` goes, are never logged.)
pub struct Redacted<'a>(pub &'a str);

impl std::fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.strip_prefix("/gates/t/") {
            Some(rest) => {
                let after = rest.find('/').map_or("", |i| &rest[i..]);
                write!(f, "/gates/t/***{after}")
            }
            None => f.write_str(self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Redacted;

    #[test]
    fn a_flagger_token_in_the_path_is_never_shown() {
        let table = [
            (
                "/gates/t/s3cret/promote/pr/42",
                "/gates/t/***/promote/pr/42",
            ),
            ("/gates/t/s3cret", "/gates/t/***"),
            ("/gates/promote/pr/42", "/gates/promote/pr/42"),
            ("/healthz", "/healthz"),
        ];
        for (path, shown) in table {
            assert_eq!(Redacted(path).to_string(), shown);
        }
    }
}
