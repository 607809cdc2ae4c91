//! The `github` outbox sink: reactions, reply comments and the per-PR status
//! comment. Runs only from the outbox worker, never from a request or a check.
//!
//! Status comments: every notice about a PR's gate queues one job per PR with a
//! dedupe key, so a burst of changes coalesces into one edit that renders the
//! PR's state at send time. A PR gets a status comment only once Flagger has
//! waited at one of its gates; from then on the comment follows every change.
//! Past [limits] notify_burst new waits a minute on one PR, the next edit waits
//! for the minute to end. A PR GitHub answers 404 for is remembered for a day,
//! and its jobs are dropped meanwhile without calling GitHub.
//!
//! Over 400 lines: planning and running share the job type and the status
//! comment's lookup; splitting them would split one protocol in two.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::checks::{CheckRuns, KINDS};
use super::client::{ApiError, GithubClient};
use super::deployments::Deployments;
use super::protection::{decision_of, Decision, Protections};
use super::reply;
use super::status::{status_marker, view};
use crate::clock::SharedClock;
use crate::core::intake::{Opened, Told};
use crate::core::Records;
use crate::evidence::Evidence;
use crate::gate::{GateKey, GateKind, Millis, PrNumber, RepoName};
use crate::metrics::Metrics;
use crate::notify::burst::{Admit, Burst};
use crate::notify::{
    decode_job, BoxFuture, Channel, Lease, Notice, PayloadError, SendError, SinkJob,
};
use crate::store::{NewJob, QueueItem, StatusComment};
use crate::templates::escape::{self, code};
use crate::templates::Templates;

use super::SINK;

/// How long a PR GitHub answered 404 for stays given up on.
const MISSING_FOR: Millis = 24 * 3600 * 1000;

/// What a job of the `github` sink does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GithubJob {
    Reaction {
        repo: RepoName,
        comment_id: u64,
        content: String,
        /// The App installation the delivery came from (saves a lookup).
        #[serde(default)]
        installation: Option<u64>,
    },
    Comment {
        repo: RepoName,
        number: PrNumber,
        body: String,
        #[serde(default)]
        installation: Option<u64>,
    },
    /// The reply to `author`'s comment: what the core told of its lines,
    /// worded when sent.
    Reply {
        repo: RepoName,
        number: PrNumber,
        author: String,
        #[serde(default)]
        installation: Option<u64>,
        /// A first line before the lines (what a review counted as).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lead: Option<String>,
        lines: Vec<Told>,
    },
    Status {
        repo: RepoName,
        number: PrNumber,
    },
    /// The check run of the PR's gate of `kind`, rendered when sent.
    CheckRun {
        repo: RepoName,
        number: PrNumber,
        kind: GateKind,
    },
    /// The deployments of the PR's canary revisions, read when sent.
    Deployment {
        repo: RepoName,
        number: PrNumber,
    },
    /// Approves or rejects the workflow runs' deployments waiting at the
    /// PR's gates (`[[github.protection]]`).
    Protection {
        repo: RepoName,
        number: PrNumber,
        decision: Decision,
        /// Who opened the gate, filled in by the core for a request that
        /// found it open.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opened: Option<Opened>,
    },
}

impl SinkJob for GithubJob {
    const SINK: &'static str = SINK;
    const TAG: &'static str = "type";
}

impl GithubJob {
    /// A job queued at most once per `once_key` (a delivery and a purpose).
    pub fn once(&self, once_key: String) -> Result<NewJob, PayloadError> {
        self.job(Some(once_key))
    }

    /// The PR's status comment, rendered when sent; one pending job per PR.
    pub fn status(repo: &RepoName, number: PrNumber) -> Result<NewJob, PayloadError> {
        let job = Self::Status {
            repo: repo.clone(),
            number,
        };
        job.deduped(format!("github-status:{repo}#{number}"))
    }

    /// The check run of a PR's gate, rendered when sent; one pending job per gate.
    pub fn check_run(
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
    ) -> Result<NewJob, PayloadError> {
        let job = Self::CheckRun {
            repo: repo.clone(),
            number,
            kind,
        };
        job.deduped(format!("github-check:{repo}#{number}:{kind}"))
    }

    /// The deployments of a PR's canary revisions; one pending job per PR.
    pub fn deployment(repo: &RepoName, number: PrNumber) -> Result<NewJob, PayloadError> {
        let job = Self::Deployment {
            repo: repo.clone(),
            number,
        };
        job.deduped(format!("github-deploy:{repo}#{number}"))
    }

