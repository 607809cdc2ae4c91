//! Paged reads for the web pages: open waits newest first, and the audit log
//! searched by person, repository, gate and time. Each page is one indexed
//! range (`id < cursor ORDER BY id DESC LIMIT n`), so a page costs the same
//! however long the log is.

use sqlx::Row;

use super::{rows, AuditEntry, Result, Store, WaitRow};
use crate::gate::Millis;

/// What the audit page searches for; empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct AuditSearch {
    /// Who acted (a GitHub login, a Slack name), ignoring case.
    pub actor: String,
    /// `owner/repo`: the gates of its pull requests.
    pub repo: String,
    /// One gate's key, as written (`/gates/promote/acme/shop/pr/42`).
    pub gate: String,
    /// From this time (inclusive) to `until` (exclusive).
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    /// Entries older than this id (the cursor of the next page).
    pub before: Option<i64>,
}

/// `text` as a LIKE pattern that matches itself only.
fn like_literal(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

impl Store {
    /// Up to `limit` open waits, newest first, older than the wait `before`.
    pub async fn open_waits_page(&self, before: Option<i64>, limit: i64) -> Result<Vec<WaitRow>> {
        let rows = sqlx::query(
            "SELECT * FROM waits WHERE ended_at IS NULL AND id < $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::wait_from_row).collect()
    }

    /// Up to `limit` audit entries matching `q`, newest first, with their ids.
    pub async fn search_audit(
        &self,
        q: &AuditSearch,
        limit: i64,
    ) -> Result<Vec<(i64, AuditEntry)>> {
        // Sentinels rather than NULL parameters: both stores type them the same.
        let repo = if q.repo.is_empty() {
            String::new()
        } else {
            format!("/gates/%/{}/pr/%", like_literal(q.repo.trim()))
        };
        let rows = sqlx::query(
            "SELECT * FROM audit WHERE id < $1 \
             AND ($2 = '' OR LOWER(actor) = LOWER($2)) \
             AND ($3 = '' OR gate_key LIKE $3 ESCAPE '\\') \
             AND ($4 = '' OR gate_key = $4) \
             AND at >= $5 AND at < $6 \
             ORDER BY id DESC LIMIT $7",
        )
        .bind(q.before.unwrap_or(i64::MAX))
        .bind(q.actor.trim().to_string())
        .bind(repo)
        .bind(q.gate.trim().to_string())
        .bind(q.since.unwrap_or(i64::MIN))
        .bind(q.until.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, rows::audit_from_row(r)?)))
            .collect()
    }
}
