//! The Bot Framework's signing keys: the OpenID metadata document names the
//! key set (`jwks_uri`); both are fetched and the keys kept. They are fetched
//! again once a day, and on a key id not seen before, but then at most once
//! every 5 minutes: anyone can send a token with a made-up key id, and that
//! must not make gatebot call out at their pace.
//!
//! Each key keeps its `endorsements`, the channel ids the Bot Framework signs
//! with it (`msteams`, `skype`, …): a token signed by a key not endorsed for
//! Teams is not a Teams activity (`auth::admits`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::DecodingKey;
use serde::Deserialize;

use crate::clock::SharedClock;
use crate::gate::Millis;
use crate::metrics::OutboundCalls;
use crate::outbound;

static HTTP: outbound::Shared = outbound::Shared::new();

/// Each call to the metadata or the key set, from sending to the last byte.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The spec asks for a refresh at least once every 24 hours.
pub const REFRESH_EVERY: Millis = 24 * 3600 * 1000;
/// The least time between two fetches caused by an unknown key id.
pub const UNKNOWN_KEY_EVERY: Millis = 5 * 60 * 1000;
/// Before any key was ever read, a failed fetch is tried again this soon.
const FIRST_FETCH_EVERY: Millis = 10 * 1000;
/// The documents are a few KB; anything much larger is not the Bot Framework.
const DOCUMENT_LIMIT: usize = 256 * 1024;
/// Keys kept from one key set.
const MAX_KEYS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// No key of this id, even after a refresh (or a refresh was too recent).
    Unknown,
    /// No key set could be read at all: the sender did nothing wrong.
    Unavailable(String),
}

/// A key of the Bot Framework's key set, with the channels it is endorsed for.
#[derive(Clone)]
pub struct SigningKey {
    pub key: DecodingKey,
    pub endorsements: Vec<String>,
}

impl SigningKey {
    pub fn endorses(&self, channel: &str) -> bool {
        self.endorsements.iter().any(|e| e == channel)
    }
}

pub struct SigningKeys {
    metadata_url: String,
    clock: SharedClock,
    calls: OutboundCalls,
    cache: tokio::sync::Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<String, SigningKey>,
    /// The last fetch that succeeded.
    fetched_at: Option<Millis>,
    /// The last fetch tried, whatever came of it.
    tried_at: Option<Millis>,
}

impl Cache {
    fn due(&self, now: Millis, kid: &str) -> bool {
        let stale = self.fetched_at.is_none_or(|at| now - at >= REFRESH_EVERY);
        if !stale && self.keys.contains_key(kid) {
            return false;
        }
        let every = if self.fetched_at.is_none() {
            FIRST_FETCH_EVERY
        } else {
            UNKNOWN_KEY_EVERY
        };
        self.tried_at.is_none_or(|at| now - at >= every)
    }
}

#[derive(Deserialize)]
struct Metadata {
    jwks_uri: String,
}

#[derive(Deserialize)]
struct KeySet {
    keys: Vec<serde_json::Value>,
}

impl SigningKeys {
    pub fn new(metadata_url: &str, clock: SharedClock, calls: OutboundCalls) -> Self {
        Self {
            metadata_url: metadata_url.to_string(),
            clock,
            calls,
            cache: tokio::sync::Mutex::default(),
        }
    }

    /// The key of id `kid`, fetching the key set when it is due. One fetch
    /// at a time: requests that arrive meanwhile wait for its keys.
    pub async fn key(&self, kid: &str) -> Result<SigningKey, KeyError> {
        let mut cache = self.cache.lock().await;
        let now = self.clock.now_ms();
        if cache.due(now, kid) {
            cache.tried_at = Some(now);
            match self.fetch().await {
                Ok(keys) => {
                    cache.keys = keys;
                    cache.fetched_at = Some(now);
                }
                // The keys read before stay good until the next refresh.
                Err(e) if cache.fetched_at.is_some() => {
                    tracing::warn!(error = %e, "cannot refresh the Bot Framework's signing keys; keeping those read before");
                }
                Err(e) => return Err(KeyError::Unavailable(e)),
            }
        }
        cache.keys.get(kid).cloned().ok_or(KeyError::Unknown)
    }

    async fn fetch(&self) -> Result<HashMap<String, SigningKey>, String> {
        let metadata: Metadata = self.get("openid_metadata", &self.metadata_url).await?;
        let set: KeySet = self.get("signing_keys", &metadata.jwks_uri).await?;
        let keys: HashMap<String, SigningKey> = set
            .keys
            .into_iter()
            .filter_map(rsa_key)
            .take(MAX_KEYS)
            .collect();
        if keys.is_empty() {
            return Err(format!("{} lists no RSA signing key", metadata.jwks_uri));
        }
        tracing::info!(keys = keys.len(), "read the Bot Framework's signing keys");
        Ok(keys)
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: &'static str,
        url: &str,
    ) -> Result<T, String> {
        let started = Instant::now();
        let result = self.get_unobserved(url).await;
        let label = result.as_ref().err().map_or("ok", |(label, _)| label);
        self.calls.observe(endpoint, label, started.elapsed());
        result.map_err(|(_, e)| format!("GET {url}: {e}"))
    }

    /// The document, or the result label of the failure and what it was.
    async fn get_unobserved<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<T, (&'static str, String)> {
        let http = HTTP
            .get(CALL_TIMEOUT)
            .map_err(|e| ("transport", format!("{e:#}")))?;
        let response = http.get(url).send().await.map_err(|e| {
            let label = if e.is_timeout() {
                "timeout"
            } else {
                "transport"
            };
            (label, outbound::why(&e))
        })?;
        let status = response.status();
        if !status.is_success() {
            let label = if status.is_server_error() {
                "server_error"
            } else {
                "client_error"
            };
            return Err((label, format!("HTTP {status}")));
        }
        let body = outbound::body(response, DOCUMENT_LIMIT)
            .await
            .map_err(|e| ("transport", e))?;
        serde_json::from_slice(&body)
            .map_err(|e| ("api_error", format!("not the expected JSON: {e}")))
    }
}

/// Most endorsements kept per key, and their longest: a channel id is a word.
const MAX_ENDORSEMENTS: usize = 64;
const MAX_ENDORSEMENT: usize = 64;

/// An RSA key with its id and endorsements; other keys (and ones that do not
/// parse) are skipped, so one odd entry does not lose the whole set. A key
/// without `endorsements` is endorsed for nothing.
fn rsa_key(value: serde_json::Value) -> Option<(String, SigningKey)> {
    let listed = value
        .get("endorsements")
        .and_then(serde_json::Value::as_array);
    let endorsements = listed
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .filter(|e| e.len() <= MAX_ENDORSEMENT)
        .take(MAX_ENDORSEMENTS)
        .map(str::to_string)
        .collect();
    let jwk: Jwk = serde_json::from_value(value).ok()?;
    let kid = jwk.common.key_id.clone()?;
    if !matches!(jwk.algorithm, AlgorithmParameters::RSA(_)) {
        return None;
    }
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some((kid, SigningKey { key, endorsements }))
}
