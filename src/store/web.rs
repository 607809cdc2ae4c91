//! Paged reads for the web pages: open waits newest first (of some clusters,
//! or all), and the audit log searched by person, repository, gate and time.
//! Each page is one indexed range (`id < cursor ORDER BY id DESC LIMIT n`),
//! or one per cluster, so a page costs the same however long the log is.

use sqlx::Row;

use super::WebReads;
use super::{rows, AuditEntry, Result, WaitRow};
use crate::gate::{ClusterName, Millis};

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

/// The open waits of `n` clusters (`$3`, `$4`, …), newest first, older than
/// `$1`, at most `$2`: one indexed range per cluster, merged.
fn open_waits_of_clusters(n: usize) -> String {
    let ranges: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "SELECT * FROM (SELECT * FROM waits WHERE ended_at IS NULL AND cluster = ${} \
                 AND id < $1 ORDER BY id DESC LIMIT $2) AS w{i}",
                i + 3
            )
        })
        .collect();
    format!(
        "SELECT * FROM ({}) AS w ORDER BY id DESC LIMIT $2",
        ranges.join(" UNION ALL ")
    )
}

impl<'s> WebReads<'s> {
    /// Up to `limit` open waits, newest first, older than the wait `before`;
    /// only those of `clusters` when given. Each cluster is one range of the
    /// partial index `waits_open_by_cluster` (at most `limit` rows each), so a
    /// filtered page costs the same however many waits other clusters have.
    pub async fn open_waits_page(
        self,
        clusters: Option<&[ClusterName]>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<WaitRow>> {
        let Some(clusters) = clusters else {
            let rows = sqlx::query(
                "SELECT * FROM waits WHERE ended_at IS NULL AND id < $1 ORDER BY id DESC LIMIT $2",
            )
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(&self.store.pool)
            .await?;
            return rows.iter().map(rows::wait_from_row).collect();
        };
        if clusters.is_empty() {
            return Ok(Vec::new());
        }
        let sql = open_waits_of_clusters(clusters.len());
        let mut query = sqlx::query(&sql)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit);
        for c in clusters {
            query = query.bind(c.as_str().to_string());
        }
        let rows = query.fetch_all(&self.store.pool).await?;
        rows.iter().map(rows::wait_from_row).collect()
    }

    /// How many waits are open, of `clusters` only when given.
    pub async fn open_wait_count_of(self, clusters: Option<&[ClusterName]>) -> Result<i64> {
        let Some(clusters) = clusters else {
            return self.store.waits().open_wait_count().await;
        };
        if clusters.is_empty() {
            return Ok(0);
        }
        let marks: Vec<String> = (1..=clusters.len()).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT COUNT(*) AS n FROM waits WHERE ended_at IS NULL AND cluster IN ({})",
            marks.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for c in clusters {
            query = query.bind(c.as_str().to_string());
        }
        Ok(query.fetch_one(&self.store.pool).await?.try_get("n")?)
    }

    /// Up to `limit` audit entries matching `q`, newest first, with their ids.
    pub async fn search_audit(self, q: &AuditSearch, limit: i64) -> Result<Vec<(i64, AuditEntry)>> {
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
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, rows::audit_from_row(r)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Row, SqliteConnection};

    use super::open_waits_of_clusters;
    use crate::store::Store;

    /// Each cluster of a filtered waiting page is read as a range of the
    /// partial index, never by scanning the table.
    #[tokio::test]
    async fn a_filtered_page_reads_an_index_range_per_cluster() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/gatebot.db", dir.path().display());
        Store::open(&url, Some(1))
            .await
            .expect("store")
            .close()
            .await;
        let mut conn = SqliteConnection::connect(&url).await.expect("connect");
        let sql = format!("EXPLAIN QUERY PLAN {}", open_waits_of_clusters(3));
        let plan: Vec<String> = sqlx::query(&sql)
            .bind(i64::MAX)
            .bind(51_i64)
            .bind("staging-eu")
            .bind("prod-eu")
            .bind("prod-us")
            .fetch_all(&mut conn)
            .await
            .expect("a plan")
            .iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect();
        let ranges = plan
            .iter()
            .filter(|d| d.contains("USING INDEX waits_open_by_cluster (cluster=? AND id<?)"))
            .count();
        assert_eq!(ranges, 3, "{plan:#?}");
        assert!(
            !plan.iter().any(|d| d.starts_with("SCAN waits")),
            "{plan:#?}"
        );
    }
}
