//! GitHub App authentication: the RS256 JWT that identifies the App, signed
//! with `ring` (already in the tree for TLS), and the installation tokens it
//! is exchanged for, cached until shortly before they expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use secrecy::{ExposeSecret, SecretString};

/// GitHub refuses JWTs valid for more than ten minutes; issuing a minute in
/// the past and expiring in nine allows for clock drift either way.
const ISSUED_BEFORE: Duration = Duration::from_secs(60);
const VALID_FOR: Duration = Duration::from_secs(9 * 60);
/// An installation token is replaced this long before GitHub says it expires.
const REFRESH_BEFORE: Duration = Duration::from_secs(60);

/// The App's identity: its id and private key.
pub struct AppKey {
    id: u64,
    key: RsaKeyPair,
    rng: SystemRandom,
}

impl AppKey {
    /// Reads an RSA key in PEM, PKCS#1 (`BEGIN RSA PRIVATE KEY`, what GitHub
    /// hands out) or PKCS#8 (`BEGIN PRIVATE KEY`).
    pub fn from_pem(id: u64, pem: &str) -> anyhow::Result<Self> {
        let invalid = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!("GATEBOT_GITHUB_APP_PRIVATE_KEY is not an RSA PEM key: {e}")
        };
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| invalid(&e))?;
        let key = match &der {
            PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
            PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
            _ => return Err(invalid(&"not an RSA key")),
        }
        .map_err(|e| invalid(&e))?;
        Ok(Self {
            id,
            key,
            rng: SystemRandom::new(),
        })
    }

    /// A JWT for calls made as the App itself (`/app`, minting tokens).
    pub fn jwt(&self, now: SystemTime) -> anyhow::Result<String> {
        let secs = now.duration_since(UNIX_EPOCH)?.as_secs();
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = serde_json::json!({
            "iat": secs.saturating_sub(ISSUED_BEFORE.as_secs()),
            "exp": secs + VALID_FOR.as_secs(),
            "iss": self.id.to_string(),
        });
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims)?);
        let signed = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &self.rng,
                signed.as_bytes(),
                &mut signature,
            )
            .map_err(|_| anyhow::anyhow!("cannot sign the GitHub App JWT"))?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// Installation tokens by installation id.
#[derive(Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<u64, (SecretString, SystemTime)>>,
}

impl TokenCache {
    /// A cached token that is still good at `now`.
    pub fn get(&self, installation: u64, now: SystemTime) -> Option<SecretString> {
        let tokens = self.tokens.lock().expect("token cache poisoned");
        let (token, refresh_at) = tokens.get(&installation)?;
        (now < *refresh_at).then(|| token.clone())
    }

    /// Stores a token GitHub says is valid until `expires_at` (RFC 3339); one
    /// without a readable expiry is used for this call only.
    pub fn put(&self, installation: u64, token: &SecretString, expires_at: Option<&str>) {
        let Some(expires) = expires_at.and_then(|t| humantime::parse_rfc3339(t).ok()) else {
            return;
        };
        let refresh_at = expires.checked_sub(REFRESH_BEFORE).unwrap_or(UNIX_EPOCH);
        self.tokens
            .lock()
            .expect("token cache poisoned")
            .insert(installation, (token.expose_secret().into(), refresh_at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

    const KEY: &str = include_str!("../../tests/fixtures/test-app-key.pem");

    #[test]
    fn jwt_is_rs256_signed_with_githubs_claims() {
        let app = AppKey::from_pem(42, KEY).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let jwt = app.jwt(now).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "RS256");
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iat"], 1_700_000_000 - 60);
        assert_eq!(claims["exp"], 1_700_000_000 + 540);
        assert_eq!(claims["iss"], "42");
        let public = UnparsedPublicKey::new(
            &RSA_PKCS1_2048_8192_SHA256,
            app.key.public().as_ref().to_vec(),
        );
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .expect("a valid RS256 signature");
    }

    #[test]
    fn bad_keys_are_refused_clearly() {
        let err = AppKey::from_pem(1, "not a key").err().unwrap().to_string();
        assert!(err.contains("GATEBOT_GITHUB_APP_PRIVATE_KEY"), "{err}");
    }

    #[test]
    fn tokens_are_replaced_a_minute_before_they_expire() {
        let cache = TokenCache::default();
        let token = SecretString::from("ghs_1");
        cache.put(7, &token, Some("2030-01-01T00:10:00Z"));
        let at = |t: &str| humantime::parse_rfc3339(t).unwrap();
        assert!(cache.get(7, at("2030-01-01T00:08:59Z")).is_some());
        assert!(cache.get(7, at("2030-01-01T00:09:00Z")).is_none());
        assert!(cache.get(8, at("2030-01-01T00:00:00Z")).is_none());
        cache.put(9, &token, None);
        assert!(cache.get(9, at("2030-01-01T00:00:00Z")).is_none());
    }
}
