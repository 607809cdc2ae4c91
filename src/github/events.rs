//! The few fields of GitHub webhook payloads that gatebot reads. Every field has
//! a default and unknown fields are ignored, so a payload GitHub changes or
//! extends never fails to parse. The same structs are what the inbox stores:
//! a trimmed copy of the delivery instead of up to 25 MB of raw JSON.

use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::gate::{GateKey, Millis, PrNumber, RepoName};

/// A time as GitHub writes it (`2024-05-01T14:02:00Z`), in Unix milliseconds.
fn github_time(text: &str) -> Option<Millis> {
    let t = humantime::parse_rfc3339(text.trim()).ok()?;
    Millis::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()
}

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
    /// When this version of the comment was written (an edit changes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
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
    /// Who did it: for an edit, the editor, who may not be the comment's
    /// author (anyone with write access may edit another's comment).
    pub sender: Option<User>,
}

impl IssueCommentEvent {
    /// An edit of someone else's comment: its commands would run as the
    /// author, who did not write them.
    pub fn edited_by_another(&self) -> bool {
        self.action == "edited"
            && self
                .sender
                .as_ref()
                .is_some_and(|s| !s.login.eq_ignore_ascii_case(&self.comment.user.login))
    }

    pub fn on_pull_request(&self) -> bool {
        self.issue.pull_request.is_some()
    }

    pub fn pr(&self) -> Option<(RepoName, PrNumber)> {
        Some((self.repository.name()?, PrNumber(self.issue.number)))
    }

    /// When this version of the comment was written, by GitHub's clock.
    pub fn written_at(&self) -> Option<Millis> {
        github_time(self.comment.updated_at.as_deref()?)
    }

