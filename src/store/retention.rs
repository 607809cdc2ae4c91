//! Retention: what is deleted, and when, so that the store stops growing.
//!
//! Every table that grows with traffic has a rule here. Rows go in small
//! batches, each its own short write, so that a check or a command never
//! waits long behind a prune; on PostgreSQL a batch runs only on the replica
//! that holds the retention lock at that moment, so replicas do not prune the
//! same rows twice over.

use sqlx::Row;

use super::{Backend, Pruning, Result};
use crate::gate::Millis;

/// Rows touched by one statement of a prune.
pub const BATCH: i64 = 500;

/// How long each kind of row is kept, in milliseconds before now; `None`
/// keeps it for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Done and failed inbox and outbox rows keep their payload this long.
    pub payloads: Millis,
    /// Done and failed inbox and outbox rows (the ids replay protection
    /// needs) are kept this long.
    pub deliveries: Millis,
    /// Flagger's events, observations, ended waits and what hangs on them.
    pub history: Millis,
    /// Audit entries.
    pub audit: Option<Millis>,
}

impl From<&crate::config::Limits> for Retention {
    fn from(kept: &crate::config::Limits) -> Self {
        let ms = |d: std::time::Duration| Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX);
        Self {
            payloads: ms(kept.retention_payloads),
            deliveries: ms(kept.retention_deliveries),
            history: ms(kept.retention_history),
            // 0 keeps the audit log for ever.
            audit: (!kept.retention_audit.is_zero()).then(|| ms(kept.retention_audit)),
        }
    }
}

/// What a rule does to the rows it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Delete,
    /// Keep the row (its id still dedupes), drop what it carried.
    ClearPayload,
}

/// One rule: the rows of `table` that `selected` picks (with `$1` the
/// cutoff), keyed by `key`.
struct Rule {
    table: &'static str,
    key: &'static str,
    selected: &'static str,
    action: Action,
    cutoff: fn(&Retention) -> Option<Millis>,
}

const fn rule(
    table: &'static str,
    key: &'static str,
    selected: &'static str,
    action: Action,
    cutoff: fn(&Retention) -> Option<Millis>,
) -> Rule {
    Rule {
        table,
        key,
        selected,
        action,
        cutoff,
    }
}

