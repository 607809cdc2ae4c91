//! The GitHub REST calls gatebot makes, over reqwest (token or GitHub App,
//! installation tokens per installation). Responses are read into our own
//! small structs, and failures are classified for the outbox: transient
//! (5xx, network, rate limits with their reset time) or permanent.
//!
//! Nothing here retries: the outbox does, so a POST is never sent twice by a
//! lower layer.
//!
//! Over 400 lines on purpose: the file is the list of GitHub endpoints gatebot
//! calls, each a small function over one request helper.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::app::{AppKey, TokenCache};
use crate::clock::SharedClock;
use crate::config::{GithubConfig, Permission};
use crate::gate::{Millis, PrNumber, RepoName};
use crate::metrics::OutboundCalls;
use crate::notify::{SendError, MAX_RETRY_AFTER};
use crate::outbound;

/// The longest one GitHub call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read from GitHub.
const BODY_LIMIT: usize = 8 * 1024 * 1024;

static HTTP: outbound::Shared = outbound::Shared::new();

/// Why a call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    Status {
        status: u16,
        /// When the other side said when to come back (Retry-After, rate-limit reset).
        retry_after: Option<Duration>,
        rate_limited: bool,
        message: String,
    },
    /// No answer: connection refused, timeout, unreadable body.
    Transport(String),
}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Status { status: 404, .. })
    }

    /// How the outbox (or the inbox) should treat this failure.
    pub fn to_send_error(&self) -> SendError {
        match self {
            Self::Transport(m) => SendError::retry(format!("GitHub unreachable: {m}")),
            Self::Status {
                status,
                retry_after,
                rate_limited,
                message,
            } => {
                let text = format!("GitHub answered {status}: {message}");
                if *rate_limited || *status >= 500 || *status == 401 || *status == 408 {
                    SendError::Retry {
                        after: *retry_after,
                        message: text,
                    }
                } else {
                    SendError::Permanent(text)
                }
            }
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.to_send_error().message())
    }
}

/// Reads Retry-After and GitHub's rate-limit headers. Returns (rate limited, wait).
pub fn rate_limit(status: u16, headers: &HeaderMap, body: &str) -> (bool, Option<Duration>) {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Within the hour, whatever the server says (`Retry-After: 10000000000`).
    let retry_after = header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
    let exhausted = header("x-ratelimit-remaining").map(str::trim) == Some("0");
    let reset = header("x-ratelimit-reset")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|reset| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            // One second past the reset, so the next try lands in the new window.
            Duration::from_secs(reset.saturating_sub(now) + 1)
        });
    let secondary = body.to_ascii_lowercase().contains("rate limit");
    let limited = matches!(status, 403 | 429) && (retry_after.is_some() || exhausted || secondary)
        || status == 429;
    if !limited {
        return (false, retry_after.filter(|_| status >= 500));
    }
    let wait = retry_after
        .or(if exhausted { reset } else { None })
        // Secondary limits without a header: GitHub asks for at least a minute.
        .or(Some(Duration::from_secs(60)))
        .map(|d| d.min(MAX_RETRY_AFTER));
    (true, wait)
}

enum Auth {
    Token(SecretString),
    /// Authenticated as the App (JWT); installation tokens are minted from it.
    App(Box<AppKey>),
}

pub struct GithubClient {
    http: reqwest::Client,
    /// The API root without a trailing slash (`…/api/v3` on GitHub Enterprise).
    base: String,
    auth: Auth,
    tokens: TokenCache,
    /// repo → installation, learned from deliveries or looked up.
    repo_installations: Mutex<HashMap<String, u64>>,
    calls: OutboundCalls,
    /// Until when GitHub asked for quiet (a rate limit's Retry-After or
    /// reset). Kept here, not per job: a job queued after the limited one
    /// would otherwise call again at once, and GitHub answers repeated calls
    /// during a secondary limit by extending it.
    quiet_until: Mutex<Option<Millis>>,
    /// The app's clock, so the quiet ends when the outbox's retry comes due.
    clock: SharedClock,
}

