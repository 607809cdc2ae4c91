//! The operator API's bearer token.

use axum::http::{header, HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::Reject;
use crate::gate::{Actor, Source};

/// The server's answer when it has no token: the fix is on the server, not the caller.
pub const API_DISABLED: &str = "the operator API is read-only: this server has no GATEBOT_ADMIN_TOKEN; set it where `gatebot serve` runs and restart it";

/// The server's answer to a token that is not its own.
pub const WRONG_TOKEN: &str =
    "wrong bearer token: the token sent does not match this server's GATEBOT_ADMIN_TOKEN";

/// Checks `Authorization: Bearer <GATEBOT_ADMIN_TOKEN>`. The actor is named by an
/// optional `X-Gatebot-Actor` header (the CLI sends the local user) and is
/// otherwise "admin".
/// `expected` is the server's token (`Config::admin_token`).
pub fn admin(expected: Option<&str>, headers: &HeaderMap) -> Result<Actor, Reject> {
    let Some(expected) = expected else {
        return Err(Reject::new(
            StatusCode::FORBIDDEN,
            "api_disabled",
            API_DISABLED,
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            Reject::unauthorized(
                "missing bearer token: send Authorization: Bearer <this server's GATEBOT_ADMIN_TOKEN>",
            )
        })?;
    if !same(given, expected) {
        return Err(Reject::unauthorized(WRONG_TOKEN));
    }
    Ok(actor(headers))
}

/// Hashing first makes the comparison constant-time in the length too.
fn same(given: &str, expected: &str) -> bool {
    Sha256::digest(given.trim().as_bytes())
        .ct_eq(&Sha256::digest(expected.as_bytes()))
        .into()
}

/// The routes a pipeline uses (named gates) take the admin token or the
/// narrower `GATEBOT_PIPELINE_TOKEN`.
pub fn pipeline(
    admin_token: Option<&str>,
    pipeline_token: Option<&str>,
    headers: &HeaderMap,
) -> Result<Actor, Reject> {
    let Some(pipeline_token) = pipeline_token else {
        return admin(admin_token, headers);
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given, pipeline_token) => {
            let mut actor = actor(headers);
            if actor.name == "admin" {
                actor.name = "pipeline".into();
            }
            Ok(actor)
        }
        _ => admin(admin_token, headers).map_err(|r| {
            Reject::new(
                r.status,
                r.reason,
                format!("{} (or GATEBOT_PIPELINE_TOKEN)", r.message),
            )
        }),
    }
}

/// Who the caller says acts (`X-Gatebot-Actor`), and through what.
fn actor(headers: &HeaderMap) -> Actor {
    let source = match headers
        .get("x-gatebot-source")
        .and_then(|v| v.to_str().ok())
    {
        Some("cli") => Source::Cli,
        _ => Source::Api,
    };
    let name = headers
        .get("x-gatebot-actor")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or("admin");
    Actor::new(name, source)
}

/// Reads need the token when one is set, and are open when none is.
pub fn reader(expected: Option<&str>, headers: &HeaderMap) -> Result<(), Reject> {
    match expected {
        None => Ok(()),
        Some(_) => admin(expected, headers).map(|_| ()),
    }
}
