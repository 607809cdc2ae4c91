//! A canary's progress as Flagger's events tell it: weight, iteration, failed
//! checks, the last event; and the failures outside the analysis that Flagger
//! sends no alert for (fluxcd/flagger#1663). Pure: times are passed in.
//!
//! The formats are Flagger's `pkg/controller` format strings (see
//! `tests/fixtures/flagger/event-messages.md`).

use std::collections::BTreeSet;

use super::Millis;

/// What one event message says about the canary's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `Advance %s.%s canary weight %v`
    Weight(u32),
    /// `Advance %s.%s canary iteration %v/%v`
    Iteration(u32, u32),
    /// A check that failed and counts towards the threshold: a halt that is
    /// not a wait for approval, a metric query that failed.
    FailedCheck,
    /// `Rolling back %s.%s failed checks threshold reached %v`
    ThresholdReached(u32),
    /// A new revision: the analysis starts over.
    Restart,
    /// `Promotion completed! …`, `Canary failed! …`: the rollout is over and
    /// its traffic back on the primary (the next wait may carry the same
    /// checksum, Flagger's confirm-rollout call comes before the new one).
    Ended,
    /// Nothing new about the progress, said again at every interval: the
    /// halt of a wait for approval (which every surface shows already), a
    /// rollback hook that signals no rollback. The progress stays as it was.
    Quiet,
    Other,
}

/// Reads one message (Flagger's words; anything else is `Other`).
pub fn step(message: &str) -> Step {
    let m = message.to_ascii_lowercase();
    let last_word = || m.split_whitespace().last().unwrap_or("");
    if m.starts_with("advance ") && m.contains(" canary weight ") {
        return last_word().parse().map_or(Step::Other, Step::Weight);
    }
    if m.starts_with("advance ") && m.contains(" canary iteration ") {
        let (n, of) = last_word().split_once('/').unwrap_or(("", ""));
        return match (n.parse(), of.parse()) {
            (Ok(n), Ok(of)) => Step::Iteration(n, of),
            _ => Step::Other,
        };
    }
    if m.starts_with("rolling back ") && m.contains(" failed checks threshold reached ") {
        return last_word()
            .parse()
            .map_or(Step::Other, Step::ThresholdReached);
    }
    // Not "Starting canary analysis": Flagger says it again before every
    // retry of a failed pre-rollout check, and keeps the failed checks.
    if m.starts_with("new revision detected") {
        return Step::Restart;
    }
    if m.starts_with("promotion completed") || m.starts_with("canary failed") {
        return Step::Ended;
    }
    let rollback_hook_idle = m.starts_with("rollback hook ") && m.contains(" not signaling");
    if rollback_hook_idle || (m.starts_with("halt ") && m.contains(" waiting for ")) {
        return Step::Quiet;
    }
    let halt = m.starts_with("halt ");
    if halt || m.starts_with("prometheus query failed") || m.starts_with("metric query failed") {
        return Step::FailedCheck;
    }
    Step::Other
}

/// A failure Flagger does not alert about, or alerts about without saying
/// what comes next: announced once per canary revision and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    /// `Halt %s.%s advancement pre-rollout check %s failed %v`
    PreRollout,
    /// `Rolling back %s.%s progress deadline exceeded %v`
    ProgressDeadline,
    /// `Error checking metric providers: %v`
    MetricProviders,
    /// `Promotion of %s.%s failed, primary not ready: %v`
    PromotionFailed,
    /// `Post-rollout hook %s failed %v`
    PostRollout,
}

impl Failure {
    pub const ALL: [Failure; 5] = [
        Self::PreRollout,
        Self::ProgressDeadline,
        Self::MetricProviders,
        Self::PromotionFailed,
        Self::PostRollout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreRollout => "pre_rollout",
            Self::ProgressDeadline => "progress_deadline",
            Self::MetricProviders => "metric_providers",
            Self::PromotionFailed => "promotion_failed",
            Self::PostRollout => "post_rollout",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// What failed, in people's words.
    pub fn what(self) -> &'static str {
        match self {
            Self::PreRollout => "a pre-rollout webhook failed",
            Self::ProgressDeadline => "the progress deadline passed",
            Self::MetricProviders => "the metric providers cannot be reached",
            Self::PromotionFailed => "the promotion failed: the primary is not ready",
            Self::PostRollout => "a post-rollout webhook failed",
        }
    }

