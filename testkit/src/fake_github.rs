//! A fake GitHub REST API for black-box tests: answers with GitHub's response
//! shapes, records what gatebot sends, and can be told to fail.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// One request gatebot made.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    /// The status the fake answered.
    pub status: u16,
    pub at: std::time::Instant,
}

#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: u64,
    pub repo: String,
    pub number: u64,
    pub body: String,
    pub edits: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeReaction {
    pub repo: String,
    pub comment_id: u64,
    pub content: String,
}

/// A check run as the fake keeps it: what creating it set, then every edit.
#[derive(Debug, Clone)]
pub struct FakeCheckRun {
    pub id: u64,
    pub repo: String,
    pub name: String,
    pub head_sha: String,
    pub external_id: String,
    pub status: String,
    pub conclusion: Option<String>,
    /// `title`, `summary` as last sent.
    pub output: Value,
    /// The requested actions (buttons) as last sent.
    pub actions: Value,
    pub edits: u32,
    /// When it was created, as GitHub writes it (the body's, else now).
    pub started_at: String,
}

/// A deployment as the fake keeps it, with every status posted on it.
#[derive(Debug, Clone)]
pub struct FakeDeployment {
    pub id: u64,
    pub repo: String,
    /// The commit (`ref`) deployed.
    pub sha: String,
    pub environment: String,
    pub payload: Value,
    /// Each status's body, in order.
    pub statuses: Vec<Value>,
}

impl FakeCheckRun {
    /// The run as GitHub answers it, and as a `check_run` event carries it.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "name": self.name, "head_sha": self.head_sha,
            "external_id": self.external_id, "status": self.status,
            "conclusion": self.conclusion, "output": self.output,
            "started_at": self.started_at,
        })
    }
}

/// One webhook delivery the fake made to gatebot, as GitHub keeps it for an
/// App (`GET /app/hook/deliveries`).
#[derive(Debug, Clone)]
pub struct FakeDelivery {
    pub id: u64,
    /// `X-GitHub-Delivery`: the same for every attempt of one event.
    pub guid: String,
    pub event: String,
    pub redelivery: bool,
    /// What gatebot answered; 0 when it did not answer.
    pub status_code: u16,
    pub delivered_at: std::time::SystemTime,
    body: Vec<u8>,
}

/// Where the App's webhook goes: gatebot's URL and the secret that signs it.
#[derive(Debug, Clone)]
struct Hook {
    url: String,
    secret: String,
}

/// An answer to give instead of the real one.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub message: String,
}

impl Failure {
    pub fn server_error() -> Self {
        Self {
            status: 500,
            headers: vec![],
            message: "Server Error".into(),
        }
    }

    /// GitHub's primary rate limit: 403, remaining 0, reset in `secs`.
    pub fn rate_limited(reset_in_secs: u64) -> Self {
        let reset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + reset_in_secs;
        Self {
            status: 403,
            headers: vec![
                ("x-ratelimit-limit".into(), "5000".into()),
                ("x-ratelimit-remaining".into(), "0".into()),
                ("x-ratelimit-reset".into(), reset.to_string()),
            ],
            message: "API rate limit exceeded for installation ID 1.".into(),
        }
    }

    /// A secondary rate limit with Retry-After.
    pub fn retry_after(secs: u64) -> Self {
        Self {
            status: 403,
            headers: vec![("retry-after".into(), secs.to_string())],
            message: "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.".into(),
        }
    }
}

#[derive(Default)]
pub struct Inner {
    pub requests: Mutex<Vec<Recorded>>,
    /// Tokens answered 401 Bad credentials, as GitHub answers a revoked,
    /// expired or made-up one.
    refused_tokens: Mutex<HashSet<String>>,
    /// login (lowercase) → GitHub's `permission` and `role_name`; absent: 404.
    permissions: Mutex<HashMap<String, (String, String)>>,
    /// login (lowercase) → how long its permission lookup takes to answer.
    permission_delays: Mutex<HashMap<String, std::time::Duration>>,
    /// logins (lowercase) whose permission lookup is refused 403, as GitHub
    /// refuses a token that may not read the repository's collaborators.
    permission_refused: Mutex<std::collections::HashSet<String>>,
    teams: Mutex<HashSet<(String, String)>>,
    /// PR number → merged
    pulls: Mutex<HashMap<u64, bool>>,
    /// PR number → author login; absent: `kobzol`, the fixtures' author.
    authors: Mutex<HashMap<u64, String>>,
    comments: Mutex<BTreeMap<u64, FakeComment>>,
    /// PR numbers that do not exist: their comments answer 404.
    missing: Mutex<HashSet<u64>>,
    reactions: Mutex<Vec<FakeReaction>>,
    write_failures: Mutex<VecDeque<Failure>>,
    next_id: AtomicU64,
    pub login: Mutex<String>,
    /// How long a write's answer takes after the write is applied.
    write_delay: Mutex<std::time::Duration>,
    /// Authorizations whose writes are applied and never answered.
    held: Mutex<std::collections::HashSet<String>>,
    /// Writes applied but not yet answered, by Authorization header.
    in_flight: Mutex<HashMap<String, usize>>,
    /// Who signs in through the OAuth web flow (`set_oauth_login`); empty: nobody.
    oauth_login: Mutex<String>,
    hook: Mutex<Option<Hook>>,
    /// Every delivery made, oldest first.
    deliveries: Mutex<Vec<FakeDelivery>>,
    /// The delivery ids gatebot asked to deliver again, in order.
    redelivery_requests: Mutex<Vec<u64>>,
    /// Apps created from a manifest: (organization, manifest), in order.
    app_manifests: Mutex<Vec<(Option<String>, Value)>>,
    /// Manifest codes not yet converted: code → (organization, manifest).
    manifest_codes: Mutex<HashMap<String, (Option<String>, Value)>>,
    /// Manifest codes traded for an App's credentials, in order.
    manifest_conversions: Mutex<Vec<String>>,
    /// Bytes of padding added to each conversion's answer (a misbehaving host).
    conversion_padding: AtomicU64,
    /// Commit SHA → the PRs that contain it (`GET …/commits/{sha}/pulls`).
    commit_pulls: Mutex<HashMap<String, Vec<u64>>>,
    /// Check runs by id.
    check_runs: Mutex<BTreeMap<u64, FakeCheckRun>>,
    /// Answers to give the next check-run writes instead of the real ones.
    check_run_failures: Mutex<VecDeque<Failure>>,
    /// Deployments by id.
    deployments: Mutex<BTreeMap<u64, FakeDeployment>>,
    /// Answers to give the next deployment creations instead of the real ones.
    deployment_failures: Mutex<VecDeque<Failure>>,
    protection_failures: Mutex<VecDeque<Failure>>,
    /// Answers to give the next deployment creations after making them (an
    /// answer lost on the way back, as after a timeout).
    deployment_lost_answers: Mutex<VecDeque<Failure>>,
    /// PR number → its head commit; absent: a SHA made of the number.
    heads: Mutex<HashMap<u64, String>>,
    /// Reviews of protected deployments posted to their callbacks, in order.
    protection_reviews: Mutex<Vec<FakeProtectionReview>>,
    /// (repository, workflow run) → the environments it waits to deploy to,
    /// until a review decides them.
    pending_deployments: Mutex<HashMap<(String, u64), Vec<String>>>,
    /// Reads of a run's pending deployments, in order: (repository, run).
    pending_deployment_reads: Mutex<Vec<(String, u64)>>,
}

