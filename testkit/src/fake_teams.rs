//! A fake Bot Framework for black-box tests: the OpenID metadata document and
//! the key set it names, served over real HTTP, with RSA keys made by the
//! test (no real key set is public to copy; these are made up), and tokens
//! minted as the Bot Framework mints them for a bot (RS256, a key id,
//! issuer `https://api.botframework.com`, the bot's app id as audience, the
//! `serviceurl` claim). It counts how often its keys are fetched.
//!
//! It is also the login service (client-credentials tokens, answered as the
//! fixture token-response.client-credentials.docs-example.json shows) and the
//! Bot Connector under `{url}/teams/` (the activities sent to a conversation,
//! recorded and answered with an id as the recorded connector answers; 429
//! with Retry-After on demand).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::traits::PublicKeyParts;
use rsa::RsaPrivateKey;
use serde_json::{json, Value};
use tokio::net::TcpListener;

pub const ISSUER: &str = "https://api.botframework.com";

/// An RSA signing key made in the test, with its key id.
#[derive(Clone)]
pub struct TestKey {
    pub kid: String,
    private: RsaPrivateKey,
    /// The channels the key set says this key signs for.
    endorsements: Vec<String>,
}

/// What the Bot Framework's keys are endorsed for (the spec: each key lists
/// the channel ids it signs for; Teams' keys name `msteams`).
pub const ENDORSEMENTS: [&str; 2] = ["msteams", "skype"];

impl TestKey {
    /// A new 2048-bit key (the smallest ring verifies).
    pub fn new(kid: &str) -> Self {
        let private =
            RsaPrivateKey::new(&mut rand::thread_rng(), 2048).expect("an RSA key is made");
        Self {
            kid: kid.to_string(),
            private,
            endorsements: ENDORSEMENTS.map(str::to_string).to_vec(),
        }
    }

    /// The same key under another id: signs tokens that name `kid`.
    pub fn named(&self, kid: &str) -> Self {
        Self {
            kid: kid.to_string(),
            private: self.private.clone(),
            endorsements: self.endorsements.clone(),
        }
    }

    /// The same key, listed as endorsed for `channels` only.
    pub fn endorsed(&self, channels: &[&str]) -> Self {
        Self {
            endorsements: channels.iter().map(|c| c.to_string()).collect(),
            ..self.clone()
        }
    }

    /// The public half as a JWK, in the shape the Bot Framework lists its
    /// keys (tests/fixtures/README.md, "teams/"): `kty`, `use`, `kid`, `x5t`
    /// (a certificate thumbprint; made up here, the key id), `n`, `e` and
    /// `endorsements`. No `x5c`: the test makes no certificate, and gatebot
    /// reads the key from `n` and `e`.
    pub fn jwk(&self) -> Value {
        let b64 = |n: &rsa::BigUint| URL_SAFE_NO_PAD.encode(n.to_bytes_be());
        json!({
            "kty": "RSA",
            "use": "sig",
            "kid": self.kid,
            "x5t": self.kid,
            "n": b64(self.private.n()),
            "e": b64(self.private.e()),
            "endorsements": self.endorsements,
        })
    }

    /// A token over `claims`, signed RS256 with this key.
    pub fn sign(&self, claims: &Value) -> String {
        let der = self.private.to_pkcs1_der().expect("the key encodes");
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_der(der.as_bytes()))
            .expect("the token is signed")
    }
}

/// A token with any header, signed with an HMAC secret (HS256) or not at all
/// (`alg: none`): what an attacker can make without the Bot Framework's key.
pub fn unsigned(header: &Value, claims: &Value, hs256_secret: Option<&[u8]>) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
    let message = format!("{}.{}", part(header), part(claims));
    let signature = match hs256_secret {
        Some(secret) => {
            let key = EncodingKey::from_secret(secret);
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256)
                .expect("HS256 signs")
        }
        None => String::new(),
    };
    format!("{message}.{signature}")
}

