//! A command with its data, as every intake makes it: PR comments, Slack's
//! slash command and buttons, the web pages' buttons, the API and the CLI,
//! the loadtester's routes and the freeze API. What it means at its gates,
//! who may, and what comes of it are `core::dispatch`'s to say, once.

use std::fmt;

use super::{split_force, Verb};
use crate::gate::freeze::FreezeScope;
use crate::gate::named::NamedSpec;
use crate::gate::{GateKind, Millis, Phase};

/// A freeze's reason: one line of at most this many characters.
pub const MAX_FREEZE_REASON: usize = 300;

/// What a person asks of gatebot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Open the gate of `kind` (Approve, `/promote`; a rollback gate's open is
    /// the rollback). `force` breaks glass: past freezes, release windows and
    /// missing approvals.
    Open {
        kind: GateKind,
        reason: Option<String>,
        force: bool,
    },
    /// A button's Reject at a waiting gate, in Flagger's `phase` when the
    /// intake knows it. Whether it rolls back or keeps the gate closed is the
    /// core's to say.
    Reject {
        phase: Option<Phase>,
        reason: Option<String>,
    },
    /// Close a gate (the API, the CLI, the loadtester's routes).
    Close {
        reason: Option<String>,
    },
    Hold {
        reason: Option<String>,
    },
    Unhold {
        reason: Option<String>,
    },
    /// Freeze changes in `scope`, until `until` or until lifted.
    Freeze {
        scope: FreezeScope,
        until: Option<Millis>,
        reason: String,
    },
    Unfreeze {
        scope: FreezeScope,
    },
    /// Create a gate by name, announced at once (a pipeline's).
    Create {
        spec: NamedSpec,
        reason: Option<String>,
    },
    /// Retire a gate created by name: held, its waits ended.
    Retire {
        reason: Option<String>,
    },
    Status,
    Help,
}

/// Why a command is refused whoever sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// `--force` on a command that opens no start, promote or traffic gate.
    ForceOpensNothing(Verb),
    /// `--force` without a reason.
    ForceWithoutReason(Verb),
    /// A freeze's reason is empty, too long, or more than one line.
    FreezeReason,
    /// Reject is a button at one gate.
    RejectWithoutGate,
    /// With environments: the command names none, and more than one (or
    /// none) of them waits. `waiting` lists those that wait, `all` every one.
    Which {
        verb: String,
        waiting: Vec<String>,
        all: Vec<String>,
    },
    /// `--env` names no environment or cluster of the policy.
    UnknownPlace { place: String, all: Vec<String> },
    /// The policy's `[[reasons]]` want one, and the command gives none.
    ReasonRequired { verb: String, place: Option<String> },
    /// A reason longer than [`crate::gate::reason::MAX_REASON`] characters.
    ReasonTooLong,
    /// The policy's `[change]` wants an approved change named, and the
    /// command names none.
    ChangeRequired {
        verb: String,
        place: Option<String>,
        example: String,
    },
    /// The change named lets nothing open now, or its system can't be read.
    ChangeNotReady(String),
    /// What a [`Self::ReasonRequired`] or [`Self::ChangeRequired`] asks for,
    /// to one who clicked a button that carries no words.
    Unspoken(Box<Invalid>),
}

impl Invalid {
    /// A missing reason or change, as told to one who clicked a button: it
    /// is to be said in a comment (other refusals stay as they are).
    pub fn unspoken(self) -> Self {
        match self {
            Self::ReasonRequired { .. } | Self::ChangeRequired { .. } => {
                Self::Unspoken(Box::new(self))
            }
            other => other,
        }
    }

    /// A missing reason or change: what the policy asks, and how to say it.
    fn write_asked(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (button, asked) = match self {
            Self::Unspoken(asked) => (true, asked.as_ref()),
            other => (false, other),
        };
        let Some((asks, what, example)) = asked.asked() else {
            return write!(f, "{asked}");
        };
        if button {
            write!(
                f,
                "{asks}, and a button carries no words: comment `/{example}` on the pull request"
            )
        } else {
            write!(f, "{asks}: {what}, as in `{example}`")
        }
    }

