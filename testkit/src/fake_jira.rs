//! A fake Jira Service Management Cloud speaking its REST API for customer
//! requests (`/rest/servicedeskapi/request…`), so that tests read, create
//! and transition change requests over real HTTP in the wire format Jira
//! answers.
//!
//! Every answer is a fixture of tests/fixtures/change/jira/ (the examples of
//! Atlassian's OpenAPI description of the API) with only the fields the fake
//! keeps overwritten: `issueId`, `issueKey`, `currentStatus`, the request's
//! field values, the approval's decision and the links. The planned window
//! and the affected service are custom fields, whose ids differ from site to
//! site: the fake uses [`START_FIELD`], [`END_FIELD`] and [`SERVICE_FIELD`].
//! Their values are as the test gives them; Jira writes a date-time as
//! `2026-12-07T08:00:00.000+0000`.
//!
//! Routes: `GET /rest/servicedeskapi/request/{key}`, `…/{key}/approval`,
//! `GET` and `POST …/{key}/transition`, `POST /rest/servicedeskapi/request`.
//! It can want basic auth with an email and API token (401 otherwise), be rate
//! limited (429 with `Retry-After`) or be down (503), and it records every
//! request.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

use crate::fake_servicenow::{basic, request_line};

/// The request field of the planned start (a date-time custom field).
pub const START_FIELD: &str = "customfield_10040";
/// The request field of the planned end.
pub const END_FIELD: &str = "customfield_10041";
/// The request field of the affected service (JSM's Affected services field).
pub const SERVICE_FIELD: &str = "customfield_10042";

/// The statuses of the change workflow the fake walks through.
pub const AWAITING_APPROVAL: &str = "Awaiting approval";
pub const AWAITING_IMPLEMENTATION: &str = "Awaiting implementation";
pub const IMPLEMENTING: &str = "Implementing";
pub const COMPLETED: &str = "Completed";
pub const FAILED: &str = "Failed";
pub const DECLINED: &str = "Declined";
pub const CANCELED: &str = "Canceled";

/// A transition of the fake's change workflow.
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    pub id: &'static str,
    pub name: &'static str,
    /// The statuses it is offered in.
    pub from: &'static [&'static str],
    pub to: &'static str,
}

/// The transitions `GET …/{key}/transition` offers, by status.
pub const TRANSITIONS: [Transition; 4] = [
    Transition {
        id: "11",
        name: "Implement",
        from: &[AWAITING_IMPLEMENTATION],
        to: IMPLEMENTING,
    },
    Transition {
        id: "21",
        name: "Complete",
        from: &[IMPLEMENTING],
        to: COMPLETED,
    },
    Transition {
        id: "31",
        name: "Fail",
        from: &[IMPLEMENTING],
        to: FAILED,
    },
    Transition {
        id: "41",
        name: "Cancel",
        from: &[AWAITING_APPROVAL, AWAITING_IMPLEMENTATION],
        to: CANCELED,
    },
];

/// A change request as a test sets it up and reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `CHG-12`.
    pub key: String,
    /// `currentStatus.status`: [`AWAITING_APPROVAL`], [`AWAITING_IMPLEMENTATION`], …
    pub status: String,
    /// The approval's `finalDecision`: `approved`, `declined` or `pending`
    /// ("" for a request without an approval step).
    pub approval: String,
    /// The planned start as Jira writes it (`2026-12-07T08:00:00.000+0000`); may be "".
    pub start: String,
    /// The planned end, same format; may be "".
    pub end: String,
    /// The affected service's name; may be "".
    pub service: String,
}

struct Record {
    request: Request,
    issue_id: String,
    summary: Option<String>,
    description: Option<String>,
    service_desk_id: Option<Value>,
    request_type_id: Option<Value>,
}

#[derive(Default)]
struct Inner {
    records: Mutex<Vec<Record>>,
    seen: Mutex<Vec<String>>,
    created: Mutex<Vec<Value>>,
    transitions: Mutex<Vec<(String, Value)>>,
    /// How many requests were created through the API.
    made: AtomicU32,
    auth: Mutex<Option<String>>,
    limited: AtomicU32,
    retry_after: AtomicU32,
    down: AtomicBool,
    /// The fake's own URL, for the links in its answers.
    url: Mutex<String>,
}

#[derive(Clone)]
pub struct FakeJira {
    pub url: String,
    inner: Arc<Inner>,
}

