//! Works stored GitHub deliveries (the inbox route `github`): commands in PR
//! comments, pushes and closes. Replays are safe: a delivery's id is made of
//! signed fields (the comment's id and `updated_at`), the engine applies each
//! (delivery, gate, action) once, and replies are queued with once-keys. A
//! command written before the PR's last push, or the gate's last close, opens nothing.
//!
//! Reads GitHub (permission, team membership, a closed PR's merge state) but
//! never writes to it here: reactions and replies are outbox jobs.

use std::sync::Arc;

use super::access::{Access, Stale};
use super::client::GithubClient;
use super::comment::{Line, Reply, Step};
use super::events::{IssueCommentEvent, PullRequestEvent, User};
use super::sink::GithubJob;
use super::{is_own_comment, pushes, quoted_command, SOURCE};
use crate::command::{new_commands, parse_comment, Parsed};
use crate::core::authors;
use crate::core::commands::Subject;
use crate::core::dispatch;
use crate::core::unit::Unit;
use crate::core::AppState;
use crate::gate::{DeliveryId, PrNumber, RepoName};
use crate::notify::{BoxFuture, Handler, Lease, SendError, Settled};
use crate::policy::Policy;
use crate::store::{NewJob, QueueItem, Store};

pub struct GithubInbox {
    pub(super) state: AppState,
    pub(super) client: Arc<GithubClient>,
    pub(super) access: Access,
    own_login: tokio::sync::OnceCell<String>,
}

fn retry(e: impl std::fmt::Display) -> SendError {
    SendError::retry(e.to_string())
}

/// A PR author seen for the first time in a delivery.
struct Learned {
    repo: RepoName,
    number: PrNumber,
    login: String,
}

impl Learned {
    async fn write(&self, unit: &mut Unit<'_>) -> Result<(), SendError> {
        let now = unit.now();
        Store::put_pr_author(unit.tx(), &self.repo, self.number, &self.login, now)
            .await
            .map_err(retry)
    }
}

/// Settles the delivery in `unit` and commits it.
async fn finish(mut unit: Unit<'_>, item: &QueueItem, lease: &Lease) -> Result<Settled, SendError> {
    let now = unit.now();
    Store::finish_in(unit.tx(), lease.queue, &item.id, &lease.owner, now)
        .await
        .map_err(retry)?;
    unit.commit().await.map_err(retry)?;
    Ok(Settled::Done)
}

impl GithubInbox {
    pub fn new(state: AppState, client: Arc<GithubClient>, policy: Policy) -> Self {
        Self {
            state,
            access: Access::new(client.clone(), policy),
            client,
            own_login: tokio::sync::OnceCell::new(),
        }
    }

    pub(super) fn allowed(&self, repo: &RepoName) -> bool {
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
    pub(super) async fn remember_author(
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

    /// Queues `jobs`, records a newly learned PR author and settles the
    /// delivery in one transaction; with nothing to write, the worker settles it.
    async fn settle(
        &self,
        item: &QueueItem,
        lease: &Lease,
        jobs: Vec<NewJob>,
        learned: Option<Learned>,
    ) -> Result<Settled, SendError> {
        if jobs.is_empty() && learned.is_none() {
            return Ok(Settled::NotYet);
        }
        let mut unit = self.state.engine.begin().await.map_err(retry)?;
        unit.enqueue(&jobs).await.map_err(retry)?;
        if let Some(learned) = &learned {
            learned.write(&mut unit).await?;
        }
        finish(unit, item, lease).await
    }

    /// The PR's author when gatebot did not know it yet (for four eyes in
    /// Slack, which sees no pull request).
    async fn new_author(
        &self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
    ) -> Result<Option<Learned>, SendError> {
        let new = authors::is_new(&self.state.store, repo, number, login)
            .await
            .map_err(retry)?;
        Ok(new.then(|| Learned {
            repo: repo.clone(),
            number,
            login: login.to_string(),
        }))
    }

    /// The gate kinds a push closes. Checked at start (`Config::problems`);
    /// were it unreadable, closing nothing would hide it.
    pub(super) fn close_on_push(&self) -> Result<Vec<crate::gate::GateKind>, SendError> {
        self.state
            .config
            .close_on_push_kinds()
            .map_err(SendError::Permanent)
    }

    fn count(&self, command: &str, result: &'static str) {
        dispatch::count(&self.state.engine, SOURCE, command, result);
    }

    /// A comment's commands, their audit entries and every reply and reaction
    /// commit together with the delivery's settlement.
    async fn issue_comment(
        &self,
        item: &QueueItem,
        delivery: &DeliveryId,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
        let e: IssueCommentEvent = serde_json::from_str(&item.payload)
            .map_err(|err| SendError::Permanent(format!("unreadable delivery: {err}")))?;
        let Some((repo, number)) = e.pr() else {
            return Ok(Settled::NotYet);
        };
        if !e.on_pull_request() || !self.allowed(&repo) {
            return Ok(Settled::NotYet);
        }
        if let Some(i) = &e.installation {
            self.client.learn_installation(&repo, i.id);
        }
        // Written with the rest of what the comment does.
        let learned = self.new_author(&repo, number, &e.issue.user.login).await?;
        let body = e.comment.body.clone().unwrap_or_default();
        let author = &e.comment.user;
        if is_own_comment(&body) || self.is_self(author).await {
            return self.settle(item, lease, Vec::new(), learned).await;
        }
        let parsed = match e.action.as_str() {
            "created" => parse_comment(&body),
            "edited" => match e.changes.as_ref().and_then(|c| c.body.as_ref()) {
                Some(old) => new_commands(&old.from, &body),
                None => Vec::new(),
            },
            _ => return self.settle(item, lease, Vec::new(), learned).await,
        };
        let once = |purpose: &str| delivery.once_key("github", purpose);
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
                    let jobs = vec![comment(text).once(once("reply"))?];
                    return self.settle(item, lease, jobs, learned).await;
                }
            }
            return self.settle(item, lease, Vec::new(), learned).await;
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
            return self
                .settle(
                    item,
                    lease,
                    vec![comment(text).once(once("reply"))?],
                    learned,
                )
                .await;
        }