/// One review posted to a workflow run's deployment callback.
#[derive(Debug, Clone)]
pub struct FakeProtectionReview {
    pub repo: String,
    pub run_id: u64,
    /// `environment_name`, `state` and `comment`, as sent.
    pub body: Value,
    pub authorization: Option<String>,
}

/// Counts a write as in flight until its answer is sent or abandoned.
struct InFlight {
    inner: Arc<Inner>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(n) = self.inner.in_flight.lock().unwrap().get_mut(&self.key) {
            *n -= 1;
        }
    }
}

#[derive(Clone)]
pub struct FakeGithub {
    pub url: String,
    pub inner: Arc<Inner>,
}

impl FakeGithub {
    pub async fn start() -> Self {
        Self::start_with_prefix("").await
    }

    /// GitHub Enterprise Server's layout: the REST API under `prefix`
    /// (`/api/v3`), nothing at the root; `url` includes the prefix. Requests are
    /// recorded with their full path, so a call that missed the prefix shows
    /// as a 404 at the root.
    pub async fn start_with_prefix(prefix: &str) -> Self {
        let inner = Arc::new(Inner {
            next_id: AtomicU64::new(9_000_000),
            login: Mutex::new("gatebot-test".into()),
            ..Inner::default()
        });
        let routes = Router::new()
            .route(
                "/repos/{owner}/{repo}/collaborators/{user}/permission",
                get(permission),
            )
            .route(
                "/orgs/{org}/teams/{team}/memberships/{user}",
                get(membership),
            )
            .route("/repos/{owner}/{repo}", get(repository))
            .route("/repos/{owner}/{repo}/pulls/{number}", get(pull))
            .route(
                "/repos/{owner}/{repo}/commits/{sha}/pulls",
                get(commit_pulls),
            )
            .route(
                "/repos/{owner}/{repo}/issues/{number}/comments",
                post(create_comment).get(list_comments),
            )
            .route(
                "/repos/{owner}/{repo}/issues/comments/{id}",
                patch(edit_comment),
            )
            .route(
                "/repos/{owner}/{repo}/issues/comments/{id}/reactions",
                post(react),
            )
            .route(
                "/repos/{owner}/{repo}/actions/runs/{run}/deployment_protection_rule",
                post(review_protection),
            )
            .route(
                "/repos/{owner}/{repo}/actions/runs/{run}/pending_deployments",
                get(pending_deployments),
            )
            .route("/repos/{owner}/{repo}/check-runs", post(create_check_run))
            .route(
                "/repos/{owner}/{repo}/deployments",
                post(create_deployment).get(list_deployments),
            )
            .route(
                "/repos/{owner}/{repo}/deployments/{id}/statuses",
                post(create_deployment_status),
            )
            .route(
                "/repos/{owner}/{repo}/check-runs/{id}",
                patch(edit_check_run).get(get_check_run),
            )
            .route("/user", get(user))
            .route("/login/oauth/authorize", get(oauth_authorize))
            .route("/login/oauth/access_token", post(oauth_token))
            .route("/app", get(app_info))
            .route("/repos/{owner}/{repo}/installation", get(installation))
            .route("/orgs/{org}/installation", get(org_installation))
            .route("/app/installations/{id}/access_tokens", post(access_token))
            .route("/app/hook/deliveries", get(list_deliveries))
            .route("/app/hook/deliveries/{id}/attempts", post(redeliver))
            .route("/settings/apps/new", post(new_app))
            .route("/organizations/{org}/settings/apps/new", post(new_org_app))
            .route("/app-manifests/{code}/conversions", post(convert_manifest));
        let routes = if prefix.is_empty() {
            routes
        } else {
            Router::new().nest(prefix, routes)
        };
        let app = routes
            .layer(middleware::from_fn_with_state(inner.clone(), record))
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{prefix}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, inner }
    }

    /// The PRs `GET /repos/{owner}/{repo}/commits/{sha}/pulls` lists for
    /// `sha`, the first merged as it; any other commit lists none.
    pub fn set_commit_pulls(&self, sha: &str, numbers: &[u64]) {
        self.inner
            .commit_pulls
            .lock()
            .unwrap()
            .insert(sha.to_string(), numbers.to_vec());
    }

    /// The next deployment creations answer these, in order.
    pub fn fail_deployments(&self, failures: impl IntoIterator<Item = Failure>) {
        self.inner
            .deployment_failures
            .lock()
            .unwrap()
            .extend(failures);
    }

    /// The next protection callbacks answer these, in order, and decide nothing.
    pub fn fail_protection_reviews(&self, failures: impl IntoIterator<Item = Failure>) {
        self.inner
            .protection_failures
            .lock()
            .unwrap()
            .extend(failures);
    }

    /// The next deployment creations make the deployment, then answer these.
    pub fn lose_deployment_answers(&self, failures: impl IntoIterator<Item = Failure>) {
        self.inner
            .deployment_lost_answers
            .lock()
            .unwrap()
            .extend(failures);
    }

    /// Every deployment, oldest first.
    pub fn deployments(&self) -> Vec<FakeDeployment> {
        self.inner
            .deployments
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }

    /// Every check run, oldest first.
    /// Reviews posted to deployment callbacks, oldest first.
    pub fn protection_reviews(&self) -> Vec<FakeProtectionReview> {
        self.inner.protection_reviews.lock().unwrap().clone()
    }

    /// Workflow run `run` of `repo` waits to deploy to `environment`, as on
    /// GitHub when it sends `deployment_protection_rule`: listed in its
    /// pending deployments until a review approves or rejects it.
    pub fn await_deployment(&self, repo: &str, run: u64, environment: &str) {
        let mut pending = self.inner.pending_deployments.lock().unwrap();
        let envs = pending.entry((repo.to_lowercase(), run)).or_default();
        if !envs.iter().any(|e| e == environment) {
            envs.push(environment.to_string());
        }
    }

    /// The environments run `run` of `repo` still waits for.
    pub fn pending_deployments(&self, repo: &str, run: u64) -> Vec<String> {
        let pending = self.inner.pending_deployments.lock().unwrap();
        pending
            .get(&(repo.to_lowercase(), run))
            .cloned()
            .unwrap_or_default()
    }

    /// How many times gatebot read runs' pending deployments.
    pub fn pending_deployment_reads(&self) -> usize {
        self.inner.pending_deployment_reads.lock().unwrap().len()
    }

    pub fn check_runs(&self) -> Vec<FakeCheckRun> {
        self.inner
            .check_runs
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }

    /// The next check-run creations and edits answer these, in order.
    pub fn fail_check_runs(&self, failures: impl IntoIterator<Item = Failure>) {
        self.inner
            .check_run_failures
            .lock()
            .unwrap()
            .extend(failures);
    }

    /// The head commit `GET /repos/{owner}/{repo}/pulls/{number}` tells.
    pub fn set_head(&self, number: u64, sha: &str) {
        self.inner
            .heads
            .lock()
            .unwrap()
            .insert(number, sha.to_string());
    }

    /// Pads each manifest conversion's answer with `bytes` more.
    pub fn pad_conversions(&self, bytes: u64) {
        self.inner.conversion_padding.store(bytes, Ordering::SeqCst);
    }

    /// The manifests GitHub was asked to create Apps from, with the organization.
    pub fn app_manifests(&self) -> Vec<(Option<String>, Value)> {
        self.inner.app_manifests.lock().unwrap().clone()
    }

    /// The manifest codes gatebot traded for an App's credentials, in order.
    pub fn app_conversions(&self) -> Vec<String> {
        self.inner.manifest_conversions.lock().unwrap().clone()
    }

    /// The person who signs in with GitHub's OAuth web flow: the fake's
    /// authorize page approves at once and sends the browser back.
    pub fn set_oauth_login(&self, login: &str) {
        *self.inner.oauth_login.lock().unwrap() = login.to_string();
    }

    /// Makes `login`'s permission lookup answer only after `delay` (a hanging GitHub).
    pub fn delay_permission(&self, login: &str, delay: std::time::Duration) {
        self.inner
            .permission_delays
            .lock()
            .unwrap()
            .insert(login.to_ascii_lowercase(), delay);
    }

    /// From now on `login`'s permission lookup is answered 403 "Resource not
    /// accessible by integration" (an App without the Metadata permission).
    pub fn refuse_permission(&self, login: &str) {
        self.inner
            .permission_refused
            .lock()
            .unwrap()
            .insert(login.to_ascii_lowercase());
    }

    /// From now on every call with `token` is answered 401 Bad credentials.
    pub fn refuse_token(&self, token: &str) {
        self.inner
            .refused_tokens
            .lock()
            .unwrap()
            .insert(token.to_string());
    }

    /// `role` is admin, maintain, write, triage or read; "none" answers `none`.
    pub fn set_permission(&self, login: &str, role: &str) {
        let permission = match role {
            "maintain" => "write",
            "triage" => "read",
            other => other,
        };
        self.inner.permissions.lock().unwrap().insert(
            login.to_ascii_lowercase(),
            (permission.to_string(), role.to_string()),
        );
    }

    pub fn add_team_member(&self, team: &str, login: &str) {
        self.inner
            .teams
            .lock()
            .unwrap()
            .insert((team.to_ascii_lowercase(), login.to_ascii_lowercase()));
    }

    /// PR `number` does not exist: listing or creating its comments answers 404.
    pub fn set_missing(&self, number: u64) {
        self.inner.missing.lock().unwrap().insert(number);
    }

    /// PR `number` exists after all.
    pub fn set_found(&self, number: u64) {
        self.inner.missing.lock().unwrap().remove(&number);
    }

    pub fn set_merged(&self, number: u64, merged: bool) {
        self.inner.pulls.lock().unwrap().insert(number, merged);
    }

    /// The next writes (POST, PATCH) answer these instead.
    pub fn set_author(&self, number: u64, login: &str) {
        self.inner
            .authors
            .lock()
            .unwrap()
            .insert(number, login.to_string());
    }

    /// Applies every write at once but answers it only after `delay`, as a slow
    /// network would: a client that dies meanwhile never learns it succeeded.
    pub fn set_write_delay(&self, delay: std::time::Duration) {
        *self.inner.write_delay.lock().unwrap() = delay;
    }

    /// Applies the writes sent with `authorization` and never answers them,
    /// as a GitHub whose answers a dying process will not read.
    pub fn hold_writes_of(&self, authorization: &str) {
        self.inner
            .held
            .lock()
            .unwrap()
            .insert(authorization.to_string());
    }

    /// Writes by this Authorization header that are applied but not yet answered.
    pub fn in_flight(&self, authorization: &str) -> usize {
        self.inner
            .in_flight
            .lock()
            .unwrap()
            .get(authorization)
            .copied()
            .unwrap_or(0)
    }

    pub fn fail_writes(&self, failures: impl IntoIterator<Item = Failure>) {
        self.inner.write_failures.lock().unwrap().extend(failures);
    }

    pub fn comments(&self) -> Vec<FakeComment> {
        self.inner
            .comments
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }

    pub fn comments_on(&self, number: u64) -> Vec<FakeComment> {
        self.comments()
            .into_iter()
            .filter(|c| c.number == number)
            .collect()
    }

    /// Status comments (the ones gatebot edits in place) on a PR.
    pub fn status_comments(&self, number: u64) -> Vec<FakeComment> {
        self.comments_on(number)
            .into_iter()
            .filter(|c| c.body.contains("<!-- gatebot:status"))
            .collect()
    }

    pub fn status_comments_total(&self) -> usize {
        self.comments()
            .iter()
            .filter(|c| c.body.contains("<!-- gatebot:status"))
            .count()
    }

    /// Replies (not the status comment) on a PR.
    pub fn replies(&self, number: u64) -> Vec<FakeComment> {
        self.comments_on(number)
            .into_iter()
            .filter(|c| !c.body.contains("<!-- gatebot:status"))
            .collect()
    }

    pub fn reactions(&self) -> Vec<FakeReaction> {
        self.inner.reactions.lock().unwrap().clone()
    }

    pub fn reactions_on(&self, comment_id: u64) -> Vec<String> {
        self.reactions()
            .into_iter()
            .filter(|r| r.comment_id == comment_id)
            .map(|r| r.content)
            .collect()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// The App's webhook goes to `url`, signed with `secret`.
    pub fn set_webhook(&self, url: &str, secret: &str) {
        *self.inner.hook.lock().unwrap() = Some(Hook {
            url: url.to_string(),
            secret: secret.to_string(),
        });
    }

    /// Delivers `event` to the App's webhook as GitHub does (a new guid,
    /// signed) and keeps the delivery; gatebot's answer.
    pub async fn deliver(&self, event: &str, payload: &Value) -> u16 {
        let body = serde_json::to_vec(payload).unwrap();
        let guid = uuid::Uuid::new_v4().to_string();
        send(&self.inner, event, &guid, body, false).await
    }

    /// Every delivery made, oldest first.
    pub fn deliveries(&self) -> Vec<FakeDelivery> {
        self.inner.deliveries.lock().unwrap().clone()
    }

    /// The delivery ids gatebot asked to deliver again, in order.
    pub fn redelivery_requests(&self) -> Vec<u64> {
        self.inner.redelivery_requests.lock().unwrap().clone()
    }

    /// Requests to paths containing `part`.
    pub fn requests_to(&self, part: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.contains(part))
            .collect()
    }
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})),
    )
        .into_response()
}

