//! Release windows: when a kind of gate may open (e.g. promote on weekdays
//! 08:00–16:00 in Europe/Berlin, never on the listed holidays). Pure; time
//! zones come from jiff's bundled tz database.
//!
//! The rule: a window is open at an instant when that instant's local date
//! (in the window's zone) is one of its days and not a holiday, and its local
//! wall-clock time is in `[from, to)`. Local times a gap skips never occur,
//! so a window wholly inside a gap does not open that day; local times a fold
//! repeats occur twice, and are inside the window both times. Every answer,
//! and the instant until which it holds, is a function of the calendar and
//! the instant alone, so a process that keeps an answer until then agrees
//! with one that computes it afresh.

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

use super::change::Millis;
use super::key::GateKind;

/// One window of one kind of gate.
#[derive(Debug, Clone)]
pub struct Window {
    pub kind: GateKind,
    /// Monday first.
    pub days: [bool; 7],
    pub from: Time,
    pub to: Time,
    pub tz: TimeZone,
    /// As written in the policy, for the reason line: "Europe/Berlin".
    pub tz_name: String,
}

/// Every window and the holidays (dates on which no window opens, in each
/// window's own time zone).
#[derive(Debug, Clone, Default)]
pub struct Calendar {
    pub windows: Vec<Window>,
    pub holidays: Vec<Date>,
}

/// What the calendar says about a kind of gate at one moment, and until when
/// that holds (so the check can keep the answer until then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowState {
    /// No window restricts this kind.
    Unrestricted,
    Open {
        until: Millis,
    },
    /// Closed; the reason says when the next window opens (if one does
    /// within a year).
    Closed {
        reason: String,
        next: Option<Millis>,
        /// When this answer is next due a fresh look: the opening, or, with
        /// none within a year, when one may come into that year's view.
        until: Millis,
    },
}

impl WindowState {
    /// How long this answer holds.
    pub fn valid_until(&self) -> Millis {
        match self {
            Self::Unrestricted => Millis::MAX,
            Self::Open { until } | Self::Closed { until, .. } => *until,
        }
    }
}

fn day_index(d: Weekday) -> usize {
    usize::from(d.to_monday_zero_offset() as u8)
}

const DAY_MS: Millis = 86_400_000;

/// How far ahead to look for the next change: a year covers any week
/// pattern and holiday list.
const LOOKAHEAD: Millis = 366 * DAY_MS;

/// The first stretch searched for the next change; each further one doubles.
const FIRST_SPAN: Millis = 8 * DAY_MS;

fn local(tz: &TimeZone, at: Millis) -> Option<jiff::ZonedDateTime> {
    Some(
        Timestamp::from_millisecond(at)
            .ok()?
            .to_zoned_datetime(tz.clone()),
    )
}

/// Every instant whose local time in `tz` is `dt`: one, two in a fold, none
/// in a gap.
fn instants_of(tz: &TimeZone, dt: DateTime) -> Vec<Millis> {
    let offsets = match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => vec![offset],
        AmbiguousOffset::Fold { before, after } => vec![before, after],
        AmbiguousOffset::Gap { .. } => Vec::new(),
    };
    offsets
        .into_iter()
        .filter_map(|o| o.to_timestamp(dt).ok())
        .map(|t| t.as_millisecond())
        .collect()
}

impl Window {
    fn allowed(&self, date: Date, holidays: &[Date]) -> bool {
        self.days[day_index(date.weekday())] && !holidays.contains(&date)
    }

    /// The rule itself, on the instant's local date and wall-clock time.
    pub fn open_at(&self, at: Millis, holidays: &[Date]) -> bool {
        local(&self.tz, at).is_some_and(|l| {
            self.allowed(l.date(), holidays) && self.from <= l.time() && l.time() < self.to
        })
    }