    /// What the policy asks for, what to do, and an example command.
    fn asked(&self) -> Option<(String, &'static str, String)> {
        let at = |place: &Option<String>| match place {
            Some(p) => (format!(" in {p}"), format!("{p} ")),
            None => (String::new(), String::new()),
        };
        match self {
            Self::ReasonRequired { verb, place } => {
                let (in_place, place) = at(place);
                Some((
                    format!("the policy asks for a reason to {verb}{in_place}"),
                    "say why",
                    format!("{verb} {place}because <why>"),
                ))
            }
            Self::ChangeRequired {
                verb,
                place,
                example,
            } => {
                let (in_place, place) = at(place);
                Some((
                    format!("the policy ties {verb}{in_place} to an approved change"),
                    "name it",
                    format!("{verb} {place}{example} because <why>"),
                ))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ForceOpensNothing(verb) => write!(
                f,
                "`--force` opens a start, promote or traffic gate, not `{verb}`"
            ),
            Self::ForceWithoutReason(verb) => {
                write!(f, "break glass needs a reason: `{verb} --force <reason>`")
            }
            Self::FreezeReason => write!(
                f,
                "a freeze needs a reason: one line of at most {MAX_FREEZE_REASON} characters"
            ),
            Self::RejectWithoutGate => f.write_str("Reject is given at one gate"),
            Self::Which { verb, waiting, all } if waiting.is_empty() => write!(
                f,
                "which one? No environment waits: name it, `/{verb} <environment>` ({})",
                all.join(", ")
            ),
            Self::Which { verb, waiting, .. } => {
                let or = format!("` or `/{verb} ");
                write!(
                    f,
                    "which one? {} are waiting: name it, `/{verb} {}`",
                    waiting.join(" and "),
                    waiting.join(&or)
                )
            }
            Self::UnknownPlace { place, all } if all.is_empty() => write!(
                f,
                "`{}` is no environment: the policy has no [[environments]]",
                crate::gate::key::printable(place)
            ),
            Self::UnknownPlace { place, all } => write!(
                f,
                "`{}` is no environment or cluster of the policy ({})",
                crate::gate::key::printable(place),
                all.join(", ")
            ),
            Self::ReasonRequired { .. } | Self::ChangeRequired { .. } | Self::Unspoken(_) => {
                self.write_asked(f)
            }
            Self::ReasonTooLong => write!(
                f,
                "a reason is at most {} characters",
                crate::gate::reason::MAX_REASON
            ),
            Self::ChangeNotReady(why) => {
                write!(f, "{why}: nothing opened; the canary goes on waiting")
            }
        }
    }
}

impl std::error::Error for Invalid {}

impl Command {
    /// The command a word and the text after it ask for: `--force` at the
    /// start of the text breaks glass (it means nothing to `hold`, `unhold`,
    /// `status` and `help`, where it is part of the reason).
    pub fn from_verb(verb: Verb, text: Option<String>) -> Self {
        let Some(kind) = verb.kind_opened() else {
            return match verb {
                Verb::Hold => Self::Hold { reason: text },
                Verb::Unhold => Self::Unhold { reason: text },
                Verb::Status => Self::Status,
                _ => Self::Help,
            };
        };
        let (force, reason) = split_force(text);
        Self::Open {
            kind,
            reason,
            force,
        }
    }

    /// Its name in `gatebot_commands_total` and in the audit log's refusals.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Open { kind, .. } => Verb::opening(*kind).as_str(),
            Self::Reject { .. } => "reject",
            Self::Close { .. } => "close",
            Self::Hold { .. } => "hold",
            Self::Unhold { .. } => "unhold",
            Self::Freeze { .. } => "freeze",
            Self::Unfreeze { .. } => "unfreeze",
            Self::Create { .. } => "create",
            Self::Retire { .. } => "retire",
            Self::Status => "status",
            Self::Help => "help",
        }
    }

    /// What the person said why, as they said it.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Open { reason, .. }
            | Self::Reject { reason, .. }
            | Self::Close { reason }
            | Self::Hold { reason }
            | Self::Unhold { reason }
            | Self::Create { reason, .. }
            | Self::Retire { reason } => reason.as_deref(),
            Self::Freeze { reason, .. } => Some(reason),
            Self::Unfreeze { .. } | Self::Status | Self::Help => None,
        }
    }

    /// Whether it breaks glass.
    pub fn forced(&self) -> bool {
        matches!(self, Self::Open { force: true, .. })
    }
}

/// A freeze's reason as every intake must give it: one line, not empty, at
/// most [`MAX_FREEZE_REASON`] characters.
pub fn freeze_reason(reason: &str) -> Result<&str, Invalid> {
    let reason = reason.trim();
    let fits = !reason.is_empty()
        && reason.chars().count() <= MAX_FREEZE_REASON
        && !reason.chars().any(char::is_control);
    fits.then_some(reason).ok_or(Invalid::FreezeReason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_is_read_only_where_it_opens() {
        let forced = Command::from_verb(Verb::Promote, Some("--force prod down".into()));
        assert_eq!(
            forced,
            Command::Open {
                kind: GateKind::Promote,
                reason: Some("prod down".into()),
                force: true
            }
        );
        assert_eq!(forced.name(), "promote");
        let hold = Command::from_verb(Verb::Hold, Some("--force x".into()));
        assert_eq!(hold.reason(), Some("--force x"));
        assert!(!hold.forced());
    }

    #[test]
    fn a_freeze_reason_is_one_short_line() {
        assert_eq!(freeze_reason("  incident 12 "), Ok("incident 12"));
        assert!(freeze_reason("").is_err());
        assert!(freeze_reason(&"x".repeat(3000)).is_err());
        assert!(freeze_reason("a\nb").is_err());
    }

    #[test]
    fn a_button_is_told_to_say_in_a_comment_what_it_cannot() {
        let reason = Invalid::ReasonRequired {
            verb: "promote".into(),
            place: Some("production".into()),
        };
        assert_eq!(
            reason.to_string(),
            "the policy asks for a reason to promote in production: say why, as in `promote production because <why>`"
        );
        assert_eq!(
            reason.unspoken().to_string(),
            "the policy asks for a reason to promote in production, and a button carries no words: comment `/promote production because <why>` on the pull request"
        );
        let change = Invalid::ChangeRequired {
            verb: "promote".into(),
            place: None,
            example: "CHG0031337".into(),
        };
        assert_eq!(
            change.unspoken().to_string(),
            "the policy ties promote to an approved change, and a button carries no words: comment `/promote CHG0031337 because <why>` on the pull request"
        );
        // Anything else is as it was.
        assert_eq!(Invalid::ReasonTooLong.unspoken(), Invalid::ReasonTooLong);
    }
}
