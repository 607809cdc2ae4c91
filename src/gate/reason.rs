//! Reasons people give with a command: which commands must carry one (the
//! policy's `[[reasons]]`), what counts as one, and how long one may be.
//! A reason is a person's text: kept as given, shown escaped, never parsed
//! for anything but its first words.

use std::fmt;

/// The most characters a command's reason may have; a longer one is refused
/// (not cut), so what the audit keeps is what the person wrote.
pub const MAX_REASON: usize = 1_000;

/// What a `[[reasons]]` rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonKind {
    Start,
    Promote,
    Traffic,
    /// A rollback: `/rollback`, or a Reject that rolls back.
    Rollback,
    Hold,
    /// Break glass, which always needs a reason.
    Force,
}

impl ReasonKind {
    pub const ALL: [ReasonKind; 6] = [
        ReasonKind::Start,
        ReasonKind::Promote,
        ReasonKind::Traffic,
        ReasonKind::Rollback,
        ReasonKind::Hold,
        ReasonKind::Force,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Promote => "promote",
            Self::Traffic => "traffic",
            Self::Rollback => "rollback",
            Self::Hold => "hold",
            Self::Force => "force",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == word)
    }
}

impl fmt::Display for ReasonKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[reasons]]` entry: whether a command of `kind` (in `environment`,
/// or anywhere) must say why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonRule {
    pub kind: ReasonKind,
    pub environment: Option<String>,
    pub required: bool,
}

/// Whether a command of `kind` in `environment` needs a reason: the rule
/// naming the environment wins over one naming none, the last of equals
/// wins, and break glass always needs one.
pub fn required(rules: &[ReasonRule], kind: ReasonKind, environment: Option<&str>) -> bool {
    if kind == ReasonKind::Force {
        return true;
    }
    let of_kind = || rules.iter().rev().filter(|r| r.kind == kind);
    let named =
        of_kind().find(|r| r.environment.is_some() && r.environment.as_deref() == environment);
    named
        .or_else(|| of_kind().find(|r| r.environment.is_none()))
        .is_some_and(|r| r.required)
}

/// The reason in a command's text, without the words before it that name
/// an environment or cluster (`is_place`, whatever their case or the
/// punctuation around them), say `because` or are a flag (`--force` out of
/// its place is no reason): `production because the error
/// budget is fine` gives `the error budget is fine`; `production`,
/// `Production,` and `because because` give none. A reason has a letter or
/// digit a person can see.
pub fn given(text: Option<&str>, is_place: impl Fn(&str) -> bool) -> Option<&str> {
    let mut rest = text?.trim();
    while let Some((first, after)) = split_word(rest) {
        let word = first.trim_matches(|c: char| !c.is_alphanumeric());
        let flag = first.starts_with("--");
        if !(flag || word.eq_ignore_ascii_case("because") || (!word.is_empty() && is_place(word))) {
            break;
        }
        rest = after;
    }
    rest.chars().any(visible).then_some(rest)
}

/// A letter or digit that shows: not one of the fillers Unicode counts as
/// letters but draws as nothing, nor a combining mark, which only decorates
/// the letter before it.
fn visible(c: char) -> bool {
    let filler = matches!(c, '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}');
    let combining = matches!(c,
        '\u{0300}'..='\u{036F}' | '\u{1AB0}'..='\u{1AFF}' | '\u{1DC0}'..='\u{1DFF}'
        | '\u{20D0}'..='\u{20FF}' | '\u{FE20}'..='\u{FE2F}');
    c.is_alphanumeric() && !filler && !combining
}

/// What is recorded of a command's reason: what the caller claims beside
/// its token (`claims alice via cli`) first, then what was said.
pub fn with_claim(claim: Option<&str>, said: Option<String>) -> Option<String> {
    match (claim, said) {
        (None, said) => said,
        (Some(claim), None) => Some(claim.to_string()),
        (Some(claim), Some(said)) => Some(format!("{claim}; {said}")),
    }
}

/// The first word of `text` and the rest, trimmed.
fn split_word(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    (end > 0).then(|| (&text[..end], text[end..].trim()))
}

/// Whether `reason` is short enough to keep.
pub fn fits(reason: &str) -> bool {
    reason.chars().count() <= MAX_REASON
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: ReasonKind, environment: Option<&str>, required: bool) -> ReasonRule {
        ReasonRule {
            kind,
            environment: environment.map(str::to_string),
            required,
        }
    }

    #[test]
    fn the_rule_of_the_environment_wins_then_the_last_of_equals() {
        use ReasonKind::*;
        let rules = [
            rule(Promote, None, true),
            rule(Promote, Some("staging"), false),
            rule(Hold, Some("production"), true),
            rule(Hold, Some("production"), false),
        ];
        assert!(required(&rules, Promote, Some("production")));
        assert!(required(&rules, Promote, None));
        assert!(!required(&rules, Promote, Some("staging")));
        assert!(!required(&rules, Hold, Some("production")));
        assert!(!required(&rules, Traffic, Some("production")));
        assert!(required(&[], Force, None), "break glass always says why");
    }

    #[test]
    fn a_reason_is_what_follows_the_place_and_because() {
        let p = |w: &str| {
            ["production", "prod-eu"]
                .iter()
                .any(|p| p.eq_ignore_ascii_case(w))
        };
        let given = |text: Option<&'static str>| given(text, p);
        assert_eq!(
            given(Some("production because it is fine")),
            Some("it is fine")
        );
        assert_eq!(given(Some("Production BECAUSE  ok ")), Some("ok"));
        for none in [
            Some("production"),
            Some("production because"),
            Some("because"),
            Some("  "),
            None,
            Some("Production,"),
            Some("`production`"),
            Some("prod-eu."),
            Some("production production"),
            Some("production prod-eu because because"),
            Some("because production"),
            Some("\u{200B}"),
            Some("production \u{FEFF}\u{2060}\u{00AD}"),
            Some("\u{3164}\u{115F}"),
            Some("\u{0345}"),
            Some("production \u{0301}\u{20E3}"),
            Some("\0"),
            Some("- ."),
            Some("production --force"),
            Some("--force because"),
        ] {
            assert_eq!(given(none), None, "{none:?}");
        }
        assert_eq!(
            given(Some("the error budget is fine")),
            Some("the error budget is fine")
        );
        // Places are only taken off the front.
        assert_eq!(
            given(Some("fine in production")),
            Some("fine in production")
        );
        assert_eq!(given(Some("- fine")), Some("- fine"));
    }

    #[test]
    fn a_reason_fits_up_to_its_cap_in_characters() {
        assert!(fits(&"é".repeat(MAX_REASON)));
        assert!(!fits(&"a".repeat(MAX_REASON + 1)));
    }
}
