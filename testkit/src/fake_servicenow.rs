//! A fake ServiceNow instance speaking the Change Management API
//! (`/api/sn_chg_rest/change…`), so that tests read, create and close change
//! requests over real HTTP in the wire format an instance answers.
//!
//! Every answer is a fixture of tests/fixtures/change/servicenow/ (copied from
//! ServiceNow's documentation of the API) with only the fields the fake keeps
//! overwritten: `sys_id`, `number`, `state`, `approval`, `start_date`,
//! `end_date`, `cmdb_ci`, `business_service`, `type`, `close_code`,
//! `close_notes` and what follows from them (`active`, `closed_at`). Each
//! field is an object of `value` and `display_value`, as the API answers;
//! `state` is a number (`-2.0`), dates are `YYYY-MM-DD HH:MM:SS` in UTC (the
//! fake's user is in UTC, so the display value is the same text).
//!
//! Routes: `GET /api/sn_chg_rest/change` (`sysparm_query=number=CHG…`, or
//! `number=CHG…`), `GET` and `PATCH /api/sn_chg_rest/change/{sys_id}`,
//! `POST /api/sn_chg_rest/change/normal` and
//! `POST /api/sn_chg_rest/change/standard/{template}`. It can want basic auth
//! (401 with ServiceNow's body otherwise), be rate limited (429, `Retry-After`
//! and the rate limit body) or be down (503), and it records every request.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

/// A change request as a test sets it up and reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `CHG0031337`.
    pub number: String,
    /// The `approval` field's value: `approved`, `requested`, `rejected` or
    /// `not requested`.
    pub approval: String,
    /// The `state` field's value: -5 New, -4 Assess, -3 Authorize,
    /// -2 Scheduled, -1 Implement, 0 Review, 3 Closed, 4 Canceled.
    pub state: i32,
    /// The planned start (`start_date`), `2026-12-07 08:00:00` in UTC; may be "".
    pub start: String,
    /// The planned end (`end_date`), same format; may be "".
    pub end: String,
    /// The configuration item's name (`cmdb_ci.display_value`); may be "".
    pub cmdb_ci: String,
    /// The business service's name (`business_service.display_value`); may be "".
    pub business_service: String,
}

impl Change {
    /// A normal change naming configuration item `ci`, planned from `from`
    /// to `to` (milliseconds since the epoch), with its approval `approval`
    /// (and the state a change has then: Scheduled once approved, else Assess).
    pub fn planned(number: &str, approval: &str, from: i64, to: i64, ci: &str) -> Self {
        Self {
            number: number.into(),
            approval: approval.into(),
            state: if approval == "approved" { -2 } else { -4 },
            start: time(from),
            end: time(to),
            cmdb_ci: ci.into(),
            business_service: String::new(),
        }
    }
}

/// ServiceNow's `2026-12-07 08:00:00` (UTC) of `ms` since the epoch.
pub fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}

/// What the fake keeps of a change beyond what a test sets.
struct Record {
    change: Change,
    sys_id: String,
    /// `normal`, `standard`.
    kind: String,
    /// The standard change template it was made from.
    template: Option<String>,
    short_description: Option<String>,
    description: Option<String>,
    close_code: String,
    close_notes: String,
    /// When it reached Closed or Canceled, `YYYY-MM-DD HH:MM:SS` UTC.
    closed_at: Option<String>,
}

#[derive(Default)]
struct Inner {
    records: Mutex<Vec<Record>>,
    seen: Mutex<Vec<String>>,
    created: Mutex<Vec<Value>>,
    patches: Mutex<Vec<(String, Value)>>,
    /// How many changes were created through the API.
    made: AtomicU32,
    /// The `Authorization` header wanted, if any.
    auth: Mutex<Option<String>>,
    /// Requests still to be answered 429, and the Retry-After they get.
    limited: AtomicU32,
    retry_after: AtomicU32,
    down: AtomicBool,
    /// How long a write (a create or a PATCH) takes to be answered, in ms.
    write_latency: AtomicU64,
    /// How many more PATCHes are applied and then answered 502.
    lost_answers: AtomicU32,
    /// How long the next read (a GET by number) takes, in ms; then none.
    next_read_latency: AtomicU64,
}