    /// What Flagger does next (its scheduler at the fixture's commit).
    pub fn next(self) -> &'static str {
        match self {
            Self::PreRollout => "Flagger will retry at the next interval; each failure counts towards the failed checks threshold, and the canary is rolled back when it is reached",
            Self::ProgressDeadline => "Flagger is rolling back",
            Self::MetricProviders => "Flagger will check the providers again at the next interval; the analysis does not go on until they answer",
            Self::PromotionFailed => "Flagger will try the promotion again at the next interval",
            Self::PostRollout => "the promotion stands; Flagger does not call the hook again",
        }
    }
}

/// The failure a message reports, if it is one of [`Failure`].
pub fn failure(message: &str) -> Option<Failure> {
    let m = message.to_ascii_lowercase();
    if m.starts_with("halt ") && m.contains(" advancement pre-rollout check ") {
        Some(Failure::PreRollout)
    } else if m.starts_with("rolling back ") && m.contains(" progress deadline exceeded") {
        Some(Failure::ProgressDeadline)
    } else if m.starts_with("error checking metric providers") {
        Some(Failure::MetricProviders)
    } else if m.starts_with("promotion of ") && m.contains(" failed, primary not ready") {
        Some(Failure::PromotionFailed)
    } else if m.starts_with("post-rollout hook ") && m.contains(" failed") {
        Some(Failure::PostRollout)
    } else {
        None
    }
}

/// The latest event: its message and when gatebot received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastEvent {
    pub message: String,
    pub at: Millis,
}

/// A canary's progress at its current revision, as its events tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryProgress {
    pub checksum: String,
    /// The canary's traffic weight in percent, once Flagger advanced it.
    pub weight: Option<u32>,
    /// The analysis iteration running and how many there are.
    pub iteration: Option<(u32, u32)>,
    /// Failed checks counted from the events of this revision.
    pub failed_checks: u32,
    /// The analysis threshold, when the hook's metadata says it (`threshold`).
    pub threshold: Option<u32>,
    pub last: LastEvent,
    /// Failures already announced for this revision.
    pub told: BTreeSet<Failure>,
}

/// One event as the progress reads it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub checksum: &'a str,
    pub message: &'a str,
    /// From the hook's metadata (`threshold`), when given.
    pub threshold: Option<u32>,
    pub at: Millis,
}

impl CanaryProgress {
    /// The progress after `event`, and the failure to announce (None when the
    /// message is none, or this revision's announcement of it was made).
    pub fn after(prev: Option<Self>, event: Seen<'_>) -> (Self, Option<Failure>) {
        let last = LastEvent {
            message: event.message.to_string(),
            at: event.at,
        };
        let step = step(event.message);
        if let Some(p) = prev.as_ref().filter(|p| p.checksum == event.checksum) {
            if step == Step::Quiet {
                return (p.clone(), None);
            }
        }
        let mut p = match prev {
            Some(p) if p.checksum == event.checksum && step != Step::Restart => p,
            prev => Self {
                checksum: event.checksum.to_string(),
                weight: None,
                iteration: None,
                failed_checks: 0,
                threshold: prev.and_then(|p| p.threshold),
                last: last.clone(),
                told: BTreeSet::new(),
            },
        };
        p.last = last;
        p.threshold = event.threshold.or(p.threshold);
        match step {
            Step::Weight(w) => p.weight = Some(w.min(100)),
            Step::Iteration(n, of) => p.iteration = Some((n, of)),
            Step::FailedCheck => p.failed_checks = p.failed_checks.saturating_add(1),
            Step::ThresholdReached(n) => p.failed_checks = n,
            Step::Ended => (p.weight, p.iteration) = (None, None),
            Step::Restart | Step::Quiet | Step::Other => {}
        }
        let fresh = failure(event.message).filter(|f| p.told.insert(*f));
        (p, fresh)
    }