fn user_json(login: &str, kind: &str) -> Value {
    json!({"login": login, "id": 4539057, "node_id": "MDQ6VXNlcjQ1MzkwNTc=", "type": kind, "site_admin": false,
           "html_url": format!("https://github.com/{login}"), "url": format!("https://api.github.com/users/{login}")})
}

async fn record(State(inner): State<Arc<Inner>>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let write =
        (method == Method::POST || method == Method::PATCH) && !path.ends_with("/access_tokens");
    let failure = if method == Method::POST || method == Method::PATCH {
        // Token minting is not a write gatebot makes on its own behalf.
        if path.ends_with("/access_tokens") {
            None
        } else {
            inner.write_failures.lock().unwrap().pop_front()
        }
    } else {
        None
    };
    let refused = authorization
        .as_deref()
        .and_then(|a| {
            a.strip_prefix("Bearer ")
                .or_else(|| a.strip_prefix("token "))
        })
        .is_some_and(|t| inner.refused_tokens.lock().unwrap().contains(t));
    let response = match failure {
        _ if refused => (
            StatusCode::UNAUTHORIZED,
            Json(json!({
                "message": "Bad credentials",
                "documentation_url": "https://docs.github.com/rest",
                "status": "401",
            })),
        )
            .into_response(),
        Some(f) => failed(&f),
        None if write => {
            let key = authorization.clone().unwrap_or_default();
            *inner
                .in_flight
                .lock()
                .unwrap()
                .entry(key.clone())
                .or_default() += 1;
            let _in_flight = InFlight {
                inner: inner.clone(),
                key,
            };
            let response = next.run(req).await;
            if inner.held.lock().unwrap().contains(&_in_flight.key) {
                std::future::pending::<()>().await;
            }
            let delay = *inner.write_delay.lock().unwrap();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            response
        }
        None => next.run(req).await,
    };
    inner.requests.lock().unwrap().push(Recorded {
        method: method.to_string(),
        path,
        authorization,
        status: response.status().as_u16(),
        at: std::time::Instant::now(),
    });
    response
}