        let closed_unmerged = e.issue.state == "closed" && !self.merged(&e, &repo).await?;
        // Written before the last push: about an earlier revision (GitHub's clock on both sides).
        let pushed = match pushes::last(&self.state.store, &repo, number)
            .await
            .map_err(retry)?
            .filter(|at| e.written_at().is_some_and(|w| w < *at))
        {
            Some(at) => Some((at, self.close_on_push()?)),
            None => None,
        };
        let stale = Stale {
            closed_unmerged,
            pushed,
        };
        let subject = Subject::Pr {
            repo: repo.clone(),
            number,
        };
        // Asking GitHub (permissions, teams) happens before the transaction opens.
        let mut steps = Vec::new();
        for p in parsed {
            steps.push(self.step(p, &e, &repo, &subject, &stale, delivery).await?);
        }
        let mut out = Reply::default();
        let mut froze = false;
        let mut unit = self.state.engine.begin().await.map_err(retry)?;
        let mut jobs = vec![react("eyes").once(once("eyes"))?];
        for step in steps {
            match step {
                Step::Unknown(word) => {
                    unit.count(SOURCE, "unknown", "unknown");
                    out.refused = true;
                    out.lines.push(Line {
                        command: Some(format!("/{word}")),
                        message: "is not a gatebot command: comment `/help` for the list".into(),
                    });
                }
                Step::Answer { job, purpose } => {
                    unit.count(SOURCE, purpose, "answered");
                    out.extra.push((job, purpose));
                }
                Step::Unreadable { word, why } => {
                    unit.count(SOURCE, word, "refused");
                    out.refused(word, why);
                }
                Step::Command {
                    request,
                    authorized,
                } => {
                    let outcome = dispatch::decide(&mut unit, SOURCE, &request, authorized)
                        .await
                        .map_err(retry)?;
                    froze |= dispatch::changed_freezes(&outcome);
                    out.render(&request.command, outcome);
                }
            }
        }
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
        unit.enqueue(&jobs).await.map_err(retry)?;
        if let Some(learned) = &learned {
            learned.write(&mut unit).await?;
        }
        let settled = finish(unit, item, lease).await?;
        if froze {
            self.state.engine.reload_freezes().await.map_err(retry)?;
        }
        Ok(settled)
    }
}

/// The delivery an inbox item holds: its id is `github:` and the signed id.
fn delivery_of(item: &QueueItem) -> DeliveryId {
    DeliveryId::github(item.id.strip_prefix("github:").unwrap_or(&item.id))
}

fn word(p: &Parsed) -> String {
    match p {
        Parsed::Command(inv) => inv.command.as_str().to_string(),
        Parsed::Unknown { .. } => "unknown".to_string(),
        Parsed::Freeze { unfreeze, .. } => {
            if *unfreeze { "unfreeze" } else { "freeze" }.to_string()
        }
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
            let delivery = delivery_of(item);
            match item.topic.as_str() {
                "pull_request" => self.pull_request(&delivery, &item.payload).await,
                _ => Ok(()),
            }
        })
    }

    fn handle_leased<'a>(
        &'a self,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            let delivery = delivery_of(item);
            match item.topic.as_str() {
                "issue_comment" => self.issue_comment(item, &delivery, lease).await,
                _ => self.handle(item).await.map(|()| Settled::NotYet),
            }
        })
    }
}
