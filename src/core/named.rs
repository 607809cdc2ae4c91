//! Named gates: created by a pipeline (`POST /api/v1/gates`), announced at
//! once, before Flagger first asks, and retired when the pipeline is done.
//! Everything else (approvals, pins, expiry, holds) is any gate's.

use std::collections::BTreeMap;
use std::time::Duration;

use super::unit::{audit_entry, Unit};
use super::{CommandError, NamedGates, Provenance};
use crate::gate::{AuditAction, Gate, GateKey, Millis, Scope};
use crate::notify::Notice;
use crate::store::{NamedGate, NamedSpec, StoreError};

/// How many named gates there may be (`[limits] named_gates_live`,
/// `[limits] named_gates_per_hour`): each costs store space until it is
/// retired and pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedLimits {
    /// Created and not yet retired, by anyone.
    pub live: u32,
    /// Created by one token in the last hour.
    pub per_hour: u32,
}

/// The window of `NamedLimits::per_hour`.
const HOUR_MS: Millis = 3_600_000;

/// Which quota a creation ran into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quota {
    Live { limit: u32 },
    PerHour { limit: u32, actor: String },
}

/// Why a named gate could not be created or retired.
#[derive(Debug, thiserror::Error)]
pub enum NamedError {
    #[error("{key} is not a named gate: write /gates/<kind>/named/<name>")]
    NotNamed { key: GateKey },
    #[error("{key} was created at {} with another {}: retire it first, or choose another name", crate::gate::state::rfc3339(*created_at), fields.join(", "))]
    Conflict {
        key: GateKey,
        created_at: Millis,
        fields: Vec<&'static str>,
    },
    #[error("{key} was retired at {}: choose another name", crate::gate::state::rfc3339(*at))]
    Retired { key: GateKey, at: Millis },
    #[error("{key} was never created")]
    NotFound { key: GateKey },
    #[error("{}", quota_message(quota, *retry_after))]
    Quota {
        quota: Quota,
        /// When a creation may succeed again, at the earliest.
        retry_after: Duration,
    },
}

fn quota_message(quota: &Quota, retry_after: Duration) -> String {
    match quota {
        Quota::Live { limit } => format!(
            "{limit} named gates are live, the most this server keeps ([limits] named_gates_live = {limit}): retire one (DELETE /api/v1/gates/<kind>/named/<name>) before creating another"
        ),
        Quota::PerHour { limit, actor } => format!(
            "{actor} created {limit} named gates in the last hour, the most one token may ([limits] named_gates_per_hour = {limit}): try again in {}s",
            retry_after.as_secs()
        ),
    }
}

/// Refused past a quota; Ok with nothing to say otherwise.
async fn check_quota(
    unit: &mut Unit<'_>,
    limits: &NamedLimits,
    actor: &str,
) -> Result<(), CommandError> {
    let now = unit.now();
    let counts = crate::store::NamedGates::named_counts(unit.tx(), actor, now - HOUR_MS).await?;
    if counts.live >= i64::from(limits.live) {
        return Err(NamedError::Quota {
            quota: Quota::Live { limit: limits.live },
            // Nothing frees a slot but a retirement: ask again in a minute.
            retry_after: Duration::from_secs(60),
        }
        .into());
    }
    if counts.created >= i64::from(limits.per_hour) {
        let frees_at = counts.oldest_created.unwrap_or(now) + HOUR_MS;
        // Whole seconds, rounded up: a Retry-After names seconds.
        let wait_ms = u64::try_from(frees_at - now).unwrap_or(0).max(1);
        return Err(NamedError::Quota {
            quota: Quota::PerHour {
                limit: limits.per_hour,
                actor: actor.to_string(),
            },
            retry_after: Duration::from_secs(wait_ms.div_ceil(1000)),
        }
        .into());
    }
    Ok(())
}

/// A named gate and its state.
#[derive(Debug, Clone)]
pub struct Named {
    pub named: NamedGate,
    pub gate: Gate,
    /// False when the same gate existed already.
    pub created: bool,
}

/// Retired gates pruned per housekeeping pass (every 5 s).
const PRUNE_BATCH: i64 = 100;

/// Creates a named gate and announces it, in `unit`; the same spec again
/// is the same gate, and costs no quota. A new gate past the server's
/// limits (`EngineSettings::named`) is refused.
pub(super) async fn create_in(
    unit: &mut Unit<'_>,
    key: &GateKey,
    spec: &NamedSpec,
    who: &Provenance,
) -> Result<Named, CommandError> {
    if !matches!(key.scope, Scope::Named(_)) || !key.kind.pinned() {
        return Err(NamedError::NotNamed { key: key.clone() }.into());
    }
    let engine = unit.engine();
    engine.store.named().lock_named_creations(unit.tx()).await?;
    if let Some(named) = crate::store::NamedGates::named_gate_in(unit.tx(), key).await? {
        return again(unit, named, spec).await;
    }
    check_quota(unit, &engine.settings.named, &who.actor.name).await?;
    let now = unit.now();
    let named = NamedGate {
        key: key.clone(),
        spec: spec.clone(),
        created_at: now,
        created_by: who.actor.name.clone(),
        retired_at: None,
        pruned_at: None,
    };
    crate::store::NamedGates::put_named_gate(unit.tx(), &named).await?;
    announce(unit, &named, who).await?;
    let gate = unit.gate(key).await?;
    tracing::info!(gate = %key, actor = %who.actor.name, "named gate created");
    Ok(Named {
        named,
        gate,
        created: true,
    })
}

