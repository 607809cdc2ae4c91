//! The Bot Framework's token on every request to the bot, checked as its
//! authentication spec says (docs/teams.md, "What is refused"): RS256 only,
//! a key from the Bot Framework's key set, issuer `https://api.botframework.com`,
//! audience the bot's app id, `exp` and `nbf` with 5 minutes of skew, and the
//! `serviceurl` claim equal to the activity's `serviceUrl`. The activity's
//! `channelId` must be `msteams` and the key that signed the token endorsed
//! for it (the spec's endorsement check: a key the Bot Framework uses for
//! Web Chat or Direct Line does not make an activity a Teams one). On top of
//! the spec, the activity's tenant must be one gatebot serves.

use axum::http::StatusCode;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

use super::activity::Activity;
use super::keys::{KeyError, SigningKeys};

pub const ISSUER: &str = "https://api.botframework.com";
/// The only channel gatebot serves, as activities and endorsements name it.
pub const TEAMS_CHANNEL: &str = "msteams";
/// The clock skew the spec calls industry standard.
pub const SKEW_SECS: i64 = 5 * 60;

/// Why a request was refused; each is a reason label of
/// `gatebot_rejected_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoToken,
    Malformed,
    Algorithm,
    UnknownKey,
    Signature,
    Issuer,
    Audience,
    Expired,
    NotYetValid,
    ServiceUrl,
    Channel,
    Endorsement,
    Tenant,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Self::NoToken => "teams_no_token",
            Self::Malformed => "teams_malformed_token",
            Self::Algorithm => "teams_algorithm",
            Self::UnknownKey => "teams_unknown_key",
            Self::Signature => "teams_signature",
            Self::Issuer => "teams_issuer",
            Self::Audience => "teams_audience",
            Self::Expired => "teams_expired",
            Self::NotYetValid => "teams_not_yet_valid",
            Self::ServiceUrl => "teams_service_url",
            Self::Channel => "teams_channel",
            Self::Endorsement => "teams_endorsement",
            Self::Tenant => "teams_tenant",
        }
    }

    /// 403 where the spec asks it (a channel the key is not endorsed for),
    /// 401 for every other refusal.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Channel | Self::Endorsement => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// What the sender is told: enough to fix a set-up, nothing more.
    pub fn message(self) -> &'static str {
        match self {
            Self::NoToken => "no Bot Framework token: send `Authorization: Bearer <token>`",
            Self::Malformed => {
                "the token is not a JWT with a key id and the claims the Bot Framework sends"
            }
            Self::Algorithm => "the token is not signed with RS256",
            Self::UnknownKey => "the token's key is not among the Bot Framework's signing keys",
            Self::Signature => "the token's signature does not verify",
            Self::Issuer => "the token was not issued by https://api.botframework.com",
            Self::Audience => {
                "the token is for another bot: its audience is not GATEBOT_TEAMS_APP_ID"
            }
            Self::Expired => "the token has expired",
            Self::NotYetValid => "the token is not valid yet",
            Self::ServiceUrl => "the token's serviceurl is not the activity's serviceUrl",
            Self::Channel => "the activity's channelId is not msteams: gatebot serves Teams only",
            Self::Endorsement => "the token's key is not endorsed for the msteams channel",
            Self::Tenant => "this tenant is not in GATEBOT_TEAMS_TENANTS",
        }
    }
}

/// Why a token could not be checked at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Refused(Refusal),
    /// The signing keys could not be read: try again later.
    Unavailable(String),
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Self {
        Self::Refused(r)
    }
}

/// The claims gatebot reads; signature, issuer and audience are checked by
/// `jsonwebtoken`, the times against gatebot's own clock.
#[derive(Debug, Clone, Deserialize)]
pub struct Claims {
    exp: i64,
    nbf: Option<i64>,
    #[serde(default)]
    serviceurl: Option<String>,
}

/// A token that verified: its claims, and whether its key is endorsed for Teams.
#[derive(Debug, Clone)]
pub struct Verified {
    claims: Claims,
    endorsed: bool,
}

/// What a token must be for.
pub struct Expected<'a> {
    pub app_id: &'a str,
    pub now_secs: i64,
}

/// Checks the `Authorization` header's token, before the body is read.
pub async fn verify(
    keys: &SigningKeys,
    authorization: Option<&str>,
    expected: &Expected<'_>,
) -> Result<Verified, Failure> {
    let token = bearer(authorization).ok_or(Refusal::NoToken)?;
    let header = jsonwebtoken::decode_header(token).map_err(|_| Refusal::Malformed)?;
    if header.alg != Algorithm::RS256 {
        return Err(Refusal::Algorithm.into());
    }
    let kid = header.kid.ok_or(Refusal::Malformed)?;
    let key = keys.key(&kid).await.map_err(|e| match e {
        KeyError::Unknown => Failure::Refused(Refusal::UnknownKey),
        KeyError::Unavailable(why) => Failure::Unavailable(why),
    })?;
    let claims = jsonwebtoken::decode::<Claims>(token, &key.key, &validation(expected.app_id))
        .map_err(|e| refusal(e.kind()))?
        .claims;
    if expected.now_secs > claims.exp.saturating_add(SKEW_SECS) {
        return Err(Refusal::Expired.into());
    }
    if claims
        .nbf
        .is_some_and(|nbf| expected.now_secs.saturating_add(SKEW_SECS) < nbf)
    {
        return Err(Refusal::NotYetValid.into());
    }
    Ok(Verified {
        claims,
        endorsed: key.endorses(TEAMS_CHANNEL),
    })
}

/// The activity must be the one the token was issued for, a Teams activity
/// signed by a key endorsed for Teams, from a tenant gatebot serves.
pub fn admits<'a>(
    verified: &Verified,
    activity: &Activity,
    mut tenants: impl Iterator<Item = &'a str>,
) -> Result<(), Refusal> {
    let claims = &verified.claims;
    // Compared exactly, as the Bot Framework's own SDK does.
    if claims.serviceurl.as_deref() != Some(activity.service_url.as_str()) {
        return Err(Refusal::ServiceUrl);
    }
    if activity.channel_id != TEAMS_CHANNEL {
        return Err(Refusal::Channel);
    }
    if !verified.endorsed {
        return Err(Refusal::Endorsement);
    }
    let tenant = activity.tenant().ok_or(Refusal::Tenant)?;
    if !tenants.any(|t| t == tenant) {
        return Err(Refusal::Tenant);
    }
    Ok(())
}

fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn validation(app_id: &str) -> Validation {
    let mut v = Validation::new(Algorithm::RS256);
    v.set_issuer(&[ISSUER]);
    v.set_audience(&[app_id]);
    v.set_required_spec_claims(&["iss", "aud"]);
    // Times are checked against gatebot's clock (corrected to the store's).
    v.validate_exp = false;
    v.validate_nbf = false;
    v
}

fn refusal(kind: &ErrorKind) -> Refusal {
    match kind {
        ErrorKind::InvalidSignature => Refusal::Signature,
        ErrorKind::InvalidIssuer => Refusal::Issuer,
        ErrorKind::InvalidAudience => Refusal::Audience,
        ErrorKind::InvalidAlgorithm => Refusal::Algorithm,
        _ => Refusal::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn only_a_bearer_token_is_read() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}
