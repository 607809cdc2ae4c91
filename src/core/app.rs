//! The state every channel's handlers share.

use std::ops::Deref;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::clock::{CorrectedClock, SharedClock};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::{policy, templates};

use super::Engine;

/// Everything a request handler may need.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

pub struct Shared {
    pub config: Config,
    pub store: Store,
    pub engine: Engine,
    /// The channels' own rows, and the stored reads their messages show.
    pub records: super::Records,
    pub metrics: Arc<Metrics>,
    pub clock: SharedClock,
    /// The same clock, with its offset to the database's (for readiness).
    pub clock_sync: Arc<CorrectedClock>,
    /// Nudges the inbox worker when a delivery is stored.
    pub inbox_wake: Arc<Notify>,
    /// Wakes those waiting for a delivery to be applied in this process (a
    /// Teams invoke's answer); another replica's work is seen by polling.
    pub delivery_applied: Arc<Notify>,
    pub templates: templates::Templates,
    /// Who may do what; read once at start.
    pub policy: policy::Policy,
    /// The waiting canaries' numbers (GATEBOT_PROMETHEUS_URL).
    pub evidence: Arc<crate::evidence::Evidence>,
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
