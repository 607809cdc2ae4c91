//! The few fields of GitHub webhook payloads that gatebot reads. Every field has
//! a default and unknown fields are ignored, so a payload GitHub changes or
//! extends never fails to parse. The same structs are what the inbox stores:
//! a trimmed copy of the delivery instead of up to 25 MB of raw JSON.

use serde::{Deserialize, Serialize};

use crate::gate::{PrNumber, RepoName};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct User {
    pub login: String,
    /// `User`, `Bot`, `Organization`, or whatever GitHub adds.
    #[serde(rename = "type")]
    pub kind: String,
}

impl User {
    pub fn is_bot(&self) -> bool {
        self.kind.eq_ignore_ascii_case("bot") || self.login.to_ascii_lowercase().ends_with("[bot]")
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Repository {
    pub full_name: String,
}

impl Repository {
    pub fn name(&self) -> Option<RepoName> {
        self.full_name.parse().ok()
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Installation {
    pub id: u64,
}

/// `issue.pull_request`: present only when the issue is a pull request.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct IssuePullRequest {
    /// Absent on older GitHub Enterprise servers; `Some(None)` means "not merged".
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub merged_at: Option<Option<String>>,
}

/// Tells a field that is `null` from one that is missing.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::deserialize(d)?))
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Issue {
    pub number: u64,
    /// `open` or `closed`.
    pub state: String,
    pub user: User,
    pub pull_request: Option<IssuePullRequest>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Comment {
    pub id: u64,
    pub body: Option<String>,
    pub user: User,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct BodyChange {
    pub from: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Changes {
    pub body: Option<BodyChange>,
}

/// `issue_comment`: created, edited, deleted.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct IssueCommentEvent {
    pub action: String,
    pub issue: Issue,
    pub comment: Comment,
    pub changes: Option<Changes>,
    pub repository: Repository,
    pub installation: Option<Installation>,
}

impl IssueCommentEvent {
    pub fn on_pull_request(&self) -> bool {
        self.issue.pull_request.is_some()
    }

    pub fn pr(&self) -> Option<(RepoName, PrNumber)> {
        Some((self.repository.name()?, PrNumber(self.issue.number)))
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct PullRequest {
    pub number: u64,
    pub state: String,
    pub merged: Option<bool>,
    pub user: User,
}

/// `pull_request`: synchronize, closed, and many actions gatebot ignores.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct PullRequestEvent {
    pub action: String,
    pub number: u64,
    pub pull_request: PullRequest,
    pub repository: Repository,
    pub installation: Option<Installation>,
    pub sender: User,
    /// The new head commit on `synchronize`.
    pub after: Option<String>,
}

impl PullRequestEvent {
    pub fn pr(&self) -> Option<(RepoName, PrNumber)> {
        let n = if self.number != 0 {
            self.number
        } else {
            self.pull_request.number
        };
        Some((self.repository.name()?, PrNumber(n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../shared/fixtures/github/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path)
            .or_else(|_| std::fs::read_to_string(format!("/work/shared/fixtures/github/{name}")))
            .unwrap_or_default()
    }

    #[test]
    fn real_payloads_parse() {
        let text = fixture("issue_comment.created.on-pull-request.rust-lang-bors.json");
        if text.is_empty() {
            return; // fixtures live outside the repository; tests/github.rs covers them too
        }
        let e: IssueCommentEvent = serde_json::from_str(&text).unwrap();
        assert!(e.on_pull_request());
        assert_eq!(e.issue.pull_request.unwrap().merged_at, Some(None));
        assert_eq!(e.comment.body.as_deref(), Some("hello bors"));
        assert_eq!(e.repository.full_name, "Kobzol/bors-kindergarten");
        assert_eq!(e.installation.unwrap().id, 32739733);

        let e: IssueCommentEvent =
            serde_json::from_str(&fixture("issue_comment.edited.json")).unwrap();
        assert!(!e.on_pull_request());
        assert!(e
            .changes
            .unwrap()
            .body
            .unwrap()
            .from
            .starts_with("You are totally right"));

        let e: PullRequestEvent =
            serde_json::from_str(&fixture("pull_request.synchronize.json")).unwrap();
        assert_eq!(e.action, "synchronize");
        assert_eq!(e.pr().unwrap().1, PrNumber(2));
    }

    #[test]
    fn odd_payloads_never_reject() {
        let e: IssueCommentEvent = serde_json::from_str(
            r#"{"action":"transferred","issue":{"number":3,"pull_request":{},"user":{"type":"Mannequin"}},"comment":{"body":null},"extra":[1,2]}"#,
        )
        .unwrap();
        assert_eq!(e.action, "transferred");
        let pr = e.issue.pull_request.unwrap();
        assert_eq!(pr.merged_at, None, "absent, not null");
        let _: PullRequestEvent = serde_json::from_str("{}").unwrap();
    }

    #[test]
    fn bots_are_recognised() {
        let u = |login: &str, kind: &str| User {
            login: login.into(),
            kind: kind.into(),
        };
        assert!(u("dependabot[bot]", "Bot").is_bot());
        assert!(u("renovate[bot]", "User").is_bot());
        assert!(!u("alice", "User").is_bot());
    }
}
