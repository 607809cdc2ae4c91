//! The approvals of gates that need several people: counted so far while a
//! gate is approving, or those that opened it. A gate's votes are rewritten
//! with the gate, in the same transaction.

use std::collections::HashMap;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::Votes;
use super::{actor_from, Result, StoreError, WriteTx};
use crate::gate::{Change, Gate, GateKey, GateStatus, Group, Include, Vote};

/// The votes a gate's state carries, in order.
fn votes_of_status(status: &GateStatus) -> Vec<Vote> {
    match status {
        GateStatus::Approving(t) => t.votes.clone(),
        GateStatus::Open(a) if a.approvers.len() > 1 => a
            .approvers
            .iter()
            .map(|by| Vote {
                person: by.name.clone(),
                change: Change {
                    by: by.clone(),
                    reason: None,
                    at: a.change.at,
                },
                revision: None,
                groups: Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl<'s> Votes<'s> {
    /// Replaces the gate's votes with those its state carries.
    pub(super) async fn put_votes(tx: &mut WriteTx<'_>, gate: &Gate) -> Result<()> {
        let key = gate.key.to_string();
        let votes = votes_of_status(&gate.status);
        sqlx::query("DELETE FROM votes WHERE gate_key = $1")
            .bind(key.clone())
            .execute(tx.conn())
            .await?;
        for (position, v) in votes.iter().enumerate() {
            let (canary, checksum) = v.revision.clone().unzip();
            sqlx::query(
                "INSERT INTO votes (gate_key, position, person, actor, source, reason, voted_at, canary, checksum, member_of) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(key.clone())
            .bind(position as i64)
            .bind(v.person.clone())
            .bind(v.change.by.name.clone())
            .bind(v.change.by.source.as_str())
            .bind(v.change.reason.clone())
            .bind(v.change.at)
            .bind(canary)
            .bind(checksum)
            .bind(words(v.groups.iter().map(Group::as_str)))
            .execute(tx.conn())
            .await?;
        }
        Ok(())
    }

    /// The votes of gates with keys from `first` to `last`, by gate key.
    pub(super) async fn votes_between(
        self,
        first: &str,
        last: &str,
    ) -> Result<HashMap<String, Vec<Vote>>> {
        let rows = sqlx::query(
            "SELECT * FROM votes WHERE gate_key >= $1 AND gate_key <= $2 ORDER BY gate_key, position",
        )
        .bind(first.to_string())
        .bind(last.to_string())
        .fetch_all(&self.store.pool)
        .await?;
        let mut votes: HashMap<String, Vec<Vote>> = HashMap::new();
        for row in &rows {
            votes
                .entry(row.try_get("gate_key")?)
                .or_default()
                .push(vote_from_row(row)?);
        }
        Ok(votes)
    }
}

/// The votes of one gate, in order, read on `conn`.
pub(super) async fn votes_on(conn: &mut AnyConnection, key: &GateKey) -> Result<Vec<Vote>> {
    let rows = sqlx::query("SELECT * FROM votes WHERE gate_key = $1 ORDER BY position")
        .bind(key.to_string())
        .fetch_all(conn)
        .await?;
    rows.iter().map(vote_from_row).collect()
}

fn vote_from_row(row: &AnyRow) -> Result<Vote> {
    let by = actor_from(row, "actor", "source")?
        .ok_or_else(|| StoreError::Corrupt("a vote has no actor".into()))?;
    let canary: Option<String> = row.try_get("canary")?;
    let checksum: Option<String> = row.try_get("checksum")?;
    Ok(Vote {
        person: row.try_get("person")?,
        change: Change {
            by,
            reason: row.try_get("reason")?,
            at: row.try_get("voted_at")?,
        },
        revision: canary.zip(checksum),
        groups: groups_in(&row.try_get::<String, _>("member_of")?)?,
    })
}

/// Names as one column: each is one word (group names have no spaces).
pub(super) fn words<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.collect::<Vec<_>>().join(" ")
}

/// The groups a vote's column names, each checked as the policy checks it.
fn groups_in(column: &str) -> Result<Vec<Group>> {
    column.split_whitespace().map(group_in).collect()
}

/// One group's name read back, by the form that says its kind.
pub(super) fn group_in(name: &str) -> Result<Group> {
    let group = if name.contains('/') {
        Group::team(name)
    } else if name.starts_with('S') {
        Group::slack(name)
    } else {
        Group::listed(name)
    };
    group.map_err(|e| StoreError::Corrupt(format!("a vote's group {e}")))
}

/// Gives a loaded gate its votes: the tally of an approving gate, or the
/// people who opened it.
pub(super) fn attach(gate: &mut Gate, votes: Vec<Vote>) {
    match &mut gate.status {
        GateStatus::Approving(t) => t.votes = votes,
        GateStatus::Open(a) => a.approvers = votes.into_iter().map(|v| v.change.by).collect(),
        _ => {}
    }
}

/// Whether a gate's row says it has votes to read: it is approving, or
/// several people opened it.
pub(super) fn has_votes(row: &AnyRow) -> Result<bool> {
    let status: String = row.try_get("status")?;
    let required: i64 = row.try_get("required")?;
    Ok(status == "approving" || (status == "open" && required > 1))
}

/// A tally's groups as one column: `acme/sre=1 S0SRE=2`.
pub(super) fn includes_column(include: &[Include]) -> String {
    let each: Vec<String> = include
        .iter()
        .map(|i| format!("{}={}", i.group, i.at_least))
        .collect();
    each.join(" ")
}

/// The groups a gate's `must_include` column names.
pub(super) fn includes_in(column: &str) -> Result<Vec<Include>> {
    column
        .split_whitespace()
        .map(|word| {
            let (name, n) = word.rsplit_once('=').unwrap_or((word, ""));
            let at_least = n.parse().map_err(|_| {
                StoreError::Corrupt(format!("a gate's group `{word}` has no count"))
            })?;
            Ok(Include {
                group: group_in(name)?,
                at_least,
            })
        })
        .collect()
}