#[derive(Deserialize)]
struct TokenAnswer {
    token: String,
    #[serde(default)]
    expires_at: Option<String>,
}

#[derive(Deserialize)]
struct PermissionAnswer {
    #[serde(default)]
    permission: String,
    #[serde(default)]
    role_name: Option<String>,
}

#[derive(Deserialize)]
struct MembershipAnswer {
    #[serde(default)]
    state: String,
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u64,
}

#[derive(Deserialize)]
struct CommentAnswer {
    id: u64,
    #[serde(default)]
    body: Option<String>,
}

#[derive(Deserialize)]
struct LoginAnswer {
    #[serde(default)]
    login: String,
    #[serde(default)]
    slug: String,
}

/// One delivery of the App's webhook, as `GET /app/hook/deliveries` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct HookDelivery {
    pub id: u64,
    /// The `X-GitHub-Delivery` header: the same for every attempt of one event.
    #[serde(default)]
    pub guid: String,
    #[serde(default)]
    pub delivered_at: String,
    /// What gatebot answered (0 when GitHub got no answer).
    #[serde(default)]
    pub status_code: u16,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PullInfo {
    /// `open` or `closed`.
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub merged: bool,
    #[serde(default)]
    pub user: Option<PullUser>,
    #[serde(default)]
    pub head: Option<CommitRef>,
}

/// One pull request that contains a commit.
#[derive(Debug, Clone, Deserialize)]
pub struct CommitPull {
    pub number: u64,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    #[serde(default)]
    pub merged_at: Option<String>,
    #[serde(default)]
    pub head: Option<CommitRef>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CommitRef {
    #[serde(default)]
    pub sha: String,
}

/// The PR that brought `sha`: the one merged as it (or whose head it is),
/// else the first merged one, else the first GitHub lists.
pub fn pull_of_commit(pulls: &[CommitPull], sha: &str) -> Option<u64> {
    let is = |s: &str| !s.is_empty() && (s.starts_with(sha) || sha.starts_with(s));
    pulls
        .iter()
        .find(|p| {
            p.merge_commit_sha.as_deref().is_some_and(is)
                || p.head.as_ref().is_some_and(|h| is(&h.sha))
        })
        .or_else(|| pulls.iter().find(|p| p.merged_at.is_some()))
        .or_else(|| pulls.first())
        .map(|p| p.number)
}

#[derive(Debug, Clone, Deserialize)]
pub struct PullUser {
    #[serde(default)]
    pub login: String,
}

impl GithubClient {
    /// None when no credentials are configured.
    pub fn from_config(
        config: &GithubConfig,
        calls: OutboundCalls,
        clock: SharedClock,
    ) -> anyhow::Result<Option<Self>> {
        let auth = match (&config.token, config.app_id, &config.app_private_key) {
            (Some(token), _, _) => Auth::Token(token.clone()),
            (None, Some(id), Some(key)) => {
                Auth::App(Box::new(AppKey::from_pem(id, key.expose_secret())?))
            }
            _ => return Ok(None),
        };
        Ok(Some(Self {
            http: HTTP.get(CALL_TIMEOUT)?,
            base: config.api_url.trim_end_matches('/').to_string(),
            auth,
            tokens: TokenCache::default(),
            repo_installations: Mutex::new(HashMap::new()),
            calls,
            quiet_until: Mutex::new(None),
            clock,
        }))
    }

    pub fn is_app(&self) -> bool {
        matches!(self.auth, Auth::App(_))
    }

    /// Remembers which installation a repository belongs to (from a delivery).
    pub fn learn_installation(&self, repo: &RepoName, installation: u64) {
        self.repo_installations
            .lock()
            .expect("installation map poisoned")
            .insert(repo.to_string(), installation);
    }

