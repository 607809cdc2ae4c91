//! GitHub webhook payloads for tests, built from the real ones in
//! `../shared/fixtures/github/` with only the fields a test cares about changed.

use serde_json::{json, Value};

pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/github");

pub fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}"))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// A comment on PR `pr` of acme/shop, from the real PR-comment payload.
pub fn comment(pr: u64, comment_id: u64, user: &str, body: &str) -> Value {
    let mut p = fixture("issue_comment.created.on-pull-request.rust-lang-bors.json");
    p["repository"]["full_name"] = json!("acme/shop");
    p["repository"]["name"] = json!("shop");
    p["issue"]["number"] = json!(pr);
    p["comment"]["id"] = json!(comment_id);
    p["comment"]["body"] = json!(body);
    p["comment"]["user"]["login"] = json!(user);
    p
}
