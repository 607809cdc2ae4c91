//! The operator API's bearer tokens. A token is one identity: the admin token
//! is "admin", a named token (`GATEBOT_API_TOKENS`) is its name, the pipeline
//! token is "pipeline", and the source is always `api`. What a caller says
//! about itself (`X-Gatebot-Actor`, `X-Gatebot-Source`; the CLI sends its
//! local user) cannot be checked, so it is kept beside the identity as a claim
//! in the reason, and never names who acted or through what.

use axum::http::{header, HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::Reject;
use crate::config::Config;
use crate::gate::{Actor, Source};

/// The server's answer when it has no token: the fix is on the server, not the caller.
pub const API_DISABLED: &str = "the operator API is read-only: this server has no GATEBOT_ADMIN_TOKEN (nor GATEBOT_API_TOKENS); set one where `gatebot serve` runs and restart it";

/// The server's answer to a token that is not its own.
pub const WRONG_TOKEN: &str =
    "wrong bearer token: the token sent is neither this server's GATEBOT_ADMIN_TOKEN nor one of its GATEBOT_API_TOKENS";

/// The identity of the admin token.
pub const ADMIN: &str = "admin";
/// The identity of the pipeline token.
pub const PIPELINE: &str = "pipeline";

/// A request's identity, from its token, and what it claims beside it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub actor: Actor,
    /// "claims alice via cli": what the headers say, never counted as a
    /// person or a source.
    pub claim: Option<String>,
}

impl Caller {
    /// The reason to record: the claim, then the caller's own reason.
    pub fn reason(&self, reason: Option<String>) -> Option<String> {
        let reason = reason
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty());
        crate::gate::reason::with_claim(self.claim.as_deref(), reason)
    }
}

/// Who holds a token.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// The admin token or a named one: an operator called by this name.
    Operator(String),
    Pipeline,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Every operator token configured now: its identity and its SHA-256.
pub fn operator_hashes(config: &Config) -> Vec<(String, [u8; 32])> {
    config
        .admin_token()
        .map(|t| (ADMIN.to_string(), digest(t)))
        .into_iter()
        .chain(
            config
                .api_tokens()
                .map(|(name, hash)| (name.to_string(), *hash)),
        )
        .collect()
}

/// Whose token `given` is. Compared with every configured token in constant
/// time, so the answer's timing says nothing about which one matched.
fn holder(config: &Config, given: &str) -> Option<Holder> {
    let given = digest(given.trim());
    let mut found = None;
    for (name, hash) in operator_hashes(config) {
        if bool::from(given.ct_eq(&hash)) && found.is_none() {
            found = Some(Holder::Operator(name));
        }
    }
    if let Some(pipeline) = config.pipeline_token() {
        if bool::from(given.ct_eq(&digest(pipeline))) && found.is_none() {
            found = Some(Holder::Pipeline);
        }
    }
    found
}

/// The operator identity of a token typed into the sign-in page, if it is one.
pub fn operator_of(config: &Config, token: &str) -> Option<String> {
    match holder(config, token)? {
        Holder::Operator(name) => Some(name),
        Holder::Pipeline => None,
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    authorization(headers, "Bearer")
}

/// The credentials the `Authorization` header carries under `scheme`, whose
/// name is case-insensitive (RFC 9110, 11.1): `bearer x` is `Bearer x`.
pub fn authorization<'h>(headers: &'h HeaderMap, scheme: &str) -> Option<&'h str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (name, credentials) = value.split_once(' ')?;
    name.eq_ignore_ascii_case(scheme)
        .then(|| credentials.trim())
}

/// An operator's token (the admin token or a named one).
pub fn operator(config: &Config, headers: &HeaderMap) -> Result<Caller, Reject> {
    if !config.has_operators() {
        return Err(Reject::new(
            StatusCode::FORBIDDEN,
            "api_disabled",
            API_DISABLED,
        ));
    }
    let given = bearer(headers).ok_or_else(|| {
        Reject::unauthorized(
            "missing bearer token: send Authorization: Bearer <this server's GATEBOT_ADMIN_TOKEN, or your own token from its GATEBOT_API_TOKENS>",
        )
    })?;
    match holder(config, given) {
        Some(Holder::Operator(name)) => Ok(caller(name, headers)),
        _ => Err(Reject::unauthorized(WRONG_TOKEN)),
    }
}