/// `GET /repos/{owner}/{repo}`: the fields of GitHub's answer gatebot reads
/// (none: it asks only whether it may see the repository).
async fn repository(Path((owner, repo)): Path<(String, String)>) -> Response {
    Json(json!({
        "id": 1296269,
        "name": repo,
        "full_name": format!("{owner}/{repo}"),
        "owner": {"login": owner, "type": "Organization"},
        "private": true,
        "default_branch": "main",
        "permissions": {"admin": false, "maintain": false, "push": true, "triage": true, "pull": true},
    }))
    .into_response()
}

async fn permission(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, user)): Path<(String, String, String)>,
) -> Response {
    let delay = inner
        .permission_delays
        .lock()
        .unwrap()
        .get(&user.to_ascii_lowercase())
        .copied();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let refused = inner
        .permission_refused
        .lock()
        .unwrap()
        .contains(&user.to_ascii_lowercase());
    if refused {
        let body = json!({
            "message": "Resource not accessible by integration",
            "documentation_url": "https://docs.github.com/rest/collaborators/collaborators#get-repository-permissions-for-a-user",
            "status": "403"
        });
        return (StatusCode::FORBIDDEN, Json(body)).into_response();
    }
    let Some((permission, role)) = inner
        .permissions
        .lock()
        .unwrap()
        .get(&user.to_ascii_lowercase())
        .cloned()
    else {
        return not_found();
    };
    Json(json!({"permission": permission, "role_name": role, "user": user_json(&user, "User")}))
        .into_response()
}