    /// The bearer credential for acting on `repo` (the App's JWT when None).
    async fn bearer(&self, repo: Option<&RepoName>) -> Result<SecretString, ApiError> {
        match repo {
            Some(repo) => {
                let path = repo_path(repo, "/installation");
                self.installed(repo.to_string(), &path).await
            }
            None => self.installed(String::new(), "").await,
        }
    }

    /// The bearer credential for reading `org` (its teams).
    async fn org_bearer(&self, org: &str) -> Result<SecretString, ApiError> {
        let path = format!("/orgs/{}/installation", segment(org));
        // Repositories are owner/name, so an org's key is never one's.
        self.installed(format!("org:{}", org.to_ascii_lowercase()), &path)
            .await
    }

    /// The token of the installation `lookup` names, known by `known_as`
    /// once found; the App's JWT when `lookup` is empty.
    async fn installed(&self, known_as: String, lookup: &str) -> Result<SecretString, ApiError> {
        let app = match &self.auth {
            Auth::Token(token) => return Ok(token.clone()),
            Auth::App(app) => app,
        };
        let jwt = || {
            app.jwt(SystemTime::now())
                .map(SecretString::from)
                .map_err(|e| ApiError::Transport(e.to_string()))
        };
        if lookup.is_empty() {
            return jwt();
        }
        let known = self
            .repo_installations
            .lock()
            .expect("installation map poisoned")
            .get(&known_as)
            .copied();
        let id = match known {
            Some(id) => id,
            None => {
                let found: IdAnswer = self.read("installation", &jwt()?, lookup).await?;
                self.repo_installations
                    .lock()
                    .expect("installation map poisoned")
                    .insert(known_as, found.id);
                found.id
            }
        };
        if let Some(token) = self.tokens.get(id, SystemTime::now()) {
            return Ok(token);
        }
        let path = format!("/app/installations/{id}/access_tokens");
        let minted = self
            .call(
                "access_token",
                &jwt()?,
                Method::POST,
                &path,
                Some(&json!({})),
            )
            .await
            // A missing installation is not "no such user/team": retry it
            // rather than let a caller read it as an answer.
            .map_err(|e| match e {
                e if e.is_not_found() => {
                    ApiError::Transport(format!("GitHub App installation {id}: {e}"))
                }
                e => e,
            })?;
        let answer: TokenAnswer = decode(&minted)?;
        let token = SecretString::from(answer.token);
        self.tokens.put(id, &token, answer.expires_at.as_deref());
        Ok(token)
    }