    /// A decision on the deployments waiting at a PR's gates; one per notice.
    pub fn protection(
        repo: &RepoName,
        number: PrNumber,
        decision: Decision,
    ) -> Result<NewJob, PayloadError> {
        Self::Protection {
            repo: repo.clone(),
            number,
            decision,
            opened: None,
        }
        .job(None)
    }

    /// The PR a job writes to, when it writes to one.
    fn pr(&self) -> Option<(&RepoName, PrNumber)> {
        match self {
            Self::Comment { repo, number, .. }
            | Self::Reply { repo, number, .. }
            | Self::Status { repo, number } => Some((repo, *number)),
            Self::Reaction { .. }
            | Self::CheckRun { .. }
            | Self::Deployment { .. }
            | Self::Protection { .. } => None,
        }
    }
}

pub struct GithubSink {
    client: Arc<GithubClient>,
    records: Records,
    templates: Templates,
    clock: SharedClock,
    allowed: Vec<RepoName>,
    /// New waits that edit a PR's status comment at once, per PR and minute.
    burst: Burst,
    metrics: Arc<Metrics>,
    /// Some when check runs are on ([github] check_runs, with an App).
    check_runs: Option<CheckRuns>,
    /// Some when deployments are on ([github] deployments).
    deployments: Option<Deployments>,
    /// Some when the policy names protected environments (`[[github.protection]]`).
    protections: Option<Protections>,
    /// The waiting canaries' numbers, shown in the status comment.
    evidence: Arc<Evidence>,
}

/// What the sink needs besides the GitHub client.
pub struct SinkParts {
    pub records: Records,
    pub templates: Templates,
    pub clock: SharedClock,
    pub allowed: Vec<RepoName>,
    pub burst: u32,
    pub metrics: Arc<Metrics>,
    pub check_runs: bool,
    pub deployments: bool,
    pub public_url: Option<String>,
    pub policy: crate::policy::Policy,
    /// GATEBOT_GITHUB_API_URL: where deployment callbacks may go.
    pub api_url: String,
    pub evidence: Arc<Evidence>,
}

impl GithubSink {
    pub fn new(client: Arc<GithubClient>, parts: SinkParts) -> Self {
        let check_runs = parts.check_runs.then(|| CheckRuns {
            client: client.clone(),
            records: parts.records.clone(),
            templates: parts.templates.clone(),
            clock: parts.clock.clone(),
        });
        let deployments = parts.deployments.then(|| Deployments {
            client: client.clone(),
            records: parts.records.clone(),
            clock: parts.clock.clone(),
            public_url: parts.public_url.clone(),
            policy: parts.policy.clone(),
            metrics: parts.metrics.clone(),
            told: Default::default(),
        });
        let protections = (!parts.policy.protections().is_empty()).then(|| Protections {
            client: client.clone(),
            records: parts.records.clone(),
            clock: parts.clock.clone(),
            metrics: parts.metrics.clone(),
            api_url: parts.api_url.clone(),
            calendar: parts.policy.calendar().clone(),
        });
        Self {
            check_runs,
            deployments,
            protections,
            client,
            records: parts.records,
            templates: parts.templates,
            clock: parts.clock,
            allowed: parts.allowed,
            burst: Burst::new(parts.burst),
            metrics: parts.metrics,
            evidence: parts.evidence,
        }
    }

    /// Runs a job unless its PR is known not to exist; a 404 for the PR marks
    /// it so. `lease`, when the worker holds one, is renewed before calls that
    /// must not be made twice.
    async fn run(
        &self,
        job: GithubJob,
        item: &QueueItem,
        lease: Option<&Lease>,
    ) -> Result<(), SendError> {
        let Some((repo, number)) = job.pr().map(|(r, n)| (r.clone(), n)) else {
            return self
                .send(job, item, lease)
                .await
                .map_err(Failure::into_send);
        };
        let unavailable = |e: crate::store::StoreError| SendError::retry(e.to_string());
        let now = self.clock.now_ms();
        let missing = self
            .records
            .pr_missing(&repo, number, now - MISSING_FOR)
            .await
            .map_err(unavailable)?;
        // A reply answers a comment GitHub delivered from this PR, so the PR is
        // there (its mark came from a token that could not see it, say): try it.
        let reply = matches!(job, GithubJob::Comment { .. } | GithubJob::Reply { .. });
        if missing && !reply {
            self.metrics.dropped(SINK, "missing_pr");
            tracing::debug!(%repo, %number, topic = %item.topic, "dropped: GitHub said this PR does not exist");
            return Ok(());
        }
        match self.send(job, item, lease).await {
            Ok(()) => {
                if missing {
                    self.records
                        .forget_pr_missing(&repo, number)
                        .await
                        .map_err(unavailable)?;
                }
                Ok(())
            }
            Err(Failure::Other(e)) => Err(e),
            Err(Failure::PrMissing(e)) => {
                self.records
                    .mark_pr_missing(&repo, number, now)
                    .await
                    .map_err(unavailable)?;
                self.metrics.dropped(SINK, "missing_pr");
                tracing::warn!(%repo, %number, "GitHub says this PR does not exist: its notifications are dropped for a day");
                Err(e)
            }
        }
    }

