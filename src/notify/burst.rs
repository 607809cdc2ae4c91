//! New waits are announced at a bounded rate. Anyone who can reach the gate URLs
//! can start waits (one per new URL or canary name), so past a limit of new waits
//! per minute for one Slack channel or one pull request, the rest of that minute's
//! waits are announced together, once, when the minute is over.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::gate::Millis;

/// The counting window: calendar minutes.
pub const WINDOW_MS: Millis = 60_000;

/// What to do with one new wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Announce it on its own.
    Announce,
    /// Over the limit: announce it with the others of the window [start, end).
    Digest { start: Millis, end: Millis },
}

/// Counts new waits per key (a channel, a PR) in the current window.
pub struct Burst {
    limit: u32,
    state: Mutex<Windows>,
}

#[derive(Default)]
struct Windows {
    /// The window the counts are for; older counts are dropped when it moves.
    start: Millis,
    counts: HashMap<String, u32>,
}

impl Burst {
    /// At most `limit` waits per key and minute are announced on their own.
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            state: Mutex::new(Windows::default()),
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Counts a new wait for `key` at `at`. Counting happens while the wait is
    /// being written; a write that then fails makes a digest come a little sooner.
    pub fn admit(&self, key: &str, at: Millis) -> Admit {
        let start = at.div_euclid(WINDOW_MS) * WINDOW_MS;
        let mut w = self.state.lock().expect("burst counts poisoned");
        if start > w.start {
            w.start = start;
            w.counts.clear();
        }
        // A wait stamped in an earlier window than the current one (clocks of
        // other replicas, a slow writer) counts in the current one.
        let start = w.start;
        let n = match w.counts.get_mut(key) {
            Some(n) => n,
            None => w.counts.entry(key.to_string()).or_insert(0),
        };
        *n = n.saturating_add(1);
        if *n <= self.limit {
            Admit::Announce
        } else {
            Admit::Digest {
                start,
                end: start + WINDOW_MS,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_714_572_120_000; // a minute's start

    #[test]
    fn past_the_limit_waits_go_to_the_minute_digest() {
        let b = Burst::new(2);
        assert_eq!(b.admit("#a", T0), Admit::Announce);
        assert_eq!(b.admit("#a", T0 + 10), Admit::Announce);
        let digest = Admit::Digest {
            start: T0,
            end: T0 + WINDOW_MS,
        };
        assert_eq!(b.admit("#a", T0 + 20), digest);
        assert_eq!(b.admit("#a", T0 + 59_999), digest);
        // Keys count apart.
        assert_eq!(b.admit("#b", T0 + 30), Admit::Announce);
        // The next minute starts afresh.
        assert_eq!(b.admit("#a", T0 + WINDOW_MS), Admit::Announce);
        assert_eq!(
            b.admit("#a", T0 + 1),
            Admit::Announce,
            "late waits count in the current minute"
        );
    }
}
