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

/// The `[limits]` table. A table sets only what it names; the rest keep
/// their defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// How long in-flight requests may finish after SIGTERM.
    #[serde(with = "duration")]
    pub shutdown_timeout: Duration,
    /// First retry delay of a failed notification; doubles each attempt, capped at 10 minutes.
    #[serde(with = "duration")]
    pub outbox_backoff: Duration,
    /// Attempts before a notification is given up.
    pub outbox_max_attempts: u32,
    /// How long a replica holds a notification it is sending; another takes it over after this.
    #[serde(with = "duration")]
    pub outbox_lease: Duration,
    /// A request head must arrive whole within this, or the connection is closed.
    #[serde(with = "duration")]
    pub header_read_timeout: Duration,
    /// A keep-alive connection with no request for this long is closed.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Most connections open at once; lowered to fit under `ulimit -n`.
    pub max_connections: u32,
    /// A request body must arrive whole within this (408 otherwise).
    #[serde(with = "duration")]
    pub body_read_timeout: Duration,
    /// A request not answered within this gets 503, or 403 on a gate check.
    #[serde(with = "duration")]
    pub request_timeout: Duration,
    /// New waits announced one by one per minute, per Slack channel and pull request.
    pub notify_burst: u32,
    /// Most named gates not retired at once.
    pub named_gates_live: u32,
    /// Most named gates one token creates in an hour.
    pub named_gates_per_hour: u32,
    /// How long a retired named gate keeps its details.
    #[serde(with = "duration")]
    pub named_gate_retention: Duration,
    /// The longest one Prometheus query may take.
    #[serde(with = "duration")]
    pub prometheus_timeout: Duration,
    /// How often each waiting canary's numbers are read again.
    #[serde(with = "duration")]
    pub evidence_refresh: Duration,
    /// How long a sign-in to the pages lasts.
    #[serde(with = "duration")]
    pub ui_session_ttl: Duration,
    /// Done deliveries and notifications keep their payload this long.
    #[serde(with = "duration")]
    pub retention_payloads: Duration,
    /// Done deliveries and notifications, ids included, are kept this long.
    #[serde(with = "duration")]
    pub retention_deliveries: Duration,
    /// Flagger's events, canaries' last checks, ended waits and their messages.
    #[serde(with = "duration")]
    pub retention_history: Duration,
    /// Audit entries; 0 keeps them for ever.
    #[serde(with = "duration")]
    pub retention_audit: Duration,
    /// How often a retention pass runs.
    #[serde(with = "duration")]
    pub retention_interval: Duration,
    /// How long after a failed cluster lookup it is tried again (doubling, up to 32 times).
    #[serde(with = "duration")]
    pub kubernetes_lookup_backoff: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            shutdown_timeout: secs(20),
            outbox_backoff: secs(2),
            outbox_max_attempts: 12,
            outbox_lease: secs(60),
            header_read_timeout: secs(5),
            idle_timeout: secs(90),
            max_connections: 512,
            body_read_timeout: secs(10),
            request_timeout: secs(30),
            notify_burst: 10,
            named_gates_live: 500,
            named_gates_per_hour: 30,
            named_gate_retention: secs(30 * DAY),
            prometheus_timeout: secs(2),
            evidence_refresh: secs(30),
            ui_session_ttl: secs(12 * 3600),
            retention_payloads: secs(3 * DAY),
            retention_deliveries: secs(30 * DAY),
            retention_history: secs(90 * DAY),
            retention_audit: secs(365 * DAY),
            retention_interval: secs(600),
            kubernetes_lookup_backoff: secs(10),
        }
    }
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

fn span(key: &'static str, value: Duration, min: Duration, max: Duration) -> Entry {
    Entry {
        key,
        value: Value::Span(value),
        min: Value::Span(min),
        max: Value::Span(max),
        zero: None,
    }
}

fn count(key: &'static str, value: u32, min: u64, max: u64) -> Entry {
    Entry {
        key,
        value: Value::Count(value.into()),
        min: Value::Count(min),
        max: Value::Count(max),
        zero: None,
    }
}

impl Entry {
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
    /// Every limit with its range, in the order the docs list them.
    fn entries(&self) -> [Entry; 22] {
        [
            span(
                "shutdown_timeout",
                self.shutdown_timeout,
                Duration::ZERO,
                secs(3600),
            ),
            span("outbox_backoff", self.outbox_backoff, ms(10), secs(600)),
            count("outbox_max_attempts", self.outbox_max_attempts, 1, 100),
            span("outbox_lease", self.outbox_lease, secs(1), secs(3600)),
            span(
                "header_read_timeout",
                self.header_read_timeout,
                ms(100),
                secs(300),
            ),
            span("idle_timeout", self.idle_timeout, ms(100), secs(3600)),
            count("max_connections", self.max_connections, 1, 65_536),
            span(
                "body_read_timeout",
                self.body_read_timeout,
                ms(100),
                secs(300),
            ),
            span("request_timeout", self.request_timeout, ms(100), secs(600)),
            count("notify_burst", self.notify_burst, 1, 10_000),
            count("named_gates_live", self.named_gates_live, 1, 100_000),
            count("named_gates_per_hour", self.named_gates_per_hour, 1, 10_000),
            span(
                "named_gate_retention",
                self.named_gate_retention,
                secs(3600),
                secs(3650 * DAY),
            ),
            span(
                "prometheus_timeout",
                self.prometheus_timeout,
                ms(10),
                secs(600),
            ),
            span(
                "evidence_refresh",
                self.evidence_refresh,
                ms(100),
                secs(DAY),
            ),
            span(
                "ui_session_ttl",
                self.ui_session_ttl,
                secs(60),
                secs(30 * DAY),
            ),
            span(
                "retention_payloads",
                self.retention_payloads,
                secs(3600),
                secs(365 * DAY),
            ),
            span(
                "retention_deliveries",
                self.retention_deliveries,
                secs(DAY),
                secs(3650 * DAY),
            ),
            span(
                "retention_history",
                self.retention_history,
                secs(DAY),
                secs(3650 * DAY),
            ),
            Entry {
                zero: Some("an audit log kept for ever"),
                ..span(
                    "retention_audit",
                    self.retention_audit,
                    secs(DAY),
                    secs(3650 * DAY),
                )
            },
            span(
                "retention_interval",
                self.retention_interval,
                secs(1),
                secs(DAY),
            ),
            span(
                "kubernetes_lookup_backoff",
                self.kubernetes_lookup_backoff,
                ms(10),
                secs(DAY),
            ),
        ]
    }

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

/// A duration written as the settings wrote it (`"30s"`, `"2h"`, `"0"`).
mod duration {
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
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
