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

/// Each method is the store's read or write of the same name, in a transaction
/// of its own: listed here by signature, so what channels may do reads as a table.
macro_rules! records {
    ($( $(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        impl Records {
            $(
                $(#[$doc])*
                pub async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, StoreError> {
                    self.store.$name($($arg),*).await
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
    fn wait(&self, id: i64) -> Option<WaitRow>;
    /// The latest `limit` waits, of one gate or all, only open ones if `open_only`.
    fn waits(&self, key: Option<&GateKey>, open_only: bool, limit: i64) -> Vec<WaitRow>;
    /// The gate as stored (None: never written).
    fn load_gate(&self, key: &GateKey) -> Option<Gate>;
    fn observations_for(&self, key: &GateKey) -> Vec<ObservationRow>;
    fn canary_progress(&self, canary: &CanaryRef) -> Option<crate::gate::progress::CanaryProgress>;
    fn events(&self, canary: Option<&str>, limit: i64) -> Vec<EventRow>;
    fn audit_log(&self, key: Option<&GateKey>, limit: i64) -> Vec<AuditEntry>;
    /// Each change a delivery made: its action and the gate's reason.
    fn audit_of_delivery(&self, delivery: &str) -> Vec<(String, Option<String>)>;
    /// Waits no channel announced yet, for the digest.
    fn unannounced_waits(
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
    fn pr_author(&self, repo: &RepoName, number: PrNumber) -> Option<String>;
    fn remember_pr_author(
        &self,
        repo: &RepoName,
        number: PrNumber,
        login: &str,
        at: Millis,
    ) -> ();
    fn pr_head(&self, repo: &RepoName, number: PrNumber) -> Option<String>;
    /// Where a PR's commits were promoted, per cluster (`[[environments]]`).
    fn passages_of(&self, gate: &GateKey) -> Vec<crate::store::Passage>;
    fn remember_pr_head(
        &self,
        repo: &RepoName,
        number: PrNumber,
        head_sha: &str,
        pushed_at: Millis,
    ) -> ();
    fn pr_pushed_at(&self, repo: &RepoName, number: PrNumber) -> Option<Millis>;
    fn remember_pr_push(
        &self,
        repo: &RepoName,
        number: PrNumber,
        pushed_at: Millis,
        now: Millis,
    ) -> ();
    fn named_gate(&self, key: &GateKey) -> Option<NamedGate>;
    fn named_gates_of_pr(&self, repo: &RepoName, number: PrNumber) -> Vec<NamedGate>;
    fn status_comment(&self, repo: &RepoName, number: PrNumber) -> Option<StatusComment>;
    fn claim_status_creation(
        &self,
        repo: &RepoName,
        number: PrNumber,
        job: &str,
        now: Millis,
        stale_after: Millis,
    ) -> bool;
    fn release_status_creation(&self, repo: &RepoName, number: PrNumber) -> ();
    fn remember_status_comment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        comment: &StatusComment,
        at: Millis,
    ) -> ();
    fn pr_missing(&self, repo: &RepoName, number: PrNumber, since: Millis) -> bool;
    fn mark_pr_missing(&self, repo: &RepoName, number: PrNumber, now: Millis) -> ();
    fn forget_pr_missing(&self, repo: &RepoName, number: PrNumber) -> ();
    fn check_run(&self, repo: &RepoName, number: PrNumber, kind: GateKind) -> Option<CheckRunRow>;
    fn claim_check_run(
        &self,
        key: &GateKey,
        head_sha: &str,
        job: &str,
        now: Millis,
        stale_after: Millis,
    ) -> bool;
    fn put_check_run(
        &self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        run: &CheckRunRow,
        now: Millis,
    ) -> ();
    fn forget_check_run(
        &self,
        repo: &RepoName,
        number: PrNumber,
        kind: GateKind,
        run_id: u64,
    ) -> ();
    fn deployments_of(&self, repo: &RepoName, number: PrNumber) -> Vec<DeploymentRow>;
    fn put_deployment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        row: &DeploymentRow,
        now: Millis,
    ) -> ();
    fn reserve_deployment(
        &self,
        repo: &RepoName,
        number: PrNumber,
        canary: &str,
        checksum: &str,
        max: usize,
        now: Millis,
    ) -> Reserved;
    fn revision_real(&self, gates: &[GateKey], canary: &str, checksum: &str) -> bool;
    fn pending_protections(
        &self,
        repo: &RepoName,
        number: PrNumber,
        at: Millis,
    ) -> Vec<ProtectionRequest>;
    fn decide_protection(&self, r: &ProtectionRequest, state: &str, at: Millis) -> bool;
    /// Whether deliveries can be written (before GitHub is asked to send them again).
    fn inbox_writable(&self) -> ();
}

// Slack: each posted message and its facts.
records! {
    fn slack_message(&self, wait_id: i64) -> Option<SlackMessage>;
    fn remember_slack_message(&self, m: &SlackMessage, now: Millis) -> ();
    fn latest_slack_message_of_canary(&self, canary: &str) -> Option<i64>;
    fn slack_messages_of_gate(&self, gate: &str, limit: i64) -> Vec<i64>;
    fn slack_decision(&self, wait_id: i64) -> Option<SlackDecision>;
    fn remember_slack_decision(&self, wait_id: i64, d: &SlackDecision) -> ();
    fn slack_ending(&self, wait_id: i64) -> Option<SlackEnding>;
    fn remember_slack_ending(&self, wait_id: i64, e: &SlackEnding) -> ();
    fn slack_final(&self, wait_id: i64) -> Option<SlackFinal>;
    fn remember_slack_final(&self, wait_id: i64, f: &SlackFinal) -> ();
}

// Teams: conversations the bot is in, and each card.
records! {
    fn teams_conversation(&self, id: &str) -> Option<TeamsConversation>;
    /// Whether it was kept (at most `cap` conversations are).
    fn remember_teams_conversation(&self, c: &TeamsConversation, now: Millis, cap: i64) -> bool;
    fn forget_teams_conversation(&self, conversation_id: &str) -> ();
    fn teams_card(&self, wait_id: i64) -> Option<TeamsCard>;
    fn remember_teams_card(&self, c: &TeamsCard, now: Millis) -> ();
    fn latest_teams_card_of_canary(&self, canary: &str) -> Option<i64>;
    fn teams_cards_of_gate(&self, gate: &str, limit: i64) -> Vec<i64>;
    fn end_teams_card(&self, wait_id: i64, outcome: &str) -> ();
    fn finish_teams_card(&self, wait_id: i64, kind: &str, message: &str) -> ();
}

// The web pages' sign-in: sign-outs and OAuth states used once.
records! {
    fn session_revoked(&self, id: &str) -> bool;
    fn revoke_session(&self, id: &str, expires_at: Millis, now: Millis) -> ();
    fn oauth_state_used(&self, state_hash: &str) -> bool;
    /// False: the state was used before (a replayed sign-in).
    fn use_oauth_state(&self, state_hash: &str, expires_at: Millis, now: Millis) -> bool;
}

// The operator API's and the web pages' lists, as stored.
records! {
    /// Up to `limit` open waits, newest first, older than the wait `before`;
    /// only those of `clusters` when given.
    fn open_waits_page(
        &self,
        clusters: Option<&[ClusterName]>,
        before: Option<i64>,
        limit: i64,
    ) -> Vec<WaitRow>;
    /// How many waits are open, of `clusters` only when given.
    fn open_wait_count_of(&self, clusters: Option<&[ClusterName]>) -> i64;
    /// Up to `limit` audit entries that `search` finds, newest first, with their ids.
    fn search_audit(&self, search: &AuditSearch, limit: i64) -> Vec<(i64, AuditEntry)>;
    /// The latest `limit` jobs of the outbox, in one state or all.
    fn jobs(&self, state: Option<&str>, limit: i64) -> Vec<Job>;
    /// How many deliveries or jobs wait in `queue`.
    fn pending(&self, queue: QueueName) -> i64;
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
        Store::put_pr_author(self.tx(), repo, number, login, now).await
    }

    /// Settles the delivery (or job) this unit applies, as its lease's owner.
    /// False: the lease was lost and another worker owns the item now.
    pub async fn settle(
        &mut self,
        queue: QueueName,
        claim: &Claim<'_>,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        Store::finish_in(self.tx(), queue, claim, now).await
    }

    /// Who decided a Slack message's wait, with the change they made.
    pub async fn decide_slack_message(
        &mut self,
        wait_id: i64,
        d: &SlackDecision,
    ) -> Result<(), StoreError> {
        Store::put_slack_decision(self.tx(), wait_id, d).await
    }

    /// Who decided a Teams card's wait, and how, with the change they made.
    pub async fn decide_teams_card(
        &mut self,
        wait_id: i64,
        verb: &str,
        by: &str,
    ) -> Result<(), StoreError> {
        let now = self.now();
        Store::decide_teams_card(self.tx(), wait_id, verb, by, now).await
    }
}
