//! What a PR comment's lines come to before its transaction opens
//! ([`Step`]), and the reply that says what came of them ([`Reply`]).

use super::sink::GithubJob;
use crate::command::{Command, Invalid};
use crate::core::commands::Applied;
use crate::core::dispatch::{Authorized, Outcome, Request};
use crate::core::intake::Asked;
use crate::gate::state::rfc3339;

/// One line of a reply.
pub(super) struct Line {
    pub(super) command: Option<String>,
    pub(super) message: String,
}

/// What came of one comment.
#[derive(Default)]
pub(super) struct Reply {
    pub(super) lines: Vec<Line>,
    pub(super) applied: bool,
    pub(super) refused: bool,
    pub(super) extra: Vec<(GithubJob, &'static str)>,
}

/// One line of a comment, decided before the transaction opens: what the
/// core runs or counts of it, and what is left to show once it has.
pub(super) struct Step {
    pub(super) asked: Asked<String>,
    pub(super) shown: Shown,
}

/// What is left to show of a line once the core has it.
pub(super) enum Shown {
    Unknown(String),
    /// `/help` or `/status`: a comment to post.
    Answer {
        job: GithubJob,
        purpose: &'static str,
    },
    /// A line that says no command gatebot can run (a freeze of another
    /// scope, a time it cannot read).
    Unreadable {
        word: &'static str,
        why: String,
    },
    Command(Command),
}

impl Step {
    fn counted(command: &str, result: &'static str, shown: Shown) -> Self {
        let command = command.to_string();
        Self {
            asked: Asked::Counted { command, result },
            shown,
        }
    }

    pub(super) fn unknown(word: String) -> Self {
        Self::counted("unknown", "unknown", Shown::Unknown(word))
    }

    pub(super) fn answer(job: GithubJob, purpose: &'static str) -> Self {
        Self::counted(purpose, "answered", Shown::Answer { job, purpose })
    }

    pub(super) fn unreadable(word: &'static str, why: String) -> Self {
        Self::counted(word, "refused", Shown::Unreadable { word, why })
    }

    pub(super) fn command(request: Request, authorized: Authorized<String>) -> Self {
        let shown = Shown::Command(request.command.clone());
        let request = Box::new(request);
        Self {
            asked: Asked::Command {
                request,
                authorized,
            },
            shown,
        }
    }
}

impl Reply {
    /// Adds what came of one line: `outcome` is the core's for a command.
    pub(super) fn show(&mut self, shown: Shown, outcome: Option<Outcome<String>>) {
        match (shown, outcome) {
            (Shown::Unknown(word), _) => {
                self.refused = true;
                self.lines.push(Line {
                    command: Some(format!("/{word}")),
                    message: "is not a gatebot command: comment `/help` for the list".into(),
                });
            }
            (Shown::Answer { job, purpose }, _) => self.extra.push((job, purpose)),
            (Shown::Unreadable { word, why }, _) => self.refused(word, why),
            (Shown::Command(command), Some(outcome)) => self.render(&command, outcome),
            (Shown::Command(command), None) => {
                self.refused(command.name(), "not decided: comment again".into())
            }
        }
    }

    pub(super) fn render(&mut self, command: &Command, outcome: Outcome<String>) {
        let why = match outcome {
            Outcome::Applied(applied) => {
                self.applied = true;
                // Counted, not opened: say how many more the gate needs.
                if let Some(message) = said(command, &applied) {
                    self.line(command.name(), message);
                }
                return;
            }
            Outcome::Denied(why) => why,
            Outcome::Invalid(invalid) => invalid_text(&invalid),
            Outcome::Held { gate, by, via } => {
                format!("{gate} is held by {by} via {via}: comment `/unhold` first")
            }
            Outcome::WrittenBeforeClose { closed_at, .. } => format!(
                "written before the gate closed at {}: comment again",
                rfc3339(closed_at)
            ),
            Outcome::Named(why) => why.to_string(),
        };
        self.refused(command.name(), why);
    }

    pub(super) fn refused(&mut self, word: &str, why: String) {
        self.refused = true;
        self.line(word, format!("not done: {why}"));
    }

    fn line(&mut self, word: &str, message: String) {
        self.lines.push(Line {
            command: Some(format!("/{word}")),
            message,
        });
    }
}

/// What an applied command's line says, if it says anything: a freeze made
/// or lifted, an approval that only counted.
fn said(command: &Command, applied: &Applied) -> Option<String> {
    if let Some(f) = &applied.froze {
        return Some(format!("changes are {}", f.reason_line()));
    }
    if let Command::Unfreeze { scope } = command {
        return Some(match applied.lifted.len() {
            0 => format!("nothing was frozen in {scope}"),
            n => format!("lifted {n} freeze(s) of {scope}"),
        });
    }
    applied.counted_only().then(|| applied.summary())
}

/// A comment's words for what no one may send.
fn invalid_text(invalid: &Invalid) -> String {
    match invalid {
        Invalid::ForceWithoutReason(verb) => {
            format!("break glass needs a reason: `/{verb} --force <reason>`")
        }
        Invalid::FreezeReason => format!(
            "a freeze needs a reason: `/freeze [for 2h|until <time>] <reason>`, one line of at most {} characters",
            crate::command::MAX_FREEZE_REASON
        ),
        other => other.to_string(),
    }
}
