//! How requests are refused: a status, a short message that says what to do,
//! and a reason label for the `gatebot_rejected_requests` counter.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// Marks a response as a refusal, for the metrics middleware.
#[derive(Debug, Clone, Copy)]
pub struct Rejected(pub &'static str);

#[derive(Debug)]
pub struct Reject {
    pub status: StatusCode,
    pub reason: &'static str,
    pub message: String,
}

impl Reject {
    pub fn new(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            message: message.into(),
        }
    }

    pub fn bad_request(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn not_configured(what: &str, settings: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_configured",
            format!("{what} is not configured here: set {settings}"),
        )
    }

    /// The store is down: not the caller's fault, so not counted as a refusal.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", self.message),
        )
            .into_response();
        if self.status.is_client_error() {
            response.extensions_mut().insert(Rejected(self.reason));
        } else {
            tracing::warn!(status = %self.status, error = %self.message, "request failed");
        }
        response
    }
}

impl From<crate::store::StoreError> for Reject {
    fn from(e: crate::store::StoreError) -> Self {
        Self::unavailable(e.to_string())
    }
}