    /// Posts `body` on the PR once: a sender that died (or timed out) before
    /// GitHub answered may have posted it, so a retry looks for this job's
    /// marker first.
    async fn comment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        body: &str,
        installation: Option<u64>,
        item: &QueueItem,
    ) -> Result<(), Failure> {
        if let Some(id) = installation {
            self.client.learn_installation(repo, id);
        }
        let marker = format!("<!-- gatebot:job:{} -->", item.id);
        if item.attempts > 1 {
            let since = Some(item.created_at - 60_000);
            if let Some(id) = self
                .client
                .find_comment(repo, number, &marker, since)
                .await
                .map_err(on_pr)?
            {
                tracing::info!(comment = id, job = %item.id, "comment was posted by an earlier attempt");
                return Ok(());
            }
        }
        self.client
            .create_comment(repo, number, &format!("{body}\n{marker}"))
            .await
            .map(|_| ())
            .map_err(on_pr)
    }

    async fn send(
        &self,
        job: GithubJob,
        item: &QueueItem,
        lease: Option<&Lease>,
    ) -> Result<(), Failure> {
        let api = |e: ApiError| e.to_send_error();
        match job {
            GithubJob::Reaction {
                repo,
                comment_id,
                content,
                installation,
            } => {
                if let Some(id) = installation {
                    self.client.learn_installation(&repo, id);
                }
                Ok(self
                    .client
                    .react(&repo, comment_id, &content)
                    .await
                    .map_err(api)?)
            }
            GithubJob::Comment {
                repo,
                number,
                body,
                installation,
            } => self.comment(&repo, number, &body, installation, item).await,
            GithubJob::Reply {
                repo,
                number,
                author,
                installation,
                lead,
                lines,
            } => {
                let lead = lead.map(|message| reply::Line {
                    command: None,
                    message,
                });
                let lines = lead.into_iter().chain(reply::lines(&lines)).collect();
                let body = reply::render(&self.templates, &author, lines)?;
                self.comment(&repo, number, &body, installation, item).await
            }
            GithubJob::Status { repo, number } => self.status(&repo, number, &item.id).await,
            GithubJob::CheckRun { repo, number, kind } => match &self.check_runs {
                Some(runs) => Ok(runs.send(&repo, number, kind, &item.id).await?),
                // Turned off since it was queued.
                None => Ok(()),
            },
            GithubJob::Deployment { repo, number } => match &self.deployments {
                Some(d) => Ok(d.send(&repo, number).await?),
                None => Ok(()),
            },
            GithubJob::Protection {
                repo,
                number,
                decision,
                opened,
            } => match &self.protections {
                Some(p) => {
                    let decision = match &opened {
                        Some(opened) => decision.opened(opened),
                        None => decision,
                    };
                    Ok(p.send(&repo, number, &decision, lease).await?)
                }
                None => Ok(()),
            },
        }
    }

    async fn render(&self, repo: &RepoName, number: PrNumber) -> Result<Option<String>, SendError> {
        render(
            &self.records,
            &self.templates,
            &self.evidence,
            repo,
            number,
            self.clock.now_ms(),
        )
        .await
    }

    /// Creates the PR's status comment, or edits it in place.
    /// Nothing when the PR has no status comment and needs none.
    async fn status(&self, repo: &RepoName, number: PrNumber, job: &str) -> Result<(), Failure> {
        let retry = |e: crate::store::StoreError| SendError::retry(e.to_string());
        let mut last_sent: Option<String> = None;
        // A change committed while this job sends queues another job (claiming
        // frees the dedupe key); rendering again here usually saves that one a call.
        for _ in 0..3 {
            let Some(body) = self.render(repo, number).await? else {
                return Ok(());
            };
            if last_sent.as_deref() == Some(body.as_str()) {
                return Ok(());
            }
            let hash = digest(&body);
            let known = self
                .records
                .status_comment(repo, number)
                .await
                .map_err(retry)?;
            // Comment id 0: another replica is creating it.
            let known = known.filter(|k| k.comment_id != 0);
            let id = match known {
                Some(known) => {
                    if known.digest.as_deref() == Some(hash.as_str()) {
                        return Ok(());
                    }
                    match self
                        .client
                        .edit_comment(repo, known.comment_id, &body)
                        .await
                    {
                        Ok(()) => known.comment_id,
                        // Someone deleted it: start a new one.
                        Err(e) if e.is_not_found() => self
                            .client
                            .create_comment(repo, number, &body)
                            .await
                            .map_err(on_pr)?,
                        Err(e) => return Err(e.to_send_error().into()),
                    }
                }
                None => {
                    let now = self.clock.now_ms();
                    if !self
                        .records
                        .claim_status_creation(repo, number, job, now, CREATION_CLAIM)
                        .await
                        .map_err(retry)?
                    {
                        return Err(SendError::retry(format!(
                            "the status comment of {repo}#{number} is being created elsewhere"
                        ))
                        .into());
                    }
                    let created = self.create_status(repo, number, &body).await;
                    if created.is_err() {
                        // Failed: the next attempt (here or on another replica) may claim it.
                        self.records
                            .release_status_creation(repo, number)
                            .await
                            .map_err(retry)?;
                    }
                    created?
                }
            };
            let sent = StatusComment {
                comment_id: id,
                digest: Some(hash),
            };
            self.records
                .remember_status_comment(repo, number, &sent, self.clock.now_ms())
                .await
                .map_err(retry)?;
            last_sent = Some(body);
        }
        Ok(())
    }
}