async fn membership(
    State(inner): State<Arc<Inner>>,
    Path((org, team, user)): Path<(String, String, String)>,
) -> Response {
    let key = (
        format!("{org}/{team}").to_ascii_lowercase(),
        user.to_ascii_lowercase(),
    );
    if !inner.teams.lock().unwrap().contains(&key) {
        return not_found();
    }
    Json(json!({"url": format!("https://api.github.com/teams/1/memberships/{user}"), "role": "member", "state": "active"}))
        .into_response()
}

async fn pull(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, number)): Path<(String, String, u64)>,
) -> Response {
    // A PR told merged or not (`set_merged`) is closed; any other is open.
    let closed = inner.pulls.lock().unwrap().get(&number).copied();
    let merged = closed.unwrap_or(false);
    let state = if closed.is_some() { "closed" } else { "open" };
    let author = inner
        .authors
        .lock()
        .unwrap()
        .get(&number)
        .cloned()
        .unwrap_or_else(|| "kobzol".into());
    let head = head_of(&inner, number);
    Json(json!({"number": number, "state": state, "merged": merged, "user": user_json(&author, "User"), "head": {"sha": head}}))
        .into_response()
}

fn failed(f: &Failure) -> Response {
    let mut headers = HeaderMap::new();
    for (k, v) in &f.headers {
        headers.insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    (
        StatusCode::from_u16(f.status).unwrap(),
        headers,
        Json(json!({"message": f.message, "documentation_url": "https://docs.github.com/rest"})),
    )
        .into_response()
}

fn check_run_failure(inner: &Inner) -> Option<Response> {
    let f = inner.check_run_failures.lock().unwrap().pop_front()?;
    Some(failed(&f))
}

fn head_of(inner: &Inner, number: u64) -> String {
    inner
        .heads
        .lock()
        .unwrap()
        .get(&number)
        .cloned()
        .unwrap_or_else(|| format!("{number:040x}"))
}

fn unprocessable(message: &str) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"message": message})),
    )
        .into_response()
}

/// GitHub's rules for a run: a name and head, a conclusion exactly when
/// completed, at most three actions with GitHub's length limits.
fn check_body(v: &Value, creating: bool) -> Result<(), &'static str> {
    if creating && (v["name"].as_str().is_none() || v["head_sha"].as_str().is_none()) {
        return Err("name and head_sha are required");
    }
    let completed = v["status"] == "completed";
    if completed != v.get("conclusion").is_some_and(|c| !c.is_null()) {
        return Err("conclusion is required when status is completed, and only then");
    }
    let actions = v["actions"].as_array().cloned().unwrap_or_default();
    let fits =
        |a: &Value, f: &str, max: usize| a[f].as_str().is_some_and(|t| t.chars().count() <= max);
    if actions.len() > 3
        || !actions.iter().all(|a| {
            fits(a, "label", 20) && fits(a, "description", 40) && fits(a, "identifier", 20)
        })
    {
        return Err("actions: at most 3, label ≤ 20, description ≤ 40, identifier ≤ 20");
    }
    Ok(())
}

async fn create_deployment(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo)): Path<(String, String)>,
    Json(v): Json<Value>,
) -> Response {
    if let Some(f) = inner.deployment_failures.lock().unwrap().pop_front() {
        return failed(&f);
    }
    let Some(sha) = v["ref"].as_str() else {
        return unprocessable("ref is required");
    };
    let id = inner.next_id.fetch_add(1, Ordering::SeqCst);
    let d = FakeDeployment {
        id,
        repo: format!("{owner}/{repo}"),
        sha: sha.to_string(),
        environment: v["environment"].as_str().unwrap_or("production").into(),
        payload: v["payload"].clone(),
        statuses: Vec::new(),
    };
    inner.deployments.lock().unwrap().insert(id, d);
    if let Some(f) = inner.deployment_lost_answers.lock().unwrap().pop_front() {
        return failed(&f);
    }
    (StatusCode::CREATED, Json(json!({"id": id, "sha": sha}))).into_response()
}

/// `GET …/deployments?sha=&environment=`: newest first, as GitHub lists them.
async fn list_deployments(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let repo = format!("{owner}/{repo}");
    let wanted = |d: &&FakeDeployment| {
        d.repo == repo
            && q.get("sha").is_none_or(|s| *s == d.sha)
            && q.get("environment").is_none_or(|e| *e == d.environment)
    };
    let listed: Vec<Value> = inner
        .deployments
        .lock()
        .unwrap()
        .values()
        .rev()
        .filter(wanted)
        .map(|d| json!({"id": d.id, "sha": d.sha, "ref": d.sha, "environment": d.environment, "payload": d.payload}))
        .collect();
    Json(listed).into_response()
}

/// `POST …/actions/runs/{run}/deployment_protection_rule`: GitHub answers 204,
/// and 422 for a state other than approved or rejected.
async fn review_protection(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo, run)): Path<(String, String, u64)>,
    headers: HeaderMap,
    Json(v): Json<Value>,
) -> Response {
    if let Some(f) = inner.protection_failures.lock().unwrap().pop_front() {
        return failed(&f);
    }
    if !matches!(v["state"].as_str(), Some("approved" | "rejected"))
        || !v["environment_name"].is_string()
    {
        return unprocessable("environment_name and state (approved or rejected) are required");
    }
    // Decided: the run no longer waits for the environment.
    let repo_key = (format!("{owner}/{repo}").to_lowercase(), run);
    if let Some(envs) = inner.pending_deployments.lock().unwrap().get_mut(&repo_key) {
        envs.retain(|e| Some(e.as_str()) != v["environment_name"].as_str());
    }
    inner
        .protection_reviews
        .lock()
        .unwrap()
        .push(FakeProtectionReview {
            repo: format!("{owner}/{repo}"),
            run_id: run,
            body: v,
            authorization: headers
                .get("authorization")
                .and_then(|h| h.to_str().ok())
                .map(str::to_string),
        });
    StatusCode::NO_CONTENT.into_response()
}

