//! Pure parsers for chat commands: pull request comments (`/promote`) and the text of
//! the Slack slash command (`/gatebot promote 42`). No I/O, never panics.
//!
//! Comment rules, chosen so that quoting or documenting a command never triggers it:
//! - A command is `/word` as the first thing on a line of a *top-level* paragraph, with
//!   at most 3 columns of indentation. Block quotes, list items, headings, tables,
//!   fenced and indented code, inline code, HTML blocks and HTML comments never carry
//!   commands; neither does text inside emphasis or links, nor an escaped `\/word`.
//!   Markdown's lazy continuation applies: a line right after a quoted line without a
//!   blank line belongs to the quote, exactly as GitHub renders it.
//! - The word is ASCII letters, digits, `-` and `_`, matched case-insensitively, and
//!   must be followed by whitespace or the end of the line; anything else (`/usr/bin`,
//!   `/api/v1`, `/index.html`, `/x?y=1`, a lone `/`) is not a command at all.
//! - The rest of the line, trimmed, is the reason (`None` when empty). `/hold cancel`
//!   means `/unhold`, with whatever follows `cancel` as the reason.
//! - An unrecognised word is returned as [`Parsed::Unknown`] so the bot can hint `/help`.
//!
//! Over 400 lines on purpose: the comment rules below are one walk over
//! Markdown events, and reading them side by side is what keeps them right.

use std::collections::HashMap;
use std::fmt;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::gate::GateKind;

mod asked;
mod rule;
pub use asked::{freeze_reason, Command, Invalid, MAX_FREEZE_REASON};
pub use rule::Rule;

/// The word of a command (`/promote`): what help lists and the policy's
/// per-command rules are keyed by. [`Command`] is the command with its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Start,
    Promote,
    Traffic,
    Rollback,
    Hold,
    Unhold,
    Status,
    Help,
}

impl Verb {
    /// Every command, in the order `/help` lists them.
    pub const ALL: [Verb; 8] = [
        Verb::Start,
        Verb::Promote,
        Verb::Traffic,
        Verb::Rollback,
        Verb::Hold,
        Verb::Unhold,
        Verb::Status,
        Verb::Help,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Verb::Start => "start",
            Verb::Promote => "promote",
            Verb::Traffic => "traffic",
            Verb::Rollback => "rollback",
            Verb::Hold => "hold",
            Verb::Unhold => "unhold",
            Verb::Status => "status",
            Verb::Help => "help",
        }
    }

    /// The command named by `w` (no leading slash), ignoring ASCII case.
    pub fn parse_word(w: &str) -> Option<Verb> {
        Verb::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(w))
    }

    /// One line for help texts.
    pub fn description(&self) -> &'static str {
        match self {
            Verb::Start => "let the canary analysis start (confirm-rollout)",
            Verb::Promote => "promote the canary (confirm-promotion)",
            Verb::Traffic => "allow the next traffic increase (confirm-traffic-increase)",
            Verb::Rollback => "roll the canary back",
            Verb::Hold => "close this pull request's gates",
            Verb::Unhold => "lift a hold (also `/hold cancel`)",
            Verb::Status => "show the state of the gates",
            Verb::Help => "show this help",
        }
    }

    /// The gate kind it opens, if it opens one.
    pub fn kind_opened(self) -> Option<GateKind> {
        match self {
            Verb::Start => Some(GateKind::Start),
            Verb::Promote => Some(GateKind::Promote),
            Verb::Traffic => Some(GateKind::Traffic),
            Verb::Rollback => Some(GateKind::Rollback),
            Verb::Hold | Verb::Unhold | Verb::Status | Verb::Help => None,
        }
    }

    /// The word that opens a gate of `kind` (a loadtester's gate is promoted,
    /// its rollback gate rolled back).
    pub fn opening(kind: GateKind) -> Verb {
        match kind {
            GateKind::Start => Verb::Start,
            GateKind::Promote | GateKind::LegacyGate => Verb::Promote,
            GateKind::Traffic => Verb::Traffic,
            GateKind::Rollback | GateKind::LegacyRollback => Verb::Rollback,
        }
    }

    /// Whether the Slack form needs a pull request, canary or gate to act on.
    pub fn needs_target(&self) -> bool {
        !matches!(self, Verb::Status | Verb::Help)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A recognised command in a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub command: Verb,
    pub reason: Option<String>,
    /// 1-based line in the body (`\n`, `\r\n` and a lone `\r` each end a line).
    pub line: usize,
}

/// One command-shaped line of a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Command(Invocation),
    /// `/word` that is no command; `word` is as typed, without the slash.
    Unknown {
        word: String,
        line: usize,
    },
    /// `/freeze [for 2h|until <time>] <reason>` or `/unfreeze`: the PR's repository.
    Freeze {
        unfreeze: bool,
        /// The text after the word.
        rest: String,
        line: usize,
    },
}

impl Parsed {
    pub fn line(&self) -> usize {
        match self {
            Parsed::Command(inv) => inv.line,
            Parsed::Unknown { line, .. } | Parsed::Freeze { line, .. } => *line,
        }
    }
}

/// Commands in a comment body, in the order they appear.
pub fn parse_comment(body: &str) -> Vec<Parsed> {
    let lines = LineIndex::new(body);
    let mut out = Vec::new();
    // Open blocks and inline spans; a command may only sit directly in a top-level
    // paragraph, so anything else on the stack disqualifies the text.
    let mut stack: Vec<Tag<'_>> = Vec::new();
    let mut at_line_start = false;
    // A command found on the current line, waiting for the line's end so that a
    // trailing hard-break backslash is not taken into the reason.
    let mut pending: Option<Pending> = None;

    // GitHub renders GFM; tables and footnotes must be parsed as such so that their
    // contents are not mistaken for paragraphs.
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        let top_level_paragraph = matches!(stack.as_slice(), [Tag::Paragraph]);
        let line_start_here = at_line_start;
        at_line_start = false;
        match event {
            Event::Start(tag) => {
                at_line_start = matches!(tag, Tag::Paragraph) && stack.is_empty();
                stack.push(tag);
            }
            Event::End(end) => {
                if matches!(end, TagEnd::Paragraph) {
                    flush(&mut pending, body, usize::MAX, &mut out);
                }
                stack.pop();
            }
            Event::SoftBreak | Event::HardBreak if top_level_paragraph => {
                flush(&mut pending, body, range.start, &mut out);
                at_line_start = true;
            }
            Event::Text(_) if top_level_paragraph && line_start_here => {
                if let Some(p) = candidate(body, &lines, range.start) {
                    pending = Some(p);
                }
            }
            _ => {}
        }
    }
    flush(&mut pending, body, usize::MAX, &mut out);
    out
}

