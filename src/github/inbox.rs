//! Works stored GitHub deliveries (the inbox route `github`): commands in PR
//! comments, pushes and closes. Replays are safe: a delivery's id is made of
//! signed fields (the comment's id and `updated_at`), the engine applies each
//! (delivery, gate, action) once, and replies are queued with once-keys. A
//! command written before the PR's last push, or the gate's last close, opens nothing.
//!
//! Reads GitHub (permission, team membership, a closed PR's merge state) but
//! never writes to it here: reactions and replies are outbox jobs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::client::GithubClient;
use super::events::{IssueCommentEvent, PullRequestEvent, User};
use super::sink::GithubJob;
use super::status::view;
use super::{is_own_comment, pushes, quoted_command, MARKER, SOURCE};
use crate::command::{new_commands, parse_comment, Command, Parsed};
use crate::config::Permission;
use crate::core::authors;
use crate::core::commands::{self, kind_opened_by, Subject};
use crate::core::dispatch::{self, Authorizer, Outcome, Request};
use crate::core::AppState;
use crate::core::Provenance;
use crate::gate::state::rfc3339;
use crate::gate::{Actor, GateKey, GateKind, Millis, PrNumber, RepoName, Source};
use crate::notify::{BoxFuture, Handler, SendError};
use crate::policy::Policy;
use crate::store::{NewJob, QueueItem, Store};

/// How long a permission or team answer is trusted.
const CACHE_TTL: Duration = Duration::from_secs(60);

/// (repository or team, login) → when asked, and the answer.
type Cache<T> = Mutex<HashMap<(String, String), (Instant, T)>>;

pub struct GithubInbox {
    state: AppState,
    client: Arc<GithubClient>,
    policy: Policy,
    permissions: Cache<Option<Permission>>,
    teams: Cache<bool>,
    own_login: tokio::sync::OnceCell<String>,
}

fn retry(e: impl std::fmt::Display) -> SendError {
    SendError::retry(e.to_string())
}

/// One line of a reply.
struct Line {
    command: Option<String>,
    message: String,
}

/// Why a comment's opening commands may be out of date.
struct Stale {
    closed_unmerged: bool,
    /// The PR's last push, when the comment was written before it, and the
    /// gate kinds a push closes (GATEBOT_GITHUB_CLOSE_ON_PUSH; checked at start).
    pushed: Option<(Millis, Vec<GateKind>)>,
}

/// What came of one comment.
#[derive(Default)]
struct Reply {
    lines: Vec<Line>,
    applied: bool,
    refused: bool,
    extra: Vec<(GithubJob, &'static str)>,
}

/// Who may run a command from this comment: the PR is open (or merged), the
/// comment is newer than the last push, and the person has the permission,
/// team and four eyes the policy asks for.
struct CommentAuthorizer<'a> {
    inbox: &'a GithubInbox,
    repo: &'a RepoName,
    user: &'a str,
    pr_author: &'a str,
    stale: &'a Stale,
}

impl Authorizer for CommentAuthorizer<'_> {
    type Denied = String;

    fn authorize<'a>(
        &'a self,
        command: Command,
        _keys: &'a [GateKey],
    ) -> BoxFuture<'a, Result<Result<(), String>, SendError>> {
        Box::pin(async move {
            if self.stale.closed_unmerged {
                return Ok(Err("this pull request was closed without merging, so its gates no longer take commands: reopen it first".to_string()));
            }
            let pushed =
                self.stale.pushed.as_ref().filter(|(_, kinds)| {
                    kind_opened_by(command).is_some_and(|k| kinds.contains(&k))
                });
            if let Some((at, _)) = pushed {
                return Ok(Err(format!(
                    "written before the push at {}, so it was about an earlier revision: comment again",
                    rfc3339(*at)
                )));
            }
            self.inbox
                .authorize(command, self.repo, self.user, self.pr_author)
                .await
        })
    }
}