/// `GET …/actions/runs/{run}/pending_deployments`: the environments the run
/// waits for, in GitHub's shape (an empty list for a run that waits for none).
async fn pending_deployments(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo, run)): Path<(String, String, u64)>,
) -> Response {
    let key = (format!("{owner}/{repo}").to_lowercase(), run);
    inner
        .pending_deployment_reads
        .lock()
        .unwrap()
        .push(key.clone());
    let envs = inner
        .pending_deployments
        .lock()
        .unwrap()
        .get(&key)
        .cloned()
        .unwrap_or_default();
    let listed: Vec<Value> = envs
        .iter()
        .enumerate()
        .map(|(i, name)| {
            json!({
                "environment": {
                    "id": 161_088_068 + i as u64,
                    "node_id": "MDExOkVudmlyb25tZW50NTY3MDMwMDY=",
                    "name": name,
                    "url": format!("https://api.github.com/repos/{owner}/{repo}/environments/{name}"),
                    "html_url": format!("https://github.com/{owner}/{repo}/deployments/activity_log?environments_filter={name}"),
                },
                "wait_timer": 0,
                "wait_timer_started_at": null,
                "current_user_can_approve": false,
                "reviewers": [],
            })
        })
        .collect();
    Json(listed).into_response()
}

/// The states GitHub accepts for a deployment status.
const DEPLOYMENT_STATES: [&str; 7] = [
    "error",
    "failure",
    "inactive",
    "in_progress",
    "queued",
    "pending",
    "success",
];

async fn create_deployment_status(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, id)): Path<(String, String, u64)>,
    Json(v): Json<Value>,
) -> Response {
    if !v["state"]
        .as_str()
        .is_some_and(|s| DEPLOYMENT_STATES.contains(&s))
    {
        return unprocessable("state is not a deployment state");
    }
    let mut deployments = inner.deployments.lock().unwrap();
    let Some(d) = deployments.get_mut(&id) else {
        return (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))).into_response();
    };
    d.statuses.push(v.clone());
    (
        StatusCode::CREATED,
        Json(json!({"id": id, "state": v["state"]})),
    )
        .into_response()
}

async fn create_check_run(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo)): Path<(String, String)>,
    Json(v): Json<Value>,
) -> Response {
    if let Some(failure) = check_run_failure(&inner) {
        return failure;
    }
    if let Err(why) = check_body(&v, true) {
        return unprocessable(why);
    }
    let id = inner.next_id.fetch_add(1, Ordering::SeqCst);
    let run = FakeCheckRun {
        id,
        repo: format!("{owner}/{repo}"),
        name: v["name"].as_str().unwrap_or("").into(),
        head_sha: v["head_sha"].as_str().unwrap_or("").into(),
        external_id: v["external_id"].as_str().unwrap_or("").into(),
        status: v["status"].as_str().unwrap_or("queued").into(),
        conclusion: v["conclusion"].as_str().map(str::to_string),
        output: v["output"].clone(),
        actions: v["actions"].clone(),
        edits: 0,
        started_at: v["started_at"].as_str().map_or_else(
            || humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            str::to_string,
        ),
    };
    let answer = run.to_json();
    inner.check_runs.lock().unwrap().insert(id, run);
    (StatusCode::CREATED, Json(answer)).into_response()
}

async fn edit_check_run(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, id)): Path<(String, String, u64)>,
    Json(v): Json<Value>,
) -> Response {
    if let Some(failure) = check_run_failure(&inner) {
        return failure;
    }
    if let Err(why) = check_body(&v, false) {
        return unprocessable(why);
    }
    let mut runs = inner.check_runs.lock().unwrap();
    let Some(run) = runs.get_mut(&id) else {
        return not_found();
    };
    if let Some(status) = v["status"].as_str() {
        run.status = status.into();
    }
    run.conclusion = v["conclusion"].as_str().map(str::to_string);
    if !v["output"].is_null() {
        run.output = v["output"].clone();
    }
    if !v["actions"].is_null() {
        run.actions = v["actions"].clone();
    }
    run.edits += 1;
    Json(run.to_json()).into_response()
}

async fn get_check_run(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, id)): Path<(String, String, u64)>,
) -> Response {
    match inner.check_runs.lock().unwrap().get(&id) {
        Some(run) => Json(run.to_json()).into_response(),
        None => not_found(),
    }
}

/// GitHub's pull-request objects (from the `pull_request.closed` fixture),
/// each merged, the first one as `sha`.
async fn commit_pulls(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
) -> Response {
    let numbers = inner
        .commit_pulls
        .lock()
        .unwrap()
        .get(&sha)
        .cloned()
        .unwrap_or_default();
    let path = crate::github_payloads::fixtures().join("pull_request.closed.json");
    let text = std::fs::read_to_string(&path).expect("read pull_request.closed.json");
    let event: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let pulls: Vec<Value> = numbers
        .iter()
        .enumerate()
        .map(|(i, number)| {
            let mut pull = event["pull_request"].clone();
            pull["number"] = json!(number);
            pull["url"] = json!(format!(
                "https://api.github.com/repos/{owner}/{repo}/pulls/{number}"
            ));
            pull["merged_at"] = json!("2026-12-03T09:58:12Z");
            pull["merge_commit_sha"] = json!(if i == 0 {
                sha.clone()
            } else {
                format!("{:040x}", number)
            });
            pull
        })
        .collect();
    Json(Value::Array(pulls)).into_response()
}

fn comment_json(c: &FakeComment) -> Value {
    json!({
        "id": c.id, "node_id": "IC_kwDOIYeo_c5UsZ2b",
        "url": format!("https://api.github.com/repos/{}/issues/comments/{}", c.repo, c.id),
        "html_url": format!("https://github.com/{}/pull/{}#issuecomment-{}", c.repo, c.number, c.id),
        "issue_url": format!("https://api.github.com/repos/{}/issues/{}", c.repo, c.number),
        "body": c.body, "user": user_json("gatebot-test", "User"),
        "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
        "author_association": "NONE"
    })
}