    /// The commenter's permission on the repository; None when they have none.
    pub async fn permission(
        &self,
        repo: &RepoName,
        user: &str,
    ) -> Result<Option<Permission>, ApiError> {
        let rest = format!("/collaborators/{}/permission", segment(user));
        match self
            .read_repo::<PermissionAnswer>("permission", repo, &rest)
            .await
        {
            Ok(a) => Ok(parse_permission(&a.permission, a.role_name.as_deref())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `user` is an active member of `org/team`, asked with the
    /// installation on `repo`, or on the org itself when None.
    pub async fn team_member(
        &self,
        repo: Option<&RepoName>,
        org: &str,
        team: &str,
        user: &str,
    ) -> Result<bool, ApiError> {
        let auth = match repo {
            Some(repo) => self.bearer(Some(repo)).await?,
            None => self.org_bearer(org).await?,
        };
        let path = format!(
            "/orgs/{}/teams/{}/memberships/{}",
            segment(org),
            segment(team),
            segment(user)
        );
        match self
            .read::<MembershipAnswer>("team_membership", &auth, &path)
            .await
        {
            Ok(m) => Ok(m.state == "active"),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub async fn pull(&self, repo: &RepoName, number: PrNumber) -> Result<PullInfo, ApiError> {
        let rest = format!("/pulls/{}", number.0);
        self.read_repo("pull", repo, &rest).await
    }

    /// The pull requests that contain `sha`, as GitHub lists them
    /// (`GET /repos/{owner}/{repo}/commits/{sha}/pulls`).
    pub async fn pulls_of_commit(
        &self,
        repo: &RepoName,
        sha: &str,
    ) -> Result<Vec<CommitPull>, ApiError> {
        let rest = format!("/commits/{}/pulls", segment(sha));
        self.read_repo("commit_pulls", repo, &rest).await
    }

    /// The login gatebot comments as (`name[bot]` for an App).
    pub async fn own_login(&self) -> Result<String, ApiError> {
        let auth = self.bearer(None).await?;
        match &self.auth {
            Auth::Token(_) => Ok(self
                .read::<LoginAnswer>("own_login", &auth, "/user")
                .await?
                .login),
            Auth::App(_) => Ok(format!(
                "{}[bot]",
                self.read::<LoginAnswer>("own_login", &auth, "/app")
                    .await?
                    .slug
            )),
        }
    }

    /// `GET /repos/{owner}/{repo}` with the repository's token (an App's
    /// installation token): whether gatebot can see it.
    pub async fn can_read(&self, repo: &RepoName) -> Result<(), ApiError> {
        self.read_repo::<Value>("repository", repo, "")
            .await
            .map(drop)
    }

    pub async fn react(
        &self,
        repo: &RepoName,
        comment_id: u64,
        content: &str,
    ) -> Result<(), ApiError> {
        let rest = format!("/issues/comments/{comment_id}/reactions");
        let body = json!({ "content": content });
        self.write("react", repo, Method::POST, &rest, body)
            .await
            .map(|_| ())
    }

    pub async fn create_comment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        body: &str,
    ) -> Result<u64, ApiError> {
        let rest = format!("/issues/{}/comments", number.0);
        let body = json!({ "body": body });
        self.create("create_comment", repo, &rest, body).await
    }

    pub async fn edit_comment(&self, repo: &RepoName, id: u64, body: &str) -> Result<(), ApiError> {
        let rest = format!("/issues/comments/{id}");
        let body = json!({ "body": body });
        self.write("edit_comment", repo, Method::PATCH, &rest, body)
            .await
            .map(|_| ())
    }

    /// Creates a check run (`body` as GitHub's API takes it); its id.
    pub async fn create_check_run(&self, repo: &RepoName, body: Value) -> Result<u64, ApiError> {
        self.create("create_check_run", repo, "/check-runs", body)
            .await
    }

    pub async fn create_deployment(&self, repo: &RepoName, body: Value) -> Result<u64, ApiError> {
        self.create("create_deployment", repo, "/deployments", body)
            .await
    }

    /// The deployments of `sha` to `environment` (newest first, as GitHub
    /// lists them): their ids and the payloads gatebot gave them.
    pub async fn deployments_of(
        &self,
        repo: &RepoName,
        sha: &str,
        environment: &str,
    ) -> Result<Vec<(u64, Value)>, ApiError> {
        #[derive(Deserialize)]
        struct Listed {
            id: u64,
            #[serde(default)]
            payload: Value,
        }
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("sha", sha)
            .append_pair("environment", environment)
            .append_pair("per_page", "100")
            .finish();
        let rest = format!("/deployments?{query}");
        let listed: Vec<Listed> = self.read_repo("list_deployments", repo, &rest).await?;
        Ok(listed.into_iter().map(|d| (d.id, d.payload)).collect())
    }

    pub async fn create_deployment_status(
        &self,
        repo: &RepoName,
        id: u64,
        body: Value,
    ) -> Result<(), ApiError> {
        let rest = format!("/deployments/{id}/statuses");
        self.write("create_deployment_status", repo, Method::POST, &rest, body)
            .await
            .map(|_| ())
    }

    /// The environments workflow run `run` waits to deploy to, as GitHub
    /// lists them (`GET /repos/{owner}/{repo}/actions/runs/{run}/pending_deployments`).
    pub async fn pending_deployments(
        &self,
        repo: &RepoName,
        run: u64,
    ) -> Result<Vec<String>, ApiError> {
        #[derive(Deserialize)]
        struct Pending {
            environment: Environment,
        }
        #[derive(Deserialize)]
        struct Environment {
            name: String,
        }
        let rest = format!("/actions/runs/{run}/pending_deployments");
        let listed: Vec<Pending> = self.read_repo("pending_deployments", repo, &rest).await?;
        Ok(listed.into_iter().map(|p| p.environment.name).collect())
    }

    /// Approves or rejects a workflow run's deployment at `path` (its
    /// callback, checked to be the repository's own under the API), with the
    /// repository's token.
    pub async fn review_protection(
        &self,
        repo: &RepoName,
        path: &str,
        body: Value,
    ) -> Result<(), ApiError> {
        let auth = self.bearer(Some(repo)).await?;
        self.call(
            "review_deployment_protection",
            &auth,
            Method::POST,
            path,
            Some(&body),
        )
        .await
        .map(|_| ())
    }

    pub async fn update_check_run(
        &self,
        repo: &RepoName,
        id: u64,
        body: Value,
    ) -> Result<(), ApiError> {
        let rest = format!("/check-runs/{id}");
        self.write("update_check_run", repo, Method::PATCH, &rest, body)
            .await
            .map(|_| ())
    }

    /// The PR's first comment containing `marker`, among the first 100 (updated
    /// after `since`, when given).
    pub async fn find_comment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        marker: &str,
        since: Option<Millis>,
    ) -> Result<Option<u64>, ApiError> {
        let mut rest = format!("/issues/{}/comments?per_page=100", number.0);
        if let Some(ms) = since {
            let at = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
            rest.push_str(&format!("&since={}", humantime::format_rfc3339_seconds(at)));
        }
        let comments: Vec<CommentAnswer> = self.read_repo("find_comment", repo, &rest).await?;
        Ok(comments
            .into_iter()
            .find(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)))
            .map(|c| c.id))
    }

    /// A page of the App's webhook deliveries, newest first, and the cursor
    /// of the next page (GitHub's `Link: <…&cursor=…>; rel="next"`).
    pub async fn hook_deliveries(
        &self,
        cursor: Option<&str>,
    ) -> Result<(Vec<HookDelivery>, Option<String>), ApiError> {
        let auth = self.bearer(None).await?;
        let mut path = "/app/hook/deliveries?per_page=100".to_string();
        if let Some(c) = cursor {
            path.push_str("&cursor=");
            path.push_str(&segment(c));
        }
        let (text, headers) = self
            .call_with_headers("hook_deliveries", &auth, Method::GET, &path, None)
            .await?;
        Ok((decode(&text)?, next_cursor(&headers)))
    }

    /// Asks GitHub to deliver the App's webhook delivery `id` again.
    pub async fn redeliver(&self, id: u64) -> Result<(), ApiError> {
        let auth = self.bearer(None).await?;
        let path = format!("/app/hook/deliveries/{id}/attempts");
        self.call("redeliver", &auth, Method::POST, &path, None)
            .await
            .map(|_| ())
    }

    async fn read<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        auth: &SecretString,
        path: &str,
    ) -> Result<T, ApiError> {
        let text = self.call(endpoint, auth, Method::GET, path, None).await?;
        decode(&text)
    }

