//! Tuning knobs: timeouts, attempts, intervals, quotas and retention. They
//! were settings of their own; they are read from the `[limits]` table of
//! the policy file (docs/operations.md, "Limits"), each with the default it
//! had, so that the settings left are what differs per deployment.
//!
//! ```toml
//! [limits]
//! outbox_lease = "2m"
//! max_connections = 1024
//! retention_audit = "0"      # keep the audit for ever
//! ```

use std::time::Duration;

use serde::Deserialize;

const DAY: u64 = 24 * 3600;

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Each limit once: its key, its type, its default and the range it must be
/// in. Makes the `Limits` struct, its defaults and the list the checks,
/// `check-config` and the docs' test read.
macro_rules! limits {
    ($($(#[doc = $doc:literal])+
       $key:ident: $ty:ty = $default:expr, $range:expr $(, zero: $zero:literal)?;)+) => {
        /// The `[limits]` table. A table sets only what it names; the rest keep
        /// their defaults.
        #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Limits {
            $($(#[doc = $doc])+ #[serde(deserialize_with = "Limit::read")] pub $key: $ty,)+
        }

        impl Default for Limits {
            fn default() -> Self {
                Self { $($key: $default,)+ }
            }
        }

        impl Limits {
            /// Every limit with its range, in the order the docs list them.
            fn entries(&self) -> Vec<Entry> {
                vec![$(Entry::new(stringify!($key), self.$key, $range, None $(.or(Some($zero)))?),)+]
            }
        }
    };
}

limits! {
    /// How long in-flight requests may finish after SIGTERM.
    shutdown_timeout: Duration = secs(20), Duration::ZERO..=secs(3600);
    /// First retry delay of a failed notification; doubles each attempt, capped at 10 minutes.
    outbox_backoff: Duration = secs(2), ms(10)..=secs(600);
    /// Attempts before a notification is given up.
    outbox_max_attempts: u32 = 12, 1..=100;
    /// How long a replica holds a notification it is sending; another takes it over after this.
    outbox_lease: Duration = secs(60), secs(1)..=secs(3600);
    /// A request head must arrive whole within this, or the connection is closed.
    header_read_timeout: Duration = secs(5), ms(100)..=secs(300);
    /// A keep-alive connection with no request for this long is closed.
    idle_timeout: Duration = secs(90), ms(100)..=secs(3600);
    /// Most connections open at once; lowered to fit under `ulimit -n`.
    max_connections: u32 = 512, 1..=65_536;
    /// A request body must arrive whole within this (408 otherwise).
    body_read_timeout: Duration = secs(10), ms(100)..=secs(300);
    /// A request not answered within this gets 503, or 403 on a gate check.
    request_timeout: Duration = secs(30), ms(100)..=secs(600);
    /// New waits announced one by one per minute, per Slack channel and pull request.
    notify_burst: u32 = 10, 1..=10_000;
    /// Most named gates not retired at once.
    named_gates_live: u32 = 500, 1..=100_000;
    /// Most named gates one token creates in an hour.
    named_gates_per_hour: u32 = 30, 1..=10_000;
    /// How long a retired named gate keeps its details.
    named_gate_retention: Duration = secs(30 * DAY), secs(3600)..=secs(3650 * DAY);
    /// The longest one Prometheus query may take.
    prometheus_timeout: Duration = secs(2), ms(10)..=secs(600);
    /// How often each waiting canary's numbers are read again.
    evidence_refresh: Duration = secs(30), ms(100)..=secs(DAY);
    /// How long a sign-in to the pages lasts.
    ui_session_ttl: Duration = secs(12 * 3600), secs(60)..=secs(30 * DAY);
    /// Done deliveries and notifications keep their payload this long.
    retention_payloads: Duration = secs(3 * DAY), secs(3600)..=secs(365 * DAY);
    /// Done deliveries and notifications, ids included, are kept this long.
    retention_deliveries: Duration = secs(30 * DAY), secs(DAY)..=secs(3650 * DAY);
    /// Flagger's events, canaries' last checks, ended waits and their messages.
    retention_history: Duration = secs(90 * DAY), secs(DAY)..=secs(3650 * DAY);
    /// Audit entries; 0 keeps them for ever.
    retention_audit: Duration = secs(365 * DAY), secs(DAY)..=secs(3650 * DAY),
        zero: "an audit log kept for ever";
    /// How often a retention pass runs.
    retention_interval: Duration = secs(600), secs(1)..=secs(DAY);
    /// How long after a failed cluster lookup it is tried again (doubling, up to 32 times).
    kubernetes_lookup_backoff: Duration = secs(10), ms(10)..=secs(DAY);
}

/// One limit as shown and checked: its key, its value and its range.
struct Entry {
    key: &'static str,
    value: Value,
    min: Value,
    max: Value,
    /// Zero is allowed too, and means this.
    zero: Option<&'static str>,
}

#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Value {
    Span(Duration),
    Count(u64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Span(d) => f.write_str(&short(*d)),
            Self::Count(n) => write!(f, "{n}"),
        }
    }
}

