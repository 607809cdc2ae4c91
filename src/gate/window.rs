//! Release windows: when a kind of gate may open (e.g. promote on weekdays
//! 08:00–16:00 in Europe/Berlin, never on the listed holidays). Pure; time
//! zones come from jiff's bundled tz database.

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::key::GateKind;
use super::state::Millis;

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
    },
}

impl WindowState {
    /// How long this answer holds.
    pub fn valid_until(&self) -> Millis {
        match self {
            Self::Unrestricted => Millis::MAX,
            Self::Open { until } => *until,
            Self::Closed { next, .. } => next.unwrap_or(Millis::MAX),
        }
    }
}

fn day_index(d: Weekday) -> usize {
    usize::from(d.to_monday_zero_offset() as u8)
}

/// How far ahead to look for the next window: a year covers any week
/// pattern and holiday list.
const LOOKAHEAD_DAYS: i32 = 366;

impl Window {
    fn allowed(&self, date: Date, holidays: &[Date]) -> bool {
        self.days[day_index(date.weekday())] && !holidays.contains(&date)
    }

    /// The instant `time` on `date` here; the earlier one of a repeated
    /// hour, the later one across a gap (jiff's "compatible" rule).
    fn instant(&self, date: Date, time: Time) -> Option<Millis> {
        let zdt = date
            .to_datetime(time)
            .to_zoned_datetime(self.tz.clone())
            .ok()?;
        Some(zdt.timestamp().as_millisecond())
    }

    /// Open now: until when. Closed: None.
    fn open_until(&self, now: Millis, holidays: &[Date]) -> Option<Millis> {
        let local = Timestamp::from_millisecond(now)
            .ok()?
            .to_zoned_datetime(self.tz.clone());
        let (date, time) = (local.date(), local.time());
        (self.allowed(date, holidays) && self.from <= time && time < self.to)
            .then(|| self.instant(date, self.to))
            .flatten()
    }

    /// The next opening after `now`.
    fn next_open(&self, now: Millis, holidays: &[Date]) -> Option<Millis> {
        let today = Timestamp::from_millisecond(now)
            .ok()?
            .to_zoned_datetime(self.tz.clone())
            .date();
        (0..LOOKAHEAD_DAYS)
            .filter_map(|d| today.checked_add(jiff::Span::new().days(d)).ok())
            .filter(|date| self.allowed(*date, holidays))
            .filter_map(|date| self.instant(date, self.from))
            .find(|at| *at > now)
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

impl Calendar {
    /// Whether a gate of `kind` may open at `now`.
    pub fn state(&self, kind: GateKind, now: Millis) -> WindowState {
        let windows: Vec<&Window> = self.windows.iter().filter(|w| w.kind == kind).collect();
        if windows.is_empty() {
            return WindowState::Unrestricted;
        }
        if let Some(until) = windows
            .iter()
            .filter_map(|w| w.open_until(now, &self.holidays))
            .max()
        {
            return WindowState::Open { until };
        }
        let next = windows
            .iter()
            .filter_map(|w| Some((w.next_open(now, &self.holidays)?, *w)))
            .min_by_key(|(at, _)| *at);
        let described: Vec<String> = windows.iter().map(|w| w.describe()).collect();
        let reason = match next {
            Some((at, w)) => {
                let when = Timestamp::from_millisecond(at)
                    .map(|t| {
                        t.to_zoned_datetime(w.tz.clone())
                            .strftime("%a %Y-%m-%d %H:%M %Z")
                            .to_string()
                    })
                    .unwrap_or_default();
                format!(
                    "outside the release window ({kind}: {}), next window opens {when}",
                    described.join("; ")
                )
            }
            None => format!(
                "outside the release window ({kind}: {}), and none opens within a year",
                described.join("; ")
            ),
        };
        WindowState::Closed {
            reason,
            next: next.map(|(at, _)| at),
        }
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
        let WindowState::Closed { reason, next } = c.state(GateKind::Promote, friday) else {
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