    /// Reads `rest` of the repository's API, with its token.
    async fn read_repo<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        repo: &RepoName,
        rest: &str,
    ) -> Result<T, ApiError> {
        let auth = self.bearer(Some(repo)).await?;
        self.read(endpoint, &auth, &repo_path(repo, rest)).await
    }

    /// `write` that creates something (a comment, a check run): its id.
    async fn create(
        &self,
        endpoint: &'static str,
        repo: &RepoName,
        rest: &str,
        body: Value,
    ) -> Result<u64, ApiError> {
        let text = self.write(endpoint, repo, Method::POST, rest, body).await?;
        decode::<IdAnswer>(&text).map(|a| a.id)
    }

    /// Sends `body` to `rest` of the repository's API, with its token.
    async fn write(
        &self,
        endpoint: &'static str,
        repo: &RepoName,
        method: Method,
        rest: &str,
        body: Value,
    ) -> Result<String, ApiError> {
        let auth = self.bearer(Some(repo)).await?;
        let path = repo_path(repo, rest);
        self.call(endpoint, &auth, method, &path, Some(&body)).await
    }

    /// One call: the body of a successful answer, or the classified failure.
    /// Counted and timed under `endpoint`, whatever its result.
    async fn call(
        &self,
        endpoint: &'static str,
        auth: &SecretString,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<String, ApiError> {
        self.call_with_headers(endpoint, auth, method, path, body)
            .await
            .map(|(text, _)| text)
    }

    /// [`Self::call`], with the answer's headers.
    async fn call_with_headers(
        &self,
        endpoint: &'static str,
        auth: &SecretString,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(String, HeaderMap), ApiError> {
        if let Some(wait) = self.quiet_left() {
            return Err(ApiError::Status {
                status: 429,
                retry_after: Some(wait),
                rate_limited: true,
                message: "not sent: GitHub asked for quiet after a rate limit".into(),
            });
        }
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(auth.expose_secret())
            .header(reqwest::header::ACCEPT, "application/vnd.github+json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let started = Instant::now();
        let answered = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = request
                .send()
                .await
                .map_err(|e| ApiError::Transport(outbound::why(&e)))?;
            answer(response).await
        })
        .await;
        let (result, answer) = match answered {
            Ok(answer) => (result_of(&answer), answer),
            // Bounds the whole call, so a hanging GitHub holds up only the
            // work waiting on that call.
            Err(_) => (
                "timeout",
                Err(ApiError::Transport(format!(
                    "no answer within {CALL_TIMEOUT:?}"
                ))),
            ),
        };
        self.calls.observe(endpoint, result, started.elapsed());
        if let Err(ApiError::Status {
            rate_limited: true,
            retry_after: Some(wait),
            ..
        }) = &answer
        {
            self.keep_quiet(*wait);
        }
        answer
    }

    /// How long GitHub's last rate limit still asks for quiet, if at all.
    fn quiet_left(&self) -> Option<Duration> {
        let until = (*self.quiet_until.lock().ok()?)?;
        let left = until - self.clock.now_ms();
        (left > 0).then(|| Duration::from_millis(left.unsigned_abs()))
    }

    fn keep_quiet(&self, wait: Duration) {
        if let Ok(mut until) = self.quiet_until.lock() {
            let wait = Millis::try_from(wait.as_millis()).unwrap_or(Millis::MAX / 2);
            let end = self.clock.now_ms().saturating_add(wait);
            *until = Some(until.map_or(end, |u| u.max(end)));
        }
    }
}

/// A call's result as `gatebot_outbound_requests_total` counts it.
fn result_of<T>(answer: &Result<T, ApiError>) -> &'static str {
    match answer {
        Ok(_) => "ok",
        Err(ApiError::Status {
            rate_limited: true, ..
        }) => "rate_limited",
        Err(ApiError::Status { status, .. }) if *status >= 500 => "server_error",
        Err(ApiError::Status { .. }) => "client_error",
        Err(ApiError::Transport(_)) => "transport",
    }
}

