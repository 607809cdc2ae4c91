//! One page of the gate list, read by key range so that a page costs the same
//! whatever the number of gates.

use std::collections::HashMap;

use serde::Serialize;

use super::read::summarise;
use super::{CanarySeen, Engine, GateSummary};
use crate::gate::{Gate, GateKey};
use crate::store::{Backend, StoreError};

/// Gates in key order, and the cursor of the next page (its last key) when
/// there may be more.
#[derive(Debug, Clone, Serialize)]
pub struct GatePage {
    pub gates: Vec<GateSummary>,
    pub next: Option<String>,
}

impl Engine {
    /// Up to `limit` gates after the key `after` (from the first when `None`),
    /// as [`Engine::list`] shows them.
    pub async fn page(&self, after: Option<&str>, limit: usize) -> Result<GatePage, StoreError> {
        let want = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut keys = self
            .store
            .gate_keys_after(after, want.saturating_add(1))
            .await?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
            return Ok(GatePage {
                gates: Vec::new(),
                next: None,
            });
        };
        let (first, last) = (first.to_string(), last.to_string());
        let mut stored: HashMap<GateKey, Gate> = match self.store.backend() {
            Backend::Sqlite => {
                let memory = self.memory();
                keys.iter()
                    .filter_map(|k| memory.gate(k).map(|g| (k.clone(), g)))
                    .collect()
            }
            Backend::Postgres => self
                .store
                .gates_between(&first, &last)
                .await?
                .into_iter()
                .map(|g| (g.key.clone(), g))
                .collect(),
        };
        let mut canaries: HashMap<GateKey, Vec<CanarySeen>> = HashMap::new();
        for (key, seen) in self.store.canaries_between(&first, &last).await? {
            canaries.entry(key).or_default().push(seen);
        }
        let memory = self.memory();
        let next = more.then_some(last);
        let gates = keys
            .iter()
            .map(|key| {
                let gate = stored
                    .remove(key)
                    .unwrap_or_else(|| Gate::closed(key.clone()));
                let mut at_gate = canaries.remove(key).unwrap_or_default();
                for c in &mut at_gate {
                    if let Some(at) = memory.last_seen(key, &c.canary) {
                        c.last_seen = c.last_seen.max(at);
                    }
                }
                summarise(gate, at_gate)
            })
            .collect();
        Ok(GatePage { gates, next })
    }
}
