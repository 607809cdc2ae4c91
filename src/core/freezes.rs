//! What holds a gate closed whatever was approved: change freezes, kept in
//! memory for the check (a flag makes the usual case, no freeze, one atomic
//! load), written in one unit with their announcement, and re-read by the
//! housekeeping pass so that replicas see each other's; and release windows,
//! whose answer per gate kind is kept until it changes.

use std::sync::atomic::Ordering;

use super::unit::Unit;
use super::*;
use crate::gate::freeze::{frozen, Freeze, FreezeScope};
use crate::gate::window::WindowState;

impl<'e> Freezes<'e> {
    /// `verdict`, unless a freeze holds the gate: then closed, with the
    /// freeze's reason, and nothing pinned (an expiry is still recorded).
    pub(super) fn unless_frozen(
        self,
        key: &GateKey,
        canary: Option<&CanaryRef>,
        now: Millis,
        verdict: Verdict,
    ) -> Verdict {
        // Break glass: opened past freezes and windows on purpose, loudly.
        if verdict.forced {
            return verdict;
        }
        let held = |reason: String| Verdict {
            expired: verdict.expired,
            ..Verdict::closed(reason)
        };
        if self.engine.any_freeze.load(Ordering::Acquire) {
            let freezes = self.engine.freezes.read().expect("freezes poisoned");
            if let Some(f) = frozen(&freezes, key, canary, now) {
                return held(f.reason_line());
            }
        }
        if self.engine.settings.calendar.windows.is_empty() {
            return verdict;
        }
        match self.window(key.kind, now) {
            WindowState::Closed { reason, .. } => held(reason),
            _ => verdict,
        }
    }

    /// The calendar's answer for `kind`, computed once per change of it.
    fn window(self, kind: GateKind, now: Millis) -> WindowState {
        self.engine.windows.lock().expect("windows poisoned").state(
            &self.engine.settings.calendar,
            kind,
            now,
        )
    }

    /// The freezes in force, oldest first.
    pub fn in_force(self) -> Vec<Freeze> {
        let now = self.engine.now();
        let freezes = self.engine.freezes.read().expect("freezes poisoned");
        freezes.iter().filter(|f| f.active(now)).cloned().collect()
    }

    /// Re-reads the freezes in force (another replica may have changed them).
    pub async fn reload_freezes(self) -> Result<(), StoreError> {
        let active = self
            .engine
            .store
            .freezes()
            .active_freezes(self.engine.now())
            .await?;
        self.set_freezes(active);
        Ok(())
    }

    pub(super) fn set_freezes(self, active: Vec<Freeze>) {
        let mut freezes = self.engine.freezes.write().expect("freezes poisoned");
        self.engine
            .any_freeze
            .store(!active.is_empty(), Ordering::Release);
        *freezes = active;
    }
}

/// Freezes `scope` (until `until`, or until lifted) in `unit`, announced in
/// it; a `delivery` that froze already gives back its freeze. The caller
/// re-reads the freezes ([`Freezes::reload_freezes`]) once it commits.
pub async fn freeze_in(
    unit: &mut Unit<'_>,
    scope: FreezeScope,
    until: Option<Millis>,
    reason: &str,
    who: &Actor,
    delivery: Option<&str>,
) -> Result<Freeze, CommandError> {
    let now = unit.now();
    let inserted =
        crate::store::Freezes::insert_freeze(unit.tx(), &scope, reason, who, now, until, delivery)
            .await?;
    let Some(id) = inserted else {
        let done = match delivery {
            Some(d) => crate::store::Freezes::freeze_of_delivery(unit.tx(), d).await?,
            None => None,
        };
        return done.ok_or_else(|| {
            CommandError::Store(StoreError::Corrupt("a freeze was not stored".into()))
        });
    };
    let freeze = Freeze {
        id,
        scope,
        reason: reason.to_string(),
        by: who.clone(),
        at: now,
        until,
    };
    unit.notify(&[Notice::Frozen {
        id,
        scope: freeze.scope.to_string(),
        line: freeze.reason_line(),
        at: now,
    }])
    .await?;
    tracing::info!(scope = %freeze.scope, actor = %who.name, source = %who.source, "frozen");
    Ok(freeze)
}

/// Lifts the freezes of `scope` in `unit`; returns them (none: nothing was frozen there).
pub async fn unfreeze_in(
    unit: &mut Unit<'_>,
    scope: &FreezeScope,
    who: &Actor,
) -> Result<Vec<Freeze>, CommandError> {
    let now = unit.now();
    let lifted = crate::store::Freezes::lift_freezes(unit.tx(), scope, who, now).await?;
    if !lifted.is_empty() {
        unit.notify(&[Notice::Unfrozen {
            ids: lifted.iter().map(|f| f.id).collect(),
            scope: scope.to_string(),
            by: who.clone(),
            at: now,
        }])
        .await?;
        tracing::info!(scope = %scope, actor = %who.name, source = %who.source, "unfrozen");
    }
    Ok(lifted)
}