/// Commands in `new` beyond those already in `old`, so that editing a comment acts
/// only on what the edit added. Commands count as a multiset of (command, reason),
/// unknown words by their lowercase spelling; removing lines does nothing.
pub fn new_commands(old: &str, new: &str) -> Vec<Parsed> {
    #[derive(PartialEq, Eq, Hash)]
    enum Key {
        Command(Verb, Option<String>),
        Unknown(String),
        Freeze(bool, String),
    }
    fn key(p: &Parsed) -> Key {
        match p {
            Parsed::Command(inv) => Key::Command(inv.command, inv.reason.clone()),
            Parsed::Unknown { word, .. } => Key::Unknown(word.to_ascii_lowercase()),
            Parsed::Freeze { unfreeze, rest, .. } => Key::Freeze(*unfreeze, rest.clone()),
        }
    }
    let mut seen: HashMap<Key, usize> = HashMap::new();
    for p in parse_comment(old) {
        *seen.entry(key(&p)).or_default() += 1;
    }
    parse_comment(new)
        .into_iter()
        .filter(|p| match seen.get_mut(&key(p)) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect()
}

struct Pending {
    word: String,
    line: usize,
    /// Byte offsets of the text after the word, up to the end of its source line.
    rest: std::ops::Range<usize>,
}

fn flush(pending: &mut Option<Pending>, body: &str, limit: usize, out: &mut Vec<Parsed>) {
    let Some(p) = pending.take() else { return };
    let end = p.rest.end.min(limit).max(p.rest.start);
    let rest = body.get(p.rest.start..end).unwrap_or("").trim();
    out.push(make(&p.word, rest, p.line));
}

fn make(word: &str, rest: &str, line: usize) -> Parsed {
    for (verb, unfreeze) in [("freeze", false), ("unfreeze", true)] {
        if word.eq_ignore_ascii_case(verb) {
            return Parsed::Freeze {
                unfreeze,
                rest: rest.to_string(),
                line,
            };
        }
    }
    let Some(command) = Verb::parse_word(word) else {
        return Parsed::Unknown {
            word: word.to_string(),
            line,
        };
    };
    let mut reason = rest;
    let mut command = command;
    if command == Verb::Hold {
        let first = rest.split(char::is_whitespace).next().unwrap_or("");
        if first.eq_ignore_ascii_case("cancel") {
            command = Verb::Unhold;
            reason = rest[first.len()..].trim_start();
        }
    }
    Parsed::Command(Invocation {
        command,
        reason: (!reason.is_empty()).then(|| reason.to_string()),
        line,
    })
}

/// Checks that a text event starting at `start`, at the start of a paragraph line,
/// begins with `/word` as the first thing on its source line.
fn candidate(body: &str, lines: &LineIndex, start: usize) -> Option<Pending> {
    let line = lines.line_of(start);
    let line_start = lines.start_of(line);
    let line_end = lines.content_end_of(line, body);
    let indent = body.get(line_start..start)?;
    // Anything other than blanks before the text (an escape, an entity) means the
    // line does not start with the slash; a tab or 4+ spaces would be code.
    if !indent.bytes().all(|b| b == b' ') || indent.len() > 3 {
        return None;
    }
    // Some clients prefix the body with a byte order mark.
    let start = if start == 0 && body.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        start
    };
    let text = body.get(start..line_end)?;
    let after_slash = text.strip_prefix('/')?;
    let word_len = after_slash
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(after_slash.len());
    if word_len == 0 {
        return None;
    }
    let word = &after_slash[..word_len];
    let follow = after_slash[word_len..].chars().next();
    if follow.is_some_and(|c| !c.is_whitespace()) {
        return None;
    }
    let rest_start = start + 1 + word_len;
    Some(Pending {
        word: word.to_string(),
        line,
        rest: rest_start..line_end,
    })
}

/// Byte offsets of line starts, with CommonMark's line endings.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(body: &str) -> Self {
        let bytes = body.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' if bytes.get(i + 1) == Some(&b'\n') => {
                    i += 1;
                    starts.push(i + 1);
                }
                b'\r' => starts.push(i + 1),
                _ => {}
            }
            i += 1;
        }
        LineIndex { starts }
    }

    /// 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }

    fn start_of(&self, line: usize) -> usize {
        self.starts.get(line - 1).copied().unwrap_or(0)
    }

    /// End of the line's content, before its line ending.
    fn content_end_of(&self, line: usize, body: &str) -> usize {
        let start = self.start_of(line);
        body[start..]
            .find(['\r', '\n'])
            .map_or(body.len(), |n| start + n)
    }
}

/// Break glass: a reason that starts with `--force` asks to open the gate past
/// freezes, release windows and missing approvals. Returns whether it does,
/// and the reason without the flag. (After an environment's name, as in
/// `production --force`, only the policy knows the place: `core::commands`.)
pub fn split_force(reason: Option<String>) -> (bool, Option<String>) {
    let Some(text) = reason else {
        return (false, None);
    };
    match after_force(text.trim()) {
        Some(rest) => (true, (!rest.is_empty()).then(|| rest.to_string())),
        None => (false, Some(text)),
    }
}