#[derive(Clone)]
pub struct FakeServiceNow {
    pub url: String,
    inner: Arc<Inner>,
}

/// The first number the API gives a change it creates.
const FIRST_NUMBER: u32 = 40001;

fn fixture(name: &str) -> Value {
    let path = crate::repository()
        .join("tests/fixtures/change/servicenow")
        .join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// A made-up sys_id (32 hex digits, as ServiceNow's are), the same for the
/// same table and key in every run.
fn made_up_sys_id(table: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{table}:{key}").as_bytes());
    hex::encode(digest)[..32].to_string()
}

/// `Basic base64(user:password)`.
pub(crate) fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// `GET /path?k=v&…`, the query decoded, as a test writes it.
pub(crate) fn request_line(method: &Method, uri: &Uri) -> String {
    match uri.query() {
        Some(query) if !query.is_empty() => {
            let decoded: Vec<String> = form_urlencoded::parse(query.as_bytes())
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("{method} {}?{}", uri.path(), decoded.join("&"))
        }
        _ => format!("{method} {}", uri.path()),
    }
}

/// Now, as ServiceNow writes a date: `YYYY-MM-DD HH:MM:SS` (UTC).
fn now_glide() -> String {
    let rfc = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    rfc.trim_end_matches('Z').replace('T', " ")
}

fn state_label(state: i32) -> &'static str {
    match state {
        -5 => "New",
        -4 => "Assess",
        -3 => "Authorize",
        -2 => "Scheduled",
        -1 => "Implement",
        0 => "Review",
        3 => "Closed",
        4 => "Canceled",
        _ => "",
    }
}

/// A state as a PATCH may give it: `3`, `"3"`, `"-2"`, or its label.
fn parse_state(value: &Value) -> Option<i32> {
    match value {
        Value::Number(n) => n.as_f64().map(|f| f as i32),
        Value::String(s) => s.trim().parse::<f64>().map(|f| f as i32).ok().or_else(|| {
            let s = s.trim().to_lowercase();
            [-5, -4, -3, -2, -1, 0, 3, 4]
                .into_iter()
                .find(|&n| state_label(n).to_lowercase() == s)
                .or((s == "cancelled").then_some(4))
        }),
        _ => None,
    }
}

fn approval_label(approval: &str) -> String {
    match approval {
        "approved" => "Approved".into(),
        "requested" => "Requested".into(),
        "rejected" => "Rejected".into(),
        "not requested" => "Not Yet Requested".into(),
        other => other.into(),
    }
}

fn close_code_label(code: &str) -> String {
    match code {
        "successful" => "Successful".into(),
        "successful_issues" => "Successful with issues".into(),
        "unsuccessful" => "Unsuccessful".into(),
        other => other.into(),
    }
}

fn type_label(kind: &str) -> String {
    match kind {
        "normal" => "Normal".into(),
        "standard" => "Standard".into(),
        "emergency" => "Emergency".into(),
        other => other.into(),
    }
}

fn field(value: Value, display: &str) -> Value {
    json!({ "display_value": display, "value": value })
}

fn text(s: &str) -> Value {
    field(Value::String(s.into()), s)
}

fn date(s: &str) -> Value {
    json!({ "display_value": s, "value": s, "display_value_internal": s })
}

/// A reference field: the record's made-up sys_id, and its name to display.
fn reference(table: &str, name: &str) -> Value {
    if name.is_empty() {
        text("")
    } else {
        field(Value::String(made_up_sys_id(table, name)), name)
    }
}

/// The fixture's change record with the fake's fields written over it.
fn render(template: &Value, r: &Record) -> Value {
    let mut v = template.clone();
    let c = &r.change;
    v["sys_id"] = text(&r.sys_id);
    v["number"] = text(&c.number);
    v["task_effective_number"] = text(&c.number);
    v["state"] = field(json!(f64::from(c.state)), state_label(c.state));
    v["approval"] = field(
        Value::String(c.approval.clone()),
        &approval_label(&c.approval),
    );
    v["start_date"] = date(&c.start);
    v["end_date"] = date(&c.end);
    v["cmdb_ci"] = reference("cmdb_ci", &c.cmdb_ci);
    v["business_service"] = reference("cmdb_ci_service", &c.business_service);
    v["type"] = field(Value::String(r.kind.clone()), &type_label(&r.kind));
    v["std_change_producer_version"] = match &r.template {
        Some(t) => text(t),
        None => text(""),
    };
    v["close_code"] = field(
        Value::String(r.close_code.clone()),
        &close_code_label(&r.close_code),
    );
    v["close_notes"] = text(&r.close_notes);
    let open = !matches!(c.state, 3 | 4);
    v["active"] = field(Value::Bool(open), if open { "true" } else { "false" });
    match &r.closed_at {
        Some(at) if !open => v["closed_at"] = date(at),
        _ => {
            v["closed_at"] = date("");
            v["closed_by"] = text("");
        }
    }
    if let Some(s) = &r.short_description {
        v["short_description"] = text(s);
    }
    if let Some(s) = &r.description {
        v["description"] = text(s);
    }
    v
}

