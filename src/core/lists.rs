//! The lists the operator API and the web pages show as stored: waits, the
//! audit log and its search, the outbox's jobs, Flagger's events and the
//! queues' backlog. Channels read them here, never from the store.

use super::*;
use crate::gate::ClusterName;

impl Engine {
    /// The latest `limit` waits, of one gate or all, only open ones if `open`.
    pub async fn waits(
        &self,
        gate: Option<&GateKey>,
        open: bool,
        limit: i64,
    ) -> Result<Vec<WaitRow>, StoreError> {
        self.store.waits(gate, open, limit).await
    }

    /// Up to `limit` open waits, newest first, older than the wait `before`;
    /// only those of `clusters` when given.
    pub async fn open_waits(
        &self,
        clusters: Option<&[ClusterName]>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<WaitRow>, StoreError> {
        self.store.open_waits_page(clusters, before, limit).await
    }

    /// How many waits are open, of `clusters` only when given.
    pub async fn open_wait_count(
        &self,
        clusters: Option<&[ClusterName]>,
    ) -> Result<i64, StoreError> {
        self.store.open_wait_count_of(clusters).await
    }

    /// The latest `limit` audit entries, of one gate or all.
    pub async fn audit(
        &self,
        gate: Option<&GateKey>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.store.audit_log(gate, limit).await
    }

    /// Up to `limit` audit entries that `search` finds, newest first, with their ids.
    pub async fn search_audit(
        &self,
        search: &AuditSearch,
        limit: i64,
    ) -> Result<Vec<(i64, AuditEntry)>, StoreError> {
        self.store.search_audit(search, limit).await
    }

    /// The latest `limit` jobs of the outbox, in one state or all.
    pub async fn jobs(&self, state: Option<&str>, limit: i64) -> Result<Vec<Job>, StoreError> {
        self.store.jobs(state, limit).await
    }

    /// How many deliveries or jobs wait in `queue`.
    pub async fn pending(&self, queue: QueueName) -> Result<i64, StoreError> {
        self.store.pending(queue).await
    }

    /// Who opened the PR, as gatebot recorded it (None if never seen).
    pub async fn pr_author(
        &self,
        repo: &RepoName,
        number: crate::gate::PrNumber,
    ) -> Result<Option<String>, StoreError> {
        self.store.pr_author(repo, number).await
    }

    /// The PR's head commit as the last push GitHub told of set it (None if never told).
    pub async fn pr_head(
        &self,
        repo: &RepoName,
        number: crate::gate::PrNumber,
    ) -> Result<Option<String>, StoreError> {
        self.store.pr_head(repo, number).await
    }

    /// The latest `limit` Flagger events, of one canary (`namespace/name`) or all.
    pub async fn events(
        &self,
        canary: Option<&str>,
        limit: i64,
    ) -> Result<Vec<EventRow>, StoreError> {
        self.store.events(canary, limit).await
    }

    /// A canary's progress as its events tell it (one row, no list read).
    pub async fn progress(
        &self,
        canary: &crate::gate::CanaryRef,
    ) -> Result<Option<crate::gate::progress::CanaryProgress>, StoreError> {
        self.store.canary_progress(canary).await
    }
}