/// What a limit is: a span of time or a count.
trait Limit: Copy {
    fn value(self) -> Value;
    fn read<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

impl Limit for u32 {
    fn value(self) -> Value {
        Value::Count(self.into())
    }

    fn read<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u32::deserialize(d)
    }
}

impl Limit for Duration {
    fn value(self) -> Value {
        Value::Span(self)
    }

    /// A duration written as the settings wrote it (`"30s"`, `"2h"`, `"0"`).
    fn read<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration in quotes, e.g. \"30s\", \"2h\", \"30d\"")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
                humantime::parse_duration(text.trim()).map_err(|e| {
                    E::custom(format!(
                        "`{text}` is not a duration ({e}): write e.g. \"30s\", \"2h\", \"30d\""
                    ))
                })
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Duration, E> {
                match n {
                    0 => Ok(Duration::ZERO),
                    _ => Err(E::custom(format!(
                        "{n} has no unit: write it in quotes with one, e.g. \"{n}s\""
                    ))),
                }
            }
        }
        d.deserialize_any(Text)
    }
}

impl Entry {
    fn new<T: Limit>(
        key: &'static str,
        value: T,
        range: std::ops::RangeInclusive<T>,
        zero: Option<&'static str>,
    ) -> Entry {
        Entry {
            key,
            value: value.value(),
            min: range.start().value(),
            max: range.end().value(),
            zero,
        }
    }

    fn problem(&self) -> Option<String> {
        let zero =
            matches!(self.value, Value::Span(d) if d.is_zero()) || self.value == Value::Count(0);
        if (zero && self.zero.is_some()) || (self.min <= self.value && self.value <= self.max) {
            return None;
        }
        let or_zero = self
            .zero
            .map(|z| format!(", or 0 for {z}"))
            .unwrap_or_default();
        Some(format!(
            "[limits] {} must be from {} to {}{or_zero}, not {}",
            self.key, self.min, self.max, self.value
        ))
    }
}

impl Limits {
    /// Values gatebot cannot work with, each naming its key and range.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.entries().iter().filter_map(Entry::problem).collect();
        if self.retention_payloads > self.retention_deliveries {
            out.push(format!(
                "[limits] retention_payloads ({}) is longer than retention_deliveries ({}): a payload cannot outlive its delivery",
                short(self.retention_payloads),
                short(self.retention_deliveries)
            ));
        }
        out
    }

    /// Values that work but put something at risk, each with why.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        // Longer than any one GitHub or Slack call (5 s), or another replica
        // takes over a notification still being sent.
        if self.outbox_lease < secs(10) {
            out.push(format!(
                "[limits] outbox_lease = \"{}\": shorter than a GitHub or Slack call may take (5s), so a notification still being sent may be sent again by another replica; 60s is the default",
                short(self.outbox_lease)
            ));
        }
        out
    }

    /// The limits that differ from their defaults, as `key = value`.
    pub fn changed(&self) -> Vec<String> {
        let defaults = Self::default().entries();
        self.entries()
            .iter()
            .zip(defaults.iter())
            .filter(|(now, default)| now.value != default.value)
            .map(|(now, _)| format!("{} = {}", now.key, now.value))
            .collect()
    }

    /// Every key of the table, for the docs' test.
    pub fn keys() -> Vec<&'static str> {
        Self::default().entries().iter().map(|e| e.key).collect()
    }
}