/// A JSON object body; an empty body is an empty object.
fn body_json(body: &Bytes) -> Option<Map<String, Value>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Some(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// A body that is not a JSON object: a bare 400 (no body of ServiceNow's for
/// it is published, and gatebot sends none such).
fn bad_request() -> Response {
    StatusCode::BAD_REQUEST.into_response()
}

/// The URL's name-value pairs, then the JSON body's over them: the API takes
/// a change's fields from either. `None` if the body is not a JSON object.
fn fields_of(uri: &Uri, body: &Bytes) -> Option<Map<String, Value>> {
    let mut fields: Map<String, Value> = uri
        .query()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .filter(|(k, _)| !k.starts_with("sysparm_"))
                .map(|(k, v)| (k, Value::String(v)))
                .collect()
        })
        .unwrap_or_default();
    fields.extend(body_json(body)?);
    Some(fields)
}

fn string_field(fields: &Map<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

impl FakeServiceNow {
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/api/sn_chg_rest/change", get(list))
            .route(
                "/api/sn_chg_rest/change/{sys_id}",
                get(get_one).patch(patch),
            )
            .route("/api/sn_chg_rest/change/normal", post(create_normal))
            .route(
                "/api/sn_chg_rest/change/standard/{template}",
                post(create_standard),
            )
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, inner }
    }

    /// Wants basic auth with this user and password; anything else is 401
    /// with ServiceNow's "User Not Authenticated" body.
    pub fn require_basic(&self, user: &str, password: &str) {
        *self.inner.auth.lock().unwrap() = Some(basic(user, password));
    }

    /// Adds a change, or replaces the one with its number (which keeps its
    /// sys_id, made up from the number). A change put here is of type normal.
    pub fn put(&self, change: Change) {
        let mut records = self.inner.records.lock().unwrap();
        if let Some(r) = records
            .iter_mut()
            .find(|r| r.change.number == change.number)
        {
            if matches!(change.state, 3 | 4) && r.closed_at.is_none() {
                r.closed_at = Some(now_glide());
            }
            r.change = change;
            return;
        }
        records.push(Record {
            sys_id: made_up_sys_id("change_request", &change.number),
            kind: "normal".into(),
            template: None,
            short_description: None,
            description: None,
            close_code: String::new(),
            close_notes: String::new(),
            closed_at: matches!(change.state, 3 | 4).then(now_glide),
            change,
        });
    }

    fn update(&self, number: &str, f: impl FnOnce(&mut Record)) {
        let mut records = self.inner.records.lock().unwrap();
        let r = records
            .iter_mut()
            .find(|r| r.change.number == number)
            .unwrap_or_else(|| panic!("the fake ServiceNow has no change {number}"));
        f(r);
    }

    /// The approvers approve it: `approval` approved, state Scheduled (-2).
    pub fn approve(&self, number: &str) {
        self.update(number, |r| {
            r.change.approval = "approved".into();
            r.change.state = -2;
        });
    }

    /// The approvers reject it: `approval` rejected, and state New (-5), as
    /// ServiceNow sets a rejected normal or emergency change back to New
    /// (not Canceled) so that it can be reworked and resubmitted.
    pub fn reject(&self, number: &str) {
        self.update(number, |r| {
            r.change.approval = "rejected".into();
            r.change.state = -5;
        });
    }

    /// The change as it is now (after PATCHes), if there is one.
    pub fn change(&self, number: &str) -> Option<Change> {
        let records = self.inner.records.lock().unwrap();
        records
            .iter()
            .find(|r| r.change.number == number)
            .map(|r| r.change.clone())
    }

    /// The change's sys_id, the id of `GET`/`PATCH /api/sn_chg_rest/change/{sys_id}`.
    pub fn sys_id(&self, number: &str) -> Option<String> {
        let records = self.inner.records.lock().unwrap();
        records
            .iter()
            .find(|r| r.change.number == number)
            .map(|r| r.sys_id.clone())
    }

    /// The next `next` requests are answered 429 with `Retry-After:
    /// retry_after_secs` and ServiceNow's rate limit body.
    pub fn rate_limit(&self, next: u32, retry_after_secs: u32) {
        self.inner
            .retry_after
            .store(retry_after_secs, Ordering::SeqCst);
        self.inner.limited.store(next, Ordering::SeqCst);
    }

    /// The next read of a change by number is answered only after `latency`
    /// (the reads after it at once): one caller reads late, as one replica
    /// far from the instance does.
    pub fn slow_next_read(&self, latency: Duration) {
        self.inner
            .next_read_latency
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// The next `n` PATCHes are applied and then answered 502, as a gateway
    /// in front of the instance that timed out does: the caller cannot know.
    pub fn lose_answers(&self, n: u32) {
        self.inner.lost_answers.store(n, Ordering::SeqCst);
    }

    /// Answers 503 with no body, as an instance in maintenance (or a proxy
    /// in front of a stopped one) does.
    pub fn down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    /// Each create and PATCH is answered only after `latency`, as a busy
    /// instance does: callers that race overlap.
    pub fn slow_writes(&self, latency: Duration) {
        self.inner
            .write_latency
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// Every request, in order: `GET /api/sn_chg_rest/change?sysparm_query=number=CHG0031337`
    /// (the query decoded), `PATCH /api/sn_chg_rest/change/{sys_id}`.
    pub fn requests(&self) -> Vec<String> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// The fields of every change created, in order: the JSON body with the
    /// URL's name-value pairs under it.
    pub fn created(&self) -> Vec<Value> {
        self.inner.created.lock().unwrap().clone()
    }

    /// Every PATCH: the change's number and the fields it set (the JSON body
    /// with the URL's name-value pairs under it).
    pub fn patches(&self) -> Vec<(String, Value)> {
        self.inner.patches.lock().unwrap().clone()
    }
}

/// Records the request, then refuses it as a down, locked or rate limited
/// instance would.
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
                    Json(fixture("error.401.sn-docs.json")),
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
        let reset = (SystemTime::now() + Duration::from_secs(secs.into()))
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        return Some(
            (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    ("retry-after", secs.to_string()),
                    ("x-ratelimit-limit", "100".to_string()),
                    ("x-ratelimit-reset", reset.to_string()),
                ],
                Json(fixture("error.429.sn-docs.json")),
            )
                .into_response(),
        );
    }
    None
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(fixture("error.404.kafka-docker-playground-capture.json")),
    )
        .into_response()
}

