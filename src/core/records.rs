//! What the channels keep and read besides the gates: each channel's own rows
//! about its messages (Slack messages and their facts, Teams cards and
//! conversations, GitHub's status comments, check runs, deployments and
//! protection requests, the web pages' sign-outs), and the few stored reads their messages show.
//!
//! The channels' sinks run in the outbox, before and beside the engine, so they
//! hold a [`Records`] rather than the engine. It names only what channels use:
//! the store's locks, leases, queues and gate writes stay out of their reach.
//! Writes that belong with a command's change are [`Unit`] methods, in its one
//! transaction.

use std::sync::Arc;

use super::unit::Unit;
use crate::gate::environment::Environments;
use crate::gate::{CanaryRef, ClusterName, Gate, GateKey, GateKind, Millis, PrNumber, RepoName};
use crate::store::{
    AuditEntry, AuditSearch, CheckRunRow, Claim, DeploymentRow, EventRow, Job, NamedGate, NewJob,
    ObservationRow, ProtectionRequest, QueueName, Reserved, SlackDecision, SlackEnding, SlackFinal,
    SlackMessage, StatusComment, Store, StoreError, TeamsCard, TeamsConversation, WaitBrief,
    WaitRow,
};

/// What every channel's sinks are built from, once, by the bootstrap.
pub struct SinkBase<'a> {
    pub config: &'a crate::config::Config,
    pub records: &'a Records,
    pub templates: &'a crate::templates::Templates,
    pub clock: &'a crate::clock::SharedClock,
    pub metrics: &'a Arc<crate::metrics::Metrics>,
}

/// The channels' stored records. Cheap to clone.
#[derive(Clone)]
pub struct Records {
    store: Store,
    /// The policy's `[[environments]]`: the path messages show.
    environments: Arc<Environments>,
}

/// Each method is the store's read or write named before it (its part and
/// name), in a transaction of its own: listed here by signature, so what
/// channels may do reads as a table.
macro_rules! records {
    ($( $(#[$doc:meta])* [$part:ident.$store_fn:ident] fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        impl Records {
            $(
                $(#[$doc])*
                pub async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                    self.store.$part().$store_fn($($arg),*).await
                }
            )*
        }
    };
}

impl Records {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            environments: Arc::default(),
        }
    }

    /// The same, showing the path through `environments`.
    pub fn with_environments(mut self, environments: Environments) -> Self {
        self.environments = Arc::new(environments);
        self
    }

    pub fn environments(&self) -> &Environments {
        &self.environments
    }

    /// Queues `jobs` in one transaction of their own; how many were new.
    /// Wakes no worker: the outbox that calls it is awake.
    pub async fn enqueue(&self, jobs: &[NewJob], now: Millis) -> Result<usize, StoreError> {
        let mut tx = self.store.begin().await?;
        let queued = super::queue_jobs(&mut tx, jobs, now).await?;
        tx.commit().await?;
        Ok(queued)
    }
}

// What every channel's messages show.
records! {
    [waits.wait] fn wait(&self, id: i64) -> Option<WaitRow>;
    /// The latest `limit` waits, of one gate or all, only open ones if `open_only`.
    [waits.list] fn waits(&self, key: Option<&GateKey>, open_only: bool, limit: i64) -> Vec<WaitRow>;
    /// The gate as stored (None: never written).
    [gates.load_gate] fn load_gate(&self, key: &GateKey) -> Option<Gate>;
    /// The freezes in force at `now`, as stored (every replica's).
    [freezes.active_freezes] fn active_freezes(&self, now: Millis) -> Vec<crate::gate::freeze::Freeze>;
    [observations.observations_for] fn observations_for(&self, key: &GateKey) -> Vec<ObservationRow>;
    [progress.canary_progress] fn canary_progress(&self, canary: &CanaryRef) -> Option<crate::gate::progress::CanaryProgress>;
    [history.events] fn events(&self, canary: Option<&str>, limit: i64) -> Vec<EventRow>;
    [history.audit_log] fn audit_log(&self, key: Option<&GateKey>, limit: i64) -> Vec<AuditEntry>;
    /// Each change a delivery made: its action and the gate's reason.
    [teams.audit_of_delivery] fn audit_of_delivery(&self, delivery: &str) -> Vec<(String, Option<String>)>;
    /// Waits no channel announced yet, for the digest.
    [notices.unannounced_waits] fn unannounced_waits(
        &self,
        once_prefix: &str,
        since: Millis,
        until: Millis,
        after: i64,
        limit: i64,
    ) -> Vec<WaitBrief>;
}

