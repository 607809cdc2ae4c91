//! A fake Prometheus HTTP API: `GET /api/v1/query` and `/api/v1/query_range`
//! answered with the real
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
            .route("/api/v1/query_range", get(query_range))
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
        self.require_authorization(&format!("Bearer {token}"));
    }

    /// Wants this `Authorization` header exactly (`Basic …` for basic
    /// auth); anything else is 401, as an auth proxy in front answers.
    pub fn require_authorization(&self, value: &str) {
        *self.inner.token.lock().unwrap() = Some(value.to_string());
    }

    /// The queries asked so far, in order.
    pub fn queries(&self) -> Vec<String> {
        self.inner.seen.lock().unwrap().clone()
    }
}

/// A range query: the instant answer's value at every step, a little
/// wave on it so a chart has a shape (the real matrix shape).
async fn query_range(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse::<f64>().ok())
    };
    let (Some(start), Some(end), Some(step)) = (param("start"), param("end"), param("step")) else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(fixture("error.not_acceptable.api-test.json")),
        )
            .into_response();
    };
    let answer = match answer_of(&inner, &headers, &params).await {
        Ok(answer) => answer,
        Err(refused) => return refused,
    };
    match answer {
        Answer::Value(v) => {
            let base: f64 = v.parse().unwrap_or(f64::NAN);
            let mut body = fixture("query_range.matrix.api-docs.json");
            let mut values = Vec::new();
            let mut t = start;
            while t <= end && step > 0.0 {
                // Never above the answer: a rate of 99.7 % stays a rate.
                let wave = 1.0 - 0.005 * (1.0 + ((t - start) / 300.0).sin());
                values.push(serde_json::json!([t, format!("{}", base * wave)]));
                t += step;
            }
            body["data"]["result"] = serde_json::json!([{"metric": {}, "values": values}]);
            axum::Json(body).into_response()
        }
        Answer::Empty => {
            axum::Json(fixture("query_range.matrix.empty.promtool-test.json")).into_response()
        }
        Answer::Error(status) => (
            StatusCode::from_u16(status).unwrap(),
            axum::Json(fixture("error.timeout.respondError-test.json")),
        )
            .into_response(),
    }
}

/// The answer a query gets, or the refusal of a slow, down or locked fake.
async fn answer_of(
    inner: &Inner,
    headers: &HeaderMap,
    params: &[(String, String)],
) -> Result<Answer, Response> {
    let text = params
        .iter()
        .find(|(k, _)| k == "query")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    inner.seen.lock().unwrap().push(text.clone());
    let delay = inner.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if inner.down.load(Ordering::SeqCst) {
        return Err(StatusCode::SERVICE_UNAVAILABLE.into_response());
    }
    let wanted = inner.token.lock().unwrap().clone();
    if let Some(token) = wanted {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given != token {
            return Err((StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response());
        }
    }
    let rules = inner.rules.lock().unwrap();
    Ok(rules
        .iter()
        .filter(|r| r.parts.iter().all(|p| text.contains(p.as_str())))
        .max_by_key(|r| r.parts.iter().map(String::len).sum::<usize>())
        .map_or(Answer::Empty, |r| r.answer.clone()))
}

async fn query(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let answer = match answer_of(&inner, &headers, &params).await {
        Ok(answer) => answer,
        Err(refused) => return refused,
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
