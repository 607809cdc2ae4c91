//! Gates a pipeline created by name, the waits that announce them, and what
//! the policy does to long waits (deadlines, reminders).

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::NamedGates;
use super::{Result, StoreError, WriteTx};
pub use crate::gate::named::{Link, NamedSpec};
use crate::gate::{CanaryRef, GateKey, Millis, PrNumber, RepoName};

/// A named gate as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedGate {
    #[serde(skip)]
    pub key: GateKey,
    #[serde(flatten)]
    pub spec: NamedSpec,
    pub created_at: Millis,
    pub created_by: String,
    pub retired_at: Option<Millis>,
    /// When a retired gate's details (title, links, waits) were pruned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pruned_at: Option<Millis>,
}

fn named_from_row(row: &AnyRow) -> Result<NamedGate> {
    let key_text: String = row.try_get("gate_key")?;
    let key = GateKey::parse(&key_text, None)
        .map_err(|e| StoreError::Corrupt(format!("named gate {key_text}: {e}")))?;
    let links: String = row.try_get("links")?;
    let links = serde_json::from_str(&links)
        .map_err(|e| StoreError::Corrupt(format!("links of {key_text}: {e}")))?;
    let repo: Option<String> = row.try_get("pr_repo")?;
    let number: Option<i64> = row.try_get("pr_number")?;
    let pr = match (repo, number) {
        (Some(repo), Some(n)) => Some((
            repo.parse()
                .map_err(|e| StoreError::Corrupt(format!("PR of {key_text}: {e}")))?,
            PrNumber(
                u64::try_from(n)
                    .map_err(|_| StoreError::Corrupt(format!("PR of {key_text}: {n}")))?,
            ),
        )),
        _ => None,
    };
    Ok(NamedGate {
        key,
        spec: NamedSpec {
            title: row.try_get("title")?,
            links,
            slack_channel: row.try_get("slack_channel")?,
            pr,
        },
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        retired_at: row.try_get("retired_at")?,
        pruned_at: row.try_get("pruned_at")?,
    })
}

impl<'s> NamedGates<'s> {
    pub async fn named_gate(self, key: &GateKey) -> Result<Option<NamedGate>> {
        let row = sqlx::query("SELECT * FROM named_gates WHERE gate_key = $1")
            .bind(key.to_string())
            .fetch_optional(&self.store.pool)
            .await?;
        row.as_ref().map(named_from_row).transpose()
    }

    /// The live named gates that name a pull request, by key.
    pub async fn named_gates_of_pr(
        self,
        repo: &RepoName,
        number: PrNumber,
    ) -> Result<Vec<NamedGate>> {
        let number = i64::try_from(number.0)
            .map_err(|_| StoreError::Corrupt(format!("PR number {number} is out of range")))?;
        let rows = sqlx::query(
            "SELECT * FROM named_gates WHERE pr_repo = $1 AND pr_number = $2 AND retired_at IS NULL \
             ORDER BY gate_key LIMIT 20",
        )
        .bind(repo.to_string())
        .bind(number)
        .fetch_all(&self.store.pool)
        .await?;
        rows.iter().map(named_from_row).collect()
    }

    /// The named gate, read inside a unit (so that two creations take turns).
    pub async fn named_gate_in(tx: &mut WriteTx<'_>, key: &GateKey) -> Result<Option<NamedGate>> {
        let row = sqlx::query("SELECT * FROM named_gates WHERE gate_key = $1")
            .bind(key.to_string())
            .fetch_optional(tx.conn())
            .await?;
        row.as_ref().map(named_from_row).transpose()
    }

    pub async fn put_named_gate(tx: &mut WriteTx<'_>, g: &NamedGate) -> Result<()> {
        let links = serde_json::to_string(&g.spec.links)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode links: {e}")))?;
        let number = match &g.spec.pr {
            Some((_, n)) => Some(
                i64::try_from(n.0)
                    .map_err(|_| StoreError::Corrupt(format!("PR number {n} is out of range")))?,
            ),
            None => None,
        };
        sqlx::query(
            "INSERT INTO named_gates (gate_key, title, links, slack_channel, pr_repo, pr_number, created_at, created_by, retired_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (gate_key) DO UPDATE SET retired_at = excluded.retired_at",
        )
        .bind(g.key.to_string())
        .bind(g.spec.title.clone())
        .bind(links)
        .bind(g.spec.slack_channel.clone())
        .bind(g.spec.pr.as_ref().map(|(r, _)| r.to_string()))
        .bind(number)
        .bind(g.created_at)
        .bind(g.created_by.clone())
        .bind(g.retired_at)
        .execute(tx.conn())
        .await?;
        Ok(())
    }