/// [`operator`], for callers that record no reason (the loadtester's routes).
pub fn admin(config: &Config, headers: &HeaderMap) -> Result<Actor, Reject> {
    operator(config, headers).map(|c| c.actor)
}

/// The routes a pipeline uses (named gates) take an operator's token or the
/// narrower `GATEBOT_PIPELINE_TOKEN`.
pub fn pipeline(config: &Config, headers: &HeaderMap) -> Result<Caller, Reject> {
    if is_pipeline(config, headers) {
        return Ok(caller(PIPELINE.to_string(), headers));
    }
    operator(config, headers).map_err(|r| {
        let message = match config.pipeline_token() {
            Some(_) => format!("{} (or GATEBOT_PIPELINE_TOKEN)", r.message),
            None => r.message,
        };
        Reject::new(r.status, r.reason, message)
    })
}

/// Whether the request carries the pipeline token.
pub fn is_pipeline(config: &Config, headers: &HeaderMap) -> bool {
    config.pipeline_token().is_some()
        && bearer(headers).and_then(|given| holder(config, given)) == Some(Holder::Pipeline)
}

/// `name` via the API, with what the headers claim beside it.
fn caller(name: String, headers: &HeaderMap) -> Caller {
    let claim = claim(&name, headers);
    Caller {
        actor: Actor::new(name, Source::Api),
        claim,
    }
}

/// "claims alice via cli", "claims alice", "claims via cli", or nothing
/// when the headers say no more than the token does.
fn claim(name: &str, headers: &HeaderMap) -> Option<String> {
    let said = |h: &str| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|n| !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_graphic()))
    };
    let user = said("x-gatebot-actor").filter(|u| !u.eq_ignore_ascii_case(name));
    let cli = said("x-gatebot-source").is_some_and(|s| s.eq_ignore_ascii_case("cli"));
    match (user, cli) {
        (Some(user), true) => Some(format!("claims {user} via cli")),
        (Some(user), false) => Some(format!("claims {user}")),
        (None, true) => Some("claims via cli".to_string()),
        (None, false) => None,
    }
}

/// Before a body is read: when the server has any API token, the request
/// must carry one of them (which one the route needs is checked after). A
/// request with none, or a wrong one, holds no body reader. With no token
/// configured, the routes answer for themselves (reads are open).
pub fn any_token(config: &Config, headers: &HeaderMap) -> Result<(), Reject> {
    if !config.has_operators() && config.pipeline_token().is_none() {
        return Ok(());
    }
    let pipeline = if config.pipeline_token().is_some() {
        " (or GATEBOT_PIPELINE_TOKEN)"
    } else {
        ""
    };
    let Some(given) = bearer(headers) else {
        return Err(Reject::unauthorized(format!(
            "missing bearer token: send Authorization: Bearer <this server's GATEBOT_ADMIN_TOKEN, or your own token from its GATEBOT_API_TOKENS>{pipeline}"
        )));
    };
    match holder(config, given) {
        Some(_) => Ok(()),
        None => Err(Reject::unauthorized(format!("{WRONG_TOKEN}{pipeline}"))),
    }
}

/// Reads need an operator's token when one is set, and are open when none is.
pub fn reader(config: &Config, headers: &HeaderMap) -> Result<(), Reject> {
    if !config.has_operators() {
        return Ok(());
    }
    operator(config, headers).map(|_| ())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_claim_is_said_beside_the_identity_and_only_when_it_adds_something() {
        let cli = [("x-gatebot-actor", "alice"), ("x-gatebot-source", "cli")];
        assert_eq!(
            claim("admin", &headers(&cli)).as_deref(),
            Some("claims alice via cli")
        );
        assert_eq!(
            claim("admin", &headers(&[("x-gatebot-actor", "bob")])).as_deref(),
            Some("claims bob")
        );
        let same = [("x-gatebot-actor", "Alice"), ("x-gatebot-source", "cli")];
        assert_eq!(
            claim("alice", &headers(&same)).as_deref(),
            Some("claims via cli")
        );
        let junk = [("x-gatebot-actor", "a b"), ("x-gatebot-source", "web")];
        assert_eq!(claim("admin", &headers(&junk)), None);
        let c = Caller {
            actor: Actor::new("admin", Source::Api),
            claim: Some("claims alice via cli".into()),
        };
        assert_eq!(
            c.reason(Some(" green ".into())).as_deref(),
            Some("claims alice via cli; green")
        );
        assert_eq!(c.reason(None).as_deref(), Some("claims alice via cli"));
    }
}