/// GitHub's `permission` is only admin/write/read/none; `role_name` has the
/// finer maintain and triage. Custom roles fall back to `permission`.
pub fn parse_permission(permission: &str, role_name: Option<&str>) -> Option<Permission> {
    let parse = |s: &str| match s.trim().to_ascii_lowercase().as_str() {
        "admin" => Some(Permission::Admin),
        "maintain" => Some(Permission::Maintain),
        "write" | "push" => Some(Permission::Write),
        "triage" => Some(Permission::Triage),
        "read" | "pull" => Some(Permission::Read),
        _ => None,
    };
    role_name.and_then(parse).or_else(|| parse(permission))
}

/// `/repos/{owner}/{name}` followed by `rest`.
fn repo_path(repo: &RepoName, rest: &str) -> String {
    format!("/repos/{}/{}{rest}", repo.owner(), repo.name())
}

/// Escapes a path segment taken from a payload.
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode<T: DeserializeOwned>(text: &str) -> Result<T, ApiError> {
    serde_json::from_str(text)
        .map_err(|e| ApiError::Transport(format!("unexpected answer from GitHub: {e}")))
}

/// The `cursor` of a `Link` header's `rel="next"` URL.
fn next_cursor(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    let next = link.split(',').find(|part| part.contains("rel=\"next\""))?;
    let url = next
        .split(';')
        .next()?
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>');
    let query = url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "cursor")
        .map(|(_, v)| v.into_owned())
}

