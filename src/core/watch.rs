//! Changes that open pages watch (the web UI's server-sent events): one
//! message per committed audit entry (a gate opened, closed, held; a wait
//! started). Sending costs next to nothing, with or without subscribers, and
//! never waits: a page that falls behind is told it lagged and reloads what it
//! shows, so no page can slow a gate check.

use serde::Serialize;
use tokio::sync::broadcast;

use super::Watch;
use crate::gate::Millis;
use crate::store::AuditEntry;

/// What changed, as a page needs it to decide whether to refresh.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    pub gate: String,
    pub action: &'static str,
    pub at: Millis,
}

/// The sender that bootstrap builds once; pages subscribe to it.
pub type Changes = broadcast::Sender<Changed>;

impl<'e> Watch<'e> {
    /// Publishes every later change to `changes` (set once, at start).
    pub fn publish_to(self, changes: Changes) {
        if self.engine.changes.set(changes).is_err() {
            tracing::warn!("changes are already published elsewhere");
        }
    }

    /// Called after a commit with its audit entries.
    pub(super) fn publish(self, audits: &[AuditEntry]) {
        let Some(changes) = self.engine.changes.get() else {
            return;
        };
        if changes.receiver_count() == 0 {
            return;
        }
        for entry in audits {
            // An error only means nobody listens at this moment.
            let _ = changes.send(Changed {
                gate: entry.gate.to_string(),
                action: entry.action.as_str(),
                at: entry.at,
            });
        }
    }
    /// The sender set by [`Watch::publish_to`], if any.
    pub fn changes(self) -> Option<Changes> {
        self.engine.changes.get().cloned()
    }
}