/// The text after a leading `--force` word, trimmed.
pub fn after_force(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("--force")?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// What a Slack command acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `42`, `#42`, `pr/42`, `owner/name#42` or a pull request URL.
    Pr { repo: Option<String>, number: u64 },
    /// `canary/<namespace>/<name>`.
    Canary { namespace: String, name: String },
    /// A gate path such as `/gates/promote/acme/shop/pr/42`, as typed.
    Gate(String),
    /// `ns/<namespace>`: the namespace's gates.
    Namespace(String),
    /// `named/<name>`: gates a pipeline created.
    Named(String),
}

/// A parsed `/gatebot …` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashInvocation {
    pub command: Verb,
    pub target: Option<Target>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlashError {
    UnknownCommand(String),
    MissingTarget(Verb),
    BadTarget(String),
}

impl fmt::Display for SlashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlashError::UnknownCommand(w) => {
                write!(f, "unknown command `{w}`: try `/gatebot help`")
            }
            SlashError::MissingTarget(c) => write!(
                f,
                "`/gatebot {c}` needs a pull request or canary: try `/gatebot {c} 42`, \
                 `/gatebot {c} owner/repo#42`, `/gatebot {c} canary/<namespace>/<name>`, \
                 `/gatebot {c} ns/<namespace>` or `/gatebot {c} named/<name>`"
            ),
            SlashError::BadTarget(t) => write!(
                f,
                "`{t}` is not a pull request, canary or gate: use `42`, `#42`, \
                 `owner/repo#42`, `canary/<namespace>/<name>`, `ns/<namespace>`, \
                 `named/<name>` or `/gates/<kind>/…`"
            ),
        }
    }
}

impl std::error::Error for SlashError {}

/// Parses the text after `/gatebot`: `<command> [target] [reason…]`. Empty text is
/// `help`; `hold cancel` is `unhold`; `status` takes an optional target, `help`
/// none (anything after it is kept as the reason, e.g. a topic).
pub fn parse_slash(text: &str) -> Result<SlashInvocation, SlashError> {
    let (word, rest) = next_token(text);
    if word.is_empty() {
        return Ok(SlashInvocation {
            command: Verb::Help,
            target: None,
            reason: None,
        });
    }
    let bare = word.strip_prefix('/').unwrap_or(word);
    let mut command =
        Verb::parse_word(bare).ok_or_else(|| SlashError::UnknownCommand(word.to_string()))?;
    let mut rest = rest;
    if command == Verb::Hold {
        let (next, after) = next_token(rest);
        if next.eq_ignore_ascii_case("cancel") {
            command = Verb::Unhold;
            rest = after;
        }
    }
    let reason_of = |s: &str| {
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    };
    if command == Verb::Help {
        return Ok(SlashInvocation {
            command,
            target: None,
            reason: reason_of(rest),
        });
    }
    let (token, after) = next_token(rest);
    if token.is_empty() {
        if command.needs_target() {
            return Err(SlashError::MissingTarget(command));
        }
        return Ok(SlashInvocation {
            command,
            target: None,
            reason: None,
        });
    }
    let target = parse_target(token).ok_or_else(|| SlashError::BadTarget(token.to_string()))?;
    Ok(SlashInvocation {
        command,
        target: Some(target),
        reason: reason_of(after),
    })
}

/// `/gatebot freeze [all|owner/repo|ns/<namespace>] [for 2h|until <time>] <reason>`,
/// after the word `freeze` (or `unfreeze`, which takes only the scope).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FreezeLine {
    pub scope: Option<String>,
    pub for_: Option<String>,
    pub until: Option<String>,
    pub reason: Option<String>,
}

/// `freeze …` or `unfreeze …`: the verb and the text after it.
pub fn freeze_verb(text: &str) -> Option<(&'static str, &str)> {
    let (word, rest) = next_token(text);
    match word.trim_start_matches('/').to_ascii_lowercase().as_str() {
        "freeze" => Some(("freeze", rest)),
        "unfreeze" => Some(("unfreeze", rest)),
        _ => None,
    }
}

impl FreezeLine {
    /// The scope (`all` when none is named) and when the freeze ends, or what
    /// is wrong with them.
    pub fn read(
        &self,
        now: crate::gate::Millis,
    ) -> Result<
        (
            crate::gate::freeze::FreezeScope,
            Option<crate::gate::Millis>,
        ),
        String,
    > {
        let scope = self
            .scope
            .as_deref()
            .unwrap_or("all")
            .parse()
            .map_err(|e: crate::gate::KeyError| e.to_string())?;
        let until = crate::gate::freeze::end_of(now, self.for_.as_deref(), self.until.as_deref())?;
        Ok((scope, until))
    }
}

/// Splits the text after `freeze`; the scope and the times are checked where
/// they become a freeze.
pub fn parse_freeze(text: &str) -> FreezeLine {
    let mut line = FreezeLine::default();
    let (first, mut rest) = next_token(text);
    if first == "all" || first.contains('/') {
        line.scope = Some(first.to_string());
    } else {
        rest = text;
    }
    let (word, after) = next_token(rest);
    let (value, after_value) = next_token(after);
    match word {
        "for" if !value.is_empty() => {
            line.for_ = Some(value.to_string());
            rest = after_value;
        }
        "until" if !value.is_empty() => {
            line.until = Some(value.to_string());
            rest = after_value;
        }
        _ => {}
    }
    let reason = rest.trim();
    line.reason = (!reason.is_empty()).then(|| reason.to_string());
    line
}