impl Rule {
    /// The statement of one batch. A row that a command changes while the
    /// batch runs must survive it, on both stores:
    /// - the outer statement checks the rule again, so that PostgreSQL
    ///   re-reads the condition on the newest version of a row it waited for
    ///   (a bare `key IN (…)` deletes a row that stopped being old meanwhile);
    /// - on PostgreSQL the batch takes only rows nobody holds (`SKIP LOCKED`):
    ///   a row a command is changing is left for a later pass, and the prune
    ///   never waits behind a stuck lock.
    ///
    /// SQLite runs one writer at a time: the batch sees every commit before it.
    fn statement(&self, backend: Backend) -> String {
        let (table, key, selected) = (self.table, self.key, self.selected);
        let skip_locked = match backend {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let chosen =
            format!("SELECT {key} FROM {table} WHERE {selected} LIMIT {BATCH}{skip_locked}");
        let rows = format!("({key}) IN ({chosen}) AND ({selected})");
        match self.action {
            Action::Delete => format!("DELETE FROM {table} WHERE {rows}"),
            Action::ClearPayload => format!("UPDATE {table} SET payload = '' WHERE {rows}"),
        }
    }
}

fn payloads(r: &Retention) -> Option<Millis> {
    Some(r.payloads)
}
fn deliveries(r: &Retention) -> Option<Millis> {
    Some(r.deliveries)
}
fn history(r: &Retention) -> Option<Millis> {
    Some(r.history)
}
fn audit(r: &Retention) -> Option<Millis> {
    r.audit
}

static RULES: &[Rule] = &[
    rule("inbox", "id", "state <> 'pending' AND done_at < $1 AND payload <> ''", Action::ClearPayload, payloads),
    rule("outbox", "id", "state <> 'pending' AND done_at < $1 AND payload <> ''", Action::ClearPayload, payloads),
    rule("inbox", "id", "state <> 'pending' AND done_at < $1", Action::Delete, deliveries),
    rule("outbox", "id", "state <> 'pending' AND done_at < $1", Action::Delete, deliveries),
    rule("events", "id", "received_at < $1", Action::Delete, history),
    rule("observations", "gate_key, canary", "last_seen < $1", Action::Delete, history),
    rule("waits", "id", "ended_at IS NOT NULL AND ended_at < $1", Action::Delete, history),
    rule("canary_ties", "canary, checksum", "found_at < $1", Action::Delete, history),
    // A canary silent for as long as its events are kept: its progress and
    // the failures said for it go with them.
    rule("canary_progress", "canary", "last_at < $1", Action::Delete, history),
    // A wait's Slack rows go after the wait; an open wait keeps them.
    rule("slack_messages", "wait_id", "posted_at < $1 AND wait_id NOT IN (SELECT id FROM waits WHERE ended_at IS NULL)", Action::Delete, history),
    rule("slack_decisions", "wait_id", "decided_at < $1 AND wait_id NOT IN (SELECT id FROM waits WHERE ended_at IS NULL)", Action::Delete, history),
    rule("slack_endings", "wait_id", "ended_at < $1", Action::Delete, history),
    rule("slack_finals", "wait_id", "final_at < $1", Action::Delete, history),
    // A PR's head and its check runs, untouched that long: a later wait
    // asks GitHub for the head again and makes new runs.
    rule("pr_heads", "repo, number", "pushed_at < $1", Action::Delete, history),
    rule("check_runs", "repo, number, kind", "updated_at < $1", Action::Delete, history),
    // A commit promoted longer ago than the history: a later environment
    // asking about it again waits as if it never was.
    rule("passages", "gate_key, commit_sha, cluster", "passed_at < $1", Action::Delete, history),
    rule("teams_cards", "wait_id", "posted_at < $1 AND wait_id NOT IN (SELECT id FROM waits WHERE ended_at IS NULL)", Action::Delete, history),
    // A gate long closed, or whose approval expired long ago, answers as one
    // never opened: closed. (Commands written before its close are older
    // than any window that still accepts them.) Held gates stay, but for a
    // named gate's retirement once its name is gone (see `named_gates`).
    rule(
        "gates",
        "key",
        "changed_at < $1 AND key NOT IN (SELECT gate_key FROM named_gates) \
         AND (status = 'closed' OR (status = 'open' AND expires_at < $1) \
              OR (status = 'held' AND key LIKE '/gates/%/named/%' \
                  AND (reason = 'retired' OR reason LIKE 'retired: %')))",
        Action::Delete,
        history,
    ),
    rule(
        "votes",
        "gate_key, position",
        "voted_at < $1 AND gate_key NOT IN (SELECT key FROM gates)",
        Action::Delete,
        history,
    ),
    // A pin of an approval no longer in force answers nothing any more.
    rule("pins", "approval_id, canary", "pinned_at < $1 AND approval_id NOT IN (SELECT approval_id FROM gates WHERE approval_id IS NOT NULL)", Action::Delete, history),
    rule("missing_prs", "repo, number", "marked_at < $1", Action::Delete, history),
    // A revision's deployment, not sent to for the history's length.
    rule("github_deployments", "repo, number, canary, checksum", "updated_at < $1", Action::Delete, history),
    // A protected deployment decided (or asked about) longer ago than the
    // history: GitHub gives up on a pending one after 30 days anyway.
    rule("github_protection_requests", "repo, run_id, environment", "COALESCE(decided_at, requested_at) < $1", Action::Delete, history),
    rule("audit", "id", "at < $1", Action::Delete, audit),
    // Freezes and retired named gates are part of the audit trail: kept as long.
    rule(
        "freezes",
        "id",
        "(lifted_at IS NOT NULL AND lifted_at < $1) OR (until IS NOT NULL AND until < $1)",
        Action::Delete,
        audit,
    ),
    rule(
        "named_gates",
        "gate_key",
        "retired_at < $1 AND pruned_at IS NOT NULL",
        Action::Delete,
        audit,
    ),
];

/// The tables whose rows are counted for `gatebot_store_rows`.
pub const COUNTED: &[&str] = &[
    "gates",
    "pins",
    "observations",
    "waits",
    "audit",
    "events",
    "outbox",
    "inbox",
    "named_gates",
    "votes",
    "slack_messages",
    "status_comments",
    "pr_pushes",
    "pr_authors",
    "pr_heads",
    "check_runs",
    "passages",
    "github_protection_requests",
    "teams_cards",
    "teams_conversations",
];

/// What one pass did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    pub table: &'static str,
    /// Rows deleted (payloads cleared are not counted here).
    pub deleted: u64,
    pub cleared: u64,
}

