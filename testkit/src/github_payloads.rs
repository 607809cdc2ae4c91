//! GitHub webhook payloads for tests, built from the real ones in
//! `tests/fixtures/github/` with only the fields a test cares about changed.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// `tests/fixtures/github/` of the repository.
pub fn fixtures() -> PathBuf {
    crate::repository().join("tests/fixtures/github")
}

/// The fixture `name` as JSON; a missing or broken file fails the test with its path.
pub fn fixture(name: &str) -> Value {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// A time as GitHub writes it, `ms` Unix milliseconds (with milliseconds, so
/// that tests a few milliseconds apart stay in order).
pub fn github_time(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A comment on PR `pr` of acme/shop, from the real PR-comment payload,
/// written now.
pub fn comment(pr: u64, comment_id: u64, user: &str, body: &str) -> Value {
    comment_at(pr, comment_id, user, body, now_ms())
}

/// The same, written at `written_ms` (GitHub's `created_at` and `updated_at`).
pub fn comment_at(pr: u64, comment_id: u64, user: &str, body: &str, written_ms: i64) -> Value {
    let mut p = fixture("issue_comment.created.on-pull-request.rust-lang-bors.json");
    p["repository"]["full_name"] = json!("acme/shop");
    p["repository"]["name"] = json!("shop");
    p["issue"]["number"] = json!(pr);
    p["comment"]["id"] = json!(comment_id);
    p["comment"]["body"] = json!(body);
    p["comment"]["user"]["login"] = json!(user);
    // GitHub's sender is who acted: the writer (an edit's sender is its editor).
    p["sender"]["login"] = json!(user);
    p["comment"]["created_at"] = json!(github_time(written_ms));
    p["comment"]["updated_at"] = json!(github_time(written_ms));
    p
}

/// A click on button `identifier` of `run` by `user`, from the real
/// `check_run.requested_action` payload; `run` is the run as GitHub keeps it.
pub fn check_run_click(run: &Value, identifier: &str, user: &str) -> Value {
    let mut p = fixture("check_run.requested_action.json");
    p["repository"]["full_name"] = json!("acme/shop");
    p["repository"]["name"] = json!("shop");
    for field in [
        "id",
        "head_sha",
        "external_id",
        "status",
        "conclusion",
        "output",
        "started_at",
    ] {
        p["check_run"][field] = run[field].clone();
    }
    p["check_run"]["name"] = run["name"].clone();
    p["requested_action"]["identifier"] = json!(identifier);
    p["sender"]["login"] = json!(user);
    p
}

/// Posts `payload` to the GitHub webhook of the gatebot at `base` as GitHub
/// does: event `event`, delivery `guid`, signed with `secret`. The status and
/// the body of the answer.
pub async fn deliver_signed(
    base: &str,
    secret: &str,
    event: &str,
    guid: &str,
    payload: &Value,
) -> (u16, String) {
    let body = serde_json::to_vec(payload).unwrap();
    let r = crate::harness::client()
        .post(format!("{base}/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", guid)
        .header(
            "x-hub-signature-256",
            gatebot::testing::github::verify::sign(secret, &body),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}
