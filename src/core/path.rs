//! The path a PR's revision takes through the environments, as messages
//! show it beside one cluster's wait: a row per environment and cluster with
//! the state of the gate of the same kind there.

use serde::Serialize;

use super::Records;
use crate::gate::environment::{order, valid_commit, Order};
use crate::gate::{Answer, ClusterName, GateKey, GateKind, GateStatus, Millis};
use crate::store::StoreError;

/// One cluster on the path. Every word is gatebot's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathRow {
    pub environment: String,
    pub cluster: String,
    /// open | waiting | approved | held | closed | not started
    pub state: &'static str,
    /// The row of the gate the message is about.
    pub here: bool,
    /// While a canary waits there for the environment before: where its
    /// revision stands ("waiting: staging promoted 85d557f 12 min ago; …").
    pub order: Option<String>,
}

/// The path of `key`'s kind and scope, when the policy has environments and
/// `key` is one cluster's gate; empty otherwise.
pub async fn path_of(
    records: &Records,
    key: &GateKey,
    now: Millis,
) -> Result<Vec<PathRow>, StoreError> {
    let envs = records.environments();
    if envs.is_empty() || key.cluster.is_none() {
        return Ok(Vec::new());
    }
    let mut rows = Vec::new();
    for env in envs.all() {
        for cluster in &env.clusters {
            let at = key.clone().at(Some(cluster.clone()));
            let (state, order) = state_at(records, &at, now).await?;
            rows.push(PathRow {
                environment: env.name.to_string(),
                cluster: cluster.to_string(),
                here: at == *key,
                state,
                order,
            });
        }
    }
    Ok(rows)
}

/// The state of one cluster's gate: what Flagger last heard there, and
/// what people decided.
async fn state_at(
    records: &Records,
    key: &GateKey,
    now: Millis,
) -> Result<(&'static str, Option<String>), StoreError> {
    let gate = records.load_gate(key).await?.map(|g| g.status);
    let seen = records.observations_for(key).await?;
    let waiting = !records.waits(Some(key), true, 1).await?.is_empty();
    let passed = seen.iter().any(|o| o.answer == Answer::Open);
    let order = match seen.iter().find(|o| o.wait_id.is_some()) {
        Some(o) if waiting => order_line(records, key, o, now).await?,
        _ => None,
    };
    let state = match gate {
        Some(GateStatus::Held { .. }) => "held",
        Some(GateStatus::Open(a)) if !a.expired(now) && passed && !waiting => "open",
        Some(GateStatus::Open(a)) if !a.expired(now) => "approved",
        _ if waiting => "waiting",
        _ if seen.is_empty() => "not started",
        _ => "closed",
    };
    Ok((state, order))
}

/// Where the revision a canary waits with stands on the environments' path,
/// while it waits for the environment before: gatebot's own words (names
/// and a commit as the policy and the order checked them).
pub async fn order_line(
    records: &Records,
    key: &GateKey,
    o: &crate::store::ObservationRow,
    now: Millis,
) -> Result<Option<String>, StoreError> {
    let envs = records.environments();
    let Some(env) = key.cluster.as_ref().and_then(|c| envs.of_cluster(c)) else {
        return Ok(None);
    };
    if env.after.is_none() || key.kind.is_rollback() {
        return Ok(None);
    }
    // The metadata only, as stored: never the PR's head (see `commit_known`).
    let commit = o.metadata["commit"]
        .as_str()
        .filter(|c| valid_commit(c))
        .map(str::to_ascii_lowercase);
    let gate = GateKey::new(GateKind::Promote, key.scope.clone());
    let passages = records.passages_of(&gate).await?;
    let promoted = |c: &ClusterName, commit: &str| {
        let p = passages
            .iter()
            .find(|p| p.commit == commit && p.cluster == *c)?;
        Some(p.at)
    };
    Ok(match order(envs, env, commit.as_deref(), promoted, now) {
        Order::Waiting(line) => Some(line),
        Order::Free => None,
    })
}