/// The body and headers of a successful answer, or the classified failure.
async fn answer(response: reqwest::Response) -> Result<(String, HeaderMap), ApiError> {
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = outbound::body(response, BODY_LIMIT)
        .await
        .map_err(ApiError::Transport)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if status.is_success() {
        return Ok((text, headers));
    }
    let (rate_limited, retry_after) = rate_limit(status.as_u16(), &headers, &text);
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    Err(ApiError::Status {
        status: status.as_u16(),
        retry_after,
        rate_limited,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn permissions_parse_from_role_then_permission() {
        assert_eq!(
            parse_permission("write", Some("maintain")),
            Some(Permission::Maintain)
        );
        assert_eq!(
            parse_permission("read", Some("triage")),
            Some(Permission::Triage)
        );
        assert_eq!(
            parse_permission("write", Some("release-manager")),
            Some(Permission::Write)
        );
        assert_eq!(parse_permission("none", None), None);
        assert_eq!(parse_permission("admin", None), Some(Permission::Admin));
    }

    #[test]
    fn rate_limits_say_when_to_come_back() {
        let (limited, wait) = rate_limit(403, &headers(&[("retry-after", "7")]), "");
        assert!(limited);
        assert_eq!(wait, Some(Duration::from_secs(7)));

        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 30;
        let (limited, wait) = rate_limit(
            403,
            &headers(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset.to_string()),
            ]),
            "{\"message\":\"API rate limit exceeded\"}",
        );
        assert!(limited);
        let wait = wait.unwrap().as_secs();
        assert!((29..=32).contains(&wait), "{wait}");

        let (limited, _) = rate_limit(
            403,
            &headers(&[("x-ratelimit-remaining", "12")]),
            "{\"message\":\"Resource not accessible by integration\"}",
        );
        assert!(!limited, "a plain 403 is a permission problem");
        assert!(rate_limit(429, &HeaderMap::new(), "").0);
    }

    /// A server's word on when to come back is kept to the hour, on a 5xx
    /// as on a rate limit: a `Retry-After` of years parks nothing for years.
    #[test]
    fn a_retry_after_of_years_waits_an_hour() {
        let years = headers(&[("retry-after", "10000000000")]);
        assert_eq!(
            rate_limit(503, &years, "").1,
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            rate_limit(429, &years, "").1,
            Some(Duration::from_secs(3600))
        );
        let most = headers(&[("retry-after", "18446744073709551615")]);
        assert_eq!(
            rate_limit(503, &most, "").1,
            Some(Duration::from_secs(3600))
        );
    }

    #[test]
    fn failures_are_classified() {
        let e = |status, rate_limited| ApiError::Status {
            status,
            retry_after: None,
            rate_limited,
            message: "x".into(),
        };
        assert!(matches!(
            e(500, false).to_send_error(),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            e(403, true).to_send_error(),
            SendError::Retry { .. }
        ));
        assert!(matches!(
            e(403, false).to_send_error(),
            SendError::Permanent(_)
        ));
        assert!(matches!(
            e(422, false).to_send_error(),
            SendError::Permanent(_)
        ));
        assert!(matches!(
            ApiError::Transport("refused".into()).to_send_error(),
            SendError::Retry { .. }
        ));
        assert_eq!(segment("dependabot[bot]"), "dependabot%5Bbot%5D");
    }
}
