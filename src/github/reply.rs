//! A reply's words for what the core told of a comment's lines, rendered
//! when the reply is sent.

use serde_json::json;

use super::MARKER;
use crate::core::intake::{AppliedNote, Refusal, Told};
use crate::gate::state::rfc3339;
use crate::notify::SendError;
use crate::templates::Templates;

/// One line of a reply.
pub(super) struct Line {
    pub(super) command: Option<String>,
    pub(super) message: String,
}

/// A reply's lines for what was told: none for a command done that has
/// nothing to add to its 🚀.
pub(super) fn lines(told: &[Told]) -> Vec<Line> {
    told.iter().filter_map(line).collect()
}

fn line(told: &Told) -> Option<Line> {
    let (command, message) = match told {
        Told::Applied { note: None, .. } => return None,
        Told::Applied {
            command,
            note: Some(note),
            ..
        } => (command.as_str(), note_text(note)),
        Told::Refused { command, why } => (command.as_str(), refused(why)),
        Told::Unknown { word } => (
            word.as_str(),
            "is not a gatebot command: comment `/help` for the list".to_string(),
        ),
        Told::Unreadable { word, why } => (word.as_str(), format!("not done: {why}")),
        Told::Late { note } => {
            return Some(Line {
                command: None,
                message: note.clone(),
            })
        }
        Told::Withdrawn { by, left } => {
            let message = match left {
                Some(left) => format!(
                    "your review was dismissed by {by}, so your approval no longer counts: {left}"
                ),
                None => format!(
                    "your review was dismissed by {by}, but your approval had already opened the gate: comment `/hold` to keep it closed"
                ),
            };
            return Some(Line {
                command: None,
                message,
            });
        }
        Told::Skipped { lines, most } => {
            return Some(Line {
                command: None,
                message: format!(
                    "{lines} more command line(s) not run: a comment runs at most {most}"
                ),
            })
        }
    };
    Some(Line {
        command: Some(format!("/{command}")),
        message,
    })
}

/// What an applied command's line says: a freeze made or lifted, an
/// approval that only counted.
fn note_text(note: &AppliedNote) -> String {
    match note {
        AppliedNote::Froze { reason_line } => format!("changes are {reason_line}"),
        AppliedNote::Lifted { count: 0, scope } => format!("nothing was frozen in {scope}"),
        AppliedNote::Lifted { count, scope } => format!("lifted {count} freeze(s) of {scope}"),
        AppliedNote::Counted { summary } => summary.clone(),
    }
}

/// A comment's words for a refusal.
fn refused(why: &Refusal) -> String {
    let why = match why {
        Refusal::Denied { why } | Refusal::Invalid { why } | Refusal::Named { why } => why.clone(),
        Refusal::ForceWithoutReason { verb, .. } => {
            format!("break glass needs a reason: `/{verb} --force <reason>`")
        }
        Refusal::FreezeReason => format!(
            "a freeze needs a reason: `/freeze [for 2h|until <time>] <reason>`, one line of at most {} characters",
            crate::command::MAX_FREEZE_REASON
        ),
        Refusal::Held { gate, by, via } => {
            format!("{gate} is held by {by} via {via}: comment `/unhold` first")
        }
        Refusal::WrittenBeforeClose { closed_at, .. } => format!(
            "written before the gate closed at {}: comment again",
            rfc3339(*closed_at)
        ),
    };
    format!("not done: {why}")
}

/// The reply to `author` that says `lines`.
pub(super) fn render(
    templates: &Templates,
    author: &str,
    lines: Vec<Line>,
) -> Result<String, SendError> {
    let lines: Vec<_> = lines
        .into_iter()
        .map(|l| json!({"command": l.command, "message": l.message}))
        .collect();
    templates
        .render(
            "github/reply.md.j2",
            json!({"marker": MARKER, "author": author, "lines": lines}),
        )
        .map_err(|e| SendError::Permanent(format!("{e:#}")))
}