fn body_of(bytes: &Bytes, field: &str) -> Option<String> {
    serde_json::from_slice::<Value>(bytes)
        .ok()?
        .get(field)?
        .as_str()
        .map(str::to_string)
}

async fn create_comment(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    bytes: Bytes,
) -> Response {
    if inner.missing.lock().unwrap().contains(&number) {
        return not_found();
    }
    let Some(body) = body_of(&bytes, "body") else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"message": "Invalid request."})),
        )
            .into_response();
    };
    let id = inner.next_id.fetch_add(1, Ordering::SeqCst);
    let c = FakeComment {
        id,
        repo: format!("{owner}/{repo}"),
        number,
        body,
        edits: 0,
    };
    let answer = comment_json(&c);
    inner.comments.lock().unwrap().insert(id, c);
    (StatusCode::CREATED, Json(answer)).into_response()
}

async fn list_comments(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, number)): Path<(String, String, u64)>,
) -> Response {
    if inner.missing.lock().unwrap().contains(&number) {
        return not_found();
    }
    let list: Vec<Value> = inner
        .comments
        .lock()
        .unwrap()
        .values()
        .filter(|c| c.number == number)
        .map(comment_json)
        .collect();
    Json(list).into_response()
}

async fn edit_comment(
    State(inner): State<Arc<Inner>>,
    Path((_owner, _repo, id)): Path<(String, String, u64)>,
    bytes: Bytes,
) -> Response {
    let Some(body) = body_of(&bytes, "body") else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"message": "Invalid request."})),
        )
            .into_response();
    };
    let mut comments = inner.comments.lock().unwrap();
    let Some(c) = comments.get_mut(&id) else {
        return not_found();
    };
    c.body = body;
    c.edits += 1;
    Json(comment_json(c)).into_response()
}

async fn react(
    State(inner): State<Arc<Inner>>,
    Path((owner, repo, id)): Path<(String, String, u64)>,
    bytes: Bytes,
) -> Response {
    let Some(content) = body_of(&bytes, "content") else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"message": "Invalid request."})),
        )
            .into_response();
    };
    let reaction = FakeReaction {
        repo: format!("{owner}/{repo}"),
        comment_id: id,
        content: content.clone(),
    };
    let mut reactions = inner.reactions.lock().unwrap();
    // GitHub answers 200 with the existing reaction when it is already there.
    let status = if reactions.contains(&reaction) {
        StatusCode::OK
    } else {
        reactions.push(reaction);
        StatusCode::CREATED
    };
    (
        status,
        Json(json!({"id": 1, "node_id": "MDg6UmVhY3Rpb24x", "user": user_json("gatebot-test", "User"),
                    "content": content, "created_at": "2024-01-01T00:00:00Z"})),
    )
        .into_response()
}

async fn user(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    // A token from the OAuth web flow names its person; any other, the bot.
    let oauth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer gho-"))
        .map(str::to_string);
    let login = oauth.unwrap_or_else(|| inner.login.lock().unwrap().clone());
    Json(user_json(&login, "User")).into_response()
}

/// GitHub's authorize page, approving at once: back to `redirect_uri` with a
/// code and the `state` it was given.
async fn oauth_authorize(
    State(inner): State<Arc<Inner>>,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let login = inner.oauth_login.lock().unwrap().clone();
    let (Some(back), false) = (q.get("redirect_uri"), login.is_empty()) else {
        return (StatusCode::FORBIDDEN, "nobody signs in").into_response();
    };
    let mut url = format!("{back}?code=code-{login}");
    if let Some(state) = q.get("state") {
        url.push_str("&state=");
        url.push_str(&form_urlencoded::byte_serialize(state.as_bytes()).collect::<String>());
    }
    (StatusCode::FOUND, [("location", url)]).into_response()
}

/// Trades a code for a token, as `POST /login/oauth/access_token` does.
async fn oauth_token(body: Bytes) -> Response {
    let form: HashMap<String, String> = form_urlencoded::parse(&body).into_owned().collect();
    match form.get("code").and_then(|c| c.strip_prefix("code-")) {
        Some(login) if form.get("client_secret").is_some_and(|s| !s.is_empty()) => {
            Json(json!({"access_token": format!("gho-{login}"), "token_type": "bearer", "scope": ""}))
                .into_response()
        }
        _ => Json(json!({"error": "bad_verification_code", "error_description": "The code passed is incorrect or expired."}))
            .into_response(),
    }
}

async fn app_info() -> Response {
    Json(json!({"id": 1, "slug": "gatebot-test", "name": "gatebot test", "owner": user_json("acme", "Organization")}))
        .into_response()
}

async fn installation(Path((_owner, _repo)): Path<(String, String)>) -> Response {
    Json(json!({"id": 1, "app_id": 1, "account": user_json("acme", "Organization")}))
        .into_response()
}

/// `GET /orgs/{org}/installation`: the App is installed on the org.
async fn org_installation(Path(org): Path<String>) -> Response {
    Json(json!({"id": 1, "app_id": 1, "account": user_json(&org, "Organization")})).into_response()
}

async fn access_token(Path(id): Path<u64>) -> Response {
    (
        StatusCode::CREATED,
        Json(
            json!({"token": format!("ghs_installation{id}"), "expires_at": "2099-01-01T00:00:00Z",
                    "permissions": {"issues": "write", "pull_requests": "write"}}),
        ),
    )
        .into_response()
}

/// Posts one delivery attempt to the App's webhook and keeps it.
async fn send(inner: &Arc<Inner>, event: &str, guid: &str, body: Vec<u8>, redelivery: bool) -> u16 {
    let hook = inner
        .hook
        .lock()
        .unwrap()
        .clone()
        .expect("set_webhook first");
    let answer = crate::harness::client()
        .post(&hook.url)
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", guid)
        .header(
            "x-hub-signature-256",
            gatebot::testing::github::verify::sign(&hook.secret, &body),
        )
        .body(body.clone())
        .send()
        .await;
    let status_code = answer.map_or(0, |r| r.status().as_u16());
    inner.deliveries.lock().unwrap().push(FakeDelivery {
        id: inner.next_id.fetch_add(1, Ordering::SeqCst),
        guid: guid.to_string(),
        event: event.to_string(),
        redelivery,
        status_code,
        delivered_at: std::time::SystemTime::now(),
        body,
    });
    status_code
}