impl GithubSink {
    /// The first version of a PR's status comment, unless one exists already
    /// (a crash between creating and remembering must not make a second one).
    async fn create_status(
        &self,
        repo: &RepoName,
        number: PrNumber,
        body: &str,
    ) -> Result<u64, Failure> {
        let marker = status_marker(repo, number);
        let found = self
            .client
            .find_comment(repo, number, &marker, None)
            .await
            .map_err(on_pr)?;
        match found {
            Some(id) => {
                self.client
                    .edit_comment(repo, id, body)
                    .await
                    .map_err(|e| e.to_send_error())?;
                Ok(id)
            }
            None => Ok(self
                .client
                .create_comment(repo, number, body)
                .await
                .map_err(on_pr)?),
        }
    }
}

async fn render(
    records: &Records,
    templates: &Templates,
    evidence: &Evidence,
    repo: &RepoName,
    number: PrNumber,
    now: crate::gate::Millis,
) -> Result<Option<String>, SendError> {
    let pr = view(records, repo, number, now)
        .await
        .map_err(|e| SendError::retry(e.to_string()))?;
    let known = records
        .status_comment(repo, number)
        .await
        .map_err(|e| SendError::retry(e.to_string()))?;
    if known.is_none() && !pr.ever_waited {
        return Ok(None);
    }
    let pr = pr.for_markdown(evidence);
    let ctx = serde_json::json!({
        "marker": status_marker(repo, number),
        "subject": pr.subject,
        "gates": pr.gates,
        "events": pr.events,
        "reply": false,
    });
    templates
        .render("github/status.md.j2", ctx)
        .map(Some)
        .map_err(|e| SendError::Permanent(format!("{e:#}")))
}

/// Why a job failed: GitHub said its PR does not exist, or anything else.
enum Failure {
    PrMissing(SendError),
    Other(SendError),
}

impl Failure {
    fn into_send(self) -> SendError {
        match self {
            Self::PrMissing(e) | Self::Other(e) => e,
        }
    }
}

impl From<SendError> for Failure {
    fn from(e: SendError) -> Self {
        Self::Other(e)
    }
}

/// A failed call on the PR itself (its comments): a 404 means there is no such
/// PR, or none this token can see.
fn on_pr(e: ApiError) -> Failure {
    if e.is_not_found() {
        Failure::PrMissing(e.to_send_error())
    } else {
        Failure::Other(e.to_send_error())
    }
}

