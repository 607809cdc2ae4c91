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
use super::events::{
    CheckRunEvent, DeploymentProtectionRuleEvent, IssueCommentEvent, PullRequestEvent,
    PullRequestReviewEvent, User,
};
use super::reply::Line;
use super::retry;
use super::sink::GithubJob;
use super::{is_own_comment, pushes, quoted_command, SOURCE};
use crate::command::{new_commands, parse_comment, Parsed};
use crate::core::authors;
use crate::core::dispatch;
use crate::core::intake::{self, Intake, Mark, Replies, Said};
use crate::core::AppState;
use crate::gate::{DeliveryId, PrNumber, RepoName};
use crate::notify::{BoxFuture, Lease, SendError, Settled};
use crate::policy::Policy;
use crate::store::{NewJob, QueueItem};

pub struct GithubInbox {
    pub(super) state: AppState,
    pub(super) client: Arc<GithubClient>,
    pub(super) access: Access,
    own_login: tokio::sync::OnceCell<String>,
}

/// A PR author seen for the first time in a delivery.
struct Learned {
    repo: RepoName,
    number: PrNumber,
    login: String,
}

impl Learned {
    /// The row that keeps it, written with the delivery's settlement.
    fn mark(self) -> Mark {
        Mark::PrAuthor {
            repo: self.repo,
            number: self.number,
            login: self.login,
        }
    }
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
            &self.state.records,
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
        lease: &Lease,
        jobs: Vec<NewJob>,
        learned: Option<Learned>,
    ) -> Result<Settled, SendError> {
        if jobs.is_empty() && learned.is_none() {
            return Ok(Settled::NotYet);
        }
        let mut said = Said::jobs(jobs);
        said.marks.extend(learned.map(Learned::mark));
        intake::answer(&self.state.engine, said, Some(lease)).await?;
        Ok(Settled::Done)
    }

    /// The PR's author when gatebot did not know it yet (for four eyes in
    /// Slack, which sees no pull request).
    async fn new_author(
        &self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
    ) -> Result<Option<Learned>, SendError> {
        let new = authors::is_new(&self.state.records, repo, number, login)
            .await
            .map_err(retry)?;
        Ok(new.then(|| Learned {
            repo: repo.clone(),
            number,
            login: login.to_string(),
        }))
    }

    fn count(&self, command: &str, result: &'static str) {
        dispatch::count(&self.state.engine, SOURCE, command, result);
    }

    /// A comment's commands, their audit entries and every reply and reaction
    /// commit together with the delivery's settlement.
    async fn issue_comment(
        &self,
        e: &IssueCommentEvent,
        item: &QueueItem,
        delivery: &DeliveryId,
        lease: &Lease,
    ) -> Result<Settled, SendError> {
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
        let c = Comment {
            e,
            repo,
            number,
            delivery,
        };
        let jobs = match self.parse(&c, &body).await {
            Some(parsed)
                if !parsed.is_empty() && !e.comment.user.is_bot() && !e.edited_by_another() =>
            {
                return self.run(item, lease, &c, parsed, learned).await;
            }
            Some(parsed) => self.not_run(&c, &body, &parsed)?,
            None => Vec::new(),
        };
        self.settle(lease, jobs, learned).await
    }

    /// The comment's command lines; None when it is gatebot's own or neither
    /// written nor edited.
    async fn parse(&self, c: &Comment<'_>, body: &str) -> Option<Vec<Parsed>> {
        if is_own_comment(body) || self.is_self(&c.e.comment.user).await {
            return None;
        }
        match c.e.action.as_str() {
            "created" => Some(parse_comment(body)),
            "edited" => Some(match c.e.changes.as_ref().and_then(|c| c.body.as_ref()) {
                Some(old) => new_commands(&old.from, body),
                None => Vec::new(),
            }),
            _ => None,
        }
    }

    /// The reply to a comment whose commands are not run: a bot's, or one
    /// that quotes a command (the person may have meant it).
    fn not_run(
        &self,
        c: &Comment<'_>,
        body: &str,
        parsed: &[Parsed],
    ) -> Result<Vec<NewJob>, SendError> {
        let author = &c.e.comment.user;
        let editor = c.e.sender.as_ref().filter(|_| c.e.edited_by_another());
        let line = if let (Some(editor), false) = (editor, parsed.is_empty()) {
            for p in parsed {
                self.count(&word(p), "ignored");
            }
            let line = Line {
                command: None,
                message: "commands added to another person's comment are not run: write them in a comment of your own".into(),
            };
            let text = self.reply(&editor.login, vec![line])?;
            return Ok(vec![c.comment(text).once(c.once("reply"))?]);
        } else if author.is_bot() && !parsed.is_empty() {
            for p in parsed {
                self.count(&word(p), "ignored");
            }
            Line {
                command: None,
                message: "comments by bots are never run as commands".into(),
            }
        } else {
            let quoted =
                quoted_command(body).filter(|_| c.e.action == "created" && !author.is_bot());
            let Some(cmd) = quoted else {
                return Ok(Vec::new());
            };
            Line {
                command: Some(format!("/{cmd}")),
                message: "commands inside quotes or code are not run: write it at the start of a line of its own".into(),
            }
        };
        let text = self.reply(&author.login, vec![line])?;
        Ok(vec![c.comment(text).once(c.once("reply"))?])
    }

    /// Why the comment's commands may be about what came before.
    async fn stale(&self, c: &Comment<'_>) -> Result<Stale, SendError> {
        let closed_unmerged = c.e.issue.state == "closed" && !self.merged(c.e, &c.repo).await?;
        // Written before the last push: about an earlier revision (GitHub's clock on both sides).
        let pushed = pushes::last(&self.state.records, &c.repo, c.number)
            .await
            .map_err(retry)?
            .filter(|at| c.e.written_at().is_some_and(|w| w < *at))
            .map(|at| (at, self.state.config.close_on_push().to_vec()));
        Ok(Stale {
            closed_unmerged,
            pushed,
        })
    }

    /// Runs a comment's commands: each asked about first (GitHub may be
    /// asked, no transaction is open), then all decided in one unit with the
    /// replies, the reactions and the delivery's settlement.
    async fn run(
        &self,
        item: &QueueItem,
        lease: &Lease,
        c: &Comment<'_>,
        parsed: Vec<Parsed>,
        learned: Option<Learned>,
    ) -> Result<Settled, SendError> {
        let stale = self.stale(c).await?;
        let steps = self.steps(parsed, c.e, &c.repo, &stale, c.delivery).await?;
        let mut first = vec![c.react("eyes").once(c.once("eyes"))?];
        let mut asked = Vec::with_capacity(steps.len());
        for step in steps {
            if let Some((job, purpose)) = step.first {
                first.push(job.once(c.once(purpose))?);
            }
            asked.push(step.asked);
        }
        let replies = Replies {
            first,
            reply: Some(c.reply().once(c.once("reply"))?),
            applied: Some(c.react("rocket").once(c.once("rocket"))?),
            refused: Some(c.react("confused").once(c.once("confused"))?),
            received: Some(item),
            ..Replies::default()
        };
        let marks = learned.map(Learned::mark).into_iter().collect();
        let engine = &self.state.engine;
        intake::take_told(engine, SOURCE, asked, Some(lease), replies, marks).await?;
        Ok(Settled::Done)
    }
}