/// Only the App's JWT may read or redeliver its deliveries.
fn app_jwt(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("Bearer ey"))
}

fn delivery_json(d: &FakeDelivery) -> Value {
    let status = match d.status_code {
        0 => "timed out".to_string(),
        200..=299 => "OK".to_string(),
        code => StatusCode::from_u16(code)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("error")
            .to_string(),
    };
    json!({
        "id": d.id, "guid": d.guid,
        "delivered_at": humantime::format_rfc3339_seconds(d.delivered_at).to_string(),
        "redelivery": d.redelivery, "duration": 0.03, "status": status,
        "status_code": d.status_code, "event": d.event, "action": "created",
        "installation_id": 32739733, "repository_id": 1296269, "throttled_at": null
    })
}

/// `GET /app/hook/deliveries`: newest first, `per_page` at a time, the next
/// page's cursor in `Link` as GitHub gives it.
async fn list_deliveries(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    if !app_jwt(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "A JSON web token could not be decoded"})),
        )
            .into_response();
    }
    let per_page = q
        .get("per_page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let before = q
        .get("cursor")
        .and_then(|c| c.strip_prefix("v1_"))
        .and_then(|c| c.parse::<u64>().ok());
    let all: Vec<FakeDelivery> = inner
        .deliveries
        .lock()
        .unwrap()
        .iter()
        .rev()
        .filter(|d| before.is_none_or(|b| d.id < b))
        .cloned()
        .collect();
    let page: Vec<Value> = all.iter().take(per_page).map(delivery_json).collect();
    let mut response = Json(page).into_response();
    if all.len() > per_page {
        let last = all[per_page - 1].id;
        let link = format!(
            "<https://api.github.com/app/hook/deliveries?per_page={per_page}&cursor=v1_{last}>; rel=\"next\""
        );
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

/// `POST /app/hook/deliveries/{id}/attempts`: 202, then the delivery again,
/// under its guid, as GitHub does it: a moment later.
async fn redeliver(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    if !app_jwt(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"message": "A JSON web token could not be decoded"})),
        )
            .into_response();
    }
    let Some(d) = inner
        .deliveries
        .lock()
        .unwrap()
        .iter()
        .find(|d| d.id == id)
        .cloned()
    else {
        return not_found();
    };
    inner.redelivery_requests.lock().unwrap().push(id);
    let inner = inner.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        send(&inner, &d.event, &d.guid, d.body, true).await;
    });
    (StatusCode::ACCEPTED, Json(json!({}))).into_response()
}

/// GitHub's "create a GitHub App from a manifest" page, submitted at once: the
/// form's `manifest` becomes a code, and the browser goes back to the
/// manifest's `redirect_url` with it and the form's `state`.
async fn new_app(
    State(inner): State<Arc<Inner>>,
    query: axum::extract::Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    manifest_form(&inner, None, &query, &body)
}

async fn new_org_app(
    State(inner): State<Arc<Inner>>,
    Path(org): Path<String>,
    query: axum::extract::Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    manifest_form(&inner, Some(org), &query, &body)
}

fn manifest_form(
    inner: &Inner,
    org: Option<String>,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Response {
    let form: HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
    let Some(manifest) = form
        .get("manifest")
        .and_then(|m| serde_json::from_str::<Value>(m).ok())
    else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid GitHub App configuration: no manifest",
        )
            .into_response();
    };
    let complete = manifest["name"].is_string()
        && manifest["hook_attributes"]["url"].is_string()
        && manifest["default_permissions"].is_object();
    let Some(back) = manifest["redirect_url"].as_str().filter(|_| complete) else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid GitHub App configuration",
        )
            .into_response();
    };
    let code = format!("manifest-{}", inner.next_id.fetch_add(1, Ordering::SeqCst));
    let mut url = format!("{back}?code={code}");
    if let Some(state) = query.get("state") {
        url.push_str("&state=");
        url.push_str(&form_urlencoded::byte_serialize(state.as_bytes()).collect::<String>());
    }
    inner
        .app_manifests
        .lock()
        .unwrap()
        .push((org.clone(), manifest.clone()));
    inner
        .manifest_codes
        .lock()
        .unwrap()
        .insert(code, (org, manifest));
    (StatusCode::FOUND, [("location", url)]).into_response()
}

/// `POST /app-manifests/{code}/conversions`: the App's credentials, once per code.
async fn convert_manifest(State(inner): State<Arc<Inner>>, Path(code): Path<String>) -> Response {
    let Some((org, manifest)) = inner.manifest_codes.lock().unwrap().remove(&code) else {
        return (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))).into_response();
    };
    inner
        .manifest_conversions
        .lock()
        .unwrap()
        .push(code.clone());
    let id = inner.next_id.fetch_add(1, Ordering::SeqCst);
    let name = manifest["name"].as_str().unwrap_or("gatebot").to_string();
    let owner = org.unwrap_or_else(|| inner.login.lock().unwrap().clone());
    (
        StatusCode::CREATED,
        Json(json!({
            "id": id, "slug": name, "node_id": format!("A_{id}"), "name": name,
            "owner": user_json(&owner, "Organization"),
            "html_url": format!("https://github.com/apps/{name}"),
            "external_url": manifest["url"], "permissions": manifest["default_permissions"],
            "events": manifest["default_events"],
            "client_id": format!("Iv1.{id}"), "client_secret": format!("client-secret-{id}"),
            "webhook_secret": format!("webhook-secret-{id}"),
            "pem": format!("-----BEGIN RSA PRIVATE KEY-----\nkey-of-app-{id}\n-----END RSA PRIVATE KEY-----\n"),
            "padding": "x".repeat(usize::try_from(inner.conversion_padding.load(Ordering::SeqCst)).unwrap_or(0)),
        })),
    )
        .into_response()
}