/// The change number a list query asks for: `sysparm_query=number=CHG…`
/// (one condition of an `^`-joined query), or the `number=CHG…` pair.
fn number_asked(uri: &Uri) -> Option<String> {
    let pairs: Vec<(String, String)> = uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    for (k, v) in &pairs {
        if k == "sysparm_query" {
            if let Some(n) = v.split('^').find_map(|c| c.strip_prefix("number=")) {
                return Some(n.to_string());
            }
        }
    }
    pairs
        .into_iter()
        .find(|(k, _)| k == "number")
        .map(|(_, v)| v)
}

async fn list(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let late = inner.next_read_latency.swap(0, Ordering::SeqCst);
    if late > 0 {
        tokio::time::sleep(Duration::from_millis(late)).await;
    }
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let asked = number_asked(&uri);
    let mut body = fixture("change.get-by-number.sn-docs.json");
    let template = body["result"][0].clone();
    let records = inner.records.lock().unwrap();
    let result: Vec<Value> = records
        .iter()
        .filter(|r| asked.as_ref().is_none_or(|n| &r.change.number == n))
        .map(|r| render(&template, r))
        .collect();
    body["result"] = Value::Array(result);
    Json(body).into_response()
}

async fn get_one(
    State(inner): State<Arc<Inner>>,
    Path(sys_id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let mut body = fixture("change.get.sn-docs.json");
    let records = inner.records.lock().unwrap();
    let Some(r) = records.iter().find(|r| r.sys_id == sys_id) else {
        return not_found();
    };
    body["result"] = render(&body["result"], r);
    Json(body).into_response()
}

async fn patch(
    State(inner): State<Arc<Inner>>,
    Path(sys_id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write_latency(&inner).await;
    if let Some(refused) = refusal(&inner, &method, &uri, &headers) {
        return refused;
    }
    let Some(fields) = fields_of(&uri, &body) else {
        return bad_request();
    };
    let mut answer = fixture("change.patch.sn-docs.json");
    let mut records = inner.records.lock().unwrap();
    let Some(r) = records.iter_mut().find(|r| r.sys_id == sys_id) else {
        return not_found();
    };
    inner
        .patches
        .lock()
        .unwrap()
        .push((r.change.number.clone(), Value::Object(fields.clone())));
    if let Some(state) = fields.get("state").and_then(parse_state) {
        if matches!(state, 3 | 4) && !matches!(r.change.state, 3 | 4) {
            r.closed_at = Some(now_glide());
        }
        r.change.state = state;
    }
    if let Some(code) = string_field(&fields, "close_code") {
        r.close_code = code;
    }
    if let Some(notes) = string_field(&fields, "close_notes") {
        r.close_notes = notes;
    }
    let lost = inner
        .lost_answers
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    if lost.is_ok() {
        return (StatusCode::BAD_GATEWAY, "Bad Gateway").into_response();
    }
    answer["result"] = render(&answer["result"], r);
    Json(answer).into_response()
}

async fn create_normal(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write_latency(&inner).await;
    create(&inner, &method, &uri, &headers, &body, None)
}

async fn write_latency(inner: &Inner) {
    let ms = inner.write_latency.load(Ordering::SeqCst);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn create_standard(
    State(inner): State<Arc<Inner>>,
    Path(template): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write_latency(&inner).await;
    create(&inner, &method, &uri, &headers, &body, Some(template))
}

/// A normal change is New and its approval not requested yet; a standard
/// change is pre-approved (approved, Scheduled): its template was authorized
/// once, so it skips Assess and Authorize. Answered 200 with the record and
/// `__meta.ignoredFields`, the fields given that the record has not.
fn create(
    inner: &Inner,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    template: Option<String>,
) -> Response {
    if let Some(refused) = refusal(inner, method, uri, headers) {
        return refused;
    }
    let Some(fields) = fields_of(uri, body) else {
        return bad_request();
    };
    inner
        .created
        .lock()
        .unwrap()
        .push(Value::Object(fields.clone()));
    let n = FIRST_NUMBER + inner.made.fetch_add(1, Ordering::SeqCst);
    let number = format!("CHG{n:07}");
    let (approval, state, kind) = match template {
        Some(_) => ("approved", -2, "standard"),
        None => ("not requested", -5, "normal"),
    };
    let record = Record {
        change: Change {
            number: number.clone(),
            approval: approval.into(),
            state,
            start: string_field(&fields, "start_date").unwrap_or_default(),
            end: string_field(&fields, "end_date").unwrap_or_default(),
            cmdb_ci: string_field(&fields, "cmdb_ci").unwrap_or_default(),
            business_service: string_field(&fields, "business_service").unwrap_or_default(),
        },
        sys_id: made_up_sys_id("change_request", &number),
        kind: kind.into(),
        template,
        short_description: Some(string_field(&fields, "short_description").unwrap_or_default()),
        description: Some(string_field(&fields, "description").unwrap_or_default()),
        close_code: String::new(),
        close_notes: String::new(),
        closed_at: None,
    };
    let mut answer = fixture("change.get.sn-docs.json");
    let known = answer["result"].clone();
    let mut result = render(&known, &record);
    let ignored: Vec<Value> = fields
        .keys()
        .filter(|k| known.get(k.as_str()).is_none())
        .map(|k| Value::String(k.clone()))
        .collect();
    result["__meta"] = json!({ "ignoredFields": ignored });
    answer["result"] = result;
    inner.records.lock().unwrap().push(record);
    Json(answer).into_response()
}
