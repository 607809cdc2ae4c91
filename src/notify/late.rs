//! The note a reply carries when its delivery was applied late: whoever sent
//! a command answered 2xx (a `/hold`, a `/promote`) learns that it took effect
//! only later, when, and why if gatebot knows (see `SendError::Transient`: a
//! delivery the store failed to apply is tried again until it applies).

use crate::gate::Millis;
use crate::store::QueueItem;

/// A delivery applied this long after it was received, or later, says so in
/// its reply: a wait a person notices (applying one takes well under a second).
pub const LATE_AFTER: Millis = 10_000;

/// "applied at 12:03:10 UTC, 2 min after it was received (the database was
/// unavailable)" for `item` applied at `now`; None when it was not late.
pub fn late_note(item: &QueueItem, now: Millis) -> Option<String> {
    let waited = now.saturating_sub(item.created_at);
    if waited < LATE_AFTER {
        return None;
    }
    // A try the store failed for a passing reason is not counted (the worker
    // puts it back uncounted): a failed try with no counted one before this
    // was the store's.
    let why = match (&item.last_error, item.attempts) {
        (Some(_), 1) => " (the database was unavailable)",
        (Some(_), _) => " (earlier tries failed)",
        (None, _) => "",
    };
    Some(format!(
        "applied at {} UTC, {} after it was received{why}",
        hhmmss(now),
        waited_text(waited)
    ))
}

/// `12:03:10` (UTC).
fn hhmmss(ms: Millis) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// `40 s`, `2 min`, `1 h 5 min`, `2 d 3 h`.
fn waited_text(ms: Millis) -> String {
    let secs = ms.max(0) / 1000;
    let mins = secs / 60;
    match mins {
        0 => format!("{secs} s"),
        m if m < 60 => format!("{m} min"),
        m if m < 24 * 60 => format!("{} h {} min", m / 60, m % 60),
        m => format!("{} d {} h", m / (24 * 60), (m / 60) % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(attempts: i64, last_error: Option<&str>) -> QueueItem {
        QueueItem {
            id: "github:1".into(),
            route: "github".into(),
            topic: "issue_comment".into(),
            payload: "{}".into(),
            attempts,
            created_at: 43_270_000,
            last_error: last_error.map(str::to_string),
        }
    }

    #[test]
    fn a_delivery_applied_late_says_when_and_why() {
        let at = 43_270_000 + 120_000;
        let stuck = item(1, Some("canceling statement due to lock timeout"));
        assert_eq!(
            late_note(&stuck, at).as_deref(),
            Some("applied at 12:03:10 UTC, 2 min after it was received (the database was unavailable)")
        );
        assert_eq!(
            late_note(&item(3, Some("GitHub answered 502")), at).as_deref(),
            Some("applied at 12:03:10 UTC, 2 min after it was received (earlier tries failed)")
        );
        assert_eq!(
            late_note(&item(1, None), 43_270_000 + 12_000).as_deref(),
            Some("applied at 12:01:22 UTC, 12 s after it was received")
        );
        assert_eq!(late_note(&stuck, 43_270_000 + LATE_AFTER - 1), None);
    }
}
