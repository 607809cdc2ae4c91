//! When a wait's deadline falls and when its next reminder is due. Pure.
//! Both are worked out when the wait starts and stored with it, so that
//! housekeeping reads only the waits that are due, however many others wait.

use std::collections::BTreeMap;
use std::time::Duration;

use super::change::{millis, Millis};
use super::deadline::{deadline_for, deadline_without_canary, Deadline, DeadlineRule};
use super::key::{CanaryRef, GateKind, Scope};

/// The policy's rules for how long waits last and when people are reminded.
#[derive(Debug, Clone, Default)]
pub struct WaitTimers {
    pub deadlines: Vec<DeadlineRule>,
    /// Deadlines from the hook metadata of checks that carry no Flagger
    /// token are believed too (`[deadline_metadata] allow = true`): anyone
    /// who can reach the port could then set one for the canary they name.
    pub metadata_deadlines: bool,
    /// Ascending; empty: no reminders.
    pub reminders: Vec<Duration>,
    pub reminder_kinds: Vec<GateKind>,
}

/// What a wait's timers depend on.
#[derive(Debug, Clone, Copy)]
pub struct WaitFacts<'a> {
    pub kind: GateKind,
    pub scope: &'a Scope,
    pub canary: &'a CanaryRef,
    pub metadata: &'a BTreeMap<String, String>,
    pub started_at: Millis,
    /// The check that started it carried a valid Flagger token.
    pub authenticated: bool,
}

impl WaitTimers {
    /// The deadline of the wait. Its metadata counts only when the check
    /// that started it was authenticated, or the policy allows it: metadata
    /// is the caller's word, and a deadline can roll a canary back.
    pub fn deadline(&self, wait: &WaitFacts<'_>) -> Result<Option<Deadline>, String> {
        let unheard = BTreeMap::new();
        let metadata = if wait.authenticated || self.metadata_deadlines {
            wait.metadata
        } else {
            &unheard
        };
        deadline_for(
            &self.deadlines,
            wait.kind,
            wait.scope,
            wait.canary,
            metadata,
        )
    }

    /// When the wait's deadline falls. A deadline that can't be read is due
    /// at once, so that housekeeping says why and marks it.
    pub fn due_at(&self, wait: &WaitFacts<'_>) -> Option<Millis> {
        match self.deadline(wait) {
            Ok(Some(d)) => Some(wait.started_at.saturating_add(millis(d.after))),
            Ok(None) => None,
            Err(_) => Some(wait.started_at),
        }
    }

    /// When the deadline of a wait no canary made falls (a deployment
    /// waiting for a PR's gate): by the rules that name no canary.
    pub fn due_without_canary(
        &self,
        kind: GateKind,
        scope: &Scope,
        started_at: Millis,
    ) -> Option<Millis> {
        let d = deadline_without_canary(&self.deadlines, kind, scope)?;
        Some(started_at.saturating_add(millis(d.after)))
    }

    /// When the wait's next reminder is due, `sent` of them having been sent.
    pub fn remind_at(&self, kind: GateKind, started_at: Millis, sent: usize) -> Option<Millis> {
        if !self.reminder_kinds.contains(&kind) {
            return None;
        }
        let point = self.reminders.get(sent)?;
        Some(started_at.saturating_add(millis(*point)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::deadline::OnDeadline;

    fn timers(metadata_deadlines: bool) -> WaitTimers {
        WaitTimers {
            deadlines: vec![DeadlineRule {
                kind: GateKind::Promote,
                repository: None,
                namespace: Some("prod".into()),
                canary: None,
                deadline: Deadline {
                    after: Duration::from_secs(3600),
                    action: OnDeadline::Rollback,
                },
            }],
            metadata_deadlines,
            reminders: vec![Duration::from_secs(60), Duration::from_secs(600)],
            reminder_kinds: vec![GateKind::Promote],
        }
    }

    /// Metadata is the caller's word: without a Flagger token (or the
    /// policy's leave) its deadline is not heard.
    #[test]
    fn a_metadata_deadline_counts_only_when_authenticated_or_allowed() {
        let scope = Scope::Namespace(crate::gate::Namespace::new("test").unwrap());
        let canary = CanaryRef::new("test", "evil").unwrap();
        let metadata = BTreeMap::from([("deadline".to_string(), "1s".to_string())]);
        let facts = |authenticated| WaitFacts {
            kind: GateKind::Promote,
            scope: &scope,
            canary: &canary,
            metadata: &metadata,
            started_at: 1000,
            authenticated,
        };
        assert_eq!(timers(false).due_at(&facts(false)), None);
        assert_eq!(timers(false).due_at(&facts(true)), Some(2000));
        assert_eq!(timers(true).due_at(&facts(false)), Some(2000));
        let prod = CanaryRef::new("prod", "podinfo").unwrap();
        let ruled = WaitFacts {
            canary: &prod,
            ..facts(false)
        };
        assert_eq!(timers(false).due_at(&ruled), Some(1000 + 3_600_000));
    }

    #[test]
    fn reminders_fall_at_the_next_point_of_their_kinds() {
        let t = timers(false);
        assert_eq!(t.remind_at(GateKind::Promote, 0, 0), Some(60_000));
        assert_eq!(t.remind_at(GateKind::Promote, 0, 1), Some(600_000));
        assert_eq!(t.remind_at(GateKind::Promote, 0, 2), None);
        assert_eq!(t.remind_at(GateKind::Start, 0, 0), None);
    }
}