/// Parses one target token; see [`Target`] for the accepted forms.
pub fn parse_target(token: &str) -> Option<Target> {
    // Slack wraps links as `<url>` or `<url|label>`.
    let token = match token.strip_prefix('<').and_then(|t| t.strip_suffix('>')) {
        Some(inner) => inner.split('|').next().unwrap_or(inner),
        None => token,
    };
    if token.starts_with("/gates/") {
        let ok = token.len() > "/gates/".len() && !token.contains("//");
        return ok.then(|| Target::Gate(token.to_string()));
    }
    if let Some(path) = token.strip_prefix("canary/") {
        let (namespace, name) = path.split_once('/')?;
        let ok = is_dns_label(namespace) && is_dns_subdomain(name);
        return ok.then(|| Target::Canary {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }
    // Checked again, with the reason, when the target becomes a gate key. A
    // `#` makes it a PR of an owner named `ns` or `named`.
    if let Some(ns) = token.strip_prefix("ns/").filter(|_| !token.contains('#')) {
        let ok = !ns.is_empty() && !ns.contains('/');
        return ok.then(|| Target::Namespace(ns.to_string()));
    }
    if let Some(name) = token
        .strip_prefix("named/")
        .filter(|_| !token.contains('#'))
    {
        let ok = !name.is_empty() && !name.contains('/');
        return ok.then(|| Target::Named(name.to_string()));
    }
    // `pr/42`, the form gate paths use. With a `#` it is a PR of an owner named `pr`.
    if let Some(num) = token.strip_prefix("pr/").filter(|_| !token.contains('#')) {
        return Some(Target::Pr {
            repo: None,
            number: parse_number(num)?,
        });
    }
    for prefix in ["https://github.com/", "http://github.com/", "github.com/"] {
        if let Some(path) = token.strip_prefix(prefix) {
            // owner/repo/pull/42, possibly followed by /files, #discussion…
            let mut parts = path.split('/');
            let (owner, repo, pull, num) =
                (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
            let num = num.split(['#', '?']).next().unwrap_or(num);
            if pull != "pull" || !is_owner(owner) || !is_repo(repo) {
                return None;
            }
            return Some(Target::Pr {
                repo: Some(format!("{owner}/{repo}")),
                number: parse_number(num)?,
            });
        }
    }
    match token.split_once('#') {
        Some(("", num)) => Some(Target::Pr {
            repo: None,
            number: parse_number(num)?,
        }),
        Some((repo, num)) => {
            let (owner, name) = repo.split_once('/')?;
            if !is_owner(owner) || !is_repo(name) {
                return None;
            }
            Some(Target::Pr {
                repo: Some(repo.to_string()),
                number: parse_number(num)?,
            })
        }
        None => Some(Target::Pr {
            repo: None,
            number: parse_number(token)?,
        }),
    }
}

/// The first whitespace-separated token and the text after it.
fn next_token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    (&s[..end], &s[end..])
}

fn parse_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|&n| n > 0)
}