impl GithubInbox {
    pub fn new(state: AppState, client: Arc<GithubClient>, policy: Policy) -> Self {
        Self {
            state,
            client,
            policy,
            permissions: Mutex::new(HashMap::new()),
            teams: Mutex::new(HashMap::new()),
            own_login: tokio::sync::OnceCell::new(),
        }
    }

    fn allowed(&self, repo: &RepoName) -> bool {
        let list = &self.state.config.github.allowed_repositories;
        list.is_empty() || list.contains(repo)
    }

    async fn is_self(&self, user: &User) -> bool {
        if let Some(login) = &self.state.config.github.bot_login {
            return login.eq_ignore_ascii_case(&user.login);
        }
        let found = self
            .own_login
            .get_or_try_init(|| async { self.client.own_login().await })
            .await;
        match found {
            Ok(login) => login.eq_ignore_ascii_case(&user.login),
            // Our comments also carry a marker; that check still applies.
            Err(e) => {
                tracing::debug!(error = %e, "cannot learn gatebot's own login");
                false
            }
        }
    }

    async fn permission(
        &self,
        repo: &RepoName,
        user: &str,
    ) -> Result<Option<Permission>, SendError> {
        let key = (repo.to_string(), user.to_ascii_lowercase());
        if let Some((at, p)) = self.permissions.lock().expect("cache poisoned").get(&key) {
            if at.elapsed() < CACHE_TTL {
                return Ok(*p);
            }
        }
        let p = self
            .client
            .permission(repo, user)
            .await
            .map_err(|e| e.to_send_error())?;
        self.permissions
            .lock()
            .expect("cache poisoned")
            .insert(key, (Instant::now(), p));
        Ok(p)
    }

    async fn in_team(&self, repo: &RepoName, team: &str, user: &str) -> Result<bool, SendError> {
        let Some((org, slug)) = team.trim().trim_start_matches('@').split_once('/') else {
            return Ok(false);
        };
        let key = (team.to_ascii_lowercase(), user.to_ascii_lowercase());
        if let Some((at, m)) = self.teams.lock().expect("cache poisoned").get(&key) {
            if at.elapsed() < CACHE_TTL {
                return Ok(*m);
            }
        }
        let m = self
            .client
            .team_member(repo, org, slug, user)
            .await
            .map_err(|e| e.to_send_error())?;
        self.teams
            .lock()
            .expect("cache poisoned")
            .insert(key, (Instant::now(), m));
        Ok(m)
    }

    /// Ok(Err(why)) when the person may not run the command.
    async fn authorize(
        &self,
        command: Command,
        repo: &RepoName,
        user: &str,
        pr_author: &str,
    ) -> Result<Result<(), String>, SendError> {
        let rule = self.policy.github(command);
        if rule.forbid_self_approval && user.eq_ignore_ascii_case(pr_author) {
            return Ok(Err(format!(
                "you opened this pull request, so someone else must run `/{command}` (four eyes)"
            )));
        }
        let has = self.permission(repo, user).await?;
        if has < Some(rule.min_permission) {
            let name = permission_name(rule.min_permission);
            return Ok(Err(format!(
                "`/{command}` needs {name} permission on {repo} and you have {}: ask someone with {name} access to run it, or to give you that access",
                has.map_or("none", permission_name)
            )));
        }
        if !rule.teams.is_empty() {
            for team in &rule.teams {
                if self.in_team(repo, team, user).await? {
                    return Ok(Ok(()));
                }
            }
            let teams: Vec<String> = rule.teams.iter().map(|t| format!("@{t}")).collect();
            return Ok(Err(format!(
                "`/{command}` needs membership in {}: ask a member to run it",
                teams.join(" or ")
            )));
        }
        Ok(Ok(()))
    }

