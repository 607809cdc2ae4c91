//! Escaping for the strings that come from Flagger's side (canary names,
//! namespaces, checksums, phases, metadata, event messages) before they reach
//! a chat message. Each is capped in length (with `…`) and escaped for its
//! medium, so it can neither ping anyone, form a link, nor hide a marker.

/// Caps in characters: a Kubernetes name or namespace is at most 253.
pub const NAME: usize = 253;
/// A revision checksum (Flagger's are 10 to 64 hex digits).
pub const CHECKSUM: usize = 64;
/// A phase, an event kind: short words.
pub const WORD: usize = 64;
/// A metadata value such as a title.
pub const METADATA: usize = 256;
/// An event message.
pub const MESSAGE: usize = 500;

/// At most `max` characters of `s`, the last one `…` when cut, on one line.
pub fn cap(s: &str, max: usize) -> String {
    let flat = s.replace(['\r', '\n', '\t', '\u{2028}', '\u{2029}'], " ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// For Slack mrkdwn: `&`, `<`, `>` as entities (so no `<!channel>`, `<@U…>`
/// or `<url|text>` can form), and `*`, `~` and backticks replaced by
/// look-alikes, so a value placed inside `*…*` or `` `…` `` stays there. `_`
/// stays: it is in gate names people copy, and Slack italics need a word edge.
pub fn mrkdwn(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len());
    for c in cap(s, max).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\u{02CB}'),
            '*' => out.push('\u{2217}'),
            '~' => out.push('\u{223C}'),
            c => out.push(c),
        }
    }
    out
}

/// For Slack mrkdwn, a line gatebot wrote around a person's words (a
/// freeze's line): only `&`, `<`, `>` as entities, so nothing in it pings,
/// links or mentions, and gatebot's own backticks still format it.
pub fn entities(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// For GitHub markdown: the value as a code span, so no mention, issue
/// reference, link, autolink or HTML forms in it. The fence is longer than
/// any run of backticks in it (CommonMark); `<` and `>` become `‹` `›`, since
/// a code span shows entities as typed and gatebot's hidden `<!-- gatebot:… -->`
/// markers must not appear in the text; `|` is escaped so a table cell holds.
pub fn code(s: &str, max: usize) -> String {
    let text: String = cap(s, max)
        .chars()
        .map(|c| match c {
            '<' => '\u{2039}',
            '>' => '\u{203A}',
            c => c,
        })
        .collect::<String>()
        .replace('|', "\\|");
    if text.trim().is_empty() {
        return "—".to_string();
    }
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    // A space each side keeps a leading or trailing backtick out of the fence.
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOSTILE: &str =
        "Rolling back <!channel> @acme/sre [Approve](https://evil) <!-- gatebot:status -->";

    #[test]
    fn entities_keep_a_line_from_pinging() {
        assert_eq!(
            entities("frozen by <!channel> & <@U1>: `/gatebot unfreeze all`"),
            "frozen by &lt;!channel&gt; &amp; &lt;@U1&gt;: `/gatebot unfreeze all`"
        );
    }

    #[test]
    fn slack_loses_its_markup() {
        assert_eq!(
            mrkdwn(
                "abc` <!channel> <https://evil/login|Approve here> `",
                CHECKSUM
            ),
            "abcˋ &lt;!channel&gt; &lt;https://evil/login|Approve here&gt; ˋ"
        );
        assert_eq!(mrkdwn("a*b_c~d\ne", NAME), "a∗b_c∼d e");
    }

    #[test]
    fn github_gets_a_code_span() {
        assert_eq!(
            code(HOSTILE, MESSAGE),
            "`Rolling back ‹!channel› @acme/sre [Approve](https://evil) ‹!-- gatebot:status --›`"
        );
        assert_eq!(code("a``b", NAME), "```a``b```");
        assert_eq!(code("`x", NAME), "`` `x ``");
        assert_eq!(code("a|b", NAME), "`a\\|b`");
        assert_eq!(code("", NAME), "—");
    }

    #[test]
    fn long_values_are_cut_with_an_ellipsis() {
        let s = "é".repeat(600);
        let capped = cap(&s, MESSAGE);
        assert_eq!(capped.chars().count(), MESSAGE);
        assert!(capped.ends_with('…'));
        assert_eq!(cap("short", MESSAGE), "short");
    }

    /// Whether `s` holds a `<` that Slack or GitHub would read as markup.
    fn raw_angle(s: &str) -> bool {
        s.contains('<')
    }

    proptest! {
        #[test]
        fn no_output_carries_markup(s in any::<String>(), max in 1usize..600) {
            for out in [mrkdwn(&s, max), code(&s, max)] {
                prop_assert!(!out.contains("<!"));
                prop_assert!(!raw_angle(&out));
                prop_assert!(!out.contains('\n') && !out.contains('\r'));
                prop_assert!(!out.contains("gatebot:") || !out.contains('<'));
            }
            prop_assert!(cap(&s, max).chars().count() <= max);
        }

        #[test]
        fn hostile_words_in_any_place(pre in ".{0,20}", post in ".{0,20}") {
            let s = format!("{pre}{HOSTILE}\n<!here>{post}");
            for out in [mrkdwn(&s, MESSAGE), code(&s, MESSAGE)] {
                prop_assert!(!out.contains("<!") && !out.contains("<https") && !out.contains("<!--"));
            }
        }
    }
}
