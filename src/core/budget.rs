//! One budget per cluster for the side effects a check can start (a wait, a
//! lookup, a query): a flood of made-up checks at one cluster's gates spends
//! that cluster's budget only, and another cluster's canaries go on as
//! before. The cluster is the gate's (its Flagger token's, or the one the
//! policy's environments admitted); a single-cluster install has one budget.
//!
//! Each cluster may draw [`PER_MINUTE`] side effects a minute (a fixed
//! window). A draw past it is refused and counted in
//! `gatebot_budget_refused_total{what, cluster}`; the check itself is
//! answered as it would be either way. At most [`CLUSTERS`] budgets are
//! kept: clusters come from configuration, and a draw for one more once
//! every budget is in use is refused.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::gate::{ClusterName, Millis};
use crate::metrics::BudgetLabels;

/// Side effects one cluster's checks may start per minute: far above what
/// a real fleet asks (a canary checks once per analysis interval), far below
/// what a flood would cost outside.
pub const PER_MINUTE: u32 = 6_000;

/// The window a budget refills in.
const WINDOW: Millis = 60_000;

/// The most clusters with a budget kept at once.
pub const CLUSTERS: usize = 64;

/// What each cluster has spent in its current window.
pub(crate) struct Budgets {
    spent: Mutex<HashMap<Option<ClusterName>, Spent>>,
    /// [`PER_MINUTE`], lowered only by tests (a flood of 6,000 checks is slow).
    per_minute: std::sync::atomic::AtomicU32,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            spent: Mutex::default(),
            per_minute: std::sync::atomic::AtomicU32::new(PER_MINUTE),
        }
    }
}

#[derive(Clone, Copy)]
struct Spent {
    since: Millis,
    drawn: u32,
}

impl Budgets {
    /// Draws up to `n` from `cluster`'s budget at `now`: how many were granted.
    fn draw(&self, cluster: Option<&ClusterName>, n: u32, now: Millis) -> u32 {
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        if !spent.contains_key(&cluster.cloned()) && spent.len() >= CLUSTERS {
            spent.retain(|_, s| now - s.since < WINDOW);
            if spent.len() >= CLUSTERS {
                return 0;
            }
        }
        let s = spent.entry(cluster.cloned()).or_insert(Spent {
            since: now,
            drawn: 0,
        });
        if now - s.since >= WINDOW {
            *s = Spent {
                since: now,
                drawn: 0,
            };
        }
        let most = self.per_minute.load(std::sync::atomic::Ordering::Relaxed);
        let granted = n.min(most.saturating_sub(s.drawn));
        s.drawn += granted;
        granted
    }
}

impl<'e> super::Budget<'e> {
    /// Draws `n` side effects of kind `what` from `cluster`'s budget: how
    /// many may go. The rest are counted refused.
    pub(crate) fn draw(self, what: &'static str, cluster: Option<&ClusterName>, n: usize) -> usize {
        let asked = u32::try_from(n).unwrap_or(u32::MAX);
        let granted = self.engine.budgets.draw(cluster, asked, self.engine.now());
        self.count_refused(what, cluster, (asked - granted) as usize);
        granted as usize
    }

    /// Lowers every cluster's budget to `per_minute` (tests: a flood past
    /// the real budget takes minutes to send).
    pub fn limit_budget(self, per_minute: u32) {
        self.engine
            .budgets
            .per_minute
            .store(per_minute, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether an unknown canary's Kubernetes lookup may go.
    pub(crate) fn draw_lookup(self, cluster: Option<&ClusterName>) -> bool {
        self.draw("lookup", cluster, 1) == 1
    }

    /// Counts `n` side effects of kind `what` refused at `cluster`.
    pub(crate) fn count_refused(self, what: &'static str, cluster: Option<&ClusterName>, n: usize) {
        if n > 0 {
            let cluster = cluster.map_or_else(String::new, |c| c.as_str().to_string());
            let refused = self
                .engine
                .metrics
                .budget_refused
                .get_or_create(&BudgetLabels { what, cluster });
            refused.inc_by(n as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str) -> ClusterName {
        name.parse().unwrap()
    }

    #[test]
    fn a_flood_in_one_cluster_spends_its_budget_only() {
        let budgets = Budgets::default();
        let (a, b) = (cluster("a"), cluster("b"));
        let mut granted = 0;
        for _ in 0..PER_MINUTE + 500 {
            granted += budgets.draw(Some(&a), 1, 1_000);
        }
        assert_eq!(granted, PER_MINUTE);
        assert_eq!(budgets.draw(Some(&a), 1, 2_000), 0);
        assert_eq!(budgets.draw(Some(&b), 1, 2_000), 1);
        assert_eq!(budgets.draw(None, 3, 2_000), 3);
        // A minute on, A may draw again.
        assert_eq!(budgets.draw(Some(&a), 1, 1_000 + WINDOW), 1);
    }

    #[test]
    fn budgets_kept_are_bounded() {
        let budgets = Budgets::default();
        for i in 0..CLUSTERS {
            assert_eq!(budgets.draw(Some(&cluster(&format!("c{i}"))), 1, 0), 1);
        }
        assert_eq!(budgets.draw(Some(&cluster("one-more")), 1, 10), 0);
        assert_eq!(budgets.spent.lock().unwrap().len(), CLUSTERS);
        // Once the others' windows have passed, their room is taken.
        assert_eq!(budgets.draw(Some(&cluster("one-more")), 1, WINDOW), 1);
    }
}