    /// Whether a closed PR was merged (commands still work after a merge).
    async fn merged(&self, e: &IssueCommentEvent, repo: &RepoName) -> Result<bool, SendError> {
        match e
            .issue
            .pull_request
            .as_ref()
            .and_then(|p| p.merged_at.clone())
        {
            Some(merged_at) => Ok(merged_at.is_some()),
            // Older servers leave merged_at out: ask.
            None => self
                .client
                .pull(repo, PrNumber(e.issue.number))
                .await
                .map(|p| p.merged)
                .map_err(|e| e.to_send_error()),
        }
    }

    /// For four eyes in Slack, which sees no pull request.
    async fn remember_author(
        &self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
    ) -> Result<(), SendError> {
        authors::remember(
            &self.state.store,
            repo,
            number,
            login,
            self.state.engine.now(),
        )
        .await
        .map_err(retry)
    }

    async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<(), SendError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let now = self.state.clock.now_ms();
        let mut tx = self.state.store.begin().await.map_err(retry)?;
        let mut queued = false;
        for job in &jobs {
            queued |= Store::enqueue(&mut tx, job, now).await.map_err(retry)?;
        }
        tx.commit().await.map_err(retry)?;
        if queued {
            self.state.engine.wake_outbox();
        }
        Ok(())
    }

    fn count(&self, command: &str, result: &'static str) {
        dispatch::count(&self.state.engine, SOURCE, command, result);
    }

    async fn issue_comment(&self, delivery: &str, payload: &str) -> Result<(), SendError> {
        let e: IssueCommentEvent = serde_json::from_str(payload)
            .map_err(|err| SendError::Permanent(format!("unreadable delivery: {err}")))?;
        let Some((repo, number)) = e.pr() else {
            return Ok(());
        };
        if !e.on_pull_request() || !self.allowed(&repo) {
            return Ok(());
        }
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        self.remember_author(&repo, number, &e.issue.user.login)
            .await?;
        let body = e.comment.body.clone().unwrap_or_default();
        let author = &e.comment.user;
        if is_own_comment(&body) || self.is_self(author).await {
            return Ok(());
        }
        let parsed = match e.action.as_str() {
            "created" => parse_comment(&body),
            "edited" => match e.changes.as_ref().and_then(|c| c.body.as_ref()) {
                Some(old) => new_commands(&old.from, &body),
                None => Vec::new(),
            },
            _ => return Ok(()),
        };
        let once = |purpose: &str| format!("github:{delivery}:{purpose}");
        let installation = e.installation.as_ref().map(|i| i.id);
        let comment = |body: String| GithubJob::Comment {
            repo: repo.clone(),
            number,
            body,
            installation,
        };
        let react = |content: &str| GithubJob::Reaction {
            repo: repo.clone(),
            comment_id: e.comment.id,
            content: content.to_string(),
            installation,
        };

        if parsed.is_empty() {
            // A quoted or fenced command is not run; say so, since the person may
            // have meant it.
            if e.action == "created" && !author.is_bot() {
                if let Some(cmd) = quoted_command(&body) {
                    let text = self.reply(&author.login, vec![Line {
                        command: Some(format!("/{cmd}")),
                        message: "commands inside quotes or code are not run: write it at the start of a line of its own".into(),
                    }])?;
                    self.enqueue(vec![comment(text).once(once("reply"))?])
                        .await?;
                }
            }
            return Ok(());
        }
        if author.is_bot() {
            for p in &parsed {
                self.count(&word(p), "ignored");
            }
            let text = self.reply(
                &author.login,
                vec![Line {
                    command: None,
                    message: "comments by bots are never run as commands".into(),
                }],
            )?;
            return self.enqueue(vec![comment(text).once(once("reply"))?]).await;
        }

        self.enqueue(vec![react("eyes").once(once("eyes"))?])
            .await?;
        let closed_unmerged = e.issue.state == "closed" && !self.merged(&e, &repo).await?;
        // Written before the last push: about an earlier revision (GitHub's clock on both sides).
        let pushed = pushes::last(&self.state.store, &repo, number)
            .await
            .map_err(retry)?
            .filter(|at| e.written_at().is_some_and(|w| w < *at))
            .map(|at| {
                let kinds = self.state.config.close_on_push_kinds().unwrap_or_default();
                (at, kinds)
            });
        let stale = Stale {
            closed_unmerged,
            pushed,
        };
        let subject = Subject::Pr {
            repo: repo.clone(),
            number,
        };
        let mut out = Reply::default();
        for p in parsed {
            self.run(p, &e, &repo, &subject, &stale, delivery, &mut out)
                .await?;
        }
        let mut jobs = Vec::new();
        for (job, purpose) in out.extra {
            jobs.push(job.once(once(purpose))?);
        }
        if !out.lines.is_empty() {
            let text = self.reply(&author.login, out.lines)?;
            jobs.push(comment(text).once(once("reply"))?);
        }
        if out.applied {
            jobs.push(react("rocket").once(once("rocket"))?);
        }
        if out.refused {
            jobs.push(react("confused").once(once("confused"))?);
        }
        self.enqueue(jobs).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        parsed: Parsed,
        e: &IssueCommentEvent,
        repo: &RepoName,
        subject: &Subject,
        stale: &Stale,
        delivery: &str,
        out: &mut Reply,
    ) -> Result<(), SendError> {
        let user = &e.comment.user.login;
        let number = PrNumber(e.issue.number);
        let inv = match parsed {
            Parsed::Unknown { word, .. } => {
                self.count("unknown", "unknown");
                out.refused = true;
                out.lines.push(Line {
                    command: Some(format!("/{word}")),
                    message: "is not a gatebot command: comment `/help` for the list".into(),
                });
                return Ok(());
            }
            Parsed::Command(inv) => inv,
        };
        let command = inv.command;
        match command {
            Command::Help => {
                let commands = dispatch::help();
                let text = self
                    .state
                    .templates
                    .render(
                        "github/help.md.j2",
                        json!({"marker": MARKER, "author": user, "subject": subject.display(), "commands": commands}),
                    )
                    .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
                out.extra.push((
                    GithubJob::Comment {
                        repo: repo.clone(),
                        number,
                        body: text,
                        installation: e.installation.as_ref().map(|i| i.id),
                    },
                    "help",
                ));
                self.count("help", "answered");
                return Ok(());
            }
            Command::Status => {
                let pr = view(&self.state.store, repo, number, self.state.clock.now_ms())
                    .await
                    .map_err(retry)?;
                let text = self
                    .state
                    .templates
                    .render(
                        "github/status.md.j2",
                        json!({"marker": MARKER, "subject": pr.subject, "gates": pr.gates, "events": pr.events, "reply": true}),
                    )
                    .map_err(|e| SendError::Permanent(format!("{e:#}")))?;
                out.extra.push((
                    GithubJob::Comment {
                        repo: repo.clone(),
                        number,
                        body: text,
                        installation: e.installation.as_ref().map(|i| i.id),
                    },
                    "status",
                ));
                self.count("status", "answered");
                return Ok(());
            }
            _ => {}
        }
        let who = Provenance::new(Actor::new(user.clone(), Source::Github))
            .delivery(delivery)
            .written_at(e.written_at())
            .reason(inv.reason.clone());
        let request = Request {
            command,
            subject: subject.clone(),
            who,
        };
        let authorizer = CommentAuthorizer {
            inbox: self,
            repo,
            user,
            pr_author: &e.issue.user.login,
            stale,
        };
        let why = match dispatch::run(&self.state.engine, SOURCE, &request, &authorizer).await? {
            Outcome::Applied(_) => {
                out.applied = true;
                return Ok(());
            }
            Outcome::Denied(why) => why,
            Outcome::Held { gate, by, via } => {
                format!("{gate} is held by {by} via {via}: comment `/unhold` first")
            }
            Outcome::WrittenBeforeClose { closed_at, .. } => format!(
                "written before the gate closed at {}: comment again",
                rfc3339(closed_at)
            ),
        };
        out.refused = true;
        out.lines.push(Line {
            command: Some(format!("/{command}")),
            message: format!("not done: {why}"),
        });
        Ok(())
    }

    fn reply(&self, author: &str, lines: Vec<Line>) -> Result<String, SendError> {
        let lines: Vec<_> = lines
            .into_iter()
            .map(|l| json!({"command": l.command, "message": l.message}))
            .collect();
        self.state
            .templates
            .render(
                "github/reply.md.j2",
                json!({"marker": MARKER, "author": author, "lines": lines}),
            )
            .map_err(|e| SendError::Permanent(format!("{e:#}")))
    }

    async fn pull_request(&self, delivery: &str, payload: &str) -> Result<(), SendError> {
        let e: PullRequestEvent = serde_json::from_str(payload)
            .map_err(|err| SendError::Permanent(format!("unreadable delivery: {err}")))?;
        let Some((repo, number)) = e.pr() else {
            return Ok(());
        };
        if !self.allowed(&repo) {
            return Ok(());
        }
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        self.remember_author(&repo, number, &e.pull_request.user.login)
            .await?;
        let (kinds, reason) = match e.action.as_str() {
            "synchronize" => {
                if let Some(at) = e.updated_at() {
                    pushes::remember(
                        &self.state.store,
                        &repo,
                        number,
                        at,
                        self.state.engine.now(),
                    )
                    .await
                    .map_err(retry)?;
                }
                let sha = e
                    .after
                    .as_deref()
                    .unwrap_or("")
                    .chars()
                    .take(7)
                    .collect::<String>();
                (
                    // Checked at start; were it unreadable, closing nothing would hide it.
                    self.state
                        .config
                        .close_on_push_kinds()
                        .map_err(SendError::Permanent)?,
                    if sha.is_empty() {
                        "new commits pushed".to_string()
                    } else {
                        format!("new commits pushed ({sha})")
                    },
                )
            }
            "closed" if e.pull_request.merged != Some(true) => (
                GateKind::ROUTABLE.to_vec(),
                "pull request closed without merging".to_string(),
            ),
            _ => return Ok(()),
        };
        let login = if e.sender.login.is_empty() {
            "github".to_string()
        } else {
            e.sender.login.clone()
        };
        let who = Provenance::new(Actor::new(login, Source::Github))
            .reason(Some(reason))
            .delivery(delivery);
        commands::close_pr_gates(&self.state.engine, &repo, number, &kinds, &who)
            .await
            .map_err(retry)?;
        Ok(())
    }
}