// GitHub: the PR's head, status comment, check runs, deployments, protection requests.
records! {
    [prs.pr_author] fn pr_author(&self, repo: &RepoName, number: PrNumber) -> Option<String>;
    [prs.remember_pr_author] fn remember_pr_author(
        &self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
        at: Millis,
    ) -> ();
    [check_runs.pr_head] fn pr_head(&self, repo: &RepoName, number: PrNumber) -> Option<String>;
    /// Where a PR's commits were promoted, per cluster (`[[environments]]`).
    [passages.passages_of] fn passages_of(&self, gate: &GateKey) -> Vec<crate::store::Passage>;
    [check_runs.remember_pr_head] fn remember_pr_head(
        &self,
        repo: &RepoName,
        number: PrNumber,
        head_sha: &str,
        pushed_at: Millis,
    ) -> ();
    [prs.pr_pushed_at] fn pr_pushed_at(&self, repo: &RepoName, number: PrNumber) -> Option<Millis>;
    [prs.remember_pr_push] fn remember_pr_push(
        &self,
        repo: &RepoName,
        number: PrNumber,
        pushed_at: Millis,
        now: Millis,
    ) -> ();
    [named.named_gate] fn named_gate(&self, key: &GateKey) -> Option<NamedGate>;
    [named.named_gates_of_pr] fn named_gates_of_pr(&self, repo: &RepoName, number: PrNumber) -> Vec<NamedGate>;
    [prs.status_comment] fn status_comment(&self, repo: &RepoName, number: PrNumber) -> Option<StatusComment>;
    [prs.claim_status_creation] fn claim_status_creation(
        &self,
        repo: &RepoName,
        number: PrNumber,
        job: &str,
        now: Millis,
        stale_after: Millis,
    ) -> bool;
    [prs.release_status_creation] fn release_status_creation(&self, repo: &RepoName, number: PrNumber) -> ();
    [prs.remember_status_comment] fn remember_status_comment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        comment: &StatusComment,
        at: Millis,
    ) -> ();
    [notices.pr_missing] fn pr_missing(&self, repo: &RepoName, number: PrNumber, since: Millis) -> bool;
    [notices.mark_pr_missing] fn mark_pr_missing(&self, repo: &RepoName, number: PrNumber, now: Millis) -> ();
    [notices.forget_pr_missing] fn forget_pr_missing(&self, repo: &RepoName, number: PrNumber) -> ();
    [check_runs.check_run] fn check_run(&self, repo: &RepoName, number: PrNumber, kind: GateKind) -> Option<CheckRunRow>;
    [check_runs.claim_check_run] fn claim_check_run(
        &self,
        key: &GateKey,
        head_sha: &str,
        job: &str,
        now: Millis,
        stale_after: Millis,
    ) -> bool;
    [check_runs.put_check_run] fn put_check_run(
        &self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        run: &CheckRunRow,
        now: Millis,
    ) -> ();
    [check_runs.forget_check_run] fn forget_check_run(
        &self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        run_id: u64,
    ) -> ();
    [deployments.deployments_of] fn deployments_of(&self, repo: &RepoName, number: PrNumber) -> Vec<DeploymentRow>;
    [deployments.put_deployment] fn put_deployment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        row: &DeploymentRow,
        now: Millis,
    ) -> ();
    [deployments.reserve_deployment] fn reserve_deployment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        canary: &str,
        checksum: &str,
        max: usize,
        now: Millis,
    ) -> Reserved;
    [deployments.revision_real] fn revision_real(&self, gates: &[GateKey], canary: &str, checksum: &str) -> bool;
    [protection.pending_protections] fn pending_protections(
        &self,
        repo: &RepoName,
        number: PrNumber,
        at: Millis,
    ) -> Vec<ProtectionRequest>;
    [protection.decide_protection] fn decide_protection(&self, r: &ProtectionRequest, state: &str, at: Millis) -> bool;
    /// Whether deliveries can be written (before GitHub is asked to send them again).
    [queues.inbox_writable] fn inbox_writable(&self) -> ();
}

// Slack: each posted message and its facts.
records! {
    [slack.slack_message] fn slack_message(&self, wait_id: i64) -> Option<SlackMessage>;
    [slack.remember_slack_message] fn remember_slack_message(&self, m: &SlackMessage, now: Millis) -> ();
    [slack.latest_slack_message_of_canary] fn latest_slack_message_of_canary(&self, canary: &str) -> Option<i64>;
    [slack.slack_messages_of_gate] fn slack_messages_of_gate(&self, gate: &str, limit: i64) -> Vec<i64>;
    [slack.slack_decision] fn slack_decision(&self, wait_id: i64) -> Option<SlackDecision>;
    [slack.remember_slack_decision] fn remember_slack_decision(&self, wait_id: i64, d: &SlackDecision) -> ();
    [slack.slack_ending] fn slack_ending(&self, wait_id: i64) -> Option<SlackEnding>;
    [slack.remember_slack_ending] fn remember_slack_ending(&self, wait_id: i64, e: &SlackEnding) -> ();
    [slack.slack_final] fn slack_final(&self, wait_id: i64) -> Option<SlackFinal>;
    [slack.remember_slack_final] fn remember_slack_final(&self, wait_id: i64, f: &SlackFinal) -> ();
}