/// The claims of a token for `app_id` and `service_url`, valid from
/// `now_secs` for an hour, as the Bot Framework sends them.
pub fn claims(app_id: &str, service_url: &str, now_secs: i64) -> Value {
    json!({
        "iss": ISSUER,
        "aud": app_id,
        "serviceurl": service_url,
        "nbf": now_secs - 10,
        "iat": now_secs - 10,
        "exp": now_secs + 3600,
    })
}

/// An activity the bot sent to a conversation (`PUT`: updated in place),
/// or a message posted to the Workflows webhook (`conversation_id` "workflow").
#[derive(Debug, Clone)]
pub struct Sent {
    /// `POST` or `PUT`.
    pub method: &'static str,
    pub conversation_id: String,
    /// The activity a `PUT` replaced.
    pub activity_id: Option<String>,
    pub activity: Value,
    pub auth: Option<String>,
    /// What the fake answered.
    pub status: u16,
}

struct Inner {
    published: Mutex<Vec<TestKey>>,
    key_fetches: AtomicUsize,
    base: String,
    /// Tenants tokens were asked for, in order.
    tokens: Mutex<Vec<String>>,
    sent: Mutex<Vec<Sent>>,
    /// Retry-After seconds of the 429s to answer next.
    throttle: Mutex<Vec<u64>>,
    /// The one client secret the login endpoint accepts (None: any).
    client_secret: Mutex<Option<String>>,
}

#[derive(Clone)]
pub struct FakeBotFramework {
    inner: Arc<Inner>,
    pub url: String,
}

impl FakeBotFramework {
    /// Serves `keys` as the Bot Framework's key set.
    pub async fn start(keys: &[TestKey]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let inner = Arc::new(Inner {
            published: Mutex::new(keys.to_vec()),
            key_fetches: AtomicUsize::new(0),
            base: url.clone(),
            tokens: Mutex::default(),
            sent: Mutex::default(),
            throttle: Mutex::default(),
            client_secret: Mutex::default(),
        });
        let app = Router::new()
            .route("/v1/.well-known/openidconfiguration", get(metadata))
            .route("/v1/.well-known/keys", get(key_set))
            .route("/{tenant}/oauth2/v2.0/token", post(token))
            .route("/teams/v3/conversations/{id}/activities", post(send))
            .route(
                "/teams/v3/conversations/{id}/activities/{activity_id}",
                axum::routing::put(update),
            )
            .route("/workflow", post(workflow))
            .with_state(inner.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { inner, url }
    }

    /// `GATEBOT_TEAMS_OPENID_METADATA_URL` for this fake.
    pub fn metadata_url(&self) -> String {
        format!("{}/v1/.well-known/openidconfiguration", self.url)
    }

    /// Lists `key` from now on, next to the others (a key rotation).
    pub fn publish(&self, key: &TestKey) {
        self.inner.published.lock().unwrap().push(key.clone());
    }

    /// The service URL activities name, for the fake connector.
    pub fn service_url(&self) -> String {
        format!("{}/teams/", self.url)
    }

    /// `GATEBOT_TEAMS_WORKFLOW_URL` for this fake.
    pub fn workflow_url(&self) -> String {
        format!("{}/workflow", self.url)
    }

    /// Tenants the bot asked tokens for.
    pub fn token_requests(&self) -> Vec<String> {
        self.inner.tokens.lock().unwrap().clone()
    }

    /// From now on the login endpoint issues tokens only for `secret`, and
    /// answers any other as Microsoft Entra ID does (401 `invalid_client`).
    pub fn accept_only_secret(&self, secret: &str) {
        *self.inner.client_secret.lock().unwrap() = Some(secret.to_string());
    }

    /// Every activity sent, answered or not.
    pub fn sent(&self) -> Vec<Sent> {
        self.inner.sent.lock().unwrap().clone()
    }

    /// The next send is answered 429 with `Retry-After: secs`.
    pub fn throttle_next(&self, secs: u64) {
        self.inner.throttle.lock().unwrap().push(secs);
    }

    /// How often the key set was read.
    pub fn key_fetches(&self) -> usize {
        self.inner.key_fetches.load(Ordering::SeqCst)
    }
}

async fn metadata(State(inner): State<Arc<Inner>>) -> Json<Value> {
    // The document's shape is the one the spec shows (the fixture
    // openid-configuration.botframework.docs-example.json), pointing here.
    Json(json!({
        "issuer": ISSUER,
        "authorization_endpoint": "https://invalid.botframework.com",
        "jwks_uri": format!("{}/v1/.well-known/keys", inner.base),
        "id_token_signing_alg_values_supported": ["RS256"],
        "token_endpoint_auth_methods_supported": ["private_key_jwt"],
    }))
}

async fn key_set(State(inner): State<Arc<Inner>>) -> Json<Value> {
    inner.key_fetches.fetch_add(1, Ordering::SeqCst);
    let keys: Vec<Value> = inner
        .published
        .lock()
        .unwrap()
        .iter()
        .map(TestKey::jwk)
        .collect();
    Json(json!({ "keys": keys }))
}

async fn token(
    State(inner): State<Arc<Inner>>,
    Path(tenant): Path<String>,
    axum::extract::Form(form): axum::extract::Form<std::collections::HashMap<String, String>>,
) -> Response {
    let wanted = inner.client_secret.lock().unwrap().clone();
    if wanted.is_some_and(|w| form.get("client_secret") != Some(&w)) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({
                "error": "invalid_client",
                "error_description": "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '00000000-0000-0000-0000-000000000001'.",
                "error_codes": [7000215],
            })),
        )
            .into_response();
    }
    inner.tokens.lock().unwrap().push(tenant.clone());
    let n = inner.tokens.lock().unwrap().len();
    Json(json!({
        "token_type": "Bearer",
        "expires_in": 3600,
        "ext_expires_in": 3600,
        "access_token": format!("test-bot-token-{n}"),
    }))
    .into_response()
}

