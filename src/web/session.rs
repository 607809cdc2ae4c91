//! Who is looking at a page: a signed session cookie (an operator's token or
//! GitHub sign-in), or a trusted proxy's header. Cookies are `HttpOnly`,
//! `Secure`, `SameSite=Lax`, scoped to `/ui` and signed with HMAC-SHA256; their
//! expiry is inside the signed value, so an old cookie replayed after its time
//! is refused. A cookie also carries its session's id, which signing out
//! revokes in the store for every replica, and, when signed in with a token,
//! that token's fingerprint: the session ends once the token is no longer
//! configured.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use sha2::Sha256;

use super::Web;
use crate::gate::Millis;
use crate::policy::Policy;

pub const SESSION_COOKIE: &str = "gatebot_session";
pub const OAUTH_COOKIE: &str = "gatebot_oauth";

/// How someone signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// An operator's token (the admin token or a named one): acts as its
    /// name, and may do what the API may.
    Admin,
    /// Sign in with GitHub: acts as that login.
    Github,
    /// An authenticating proxy's header, mapped by the policy's `[users]`.
    Proxy,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Github => "github",
            Self::Proxy => "proxy",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Self::Admin),
            "github" => Some(Self::Github),
            "proxy" => Some(Self::Proxy),
            _ => None,
        }
    }
}

/// A signed-in person.
#[derive(Debug, Clone, Serialize)]
pub struct Session {
    pub login: String,
    pub via: Via,
    /// Every state-changing form carries it back.
    pub csrf: String,
    #[serde(skip)]
    pub expires: Millis,
    /// What signing out revokes; None for a proxy's header, which has no cookie.
    #[serde(skip)]
    pub id: Option<String>,
    /// The fingerprint of the token signed in with ([`Signer::fingerprint`]).
    #[serde(skip)]
    pub token: Option<String>,
}

/// Signs and checks the values gatebot hands the browser.
pub struct Signer {
    key: Vec<u8>,
}

type HmacSha256 = Hmac<Sha256>;

impl Signer {
    /// With the configured key, or a random one for this process.
    pub fn new(key: Option<&SecretString>) -> Self {
        let key = match key {
            Some(k) => k.expose_secret().as_bytes().to_vec(),
            None => format!("{}{}", random_token(), random_token()).into_bytes(),
        };
        Self { key }
    }

    fn mac(&self, purpose: &str, value: &str) -> HmacSha256 {
        // Any key length is accepted by HMAC.
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(purpose.as_bytes());
        mac.update(b"\0");
        mac.update(value.as_bytes());
        mac
    }

    pub fn sign(&self, purpose: &str, value: &str) -> String {
        hex::encode(self.mac(purpose, value).finalize().into_bytes())
    }

    /// Constant-time.
    pub fn verify(&self, purpose: &str, value: &str, signature: &str) -> bool {
        let Ok(given) = hex::decode(signature) else {
            return false;
        };
        self.mac(purpose, value).verify_slice(&given).is_ok()
    }

    /// `value.signature`
    pub fn seal(&self, purpose: &str, value: &str) -> String {
        format!("{value}.{}", self.sign(purpose, value))
    }

    /// A token's fingerprint for a session cookie: a short HMAC of its
    /// SHA-256 under the session key, so the cookie shows nothing of the
    /// token and a token is recognised without keeping it.
    pub fn fingerprint(&self, sha256: &[u8; 32]) -> String {
        self.sign("token", &hex::encode(sha256))[..32].to_string()
    }

    /// The value of a sealed string whose signature holds.
    pub fn open<'a>(&self, purpose: &str, sealed: &'a str) -> Option<&'a str> {
        let (value, signature) = sealed.rsplit_once('.')?;
        self.verify(purpose, value, signature).then_some(value)
    }
}

/// 122 random bits as 32 hex digits.
pub fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

pub use crate::gate::is_login;

/// In a cookie: no token fingerprint.
const NO_TOKEN: &str = "-";

impl Session {
    /// A new session; `token` is the fingerprint of the token signed in with.
    pub fn new(login: &str, via: Via, now: Millis, ttl_ms: Millis, token: Option<String>) -> Self {
        Self {
            login: login.to_string(),
            via,
            csrf: random_token(),
            expires: now.saturating_add(ttl_ms),
            id: Some(random_token()),
            token,
        }
    }