    /// This version of the comment, from fields GitHub signs: its id, its
    /// `updated_at`, the action and its body. A redelivery or a replay has the
    /// same one whatever its `X-GitHub-Delivery` header says; an edit has a new one.
    /// None when the payload lacks them (GitHub always sends both).
    pub fn signed_id(&self) -> Option<String> {
        let at = self.comment.updated_at.as_deref()?.trim();
        if self.comment.id == 0 || self.written_at().is_none() {
            return None;
        }
        let body = Sha256::digest(self.comment.body.as_deref().unwrap_or("").as_bytes());
        let body = hex::encode(&body[..8]);
        Some(format!(
            "comment:{}:{at}:{}:{body}",
            self.comment.id, self.action
        ))
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct PullRequest {
    pub id: u64,
    pub number: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
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

    /// GitHub's time of this change to the pull request (of the push, on `synchronize`).
    pub fn updated_at(&self) -> Option<Millis> {
        github_time(self.pull_request.updated_at.as_deref()?)
    }

    /// When GitHub last changed the pull request, as it signed it.
    pub fn signed_at(&self) -> Option<Millis> {
        github_time(self.pull_request.updated_at.as_deref()?)
    }

    /// This event, from fields GitHub signs: the pull request, the action, the
    /// new head and the PR's `updated_at`. Equal for a redelivery or a replay.
    pub fn signed_id(&self) -> String {
        let pr = match self.pull_request.id {
            0 => format!("{}#{}", self.repository.full_name, self.number),
            id => id.to_string(),
        };
        format!(
            "pull_request:{pr}:{}:{}:{}",
            self.action,
            self.after.as_deref().unwrap_or(""),
            self.pull_request.updated_at.as_deref().unwrap_or("")
        )
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CheckRunOutput {
    pub title: Option<String>,
    pub summary: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CheckRun {
    pub id: u64,
    pub head_sha: String,
    /// What gatebot wrote there when it created the run: the gate's key.
    pub external_id: Option<String>,
    pub output: CheckRunOutput,
    /// When the run was created, by GitHub's clock.
    pub started_at: Option<String>,
}

impl CheckRun {
    pub fn started_at(&self) -> Option<Millis> {
        github_time(self.started_at.as_deref()?)
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct RequestedAction {
    pub identifier: String,
}

/// `check_run`: gatebot reads only `requested_action`, a click on one of its buttons.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CheckRunEvent {
    pub action: String,
    pub check_run: CheckRun,
    pub requested_action: Option<RequestedAction>,
    pub repository: Repository,
    pub installation: Option<Installation>,
    pub sender: User,
}

impl CheckRunEvent {
    /// The gate of a run gatebot made (its `external_id`).
    pub fn gate(&self) -> Option<GateKey> {
        GateKey::parse(self.check_run.external_id.as_deref()?, None).ok()
    }

    /// This click, from fields GitHub signs: the run, the button, who, and
    /// what the run showed when clicked. gatebot rewrites the run after every
    /// click, so a second click is a new id and a replay the same one.
    pub fn signed_id(&self) -> Option<String> {
        let button = self.requested_action.as_ref()?.identifier.as_str();
        if self.check_run.id == 0 || button.is_empty() || self.sender.login.is_empty() {
            return None;
        }
        let output = &self.check_run.output;
        let mut shown = Sha256::new();
        shown.update(output.title.as_deref().unwrap_or("").as_bytes());
        shown.update([0]);
        shown.update(output.summary.as_deref().unwrap_or("").as_bytes());
        let shown = hex::encode(&shown.finalize()[..8]);
        Some(format!(
            "check_run:{}:{button}:{}:{shown}",
            self.check_run.id,
            self.sender.login.to_ascii_lowercase()
        ))
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Review {
    pub id: u64,
    pub user: User,
    /// `approved`, `changes_requested`, `commented`, `dismissed`.
    pub state: String,
    /// The commit the reviewer looked at.
    pub commit_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<String>,
    /// What the reviewer wrote (null when nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// `pull_request_review.pull_request`: only its number matters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ReviewedPull {
    pub number: u64,
}

/// `pull_request_review`: submitted (an approval may count as `/promote`)
/// and dismissed (which takes that vote back).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct PullRequestReviewEvent {
    pub action: String,
    pub review: Review,
    pub pull_request: ReviewedPull,
    pub repository: Repository,
    pub installation: Option<Installation>,
    /// Who submitted or dismissed the review.
    pub sender: User,
}

impl PullRequestReviewEvent {
    pub fn pr(&self) -> Option<(RepoName, PrNumber)> {
        Some((self.repository.name()?, PrNumber(self.pull_request.number)))
    }

    pub fn approved(&self) -> bool {
        self.action == "submitted" && self.review.state.eq_ignore_ascii_case("approved")
    }

    pub fn dismissed(&self) -> bool {
        self.action == "dismissed"
    }

    /// When the review was submitted, by GitHub's clock.
    pub fn submitted_at(&self) -> Option<Millis> {
        github_time(self.review.submitted_at.as_deref()?)
    }

    /// This review's submission or dismissal, from fields GitHub signs: the
    /// review, the action, its state and when it was submitted. Equal for a
    /// redelivery or a replay. None when the payload lacks them.
    pub fn signed_id(&self) -> Option<String> {
        let at = self.review.submitted_at.as_deref()?.trim();
        if self.review.id == 0 || self.submitted_at().is_none() || self.pull_request.number == 0 {
            return None;
        }
        Some(format!(
            "review:{}:{}:{}:{at}",
            self.review.id,
            self.action,
            self.review.state.to_ascii_lowercase()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/github/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
    }

    #[test]
    fn real_payloads_parse() {
        let text = fixture("issue_comment.created.on-pull-request.rust-lang-bors.json");
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
    fn versions_of_a_comment_are_told_apart_by_signed_fields() {
        let text = fixture("issue_comment.created.on-pull-request.rust-lang-bors.json");
        let e: IssueCommentEvent = serde_json::from_str(&text).unwrap();
        let id = e.signed_id().unwrap();
        assert!(
            id.starts_with("comment:1420770715:2023-02-07T13:23:42Z:created:"),
            "{id}"
        );
        assert_eq!(e.written_at(), Some(1_675_776_222_000));
        let stored = serde_json::to_string(&e).unwrap();
        let stored: IssueCommentEvent = serde_json::from_str(&stored).unwrap();
        assert_eq!(stored.signed_id().as_ref(), Some(&id), "the inbox's copy");

        let mut edited = e.clone();
        edited.action = "edited".into();
        edited.comment.updated_at = Some("2023-02-07T13:25:00Z".into());
        assert_ne!(edited.signed_id().as_ref(), Some(&id));
        let mut other_body = e.clone();
        other_body.comment.body = Some("/promote".into());
        assert_ne!(other_body.signed_id().as_ref(), Some(&id));

        let mut bad = e;
        bad.comment.updated_at = Some("yesterday".into());
        assert_eq!(bad.signed_id(), None);
        bad.comment.updated_at = None;
        assert_eq!(bad.signed_id(), None);

        let push: PullRequestEvent =
            serde_json::from_str(&fixture("pull_request.synchronize.json")).unwrap();
        assert_eq!(
            push.signed_id(),
            "pull_request:279147437:synchronize:ec26c3e57ca3a959ca5aad62de7213c562f8c821:2019-05-15T15:20:33Z"
        );
    }

    #[test]
    fn a_click_is_told_apart_by_what_the_run_showed() {
        let text = fixture("check_run.requested_action.json");
        let e: CheckRunEvent = serde_json::from_str(&text).unwrap();
        let id = e.signed_id().unwrap();
        assert!(
            id.starts_with("check_run:1494503112:lgtm|26764:codebytere:"),
            "{id}"
        );
        let stored: CheckRunEvent =
            serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(stored.signed_id().as_ref(), Some(&id), "the inbox's copy");
        let mut later = e.clone();
        later.check_run.output.summary = Some("approved by alice".into());
        assert_ne!(
            later.signed_id().as_ref(),
            Some(&id),
            "a click after an edit"
        );
        assert_eq!(e.gate(), None, "not one of gatebot's runs");
        let mut ours = e;
        ours.check_run.external_id = Some("/gates/promote/acme/shop/pr/42".into());
        assert!(ours.gate().is_some_and(|k| k.pr().is_some()));
        ours.requested_action = None;
        assert_eq!(ours.signed_id(), None);
    }

    #[test]
    fn reviews_parse_and_are_told_apart_by_signed_fields() {
        let e: PullRequestReviewEvent =
            serde_json::from_str(&fixture("pull_request_review.dismissed.json")).unwrap();
        assert!(e.dismissed() && !e.approved());
        assert_eq!(e.review.user.login, "Codertocat");
        assert_eq!(e.pr().unwrap().1, PrNumber(2));
        let dismissed = e.signed_id().unwrap();
        assert_eq!(
            dismissed,
            "review:237895671:dismissed:dismissed:2019-05-15T15:20:38Z"
        );
        let mut e: PullRequestReviewEvent =
            serde_json::from_str(&fixture("pull_request_review.submitted.json")).unwrap();
        assert_eq!(
            e.review.commit_id,
            "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
        );
        assert!(!e.approved(), "a comment, not an approval");
        e.review.state = "approved".into();
        assert!(e.approved());
        let stored: PullRequestReviewEvent =
            serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(stored.signed_id(), e.signed_id(), "the inbox's copy");
        assert_ne!(e.signed_id().as_ref(), Some(&dismissed));
        e.review.submitted_at = None;
        assert_eq!(e.signed_id(), None);
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

/// `deployment_protection_rule.deployment`: the fields gatebot reads.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ProtectedDeployment {
    pub id: u64,
    pub sha: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// A pull request a protected deployment belongs to.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ProtectedPull {
    pub number: u64,
}

/// `deployment_protection_rule` `requested`: a workflow run's deployment to
/// an environment waits for gatebot's approval at `deployment_callback_url`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct DeploymentProtectionRuleEvent {
    pub action: String,
    pub environment: String,
    pub event: String,
    pub deployment_callback_url: String,
    pub deployment: ProtectedDeployment,
    pub pull_requests: Vec<ProtectedPull>,
    pub repository: Repository,
    pub installation: Option<Installation>,
}

impl DeploymentProtectionRuleEvent {
    /// The pull request the deployment is of: the first GitHub names.
    pub fn pr(&self) -> Option<(RepoName, PrNumber)> {
        let number = self.pull_requests.first()?.number;
        (number != 0).then_some((self.repository.name()?, PrNumber(number)))
    }

    /// When the deployment was made, by GitHub's clock.
    pub fn created_at(&self) -> Option<Millis> {
        github_time(self.deployment.created_at.as_deref()?)
    }

    /// This request, from fields GitHub signs: the deployment, its
    /// environment and the callback (which names the workflow run). Equal for
    /// a redelivery or a replay.
    pub fn signed_id(&self) -> Option<String> {
        if self.deployment.id == 0 || self.deployment_callback_url.is_empty() {
            return None;
        }
        let text = format!("{}\n{}", self.environment, self.deployment_callback_url);
        let digest = hex::encode(&Sha256::digest(text.as_bytes())[..8]);
        Some(format!("protection:{}:{digest}", self.deployment.id))
    }
}