/// A creation of a gate that exists: the same gate when the spec is the
/// same and it is not retired.
async fn again(
    unit: &mut Unit<'_>,
    named: NamedGate,
    spec: &NamedSpec,
) -> Result<Named, CommandError> {
    let key = named.key.clone();
    if let Some(at) = named.retired_at {
        return Err(NamedError::Retired { key, at }.into());
    }
    let fields = named.spec.differences(spec);
    if !fields.is_empty() {
        return Err(NamedError::Conflict {
            key,
            created_at: named.created_at,
            fields,
        }
        .into());
    }
    let gate = unit.gate(&key).await?;
    Ok(Named {
        named,
        gate,
        created: false,
    })
}

/// Audits the creation and starts the gate's announcement (a wait with no
/// canary), so that people hear of it before Flagger first asks.
async fn announce(
    unit: &mut Unit<'_>,
    named: &NamedGate,
    who: &Provenance,
) -> Result<(), StoreError> {
    let (key, now) = (&named.key, unit.now());
    let metadata = announcement_metadata(named);
    let text = serde_json::to_string(&metadata)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode metadata: {e}")))?;
    let mut notices = Vec::new();
    if let Some(wait_id) =
        crate::store::NamedGates::start_announcement(unit.tx(), key, &text, now, None).await?
    {
        notices.push(Notice::WaitStarted {
            wait_id,
            gate: key.clone(),
            canary: None,
            checksum: String::new(),
            phase: String::new(),
            reason: format!("waiting for approval of {}", key.subject()),
            metadata,
            at: now,
        });
    }
    unit.record(audit_entry(key, AuditAction::Create, who, now), &notices)
        .await
}

/// Retires a named gate, in `unit`: held (so that nobody approves it by
/// mistake; an unhold brings it back), and every wait at it ended. Retiring
/// it again is the same answer.
pub(super) async fn retire_in(
    unit: &mut Unit<'_>,
    key: &GateKey,
    who: &Provenance,
) -> Result<Named, CommandError> {
    if !matches!(key.scope, Scope::Named(_)) {
        return Err(NamedError::NotNamed { key: key.clone() }.into());
    }
    let Some(mut named) = crate::store::NamedGates::named_gate_in(unit.tx(), key).await? else {
        return Err(NamedError::NotFound { key: key.clone() }.into());
    };
    if named.retired_at.is_none() {
        named.retired_at = Some(unit.now());
        crate::store::NamedGates::put_named_gate(unit.tx(), &named).await?;
        let why = who
            .clone()
            .reason(Some(crate::gate::state::retirement_reason(
                who.reason.as_deref(),
            )));
        // Waits first: the hold would end the announcement as "held".
        end_waits(unit, key, "retired").await?;
        unit.hold(key, &why).await?;
        tracing::info!(gate = %key, actor = %who.actor.name, "named gate retired");
    }
    let gate = unit.gate(key).await?;
    Ok(Named {
        named,
        gate,
        created: false,
    })
}

impl<'e> NamedGates<'e> {
    /// Prunes the details of gates retired longer than `retention` ago, a
    /// batch at a time (see `Store::prune_retired_named`); how many it pruned.
    pub async fn prune_retired(self, retention: Duration) -> Result<usize, StoreError> {
        let now = self.engine.now();
        let keep = Millis::try_from(retention.as_millis()).unwrap_or(Millis::MAX);
        let pruned = self
            .engine
            .store
            .named()
            .prune_retired_named(now.saturating_sub(keep), now, PRUNE_BATCH)
            .await?;
        if !pruned.is_empty() {
            tracing::info!(
                gates = pruned.len(),
                "pruned the details of retired named gates"
            );
        }
        Ok(pruned.len())
    }

    /// The named gate, if `key` names one that was created.
    pub async fn find(self, key: &GateKey) -> Result<Option<NamedGate>, StoreError> {
        if !matches!(key.scope, Scope::Named(_)) {
            return Ok(None);
        }
        self.engine.store.named().named_gate(key).await
    }
}

/// Ends every wait at `key` and tells people; memory forgets the canaries'
/// waits once the unit commits (the announcement has none).
async fn end_waits(unit: &mut Unit<'_>, key: &GateKey, outcome: &str) -> Result<(), StoreError> {
    let now = unit.now();
    let ended = crate::store::NamedGates::end_waits_of_gate(unit.tx(), key, outcome, now).await?;
    let notices: Vec<Notice> = ended
        .iter()
        .map(|(wait_id, canary)| Notice::WaitEnded {
            wait_id: *wait_id,
            gate: key.clone(),
            canary: canary.clone(),
            outcome: outcome.to_string(),
            at: now,
        })
        .collect();
    unit.notify(&notices).await?;
    for canary in ended.into_iter().filter_map(|(_, c)| c) {
        unit.ended_wait(key, canary);
    }
    Ok(())
}

/// What the announcement carries to the sinks: the Slack channel, the PR
/// (`pr`, `repository`, as a canary's metadata names them), title and links.
fn announcement_metadata(named: &NamedGate) -> BTreeMap<String, String> {
    let spec = &named.spec;
    let mut m = BTreeMap::new();
    if let Some(title) = &spec.title {
        m.insert("title".into(), title.clone());
    }
    if !spec.links.is_empty() {
        if let Ok(links) = serde_json::to_string(&spec.links) {
            m.insert("links".into(), links);
        }
    }
    if let Some(channel) = &spec.slack_channel {
        m.insert("slack_channel".into(), channel.clone());
    }
    if let Some((repo, number)) = &spec.pr {
        m.insert("pr".into(), number.to_string());
        m.insert("repository".into(), repo.to_string());
    }
    m
}