impl<'s> Pruning<'s> {
    /// One retention pass at `now`: every rule, batch after batch, until each
    /// has nothing left or another replica holds the turn. What went, per
    /// table.
    pub async fn prune(self, retention: &Retention, now: Millis) -> Result<Vec<Pruned>> {
        let mut out: Vec<Pruned> = Vec::new();
        for r in RULES {
            let Some(keep) = (r.cutoff)(retention) else {
                continue;
            };
            let cutoff = now.saturating_sub(keep);
            let mut touched = 0u64;
            loop {
                let Some(n) = self.prune_batch(r, cutoff).await? else {
                    break;
                };
                touched += n;
                if n < BATCH as u64 {
                    break;
                }
                // Let checks and commands in between batches.
                tokio::task::yield_now().await;
            }
            if touched > 0 {
                let entry = match out.iter_mut().find(|p| p.table == r.table) {
                    Some(entry) => entry,
                    None => {
                        out.push(Pruned {
                            table: r.table,
                            deleted: 0,
                            cleared: 0,
                        });
                        out.last_mut().expect("just pushed")
                    }
                };
                match r.action {
                    Action::Delete => entry.deleted += touched,
                    Action::ClearPayload => entry.cleared += touched,
                }
            }
        }
        if self.store.backend == Backend::Sqlite && out.iter().any(|p| p.deleted > 0) {
            self.return_free_pages().await?;
        }
        Ok(out)
    }

    /// One batch of one rule in its own transaction; None when another
    /// replica is pruning.
    async fn prune_batch(self, r: &Rule, cutoff: Millis) -> Result<Option<u64>> {
        // A read first: a pass with nothing due writes nothing (no write turn,
        // no transaction).
        let due = format!("SELECT 1 FROM {} WHERE {} LIMIT 1", r.table, r.selected);
        let any: Option<i32> = sqlx::query_scalar(&due)
            .bind(cutoff)
            .fetch_optional(&self.store.pool)
            .await?;
        if any.is_none() {
            return Ok(Some(0));
        }
        let mut tx = self.store.begin().await?;
        if self.store.backend == Backend::Postgres {
            let ours: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                .bind(RETENTION_LOCK)
                .fetch_one(tx.conn())
                .await?;
            if !ours {
                tx.rollback().await;
                return Ok(None);
            }
        }
        let sql = r.statement(self.store.backend);
        let done = sqlx::query(&sql).bind(cutoff).execute(tx.conn()).await?;
        tx.commit().await?;
        Ok(Some(done.rows_affected()))
    }

    /// SQLite: hands the pages freed by a prune back to the file system, so
    /// the file shrinks instead of only not growing.
    async fn return_free_pages(self) -> Result<()> {
        let query = sqlx::query("PRAGMA incremental_vacuum");
        self.store.execute_alone(query).await
    }

    /// Rows in each of [`COUNTED`].
    pub async fn row_counts(self) -> Result<Vec<(&'static str, i64)>> {
        let mut out = Vec::with_capacity(COUNTED.len());
        for table in COUNTED {
            let n: i64 = sqlx::query(&format!("SELECT COUNT(*) AS n FROM {table}"))
                .fetch_one(&self.store.pool)
                .await?
                .try_get("n")?;
            out.push((*table, n));
        }
        Ok(out)
    }

    /// The store's size on disk in bytes: SQLite's pages in use and free,
    /// or the PostgreSQL database's size.
    pub async fn size_bytes(self) -> Result<i64> {
        let sql = match self.store.backend {
            Backend::Sqlite => {
                "SELECT (SELECT page_count FROM pragma_page_count()) * \
                 (SELECT page_size FROM pragma_page_size()) AS n"
            }
            Backend::Postgres => "SELECT pg_database_size(current_database()) AS n",
        };
        Ok(sqlx::query(sql)
            .fetch_one(&self.store.pool)
            .await?
            .try_get("n")?)
    }
}

/// The advisory lock key of retention passes (an arbitrary constant).
const RETENTION_LOCK: i64 = 0x6761_7465_7265_746e;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_selects_by_its_cutoff() {
        for r in RULES {
            assert!(!r.selected.contains(';'), "{}", r.table);
            assert!(r.selected.contains("< $1"), "{} has a cutoff", r.table);
        }
    }

    #[test]
    fn every_statement_checks_its_rule_on_the_rows_it_changes() {
        for r in RULES {
            for backend in [Backend::Sqlite, Backend::Postgres] {
                let sql = r.statement(backend);
                let outer = format!(") AND ({})", r.selected);
                assert!(sql.ends_with(&outer), "{sql}");
                assert_eq!(
                    sql.contains("SKIP LOCKED"),
                    backend == Backend::Postgres,
                    "{sql}"
                );
            }
        }
    }
}