/// One comment's delivery, and the jobs that answer on its pull request.
struct Comment<'a> {
    e: &'a IssueCommentEvent,
    repo: RepoName,
    number: PrNumber,
    delivery: &'a DeliveryId,
}

impl Comment<'_> {
    fn once(&self, purpose: &str) -> String {
        self.delivery.once_key("github", purpose)
    }

    fn installation(&self) -> Option<u64> {
        self.e.installation.as_ref().map(|i| i.id)
    }

    fn comment(&self, body: String) -> GithubJob {
        GithubJob::Comment {
            repo: self.repo.clone(),
            number: self.number,
            body,
            installation: self.installation(),
        }
    }

    /// The reply to the comment, its lines filled in by the core.
    fn reply(&self) -> GithubJob {
        GithubJob::Reply {
            repo: self.repo.clone(),
            number: self.number,
            author: self.e.comment.user.login.clone(),
            installation: self.installation(),
            lead: None,
            lines: Vec::new(),
        }
    }

    fn react(&self, content: &str) -> GithubJob {
        GithubJob::Reaction {
            repo: self.repo.clone(),
            comment_id: self.e.comment.id,
            content: content.to_string(),
            installation: self.installation(),
        }
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

/// A stored GitHub delivery, read back by its event's name.
pub enum GithubDelivery {
    IssueComment(Box<IssueCommentEvent>),
    PullRequest(Box<PullRequestEvent>),
    Review(Box<PullRequestReviewEvent>),
    Protection(Box<DeploymentProtectionRuleEvent>),
    CheckRun(Box<CheckRunEvent>),
    /// An event gatebot keeps but does nothing with here.
    Other,
}

impl GithubDelivery {
    /// The pull request it is about.
    fn pr(&self) -> Option<(RepoName, PrNumber)> {
        match self {
            Self::IssueComment(e) => e.pr(),
            Self::PullRequest(e) => e.pr(),
            Self::Review(e) => e.pr(),
            Self::Protection(e) => e.pr(),
            Self::CheckRun(e) => e.gate()?.pr().map(|(r, n)| (r.clone(), n)),
            Self::Other => None,
        }
    }
}

impl Intake for GithubInbox {
    type Delivery = GithubDelivery;

    fn decode(item: &QueueItem) -> Result<GithubDelivery, SendError> {
        fn read<T: serde::de::DeserializeOwned>(item: &QueueItem) -> Result<Box<T>, SendError> {
            serde_json::from_str(&item.payload)
                .map_err(|err| SendError::Permanent(format!("unreadable delivery: {err}")))
        }
        Ok(match item.topic.as_str() {
            "issue_comment" => GithubDelivery::IssueComment(read(item)?),
            "pull_request" => GithubDelivery::PullRequest(read(item)?),
            "pull_request_review" => GithubDelivery::Review(read(item)?),
            "deployment_protection_rule" => GithubDelivery::Protection(read(item)?),
            "check_run" => GithubDelivery::CheckRun(read(item)?),
            _ => GithubDelivery::Other,
        })
    }

    /// One pull request's deliveries apply in order; other PRs don't wait for them.
    fn lane(&self, delivery: &GithubDelivery) -> Option<String> {
        let (repo, number) = delivery.pr()?;
        Some(format!("{repo}#{number}"))
    }

    fn take<'a>(
        &'a self,
        delivery: GithubDelivery,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Settled, SendError>> {
        Box::pin(async move {
            let id = delivery_of(item);
            match delivery {
                GithubDelivery::IssueComment(e) => self.issue_comment(&e, item, &id, lease).await,
                GithubDelivery::CheckRun(e) => self.check_run_click(&e, &id, lease).await,
                GithubDelivery::Review(e) => self.review(&e, &id, lease).await,
                GithubDelivery::Protection(e) => self.protection_request(&e, lease).await,
                GithubDelivery::PullRequest(e) => {
                    self.pull_request(&id, &e).await?;
                    Ok(Settled::NotYet)
                }
                GithubDelivery::Other => Ok(Settled::NotYet),
            }
        })
    }
}