/// A duration in its largest whole unit (`90s`, `30d`, `12h`, `250ms`).
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    match () {
        _ if d.is_zero() => "0s".to_string(),
        // Below a millisecond: said whole, so that a value just past a range's end shows why.
        _ if !d.subsec_nanos().is_multiple_of(1_000_000) => {
            humantime::format_duration(d).to_string()
        }
        _ if d.subsec_millis() != 0 || s == 0 => format!("{}ms", d.as_millis()),
        _ if s.is_multiple_of(DAY) => format!("{}d", s / DAY),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Limits, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn a_table_sets_only_what_it_names() {
        let limits =
            parse("outbox_lease = \"2m\"\nmax_connections = 1024\nretention_audit = 0\n").unwrap();
        assert_eq!(limits.outbox_lease, secs(120));
        assert_eq!(limits.max_connections, 1024);
        assert_eq!(limits.retention_audit, Duration::ZERO);
        assert_eq!(limits.idle_timeout, Limits::default().idle_timeout);
        assert!(limits.problems().is_empty(), "{:?}", limits.problems());
        let past = parse("shutdown_timeout = \"1h 1ns\"").unwrap();
        assert_eq!(
            past.problems(),
            ["[limits] shutdown_timeout must be from 0s to 1h, not 1h 1ns"]
        );
        assert_eq!(
            limits.changed(),
            [
                "outbox_lease = 2m",
                "max_connections = 1024",
                "retention_audit = 0s"
            ]
        );
    }

    #[test]
    fn the_defaults_are_in_range_and_unchanged() {
        assert!(Limits::default().problems().is_empty());
        assert!(Limits::default().warnings().is_empty());
        assert!(Limits::default().changed().is_empty());
    }

    #[test]
    fn wrong_values_name_their_key_and_range() {
        let limits = parse("outbox_lease = \"0s\"\noutbox_max_attempts = 0\nrequest_timeout = \"2days\"\nretention_payloads = \"60d\"\n").unwrap();
        assert_eq!(
            limits.problems(),
            [
                "[limits] outbox_max_attempts must be from 1 to 100, not 0",
                "[limits] outbox_lease must be from 1s to 1h, not 0s",
                "[limits] request_timeout must be from 100ms to 10m, not 2d",
                "[limits] retention_payloads (60d) is longer than retention_deliveries (30d): a payload cannot outlive its delivery",
            ]
        );
    }

    #[test]
    fn what_does_not_parse_says_what_to_write() {
        for (text, said) in [
            ("idle_timeout = 90", "has no unit"),
            ("idle_timeout = \"ninety\"", "is not a duration"),
            ("max_connections = -1", "invalid value"),
            ("max_connections = 18446744073709551615", ""),
            ("idle_timout = \"90s\"", "unknown field `idle_timout`"),
        ] {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.contains(said), "{text}: {e}");
        }
    }

    /// docs/operations.md, "Limits": every key with its default, and an
    /// example that reads.
    #[test]
    fn the_docs_list_every_limit_with_its_default() {
        let docs = include_str!("../../docs/operations.md");
        let section = docs
            .split("\n## Limits\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/operations.md has a Limits section");
        for entry in Limits::default().entries() {
            let row = format!("| `{}` | `{}` |", entry.key, entry.value);
            assert!(section.contains(&row), "no row {row}");
        }
        let example = section
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("an example");
        let table: toml::Table = toml::from_str(example).unwrap();
        let limits: Limits = table["limits"].clone().try_into().unwrap();
        assert!(limits.problems().is_empty());
        assert_eq!(limits.changed().len(), 3, "{:?}", limits.changed());
    }
}