fn digest(body: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(body.as_bytes()))
}

/// The PR of a named gate's announcement (`pr` and `repository`, which
/// gatebot wrote itself).
fn named_pr(metadata: &std::collections::BTreeMap<String, String>) -> Option<(RepoName, PrNumber)> {
    let number = metadata.get("pr")?.parse().ok()?;
    let repo = metadata.get("repository")?.parse().ok()?;
    Some((repo, number))
}

/// How long a claim to create a status comment stands against another job
/// (the same job, taken over after its lease, takes it over at once).
const CREATION_CLAIM: Millis = 60_000;

impl Channel for GithubSink {
    type Job = GithubJob;
    const NAME: &'static str = SINK;

    fn decode(item: &QueueItem) -> Result<GithubJob, SendError> {
        decode_job(SINK, item)
    }

    /// Writes to one pull request go out in order (the status comment's edits, replies).
    fn lane(&self, job: &GithubJob) -> Option<String> {
        match job {
            GithubJob::Comment { repo, number, .. }
            | GithubJob::Reply { repo, number, .. }
            | GithubJob::Status { repo, number }
            | GithubJob::CheckRun { repo, number, .. }
            | GithubJob::Deployment { repo, number }
            | GithubJob::Protection { repo, number, .. } => Some(format!("{repo}#{number}")),
            // 👀 before 🚀 or 😕: one comment's reactions in the order queued.
            GithubJob::Reaction {
                repo, comment_id, ..
            } => Some(format!("{repo}/comments/{comment_id}")),
        }
    }

    fn send<'a>(
        &'a self,
        job: GithubJob,
        item: &'a QueueItem,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(self.run(job, item, Some(lease)))
    }

    fn plan(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        let gates: Vec<&GateKey> = match notice {
            Notice::WaitStarted { gate, .. }
            | Notice::WaitEnded { gate, .. }
            | Notice::GateChanged { gate, .. } => vec![gate],
            Notice::CanaryEvent { gates, .. }
            | Notice::CanaryFailure { gates, .. }
            | Notice::Evidence { gates, .. } => gates.iter().collect(),
            Notice::Reminder { gate, .. } => vec![gate],
            // Announced in Slack; a frozen gate's answer says so on its own.
            Notice::Frozen { .. } | Notice::Unfrozen { .. } => Vec::new(),
        };
        let named_pr = match notice {
            Notice::GateChanged { pr, .. } => pr.clone(),
            // A named gate's announcement names its PR as a canary's metadata does.
            Notice::WaitStarted {
                canary, metadata, ..
            } if canary.is_none() => named_pr(metadata),
            _ => None,
        };
        let prs: BTreeSet<(RepoName, PrNumber)> = gates
            .into_iter()
            .filter_map(|k| k.pr().map(|(r, n)| (r.clone(), n)))
            .chain(named_pr)
            .filter(|(r, _)| self.allowed.is_empty() || self.allowed.contains(r))
            .collect();
        let mut jobs = Vec::with_capacity(prs.len());
        for (repo, number) in &prs {
            let mut job = GithubJob::status(repo, *number)?;
            if let Notice::WaitStarted { at, .. } = notice {
                // Over the PR's limit: one edit when the minute is over shows them all.
                if let Admit::Digest { end, .. } =
                    self.burst.admit(&format!("{repo}#{number}"), *at)
                {
                    self.metrics.dropped(SINK, "digest");
                    // Its own dedupe key, so that a change people make meanwhile
                    // is still shown at once.
                    job.dedupe_key = Some(format!("github-status-later:{repo}#{number}"));
                    job.not_before = end;
                }
            }
            jobs.push(job);
            if let Some(job) = self.reminder_comment(notice, repo, *number)? {
                jobs.push(job);
            }
            if let Some(job) = self.failure_comment(notice, repo, *number)? {
                jobs.push(job);
            }
        }
        jobs.extend(self.check_run_jobs(notice)?);
        if self.deployments.is_some() && is_canary_news(notice) {
            for (repo, number) in &prs {
                jobs.push(GithubJob::deployment(repo, *number)?);
            }
        }
        if self.protections.is_some() {
            if let Some((repo, number, decision)) = decision_of(notice) {
                if self.allowed.is_empty() || self.allowed.contains(&repo) {
                    jobs.push(GithubJob::protection(&repo, number, decision)?);
                }
            }
        }
        Ok(jobs)
    }
}

