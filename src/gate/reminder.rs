//! Reminders: at which points of a wait people are reminded. Pure.

use std::time::Duration;

use super::change::Millis;

/// The reminder a wait is due now: `(how many points have passed, the latest
/// of them)`, when more have passed than were `sent`. After a pause (a
/// restart, an outage) several may have passed at once: one reminder, for the
/// latest, is sent, not a burst.
pub fn due(
    points: &[Duration],
    started_at: Millis,
    now: Millis,
    sent: usize,
) -> Option<(usize, Duration)> {
    let passed = points
        .iter()
        .take_while(|p| started_at + p.as_millis() as Millis <= now)
        .count();
    (passed > sent).then(|| (passed, points[passed - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 60;

    #[test]
    fn each_point_once_and_one_for_several_passed_together() {
        let points = [
            Duration::from_secs(30 * M),
            Duration::from_secs(120 * M),
            Duration::from_secs(480 * M),
        ];
        let at = |min: i64| min * 60_000;
        let table = [
            (at(29), 0, None),
            (at(30), 0, Some((1, points[0]))),
            (at(31), 1, None),
            (at(120), 1, Some((2, points[1]))),
            (at(500), 1, Some((3, points[2]))),
            (at(10_000), 3, None),
        ];
        for (now, sent, want) in table {
            assert_eq!(due(&points, 0, now, sent), want, "{now} {sent}");
        }
        assert_eq!(due(&[], 0, at(1000), 0), None);
    }
}