    /// The instants in `(lo, hi]` at which `open_at` can change: where the
    /// local time reaches midnight, `from` or `to`, and the zone's
    /// transitions (a gap jumps past those times instead of reaching them).
    fn edges(&self, lo: Millis, hi: Millis, out: &mut Vec<Millis>) {
        let (Some(first), Some(last)) = (local(&self.tz, lo), local(&self.tz, hi)) else {
            return;
        };
        let (mut date, last) = (
            first.date().yesterday().unwrap_or(first.date()),
            last.date(),
        );
        while date <= last.tomorrow().unwrap_or(last) {
            for time in [Time::midnight(), self.from, self.to] {
                out.extend(instants_of(&self.tz, date.to_datetime(time)));
            }
            match date.tomorrow() {
                Ok(next) => date = next,
                Err(_) => break,
            }
        }
        if let Ok(start) = Timestamp::from_millisecond(lo) {
            out.extend(
                self.tz
                    .following(start)
                    .map(|t| t.timestamp().as_millisecond())
                    .take_while(|at| *at <= hi),
            );
        }
        out.retain(|at| lo < *at && *at <= hi);
    }

    /// `Mon–Fri 08:00–16:00 Europe/Berlin`.
    fn describe(&self) -> String {
        const NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let days: Vec<&str> = NAMES
            .iter()
            .zip(self.days)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect();
        let days = match days.as_slice() {
            ["Mon", "Tue", "Wed", "Thu", "Fri"] => "Mon–Fri".to_string(),
            [_, _, _, _, _, _, _] => "every day".to_string(),
            other => other.join(", "),
        };
        format!(
            "{days} {}–{} {}",
            self.from.strftime("%H:%M"),
            self.to.strftime("%H:%M"),
            self.tz_name
        )
    }
}

/// The next change after an instant, if one comes within `LOOKAHEAD`; else
/// until when a fresh search would still find none.
enum Next {
    At(Millis),
    NoneUntil(Millis),
}

impl Calendar {
    fn of(&self, kind: GateKind) -> Vec<&Window> {
        self.windows.iter().filter(|w| w.kind == kind).collect()
    }

    /// The rule for a kind: open when any of its windows is.
    pub fn open_at(&self, kind: GateKind, at: Millis) -> bool {
        self.of(kind).iter().any(|w| w.open_at(at, &self.holidays))
    }

    /// The first instant after `now` at which the answer differs from the
    /// one at `now`. The answer is constant between edges, so the first edge
    /// where it differs is that instant.
    fn next_change(&self, windows: &[&Window], now: Millis) -> Next {
        let open = |at: Millis| windows.iter().any(|w| w.open_at(at, &self.holidays));
        let was = open(now);
        let (end, mut lo, mut span) = (now.saturating_add(LOOKAHEAD), now, FIRST_SPAN);
        let mut edges = Vec::new();
        while lo < end.saturating_add(DAY_MS) {
            let hi = lo.saturating_add(span);
            edges.clear();
            for w in windows {
                w.edges(lo, hi, &mut edges);
            }
            edges.sort_unstable();
            edges.dedup();
            if let Some(at) = edges.iter().copied().find(|at| open(*at) != was) {
                return if at <= end {
                    Next::At(at)
                } else {
                    // Searched from a later instant, this change is in view
                    // from `at - LOOKAHEAD` on.
                    Next::NoneUntil(at - LOOKAHEAD)
                };
            }
            (lo, span) = (hi, span.saturating_mul(2));
        }
        Next::NoneUntil(lo - LOOKAHEAD + 1)
    }

    /// Whether a gate of `kind` may open at `now`, and until when that holds.
    pub fn state(&self, kind: GateKind, now: Millis) -> WindowState {
        let windows = self.of(kind);
        if windows.is_empty() {
            return WindowState::Unrestricted;
        }
        let next = self.next_change(&windows, now);
        if windows.iter().any(|w| w.open_at(now, &self.holidays)) {
            let until = match next {
                Next::At(at) | Next::NoneUntil(at) => at,
            };
            return WindowState::Open { until };
        }
        let described: Vec<String> = windows.iter().map(|w| w.describe()).collect();
        let described = described.join("; ");
        match next {
            Next::At(at) => WindowState::Closed {
                reason: format!(
                    "outside the release window ({kind}: {described}), next window opens {}",
                    self.opening_text(&windows, at)
                ),
                next: Some(at),
                until: at,
            },
            Next::NoneUntil(until) => WindowState::Closed {
                reason: format!(
                    "outside the release window ({kind}: {described}), and none opens within a year"
                ),
                next: None,
                until,
            },
        }
    }