    /// Starts the wait that announces a gate before any canary asks (its
    /// canary is empty): a named gate's, or a deployment's waiting for a PR's
    /// gate, due at `due_at` when a deadline applies. None: one is open already.
    pub async fn start_announcement(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        metadata: &str,
        at: Millis,
        due_at: Option<Millis>,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "INSERT INTO waits (gate_key, canary, checksum, phase, metadata, started_at, due_at) \
             VALUES ($1, '', '', '', $2, $3, $4) \
             ON CONFLICT (gate_key, canary) WHERE ended_at IS NULL DO NOTHING RETURNING id",
        )
        .bind(key.to_string())
        .bind(metadata.to_string())
        .bind(at)
        .bind(due_at)
        .fetch_optional(tx.conn())
        .await?;
        Ok(row.map(|r| r.try_get("id")).transpose()?)
    }

    /// Ends a named gate's announcement (the wait no canary made).
    pub async fn end_announcement(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        outcome: &str,
        at: Millis,
    ) -> Result<Option<i64>> {
        Self::end_wait_as(tx, key, "", outcome, at).await
    }

    /// Ends the open wait of `canary` as stored (empty for an announcement).
    pub(super) async fn end_wait_as(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        canary: &str,
        outcome: &str,
        at: Millis,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "UPDATE waits SET ended_at = $3, outcome = $4 \
             WHERE gate_key = $1 AND canary = $2 AND ended_at IS NULL RETURNING id, started_at",
        )
        .bind(key.to_string())
        .bind(canary.to_string())
        .bind(at)
        .bind(outcome.to_string())
        .fetch_optional(tx.conn())
        .await?;
        let Some(row) = row else { return Ok(None) };
        tx.ended_wait(
            key.kind,
            outcome,
            at - row.try_get::<Millis, _>("started_at")?,
        );
        Ok(Some(row.try_get("id")?))
    }

    /// Ends every open wait at a gate: (wait id, canary; None for an announcement).
    pub async fn end_waits_of_gate(
        tx: &mut WriteTx<'_>,
        key: &GateKey,
        outcome: &str,
        at: Millis,
    ) -> Result<Vec<(i64, Option<CanaryRef>)>> {
        let rows = sqlx::query(
            "UPDATE waits SET ended_at = $2, outcome = $3 \
             WHERE gate_key = $1 AND ended_at IS NULL RETURNING id, canary, started_at",
        )
        .bind(key.to_string())
        .bind(at)
        .bind(outcome.to_string())
        .fetch_all(tx.conn())
        .await?;
        for r in &rows {
            tx.ended_wait(
                key.kind,
                outcome,
                at - r.try_get::<Millis, _>("started_at")?,
            );
        }
        rows.iter()
            .map(|r| {
                let canary: String = r.try_get("canary")?;
                let canary = match canary.as_str() {
                    "" => None,
                    text => Some(
                        text.parse()
                            .map_err(|e| StoreError::Corrupt(format!("canary {text}: {e}")))?,
                    ),
                };
                Ok((r.try_get("id")?, canary))
            })
            .collect()
    }

    /// Inside a unit that creates a named gate: on PostgreSQL, creations by
    /// every replica take turns from here to the commit, so the counts read
    /// next stay true until the new gate is written (SQLite has one writer).
    pub async fn lock_named_creations(self, tx: &mut WriteTx<'_>) -> Result<()> {
        if self.store.backend == super::Backend::Postgres {
            sqlx::query("LOCK TABLE named_gates IN SHARE ROW EXCLUSIVE MODE")
                .execute(tx.conn())
                .await?;
        }
        Ok(())
    }

    /// The live named gates, and those `actor` created since `since`.
    pub async fn named_counts(
        tx: &mut WriteTx<'_>,
        actor: &str,
        since: Millis,
    ) -> Result<NamedCounts> {
        let live: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM named_gates WHERE retired_at IS NULL")
                .fetch_one(tx.conn())
                .await?;
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM named_gates \
             WHERE created_by = $1 AND created_at > $2",
        )
        .bind(actor.to_string())
        .bind(since)
        .fetch_one(tx.conn())
        .await?;
        Ok(NamedCounts {
            live,
            created: row.try_get("n")?,
            oldest_created: row.try_get("oldest")?,
        })
    }

    /// Prunes the details of up to `limit` gates retired before `before`:
    /// their title, links, channel and PR, their ended waits and what Slack
    /// showed of them, and the canaries' last checks. The name, the gate's
    /// state (held) and the audit lines stay. Returns the gates pruned.
    pub async fn prune_retired_named(
        self,
        before: Millis,
        now: Millis,
        limit: i64,
    ) -> Result<Vec<GateKey>> {
        let mut tx = self.store.begin().await?;
        let keys: Vec<String> = sqlx::query_scalar(
            "SELECT gate_key FROM named_gates WHERE pruned_at IS NULL AND retired_at < $1 \
             ORDER BY retired_at LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(tx.conn())
        .await?;
        if keys.is_empty() {
            tx.rollback().await;
            return Ok(Vec::new());
        }
        for key in &keys {
            prune_one(&mut tx, key, now).await?;
        }
        tx.commit().await?;
        keys.iter()
            .map(|k| {
                GateKey::parse(k, None)
                    .map_err(|e| StoreError::Corrupt(format!("named gate {k}: {e}")))
            })
            .collect()
    }
}

/// How many named gates are live, and how many one actor created lately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedCounts {
    /// Created and not retired.
    pub live: i64,
    /// Created by the actor since the time asked.
    pub created: i64,
    /// When the oldest of those was created.
    pub oldest_created: Option<Millis>,
}

async fn prune_one(tx: &mut WriteTx<'_>, key: &str, now: Millis) -> Result<()> {
    sqlx::query(
        "UPDATE named_gates SET title = NULL, links = '[]', slack_channel = NULL, \
         pr_repo = NULL, pr_number = NULL, pruned_at = $2 WHERE gate_key = $1",
    )
    .bind(key.to_string())
    .bind(now)
    .execute(tx.conn())
    .await?;
    for table in ["slack_decisions", "slack_endings", "slack_finals"] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE wait_id IN (SELECT wait_id FROM slack_messages WHERE gate = $1)"
        ))
        .bind(key.to_string())
        .execute(tx.conn())
        .await?;
    }
    for statement in [
        "DELETE FROM slack_messages WHERE gate = $1",
        "DELETE FROM waits WHERE gate_key = $1 AND ended_at IS NOT NULL",
        "DELETE FROM observations WHERE gate_key = $1",
    ] {
        sqlx::query(statement)
            .bind(key.to_string())
            .execute(tx.conn())
            .await?;
    }
    Ok(())
}