async fn send(
    State(inner): State<Arc<Inner>>,
    Path(conversation_id): Path<String>,
    headers: HeaderMap,
    Json(activity): Json<Value>,
) -> Response {
    record(&inner, "POST", conversation_id, None, &headers, activity)
}

/// `PUT …/activities/{activityId}`: answered as the recorded connector
/// answers, with the activity's id.
async fn update(
    State(inner): State<Arc<Inner>>,
    Path((conversation_id, activity_id)): Path<(String, String)>,
    headers: HeaderMap,
    Json(activity): Json<Value>,
) -> Response {
    record(
        &inner,
        "PUT",
        conversation_id,
        Some(activity_id),
        &headers,
        activity,
    )
}

/// A Workflows webhook answers 202 with no body.
async fn workflow(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Json(message): Json<Value>,
) -> Response {
    let answered = record(&inner, "POST", "workflow".into(), None, &headers, message);
    if answered.status() == StatusCode::OK {
        return StatusCode::ACCEPTED.into_response();
    }
    answered
}

fn record(
    inner: &Inner,
    method: &'static str,
    conversation_id: String,
    activity_id: Option<String>,
    headers: &HeaderMap,
    activity: Value,
) -> Response {
    let throttled = {
        let mut t = inner.throttle.lock().unwrap();
        (!t.is_empty()).then(|| t.remove(0))
    };
    let status = if throttled.is_some() { 429 } else { 200 };
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let n = {
        let mut sent = inner.sent.lock().unwrap();
        sent.push(Sent {
            method,
            conversation_id,
            activity_id: activity_id.clone(),
            activity,
            auth,
            status,
        });
        sent.len()
    };
    let id = activity_id.unwrap_or_else(|| format!("1562094704.{n:06}"));
    match throttled {
        Some(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
        )
            .into_response(),
        None => (StatusCode::OK, Json(json!({ "id": id }))).into_response(),
    }
}