    /// `login.via.expires.csrf.id.token`, sealed.
    pub fn cookie_value(&self, signer: &Signer) -> String {
        let value = format!(
            "{}.{}.{}.{}.{}.{}",
            self.login,
            self.via.as_str(),
            self.expires,
            self.csrf,
            self.id.as_deref().unwrap_or(NO_TOKEN),
            self.token.as_deref().unwrap_or(NO_TOKEN)
        );
        signer.seal("session", &value)
    }

    pub(crate) fn from_cookie(signer: &Signer, sealed: &str, now: Millis) -> Option<Self> {
        let value = signer.open("session", sealed)?;
        let mut parts = value.split('.');
        let (login, via, expires, csrf, id, token) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
        let expires: Millis = expires.parse().ok()?;
        if parts.next().is_some() || expires <= now || !is_login(login) || id == NO_TOKEN {
            return None;
        }
        Some(Self {
            login: login.to_string(),
            via: Via::parse(via)?,
            csrf: csrf.to_string(),
            expires,
            id: Some(id.to_string()),
            token: (token != NO_TOKEN).then(|| token.to_string()),
        })
    }

    /// Whether a session signed in with a token may go on: that token is
    /// still configured, and still names this person. Others need no token.
    fn token_still_configured(&self, web: &Web) -> bool {
        if self.via != Via::Admin {
            return true;
        }
        self.token
            .as_ref()
            .and_then(|fingerprint| web.operators.get(fingerprint))
            .is_some_and(|name| *name == self.login)
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value under `/ui`; `max_age` 0 removes it.
pub fn set_cookie(name: &str, value: &str, max_age_secs: u64) -> String {
    format!("{name}={value}; Path=/ui; Max-Age={max_age_secs}; HttpOnly; Secure; SameSite=Lax")
}

/// Who is asking: the session cookie, else a trusted proxy's header.
pub fn who(
    web: &Web,
    policy: &Policy,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
    now: Millis,
) -> Option<Session> {
    if let Some(s) = cookie(headers, SESSION_COOKIE)
        .and_then(|sealed| Session::from_cookie(&web.signer, sealed, now))
        .filter(|s| s.token_still_configured(web))
    {
        return Some(s);
    }
    forwarded(web, policy, headers, peer?)
}

/// oauth2-proxy's `X-Forwarded-User` (else `X-Forwarded-Email`), believed only
/// from a configured proxy and only when the policy's `[users]` lists it as a
/// GitHub login. The CSRF token is derived from the login, so no cookie is needed.
fn forwarded(web: &Web, policy: &Policy, headers: &HeaderMap, peer: SocketAddr) -> Option<Session> {
    if !web.proxies.iter().any(|c| c.contains(peer.ip())) {
        return None;
    }
    let named = |h: &str| {
        headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let user = named("x-forwarded-user").or_else(|| named("x-forwarded-email"))?;
    // Listed in [users] by its GitHub login.
    policy.slack_user_of(user)?;
    if !is_login(user) {
        return None;
    }
    Some(Session {
        login: user.to_string(),
        via: Via::Proxy,
        csrf: web.signer.sign("proxy-csrf", &user.to_ascii_lowercase())[..32].to_string(),
        expires: Millis::MAX,
        id: None,
        token: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_cookie_is_checked_and_expires() {
        let signer = Signer::new(None);
        let s = Session::new("alice", Via::Github, 1_000, 60_000, None);
        let sealed = s.cookie_value(&signer);
        let back = Session::from_cookie(&signer, &sealed, 2_000).unwrap();
        assert_eq!((back.login.as_str(), back.via), ("alice", Via::Github));
        assert_eq!(back.csrf, s.csrf);
        assert_eq!((back.id.as_deref(), back.token), (s.id.as_deref(), None));
        assert!(
            Session::from_cookie(&signer, &sealed, 61_000).is_none(),
            "expired"
        );
        let forged = sealed.replacen("alice", "mallory", 1);
        assert!(
            Session::from_cookie(&signer, &forged, 2_000).is_none(),
            "forged"
        );
        let other = Signer::new(None);
        assert!(
            Session::from_cookie(&other, &sealed, 2_000).is_none(),
            "other key"
        );
    }
}