/// The number of the first request created through the API (`CHG-101`).
const FIRST_KEY: u32 = 101;
/// Issue ids are made up from here on, in the order the fake meets requests.
const FIRST_ISSUE_ID: u32 = 10001;

fn fixture(name: &str) -> Value {
    let path = crate::repository()
        .join("tests/fixtures/change/jira")
        .join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn status_category(status: &str) -> &'static str {
    match status {
        AWAITING_APPROVAL => "NEW",
        COMPLETED | FAILED | DECLINED | CANCELED => "DONE",
        _ => "INDETERMINATE",
    }
}

/// A made-up id for a service, the same for the same name in every run.
fn service_id(name: &str) -> String {
    let sum = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("{}", 10000 + sum % 90000)
}

fn value_or_null(s: &str) -> Value {
    if s.is_empty() {
        Value::Null
    } else {
        Value::String(s.into())
    }
}

/// The affected service as a field value: the services chosen, each with its id and name.
fn service_value(name: &str) -> Value {
    if name.is_empty() {
        Value::Null
    } else {
        json!([{ "id": service_id(name), "name": name }])
    }
}

/// The service a created request names: a name, or the first of a list of
/// `{"id"|"name"}` objects.
fn service_given(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.first().map(service_given).unwrap_or_default(),
        Value::Object(o) => o
            .get("name")
            .or_else(|| o.get("id"))
            .map(service_given)
            .unwrap_or_default(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Rewrites the example's links (`https://your-domain.atlassian.net`, its
/// issue 107001 and key HELPDESK-1) to the fake's URL and this request.
fn relink(links: &mut Value, base: &str, issue_id: &str, key: &str) {
    if let Value::Object(map) = links {
        for v in map.values_mut() {
            if let Value::String(s) = v {
                *s = s
                    .replace("https://your-domain.atlassian.net", base)
                    .replace("107001", issue_id)
                    .replace("HELPDESK-1", key);
            }
        }
    }
}

/// The example customer request with the fake's fields written over it.
fn render(template: &Value, r: &Record, base: &str) -> Value {
    let mut v = template.clone();
    let q = &r.request;
    v["issueId"] = Value::String(r.issue_id.clone());
    v["issueKey"] = Value::String(q.key.clone());
    if let Some(id) = &r.service_desk_id {
        v["serviceDeskId"] = id.clone();
    }
    if let Some(id) = &r.request_type_id {
        v["requestTypeId"] = id.clone();
    }
    let mut fields: Vec<Value> = v["requestFieldValues"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // A created request's summary and description are the ones it was
    // given; one given empty is not listed, as a field without a value.
    fields.retain_mut(|f| {
        let given = match f["fieldId"].as_str() {
            Some("summary") => &r.summary,
            Some("description") => &r.description,
            _ => &None,
        };
        match given {
            Some(text) if text.is_empty() => false,
            Some(text) => {
                f["value"] = Value::String(text.clone());
                if let Some(obj) = f.as_object_mut() {
                    obj.remove("renderedValue");
                }
                true
            }
            None => true,
        }
    });
    fields.push(json!({ "fieldId": START_FIELD, "label": "Planned start", "value": value_or_null(&q.start) }));
    fields.push(
        json!({ "fieldId": END_FIELD, "label": "Planned end", "value": value_or_null(&q.end) }),
    );
    fields.push(json!({ "fieldId": SERVICE_FIELD, "label": "Affected services", "value": service_value(&q.service) }));
    v["requestFieldValues"] = Value::Array(fields);
    v["currentStatus"]["status"] = Value::String(q.status.clone());
    v["currentStatus"]["statusCategory"] = Value::String(status_category(&q.status).into());
    relink(&mut v["_links"], base, &r.issue_id, &q.key);
    v
}

/// A page of `values` as the API pages them: all on one page.
fn one_page(page: &mut Value, values: Vec<Value>, base: &str) {
    page["size"] = json!(values.len());
    page["start"] = json!(0);
    page["limit"] = json!(50);
    page["isLastPage"] = json!(true);
    page["_links"] = json!({ "base": format!("{base}/rest/servicedeskapi"), "context": "context" });
    page["values"] = Value::Array(values);
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(fixture("error.404.jsm-schema.json")),
    )
        .into_response()
}

impl FakeJira {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/rest/servicedeskapi/request", post(create))
            .route("/rest/servicedeskapi/request/{key}", get(get_request))
            .route(
                "/rest/servicedeskapi/request/{key}/approval",
                get(approvals),
            )
            .route(
                "/rest/servicedeskapi/request/{key}/transition",
                get(transitions).post(transition),
            )
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        *inner.url.lock().unwrap() = url.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, inner }
    }

    /// Wants basic auth with this Atlassian account email and API token;
    /// anything else is 401 with Jira's error body.
    pub fn require_basic(&self, email: &str, api_token: &str) {
        *self.inner.auth.lock().unwrap() = Some(basic(email, api_token));
    }

    /// Adds a request, or replaces the one with its key (which keeps its issue id).
    pub fn put(&self, r: Request) {
        let mut records = self.inner.records.lock().unwrap();
        if let Some(old) = records.iter_mut().find(|old| old.request.key == r.key) {
            old.request = r;
            return;
        }
        let issue_id = (FIRST_ISSUE_ID + records.len() as u32).to_string();
        records.push(Record {
            request: r,
            issue_id,
            summary: None,
            description: None,
            service_desk_id: None,
            request_type_id: None,
        });
    }

    fn update(&self, key: &str, f: impl FnOnce(&mut Request)) {
        let mut records = self.inner.records.lock().unwrap();
        let r = records
            .iter_mut()
            .find(|r| r.request.key == key)
            .unwrap_or_else(|| panic!("the fake Jira has no request {key}"));
        f(&mut r.request);
    }

    /// The approvers approve it: the approval is `approved` and the request
    /// moves on to [`AWAITING_IMPLEMENTATION`].
    pub fn approve(&self, key: &str) {
        self.update(key, |r| {
            r.approval = "approved".into();
            r.status = AWAITING_IMPLEMENTATION.into();
        });
    }

    /// The approvers decline it: the approval is `declined` and the request
    /// ends [`DECLINED`].
    pub fn decline(&self, key: &str) {
        self.update(key, |r| {
            r.approval = "declined".into();
            r.status = DECLINED.into();
        });
    }

    /// The request as it is now (after transitions), if there is one.
    pub fn request(&self, key: &str) -> Option<Request> {
        let records = self.inner.records.lock().unwrap();
        records
            .iter()
            .find(|r| r.request.key == key)
            .map(|r| r.request.clone())
    }

    /// The next `next` requests are answered 429 with `Retry-After:
    /// retry_after_secs`, `X-RateLimit-Reset` and `RateLimit-Reason`, the
    /// headers Atlassian documents (it documents no body; none is sent).
    pub fn rate_limit(&self, next: u32, retry_after_secs: u32) {
        self.inner
            .retry_after
            .store(retry_after_secs, Ordering::SeqCst);
        self.inner.limited.store(next, Ordering::SeqCst);
    }

    /// Answers 503 with no body.
    pub fn down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    /// Every request, in order: `GET /rest/servicedeskapi/request/CHG-12`.
    pub fn requests(&self) -> Vec<String> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// The bodies POSTed to create a request, in order.
    pub fn created(&self) -> Vec<Value> {
        self.inner.created.lock().unwrap().clone()
    }

    /// Every transition POSTed: the key as given in the path, and the body.
    pub fn transitions(&self) -> Vec<(String, Value)> {
        self.inner.transitions.lock().unwrap().clone()
    }
}

