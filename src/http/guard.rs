//! What a request gets when gatebot fails to answer it: a handler panicked, or
//! no answer came within the request timeout. Flagger's gate checks get 403 with
//! a one-line reason (closed is the safe answer: no promotion, no rollback, and
//! Flagger asks again); every other route gets 500 (panic) or 503 (timeout).
//! Never a dropped connection. The response carries [`Failed`] for the metrics.

use std::any::Any;
use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use tower_http::catch_panic::ResponseForPanic;

/// Marks a response as gatebot's own failure (`panic` or `timeout`).
#[derive(Debug, Clone, Copy)]
pub struct Failed(pub &'static str);

/// How one group of routes answers when it fails.
#[derive(Debug, Clone, Copy)]
pub struct OnFailure {
    /// Flagger's gate checks: answer closed (403), never 5xx.
    pub gate_check: bool,
    pub timeout: Duration,
}

impl OnFailure {
    fn answer(&self, cause: &'static str, what: &str) -> Response {
        let (status, text) = if self.gate_check {
            (
                StatusCode::FORBIDDEN,
                format!("gatebot failed to answer: {what}; answering closed"),
            )
        } else if cause == "timeout" {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("gatebot failed to answer: {what}"),
            )
        } else {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("gatebot failed to answer: {what}"),
            )
        };
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{text}\n"),
        )
            .into_response();
        response.extensions_mut().insert(Failed(cause));
        response
    }
}

impl ResponseForPanic for OnFailure {
    type ResponseBody = Body;

    fn response_for_panic(&mut self, panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
        let message = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        tracing::error!(panic = message, "a request handler panicked");
        // The panic's text stays in the log: callers need not see internals.
        self.answer("panic", "internal error (details in gatebot's log)")
    }
}

/// Middleware: answers for the handler when it takes longer than the timeout.
pub async fn deadline(State(on): State<OnFailure>, req: Request, next: Next) -> Response {
    on.within(next.run(req)).await
}

impl OnFailure {
    /// `answer`, or this group's failure answer when it takes longer than the
    /// timeout.
    pub async fn within(&self, answer: impl Future<Output = Response>) -> Response {
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(response) => response,
            Err(_) => {
                let limit = humantime::format_duration(self.timeout);
                tracing::warn!(%limit, "a request was not answered in time");
                self.answer("timeout", &format!("no answer within {limit}"))
            }
        }
    }

    /// `answer`, or this group's failure answer when it panics (what
    /// `CatchPanicLayer` does with this `OnFailure`, for a future outside axum).
    pub async fn unless_panics(mut self, answer: impl Future<Output = Response>) -> Response {
        match std::panic::AssertUnwindSafe(answer).catch_unwind().await {
            Ok(response) => response,
            Err(panic) => self.response_for_panic(panic),
        }
    }
}