fn word(p: &Parsed) -> String {
    match p {
        Parsed::Command(inv) => inv.command.as_str().to_string(),
        Parsed::Unknown { .. } => "unknown".to_string(),
    }
}

fn permission_name(p: Permission) -> &'static str {
    match p {
        Permission::Read => "read",
        Permission::Triage => "triage",
        Permission::Write => "write",
        Permission::Maintain => "maintain",
        Permission::Admin => "admin",
    }
}

impl Handler for GithubInbox {
    /// One pull request's deliveries apply in order; other PRs don't wait for them.
    fn lane(&self, item: &QueueItem) -> Option<String> {
        let (repo, number) = match item.topic.as_str() {
            "issue_comment" => serde_json::from_str::<IssueCommentEvent>(&item.payload)
                .ok()?
                .pr()?,
            "pull_request" => serde_json::from_str::<PullRequestEvent>(&item.payload)
                .ok()?
                .pr()?,
            _ => return None,
        };
        Some(format!("{repo}#{number}"))
    }

    fn handle<'a>(&'a self, item: &'a QueueItem) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let delivery = item.id.strip_prefix("github:").unwrap_or(&item.id);
            match item.topic.as_str() {
                "issue_comment" => self.issue_comment(delivery, &item.payload).await,
                "pull_request" => self.pull_request(delivery, &item.payload).await,
                _ => Ok(()),
            }
        })
    }
}