fn is_owner(s: &str) -> bool {
    !s.is_empty() && s.len() <= 39 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A repository's name, as gate keys read it.
fn is_repo(s: &str) -> bool {
    crate::gate::key::valid_segment(s)
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cmd(command: Verb, reason: Option<&str>, line: usize) -> Parsed {
        Parsed::Command(Invocation {
            command,
            reason: reason.map(str::to_string),
            line,
        })
    }

    fn unknown(word: &str, line: usize) -> Parsed {
        Parsed::Unknown {
            word: word.to_string(),
            line,
        }
    }

    /// Commands only, as (command, reason) pairs.
    fn commands(body: &str) -> Vec<(Verb, Option<String>)> {
        parse_comment(body)
            .into_iter()
            .filter_map(|p| match p {
                Parsed::Command(inv) => Some((inv.command, inv.reason)),
                Parsed::Unknown { .. } | Parsed::Freeze { .. } => None,
            })
            .collect()
    }

    // --- Command words ---

    #[test]
    fn force_is_a_flag_before_the_reason() {
        let table = [
            (None, (false, None)),
            (Some("--force db is down"), (true, Some("db is down"))),
            (Some("  --force   db is down "), (true, Some("db is down"))),
            (Some("--force"), (true, None)),
            (Some("--forced landing"), (false, Some("--forced landing"))),
            (Some("ship it --force"), (false, Some("ship it --force"))),
            (
                Some("production --force db is down"),
                (false, Some("production --force db is down")),
            ),
        ];
        for (reason, (force, rest)) in table {
            assert_eq!(
                split_force(reason.map(str::to_string)),
                (force, rest.map(str::to_string)),
                "{reason:?}"
            );
        }
    }

    #[test]
    fn parse_word_is_case_insensitive_and_round_trips() {
        for c in Verb::ALL {
            assert_eq!(Verb::parse_word(c.as_str()), Some(c));
            assert_eq!(Verb::parse_word(&c.as_str().to_uppercase()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(Verb::parse_word("PrOmOtE"), Some(Verb::Promote));
        assert_eq!(Verb::parse_word("/promote"), None);
        assert_eq!(Verb::parse_word(""), None);
        assert_eq!(Verb::parse_word("promotex"), None);
    }

    // --- Comments: basics ---

    #[test]
    fn single_command() {
        assert_eq!(parse_comment("/promote"), vec![cmd(Verb::Promote, None, 1)]);
    }

    #[test]
    fn every_command_word() {
        let body = "/start\n/promote\n/traffic\n/rollback\n/hold\n/unhold\n/status\n/help\n";
        let got: Vec<Verb> = commands(body).into_iter().map(|(c, _)| c).collect();
        assert_eq!(got, Verb::ALL.to_vec());
    }

    #[test]
    fn case_insensitive() {
        assert_eq!(
            parse_comment("/PROMOTE\n/Rollback"),
            vec![cmd(Verb::Promote, None, 1), cmd(Verb::Rollback, None, 2)]
        );
    }

    #[test]
    fn reason_is_trimmed_and_kept() {
        assert_eq!(
            parse_comment("/promote   metrics look good  "),
            vec![cmd(Verb::Promote, Some("metrics look good"), 1)]
        );
    }

    #[test]
    fn reason_keeps_markdown_as_typed() {
        assert_eq!(
            commands("/rollback errors in `checkout` *again*"),
            vec![(Verb::Rollback, Some("errors in `checkout` *again*".into()))]
        );
    }

    #[test]
    fn tab_separates_reason() {
        assert_eq!(
            commands("/hold\tfreeze"),
            vec![(Verb::Hold, Some("freeze".into()))]
        );
    }

    #[test]
    fn empty_reason_is_none() {
        assert_eq!(commands("/status \t "), vec![(Verb::Status, None)]);
    }

    #[test]
    fn several_commands_in_order_with_lines() {
        let body = "Looks fine.\n\n/start\n/traffic step one\nthanks\n/promote";
        assert_eq!(
            parse_comment(body),
            vec![
                cmd(Verb::Start, None, 3),
                cmd(Verb::Traffic, Some("step one"), 4),
                cmd(Verb::Promote, None, 6),
            ]
        );
    }

    #[test]
    fn command_after_text_line_in_same_paragraph() {
        // Consecutive lines are one paragraph joined by soft breaks.
        assert_eq!(
            parse_comment("LGTM\n/promote ship it\nbye"),
            vec![cmd(Verb::Promote, Some("ship it"), 2)]
        );
    }

    #[test]
    fn command_not_at_line_start_is_ignored() {
        assert!(parse_comment("please /promote this").is_empty());
        assert!(parse_comment("ok. /promote").is_empty());
    }

    #[test]
    fn crlf_bodies() {
        assert_eq!(
            parse_comment("hello\r\n/promote now\r\n\r\n/hold\r\n"),
            vec![cmd(Verb::Promote, Some("now"), 2), cmd(Verb::Hold, None, 4)]
        );
    }

    #[test]
    fn lone_cr_ends_a_line() {
        assert_eq!(
            parse_comment("a\r/promote x\r/status"),
            vec![cmd(Verb::Promote, Some("x"), 2), cmd(Verb::Status, None, 3)]
        );
    }

    #[test]
    fn crlf_fence_is_still_code() {
        assert!(parse_comment("```\r\n/promote\r\n```\r\n").is_empty());
    }

    #[test]
    fn up_to_three_spaces_of_indent() {
        assert_eq!(commands("   /promote"), vec![(Verb::Promote, None)]);
        assert_eq!(commands("text\n   /promote"), vec![(Verb::Promote, None)]);
    }

    #[test]
    fn four_spaces_on_a_continuation_line_is_not_a_command() {
        // Not code (it continues the paragraph), but not at the start of a line either.
        assert!(parse_comment("text\n    /promote").is_empty());
        assert!(parse_comment("text\n\t/promote").is_empty());
    }

    #[test]
    fn hard_breaks_separate_lines_and_backslash_is_not_reason() {
        assert_eq!(
            parse_comment("/promote ok\\\n/status  \n/help"),
            vec![
                cmd(Verb::Promote, Some("ok"), 1),
                cmd(Verb::Status, None, 2),
                cmd(Verb::Help, None, 3),
            ]
        );
    }

    // --- Hold / unhold ---

    #[test]
    fn hold_cancel_is_unhold() {
        assert_eq!(
            parse_comment("/hold cancel"),
            vec![cmd(Verb::Unhold, None, 1)]
        );
        assert_eq!(
            parse_comment("/HOLD Cancel  QA passed"),
            vec![cmd(Verb::Unhold, Some("QA passed"), 1)]
        );
        assert_eq!(parse_comment("/unhold"), vec![cmd(Verb::Unhold, None, 1)]);
    }

    #[test]
    fn hold_with_other_reason_stays_hold() {
        assert_eq!(
            commands("/hold cancelled deploy window"),
            vec![(Verb::Hold, Some("cancelled deploy window".into()))]
        );
        assert_eq!(
            commands("/hold waiting on QA"),
            vec![(Verb::Hold, Some("waiting on QA".into()))]
        );
    }

    // --- Things that are never commands ---

    #[test]
    fn block_quote_is_ignored() {
        assert!(parse_comment("> /promote").is_empty());
        assert!(parse_comment(">/promote").is_empty());
        assert_eq!(
            commands("> someone said\n> /promote\n\n/rollback"),
            vec![(Verb::Rollback, None)]
        );
    }

    #[test]
    fn nested_block_quote_is_ignored() {
        assert!(parse_comment("> > /promote\n> > /rollback").is_empty());
        assert!(parse_comment("> quote\n>\n> > /promote").is_empty());
    }

    #[test]
    fn lazy_continuation_of_a_quote_is_quoted() {
        // GitHub renders this line inside the quote too.
        assert!(parse_comment("> quoted\n/promote").is_empty());
    }

    #[test]
    fn backtick_fence_is_ignored() {
        assert_eq!(
            commands("```\n/promote\n```\n/status"),
            vec![(Verb::Status, None)]
        );
        assert!(parse_comment("```sh\n/promote\n/rollback\n```").is_empty());
    }

    #[test]
    fn tilde_fence_is_ignored() {
        assert_eq!(
            commands("~~~\n/promote\n~~~\n/hold"),
            vec![(Verb::Hold, None)]
        );
    }

    #[test]
    fn unclosed_fence_swallows_the_rest() {
        assert!(parse_comment("/start\n```\n/promote\n/rollback").len() == 1);
    }

    #[test]
    fn indented_code_is_ignored() {
        assert!(parse_comment("    /promote").is_empty());
        assert!(parse_comment("text\n\n    /promote\n\n\t/rollback").is_empty());
    }

    #[test]
    fn inline_code_is_ignored() {
        assert!(parse_comment("`/promote`").is_empty());
        assert!(parse_comment("``/promote``").is_empty());
        assert!(parse_comment("type `/promote\n/rollback` to ship").is_empty());
    }

    #[test]
    fn html_comment_single_line_is_ignored() {
        assert!(parse_comment("<!-- /promote -->").is_empty());
        assert!(parse_comment("hi <!-- /promote -->").is_empty());
    }

    #[test]
    fn html_comment_multi_line_is_ignored() {
        assert_eq!(
            commands("<!--\n/promote\n/rollback\n-->\n/status"),
            vec![(Verb::Status, None)]
        );
        assert_eq!(
            commands("text <!--\n/promote\n--> after\n/hold"),
            vec![(Verb::Hold, None)]
        );
    }

    #[test]
    fn html_block_is_ignored() {
        assert!(parse_comment("<details>\n/promote\n</details>").is_empty());
    }

    #[test]
    fn list_items_are_ignored() {
        assert!(parse_comment("- /promote").is_empty());
        assert!(parse_comment("* /promote\n* /rollback").is_empty());
        assert!(parse_comment("1. /promote").is_empty());
        assert!(parse_comment("- [ ] /promote").is_empty());
        assert!(parse_comment("- item\n\n  /promote").is_empty());
    }

    #[test]
    fn lazy_continuation_of_a_list_item_is_in_the_list() {
        assert!(parse_comment("- item\n/promote").is_empty());
        assert_eq!(commands("- item\n\n/promote"), vec![(Verb::Promote, None)]);
    }

    #[test]
    fn headings_and_tables_are_ignored() {
        assert!(parse_comment("# /promote").is_empty());
        assert!(parse_comment("/promote\n===").is_empty());
        assert!(parse_comment("| /promote |\n| --- |\n| /rollback |").is_empty());
    }

    #[test]
    fn emphasis_links_and_escapes_are_ignored() {
        assert!(parse_comment("*/promote*").is_empty());
        assert!(parse_comment("**/promote**").is_empty());
        assert!(parse_comment("[/promote](https://example.com)").is_empty());
        assert!(parse_comment("[see\n/promote](https://example.com)").is_empty());
        assert!(parse_comment("\\/promote").is_empty());
        assert!(parse_comment("&#47;promote").is_empty());
    }

    #[test]
    fn paths_and_urls_are_not_commands() {
        assert!(parse_comment("/usr/bin/env").is_empty());
        assert!(parse_comment("/api/v1/gates is slow").is_empty());
        assert!(parse_comment("/promote/now").is_empty());
        assert!(parse_comment("//example.com/x").is_empty());
        assert!(parse_comment("/index.html").is_empty());
        assert!(parse_comment("/search?q=1").is_empty());
        assert!(parse_comment("https://github.com/acme/shop/pull/42").is_empty());
        assert!(parse_comment("<https://example.com/promote>").is_empty());
    }

    #[test]
    fn lone_slash_is_not_a_command() {
        assert!(parse_comment("/").is_empty());
        assert!(parse_comment("/ promote").is_empty());
        assert!(parse_comment("text\n/\nmore").is_empty());
    }

    #[test]
    fn trailing_punctuation_makes_it_no_command() {
        assert!(parse_comment("/promote, please").is_empty());
        assert!(parse_comment("/promote!").is_empty());
    }

    // --- Unknown words ---

    #[test]
    fn unknown_words_are_reported() {
        assert_eq!(
            parse_comment("/frobnicate now"),
            vec![unknown("frobnicate", 1)]
        );
        assert_eq!(
            parse_comment("/Deploy-It\n/promote\n/x_2"),
            vec![
                unknown("Deploy-It", 1),
                cmd(Verb::Promote, None, 2),
                unknown("x_2", 3)
            ]
        );
    }

    #[test]
    fn unknown_words_follow_the_same_markdown_rules() {
        assert!(parse_comment("> /frobnicate\n\n```\n/frobnicate\n```\n- /frob").is_empty());
    }

    #[test]
    fn leading_byte_order_mark_is_skipped() {
        assert_eq!(
            parse_comment("\u{feff}/promote"),
            vec![cmd(Verb::Promote, None, 1)]
        );
    }

    #[test]
    fn empty_and_blank_bodies() {
        assert!(parse_comment("").is_empty());
        assert!(parse_comment("\n\n  \r\n").is_empty());
    }

    #[test]
    fn mixed_document() {
        let body = "\
Thanks for the review!

> /promote
> -- alice

```
/rollback
```

<!-- /hold -->
- /status

/promote canary is healthy
   /HOLD CANCEL
`/start`
/bogus
";
        assert_eq!(
            parse_comment(body),
            vec![
                cmd(Verb::Promote, Some("canary is healthy"), 13),
                cmd(Verb::Unhold, None, 14),
                unknown("bogus", 16),
            ]
        );
    }

    #[test]
    fn unicode_text_around_commands() {
        assert_eq!(
            commands("héllo 🚀\n/promote déployer ✅"),
            vec![(Verb::Promote, Some("déployer ✅".into()))]
        );
        assert!(parse_comment("/promoté").is_empty());
    }

    // --- Edited comments ---

    #[test]
    fn new_commands_from_empty_is_everything() {
        assert_eq!(
            new_commands("", "/promote\n/hold"),
            parse_comment("/promote\n/hold")
        );
    }

    #[test]
    fn new_commands_ignores_unchanged_and_removed() {
        assert!(new_commands("/promote\n/hold", "/promote").is_empty());
        assert!(new_commands("/promote", "typo fixed\n\n/promote").is_empty());
    }

    #[test]
    fn new_commands_counts_duplicates() {
        assert_eq!(
            new_commands("/promote", "/promote\n/promote"),
            vec![cmd(Verb::Promote, None, 2)]
        );
    }

    #[test]
    fn new_commands_compares_reasons() {
        assert_eq!(
            new_commands("/promote typo", "/promote fixed"),
            vec![cmd(Verb::Promote, Some("fixed"), 1)]
        );
        assert_eq!(
            new_commands("/hold cancel", "/unhold\n/status"),
            vec![cmd(Verb::Status, None, 2)]
        );
    }

    #[test]
    fn new_commands_unquoting_counts_as_new() {
        assert_eq!(
            new_commands("> /promote", "/promote"),
            vec![cmd(Verb::Promote, None, 1)]
        );
    }

    #[test]
    fn new_commands_unknown_words_by_spelling() {
        assert!(new_commands("/Frob", "/frob").is_empty());
        assert_eq!(
            new_commands("/frob", "/frob\n/frob"),
            vec![unknown("frob", 2)]
        );
    }

    // --- Slack ---

    fn slash(command: Verb, target: Option<Target>, reason: Option<&str>) -> SlashInvocation {
        SlashInvocation {
            command,
            target,
            reason: reason.map(str::to_string),
        }
    }

    fn pr(repo: Option<&str>, number: u64) -> Option<Target> {
        Some(Target::Pr {
            repo: repo.map(str::to_string),
            number,
        })
    }

    #[test]
    fn slash_empty_is_help() {
        assert_eq!(parse_slash(""), Ok(slash(Verb::Help, None, None)));
        assert_eq!(parse_slash("  \t "), Ok(slash(Verb::Help, None, None)));
        assert_eq!(parse_slash("help"), Ok(slash(Verb::Help, None, None)));
        assert_eq!(
            parse_slash("HELP promote"),
            Ok(slash(Verb::Help, None, Some("promote")))
        );
    }

    #[test]
    fn slash_pr_numbers() {
        assert_eq!(
            parse_slash("promote 42"),
            Ok(slash(Verb::Promote, pr(None, 42), None))
        );
        assert_eq!(
            parse_slash("promote #42"),
            Ok(slash(Verb::Promote, pr(None, 42), None))
        );
        assert_eq!(
            parse_slash("Promote acme/shop#42"),
            Ok(slash(Verb::Promote, pr(Some("acme/shop"), 42), None))
        );
    }

    #[test]
    fn slash_reason_after_target() {
        assert_eq!(
            parse_slash("start 42   latency is fine, go  "),
            Ok(slash(
                Verb::Start,
                pr(None, 42),
                Some("latency is fine, go")
            ))
        );
    }

    #[test]
    fn slash_each_targeted_command() {
        for (text, c) in [
            ("traffic 7", Verb::Traffic),
            ("rollback 7", Verb::Rollback),
            ("hold 7", Verb::Hold),
            ("unhold 7", Verb::Unhold),
            ("hold cancel 7", Verb::Unhold),
            ("HOLD CANCEL 7", Verb::Unhold),
        ] {
            assert_eq!(parse_slash(text), Ok(slash(c, pr(None, 7), None)), "{text}");
        }
    }

    #[test]
    fn slash_status_target_is_optional() {
        assert_eq!(parse_slash("status"), Ok(slash(Verb::Status, None, None)));
        assert_eq!(
            parse_slash("status #3"),
            Ok(slash(Verb::Status, pr(None, 3), None))
        );
        assert_eq!(
            parse_slash("status nonsense"),
            Err(SlashError::BadTarget("nonsense".into()))
        );
    }

    #[test]
    fn slash_missing_target() {
        assert_eq!(
            parse_slash("promote"),
            Err(SlashError::MissingTarget(Verb::Promote))
        );
        assert_eq!(
            parse_slash("hold cancel"),
            Err(SlashError::MissingTarget(Verb::Unhold))
        );
    }

    #[test]
    fn slash_unknown_command() {
        let err = parse_slash("frobnicate 42").unwrap_err();
        assert_eq!(err, SlashError::UnknownCommand("frobnicate".into()));
        assert_eq!(
            err.to_string(),
            "unknown command `frobnicate`: try `/gatebot help`"
        );
    }

    #[test]
    fn slash_tolerates_a_leading_slash_on_the_word() {
        assert_eq!(
            parse_slash("/promote 42"),
            Ok(slash(Verb::Promote, pr(None, 42), None))
        );
    }

    #[test]
    fn slash_pr_path_targets() {
        assert_eq!(
            parse_slash("promote pr/42 ok"),
            Ok(slash(
                Verb::Promote,
                Some(Target::Pr {
                    repo: None,
                    number: 42
                }),
                Some("ok")
            ))
        );
        assert_eq!(parse_target("pr/"), None);
        assert_eq!(parse_target("pr/x"), None);
        assert_eq!(
            parse_target("pr/shop#7"),
            Some(Target::Pr {
                repo: Some("pr/shop".into()),
                number: 7
            })
        );
    }

    #[test]
    fn slash_canary_and_gate_targets() {
        assert_eq!(
            parse_slash("promote canary/prod/podinfo"),
            Ok(slash(
                Verb::Promote,
                Some(Target::Canary {
                    namespace: "prod".into(),
                    name: "podinfo".into()
                }),
                None
            ))
        );
        assert_eq!(
            parse_slash("promote /gates/promote/acme/shop/pr/42 ok"),
            Ok(slash(
                Verb::Promote,
                Some(Target::Gate("/gates/promote/acme/shop/pr/42".into())),
                Some("ok")
            ))
        );
    }

    #[test]
    fn freeze_lines_split_into_scope_time_and_reason() {
        let f = parse_freeze("acme/shop for 2h end of year");
        assert_eq!(f.scope.as_deref(), Some("acme/shop"));
        assert_eq!(f.for_.as_deref(), Some("2h"));
        assert_eq!(f.reason.as_deref(), Some("end of year"));
        let f = parse_freeze("until 2026-12-24T18:00:00Z holidays");
        assert_eq!(f.scope, None);
        assert_eq!(f.until.as_deref(), Some("2026-12-24T18:00:00Z"));
        assert_eq!(f.reason.as_deref(), Some("holidays"));
        let f = parse_freeze("incident 42 in progress");
        assert_eq!(f.scope, None);
        assert_eq!(f.reason.as_deref(), Some("incident 42 in progress"));
        assert_eq!(parse_freeze("ns/prod").reason, None);
    }

    #[test]
    fn slash_namespace_and_named_targets() {
        assert_eq!(
            parse_slash("promote ns/test all at once"),
            Ok(slash(
                Verb::Promote,
                Some(Target::Namespace("test".into())),
                Some("all at once")
            ))
        );
        assert_eq!(
            parse_slash("start named/release-2026-12-01"),
            Ok(slash(
                Verb::Start,
                Some(Target::Named("release-2026-12-01".into())),
                None
            ))
        );
        assert_eq!(parse_target("ns/shop#7"), pr(Some("ns/shop"), 7));
        assert_eq!(parse_target("named/shop#7"), pr(Some("named/shop"), 7));
        for bad in ["promote ns/", "promote named/a/b"] {
            assert!(
                matches!(parse_slash(bad), Err(SlashError::BadTarget(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn slash_github_urls() {
        assert_eq!(
            parse_slash("promote <https://github.com/acme/shop/pull/42|acme/shop#42> go"),
            Ok(slash(Verb::Promote, pr(Some("acme/shop"), 42), Some("go")))
        );
        assert_eq!(
            parse_target("https://github.com/acme/shop.rs/pull/9/files"),
            pr(Some("acme/shop.rs"), 9)
        );
        assert_eq!(parse_target("https://github.com/acme/shop/issues/9"), None);
    }

    #[test]
    fn slash_bad_targets() {
        for bad in [
            "#",
            "#0",
            "0",
            "-1",
            "4x2",
            "acme#1",
            "acme/shop#",
            "a/b/c#1",
            "acme/sh op",
            "canary/prod",
            "canary/Prod/x",
            "canary//x",
            "canary/prod/x/y",
            "/gates/",
            "99999999999999999999999",
            "acme/shop#+1",
        ] {
            assert_eq!(
                parse_slash(&format!("rollback {bad}")),
                Err(SlashError::BadTarget(
                    bad.split_whitespace().next().unwrap().into()
                )),
                "{bad}"
            );
        }
    }

    #[test]
    fn slash_error_messages_say_what_to_type() {
        let m = SlashError::MissingTarget(Verb::Promote).to_string();
        assert!(m.contains("`/gatebot promote 42`"), "{m}");
        let b = SlashError::BadTarget("x".into()).to_string();
        assert!(b.contains("`x`") && b.contains("owner/repo#42"), "{b}");
    }

    // --- Properties ---

    /// Lines as CommonMark counts them: `\n`, `\r\n` and a lone `\r` end a line.
    fn line_count(body: &str) -> usize {
        LineIndex::new(body).starts.len()
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("/promote".to_string()),
            Just("/hold cancel".to_string()),
            Just("/Rollback now please".to_string()),
            Just("/frob".to_string()),
            Just("/usr/bin".to_string()),
            Just("/".to_string()),
            Just("> ".to_string()),
            Just("> > /promote".to_string()),
            Just("```".to_string()),
            Just("~~~".to_string()),
            Just("    ".to_string()),
            Just("\t".to_string()),
            Just("`".to_string()),
            Just("<!--".to_string()),
            Just("-->".to_string()),
            Just("<div>".to_string()),
            Just("- ".to_string()),
            Just("1. ".to_string()),
            Just("# ".to_string()),
            Just("===".to_string()),
            Just("| a |".to_string()),
            Just("*".to_string()),
            Just("[x](".to_string()),
            Just("\\".to_string()),
            Just("  ".to_string()),
            Just("\n".to_string()),
            Just("\r\n".to_string()),
            Just("\r".to_string()),
            "[a-z /]{0,8}",
            any::<String>(),
        ]
    }

    fn document() -> impl Strategy<Value = String> {
        prop::collection::vec(fragment(), 0..40).prop_map(|v| v.concat())
    }

    fn longest_backtick_run(s: &str) -> usize {
        s.split(|c| c != '`').map(str::len).max().unwrap_or(0)
    }

    fn check_lines(body: &str) -> Result<(), TestCaseError> {
        let n = line_count(body);
        for p in parse_comment(body) {
            prop_assert!(
                p.line() >= 1 && p.line() <= n,
                "line {} of {n} in {body:?}",
                p.line()
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_strings_never_panic(body in any::<String>()) {
            check_lines(&body)?;
            let _ = new_commands(&body, &body);
            let _ = parse_slash(&body);
        }

        #[test]
        fn markdown_mixes_have_valid_lines(body in document()) {
            check_lines(&body)?;
        }

        #[test]
        fn fenced_code_yields_nothing(body in document()) {
            let fence = "`".repeat(longest_backtick_run(&body).max(2) + 1);
            let wrapped = format!("{fence}\n{body}\n{fence}\n");
            prop_assert_eq!(parse_comment(&wrapped), vec![]);
        }

        #[test]
        fn block_quoted_yields_nothing(body in document()) {
            let quoted: String = LineIndex::new(&body)
                .starts
                .iter()
                .map(|&s| {
                    let end = body[s..].find(['\r', '\n']).map_or(body.len(), |n| s + n);
                    format!("> {}\n", &body[s..end])
                })
                .collect();
            prop_assert_eq!(parse_comment(&quoted), vec![]);
        }

        #[test]
        fn editing_nothing_adds_nothing(body in document()) {
            prop_assert_eq!(new_commands(&body, &body), vec![]);
            prop_assert_eq!(new_commands("", &body), parse_comment(&body));
        }

        #[test]
        fn command_lines_are_found_between_paragraphs(
            words in prop::collection::vec(
                (prop::sample::select(Verb::ALL.to_vec()), "[a-z]{0,6}"), 1..8),
            upper in any::<bool>(),
        ) {
            let body: String = words
                .iter()
                .map(|(c, r)| {
                    let w = if upper { c.as_str().to_uppercase() } else { c.as_str().to_string() };
                    format!("some text\n/{w} {r}\n\n")
                })
                .collect();
            let got = commands(&body);
            let want: Vec<(Verb, Option<String>)> = words
                .iter()
                .map(|(c, r)| (*c, (!r.is_empty()).then(|| r.clone())))
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn slash_targets_round_trip(n in 1u64.., owner in "[a-z0-9]{1,10}", repo in "[a-z0-9._-]{1,10}") {
            prop_assume!(repo != "." && repo != "..");
            prop_assert_eq!(parse_target(&n.to_string()), pr(None, n));
            prop_assert_eq!(parse_target(&format!("#{n}")), pr(None, n));
            let full = format!("{owner}/{repo}");
            prop_assert_eq!(parse_target(&format!("{full}#{n}")), pr(Some(&full), n));
        }
    }
}
