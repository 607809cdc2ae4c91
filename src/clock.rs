//! Time as the rest of gatebot sees it, so tests can set it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::gate::{millis, Millis};

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

/// The database's clock as this replica keeps it (see `Store::clock_reading`).
/// On PostgreSQL every time that orders events across replicas (closes,
/// pushes, leases, heartbeats, expiries) is stamped by this clock, so a
/// replica whose own clock is wrong still stamps in the database's time.
///
/// Once measured, the time is the database's time at the last reading plus
/// what this process's monotonic clock has counted since: a step of the wall
/// clock (an operator's `date`, a VM resumed, NTP stepping) changes nothing,
/// rather than stamping wrong times until the next reading. Until measured,
/// and on SQLite (one process) or under a clock that a test sets, it is the
/// local clock.
pub struct CorrectedClock {
    local: SharedClock,
    /// Database time minus local wall time, as last measured (for reports).
    offset_ms: AtomicI64,
    /// Database time minus milliseconds since `started`; `UNMEASURED` before
    /// the first reading.
    steady_offset_ms: AtomicI64,
    started: Instant,
}

const UNMEASURED: Millis = Millis::MIN;

impl CorrectedClock {
    pub fn new(local: SharedClock) -> Arc<Self> {
        Arc::new(Self {
            local,
            offset_ms: AtomicI64::new(0),
            steady_offset_ms: AtomicI64::new(UNMEASURED),
            started: Instant::now(),
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

    /// Whether a reading was taken.
    pub fn measured(&self) -> bool {
        self.steady_offset_ms.load(Ordering::SeqCst) != UNMEASURED
    }

    /// Takes a reading: the database said `db_ms` at `at`, which was
    /// `offset_ms` ahead of the local wall clock.
    pub fn set_reading(&self, offset_ms: Millis, db_ms: Millis, at: Instant) {
        self.offset_ms.store(offset_ms, Ordering::SeqCst);
        let steady = millis(at.saturating_duration_since(self.started));
        self.steady_offset_ms
            .store(db_ms.saturating_sub(steady), Ordering::SeqCst);
    }

    /// Why this replica's clock is a problem: an offset beyond [`OFFSET_LIMIT`].
    pub fn skew_problem(&self) -> Option<String> {
        let offset = self.offset_ms();
        let limit = millis(OFFSET_LIMIT);
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
        match self.steady_offset_ms.load(Ordering::Relaxed) {
            UNMEASURED => self.local.now_ms().saturating_add(self.offset_ms()),
            steady => millis(self.started.elapsed()).saturating_add(steady),
        }
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

/// A clock moved by the offset written in a file, read at every call: how a
/// test steps a running replica's clock (`GATEBOT_TEST_CLOCK_OFFSET=file:…`),
/// as libfaketime does with its timestamp file. An unreadable file is no offset.
pub struct OffsetFileClock {
    base: SharedClock,
    path: std::path::PathBuf,
}

impl OffsetFileClock {
    pub fn new(base: SharedClock, path: std::path::PathBuf) -> Arc<Self> {
        Arc::new(Self { base, path })
    }
}

impl Clock for OffsetFileClock {
    fn now_ms(&self) -> Millis {
        let skew = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|text| parse_offset(&text).ok())
            .unwrap_or(0);
        self.base.now_ms().saturating_add(skew)
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
        .map(|d| sign * millis(d))
        .map_err(|e| format!("{text:?} is not an offset such as -90s: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrected_clock_is_the_database_time_and_says_when_it_is_too_far() {
        let manual = ManualClock::new(1_000_000);
        let clock = CorrectedClock::new(manual.clone());
        assert_eq!(clock.now_ms(), 1_000_000, "the local time until measured");
        clock.set_reading(90_000, 1_090_000, Instant::now());
        let now = clock.now_ms();
        assert!((1_090_000..1_091_000).contains(&now), "{now}");
        assert_eq!(clock.local().now_ms(), 1_000_000);
        let why = clock.skew_problem().expect("90 s is too far");
        assert!(why.contains("90.0 s behind"), "{why}");
        clock.set_reading(-2_500, 997_500, Instant::now());
        assert!(clock.skew_problem().unwrap().contains("2.5 s ahead of"));
        clock.set_reading(2_000, 1_002_000, Instant::now());
        assert_eq!(clock.skew_problem(), None, "2 s is within the limit");
    }

    #[test]
    fn a_step_of_the_wall_clock_does_not_move_a_measured_clock() {
        let manual = ManualClock::new(1_000_000);
        let clock = CorrectedClock::new(manual.clone());
        clock.set_reading(0, 1_000_000, Instant::now());
        manual.advance(-120_000);
        let now = clock.now_ms();
        assert!((1_000_000..1_001_000).contains(&now), "{now}");
        manual.advance(240_000);
        let now = clock.now_ms();
        assert!((1_000_000..1_001_000).contains(&now), "{now}");
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
