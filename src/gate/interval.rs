//! A canary's analysis interval as its hook metadata claims it (`interval`,
//! a Prometheus duration such as `1m` or `1h30m`), read into a bounded range
//! before anything uses it: a claim from Flagger's side may be anything,
//! `99999999999y` included.

use std::time::Duration;

/// The shortest interval used: Flagger's own minimum is a few seconds, and a
/// rate over less than 10 s is noise.
pub const SHORTEST: Duration = Duration::from_secs(10);

/// The longest interval used: a longer window only makes a query heavier.
pub const LONGEST: Duration = Duration::from_secs(3600);

/// The interval `text` names, held to [`SHORTEST`]..=[`LONGEST`]; None when it
/// is not a Prometheus duration (digits and a unit, `ms` `s` `m` `h` `d` `w`
/// `y`, one or more times) or is zero.
pub fn bounded(text: &str) -> Option<Duration> {
    let ms = millis(text.trim())?;
    if ms == 0 {
        return None;
    }
    let longest = LONGEST.as_millis() as u64;
    let shortest = SHORTEST.as_millis() as u64;
    Some(Duration::from_millis(ms.clamp(shortest, longest)))
}

/// `d` as a Prometheus duration in whole seconds, minutes or hours.
pub fn prometheus(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// Milliseconds in a Prometheus duration, saturating (a huge value is still
/// a duration: it is bounded afterwards, not refused).
fn millis(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 64 {
        return None;
    }
    let bytes = text.as_bytes();
    let (mut i, mut total) = (0, 0u64);
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let number: u64 = match text[start..i].parse() {
            Ok(n) => n,
            Err(_) if i > start => u64::MAX,
            Err(_) => return None,
        };
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit: u64 = match &text[unit_start..i] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "y" => 31_536_000_000,
            _ => return None,
        };
        total = total.saturating_add(number.saturating_mul(unit));
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_held_to_its_range() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(bounded("1m"), secs(60));
        assert_eq!(bounded("1h30m"), secs(3600));
        assert_eq!(bounded("90s"), secs(90));
        assert_eq!(bounded("500ms"), secs(10));
        assert_eq!(bounded("99999999999y"), secs(3600));
        assert_eq!(bounded("99999999999999999999999y"), secs(3600));
        for not in [
            "",
            "0s",
            "1",
            "m",
            "1x",
            "1m}[5m",
            "1m ) or vector(1",
            "-1m",
        ] {
            assert_eq!(bounded(not), None, "{not}");
        }
        assert_eq!(prometheus(Duration::from_secs(3600)), "1h");
        assert_eq!(prometheus(Duration::from_secs(90)), "90s");
        assert_eq!(prometheus(Duration::from_secs(120)), "2m");
    }
}
