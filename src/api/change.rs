//! `POST /webhooks/change`: the change system says a change moved (a
//! ServiceNow business rule's REST message, a Jira automation's web request).
//! It is believed for nothing: it only wakes the pass that reads gatebot's
//! changes again. Authenticated by a shared secret, as a bearer token or a
//! basic auth password, compared in constant time; the body is never read.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::core::AppState;
use crate::http::auth::authorization;

const ROUTE: &str = "/webhooks/change";

pub async fn changed(State(state): State<AppState>, headers: HeaderMap) -> StatusCode {
    let Some(secret) = state
        .config
        .change
        .webhook_secret
        .as_ref()
        .filter(|s| !s.expose_secret().is_empty())
    else {
        state.metrics.reject(ROUTE, "not_configured");
        return StatusCode::NOT_FOUND;
    };
    let known = Sha256::digest(secret.expose_secret().as_bytes());
    let given = presented(&headers).map(|g| Sha256::digest(g.as_bytes()));
    // Digests of equal length: the comparison says nothing of the secret's length.
    if !given.is_some_and(|g| bool::from(g.ct_eq(&known))) {
        state.metrics.reject(ROUTE, "bad_secret");
        return StatusCode::UNAUTHORIZED;
    }
    state.engine.change_wake().notify_one();
    StatusCode::ACCEPTED
}

/// The secret as sent: `Bearer <secret>`, or basic auth's password.
fn presented(headers: &HeaderMap) -> Option<String> {
    if let Some(token) = authorization(headers, "Bearer") {
        return Some(token.to_string());
    }
    let encoded = authorization(headers, "Basic")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':')
        .map(|(_, password)| password.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn the_secret_comes_as_a_bearer_token_or_a_basic_password() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            presented(&h)
        };
        assert_eq!(with("Bearer s3cret").as_deref(), Some("s3cret"));
        // A scheme's name is case-insensitive.
        assert_eq!(with("bearer s3cret").as_deref(), Some("s3cret"));
        assert_eq!(
            with("BASIC c2VydmljZW5vdzpzM2NyZXQ=").as_deref(),
            Some("s3cret")
        );
        // servicenow:s3cret
        assert_eq!(
            with("Basic c2VydmljZW5vdzpzM2NyZXQ=").as_deref(),
            Some("s3cret")
        );
        assert_eq!(with("Basic !!!"), None);
        assert_eq!(with("Token s3cret"), None);
        assert_eq!(presented(&HeaderMap::new()), None);
    }
}
