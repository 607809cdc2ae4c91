//! Time as the rest of gatebot sees it, so tests can set it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::gate::Millis;

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;

    fn now_secs(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

pub type SharedClock = Arc<dyn Clock>;

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Millis)
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(ms: Millis) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(ms)))
    }

    pub fn set(&self, ms: Millis) {
        self.0.store(ms, Ordering::SeqCst);
    }

    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// Beyond this offset to the database's clock a replica says so: a warning
/// in the log, `/readyz` failing, the `GatebotClockSkew` alert. Times stay
/// corrected, but a clock this wrong is a fault to fix (NTP), and the other
/// clocks gatebot meets (GitHub's, Slack's) are not corrected.
pub const OFFSET_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The local clock plus its measured offset to the database's clock (see
/// `Store::clock_reading`). On PostgreSQL every time that orders events across
/// replicas (closes, pushes, leases, heartbeats, expiries) is stamped by this
/// clock, so a replica whose own clock is wrong still stamps in the database's
/// time. The offset is 0 until measured, and stays 0 on SQLite (one process)
/// and under a clock that a test sets.
pub struct CorrectedClock {
    local: SharedClock,
    offset_ms: AtomicI64,
}

impl CorrectedClock {
    pub fn new(local: SharedClock) -> Arc<Self> {
        Arc::new(Self {
            local,
            offset_ms: AtomicI64::new(0),
        })
    }

    /// The uncorrected local time, for measuring the offset.
    pub fn local(&self) -> &dyn Clock {
        self.local.as_ref()
    }

    /// Database time minus local time, as last measured.
    pub fn offset_ms(&self) -> Millis {
        self.offset_ms.load(Ordering::SeqCst)
    }

    pub fn set_offset(&self, ms: Millis) {
        self.offset_ms.store(ms, Ordering::SeqCst);
    }

    /// Why this replica's clock is a problem: an offset beyond [`OFFSET_LIMIT`].
    pub fn skew_problem(&self) -> Option<String> {
        let offset = self.offset_ms();
        let limit = millis_of(OFFSET_LIMIT);
        (offset.abs() > limit).then(|| {
            let way = if offset > 0 { "behind" } else { "ahead of" };
            format!(
                "this replica's clock is {:.1} s {way} the database's (limit {} s): \
                 times are corrected, but set its clock right (NTP)",
                offset.abs() as f64 / 1000.0,
                limit / 1000
            )
        })
    }
}

impl Clock for CorrectedClock {
    fn now_ms(&self) -> Millis {
        self.local.now_ms().saturating_add(self.offset_ms())
    }
}

/// A clock a fixed amount away from another: how tests run a replica whose
/// clock is wrong (`GATEBOT_TEST_CLOCK_OFFSET`).
pub struct SkewedClock {
    base: SharedClock,
    skew_ms: Millis,
}

impl SkewedClock {
    pub fn new(base: SharedClock, skew_ms: Millis) -> Arc<Self> {
        Arc::new(Self { base, skew_ms })
    }
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> Millis {
        self.base.now_ms().saturating_add(self.skew_ms)
    }
}

/// A signed duration such as `-90s`, `+1m30s` or `250ms`, in milliseconds.
pub fn parse_offset(text: &str) -> Result<Millis, String> {
    let text = text.trim();
    let (sign, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    humantime::parse_duration(magnitude.trim())
        .map(|d| sign * millis_of(d))
        .map_err(|e| format!("{text:?} is not an offset such as -90s: {e}"))
}

fn millis_of(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrected_clock_adds_the_offset_and_says_when_it_is_too_far() {
        let manual = ManualClock::new(1_000_000);
        let clock = CorrectedClock::new(manual.clone());
        assert_eq!(clock.now_ms(), 1_000_000);
        clock.set_offset(90_000);
        assert_eq!(clock.now_ms(), 1_090_000);
        assert_eq!(clock.local().now_ms(), 1_000_000);
        let why = clock.skew_problem().expect("90 s is too far");
        assert!(why.contains("90.0 s behind"), "{why}");
        clock.set_offset(-2_500);
        assert!(clock.skew_problem().unwrap().contains("2.5 s ahead of"));
        clock.set_offset(2_000);
        assert_eq!(clock.skew_problem(), None, "2 s is within the limit");
    }

    #[test]
    fn offsets_parse_with_a_sign() {
        assert_eq!(parse_offset("-90s"), Ok(-90_000));
        assert_eq!(parse_offset("+1m30s"), Ok(90_000));
        assert_eq!(parse_offset(" 250ms "), Ok(250));
        assert!(parse_offset("soon").is_err());
    }

    #[test]
    fn a_skewed_clock_is_its_base_moved() {
        let manual = ManualClock::new(100_000);
        let skewed = SkewedClock::new(manual.clone(), -90_000);
        assert_eq!(skewed.now_ms(), 10_000);
        manual.advance(5);
        assert_eq!(skewed.now_ms(), 10_005);
    }
}
