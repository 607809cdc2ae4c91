//! Why the core did not do what it was asked. Each channel says it in its
//! own terms at its edge: the outbox's retry or give-up, an HTTP status, a
//! page's problem. The core knows none of those.

use std::time::Duration;

use super::named::NamedError;
use crate::command::Invalid;
use crate::gate::{GateKey, Millis, Source};
use crate::store::StoreError;

/// "… is held by …": the words for a hold in the way, here and where a
/// refusal is worded from data (`intake::Refusal`).
pub fn held(gate: &dyn std::fmt::Display, by: &str, via: &dyn std::fmt::Display) -> String {
    format!("{gate} is held by {by} via {via}: lift the hold first")
}

/// "… closed at …, after this was sent": a command older than the gate's last close.
pub fn written_before_close(gate: &dyn std::fmt::Display, closed_at: Millis) -> String {
    format!(
        "{gate} closed at {}, after this was sent: send it again if it still holds",
        crate::gate::state::rfc3339(closed_at)
    )
}

/// A command (or a check, or a timer) that was not done.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{}", held(gate, by, via))]
    Held {
        gate: GateKey,
        by: String,
        via: Source,
    },
    /// The command predates the gate's last close, so it was about an earlier
    /// revision (or a state someone has since ended).
    #[error("{}", written_before_close(gate, *closed_at))]
    WrittenBeforeClose { gate: GateKey, closed_at: Millis },
    /// The channel's authorizer said no.
    #[error("{0}")]
    Denied(String),
    /// No one may send it so.
    #[error("{0}")]
    Invalid(Invalid),
    /// A question asked outside gatebot (GitHub's permissions, a PR's
    /// author, Slack's user groups) got no answer.
    #[error("{message}")]
    Unanswered {
        message: String,
        /// When the other side said to ask again (Retry-After).
        after: Option<Duration>,
        /// Asking again cannot help.
        lasting: bool,
    },
    /// A named gate that cannot be created or retired so.
    #[error(transparent)]
    Named(#[from] NamedError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// A command not done, in the queues' terms: given up when trying again
/// cannot help, tried again (when the other side said, at that time)
/// otherwise; the store's passing failures as such.
impl From<CommandError> for crate::notify::SendError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::Store(e) => e.into(),
            e => Self::of(e.lasting(), e.retry_after(), e.to_string()),
        }
    }
}

impl CommandError {
    /// No answer now; asking again may bring one (at `after`, when known).
    pub fn unanswered(message: impl Into<String>, after: Option<Duration>) -> Self {
        Self::Unanswered {
            message: message.into(),
            after,
            lasting: false,
        }
    }

    /// No answer, and asking again cannot bring one.
    pub fn unanswerable(message: impl Into<String>) -> Self {
        Self::Unanswered {
            message: message.into(),
            after: None,
            lasting: true,
        }
    }

    /// Whether sending the same command again cannot help (a refusal, an
    /// invalid command, a lasting failure outside); a store failure or a
    /// question without an answer now may pass later.
    pub fn lasting(&self) -> bool {
        match self {
            Self::Unanswered { lasting, .. } => *lasting,
            Self::Store(_) => false,
            Self::Held { .. } | Self::WrittenBeforeClose { .. } => true,
            Self::Denied(_) | Self::Invalid(_) | Self::Named(_) => true,
        }
    }

    /// When the other side said to ask again, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Unanswered { after, .. } => *after,
            _ => None,
        }
    }
}