    /// Whether this progress is of `checksum` (an unknown one matches).
    pub fn of_revision(&self, checksum: &str) -> bool {
        self.checksum.is_empty() || checksum.is_empty() || self.checksum == checksum
    }

    /// `weight 30 % · iteration 3/10 · failed checks 1/5 · last: "…" 2m ago`:
    /// the message passed through `quote` and its time through `when` (each
    /// surface escapes and dates its own way).
    pub fn line(&self, quote: impl Fn(&str) -> String, when: impl Fn(Millis) -> String) -> String {
        let mut parts = Vec::with_capacity(4);
        if let Some(w) = self.weight {
            parts.push(format!("weight {w} %"));
        }
        if let Some((n, of)) = self.iteration {
            parts.push(format!("iteration {n}/{of}"));
        }
        // The threshold only when the hook's metadata told it.
        parts.push(match self.threshold {
            Some(t) => format!("failed checks {}/{t}", self.failed_checks),
            None => format!("failed checks {}", self.failed_checks),
        });
        parts.push(format!(
            "last: \"{}\" {}",
            quote(&self.last.message),
            when(self.last.at)
        ));
        parts.join(" · ")
    }
}

/// The `threshold` the user put in the event hook's metadata, if it is a number.
pub fn threshold_of(value: Option<&String>) -> Option<u32> {
    value?.trim().parse().ok().filter(|t| *t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(message: &'a str, at: Millis) -> Seen<'a> {
        Seen {
            checksum: "rev-a",
            message,
            threshold: None,
            at,
        }
    }

    #[test]
    fn reads_flaggers_messages() {
        let cases = [
            ("Advance podinfo.test canary weight 30", Step::Weight(30)),
            (
                "Advance podinfo.test canary iteration 3/10",
                Step::Iteration(3, 10),
            ),
            ("Advance podinfo.test primary weight 50", Step::Other),
            (
                "Rolling back podinfo.test failed checks threshold reached 5",
                Step::ThresholdReached(5),
            ),
            (
                "Halt podinfo.test advancement success rate 91.20% < 99%",
                Step::FailedCheck,
            ),
            (
                "Halt podinfo.test advancement pre-rollout check smoke failed 500",
                Step::FailedCheck,
            ),
            ("Prometheus query failed: no such host", Step::FailedCheck),
            (
                "Halt podinfo.test advancement waiting for promotion approval gate",
                Step::Quiet,
            ),
            (
                "New revision detected! Scaling up podinfo.test",
                Step::Restart,
            ),
            ("Advance podinfo.test canary weight lots", Step::Other),
            ("Advance podinfo.test canary iteration 3", Step::Other),
        ];
        for (msg, want) in cases {
            assert_eq!(step(msg), want, "{msg}");
        }
    }

    #[test]
    fn recognises_failures_outside_the_analysis() {
        let cases = [
            (
                "Halt podinfo.test advancement pre-rollout check smoke failed error response",
                Some(Failure::PreRollout),
            ),
            (
                "Rolling back podinfo.test progress deadline exceeded canary deployment podinfo.test not ready",
                Some(Failure::ProgressDeadline),
            ),
            ("Error checking metric providers: timeout", Some(Failure::MetricProviders)),
            (
                "Promotion of podinfo.test failed, primary not ready: waiting",
                Some(Failure::PromotionFailed),
            ),
            ("Post-rollout hook notify failed 500", Some(Failure::PostRollout)),
            ("Pre-rollout check smoke passed", None),
            ("Halt podinfo.test advancement success rate 91.20% < 99%", None),
        ];
        for (msg, want) in cases {
            assert_eq!(failure(msg), want, "{msg}");
        }
        for f in Failure::ALL {
            assert_eq!(Failure::parse(f.as_str()), Some(f));
        }
    }

    #[test]
    fn folds_a_rollout_into_one_line() {
        let events = [
            "Starting canary analysis for podinfo.test",
            "Advance podinfo.test canary weight 10",
            "Halt podinfo.test advancement success rate 91.20% < 99%",
            "Advance podinfo.test canary weight 30",
            "Halt podinfo.test advancement waiting for promotion approval gate",
        ];
        let mut p = None;
        for (i, m) in events.iter().enumerate() {
            p = Some(CanaryProgress::after(p, seen(m, i as Millis * 1000)).0);
        }
        let mut p = p.unwrap();
        p.threshold = Some(5);
        assert_eq!(
            p.line(|m| m.to_string(), |at| format!("at {at}")),
            "weight 30 % · failed checks 1/5 · last: \"Advance podinfo.test canary weight 30\" at 3000"
        );
    }

    #[test]
    fn a_new_revision_starts_over_and_a_failure_is_told_once_per_revision() {
        let halt = "Halt podinfo.test advancement pre-rollout check smoke failed 500";
        let (p, told) = CanaryProgress::after(None, seen(halt, 1));
        assert_eq!(told, Some(Failure::PreRollout));
        assert_eq!(p.failed_checks, 1);
        let (p, told) = CanaryProgress::after(Some(p), seen(halt, 2));
        assert_eq!(told, None, "a retry of the same halt is not told again");
        assert_eq!(p.failed_checks, 2);
        let next = Seen {
            checksum: "rev-b",
            ..seen(halt, 3)
        };
        let (p, told) = CanaryProgress::after(Some(p), next);
        assert_eq!(
            told,
            Some(Failure::PreRollout),
            "a new revision is told again"
        );
        assert_eq!((p.checksum.as_str(), p.failed_checks), ("rev-b", 1));
    }

    #[test]
    fn the_threshold_comes_from_the_hooks_metadata() {
        assert_eq!(threshold_of(Some(&" 5 ".to_string())), Some(5));
        assert_eq!(threshold_of(Some(&"five".to_string())), None);
        assert_eq!(threshold_of(Some(&"0".to_string())), None);
        assert_eq!(threshold_of(None), None);
    }

    /// Flagger's format strings (tests/fixtures/flagger/event-messages.md),
    /// rendered with sample arguments: the five failures are recognised, and
    /// only they; the weight and iteration formats are read.
    #[test]
    fn reads_every_format_string_of_flagger() {
        let text = include_str!("../../tests/fixtures/flagger/event-messages.md");
        let mut failures = BTreeSet::new();
        let mut rows = 0;
        for line in text
            .lines()
            .filter(|l| l.starts_with("| ") && l.contains("`\""))
        {
            let format = line.split('`').find(|c| c.starts_with('"')).unwrap();
            let message = format
                .trim_matches('"')
                .replace("%.2f", "1.00")
                .replace("%%", "%")
                .replace("%s", "podinfo")
                .replace("%v", "3");
            rows += 1;
            failures.extend(failure(&message));
            match step(&message) {
                Step::Weight(w) => assert!(format.contains("canary weight") && w == 3),
                Step::Iteration(n, of) => assert_eq!((n, of), (3, 3)),
                Step::Quiet => {
                    assert!(message.contains("waiting for") || message.contains("not signaling"))
                }
                _ => {}
            }
        }
        assert!(rows > 60, "{rows} rows read");
        assert_eq!(failures, Failure::ALL.into_iter().collect());
    }

    /// The rendered events of Flagger's own test, in order: the weight goes
    /// to 100, and the promotion's end clears it.
    #[test]
    fn folds_the_events_of_flaggers_own_test() {
        let text = include_str!("../../tests/fixtures/flagger/event-messages.md");
        let tail = &text[text.find("name: \"canary\"").unwrap()..];
        let mut p = None;
        let mut weights = Vec::new();
        for (i, part) in tail.split("\"eventMessage\": \"").skip(1).enumerate() {
            let message = &part[..part.find('"').unwrap()];
            let (next, told) = CanaryProgress::after(p, seen(message, i as Millis));
            assert_eq!(told, None, "{message}");
            weights.extend(next.weight);
            p = Some(next);
        }
        let p = p.unwrap();
        assert_eq!(weights.last(), Some(&100));
        assert_eq!(p.weight, None);
        assert_eq!(
            p.last.message,
            "Promotion completed! Scaling down podinfo.default"
        );
    }
}