/// Records the request, then refuses it as a down, locked or rate limited site would.
fn refusal(inner: &Inner, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Response> {
    inner.seen.lock().unwrap().push(request_line(method, uri));
    if inner.down.load(Ordering::SeqCst) {
        return Some(StatusCode::SERVICE_UNAVAILABLE.into_response());
    }
    let wanted = inner.auth.lock().unwrap().clone();
    if let Some(wanted) = wanted {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if given != wanted {
            return Some(
                (
                    StatusCode::UNAUTHORIZED,
                    Json(fixture("error.401.jira-openapi-example.json")),
                )
                    .into_response(),
            );
        }
    }
    let limited = inner
        .limited
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if limited {
        let secs = inner.retry_after.load(Ordering::SeqCst);
        // `yyyy-MM-ddTHH:mmZ`, the request's time plus Retry-After.
        let reset =
            humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(secs.into()))
                .to_string();
        return Some(
            (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    ("retry-after", secs.to_string()),
                    ("x-ratelimit-reset", format!("{}Z", &reset[..16])),
                    ("ratelimit-reason", "jira-quota-based".to_string()),
                ],
            )
                .into_response(),
        );
    }
    None
}

/// Finds a request by its key or its issue id (the API takes either).
fn find<'a>(records: &'a mut [Record], key: &str) -> Option<&'a mut Record> {
    records
        .iter_mut()
        .find(|r| r.request.key == key || r.issue_id == key)
}