// Teams: conversations the bot is in, and each card.
records! {
    [teams.teams_conversation] fn teams_conversation(&self, id: &str) -> Option<TeamsConversation>;
    /// Whether it was kept (at most `cap` conversations are).
    [teams.remember_teams_conversation] fn remember_teams_conversation(&self, c: &TeamsConversation, now: Millis, cap: i64) -> bool;
    [teams.forget_teams_conversation] fn forget_teams_conversation(&self, conversation_id: &str) -> ();
    [teams.teams_card] fn teams_card(&self, wait_id: i64) -> Option<TeamsCard>;
    [teams.remember_teams_card] fn remember_teams_card(&self, c: &TeamsCard, now: Millis) -> ();
    [teams.latest_teams_card_of_canary] fn latest_teams_card_of_canary(&self, canary: &str) -> Option<i64>;
    [teams.teams_cards_of_gate] fn teams_cards_of_gate(&self, gate: &str, limit: i64) -> Vec<i64>;
    [teams.end_teams_card] fn end_teams_card(&self, wait_id: i64, outcome: &str) -> ();
    [teams.finish_teams_card] fn finish_teams_card(&self, wait_id: i64, kind: &str, message: &str) -> ();
}

// The web pages' sign-in: sign-outs and OAuth states used once.
records! {
    [sessions.session_revoked] fn session_revoked(&self, id: &str) -> bool;
    [sessions.revoke_session] fn revoke_session(&self, id: &str, expires_at: Millis, now: Millis) -> ();
    [sessions.oauth_state_used] fn oauth_state_used(&self, state_hash: &str) -> bool;
    /// False: the state was used before (a replayed sign-in).
    [sessions.use_oauth_state] fn use_oauth_state(&self, state_hash: &str, expires_at: Millis, now: Millis) -> bool;
}

// The operator API's and the web pages' lists, as stored.
records! {
    /// Up to `limit` open waits, newest first, older than the wait `before`;
    /// only those of `clusters` when given.
    [web.open_waits_page] fn open_waits_page(
        &self,
        clusters: Option<&[ClusterName]>,
        before: Option<i64>,
        limit: i64,
    ) -> Vec<WaitRow>;
    /// How many waits are open, of `clusters` only when given.
    [web.open_wait_count_of] fn open_wait_count_of(&self, clusters: Option<&[ClusterName]>) -> i64;
    /// Up to `limit` audit entries that `search` finds, newest first, with their ids.
    [web.search_audit] fn search_audit(&self, search: &AuditSearch, limit: i64) -> Vec<(i64, AuditEntry)>;
    /// The latest `limit` jobs of the outbox, in one state or all.
    [queues.jobs] fn jobs(&self, state: Option<&str>, limit: i64) -> Vec<Job>;
    /// How many deliveries or jobs wait in `queue`.
    [queues.pending] fn pending(&self, queue: QueueName) -> i64;
}

/// A channel's rows that belong with the change a command makes.
impl Unit<'_> {
    /// Who opened a PR, first seen in the delivery this unit applies.
    pub async fn learn_pr_author(
        &mut self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
    ) -> Result<(), StoreError> {
        let now = self.now();
        crate::store::Prs::put_pr_author(self.tx(), repo, number, login, now).await
    }

    /// Settles the delivery (or job) this unit applies, as its lease's owner.
    /// False: the lease was lost and another worker owns the item now.
    pub async fn settle(
        &mut self,
        queue: QueueName,
        claim: &Claim<'_>,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        crate::store::Queues::finish_in(self.tx(), queue, claim, now).await
    }

    /// Who decided a Slack message's wait, with the change they made.
    /// False when another click decided it first.
    pub async fn decide_slack_message(
        &mut self,
        wait_id: i64,
        d: &SlackDecision,
    ) -> Result<bool, StoreError> {
        crate::store::SlackRows::put_slack_decision(self.tx(), wait_id, d).await
    }

    /// Who decided a Teams card's wait, and how, with the change they made.
    /// False when another click decided it first.
    pub async fn decide_teams_card(
        &mut self,
        wait_id: i64,
        verb: &str,
        by: &str,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        crate::store::TeamsRows::decide_teams_card(self.tx(), wait_id, verb, by, now).await
    }
}