/// Whether a notice may change a canary revision's deployment status.
fn is_canary_news(notice: &Notice) -> bool {
    matches!(
        notice,
        Notice::WaitStarted { .. } | Notice::WaitEnded { .. } | Notice::CanaryEvent { .. }
    )
}

impl GithubSink {
    /// The check runs a notice changes: of the PR gates it names (a rollback
    /// gate's change is the promote and traffic gates' rollback).
    fn check_run_jobs(&self, notice: &Notice) -> Result<Vec<NewJob>, PayloadError> {
        if self.check_runs.is_none() {
            return Ok(Vec::new());
        }
        let gates: Vec<&GateKey> = match notice {
            Notice::WaitStarted { gate, .. }
            | Notice::WaitEnded { gate, .. }
            | Notice::GateChanged { gate, .. } => vec![gate],
            Notice::CanaryEvent { gates, .. } => gates.iter().collect(),
            _ => Vec::new(),
        };
        let mut runs = BTreeSet::new();
        for gate in gates {
            let Some((repo, number)) = gate.pr() else {
                continue;
            };
            if !(self.allowed.is_empty() || self.allowed.contains(repo)) {
                continue;
            }
            let kinds = match gate.kind {
                GateKind::Rollback => vec![GateKind::Promote, GateKind::Traffic],
                kind if KINDS.contains(&kind) => vec![kind],
                _ => Vec::new(),
            };
            for kind in kinds {
                runs.insert((repo.clone(), number, kind));
            }
        }
        runs.into_iter()
            .map(|(repo, number, kind)| GithubJob::check_run(&repo, number, kind))
            .collect()
    }
}

impl GithubSink {
    /// A comment on the PR when Flagger failed outside the analysis; once per
    /// canary, revision and kind (the notice itself is made once, and the
    /// once-key keeps a replayed notice from commenting twice).
    fn failure_comment(
        &self,
        notice: &Notice,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<Option<NewJob>, PayloadError> {
        let Notice::CanaryFailure {
            canary,
            failure,
            what,
            message,
            next,
            checksum,
            ..
        } = notice
        else {
            return Ok(None);
        };
        let rendered = self.templates.render(
            "github/failure.md.j2",
            serde_json::json!({
                "marker": super::MARKER, "canary": code(&canary.to_string(), escape::NAME),
                "revision": code(checksum, escape::CHECKSUM), "what": what,
                "message": code(message, escape::MESSAGE), "next": next,
            }),
        );
        let body = match rendered {
            Ok(body) => body,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot render the failure comment");
                self.metrics.dropped(SINK, "unrenderable");
                return Ok(None);
            }
        };
        let job = GithubJob::Comment {
            repo: repo.clone(),
            number,
            body: body.trim().to_string(),
            installation: None,
        };
        let once = format!("github-failure:{repo}#{number}:{canary}:{checksum}:{failure}");
        Ok(Some(job.once(once)?))
    }

    /// One comment per reminder point that mentions who may decide; none when
    /// the policy names nobody (the status comment's edit says it anyway).
    fn reminder_comment(
        &self,
        notice: &Notice,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<Option<NewJob>, PayloadError> {
        let Notice::Reminder {
            wait_id,
            gate,
            canary,
            checksum,
            waited,
            point,
            github_mentions,
            ..
        } = notice
        else {
            return Ok(None);
        };
        if github_mentions.is_empty() {
            return Ok(None);
        }
        let rendered = self.templates.render(
            "github/reminder.md.j2",
            serde_json::json!({
                "marker": super::MARKER, "mentions": github_mentions,
                "canary": code(&canary.to_string(), escape::NAME), "kind": gate.kind.as_str(),
                "command": gate.kind.command(), "revision": code(checksum, escape::CHECKSUM),
                "waited": waited, "evidence": self.evidence.line_of(canary),
            }),
        );
        let body = match rendered {
            Ok(body) => body,
            // A broken custom template: said loudly; the status comment still shows the wait.
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot render the reminder comment");
                self.metrics.dropped(SINK, "unrenderable");
                return Ok(None);
            }
        };
        let job = GithubJob::Comment {
            repo: repo.clone(),
            number,
            body: body.trim().to_string(),
            installation: None,
        };
        Ok(Some(job.once(format!("github-remind:{wait_id}:{point}"))?))
    }
}