async fn get_request(
    State(inner): State<Arc<Inner>>,
    Path(key): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let base = inner.url.lock().unwrap().clone();
    let mut records = inner.records.lock().unwrap();
    let Some(r) = find(&mut records, &key) else {
        return not_found();
    };
    Json(render(
        &fixture("request.get.jsm-openapi-example.json"),
        r,
        &base,
    ))
    .into_response()
}

async fn approvals(
    State(inner): State<Arc<Inner>>,
    Path(key): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let base = inner.url.lock().unwrap().clone();
    let mut records = inner.records.lock().unwrap();
    let Some(r) = find(&mut records, &key) else {
        return not_found();
    };
    let mut page = fixture("approval.list.jsm-openapi-example.json");
    let mut values = Vec::new();
    let decision = r.request.approval.as_str();
    if !decision.is_empty() {
        let mut approval = page["values"][0].clone();
        approval["finalDecision"] = json!(decision);
        approval["canAnswerApproval"] = json!(decision == "pending");
        if let Some(approvers) = approval["approvers"].as_array_mut() {
            for a in approvers {
                a["approverDecision"] = json!(decision);
            }
        }
        if decision == "pending" {
            if let Some(obj) = approval.as_object_mut() {
                obj.remove("completedDate");
            }
        }
        approval["_links"]["self"] = json!(format!(
            "{base}/rest/servicedeskapi/request/{}/approval/1",
            r.issue_id
        ));
        values.push(approval);
    }
    one_page(&mut page, values, &base);
    Json(page).into_response()
}

fn offered(status: &str) -> impl Iterator<Item = &'static Transition> + '_ {
    TRANSITIONS.iter().filter(move |t| t.from.contains(&status))
}

async fn transitions(
    State(inner): State<Arc<Inner>>,
    Path(key): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let base = inner.url.lock().unwrap().clone();
    let mut records = inner.records.lock().unwrap();
    let Some(r) = find(&mut records, &key) else {
        return not_found();
    };
    let mut page = fixture("transition.list.jsm-openapi-example.json");
    let values = offered(&r.request.status)
        .map(|t| json!({ "id": t.id, "name": t.name }))
        .collect();
    one_page(&mut page, values, &base);
    Json(page).into_response()
}

/// Moves the request along a transition it is offered; 204, as Jira answers.
/// A transition not offered in its status is 400.
async fn transition(
    State(inner): State<Arc<Inner>>,
    Path(key): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut records = inner.records.lock().unwrap();
    let Some(r) = find(&mut records, &key) else {
        return not_found();
    };
    inner
        .transitions
        .lock()
        .unwrap()
        .push((key.clone(), body.clone()));
    let id = match &body["id"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    let Some(t) = offered(&r.request.status).find(|t| t.id == id) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(fixture("error.400.transition.jsm-schema.json")),
        )
            .into_response();
    };
    r.request.status = t.to.into();
    StatusCode::NO_CONTENT.into_response()
}

/// Creates a request awaiting approval, `CHG-101`, `CHG-102`, …, from the
/// body's `requestFieldValues`; 201 with the request.
async fn create(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    inner.created.lock().unwrap().push(body.clone());
    let fields: Map<String, Value> = body["requestFieldValues"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let text = |name: &str| match fields.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let key = format!(
        "CHG-{}",
        FIRST_KEY + inner.made.fetch_add(1, Ordering::SeqCst)
    );
    let base = inner.url.lock().unwrap().clone();
    let mut records = inner.records.lock().unwrap();
    let issue_id = (FIRST_ISSUE_ID + records.len() as u32).to_string();
    let record = Record {
        request: Request {
            key,
            status: AWAITING_APPROVAL.into(),
            approval: "pending".into(),
            start: text(START_FIELD),
            end: text(END_FIELD),
            service: fields
                .get(SERVICE_FIELD)
                .map(service_given)
                .unwrap_or_default(),
        },
        issue_id,
        summary: Some(text("summary")),
        description: Some(text("description")),
        service_desk_id: body.get("serviceDeskId").cloned(),
        request_type_id: body.get("requestTypeId").cloned(),
    };
    let answer = render(
        &fixture("request.create.jsm-openapi-example.json"),
        &record,
        &base,
    );
    records.push(record);
    (StatusCode::CREATED, Json(answer)).into_response()
}
