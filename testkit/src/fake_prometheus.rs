//! A fake Prometheus HTTP API: `GET /api/v1/query` answered with the real
//! response shapes of tests/fixtures/prometheus/ (a one-sample vector, an
//! empty vector, `NaN`, an error), chosen by the query's text. It can be slow,
//! down, or want a bearer token, as a Prometheus behind an auth proxy does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::Value;
use tokio::net::TcpListener;

/// What the fake answers a query with.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A vector of one sample with this value (`"99.2"`, `"NaN"`).
    Value(String),
    /// A vector with no sample.
    Empty,
    /// Prometheus's error body (`error.timeout…`) with this HTTP status.
    Error(u16),
}

/// One rule: every part must be in the query; the rule with the longest
/// parts wins, so `"podinfo-primary"` beats `"podinfo"`.
struct Rule {
    parts: Vec<String>,
    answer: Answer,
}

#[derive(Default)]
struct Inner {
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<String>>,
    delay_ms: AtomicU64,
    down: AtomicBool,
    token: Mutex<Option<String>>,
}

#[derive(Clone)]
pub struct FakePrometheus {
    pub url: String,
    inner: Arc<Inner>,
}

fn fixture(name: &str) -> Value {
    let path = crate::repository()
        .join("tests/fixtures/prometheus")
        .join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

impl FakePrometheus {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/api/v1/query", get(query))
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, inner }
    }

    /// Answers queries holding every one of `parts` with `answer`.
    pub fn answer(&self, parts: &[&str], answer: Answer) {
        self.inner.rules.lock().unwrap().push(Rule {
            parts: parts.iter().map(|p| p.to_string()).collect(),
            answer,
        });
    }

    /// Answers every query this long after it arrives.
    pub fn slow(&self, delay: Duration) {
        self.inner
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Answers 503 with no body, as a proxy in front of a stopped one does.
    pub fn down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    /// Wants `Authorization: Bearer <token>`; anything else is 401.
    pub fn require_token(&self, token: &str) {
        *self.inner.token.lock().unwrap() = Some(token.to_string());
    }

    /// The queries asked so far, in order.
    pub fn queries(&self) -> Vec<String> {
        self.inner.seen.lock().unwrap().clone()
    }
}

async fn query(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let text = params
        .into_iter()
        .find(|(k, _)| k == "query")
        .map(|(_, v)| v)
        .unwrap_or_default();
    inner.seen.lock().unwrap().push(text.clone());
    let delay = inner.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if inner.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let wanted = inner.token.lock().unwrap().clone();
    if let Some(token) = wanted {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given != format!("Bearer {token}") {
            return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
        }
    }
    let answer = {
        let rules = inner.rules.lock().unwrap();
        rules
            .iter()
            .filter(|r| r.parts.iter().all(|p| text.contains(p.as_str())))
            .max_by_key(|r| r.parts.iter().map(String::len).sum::<usize>())
            .map_or(Answer::Empty, |r| r.answer.clone())
    };
    match answer {
        Answer::Value(v) => {
            let mut body = fixture("query.vector.single-value.flagger-test.json");
            body["data"]["result"][0]["value"][1] = Value::String(v);
            axum::Json(body).into_response()
        }
        Answer::Empty => {
            axum::Json(fixture("query.vector.empty.flagger-test.json")).into_response()
        }
        Answer::Error(status) => (
            StatusCode::from_u16(status).unwrap(),
            axum::Json(fixture("error.timeout.respondError-test.json")),
        )
            .into_response(),
    }
}