    /// The opening instant in the local time of a window that opens then:
    /// an instant that comes, so a local time that exists.
    fn opening_text(&self, windows: &[&Window], at: Millis) -> String {
        windows
            .iter()
            .find(|w| w.open_at(at, &self.holidays))
            .and_then(|w| local(&w.tz, at))
            .map(|l| l.strftime("%a %Y-%m-%d %H:%M %Z").to_string())
            .unwrap_or_else(|| format!("at {at} ms"))
    }

    /// When an approval given now can first be used: now inside a window (or
    /// without one), else the next opening. An approval's time to live counts
    /// from then, so that one given on Friday evening promotes on Monday.
    pub fn usable_from(&self, kind: GateKind, now: Millis) -> Millis {
        match self.state(kind, now) {
            WindowState::Closed { next: Some(at), .. } => at,
            _ => now,
        }
    }
}

/// A calendar's answers per kind, each kept until it changes. Every answer
/// comes with the instant it holds until, so what this gives back is what a
/// fresh `Calendar::state` gives at the same instant.
#[derive(Debug, Default)]
pub struct WindowCache {
    kept: std::collections::HashMap<GateKind, (Millis, WindowState)>,
}

impl WindowCache {
    pub fn state(&mut self, calendar: &Calendar, kind: GateKind, now: Millis) -> WindowState {
        if let Some((since, state)) = self.kept.get(&kind) {
            // A clock set back is a fresh look too.
            if *since <= now && now < state.valid_until() {
                return state.clone();
            }
        }
        let state = calendar.state(kind, now);
        self.kept.insert(kind, (now, state.clone()));
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berlin_weekdays() -> Calendar {
        Calendar {
            windows: vec![Window {
                kind: GateKind::Promote,
                days: [true, true, true, true, true, false, false],
                from: "08:00".parse().unwrap(),
                to: "16:00".parse().unwrap(),
                tz: TimeZone::get("Europe/Berlin").unwrap(),
                tz_name: "Europe/Berlin".into(),
            }],
            holidays: vec!["2026-12-07".parse().unwrap()],
        }
    }

    fn at(text: &str) -> Millis {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn open_inside_closed_outside_and_says_when_it_opens() {
        let c = berlin_weekdays();
        // Thursday 2026-12-03 09:00 in Berlin (CET, UTC+1).
        assert_eq!(
            c.state(GateKind::Promote, at("2026-12-03T08:00:00Z")),
            WindowState::Open {
                until: at("2026-12-03T15:00:00Z")
            }
        );
        assert_eq!(
            c.state(GateKind::Start, at("2026-12-05T12:00:00Z")),
            WindowState::Unrestricted
        );
        // Friday evening: Saturday and Sunday are out, Monday the 7th is a holiday.
        let friday = at("2026-12-04T17:30:00Z");
        let WindowState::Closed { reason, next, .. } = c.state(GateKind::Promote, friday) else {
            panic!("closed on Friday evening");
        };
        assert_eq!(next, Some(at("2026-12-08T07:00:00Z")));
        assert_eq!(
            reason,
            "outside the release window (promote: Mon–Fri 08:00–16:00 Europe/Berlin), next window opens Tue 2026-12-08 08:00 CET"
        );
        assert_eq!(
            c.usable_from(GateKind::Promote, friday),
            at("2026-12-08T07:00:00Z")
        );
        assert_eq!(c.usable_from(GateKind::Start, friday), friday);
    }

    #[test]
    fn the_window_follows_summer_time() {
        let c = berlin_weekdays();
        // 2026-03-30 is the Monday after the switch to CEST (UTC+2): 08:00 is 06:00Z.
        assert!(matches!(
            c.state(GateKind::Promote, at("2026-03-30T06:00:00Z")),
            WindowState::Open { .. }
        ));
        assert!(matches!(
            c.state(GateKind::Promote, at("2026-03-30T05:59:59Z")),
            WindowState::Closed { .. }
        ));
    }
}
